#!/usr/bin/env python3
"""Unit tests for scripts/bench-profile.py --steps (make bench-steps' report), on
console logs made up here in ftrace's format with the TSC clock
(scripts/guest/profile.sh, rust_drain_profile=steps).

    python3 -m unittest discover -s scripts -p 'bench_steps_test.py'
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import tempfile
import unittest

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_profile", os.path.join(SCRIPTS, "bench-profile.py"))
assert _spec is not None and _spec.loader is not None
profile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(profile)

KHZ = 1_000_000  # 1 GHz: one TSC tick per ns
CMDLINE = f"[    0.000000] Command line: tsc_early_khz={KHZ} rust_drain_profile=steps"


def ev(us: float, name: str, pid: int = 100, cpu: int = 0, comm: str = "insmod") -> str:
    """A trace line at `us` microseconds."""
    return f"          {comm}-{pid}     [00{cpu}] .....  {int(us * 1000)}: {name}: (x+0x4/0x20)"


def drain(t: float, arm: str, timer_us: float) -> list[str]:
    """One drain from `t`: the C or the Rust one, whose wait returns
    `timer_us` later after the switch-in (a timer to cancel)."""
    entry, ret = ("drain", "drain_ret") if arm == "rust" else ("cdrain", "cdrain_ret")
    wait = "twait" if arm == "rust" else "wait"
    return [
        ev(t, entry), ev(t + 2, "rmodify"), ev(t + 20, "rmodify_ret"), ev(t + 23, "post"),
        # The flush lands on the other CPU before the task waits.
        ev(t + 24, "cqpost", pid=50, cpu=1, comm="kworker/1:1"),
        ev(t + 25, "post_ret"), ev(t + 27, wait),
        ev(t + 60, "cq_poll", pid=0, cpu=1, comm="<idle>"),
        ev(t + 90, "sched_wakeup", pid=0, cpu=0, comm="<idle>"),
        ev(t + 97, "sched_switch", pid=0, cpu=0, comm="<idle>"),
        ev(t + 100 + timer_us, wait + "_ret"), ev(t + 103 + timer_us, ret),
    ]


def log(cells: list[tuple[str, int]]) -> list[str]:
    lines = [CMDLINE, "rust-drain: profile: untraced run"]
    for ctx, n in cells:
        for arm, ns in (("rust", 90_000), ("c", 80_000), ("c2", 81_000), ("rust2", 89_000), ("floor", 20_000)):
            lines.append(f"[   30.1] rdma_drain_bench: sample,{ctx},{n},{arm},0,{ns},0")
    lines += ["rust-drain: profile: kprobe_profile begin",
              "  drain                 1               0",
              "rust-drain: profile: kprobe_profile end"]
    lines += ["rust-drain: profile: traced run", "rust-drain: profile: trace begin"]
    lines += drain(1000, "rust", 1.5) + drain(2000, "c", 0) + drain(3000, "c", 0)
    lines += ["rust-drain: profile: trace end"]
    return lines


def run(lines: list[str]) -> tuple[int, str]:
    """Runs the report on `lines`; its exit status and steps.md (or its error)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "console.log")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                profile.main(["--steps", path, d, "Host: test."])
        except SystemExit as e:
            return 1, str(e.code)
        with open(os.path.join(d, "steps.md"), encoding="utf-8") as f:
            return 0, f.read()


class StepsTest(unittest.TestCase):
    def row(self, md: str, step: str) -> list[str]:
        line = next(l for l in md.splitlines() if l.startswith(f"| {step} |"))
        return [c.strip() for c in line.strip("|").split("|")]

    def test_steps_and_medians(self) -> None:
        rc, md = run(log([("Softirq", 0)]))
        self.assertEqual(rc, 0, md)
        self.assertIn("Softirq N=0", md)
        self.assertEqual(self.row(md, "untraced median (us)")[1:], ["90.00", "80.00", "81.00", "89.00", "20.00"])
        # The timer's cancellation shows in its step, and only there.
        self.assertEqual(self.row(md, "switch_in -> wait_ret")[1:4], ["4.50", "3.00", "+1.50"])
        self.assertEqual(self.row(md, "post_ret -> wait")[3], "+0.00")
        # A flush before the wait is still found: negative, not missing.
        self.assertEqual(self.row(md, "wait -> cqpost")[1:], ["-3.00", "-3.00", "+0.00", "1 / 2"])
        self.assertEqual(self.row(md, "cq_poll -> wakeup")[1], "30.00")
        self.assertEqual(self.row(md, "total")[1:], ["104.50", "103.00", "+1.50", "1 / 2"])

    def test_refuses_other_cells(self) -> None:
        for cells in ([("Direct", 0)], [("Softirq", 64)], [("Softirq", 0), ("Workqueue", 0)]):
            rc, err = run(log(cells))
            self.assertEqual(rc, 1, cells)
            self.assertIn("wants one non-direct cell at N=0", err)

    def test_needs_the_tsc_rate(self) -> None:
        rc, err = run(log([("Softirq", 0)])[1:])
        self.assertEqual(rc, 1)
        self.assertIn("tsc_early_khz", err)

    def test_refuses_a_trace_with_missed_probes(self) -> None:
        lines = [l.replace("drain                 1               0", "drain                 1               2")
                 for l in log([("Softirq", 0)])]
        rc, err = run(lines)
        self.assertEqual(rc, 1)
        self.assertIn("missed hits", err)


if __name__ == "__main__":
    unittest.main()
