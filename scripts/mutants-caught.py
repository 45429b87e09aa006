#!/usr/bin/env python3
"""Usage: scripts/mutants-caught.py [--names] RESULTS [FLAVOUR]

What failed in a run-tests.sh output, in one line for the `make mutants`
table: suites with failed cases, failed host checks, then the kinds of
run-level failure (kernel reports, a run cut short, missing suites). A
run stopped at its first failed test (make mutants' default) gives the
suites that failed and "stopped there". A guest that never powered off
(a drain that hangs) is named by the suite that was running, from the
console log beside RESULTS.

With --names: every name that failed, one per line, for make mutants to
match against a mutant's "# Caught-by:" pattern: the suites and cases
(KUnit's and the shell suites', from the console's "not ok" lines), each
failed KUnit assertion as "expected: CONDITION", the host checks, and the
line's run-level labels."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence

KINDS = [
    ("kernel report", "kernel report"),
    ("the run did not reach its end", "run cut short"),
    ("did not report", "suites missing"),
    ("expected at least", "suites short"),
    ("insmod", "insmod failed"),
]


def caught(results: str, flavour: str = "mutant") -> str:
    """The line for RESULTS, a run-tests.sh output."""
    with open(results, errors="replace") as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        m = re.match(r"^  ([a-z_]+): \d+ passed, [1-9]\d* failed", line)
        if m and m.group(1) != "host_checks":
            out.append(m.group(1))
    # A boot stopped at its first failed test (boot.sh's STOP_AT_FAILURE):
    # the host checks and the missing suites that follow are its doing.
    console = os.path.join(os.path.dirname(results), f"console-{flavour}.log")
    if os.path.exists(console):
        with open(console, errors="replace") as f:
            if any(l.startswith("boot: stopped at the first failed test") for l in f):
                return ", ".join(dict.fromkeys(out + ["stopped there"]))
    for line in lines:
        m = re.match(r"^FAIL: host check (\S+)", line)
        if m:
            out.append(m.group(1))
    for needle, label in KINDS:
        if any(l.startswith("FAIL:") and needle in l for l in lines):
            out.append(label)
    if any("did not power off" in l for l in lines):
        running = "?"
        with open(console, errors="replace") as f:
            for line in f:
                line = line.rstrip("\r\n")
                m = re.search(r"# Subtest: (\S+)|rust-drain: suite (\S+) starts", line)
                if m:
                    running = m.group(1) or m.group(2)
                # A suite that failed before the hang: results.py, which
                # would name it, does not run after a boot timeout.
                m = re.match(r"^(?:\[\s*[\d.]+\]\s*)?not ok \d+ (\S+)$", line)
                if m:
                    out.append(m.group(1))
        out.append(f"hung in {running} (boot timeout)")
    return ", ".join(dict.fromkeys(out)) or "the run failed (see its results)"


def failed_names(results: str, flavour: str = "mutant") -> list[str]:
    """Every suite and case that failed, the conditions of the KUnit
    assertions that failed ("expected: CONDITION"), the host checks that failed
    (unless the boot stopped at its first failure), then the parts of
    caught()'s line (a boot timeout's "hung in SUITE (boot timeout)")."""
    out = []
    console = os.path.join(os.path.dirname(results), f"console-{flavour}.log")
    if os.path.exists(console):
        with open(console, errors="replace") as f:
            for line in f:
                m = re.match(r"^(?:\[\s*[\d.]+\]\s*)?\s*not ok \d+ (\S+)", line)
                if m:
                    out.append(m.group(1))
                # A KUnit assertion that failed, by its condition: one case
                # may check several behaviours, each with a mutant.
                m = re.search(r"Expected (.+) to be true, but is false", line)
                if m:
                    out.append(f"expected: {m.group(1)}")
    line = caught(results, flavour)
    # As in caught(): after a stop, the host checks fail for the stop.
    if not line.endswith("stopped there"):
        with open(results, errors="replace") as f:
            for l in f:
                m = re.match(r"^FAIL: host check (\S+)", l)
                if m:
                    out.append(m.group(1))
    out += line.split(", ")
    return list(dict.fromkeys(out))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", action="store_true",
                        help="print every failed name, one per line")
    parser.add_argument("results", metavar="RESULTS",
                        help="run-tests.sh's output for the mutant (console-FLAVOUR.log beside it)")
    parser.add_argument("flavour", metavar="FLAVOUR", nargs="?", default="mutant",
                        help="the kernel it booted: mutant (the default) or mutant-debug")
    args = parser.parse_args(argv)
    if args.names:
        print("\n".join(failed_names(args.results, args.flavour)))
    else:
        print(caught(args.results, args.flavour))


if __name__ == "__main__":
    main()
