#!/usr/bin/env python3
"""Usage: scripts/mutants-caught.py RESULTS

What failed in a run-tests.sh output, in one line for the `make mutants`
table: suites with failed cases, failed host checks, then the kinds of
run-level failure (kernel reports, a run cut short, missing suites). A
run stopped at its first failed test (make mutants' default) gives the
suites that failed and "stopped there". A guest that never powered off
(a drain that hangs) is named by the suite that was running, from the
console log beside RESULTS."""

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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", metavar="RESULTS",
                        help="run-tests.sh's output for the mutant (console-FLAVOUR.log beside it)")
    parser.add_argument("flavour", metavar="FLAVOUR", nargs="?", default="mutant",
                        help="the kernel it booted: mutant (the default) or mutant-debug")
    args = parser.parse_args(argv)
    print(caught(args.results, args.flavour))


if __name__ == "__main__":
    main()
