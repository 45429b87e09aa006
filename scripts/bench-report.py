#!/usr/bin/env python3
"""Usage: scripts/bench-report.py CONSOLE-LOG OUTDIR [HOST-LINE]

Collect rdma_drain_bench's sample lines from a console log and write
OUTDIR/samples.csv (raw samples), OUTDIR/table.md and OUTDIR/latency.png
(median latency vs depth per poll context, gnuplot), and prints the table.
HOST-LINE (scripts/bench.sh: where the vCPU threads ran) heads table.md.

Per poll context and depth: median, p90, p99 of Rust and C, the floor's
median. The drains of one sample run in the orders of a balanced design
in turn (rdma_drain_bench.rs), and the position in the sample matters on
its own, so Rust/C compares like with like: within each position, the
10% trimmed means of the log times of Rust and of C (`location`), their
difference averaged over the positions (weighted: `POS_WEIGHT`) and
turned back into a ratio. Its interval is z bootstrap standard errors
either side, on the log scale. C2/C is the same for the C drain against
itself; the cell's noise is how far that interval reaches from 1. The intervals are simultaneous at 95%
over the non-direct cells (Bonferroni: z for 0.05 over two intervals a
cell, two-sided). A cell is "within noise" when Rust/C <= 1 + noise (the
issue's mark: a failure to tell Rust from C, so the upper end of
Rust/C's interval is printed too: at that confidence Rust costs no more
than that), "below C" when Rust/C's interval is all below 1; a C2/C
interval that excludes 1 is flagged (the design, not a drain, would then
differ). A pooled row follows: Rust/C and C2/C over all the non-direct
cells with C2 (`pooled`), the mean of the cells' log differences, each
cell weighing the same, its standard error from a bootstrap resampling
every cell in each replicate, z for 95% over its two intervals; the last
line says whether pooled Rust/C <= the upper end of pooled C2/C. The
Rust drain's second arm (Rust2, which balances the design: see
rdma_drain_bench.rs) gives pooled Rust2/Rust, Rust against itself, on a
line of its own (95% on its own, outside the two intervals above).
In the direct context (no C2: C sleeps 100 ms there, and runs last) the
mark is Rust's median within 20 us of the floor's, at N <= 64: Rust and
the floor alternate there, so both medians hold each position equally.
The marks are a summary, not a test: timings never fail anything.

The concurrent cells (16 and 128 direct drains at once, on a CQ each or on
one shared CQ; Rust and C in each round, which goes first alternating) get
a table of their own, and OUTDIR/concurrent.csv: the median time until
every drain has returned, Rust's over C's as the geometric mean of the
rounds' ratios; the CPU time the drainers ran, per drain, Rust's and C's
and their difference; the mean CPU time all CPUs spent meanwhile (sampled
at the tick, 4 ms a sample at HZ=250: below that per round, as with 16
QPs, it says little). Intervals: 95% percentile bootstrap over rounds.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import random
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

START = re.compile(r"rdma_drain_bench: start,samples=(\d+)")
CONCURRENT = re.compile(r"rdma_drain_bench: concurrent,(\d+),(\w+),(\w+),(\d+),(\d+),(\d+),(\d+)")
LINE = re.compile(r"rdma_drain_bench: sample,(\w+),(\d+),(\w+),(\d+),(\d+)(?:,(\d+))?")
# One arm's samples (ns) by their position in the sample.
ByPos = Mapping[int, list[int]]


def pct(xs: Iterable[float], p: float) -> float:
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def location(xs: Iterable[float]) -> float:
    """The 10% trimmed mean of log(ns): the drains' times are bimodal here
    (a wake-up is quick or waits for a tick), which makes a median jump
    between the modes; trimming keeps the rare stalls of tens of ms out."""
    ls = sorted(math.log(x) for x in xs)
    k = len(ls) // 10
    return statistics.fmean(ls[k:len(ls) - k])


def ratio(a: ByPos, b: ByPos, z: float, rng: random.Random) -> tuple[float, float, float]:
    """Rust/C (or C2/C): exp of the difference of `location` between the two
    arms within each position in the sample, averaged over the positions
    (weighted by `POS_WEIGHT`), and its interval: z standard errors either
    side on the log scale, the
    standard error from a bootstrap within each position (seeded: the same
    log gives the same table). a, b: {position: [ns, ...]}."""
    return pooled([(a, b)], z, rng)


def pooled(pairs: Iterable[tuple[ByPos, ByPos]], z: float,
           rng: random.Random) -> tuple[float, float, float]:
    """`ratio` over several cells, pairs [(a, b), ...]: the mean of the
    cells' log differences, each cell weighing the same, its interval from a
    bootstrap that resamples every cell within each position, independently."""
    cells: list[tuple[ByPos, ByPos, list[int]]] = []
    for a, b in pairs:
        pos = sorted(a.keys() & b.keys())
        if not pos and a and b:
            # Never at the same position (direct: C runs last): all together.
            a, b = {0: [x for xs in a.values() for x in xs]}, {0: [x for xs in b.values() for x in xs]}
            pos = [0]
        if not pos:
            return float("nan"), float("nan"), float("nan")
        cells.append((a, b, pos))

    def est(pick: Callable[[list[int]], list[int]]) -> float:
        return statistics.fmean(
            statistics.fmean([location(pick(a[p])) - location(pick(b[p])) for p in pos],
                             [POS_WEIGHT.get(p, 1) for p in pos]) for a, b, pos in cells)

    e = est(lambda xs: xs)
    boot = [est(lambda xs: rng.choices(xs, k=len(xs))) for _ in range(BOOTSTRAP)]
    se = statistics.stdev(boot)
    return math.exp(e), math.exp(e - z * se), math.exp(e + z * se)


BOOTSTRAP = 400

# Weights of the positions in a sample. At positions 1 and 3 Rust follows C's
# code and C Rust's; at 2 each follows its own (ORDERS in rdma_drain_bench.rs).
# A carry-over that depends on which code ran before then biases Rust/C one
# way at 1 and 3 and the other at 2: weighing 2 as 1 and 3 together cancels
# it (if its size is the same at positions 1 to 3), and one that depends on
# the same code having run before cancels at any weights. At 0 both follow
# the floor: neutral, and weighed so that 0 and 2 together match 1 and 3.
# C2/C and Rust2/Rust follow alike at every position. (Weighted fmean:
# Python 3.11, as Debian's.)
POS_WEIGHT = {0: 2, 1: 1, 2: 2, 3: 1}


def z_for(alpha: float) -> float:
    """Two-sided normal quantile: P(|Z| > z) = alpha."""
    return statistics.NormalDist().inv_cdf(1 - alpha / 2)


DIRECT_MARGIN_NS = 20_000


def us(ns: float) -> str:
    return f"{ns / 1000:.1f}"


def concurrent_table(log: str, out: str) -> list[str]:
    """The concurrent cells' table (see the module's doc), and
    OUTDIR/concurrent.csv; no lines if the log has no such cells."""
    # (QPs, CQs): {implementation: {round: (ns, busy ns, drainers' ns)}}
    cells: dict[tuple[int, str], dict[str, dict[int, tuple[int, int, int]]]] = {}
    with open(log, errors="replace") as f:
        rows = [m.groups() for m in map(CONCURRENT.search, f) if m]
    if not rows:
        return []
    with open(f"{out}/concurrent.csv", "w") as f:
        f.write("qps,cqs,impl,round,ns,busy_ns,drainers_ns\n")
        for row in rows:
            f.write(",".join(row) + "\n")
            qps, cqs, imp, i, ns, busy, drainers = row
            cells.setdefault((int(qps), cqs), {}).setdefault(imp, {})[int(i)] = (int(ns), int(busy), int(drainers))
    lines = [
        "", "Direct drains at once (each from its own worker), Rust against C:", "",
        "| QPs | CQs | rounds | time Rust / C, median (ms) | Rust/C time [95%] "
        "| drainers' CPU per drain Rust / C (µs) | Rust − C (µs) [95%] | all CPUs, tick-sampled, Rust / C (ms) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (qps, cqs), arms in cells.items():
        rust, c = arms.get("rust", {}), arms.get("c", {})
        rounds = sorted(set(rust) & set(c))
        if not rounds:
            continue
        rng = random.Random(f"concurrent,{qps},{cqs}")
        logs = [math.log(rust[i][0] / c[i][0]) for i in rounds]
        boot = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(2000))
        t, t_lo, t_hi = (math.exp(x) for x in (statistics.fmean(logs), boot[50], boot[1949]))

        # The drainers' CPU per drain, Rust's minus C's (us).
        per = [(rust[i][2] / qps / 1e3, c[i][2] / qps / 1e3) for i in rounds]
        diffs = [r - cc for r, cc in per]
        boot = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
        cd, cd_lo, cd_hi = statistics.fmean(diffs), boot[50], boot[1949]
        ms = lambda xs: f"{xs / 1e6:.1f}"  # noqa: E731
        lines.append(
            f"| {qps} | {cqs} | {len(rounds)} "
            f"| {ms(statistics.median(rust[i][0] for i in rounds))} / {ms(statistics.median(c[i][0] for i in rounds))} "
            f"| {t:.3f} [{t_lo:.3f}, {t_hi:.3f}] "
            f"| {statistics.fmean(r for r, _ in per):.0f} / {statistics.fmean(cc for _, cc in per):.0f} "
            f"| {cd:+.0f} [{cd_lo:+.0f}, {cd_hi:+.0f}] "
            f"| {ms(statistics.fmean(rust[i][1] for i in rounds))} / {ms(statistics.fmean(c[i][1] for i in rounds))} |")
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", metavar="CONSOLE-LOG", help="the bench guest's console log")
    parser.add_argument("out", metavar="OUTDIR", help="where to write samples.csv, table.md, latency.png")
    parser.add_argument("host", metavar="HOST-LINE", nargs="?", default="Host: vCPU placement not given.",
                        help="the line that heads table.md (scripts/bench.sh: where the vCPU threads ran)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    log: str = args.log
    out: str = args.out
    host: str = args.host
    os.makedirs(out, exist_ok=True)
    # (context, depth, implementation): [(sample, ns)], and by position.
    data: collections.defaultdict[tuple[str, int, str], list[tuple[int, int]]] = collections.defaultdict(list)
    bypos: collections.defaultdict[tuple[str, int, str], collections.defaultdict[int, list[int]]] = \
        collections.defaultdict(lambda: collections.defaultdict(list))
    rows: list[tuple[str, int, str, int, int, int]] = []
    want: list[int] | None = None
    with open(log, errors="replace") as f:
        for line in f:
            start = START.search(line)
            if start:
                want = list(range(int(start.group(1))))
            m = LINE.search(line)
            if m:
                ctx, n, imp, i, ns = m.group(1), int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(5))
                pos = int(m.group(6) or 0)
                data[(ctx, n, imp)].append((i, ns))
                bypos[(ctx, n, imp)][pos].append(ns)
                rows.append((ctx, n, imp, i, ns, pos))
    if not rows:
        sys.exit("bench-report: no samples in " + log)
    # Every arm's samples once each, 0 to samples - 1: a line lost from the
    # log buffer or printed twice would bias a cell silently.
    bad = [k for k, v in data.items() if sorted(i for i, _ in v) != want]
    if bad:
        sys.exit(f"bench-report: {len(bad)} arms without exactly samples 0..{len(want or []) - 1} once each"
                 f" (first: {bad[0]}) in {log}")
    with open(f"{out}/samples.csv", "w") as f:
        f.write("ctx,n,impl,sample,ns,position\n")
        for row in rows:
            f.write(",".join(map(str, row)) + "\n")

    ctxs = list(dict.fromkeys(r[0] for r in rows))
    depths = sorted({r[1] for r in rows})
    cells = [(ctx, n) for ctx in ctxs for n in depths if data[(ctx, n, "rust")]]
    # Two intervals per non-direct cell (Rust/C, C2/C) share the 5%.
    z = z_for(0.05 / max(1, 2 * sum(1 for ctx, _ in cells if ctx != "Direct")))
    lines = [
        "| poll context | N | Rust median / p90 / p99 (µs) | C median / p90 / p99 (µs) | floor median (µs) "
        "| Rust/C [interval] | C2/C [interval] | noise | Rust − floor (µs) | mark |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    plot: list[tuple[str, int, float, float, float]] = []  # (context, N, medians: Rust, C, floor)
    marks: collections.Counter[str] = collections.Counter()
    pool: list[tuple[ByPos, ByPos, ByPos, ByPos]] = []  # (Rust, C, C2, Rust2) of the non-direct cells with C2
    for ctx, n in cells:
        rng = random.Random(f"{ctx},{n}")
        rd, cd, c2d, r2d = (bypos[(ctx, n, imp)] for imp in ("rust", "c", "c2", "rust2"))
        r, c, fl = ([ns for _, ns in data[(ctx, n, imp)]] for imp in ("rust", "c", "floor"))
        if not r or not c or not fl:
            continue
        rm, cm, fm = statistics.median(r), statistics.median(c), statistics.median(fl)
        rc, rc_lo, rc_hi = ratio(rd, cd, z, rng)
        if ctx == "Direct":
            aa = "—"
            noise = "—"
            if n <= 64:
                ok = rm - fm <= DIRECT_MARGIN_NS
                mark = "within floor + 20 µs" if ok else "above floor + 20 µs"
                marks["direct ok" if ok else "direct over"] += 1
            else:
                mark = ""
        else:
            aa_m, aa_lo, aa_hi = ratio(c2d, cd, z, rng)
            if math.isnan(aa_m):
                aa, noise, mark = "—", "—", "no C2 samples"
            else:
                w = max(aa_hi - 1, 1 - aa_lo, 0)
                aa = f"{aa_m:.3f} [{aa_lo:.3f}, {aa_hi:.3f}]"
                noise = f"±{w:.3f}"
                ok = rc <= 1 + w
                mark = ("below C" if rc_hi < 1 else "within noise") if ok else "above noise"
                if aa_lo > 1 or aa_hi < 1:
                    # C differs from itself: the design, not the drain.
                    mark += " (C2/C excludes 1)"
                marks["other ok" if ok else "other over"] += 1
                pool.append((rd, cd, c2d, r2d))
        lines.append(
            f"| {ctx} | {n} | {us(rm)} / {us(pct(r, 90))} / {us(pct(r, 99))} "
            f"| {us(cm)} / {us(pct(c, 90))} / {us(pct(c, 99))} | {us(fm)} "
            f"| {rc:.3f} [{rc_lo:.3f}, {rc_hi:.3f}] | {aa} | {noise} | {us(rm - fm)} | {mark} |")
        plot.append((ctx, n, rm, cm, fm))
    summary = [
        f"marks: non-direct cells within noise {marks['other ok']} of "
        f"{marks['other ok'] + marks['other over']}; direct N <= 64 within floor + 20 µs "
        f"{marks['direct ok']} of {marks['direct ok'] + marks['direct over']} "
        f"(intervals simultaneous at 95%, z = {z:.2f}); Rust/C's upper ends bound Rust's cost"]
    if pool:
        # The non-direct cells with C2 together, each weighing the same; the
        # two pooled intervals (Rust/C, C2/C) share the 5%.
        pz = z_for(0.05 / 2)
        rng = random.Random("pooled")
        rc, rc_lo, rc_hi = pooled([(rd, cd) for rd, cd, _, _ in pool], pz, rng)
        aa_m, aa_lo, aa_hi = pooled([(c2d, cd) for _, cd, c2d, _ in pool], pz, rng)
        w = max(aa_hi - 1, 1 - aa_lo, 0)
        lines.append(
            f"| pooled ({len(pool)} non-direct cells) | all | — | — | — "
            f"| {rc:.3f} [{rc_lo:.3f}, {rc_hi:.3f}] | {aa_m:.3f} [{aa_lo:.3f}, {aa_hi:.3f}] | ±{w:.3f} | — "
            f"| {'C2/C excludes 1' if aa_lo > 1 or aa_hi < 1 else ''} |")
        summary += [
            f"pooled row: the non-direct cells' log ratios averaged, z = {pz:.2f} (95% over its two intervals)",
            f"pooled Rust/C <= pooled C2/C upper end: {'yes' if rc <= aa_hi else 'no'}"]
        if all(r2d for _, _, _, r2d in pool):
            rr, rr_lo, rr_hi = pooled([(r2d, rd) for rd, _, _, r2d in pool], z_for(0.05), rng)
            summary.append(f"pooled Rust2/Rust (Rust against itself): {rr:.3f} [{rr_lo:.3f}, {rr_hi:.3f}]"
                           f" (95% alone, z = {z_for(0.05):.2f})")
    # Slope of the median with N (ns per receive), from the two deepest points.
    lines.append("")
    lines.append("| poll context | slope Rust (ns/receive) | slope C | slope floor |")
    lines.append("|---|---:|---:|---:|")
    for ctx in ctxs:
        pts = [p for p in plot if p[0] == ctx]
        if len(pts) >= 2:
            a, b = pts[-2], pts[-1]
            dn = b[1] - a[1]
            lines.append(f"| {ctx} | {(b[2] - a[2]) / dn:.0f} | {(b[3] - a[3]) / dn:.0f} | {(b[4] - a[4]) / dn:.0f} |")
    lines += [""] + summary + concurrent_table(log, out)
    table = "\n".join(lines) + "\n"
    n_samples = min(len(v) for v in data.values())
    with open(f"{out}/table.md", "w") as f:
        f.write(f"# ib_drain_rq on rxe: Rust vs C vs floor ({n_samples} samples each)\n\n")
        f.write(host + "\n\n")
        f.write(table)
    print(table)

    with open(f"{out}/medians.dat", "w") as f:
        for ctx in ctxs:
            f.write(f"# {ctx}\n")
            for (pctx, n, rm, cm, fm) in plot:
                if pctx == ctx:
                    f.write(f"{depths.index(n)} {n} {rm / 1000} {cm / 1000} {fm / 1000}\n")
            f.write("\n\n")
    gp = [
        "set terminal png size 1200,900",
        f"set output '{out}/latency.png'",
        "set multiplot layout 2,2 title 'ib\\_drain\\_rq latency on rxe (median, µs)'",
        "set logscale y",
        "set xlabel 'receives posted (N)'",
        "set ylabel 'µs'",
        "set key top left",
    ]
    for i, ctx in enumerate(ctxs):
        gp += [
            f"set title '{ctx}'",
            f"plot '{out}/medians.dat' index {i} using 1:3:xtic(2) with linespoints title 'Rust', "
            f"'' index {i} using 1:4:xtic(2) with linespoints title 'C', "
            f"'' index {i} using 1:5:xtic(2) with linespoints title 'floor'",
        ]
    gp.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(gp), text=True, check=True)
    print(f"bench: {len(rows)} samples; {out}/samples.csv, {out}/table.md, {out}/latency.png")


if __name__ == "__main__":
    main()
