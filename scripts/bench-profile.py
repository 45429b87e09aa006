#!/usr/bin/env python3
"""Usage: scripts/bench-profile.py CONSOLE-LOG OUTDIR

Turn the ftrace of `make bench-profile` into OUTDIR/profile.md: for each
traced direct-CQ drain (ib_drain_rq entry to return, on the benchmark's
task) the time between its steps, as medians over the drains of each depth:

  modify      entry -> ib_modify_qp(ERR) returned
  to post     -> rxe_post_recv() of the marker entered
  to worker   -> rxe's do_work() started (the worker that posted the last
                 completion; counted only where it started after the post)
  flush       -> rxe_cq_post() of the last completion (the marker's), from
                 the later of the post and the worker's start
  to reap     -> the drain's poll that returned it (rdma_core:cq_poll on
                 the drain's task)
  return      -> ib_drain_rq returned

beside the medians of the untraced run (the same drains and floor, before
the probes were set): traced total minus untraced is what the probes cost.
Timings never fail anything.
"""

import collections
import os
import re
import statistics
import sys

EV = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+):\s+(\w+):(.*)$")
SAMPLE = re.compile(r"rdma_drain_bench: sample,(\w+),(\d+),(\w+),(\d+),(\d+)")
STEPS = ["modify", "to post", "to worker", "flush", "to reap", "return"]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    log, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    events, samples = [], {"untraced": collections.defaultdict(list), "traced": collections.defaultdict(list)}
    run, inside, lost = None, False, 0
    with open(log, errors="replace") as f:
        for line in f:
            if "rust-drain: profile: untraced run" in line:
                run = "untraced"
            elif "rust-drain: profile: traced run" in line:
                run = "traced"
            elif "rust-drain: profile: trace begin" in line:
                inside = True
                continue
            elif "rust-drain: profile: trace end" in line:
                inside = False
                continue
            m = SAMPLE.search(line)
            if m and run:
                samples[run][(int(m.group(2)), m.group(3))].append(int(m.group(5)))
            if inside:
                if "LOST" in line:
                    lost += 1
                m = EV.match(line)
                if m:
                    events.append((float(m.group(4)) * 1e6, int(m.group(2)), int(m.group(3)), m.group(5)))
    if not events:
        sys.exit("bench-profile: no trace in " + log)
    if lost:
        sys.exit(f"bench-profile: the trace lost events ({lost} lines say so): a bigger buffer_size_kb")
    events.sort()
    traced = samples["traced"]
    depths = sorted({n for n, imp in traced if imp == "rust"})
    per_depth = {n: len(traced[(n, "rust")]) for n in depths}
    drains, cur = [], None
    for t, pid, cpu, name in events:
        if name == "drain":
            cur = {"pid": pid, "cpu": cpu, "t0": t, "ev": []}
        elif cur is not None and name == "drain_ret" and pid == cur["pid"]:
            cur["t1"] = t
            drains.append(cur)
            cur = None
        elif cur is not None:
            cur["ev"].append((t, pid, cpu, name))
    # Each depth runs its warm-up drains, then the measured ones.
    measured = sum(per_depth.values())
    if not depths or (len(drains) - measured) % len(depths):
        sys.exit(f"bench-profile: {len(drains)} drains traced, {measured} samples: cannot match them")
    warm = (len(drains) - measured) // len(depths)
    order = []
    for n in depths:
        order += [None] * warm + [n] * per_depth[n]
    rows = collections.defaultdict(list)
    dropped = collections.Counter()
    for d, n in zip(drains, order):
        if n is None:
            continue
        ev, pid = d["ev"], d["pid"]

        def first(name, after, only_pid=None):
            return next((t for t, p, _, e in ev if e == name and t >= after and only_pid in (None, p)), None)

        def last(name, before, only_pid=None):
            hits = [(t, c) for t, p, c, e in ev if e == name and t <= before and only_pid in (None, p)]
            return hits[-1] if hits else (None, None)

        tm = first("modify_ret", d["t0"], pid)
        tp = first("post", tm or d["t0"], pid)
        treap, _ = last("cq_poll", d["t1"], pid)
        tcq, _ = last("cqpost", treap or d["t1"])
        ttask, ctask = last("task", tcq or d["t1"])
        if None in (tm, tp, treap, tcq, ttask):
            dropped["a step missing"] += 1
            continue
        after_post = ttask >= tp
        start_flush = max(ttask, tp)
        rows[n].append({
            "modify": tm - d["t0"], "to post": tp - tm,
            "to worker": ttask - tp if after_post else None,
            "flush": tcq - start_flush, "to reap": treap - tcq, "return": d["t1"] - treap,
            "total": d["t1"] - d["t0"], "other cpu": ctask != d["cpu"], "after post": after_post,
        })
    lines = [
        "| N | drains | " + " | ".join(STEPS) + " | traced total | untraced Rust | untraced floor "
        "| worker started after the post | worker on another CPU |",
        "|---:|---:|" + "---:|" * (len(STEPS) + 3) + "---:|---:|",
    ]
    for n in sorted(rows):
        rs = rows[n]
        med = [median([r[k] for r in rs if r[k] is not None]) for k in STEPS]
        un = samples["untraced"]
        lines.append(
            f"| {n} | {len(rs)} | " + " | ".join(f"{m:.1f}" for m in med)
            + f" | {median([r['total'] for r in rs]):.1f} | {median(un[(n, 'rust')]) / 1000:.1f}"
            + f" | {median(un[(n, 'floor')]) / 1000:.1f}"
            + f" | {sum(r['after post'] for r in rs)} | {sum(r['other cpu'] for r in rs)} |")
    if dropped:
        lines += ["", "not shown: " + ", ".join(f"{v} drains ({k})" for k, v in dropped.items())]
    table = "\n".join(lines) + "\n"
    with open(f"{out}/profile.md", "w") as f:
        f.write("# Direct-CQ ib_drain_rq on rxe, step by step (medians, µs)\n\n")
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
