#!/usr/bin/env python3
"""Unit tests of scripts/mutants-caught.py: the names make mutants matches
against a mutant's "# Caught-by:" pattern."""

from __future__ import annotations

import importlib.util
import os
import tempfile
import unittest

_spec = importlib.util.spec_from_file_location(
    "mutants_caught", os.path.join(os.path.dirname(__file__), "mutants-caught.py"))
assert _spec and _spec.loader
mc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mc)

RESULTS = """\
  rdma_drain_unit_faults: 4 passed, 1 failed
  rdma_drain_rxe: 0 passed, 0 failed
FAIL: host check stuck_drain_reported
FAIL: host check refusals_reported
5 passed, 3 failed
"""

CONSOLE = """\
[   36.4]     ok 4 a_burst_of_refusals_is_rate_limited
[   36.5]     # stuck_drain_is_reported_once_and_keeps_waiting: ASSERTION FAILED at x.rs:9
[   36.5]     Expected first_us * 2 < gap_us to be true, but is false
[   36.5]     not ok 5 stuck_drain_is_reported_once_and_keeps_waiting
[   40.1] not ok 1 rdma_drain_unit_faults
"""


class FailedNames(unittest.TestCase):
    def names(self, stopped: bool) -> list[str]:
        with tempfile.TemporaryDirectory() as d:
            res = os.path.join(d, "mutant-results.log")
            with open(res, "w") as f:
                f.write(RESULTS)
            with open(os.path.join(d, "console-mutant.log"), "w") as f:
                f.write(CONSOLE)
                if stopped:
                    f.write("boot: stopped at the first failed test\n")
            return mc.failed_names(res, "mutant")

    def test_a_stopped_boot_names_its_case_and_suite_only(self) -> None:
        names = self.names(stopped=True)
        self.assertIn("stuck_drain_is_reported_once_and_keeps_waiting", names)
        self.assertIn("rdma_drain_unit_faults", names)
        self.assertIn("expected: first_us * 2 < gap_us", names)
        self.assertNotIn("a_burst_of_refusals_is_rate_limited", names)
        # The host checks fail because the boot stopped: not the mutant's.
        self.assertNotIn("stuck_drain_reported", names)

    def test_a_full_boot_names_its_host_checks(self) -> None:
        names = self.names(stopped=False)
        self.assertIn("stuck_drain_reported", names)
        self.assertIn("refusals_reported", names)
        self.assertIn("stuck_drain_is_reported_once_and_keeps_waiting", names)


if __name__ == "__main__":
    unittest.main()
