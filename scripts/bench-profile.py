#!/usr/bin/env python3
"""Usage: scripts/bench-profile.py [--steps] CONSOLE-LOG OUTDIR [HOST-LINE]

Turn the ftrace of `make bench-profile` into OUTDIR/profile.md, headed by
HOST-LINE (scripts/bench.sh: where the vCPU threads ran). The guest
ran the benchmark's direct-CQ sequence (Rust, the floor, C at each depth),
untraced and then traced. For each traced Rust drain (ib_drain_rq entry to
return, on the benchmark's task) the time between its steps, as medians
over the drains of each depth:

  to modify   entry -> rxe_modify_qp() entered
  modify      -> rxe_modify_qp() (to ERR) returned
  to post     -> rxe_post_recv() of the marker entered
  post        -> rxe_post_recv() returned
  to worker   -> the do_work() run that posted the marker's completion
                 started (counted only where it started after the post)
  flush       -> rxe_cq_post() of the marker's completion, from the later
                 of the post and that run's start
  to reap     -> the drain's poll that returned it (rdma_core:cq_poll on
                 the drain's task)
  return      -> ib_drain_rq returned

and how the wait ended: the marker's completion to the drain's task on a
CPU again (sched_switch) and on to the reaping poll; for the floor, its
last flush completion to its waiting task on a CPU.

and, for the Rust drain, the floor and the C drain alike, the
rxe_modify_qp() and the marker's rxe_post_recv() spans: how often they
stalled (over 0.5 ms and 0.2 ms), and how often rxe's worker ran on
another CPU during a stalled one. Beside them the medians of the untraced
run (same boot, before the probes were set). Last, for each arm, whether
the worker run that posted its last completion started on the CPU the arm
entered on or on another, and how long after the modify in each case.

With --steps (make bench-steps): OUTDIR/steps.md instead. The guest ran
one cell, which must be a non-direct one at N=0 (softirq by default),
where the marker is the only completion and the drain sleeps, with the
trace on the TSC clock. For each traced drain, Rust (ib_drain_rq, both
Rust arms) and C (ib_drain_rq_c, both C arms), warm-up included, the time between
consecutive steps, as medians:

  entry        the drain entered
  rmodify      rxe_modify_qp() entered, and its return (rmodify_ret)
  post         the marker's rxe_post_recv() entered, and its return
  wait         wait_for_completion_timeout() (Rust) or
               wait_for_completion() (C) entered
  cqpost       rxe_cq_post() of the marker's completion, on any CPU (the
               first after the post: it may come before the wait)
  cq_poll      the core's poll that reaped it (rdma_core:cq_poll)
  wakeup       sched_wakeup of a task named insmod (the drain's)
  switch_in    insmod on a CPU again (sched_switch)
  wait_ret     the wait returned
  ret          the drain returned

The drain's own task runs entry to rmodify, rmodify_ret to post, post_ret
to wait (the drains' code and calls), switch_in to wait_ret (the
scheduler, and Rust's timed wait cancelling its timer) and wait_ret to
ret; the other steps cross CPUs and are noisier.

Timings never fail anything.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from typing import Any

EV = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+):\s+(\w+):(.*)$")
ENTRIES = re.compile(r"entries-in-buffer/entries-written: (\d+)/(\d+)")
SAMPLE = re.compile(r"rdma_drain_bench: sample,(\w+),(\d+),(\w+),(\d+),(\d+)")
KHZ = re.compile(r"tsc_early_khz=(\d+)")
STEPS = ["to modify", "modify", "to post", "post", "to worker", "flush", "to reap", "return"]
STALLED_MODIFY, STALLED_POST = 500, 200
ARMS = ["rust", "floor", "c"]
# A trace event: (time in us, pid, CPU, event name, the rest of the line).
Event = tuple[float, int, int, str, str]
# One run of rxe's do_work(): (start, end, CPU, pid).
Run = tuple[float, float, int, int]
# Per run ("untraced", "traced"): per (depth, implementation), the samples (ns).
Samples = dict[str, collections.defaultdict[tuple[int, str], list[int]]]


def median(xs: Iterable[float | None]) -> float:
    known = [x for x in xs if x is not None]
    return statistics.median(known) if known else float("nan")


def fmt(x: float) -> str:
    return "—" if x != x else f"{x:.0f}"


def read(log: str) -> tuple[list[Event], Samples, set[tuple[str, int]]]:
    """The traced events (times in us: the trace clock's seconds, or TSC
    ticks at the command line's tsc_early_khz), the samples, and the cells
    (context, depth) they come from."""
    events: list[Event] = []
    cells: set[tuple[str, int]] = set()
    khz = 0
    samples: Samples = {"untraced": collections.defaultdict(list), "traced": collections.defaultdict(list)}
    run: str | None = None
    inside, lost, probes = False, 0, False
    kept: tuple[int, int] | None = None
    misses: list[str] = []
    seen: set[tuple[str, str, str, str, str]] = set()
    with open(log, errors="replace") as f:
        for line in f:
            if not khz and (k := KHZ.search(line)):
                khz = int(k.group(1))
            if "rust-drain: profile: kprobe_profile begin" in line:
                probes = True
                continue
            if "rust-drain: profile: kprobe_profile end" in line:
                probes = False
                continue
            if probes:
                f3 = line.split()
                if len(f3) == 3 and f3[2].isdigit() and int(f3[2]):
                    misses.append(f"{f3[0]}: {f3[2]} misses")
                continue
            m = ENTRIES.search(line)
            if m and inside:
                kept = (int(m.group(1)), int(m.group(2)))
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
            if m and run and not inside:
                key = (run, m.group(1), m.group(2), m.group(3), m.group(4))
                if key in seen:
                    sys.exit(f"bench-profile: sample {key} twice in {log}")
                seen.add(key)
                cells.add((m.group(1), int(m.group(2))))
                samples[run][(int(m.group(2)), m.group(3))].append(int(m.group(5)))
            if inside:
                if "LOST" in line:
                    lost += 1
                m = EV.match(line)
                if m:
                    ts = m.group(4)
                    if "." in ts:
                        t = float(ts) * 1e6
                    elif khz:
                        t = int(ts) * 1000 / khz
                    else:
                        sys.exit("bench-profile: TSC timestamps, and no tsc_early_khz= on the command line")
                    events.append((t, int(m.group(2)), int(m.group(3)), m.group(5), m.group(6)))
    if not events:
        sys.exit("bench-profile: no trace in " + log)
    if lost or (kept and kept[0] != kept[1]):
        sys.exit(f"bench-profile: the trace lost events ({lost} LOST lines, entries kept/written {kept}):"
                 " a bigger buffer_size_kb")
    if misses:
        sys.exit("bench-profile: probes missed hits (" + ", ".join(misses) + "): a bigger maxactive")
    events.sort()
    return events, samples, cells


def worker_runs(events: Iterable[Event]) -> list[Run]:
    """rxe's do_work() runs: (start, end, cpu, pid)."""
    runs: list[Run] = []
    open_: dict[int, tuple[float, int]] = {}
    for t, pid, cpu, name, _ in events:
        if name == "task":
            open_[pid] = (t, cpu)
        elif name == "task_ret" and pid in open_:
            s, c = open_.pop(pid)
            runs.append((s, t, c, pid))
    return runs


def arms(events: Iterable[Event], bench: int | None) -> list[tuple[str, list[Event]]]:
    """The benchmark task's timed arms in order: (kind, events) with kind
    rust, c or floor. Around them the benchmark sets each QP up (a modify to
    INIT) and tears it down (OwnedQp's drop drains both queues, in the same
    Rust code but not through ib_drain_rq); the floor's modify(ERR) is the
    one that returns to `Qp::set_state`."""
    out: list[tuple[str, list[Event]]] = []
    cur: tuple[str, list[Event], str] | None = None  # (kind, its events, the event that ends it)
    since_modify: list[Event] | None = None
    for e in events:
        t, pid, cpu, name, text = e
        if pid != bench:
            continue
        if cur is not None:
            cur[1].append(e)
            if name == cur[2]:
                out.append((cur[0], cur[1]))
                cur = None
        elif name == "drain":
            cur = ("rust", [e], "drain_ret")
        elif name == "cdrain":
            cur = ("c", [e], "cdrain_ret")
        elif name == "modify":
            since_modify = [e]
        elif since_modify is not None:
            since_modify.append(e)
            if name == "modify_ret":
                if "set_state" in text:
                    out.append(("floor", since_modify))
                since_modify = None
    return out


def worker_elsewhere(a: float, b: float, cpu: int, runs: Iterable[Run]) -> bool:
    """rxe's worker ran on a CPU other than `cpu` during [a, b]."""
    return any(c != cpu and s < b and e > a for s, e, c, _ in runs)


def steps(events: list[Event]) -> dict[str, dict[str, list[float]]]:
    """For --steps: per arm, per step ("a -> b"), each drain's time (us)."""
    out: dict[str, dict[str, list[float]]] = {"rust": collections.defaultdict(list),
                                              "c": collections.defaultdict(list)}
    entries = {"drain": ("rust", "drain_ret"), "cdrain": ("c", "cdrain_ret")}
    for i, (t0, pid, _, name, _) in enumerate(events):
        if name not in entries:
            continue
        arm, ret = entries[name]
        j = next((k for k in range(i + 1, len(events)) if events[k][3] == ret and events[k][1] == pid), None)
        if j is None:
            continue
        win = events[i:j + 1]

        def first(names: tuple[str, ...], after: float, own: bool = False) -> Event | None:
            return next((e for e in win if e[0] >= after and e[3] in names and (not own or e[1] == pid)), None)

        marks: list[tuple[str, Event | None]] = [("entry", win[0])]
        last = posted = t0
        for step, names, own in [("rmodify", ("rmodify",), True), ("rmodify_ret", ("rmodify_ret",), True),
                                 ("post", ("post",), True), ("post_ret", ("post_ret",), True),
                                 ("wait", ("twait", "wait"), True),
                                 # The marker's flush may land before the task waits.
                                 ("cqpost", ("cqpost",), False), ("cq_poll", ("cq_poll",), False),
                                 ("wakeup", ("sched_wakeup",), False), ("switch_in", ("sched_switch",), False),
                                 ("wait_ret", ("twait_ret", "wait_ret"), True)]:
            e = first(names, posted if step == "cqpost" else last, own)
            marks.append((step, e))
            if e:
                last = e[0]
                posted = last if step == "post" else posted
        marks.append(("ret", win[-1]))
        for (a, ea), (b, eb) in zip(marks, marks[1:]):
            if ea and eb:
                out[arm][f"{a} -> {b}"].append(eb[0] - ea[0])
        out[arm]["total"].append(win[-1][0] - t0)
    return out


def steps_report(log: str, out: str, host: str) -> None:
    """--steps: OUTDIR/steps.md."""
    events, samples, cells = read(log)
    (ctx, n), = cells if len(cells) == 1 else [("", -1)]
    if ctx in ("", "Direct") or n != 0:
        sys.exit(f"bench-profile: --steps wants one non-direct cell at N=0, got {sorted(cells)}")
    res = steps(events)
    if not res["rust"]["total"] or not res["c"]["total"]:
        sys.exit("bench-profile: no traced Rust or C drain in " + log)

    def med(xs: Sequence[float]) -> str:
        return f"{statistics.median(xs):.2f}" if xs else "—"

    lines = [f"# ib_drain_rq step by step: Rust vs C, {ctx} N={n}", "", host, "",
             "| run | rust | c | c2 | rust2 | floor |", "|---|---:|---:|---:|---:|---:|"]
    for run in ("untraced", "traced"):
        lines.append(f"| {run} median (us) | "
                     + " | ".join(med([x / 1000 for x in samples[run][(n, a)]])
                                  for a in ("rust", "c", "c2", "rust2", "floor"))
                     + " |")
    lines += ["", "| step | Rust median (us) | C median (us) | Rust − C | drains Rust / C |",
              "|---|---:|---:|---:|---|"]
    for k, r in res["rust"].items():
        c = res["c"].get(k, [])
        diff = f"{statistics.median(r) - statistics.median(c):+.2f}" if r and c else "—"
        lines.append(f"| {k} | {med(r)} | {med(c)} | {diff} | {len(r)} / {len(c)} |")
    text = "\n".join(lines) + "\n"
    with open(f"{out}/steps.md", "w", encoding="utf-8") as f:
        f.write(text)
    print(text, end="")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", action="store_true",
                        help="write steps.md: Rust's and C's drains of one cell (make bench-steps)")
    parser.add_argument("log", metavar="CONSOLE-LOG", help="the console log of `make bench-profile`'s guest")
    parser.add_argument("out", metavar="OUTDIR", help="where to write profile.md")
    parser.add_argument("host", metavar="HOST-LINE", nargs="?", default="Host: vCPU placement not given.",
                        help="the line that heads profile.md (scripts/bench.sh: where the vCPU threads ran)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    log: str = args.log
    out: str = args.out
    host: str = args.host
    os.makedirs(out, exist_ok=True)
    if args.steps:
        steps_report(log, out, host)
        return
    events, samples, _ = read(log)
    bench = next((pid for _, pid, _, name, _ in events if name == "drain"), None)
    runs = worker_runs(events)
    found = arms(events, bench)
    traced = samples["traced"]
    depths = sorted({n for n, imp in traced if imp == "rust"})
    per_depth = {n: len(traced[(n, "rust")]) for n in depths}
    # The sequence: for each depth, warm-up samples, then the measured ones;
    # each sample is Rust, floor, C or floor, Rust, C (rdma_drain_bench.rs).
    kinds = collections.Counter(k for k, _ in found)
    measured = sum(per_depth.values())
    warm = (kinds["rust"] - measured) // len(depths) if depths else -1
    depth_of: list[int | None] = []  # each arm's depth, None for a warm-up's
    for n in depths:
        depth_of += [None] * (3 * warm) + [n] * (3 * per_depth[n])
    if (set(kinds) != set(ARMS) or len(set(kinds.values())) != 1 or warm != 5
            or len(found) != len(depth_of)
            or any(traced[(n, k)] and len(traced[(n, k)]) != per_depth[n] for n in depths for k in ARMS)):
        sys.exit(f"bench-profile: arms traced {dict(kinds)}, samples {per_depth}: cannot match them")
    # The benchmark task being switched in (sched_switch, filtered on it),
    # and its own events, which end a floor's wait for its completion.
    woken = [t for t, _, _, e, x in events if e == "sched_switch" and f"next_pid={bench} " in x + " "]
    own = [t for t, p, _, e, _ in events if p == bench and e != "sched_switch"]
    # Per depth (steps) or per (depth, arm): a row of named times per arm;
    # the wake-up's two times (None where not seen); the four phases and
    # whether the worker started on the arm's CPU.
    steps: collections.defaultdict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    spans: collections.defaultdict[tuple[int, str], list[dict[str, Any]]] = collections.defaultdict(list)
    wakes: collections.defaultdict[tuple[int, str], list[tuple[float, float | None] | None]] = \
        collections.defaultdict(list)
    phases: collections.defaultdict[tuple[int, str], list[tuple[float, float, float, float, bool]]] = \
        collections.defaultdict(list)
    dropped: collections.Counter[str] = collections.Counter()
    for (kind, ev), n in zip(found, depth_of):
        if n is None:
            continue
        t0, cpu, t1 = ev[0][0], ev[0][2], ev[-1][0]

        def first(name: str, after: float = t0) -> float | None:
            return next((t for t, _, _, e, _ in ev if e == name and t >= after), None)

        tmod, tmr = first("rmodify"), first("rmodify_ret")
        tp = first("post", tmr or t0) if kind != "floor" else None
        tpr = first("post_ret", tp or t0) if kind != "floor" else None
        if None in (tmod, tmr) or (kind != "floor" and None in (tp, tpr)):
            dropped[f"{kind}: a step missing"] += 1
            continue
        row = {"modify": tmr - tmod, "post": tpr - tp if tp else None}
        row["stalled"] = [(a, b) for a, b, limit in ((tmod, tmr, STALLED_MODIFY), (tp, tpr, STALLED_POST))
                          if a is not None and b - a > limit]
        row["worker"] = any(worker_elsewhere(a, b, cpu, runs) for a, b in row["stalled"])
        if kind != "floor":
            polls = [t for t, _, _, e, _ in ev if e == "cq_poll"]
            treap = polls[-1] if polls else None
            posts = [(t, p) for t, p, _, e, _ in events if e == "cqpost" and t0 <= t <= (treap or t1)]
            tcq, wpid = posts[-1] if posts else (None, None)
            # The worker run that posted the marker's completion.
            run = next((r for r in runs if r[3] == wpid and r[0] <= tcq <= r[1]), None) if tcq else None
            if None in (treap, tcq, run):
                dropped[f"{kind}: a step missing"] += 1
                continue
            ttask = run[0]
            phases[(n, kind)].append((tmr - t0, ttask - tmr, tcq - ttask, t1 - tcq, run[2] == cpu))
        if kind == "rust":
            after_post = ttask >= tp
            row.update({
                "to modify": tmod - t0, "to post": tp - tmr,
                "to worker": ttask - tp if after_post else None,
                "flush": tcq - max(ttask, tp), "to reap": treap - tcq, "return": t1 - treap,
                "total": t1 - t0, "after post": after_post,
            })
            steps[n].append(row)
            wake = next((t for t in woken if tcq < t <= treap), None)
            wakes[(n, kind)].append((wake - tcq, treap - wake) if wake else None)
        elif kind == "floor" and n > 0:
            # The floor's waiter sleeps after its modify and is woken by the
            # softirq poller that consumed the last flush completion.
            until = next((t for t in own if t > t1), float("inf"))
            wake = next((t for t in woken if t1 < t < until), None)
            last, wpid = max(((t, p) for t, p, _, e, _ in events if e == "cqpost" and t0 <= t < (wake or 0)),
                             default=(None, None))
            # A completion after that switch-in: it was a return from
            # preemption, not the wake-up (only switch-ins are traced).
            if wake and any(e == "cqpost" and wake < t < until for t, _, _, e, _ in events):
                wake = None
            wakes[(n, kind)].append((wake - last, None) if wake and last else None)
            run = next((r for r in runs if r[3] == wpid and r[0] <= last <= r[1]), None) if last else None
            if run:
                phases[(n, kind)].append((tmr - t0, run[0] - tmr, last - run[0], wake - last, run[2] == cpu))
        spans[(n, kind)].append(row)
    un = samples["untraced"]
    lines = [
        "Rust drains (medians, µs; traced):",
        "",
        "| N | drains | " + " | ".join(STEPS) + " | traced total | total, no step stalled "
        "| total, a step stalled | worker started after the post |",
        "|---:|---:|" + "---:|" * (len(STEPS) + 3) + "---:|",
    ]
    for n in sorted(steps):
        rs = steps[n]
        lines.append(
            f"| {n} | {len(rs)} | " + " | ".join(fmt(median([r[k] for r in rs])) for k in STEPS)
            + f" | {fmt(median([r['total'] for r in rs]))}"
            + f" | {fmt(median([r['total'] for r in rs if not r['stalled']]))}"
            + f" | {fmt(median([r['total'] for r in rs if r['stalled']]))}"
            + f" | {sum(r['after post'] for r in rs)} |")
    lines += [
        "",
        f"rxe_modify_qp(ERR) and the marker's rxe_post_recv() in every arm (medians, µs; traced;"
        f" stalled: modify over {STALLED_MODIFY} µs, post over {STALLED_POST} µs):",
        "",
        "| N | arm | traced | modify | modify stalled | stalled modify | post | post stalled "
        "| stalled post | worker on another CPU in a stalled step | untraced median | untraced p25 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in depths:
        for kind in ARMS:
            rs = spans[(n, kind)]
            u = sorted(un[(n, kind)])
            mods = [r["modify"] for r in rs]
            posts = [r["post"] for r in rs if r["post"] is not None]
            smod = [m for m in mods if m > STALLED_MODIFY]
            spost = [p for p in posts if p > STALLED_POST]
            post = (f"{fmt(median(posts))} | {len(spost)} | {fmt(median(spost))}"
                    if kind != "floor" else "| |")
            lines.append(
                f"| {n} | {kind} | {len(rs)} | {fmt(median(mods))} | {len(smod)} | {fmt(median(smod))} "
                f"| {post} | {sum(r['worker'] for r in rs)} "
                f"| {fmt(median(u) / 1000) if u else '—'} | {fmt(u[len(u) // 4] / 1000) if u else '—'} |")
    lines += [
        "",
        "The wake-up at the end (medians, µs; traced): from rxe_cq_post() of the marker's"
        " completion (Rust) or of the last flush completion (floor) to the waiting task being"
        " switched in (sched_switch), and from there to the poll that reaped the marker (Rust):",
        "",
        "| N | Rust: completion to task on CPU | Rust: on CPU to reap | Rust drains woken after the completion "
        "| floor: last completion to task on CPU | floors woken after it |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    if not woken:
        lines.append("| (no sched_switch events in the trace) | | | | | |")
    for n in depths if woken else []:
        rw = [w for w in wakes[(n, "rust")] if w]
        fw = [w for w in wakes[(n, "floor")] if w]
        lines.append(
            f"| {n} | {fmt(median([a for a, _ in rw]))} | {fmt(median([b for _, b in rw]))} "
            f"| {len(rw)} of {len(wakes[(n, 'rust')])} | {fmt(median([a for a, _ in fw]))} "
            f"| {len(fw)} of {len(wakes[(n, 'floor')])} |" if n else
            f"| {n} | {fmt(median([a for a, _ in rw]))} | {fmt(median([b for _, b in rw]))} "
            f"| {len(rw)} of {len(wakes[(n, 'rust')])} | — | (no completion) |")
    lines += [
        "",
        "Rust and C against the floor, phase by phase (medians, µs; traced; a phase can be negative"
        " where rxe's worker started before the modify returned): from the drain's entry (Rust, C) or"
        " ib_modify_qp()'s (floor) until rxe_modify_qp(ERR) returned, to the start of the worker run"
        " that posted the last completion (the marker's, for a drain), to that rxe_cq_post(), and to"
        " the end: the drain's return (C's includes its 100 ms sleep) or the waiting task on a CPU"
        " again (floor):",
        "",
        "| N | arm | arms | to modify returned | to the worker's run | to the last completion | to the end |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    where = []
    for n in depths:
        for kind in ARMS:
            ps = phases[(n, kind)]
            if ps:
                lines.append(f"| {n} | {kind} | {len(ps)} | "
                             + " | ".join(fmt(median([p[i] for p in ps])) for i in range(4)) + " |")
                same = [p[1] for p in ps if p[4]]
                other = [p[1] for p in ps if not p[4]]
                where.append(f"| {n} | {kind} | {len(same)} | {fmt(median(same))} | {len(other)} "
                             f"| {fmt(median(other))} |")
    lines += [
        "",
        "Where that worker run started: on the CPU the drain (or the floor's modify) entered on, or"
        " on the other, and \"to the worker's run\" for each (medians, µs; traced):",
        "",
        "| N | arm | on the drain's CPU | to the worker's run there | on another CPU | to the worker's run there |",
        "|---:|---|---:|---:|---:|---:|",
    ] + where
    if dropped:
        lines += ["", "not shown: " + ", ".join(f"{v} arms ({k})" for k, v in dropped.items())]
    table = "\n".join(lines) + "\n"
    with open(f"{out}/profile.md", "w") as f:
        f.write("# Direct-CQ ib_drain_rq on rxe, step by step\n\n")
        f.write(host + "\n\n")
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
