#!/usr/bin/env python3
"""Usage: scripts/bench-api-report.py CONSOLE-LOG OUTDIR [HOST-LINE]

make bench-api's report: the Rust ping-pong sample (the first user of
kernel::infiniband) against its C verbs reference, in one boot. The guest
(rust_drain_bench_api in scripts/guest/init) prints a line per load,
    rust-drain: bench-api: sample ARM SIZE ROUND NS
where NS is the module's mean round trip (two posted receives, two posted
sends and the polling of their four completions; the data's filling and
checking are not timed), ARM one of rust, c and c2 (C loaded again: the
noise of the setup).

Writes OUTDIR/samples.csv and OUTDIR/table.md, and prints the table: per
size, the median round trip of each arm, Rust/C and C2/C (ratios of the
medians, each with a 95% percentile bootstrap interval, whole rounds
resampled, seeded: the same log gives the same table), and in how many
rounds Rust was slower than C. A run that did not end
('rust-drain: bench-api: end,ok') still gets its table, with the problem
under it and on stderr, and exits 1. Timings never fail a test.
"""

from __future__ import annotations

import os
import random
import re
import statistics
import sys

SAMPLE = re.compile(r"rust-drain: bench-api: sample (rust|c2|c) (\d+) (\d+) (\d+)\s*$")
FAILED = re.compile(r"rust-drain: bench-api: failed (\S+) (\d+) (\d+)")
BOOTSTRAP = 2000


def parse(lines: list[str]) -> tuple[dict[tuple[str, int], dict[int, int]], list[str]]:
    """Per (arm, size): round -> ns; and the problems."""
    samples: dict[tuple[str, int], dict[int, int]] = {}
    problems = []
    for line in lines:
        m = SAMPLE.search(line)
        if m:
            arm, size, rnd, ns = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
            samples.setdefault((arm, size), {})[rnd] = ns
            continue
        m = FAILED.search(line)
        if m:
            problems.append(f"load failed: arm {m.group(1)}, {m.group(2)} B, round {m.group(3)}")
    if not any("rust-drain: bench-api: end,ok" in line for line in lines):
        problems.append("the run did not end (no 'rust-drain: bench-api: end,ok')")
    return samples, problems


def ratio(a: dict[int, int], b: dict[int, int], rng: random.Random) -> tuple[float, float, float]:
    """median(a) / median(b) over the rounds both have, and its 95%
    bootstrap interval (rounds drawn with replacement, the same for both)."""
    nan = float("nan")
    rounds = sorted(set(a) & set(b))
    if not rounds:
        return nan, nan, nan
    est = statistics.median(a[r] for r in rounds) / statistics.median(b[r] for r in rounds)
    boot = []
    for _ in range(BOOTSTRAP):
        drawn = rng.choices(rounds, k=len(rounds))
        boot.append(statistics.median(a[r] for r in drawn) / statistics.median(b[r] for r in drawn))
    boot.sort()
    return est, boot[round(0.025 * (len(boot) - 1))], boot[round(0.975 * (len(boot) - 1))]


def table(samples: dict[tuple[str, int], dict[int, int]]) -> list[str]:
    rng = random.Random(1)
    out = [
        "| size | rounds | Rust (ns) | C (ns) | C2 (ns) | Rust/C [95% CI] | C2/C [95% CI] | rounds Rust > C |",
        "|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for size in sorted({s for (_, s) in samples}):
        rust, c, c2 = (samples.get((arm, size), {}) for arm in ("rust", "c", "c2"))
        if not rust or not c or not c2:
            continue
        r, rlo, rhi = ratio(rust, c, rng)
        n, nlo, nhi = ratio(c2, c, rng)
        both = sorted(set(rust) & set(c))
        slower = sum(1 for k in both if rust[k] > c[k])
        out.append(
            f"| {size} B | {len(both)} | {statistics.median(rust.values()):.0f} | "
            f"{statistics.median(c.values()):.0f} | {statistics.median(c2.values()):.0f} | "
            f"{r:.3f} [{rlo:.3f}, {rhi:.3f}] | {n:.3f} [{nlo:.3f}, {nhi:.3f}] | "
            f"{slower}/{len(both)} |"
        )
    return out


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], errors="replace") as f:
        lines = [line.rstrip("\r\n") for line in f]
    outdir = sys.argv[2]
    samples, problems = parse(lines)
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "samples.csv"), "w") as f:
        f.write("arm,size,round,ns\n")
        for (arm, size), per in sorted(samples.items()):
            for rnd, ns in sorted(per.items()):
                f.write(f"{arm},{size},{rnd},{ns}\n")
    text = [
        "Mean round trip of the ping-pong (post two receives and two sends, poll",
        "four completions; one direct CQ) over rxe0, median over rounds.",
        "",
    ] + table(samples)
    if len(sys.argv) > 3:
        text += ["", sys.argv[3]]
    if problems:
        text += [""] + [f"Problem: {p}" for p in problems]
    with open(os.path.join(outdir, "table.md"), "w") as f:
        f.write("\n".join(text) + "\n")
    print("\n".join(text))
    for p in problems:
        print(f"bench-api: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
