#!/usr/bin/env python3
"""Usage: scripts/bench-steps.py CONSOLE-LOG OUTDIR [HOST-LINE]

Turn the ftrace of `make bench-steps` into OUTDIR/steps.md, headed by
HOST-LINE. The guest ran one cell of the benchmark, untraced and then
traced on the TSC clock; it must be one non-direct cell at N=0 (softirq
by default), where the marker is the only completion and the drain
sleeps. For each traced drain, Rust (ib_drain_rq) and C (ib_drain_rq_c,
both C arms), warm-up included, the time between consecutive steps, as
medians:

  entry        the drain entered (a kprobe, as each step's)
  rmodify      rxe_modify_qp() entered, and its return (rmodify_ret)
  post         the marker's rxe_post_recv() entered, and its return
  wait         wait_for_completion_timeout() (Rust) or
               wait_for_completion() (C) entered
  cqpost       rxe_cq_post() of the marker's completion, on any CPU (the
               first after the post: it may come before the wait)
  cq_poll      the core's poll that reaped it (rdma_core:cq_poll)
  complete     complete() or complete_all() on that poll's CPU (the first
               after the poll: another caller's may come first)
  wakeup       sched_wakeup of a task named insmod (the drain's)
  switch_in    insmod on a CPU again (sched_switch)
  wait_ret     the wait returned
  ret          the drain returned

The drain's own task runs entry to rmodify, rmodify_ret to post, post_ret
to wait (the drains' code and calls), switch_in to wait_ret (the
scheduler, and Rust's timed wait cancelling its timer) and wait_ret to
ret; the other steps cross CPUs and are noisier. Timings never fail
anything.
"""

from __future__ import annotations

import collections
import re
import statistics
import sys

EV = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+(\d+):\s+(\w+):(.*)$")
SAMPLE = re.compile(r"rdma_drain_bench: sample,(\w+),(\d+),(\w+),(\d+),(\d+)")
KHZ = re.compile(r"tsc_early_khz=(\d+)")
ARMS = {"drain": ("rust", "drain_ret"), "cdrain": ("c", "cdrain_ret")}
# (time in us, pid, CPU, event name)
Event = tuple[float, int, int, str]


def parse(lines: list[str]) -> tuple[list[Event], dict[tuple[str, str], list[float]]]:
    """The traced events, and the samples (us) of each run and arm."""
    khz = next((int(m[1]) for m in map(KHZ.search, lines) if m), 0)
    if not khz:
        sys.exit("bench-steps: no tsc_early_khz= on the command line")
    events: list[Event] = []
    samples: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    run, tracing = "", False
    for line in lines:
        if "profile: untraced run" in line:
            run = "untraced"
        elif "profile: traced run" in line:
            run = "traced"
        elif "profile: trace begin" in line:
            tracing = True
        elif "profile: trace end" in line:
            tracing = False
        if m := SAMPLE.search(line):
            if run:
                samples[(run, m[3])].append(int(m[5]) / 1000)
        elif tracing and (m := EV.match(line)):
            events.append((int(m[4]) * 1000 / khz, int(m[2]), int(m[3]), m[5]))
    return events, samples


def steps(events: list[Event]) -> dict[str, dict[str, list[float]]]:
    """Per arm, per step ("a -> b"), the times (us) of each drain."""
    out: dict[str, dict[str, list[float]]] = {"rust": collections.defaultdict(list),
                                              "c": collections.defaultdict(list)}
    i = 0
    while i < len(events):
        t0, pid, cpu0, name = events[i]
        if name not in ARMS:
            i += 1
            continue
        arm, ret = ARMS[name]
        j = next((k for k in range(i + 1, len(events))
                  if events[k][3] == ret and events[k][1] == pid), None)
        if j is None:
            i += 1
            continue
        win = events[i:j + 1]

        def first(names: tuple[str, ...], after: float, own: bool = False,
                  cpu: int | None = None) -> Event | None:
            return next((e for e in win if e[0] >= after and e[3] in names
                         and (not own or e[1] == pid)
                         and (cpu is None or e[2] == cpu)), None)

        marks: list[tuple[str, Event | None]] = [("entry", win[0])]
        last = t0

        def mark(step: str, ev: Event | None) -> None:
            nonlocal last
            marks.append((step, ev))
            if ev:
                last = ev[0]

        for step, names in [("rmodify", ("rmodify",)),
                            ("rmodify_ret", ("rmodify_ret",)),
                            ("post", ("post",))]:
            mark(step, first(names, last, True))
        posted = last
        mark("post_ret", first(("post_ret",), last, True))
        mark("wait", first(("twait", "wait"), last, True))
        # The marker's flush may land before the task enters the wait.
        cqpost = first(("cqpost",), posted)
        mark("cqpost", cqpost)
        poll = first(("cq_poll",), cqpost[0] if cqpost else last)
        mark("cq_poll", poll)
        mark("complete", poll and first(("compl", "compl_all"), poll[0], cpu=poll[2]))
        mark("wakeup", first(("sched_wakeup",), last))
        mark("switch_in", first(("sched_switch",), last))
        mark("wait_ret", first(("twait_ret", "wait_ret"), last, True))
        marks.append(("ret", win[-1]))
        for (a, ea), (b, eb) in zip(marks, marks[1:]):
            if ea and eb:
                out[arm][f"{a} -> {b}"].append(eb[0] - ea[0])
        out[arm]["total"].append(win[-1][0] - t0)
        i = j + 1
    return out


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}" if xs else "—"


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    cells = {(m[1], m[2]) for m in map(SAMPLE.search, lines) if m}
    if len(cells) != 1 or next(iter(cells))[0] == "Direct" or next(iter(cells))[1] != "0":
        sys.exit(f"bench-steps: want one non-direct cell at N=0, got {sorted(cells)}")
    events, samples = parse(lines)
    res = steps(events)
    if not res["rust"]["total"] or not res["c"]["total"]:
        sys.exit("bench-steps: no traced Rust or C drain in the log")
    ctx, n = next(iter(cells))
    out = [f"# ib_drain_rq step by step: Rust vs C, {ctx} N={n}", ""]
    if len(sys.argv) > 3:
        out += [sys.argv[3], ""]
    out += ["| run | " + " | ".join(a for a in ("rust", "c", "c2", "floor")) + " |",
            "|---|---:|---:|---:|---:|"]
    for run in ("untraced", "traced"):
        out.append(f"| {run} median (us) | "
                   + " | ".join(med(samples.get((run, a), [])) for a in ("rust", "c", "c2", "floor"))
                   + " |")
    out += ["", "| step | Rust median (us) | C median (us) | Rust − C | drains Rust / C |",
            "|---|---:|---:|---:|---|"]
    for k in res["rust"]:
        r, c = res["rust"][k], res["c"].get(k, [])
        diff = f"{statistics.median(r) - statistics.median(c):+.2f}" if r and c else "—"
        out.append(f"| {k} | {med(r)} | {med(c)} | {diff} | {len(r)} / {len(c)} |")
    text = "\n".join(out) + "\n"
    with open(f"{sys.argv[2]}/steps.md", "w", encoding="utf-8") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
