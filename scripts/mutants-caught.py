#!/usr/bin/env python3
"""Usage: scripts/mutants-caught.py RESULTS

What failed in a run-tests.sh output, in one line for the `make mutants`
table: suites with failed cases, failed host checks, then the kinds of
run-level failure (kernel reports, a run cut short, missing suites). A
guest that never powered off (a drain that hangs) is named by the suite
that was running, from the console log beside RESULTS."""

import os
import re
import sys

lines = open(sys.argv[1], errors="replace").read().splitlines()
out = []
for line in lines:
    m = re.match(r"^  ([a-z_]+): \d+ passed, [1-9]\d* failed", line)
    if m and m.group(1) != "host_checks":
        out.append(m.group(1))
for line in lines:
    m = re.match(r"^FAIL: host check (\S+)", line)
    if m:
        out.append(m.group(1))
kinds = [
    ("kernel report", "kernel report"),
    ("the run did not reach its end", "run cut short"),
    ("did not report", "suites missing"),
    ("expected at least", "suites short"),
    ("insmod", "insmod failed"),
]
for needle, label in kinds:
    if any(l.startswith("FAIL:") and needle in l for l in lines):
        out.append(label)
if any("did not power off" in l for l in lines):
    console = os.path.join(os.path.dirname(sys.argv[1]), "console-mutant.log")
    running = "?"
    with open(console, errors="replace") as f:
        for line in f:
            m = re.search(r"# Subtest: (\S+)|rust-drain: suite (\S+) starts", line)
            if m:
                running = m.group(1) or m.group(2)
    out.append(f"hung in {running} (boot timeout)")
print(", ".join(dict.fromkeys(out)) or "the run failed (see its results)")
