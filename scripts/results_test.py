#!/usr/bin/env python3
"""Unit tests for scripts/results.py, on the small console logs saved in
scripts/testdata/results/ (their suites: expect.suites there).

    python3 -m unittest discover -s scripts -p '*_test.py'

scripts/lint.sh runs them. results.py parses KTAP with the kernel tree's
own tools/testing/kunit/kunit.py: KERNEL_SRC names that tree (default:
the build cache's, where scripts/fetch-kernel.sh puts it); without it
every test is skipped. Each test runs results.py as the scripts do and
checks what they see: the exit status, the 'N passed, N failed' line, and
the FAIL line that names the failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Sequence
from dataclasses import dataclass

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(SCRIPTS, "results.py")
TESTDATA = os.path.join(SCRIPTS, "testdata", "results")
EXPECT = os.path.join(TESTDATA, "expect.suites")
END_FAIL = "FAIL: the run did not reach its end ('rust-drain: tests done'):"

kernel_src = ""
test_tmpdir = ""


def default_kernel_src() -> str:
    """scripts/lib.sh's $CACHE/src."""
    cache = os.environ.get("RDMA_RUST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "rdma-rust-drain")
    return os.path.join(cache, "src")


def setUpModule() -> None:
    global kernel_src, test_tmpdir
    kernel_src = os.environ.get("KERNEL_SRC") or default_kernel_src()
    if not os.path.isfile(os.path.join(kernel_src, "tools/testing/kunit/kunit.py")):
        raise unittest.SkipTest(f"no kernel tree with tools/testing/kunit/kunit.py at {kernel_src} "
                                "(KERNEL_SRC; scripts/fetch-kernel.sh)")
    test_tmpdir = tempfile.mkdtemp()


def tearDownModule() -> None:
    if test_tmpdir:
        shutil.rmtree(test_tmpdir)


def _test_data_path(name: str) -> str:
    return os.path.join(TESTDATA, name)


def _tmp_file(name: str, text: str) -> str:
    path = os.path.join(test_tmpdir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


@dataclass
class Run:
    rc: int
    lines: list[str]

    @property
    def summary(self) -> str:
        """The last line: 'N passed, N failed'."""
        return self.lines[-1] if self.lines else ""

    @property
    def fails(self) -> list[str]:
        return [line for line in self.lines if line.startswith("FAIL:")]


def results(log: str, *words: str, expect: str | None = EXPECT) -> Run:
    """results.py on LOG (a file in testdata, or a path) with WORDS, and
    expect=EXPECT as run-tests.sh passes its manifest."""
    argv: Sequence[str] = [sys.executable, RESULTS, kernel_src,
                           log if os.path.isabs(log) else _test_data_path(log), *words]
    if expect:
        argv = [*argv, f"expect={expect}"]
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode not in (0, 1):  # a crash or a usage error, not a verdict
        raise AssertionError(f"results.py exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return Run(r.returncode, r.stdout.splitlines())


# The first line of each kind of report that fails a run, as the kernel
# prints them (the lockdep and KASAN ones also match 'WARNING:' and 'BUG:');
# the last three are kernel::infiniband's, for a destroy refused and leaked.
REPORTS = [
    "WARNING: CPU: 1 PID: 97 at drivers/infiniband/core/drain.rs:140 ib_drain_rq+0x9c/0x1b0",
    "BUG: KASAN: slab-use-after-free in rxe_cq_post+0x3a1/0x3f0 [rdma_rxe]",
    "BUG: kernel NULL pointer dereference, address: 0000000000000008",
    "Oops: Oops: 0002 [#1] SMP KASAN NOPTI",
    "general protection fault, probably for non-canonical address 0xdffffc0000000003: 0000 [#1] SMP KASAN",
    "Kernel panic - not syncing: Fatal exception",
    "WARNING: possible circular locking dependency detected",
    "WARNING: possible recursive locking detected",
    "WARNING: inconsistent lock state",
    "INFO: task kworker/0:0:8 blocked for more than 20 seconds.",
    "UBSAN: array-index-out-of-bounds in drivers/infiniband/sw/rxe/rxe_cq.c:91:6",
    "kmemleak: 2 new suspected memory leaks (see /sys/kernel/debug/kmemleak)",
    # Provoked on purpose by rdma_drain_might_sleep, a failure anywhere else.
    "BUG: sleeping function called from invalid context at drivers/infiniband/core/drain.rs:75",
    "ib_core: rxe0: QP 0x28: ib_destroy_qp_user() failed: -16; its memory is leaked",
    "ib_destroy_srq_user() failed: -16; its memory is leaked",
    "ib_core: rxe0: ib_dealloc_pd_user() failed: -16; it is leaked",
]


def _pass_log_with(after: str, block: list[str]) -> str:
    """pass.log with BLOCK inserted after the first line containing AFTER."""
    with open(_test_data_path("pass.log")) as f:
        lines = f.read().splitlines()
    i = next(n for n, line in enumerate(lines) if after in line) + 1
    return "\n".join(lines[:i] + block + lines[i:]) + "\n"


class ResultsTest(unittest.TestCase):

    def assertPassedFailed(self, run: Run, passed: int, failed: int) -> None:
        self.assertEqual(run.summary, f"{passed} passed, {failed} failed", "\n".join(run.lines))
        self.assertEqual(run.rc, 1 if failed else 0, "\n".join(run.lines))

    def test_passing_run(self) -> None:
        run = results("pass.log", "check_symbols=0", "all_vcpus_up=0")
        self.assertPassedFailed(run, 13, 0)
        self.assertEqual(run.fails, [])
        self.assertIn("  rdma_drain_rxe_faults: 3 passed, 0 failed", run.lines)
        self.assertIn("  rdma_rxe_setup: 5 passed, 0 failed", run.lines)
        self.assertIn("  host_checks: 2 passed, 0 failed", run.lines)
        self.assertIn("    fault injection: 3 cases, 3 passed; 0 reports", run.lines)

    def test_missing_suite(self) -> None:
        # The built-in stream ran rdma_drain_spin and _unit_srq, not _abi.
        run = results("missing-suite.log")
        self.assertPassedFailed(run, 10, 1)
        self.assertEqual(run.fails, ["FAIL: suite rdma_drain_abi did not report (expected 1 cases)"])

    def test_suite_short_of_cases(self) -> None:
        expect = _tmp_file("cases.suites", "rdma_drain_rxe_faults 4 1\n")
        run = results("pass.log", expect=expect)
        self.assertPassedFailed(run, 11, 1)
        self.assertEqual(run.fails, ["FAIL: suite rdma_drain_rxe_faults reported 3 cases, expected at least 4"])

    def test_suite_short_of_runs(self) -> None:
        expect = _tmp_file("runs.suites", "# suite cases runs\nrdma_drain_rxe_faults 3 2  # reloaded\n")
        run = results("pass.log", expect=expect)
        self.assertPassedFailed(run, 11, 1)
        self.assertEqual(run.fails, ["FAIL: suite rdma_drain_rxe_faults ran 1 times, expected 2"])

    def test_kernel_report(self) -> None:
        # A KASAN report while rdma_drain_rxe_faults ran, all its cases passed.
        run = results("kernel-report.log")
        self.assertPassedFailed(run, 11, 1)
        self.assertEqual(run.fails, ["FAIL: kernel report in the log, line 64:"])
        context = run.lines[run.lines.index(run.fails[0]) + 1:]
        self.assertIn("    [   32.588102] BUG: KASAN: slab-use-after-free in rxe_cq_post+0x3a1/0x3f0 [rdma_rxe]",
                      context)
        self.assertIn("    fault injection: 3 cases, 3 passed; 1 reports", run.lines)

    def test_each_kind_of_kernel_report(self) -> None:
        # Each kind once, after the passing run, far enough apart (over 30
        # lines) to count as reports of their own.
        with open(_test_data_path("pass.log")) as f:
            lines = f.read().splitlines()
        want = []
        for report in REPORTS:
            lines += ["[  300.400000] dummy0 speed is unknown, defaulting to 1000"] * 31
            lines.append(f"[  300.500000] {report}")
            want.append(f"FAIL: kernel report in the log, line {len(lines)}:")
        run = results(_tmp_file("reports.log", "\n".join(lines) + "\n"))
        self.assertEqual(run.fails, want)
        self.assertPassedFailed(run, 11, len(REPORTS))
        self.assertIn(f"    outside any suite: 0 cases, 0 passed; {len(REPORTS)} reports", run.lines)

    def test_report_of_several_lines_counts_once(self) -> None:
        # The hung-task detector names each blocked task: one report.
        hung = [
            "[  109.053494] INFO: task swapper/0:1 blocked for more than 20 seconds.",
            "[  109.054212]       Tainted: G                 N  7.3.4 #6",
            '[  109.054536] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
            "[  109.054792] task:swapper/0       state:D stack:0     pid:1     tgid:1     ppid:0",
            "[  109.056460] Call Trace:",
            "[  109.056942]  <TASK>",
            "[  109.057530]  __schedule+0xb36/0xde0",
            "[  109.059422]  wait_for_completion_timeout+0x145/0x1d0",
            "[  109.063531]  </TASK>",
            "[  109.063881] INFO: task kworker/0:0:8 blocked for more than 20 seconds.",
            "[  109.064006]       Tainted: G                 N  7.3.4 #6",
        ]
        run = results(_tmp_file("hung.log", _pass_log_with("ok 2 full_receive_queue", hung)))
        self.assertPassedFailed(run, 11, 1)
        self.assertEqual(run.fails, ["FAIL: kernel report in the log, line 63:"])
        self.assertIn("    fault injection: 3 cases, 3 passed; 1 reports", run.lines)

    def test_expected_report_in_its_suite(self) -> None:
        # rdma_drain_might_sleep makes might_sleep() report on purpose; the
        # same line elsewhere is a failure (test_each_kind_of_kernel_report).
        run = results("expected-report.log")
        self.assertPassedFailed(run, 12, 0)
        self.assertIn("  rdma_drain_might_sleep: 1 passed, 0 failed", run.lines)
        self.assertIn("    fault injection: 4 cases, 4 passed; 0 reports", run.lines)

    def test_expected_report_needs_its_trace(self) -> None:
        # rdma_drain_siw_srq_bound may make the hung-task detector report its
        # drain, not another wait.
        def hung(fn: str) -> list[str]:
            return [
                "KTAP version 1",
                "1..1",
                "    KTAP version 1",
                "    # Subtest: rdma_drain_siw_srq_bound",
                "    1..1",
                "[   83.140198] INFO: task kunit_try_catch:1046 blocked for more than 20 seconds.",
                "[   83.140247] Call Trace:",
                "[   83.140258]  <TASK>",
                "[   83.140331]  wait_for_common+0xd8/0x160",
                f"[   83.140349]  {fn}+0xa9/0xf0 [ib_core]",
                "[   83.140360]  </TASK>",
                "    ok 1 without_last_wqe_reached_the_drain_returns_after_60_s",
                "ok 1 rdma_drain_siw_srq_bound",
            ]
        run = results(_tmp_file("srq.log", _pass_log_with("ok 1 rdma_drain_rxe_faults", hung("ib_drain_qp_c"))))
        self.assertPassedFailed(run, 12, 0)
        run = results(_tmp_file("other.log", _pass_log_with("ok 1 rdma_drain_rxe_faults", hung("rxe_destroy_qp"))))
        self.assertPassedFailed(run, 12, 1)
        self.assertIn("    siw: 1 cases, 1 passed; 1 reports", run.lines)

    def test_failed_case(self) -> None:
        run = results("failed-case.log")
        self.assertPassedFailed(run, 10, 1)
        self.assertIn("  rdma_drain_rxe_faults: 2 passed, 1 failed", run.lines)
        self.assertEqual(run.fails, [])

    def test_truncated_run(self) -> None:
        # The guest died in rdma_drain_rxe_faults' third case, mid-line.
        run = results("truncated.log")
        self.assertPassedFailed(run, 10, 2)
        self.assertEqual(run.fails, [END_FAIL])
        # The end of the log is shown.
        self.assertEqual(run.lines[run.lines.index(END_FAIL) + 20],
                         "    [   32.608664]     # full_send_queue_is_refused_and_the_drai")
        # kunit.py counts the case that never ended as failed.
        self.assertIn("  rdma_drain_rxe_faults: 2 passed, 1 failed", run.lines)

    def test_truncated_run_noend(self) -> None:
        # noend (kunit.py's own guest prints no end mark): the cut case only.
        run = results("truncated.log", "noend")
        self.assertPassedFailed(run, 10, 1)
        self.assertEqual(run.fails, [])

    def test_insmod_failed(self) -> None:
        run = results("insmod-failed.log")
        self.assertPassedFailed(run, 11, 1)
        self.assertEqual(run.fails, ["FAIL: line 72: rust-drain: insmod rdma_drain_leak.ko failed"])

    def test_host_check_failed(self) -> None:
        run = results("pass.log", "check_symbols=0", "all_vcpus_up=1")
        self.assertPassedFailed(run, 12, 1)
        self.assertIn("FAIL: host check all_vcpus_up (exit 1)", run.fails)
        self.assertIn("  host_checks: 1 passed, 1 failed", run.lines)

    def test_no_ktap(self) -> None:
        log = _tmp_file("empty.log", "[    0.000000] Linux version 7.3.4\nrust-drain: tests done\n")
        run = results(log, expect=None)
        self.assertPassedFailed(run, 0, 1)
        self.assertEqual(run.fails, ["FAIL: no KTAP results in the log"])

    def test_command_line(self) -> None:
        r = subprocess.run([sys.executable, RESULTS, "--help"], capture_output=True, text=True, check=False)
        self.assertEqual(r.returncode, 0)
        self.assertIn("KERNEL-SRC CONSOLE-LOG", " ".join(r.stdout.split()))
        r = subprocess.run([sys.executable, RESULTS, kernel_src], capture_output=True, text=True, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("CONSOLE-LOG", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
