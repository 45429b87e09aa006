#!/usr/bin/env python3
"""Usage: scripts/results.py KERNEL-SRC CONSOLE-LOG [CHECK=RC...] [expect=FILE] [noend]

Turn a test VM's console log into results: every KTAP stream in it (built-in
KUnit at boot, each module's suites when it loads, the guest's shell checks)
is parsed by the tree's own tools/testing/kunit/kunit.py; kernel reports
(WARNING, BUG, Oops, panic, KASAN, lockdep, hung task) and a missing end of
run count as failures of their own. Prints per-suite counts, then per
category the cases tried and the kernel reports seen while its suites ran,
then the line 'N passed, N failed'. Exit status 1 on any failure.

expect=FILE: the suites that must report (scripts/expected/*.suites): each
with at least its number of cases and of runs, or the run fails, naming
it. A module the guest could not insmod fails it too. noend: the log has
no end mark (kunit.py's own guest).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

PREFIX = re.compile(r"^\[\s*\d+\.\d+\]\s?")
REPORTS = re.compile(
    r"WARNING:|BUG:|KASAN:|Oops|Kernel panic|possible circular locking|"
    r"possible recursive locking|inconsistent lock state|blocked for more than|"
    r"UBSAN:|kmemleak:.*new suspected|general protection fault|"
    # kernel::infiniband's word that a destroy was refused and it leaked.
    r"ib_(destroy_qp|destroy_srq|dealloc_pd)_user\(\) failed"
)
# Reports a suite provokes on purpose; the guest or the host checks them.
# With a second pattern, only a report whose call trace (up to its
# "</TASK>") matches it too.
EXPECTED_REPORTS: dict[str, re.Pattern[str] | tuple[re.Pattern[str], re.Pattern[str]]] = {
    "rdma_drain_hung_task": re.compile(r"blocked for more than"),
    "rdma_drain_might_sleep": re.compile(r"BUG: sleeping function called from invalid context"),
    # With siw's Last WQE Reached kept from ib_core, the SRQ drain waits
    # its 60 s in the case's thread; insmod waits for that thread.
    "rdma_drain_siw_srq_bound": (re.compile(r"blocked for more than"),
                           re.compile(r"\bib_drain_qp(_c)?\+|\bkunit_try_catch_run\+")),
    "rdma_drain_failed_destroy": re.compile(r"ib_destroy_qp_user\(\) failed"),
    # The one WARN of a refusal site refused three times (the guest counts it).
    "rdma_drain_warn_once": re.compile(r"WARNING: \S*drain\.rs:\d+ at "),
    # The same line, if the console prints it after the guest's next marker.
    "rdma_drain_failed_destroy_kept": re.compile(r"ib_destroy_qp_user\(\) failed"),
}
END_MARK = "rust-drain: tests done"
INSMOD_FAILED = re.compile(r"rust-drain: insmod \S+ failed")
SUITE_START = re.compile(r"^    # Subtest: (\S+)$|^rust-drain: suite (\S+) starts$")
SUITE_END = re.compile(r"^(?:not )?ok \d+ (\S+)")
CATEGORIES = [
    ("unit, fake provider", ["rdma_drain_unit", "rdma_drain_unit_srq"]),
    ("fault injection", ["rdma_drain_unit_faults", "rdma_drain_unit_c_reference", "rdma_drain_warn_once",
                         "rdma_drain_might_sleep", "rdma_drain_rxe_faults",
                         "rdma_drain_hung_task", "rdma_drain_hung_task_report"]),
    ("rxe", ["rdma_rxe_setup", "rdma_drain_rxe", "rdma_drain_teardown"]),
    ("siw", ["rdma_drain_siw", "rdma_drain_siw_srq", "rdma_drain_siw_srq_bound", "nvme_rdma_siw",
             "nvme_rdma_siw_srq", "nfs_rdma_siw"]),
    ("soundness", ["rdma_drain_rxe_soundness", "rdma_drain_leaks", "rdma_drain_leaks_kept",
                   "rdma_drain_failed_destroy", "rdma_drain_failed_destroy_kept",
                   "rdma_drain_forgotten_unloaded", "rdma_drain_forgotten_posted"]),
    ("API examples (doctests)", ["rdma_drain_doctests"]),
    ("stress", ["rdma_drain_stress"]),
    ("churn", ["nvme_rdma_rxe", "rxe_removal_race", "rdma_ib_core_reload",
               "rdma_device_hold"]),
    ("in-tree ULPs", ["nfs_rdma_rxe", "nfs_rdma_server_restart", "nfs_rdma_rxe_removal",
                      "srp_rxe", "rnbd_rxe", "iser_rxe"]),
    ("two hosts", ["twohost_initiator", "twohost_target_killed", "twohost_link_cut",
                   "twohost_delete_unreachable", "twohost_target"]),
    ("benchmark smoke", ["rdma_drain_bench_smoke"]),
    ("first user of the API", ["rdma_pingpong"]),
    ("upstream fixes", ["rdma_cq_free_race", "rdma_rxe_late_err"]),
    ("host checks", ["host_checks"]),
]


# Per suite: [passed, failed, skipped] cases.
Counts = list[int]


def expected_report(suite: str | None, lines: list[str], i: int) -> bool:
    """Whether line I is a report that SUITE provokes on purpose
    (EXPECTED_REPORTS), its call trace included where it names one."""
    want = EXPECTED_REPORTS.get(suite or "")
    if want is None:
        return False
    line_re, trace_re = want if isinstance(want, tuple) else (want, None)
    if not line_re.search(lines[i]):
        return False
    if trace_re is None:
        return True
    for line in lines[i + 1:i + 80]:
        if trace_re.search(line):
            return True
        if "</TASK>" in line:
            break
    return False


def streams(lines: Iterable[str]) -> list[list[str]]:
    """Split the log at each top-level 'KTAP version' header. A module's
    header and plan followed by 'kunit: disabled' (kunit.enable=0, as make
    test-2host boots) ran nothing: it is dropped, not counted as failed."""
    out: list[list[str]] = []
    cur: list[str] | None = None
    for line in lines:
        body = PREFIX.sub("", line)
        if body.startswith("KTAP version") or body.startswith("TAP version"):
            cur = []
            out.append(cur)
        if cur is not None:
            cur.append(body)
    return [s for s in out if not (len(s) >= 3 and s[2].startswith("kunit: disabled"))]


def suite_of_lines(lines: Iterable[str]) -> list[str | None]:
    """The suite that was running at each line of the log, or None."""
    owner: list[str | None] = []
    cur: str | None = None
    for line in lines:
        body = PREFIX.sub("", line)
        m = SUITE_START.match(body)
        if m:
            cur = m.group(1) or m.group(2)
        owner.append(cur)
        m = SUITE_END.match(body)
        if m and m.group(1) == cur:
            cur = None
    return owner


def category(suite: str | None) -> str:
    for name, members in CATEGORIES:
        if suite in members:
            return name
    if suite and suite.startswith("rust_"):
        return "kernel's own Rust tests"
    return "other" if suite else "outside any suite"


def count(node: dict[str, Any], suite_counts: dict[str, Counts], path: str) -> None:
    name = node.get("name") or ""
    subs = node.get("sub_groups") or []
    cases = node.get("test_cases") or []
    p = f"{path}.{name}" if path and name else (name or path)
    if not subs and not cases:
        return
    for c in cases:
        if c.get("sub_groups") or c.get("test_cases"):
            count(c, suite_counts, p)
            continue
        st = c.get("status")
        sc = suite_counts.setdefault(p, [0, 0, 0])
        if st == "PASS":
            sc[0] += 1
        elif st == "SKIP":
            sc[2] += 1
        else:
            sc[1] += 1
    for s in subs:
        count(s, suite_counts, p)


@dataclass
class Options:
    """The command line: the words after CONSOLE-LOG, sorted out."""
    src: str
    log: str
    host_checks: list[tuple[str, str]] = field(default_factory=list)  # (name, rc)
    manifest: list[tuple[str, int, int]] = field(default_factory=list)  # (suite, cases, runs)
    need_end: bool = True


def read_manifest(path: str) -> list[tuple[str, int, int]]:
    """scripts/expected/*.suites: 'suite cases runs' a line, '#' comments."""
    manifest = []
    with open(path) as f:
        for line in f:
            w = line.split("#")[0].split()
            if w:
                manifest.append((w[0], int(w[1]), int(w[2])))
    return manifest


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", metavar="KERNEL-SRC",
                        help="the kernel tree whose tools/testing/kunit/kunit.py parses the KTAP")
    parser.add_argument("log", metavar="CONSOLE-LOG", help="the guest's console log")
    parser.add_argument("words", nargs="*", metavar="CHECK=RC | expect=FILE | noend",
                        help="CHECK=RC: a host-side check and its exit code (0 passed); "
                        "expect=FILE: the suites that must report (scripts/expected/*.suites); "
                        "noend: the log has no end mark (kunit.py's own guest); "
                        "any other word is ignored")
    args = parser.parse_args(argv)
    opts = Options(args.src, args.log, need_end="noend" not in args.words)
    for a in args.words:
        if a.startswith("expect="):
            opts.manifest += read_manifest(a.partition("=")[2])
        elif "=" in a:
            name, _, rc = a.partition("=")
            opts.host_checks.append((name, rc))
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    src, log, manifest, need_end = opts.src, opts.log, opts.manifest, opts.need_end
    with open(log, errors="replace") as fh:
        lines = fh.read().splitlines()
    suites: dict[str, Counts] = {}
    runs: dict[str, int] = {}  # suite name: how many KTAP streams ran it
    failed_extra: list[str] = []
    for i, st in enumerate(streams(lines)):
        with tempfile.NamedTemporaryFile("w", suffix=".log") as tf, \
                tempfile.NamedTemporaryFile("r", suffix=".json") as jf:
            tf.write("\n".join(st) + "\n")
            tf.flush()
            r = subprocess.run(
                [sys.executable, f"{src}/tools/testing/kunit/kunit.py", "parse",
                 f"--json={jf.name}", tf.name],
                capture_output=True, text=True)
            try:
                data = json.load(jf)
            except ValueError:
                failed_extra.append(f"KTAP stream {i}: kunit.py parse failed: "
                                    f"{(r.stdout + r.stderr).strip()[-300:]}")
                continue
        for group in data.get("sub_groups") or []:
            count(group, suites, "")
            runs[group.get("name")] = runs.get(group.get("name"), 0) + 1
        for case in data.get("test_cases") or []:
            st = case.get("status")
            sc = suites.setdefault(case.get("name", "?"), [0, 0, 0])
            sc[0 if st == "PASS" else 2 if st == "SKIP" else 1] += 1

    owner = suite_of_lines(lines)
    reports: dict[str, int] = {}  # category: kernel reports seen while it ran
    last = -100
    for i, line in enumerate(lines):
        if expected_report(owner[i], lines, i):
            continue
        if REPORTS.search(line) and i - last > 30:
            last = i
            cat = category(owner[i])
            reports[cat] = reports.get(cat, 0) + 1
            ctx = "\n".join("    " + l for l in lines[max(0, i - 5):i + 15])
            failed_extra.append(f"kernel report in the log, line {i + 1}:\n{ctx}")
    for i, line in enumerate(lines):
        if INSMOD_FAILED.search(line):
            failed_extra.append(f"line {i + 1}: {PREFIX.sub('', line).strip()}")
    if need_end and not any(END_MARK in l for l in lines):
        tail = "\n".join("    " + l for l in lines[-20:])
        failed_extra.append(f"the run did not reach its end ('{END_MARK}'):\n{tail}")

    for name, rc in opts.host_checks:
        suites.setdefault("host_checks", [0, 0, 0])[0 if rc == "0" else 1] += 1
        if rc != "0":
            print(f"FAIL: host check {name} (exit {rc})")

    passed = failed = 0
    for name in sorted(suites):
        p, f, s = suites[name]
        print(f"  {name}: {p} passed, {f} failed" + (f", {s} skipped (counted as failed)" if s else ""))
        passed += p
        failed += f + s
    if not suites:
        failed_extra.append("no KTAP results in the log")
    for name, cases, n in manifest:
        p, f, sk = suites.get(name, [0, 0, 0])
        if name not in suites:
            failed_extra.append(f"suite {name} did not report (expected {cases} cases)")
        elif p + f + sk < cases:
            failed_extra.append(f"suite {name} reported {p + f + sk} cases, expected at least {cases}")
        elif runs.get(name, 0) < n:
            failed_extra.append(f"suite {name} ran {runs.get(name, 0)} times, expected {n}")
    cats: dict[str, list[int]] = {}  # category: [cases tried, passed]
    for name, (p, f, sk) in suites.items():
        c = cats.setdefault(category(name), [0, 0])
        c[0] += p + f + sk
        c[1] += p
    print("  by category (cases tried, passed; kernel reports seen while it ran):")
    for cat in sorted(set(cats) | set(reports)):
        tried, ok = cats.get(cat, [0, 0])
        print(f"    {cat}: {tried} cases, {ok} passed; {reports.get(cat, 0)} reports")
    for e in failed_extra:
        print(f"FAIL: {e}")
    failed += len(failed_extra)
    kernels = sum(suites[n][0] for n in suites if category(n) == "kernel's own Rust tests")
    print(f"  of the passed: {passed - kernels} the project's own, {kernels} the kernel's own Rust tests")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
