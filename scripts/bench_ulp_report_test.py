#!/usr/bin/env python3
"""Unit tests for scripts/bench-ulp-report.py (make bench-ulp's report), on
console logs made up here in the guest's format (bench_ulp in
scripts/guest/rdma.sh).

    python3 -m unittest discover -s scripts -p 'bench_ulp_report_test.py'
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import os
import random
import statistics
import sys
import tempfile
import unittest
from collections.abc import Sequence

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_ulp_report", os.path.join(SCRIPTS, "bench-ulp-report.py"))
assert _spec is not None and _spec.loader is not None
report = importlib.util.module_from_spec(_spec)
sys.modules["bench_ulp_report"] = report  # for its dataclasses
_spec.loader.exec_module(report)

START = "rust-drain: bench-ulp: start,rounds=1,cycles=2,ulps=srp,nfs,date=2026-12-05T10:00:00Z"
END_OK = "rust-drain: bench-ulp: end,ok"


def marker(ts: str, kind: str, variant: str, arm: str, rnd: int, pos: int, cyc: int, ns: int, calls: int) -> str:
    """A marker line as the guest prints it."""
    return (f"rust-drain: bench-ulp:               sh-1234    [001] .....  {ts}: tracing_mark_write: "
            f"bench-ulp {kind} {variant} {arm} {rnd} {pos} {cyc} {ns} {calls}")


def cycles_log(variant: str, walls_us: dict[str, Sequence[int]], drain_ns: dict[str, int]) -> list[str]:
    """Marker lines for one round: each arm's cycles of walls_us[arm] µs,
    each with two drains of drain_ns[arm] ns in all."""
    lines = []
    t_us, ns, calls = 100_000_000, 5_000, 3
    for pos, arm in enumerate(walls_us):
        for i, w in enumerate(walls_us[arm]):
            lines.append(marker(f"{t_us // 1_000_000}.{t_us % 1_000_000:06d}", "start", variant, arm, 0, pos, i,
                                ns, calls))
            t_us, ns, calls = t_us + w, ns + drain_ns[arm], calls + 2
            lines.append(marker(f"{t_us // 1_000_000}.{t_us % 1_000_000:06d}", "end", variant, arm, 0, pos, i,
                                ns, calls))
            t_us += 50
    return lines


class ParseTest(unittest.TestCase):
    def test_phases_split_a_cycle(self) -> None:
        pre = "rust-drain: bench-ulp:               sh-1234    [001] .....  "
        lines = [START,
                 marker("10.000000", "start", "srp", "rust", 0, 0, 0, 1_000_000, 4),
                 pre + "10.300000: tracing_mark_write: bench-ulp phase srp rust 0 0 0 login 1000000 4",
                 pre + "10.500000: tracing_mark_write: bench-ulp phase srp rust 0 0 0 logout 3000000 6",
                 marker("10.700000", "end", "srp", "rust", 0, 0, 0, 3_500_000, 6), END_OK]
        run = report.parse(lines)
        self.assertEqual(len(run.cycles), 1)
        self.assertEqual(run.lost, 0)
        self.assertEqual(run.cycles[0].phases,
                         (("login", 300.0, 0.0), ("logout", 200.0, 2.0), (report.LAST_PHASE, 200.0, 0.5)))

    def test_pairs_markers_into_cycles(self) -> None:
        lines = [START] + cycles_log("srp", {"rust": [1500, 2500], "c": [3000, 3000], "c2": [2999, 3001]},
                                     {"rust": 400_000, "c": 900_000, "c2": 900_000}) + [END_OK]
        run = report.parse(lines)
        self.assertTrue(run.ok)
        self.assertEqual(run.lost, 0)
        self.assertEqual(run.params["ulps"], "srp,nfs")
        self.assertEqual(run.params["date"], "2026-12-05T10:00:00Z")
        self.assertEqual(len(run.cycles), 6)
        first = run.cycles[0]
        self.assertEqual((first.variant, first.arm, first.round, first.position, first.cycle),
                         ("srp", "rust", 0, 0, 0))
        self.assertEqual((first.wall_ns, first.drain_ns, first.calls), (1_500_000, 400_000, 2))
        self.assertEqual([c.arm for c in run.cycles], ["rust", "rust", "c", "c", "c2", "c2"])

    def test_a_cut_line_is_lost_not_misread(self) -> None:
        lines = cycles_log("nfs", {"rust": [1000], "c": [1000], "c2": [1000]}, {"rust": 1, "c": 1, "c2": 1})
        lines[1] += "[   12.345678] nfs: server not responding"  # the kernel's console output cut in
        lines[2] = lines[2].replace("tracing_mark_write", "tracing_mark_wr")
        run = report.parse(lines)
        self.assertEqual(len(run.cycles), 1)
        self.assertEqual(run.lost, 2)

    def test_conflicting_duplicates_fail(self) -> None:
        lines = cycles_log("nfs", {"rust": [1000], "c": [1000], "c2": [1000]}, {"rust": 1, "c": 1, "c2": 1})
        with self.assertRaises(report.ReportError):
            report.parse(lines + [lines[1].replace("100.001000:", "100.009000:")])
        # The same line twice (printed twice) is the same marker.
        self.assertEqual(len(report.parse(lines + [lines[1]]).cycles), 3)


class CheckTest(unittest.TestCase):
    def test_no_end_names_the_failure(self) -> None:
        lines = cycles_log("srp", {"rust": [1000], "c": [1000], "c2": [1000]}, {"rust": 1, "c": 1, "c2": 1})
        run = report.parse(lines + ["rust-drain: bench-ulp: failed rnbd c round 0 cycle 1: map_device refused"])
        problems = report.check(run)
        self.assertEqual(len(problems), 1)
        self.assertRegex(problems[0], "end,ok.*failed rnbd c round 0 cycle 1: map_device refused")

    def test_an_arm_without_cycles_leaves_its_variant_out(self) -> None:
        lines = (cycles_log("srp", {"rust": [1000], "c": [1000]}, {"rust": 1, "c": 1})
                 + cycles_log("nfs", {"rust": [1000], "c": [1000], "c2": [1000]}, {"rust": 1, "c": 1, "c2": 1})
                 + [END_OK])
        run = report.parse(lines)
        self.assertEqual(report.check(run), ["variant srp has no cycle in arm c2: left out"])
        self.assertEqual(report.complete(run), ["nfs"])
        text = report.table(run, "Host: here.", report.check(run))
        self.assertNotIn("| srp |", text)
        self.assertIn("| nfs |", text)
        self.assertIn("Incomplete run: variant srp has no cycle in arm c2: left out.", text)

    def test_nothing_complete_is_an_error(self) -> None:
        lines = cycles_log("srp", {"rust": [1000], "c": [1000]}, {"rust": 1, "c": 1}) + [END_OK]
        with self.assertRaisesRegex(report.ReportError, "no variant has cycles in every arm"):
            report.check(report.parse(lines))
        with self.assertRaisesRegex(report.ReportError, "no cycle in the log"):
            report.check(report.parse([END_OK]))


class RatioTest(unittest.TestCase):
    def test_ratio_of_medians_and_its_interval(self) -> None:
        rng = random.Random(1)
        a = {r: [2.0 + 0.1 * ((4 * r + i) % 7) for i in range(4)] for r in range(10)}
        b = {r: [1.0 + 0.05 * ((4 * r + i) % 5) for i in range(4)] for r in range(10)}
        est, lo, hi = report.ratio(a, b, rng)
        flat = [x for r in range(10) for x in a[r]], [x for r in range(10) for x in b[r]]
        self.assertAlmostEqual(est, statistics.median(flat[0]) / statistics.median(flat[1]))
        self.assertLess(lo, est)
        self.assertGreater(hi, est)
        # Seeded: the same interval again.
        self.assertEqual(report.ratio(a, b, random.Random(1)), (est, lo, hi))

    def test_rounds_are_resampled_whole_and_paired(self) -> None:
        # Each round shifts both arms alike: paired by round, the ratio
        # does not move, however far the rounds are apart.
        a = {r: [2.0 * (1 + r), 2.2 * (1 + r)] for r in range(8)}
        b = {r: [1.0 * (1 + r), 1.1 * (1 + r)] for r in range(8)}
        est, lo, hi = report.ratio(a, b, random.Random(1))
        self.assertAlmostEqual(est, 2.0)
        self.assertAlmostEqual(lo, 2.0)
        self.assertAlmostEqual(hi, 2.0)
        # A round one arm lacks is left out.
        a[8] = [100.0]
        self.assertAlmostEqual(report.ratio(a, b, random.Random(1))[0], 2.0)

    def test_slower_rounds_counts_rounds_of_higher_median(self) -> None:
        a = {0: [2.0, 2.0], 1: [1.0, 1.0], 2: [3.0, 1.0]}
        b = {0: [1.0, 1.0], 1: [2.0, 2.0], 2: [1.5, 1.5], 3: [9.0]}
        self.assertEqual(report.slower_rounds(a, b), "2/3")

    def test_no_drains_in_c_gives_no_ratio(self) -> None:
        est, lo, hi = report.ratio({0: [1.0, 2.0]}, {0: [0.0, 0.0, 0.0]}, random.Random(1))
        self.assertTrue(math.isnan(est) and math.isnan(lo) and math.isnan(hi))
        self.assertEqual(report.fmt_ratio((est, lo, hi)), "—")


class MainTest(unittest.TestCase):
    def test_writes_table_and_samples(self) -> None:
        lines = [START] + cycles_log("srp", {"c2": [3000, 3100], "rust": [2000, 2100], "c": [3000, 3100]},
                                     {"rust": 500_000, "c": 1_000_000, "c2": 1_000_000}) + [END_OK]
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "console.log")
            with open(log, "w") as f:
                f.write("\n".join(lines) + "\n")
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                report.main([log, os.path.join(d, "out"), "Host: here."])
            with open(os.path.join(d, "out", "table.md")) as f:
                text = f.read()
            with open(os.path.join(d, "out", "samples.csv")) as f:
                rows = f.read().splitlines()
        self.assertIn(text, printed.getvalue())
        self.assertIn("Host: here.", text)
        self.assertIn("1 rounds of 2 cycles per arm", text)
        row = next(line for line in text.splitlines() if line.startswith("| srp |"))
        cells = [c.strip() for c in row.split("|")[1:-1]]
        self.assertEqual(cells[1], "2 / 2 / 2")
        self.assertEqual(cells[2], "2.05 / 3.05 / 3.05")
        self.assertTrue(cells[3].startswith("0.672 ["))  # 2.05 / 3.05
        self.assertEqual(cells[4], "0/1")  # rounds Rust above C
        self.assertTrue(cells[5].startswith("1.000 ["))
        self.assertEqual(cells[6], "0.50 / 1.00 / 1.00")
        self.assertEqual(cells[9], "2 / 2 / 2")
        self.assertEqual(len(rows), 7)
        self.assertEqual(rows[1].split(",")[:5], ["srp", "c2", "0", "0", "0"])

    def test_without_end_reports_then_fails(self) -> None:
        lines = cycles_log("srp", {"rust": [1000], "c": [1000], "c2": [1000]}, {"rust": 1, "c": 1, "c2": 1})
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "console.log")
            with open(log, "w") as f:
                f.write("\n".join(lines) + "\n")
            with contextlib.redirect_stdout(io.StringIO()) as printed, self.assertRaises(SystemExit) as cm:
                report.main([log, os.path.join(d, "out")])
            self.assertTrue(os.path.exists(os.path.join(d, "out", "table.md")))
        self.assertRegex(str(cm.exception.code), "incomplete run: .*end,ok")
        self.assertIn("| srp |", printed.getvalue())


if __name__ == "__main__":
    unittest.main()
