#!/usr/bin/env python3
"""Usage: scripts/bench-report.py CONSOLE-LOG OUTDIR

Collect rdma_drain_bench's sample lines from a console log and write
OUTDIR/samples.csv (raw samples), OUTDIR/table.md (per poll context and
depth: median, p90, p99 of Rust, C and the floor; Rust/C and Rust/floor
median ratios; C/C noise: the median of one half of the C samples over the other's) and
OUTDIR/latency.png (median latency vs depth per poll context, gnuplot).
Prints the table. Never judges: timings are not tests.
"""

import collections
import os
import re
import statistics
import subprocess
import sys

LINE = re.compile(r"rdma_drain_bench: sample,(\w+),(\d+),(\w+),(\d+),(\d+)")


def pct(xs, p):
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def us(ns):
    return f"{ns / 1000:.1f}"


def main():
    log, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    data = collections.defaultdict(list)
    rows = []
    with open(log, errors="replace") as f:
        for line in f:
            m = LINE.search(line)
            if m:
                ctx, n, imp, i, ns = m.group(1), int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(5))
                data[(ctx, n, imp)].append((i, ns))
                rows.append((ctx, n, imp, i, ns))
    if not rows:
        sys.exit("bench-report: no samples in " + log)
    with open(f"{out}/samples.csv", "w") as f:
        f.write("ctx,n,impl,sample,ns\n")
        for r in rows:
            f.write(",".join(map(str, r)) + "\n")

    ctxs = list(dict.fromkeys(r[0] for r in rows))
    depths = sorted({r[1] for r in rows})
    lines = [
        "| poll context | N | Rust median / p90 / p99 (µs) | C median / p90 / p99 (µs) | floor median (µs) "
        "| Rust/C | C/C noise | Rust/floor | Rust − floor (µs) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    plot = []
    for ctx in ctxs:
        for n in depths:
            r = [ns for _, ns in data[(ctx, n, "rust")]]
            c = [ns for _, ns in data[(ctx, n, "c")]]
            fl = [ns for _, ns in data[(ctx, n, "floor")]]
            if not r or not c or not fl:
                continue
            # C against itself: two halves that each hold both orders
            # (samples alternate Rust-first and C-first).
            ce = [ns for i, ns in data[(ctx, n, "c")] if i % 4 < 2]
            co = [ns for i, ns in data[(ctx, n, "c")] if i % 4 >= 2]
            rm, cm, fm = statistics.median(r), statistics.median(c), statistics.median(fl)
            noise = statistics.median(ce) / statistics.median(co) if ce and co else float("nan")
            lines.append(
                f"| {ctx} | {n} | {us(rm)} / {us(pct(r, 90))} / {us(pct(r, 99))} "
                f"| {us(cm)} / {us(pct(c, 90))} / {us(pct(c, 99))} | {us(fm)} "
                f"| {rm / cm:.3f} | {noise:.3f} | {rm / fm:.2f} | {us(rm - fm)} |")
            plot.append((ctx, n, rm, cm, fm))
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
    table = "\n".join(lines) + "\n"
    n_samples = min(len(v) for v in data.values())
    with open(f"{out}/table.md", "w") as f:
        f.write(f"# ib_drain_rq on rxe: Rust vs C vs floor ({n_samples} samples each)\n\n")
        f.write(table)
    print(table)

    with open(f"{out}/medians.dat", "w") as f:
        for ctx in ctxs:
            f.write(f"# {ctx}\n")
            for (c, n, rm, cm, fm) in plot:
                if c == ctx:
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
