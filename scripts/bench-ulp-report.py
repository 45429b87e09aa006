#!/usr/bin/env python3
"""Usage: scripts/bench-ulp-report.py CONSOLE-LOG OUTDIR [HOST-LINE]

make bench-ulp's report (issue #33): the in-tree ULPs' teardown and
recovery cycles over rxe0, timed in one boot of the bench kernel with the
exported ib_drain_*() routed in turn to the Rust drain (arm rust) and to
the C reference drain (arms c and c2: C twice, c2 against c is the
noise). The guest (bench_ulp in scripts/guest/rdma.sh) writes an ftrace
marker before and after each cycle,
    bench-ulp start|end VARIANT ARM ROUND POSITION CYCLE DRAIN_NS DRAIN_CALLS
and prints the trace's marker lines on the console after
"rust-drain: bench-ulp: "; the trace's timestamp (seconds.microseconds,
the global clock) gives the cycle's time, the difference of ib_core's
drain_ns and drain_calls between the two markers the time spent inside
ib_drain_*() during the cycle and the number of those calls.

Writes OUTDIR/samples.csv (a row per cycle) and OUTDIR/table.md, and
prints the table: per variant and arm the cycles, the median time of a
cycle and of the drains in it, the median number of drains; Rust/C and
C2/C, the ratios of the arms' medians, each with a 95% percentile
bootstrap interval (whole rounds resampled, seeded: the same log gives the
same table), and in how many rounds Rust's median is above C's; and the share of the cycles' time spent in drains
(sum over sum). A run that did not end ('rust-drain: bench-ulp: end,ok')
or a variant without cycles in an arm still gets the table of the complete
variants, with the problems under it and on stderr, and exits 1.
Timings never fail a test: this only reports.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

START = re.compile(r"rust-drain: bench-ulp: start,(\S+)")
# A marker line as the guest prints it: "rust-drain: bench-ulp: " and the
# trace line, "<task>-<pid> [cpu] <flags> <s>.<us>: tracing_mark_write: ...".
# Anchored at its end: a line the kernel's console output cut into is
# dropped (its cycle then lacks a marker and is counted as lost), not
# misread.
MARK = re.compile(r"rust-drain: bench-ulp: .*\s(\d+)\.(\d+): tracing_mark_write: bench-ulp (start|end) "
                  r"(\S+) (rust|c2|c) (\d+) (\d+) (\d+) (\d+) (\d+)\s*$")
# A phase marker (bench_phase in rdma.sh): the end of the cycle's phase NAME.
PHASE = re.compile(r"rust-drain: bench-ulp: .*\s(\d+)\.(\d+): tracing_mark_write: bench-ulp phase "
                   r"(\S+) (rust|c2|c) (\d+) (\d+) (\d+) (\S+) (\d+) (\d+)\s*$")
LAST_PHASE = "rest"  # from the last phase marker to the end marker
END_OK = "rust-drain: bench-ulp: end,ok"
FAILED = re.compile(r"rust-drain: bench-ulp: (failed .*?)\s*$")
ARMS = ("rust", "c", "c2")
BOOTSTRAP = 2000


@dataclass(frozen=True)
class Mark:
    ts_ns: int
    position: int
    drain_ns: int
    calls: int


@dataclass(frozen=True)
class Cycle:
    variant: str
    arm: str
    round: int
    position: int
    cycle: int
    start_ns: int  # the start marker's timestamp
    wall_ns: int
    drain_ns: int
    calls: int
    # (phase, ms, drain ms): from the previous marker to each phase marker,
    # the last one to the end marker (LAST_PHASE)
    phases: tuple[tuple[str, float, float], ...] = ()


@dataclass
class Run:
    cycles: list[Cycle] = field(default_factory=list)
    lost: int = 0  # markers without their pair
    ok: bool = False  # the guest printed end,ok
    failed: list[str] = field(default_factory=list)  # its "failed ..." lines
    params: dict[str, str] = field(default_factory=dict)  # of its start line


class ReportError(Exception):
    pass


def start_params(text: str) -> dict[str, str]:
    """The start line's "rounds=R,cycles=K,ulps=a,b,date=D": a word
    without "=" belongs to the value before it (ulps' list)."""
    params: dict[str, str] = {}
    key = ""
    for word in text.split(","):
        if "=" in word:
            key, _, value = word.partition("=")
            params[key] = value
        elif key:
            params[key] += "," + word
    return params


def parse(lines: Iterable[str]) -> Run:
    """The cycles of a console log: each start marker paired with the end
    marker of the same (variant, arm, round, cycle)."""
    run = Run()
    marks: dict[tuple[str, str, str, int, int], Mark] = {}  # (kind, variant, arm, round, cycle)
    phases: dict[tuple[str, str, int, int], list[tuple[int, str, int]]] = {}  # (ts, name, drain_ns)
    for line in lines:
        line = line.rstrip("\r\n")
        if END_OK in line:
            run.ok = True
        m = START.search(line)
        if m:
            run.params = start_params(m.group(1))
            continue
        m = MARK.search(line)
        if m:
            sec, frac, kind, variant, arm = m.group(1, 2, 3, 4, 5)
            rnd, pos, cyc, dns, calls = (int(g) for g in m.group(6, 7, 8, 9, 10))
            key = (kind, variant, arm, rnd, cyc)
            mark = Mark(int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9]), pos, dns, calls)
            if key in marks and marks[key] != mark:
                raise ReportError(f"two different {kind} markers for {variant} {arm} round {rnd} cycle {cyc}")
            marks[key] = mark
            continue
        m = PHASE.search(line)
        if m:
            sec, frac, variant, arm = m.group(1, 2, 3, 4)
            rnd, cyc = int(m.group(5)), int(m.group(7))
            ts = int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
            phases.setdefault((variant, arm, rnd, cyc), []).append((ts, m.group(8), int(m.group(9))))
            continue
        m = FAILED.search(line)
        if m:
            run.failed.append(m.group(1))
    for (kind, variant, arm, rnd, cyc), s in marks.items():
        if kind != "start":
            continue
        e = marks.get(("end", variant, arm, rnd, cyc))
        if e is None:
            continue
        if e.ts_ns < s.ts_ns or e.drain_ns < s.drain_ns or e.calls < s.calls:
            raise ReportError(f"{variant} {arm} round {rnd} cycle {cyc}: its end marker is before its start")
        segs = []
        at, at_drain = s.ts_ns, s.drain_ns
        for ts, name, dns in list(dict.fromkeys(phases.get((variant, arm, rnd, cyc), []))) + [
                (e.ts_ns, LAST_PHASE, e.drain_ns)]:
            segs.append((name, (ts - at) / 1e6, (dns - at_drain) / 1e6))
            at, at_drain = ts, dns
        run.cycles.append(Cycle(variant, arm, rnd, s.position, cyc, s.ts_ns,
                                e.ts_ns - s.ts_ns, e.drain_ns - s.drain_ns, e.calls - s.calls, tuple(segs)))
    run.cycles.sort(key=lambda c: c.start_ns)
    run.lost = len(marks) - 2 * len(run.cycles)
    return run


def ratio(a: dict[int, list[float]], b: dict[int, list[float]],
          rng: random.Random) -> tuple[float, float, float]:
    """median(a) / median(b) over the rounds both have, and its 95%
    percentile bootstrap interval: whole rounds drawn, the same for a and
    b (a round's cycles are not independent: they ran together, in one
    order of the arms); NaN where b's median is 0 (no drains)."""
    nan = float("nan")
    rounds = sorted(set(a) & set(b))
    flat_a = [x for r in rounds for x in a[r]]
    flat_b = [x for r in rounds for x in b[r]]
    if not flat_b or statistics.median(flat_b) == 0:
        return nan, nan, nan
    est = statistics.median(flat_a) / statistics.median(flat_b)
    boot = []
    for _ in range(BOOTSTRAP):
        drawn = rng.choices(rounds, k=len(rounds))
        rb = statistics.median(x for r in drawn for x in b[r])
        if rb > 0:
            boot.append(statistics.median(x for r in drawn for x in a[r]) / rb)
    if not boot:
        return est, nan, nan
    boot.sort()
    lo = boot[round(0.025 * (len(boot) - 1))]
    hi = boot[round(0.975 * (len(boot) - 1))]
    return est, lo, hi


def by_round(cycles: Iterable[Cycle], value: str) -> dict[int, list[float]]:
    """A value of the cycles (wall_ns or drain_ns), by round."""
    out: dict[int, list[float]] = {}
    for c in cycles:
        out.setdefault(c.round, []).append(float(getattr(c, value)))
    return out


def slower_rounds(a: dict[int, list[float]], b: dict[int, list[float]]) -> str:
    """"k/n": in k of the n rounds both have, a's median is above b's."""
    rounds = sorted(set(a) & set(b))
    k = sum(statistics.median(a[r]) > statistics.median(b[r]) for r in rounds)
    return f"{k}/{len(rounds)}"


def fmt_ratio(r: tuple[float, float, float]) -> str:
    est, lo, hi = r
    if est != est:
        return "—"
    if lo != lo:
        return f"{est:.3f}"
    return f"{est:.3f} [{lo:.3f}, {hi:.3f}]"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f}"


def variants(run: Run) -> list[str]:
    """The variants in the order they ran."""
    return list(dict.fromkeys(c.variant for c in run.cycles))


def check(run: Run) -> list[str]:
    """What makes the run incomplete (it did not end, or a variant lacks
    an arm: that variant is left out of the tables); raises ReportError if
    there is nothing to report."""
    problems = []
    if not run.ok:
        why = "; ".join(run.failed) if run.failed else "no 'failed' line either: the guest stopped"
        problems.append(f"the run did not end ('{END_OK}' missing): {why}")
    if not run.cycles:
        raise ReportError("; ".join(problems + ["no cycle in the log"]))
    for v in variants(run):
        for arm in ARMS:
            if not any(c.variant == v and c.arm == arm for c in run.cycles):
                problems.append(f"variant {v} has no cycle in arm {arm}: left out")
                break
    if not complete(run):
        raise ReportError("; ".join(problems + ["no variant has cycles in every arm"]))
    return problems


def complete(run: Run) -> list[str]:
    """The variants with cycles in every arm, in the order they ran."""
    return [v for v in variants(run) if all(any(c.variant == v and c.arm == a for c in run.cycles) for a in ARMS)]


def table(run: Run, host: str, problems: Sequence[str] = ()) -> str:
    """table.md: a header, a row per variant, the notes."""
    rounds = run.params.get("rounds") or str(1 + max(c.round for c in run.cycles))
    per_arm = run.params.get("cycles") or str(1 + max(c.cycle for c in run.cycles))
    head = [
        "# make bench-ulp: ULP teardown and recovery cycles over rxe0, Rust drain vs C drain",
        "",
        f"Run: {run.params.get('date', 'date not in the log')}; {rounds} rounds of {per_arm} cycles per arm "
        f"(arms rust, c, c2 in a rotating order); ULPs {run.params.get('ulps', '?').replace(',', ', ')}.",
        "",
        host,
        "",
        "| variant | cycles rust / c / c2 | cycle ms, median: rust / c / c2 | Rust/C cycle [95%] "
        "| rounds Rust above C | C2/C cycle [95%] | drain ms per cycle, median: rust / c / c2 "
        "| Rust/C drain [95%] | C2/C drain [95%] | drains per cycle, median: rust / c / c2 "
        "| in drains: rust / c / c2 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = []
    for v in complete(run):
        by = {arm: [c for c in run.cycles if c.variant == v and c.arm == arm] for arm in ARMS}
        wall = {arm: [float(c.wall_ns) for c in cs] for arm, cs in by.items()}
        drain = {arm: [float(c.drain_ns) for c in cs] for arm, cs in by.items()}
        calls = {arm: [c.calls for c in cs] for arm, cs in by.items()}
        wall_r = {arm: by_round(cs, "wall_ns") for arm, cs in by.items()}
        drain_r = {arm: by_round(cs, "drain_ns") for arm, cs in by.items()}
        rng = random.Random(v)
        share = {arm: sum(drain[arm]) / sum(wall[arm]) if sum(wall[arm]) else 0.0 for arm in ARMS}
        rows.append(
            f"| {v} | {' / '.join(str(len(by[a])) for a in ARMS)} "
            f"| {' / '.join(ms(statistics.median(wall[a])) for a in ARMS)} "
            f"| {fmt_ratio(ratio(wall_r['rust'], wall_r['c'], rng))} "
            f"| {slower_rounds(wall_r['rust'], wall_r['c'])} "
            f"| {fmt_ratio(ratio(wall_r['c2'], wall_r['c'], rng))} "
            f"| {' / '.join(ms(statistics.median(drain[a])) for a in ARMS)} "
            f"| {fmt_ratio(ratio(drain_r['rust'], drain_r['c'], rng))} "
            f"| {fmt_ratio(ratio(drain_r['c2'], drain_r['c'], rng))} "
            f"| {' / '.join(f'{statistics.median(calls[a]):g}' for a in ARMS)} "
            f"| {' / '.join(f'{100 * share[a]:.1f}%' for a in ARMS)} |")
    notes = [
        "",
        "A cycle: from the marker before it to the marker after it (ftrace, global clock, µs). Drain time: "
        "ib_core's drain_ns over the cycle, the time inside the exported ib_drain_rq/sq/qp (either drain); "
        "drains: drain_calls over the cycle. Rust/C, C2/C: ratio of the arms' medians, in brackets its 95% "
        f"percentile bootstrap interval ({BOOTSTRAP} resamples of whole rounds, the same rounds for both arms); "
        "C2/C is C against itself: how far it is from 1 is the noise. Rounds Rust above C: in how many rounds "
        "Rust's median cycle is longer than C's. In drains: total drain time over total cycle time. "
        "Times are the guest's, under TCG.",
    ]
    if run.lost:
        notes.append(f"Markers without their pair (lines lost from the console, cycles not counted): {run.lost}.")
    if problems:
        notes.append("Incomplete run: " + "; ".join(problems) + ".")
    return "\n".join(head + rows + notes + phase_table(run)) + "\n"


def phase_table(run: Run) -> list[str]:
    """Where a cycle's time goes: per variant and phase (as bench_phase
    marked them), the median ms of the phase and of the drains in it, in
    the arms rust and c. Only the cycles with every phase marker count."""
    out = ["", "Where a cycle's time goes: each phase from the marker before it to its own "
           f"(the last, '{LAST_PHASE}', to the cycle's end), median ms of the phase and, in brackets, "
           "of the drains in it; only cycles whose markers all reached the console.", "",
           "| variant | phase | rust: ms [drains ms] | c: ms [drains ms] | Rust/C |", "|---|---|---:|---:|---:|"]
    for v in complete(run):
        names: tuple[str, ...] = ()
        for c in run.cycles:
            if c.variant == v and len(c.phases) > len(names):
                names = tuple(p[0] for p in c.phases)
        for i, name in enumerate(names):
            cells, med = [], []
            for arm in ("rust", "c"):
                segs = [c.phases[i] for c in run.cycles
                        if c.variant == v and c.arm == arm and tuple(p[0] for p in c.phases) == names]
                med.append(statistics.median(p[1] for p in segs) if segs else 0.0)
                cells.append(f"{med[-1]:.1f} [{statistics.median(p[2] for p in segs):.1f}]" if segs else "—")
            rc = f"{med[0] / med[1]:.3f}" if med[1] > 0 and cells[0] != "—" else "—"
            out.append(f"| {v} | {name} | {cells[0]} | {cells[1]} | {rc} |")
    return out


def write_samples(run: Run, path: str) -> None:
    with open(path, "w") as f:
        f.write("variant,arm,round,position,cycle,start_ns,cycle_ns,drain_ns,drain_calls\n")
        for c in run.cycles:
            f.write(f"{c.variant},{c.arm},{c.round},{c.position},{c.cycle},{c.start_ns},"
                    f"{c.wall_ns},{c.drain_ns},{c.calls}\n")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", metavar="CONSOLE-LOG", help="the bench-ulp guest's console log")
    parser.add_argument("out", metavar="OUTDIR", help="where to write samples.csv and table.md")
    parser.add_argument("host", metavar="HOST-LINE", nargs="?", default="Host: vCPU placement not given.",
                        help="the line that heads table.md (where the vCPU threads ran)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    log: str = args.log
    out: str = args.out
    host: str = args.host
    try:
        with open(log, errors="replace") as f:
            run = parse(f)
        problems = check(run)
    except ReportError as e:
        sys.exit(f"bench-ulp-report: {log}: {e}")
    os.makedirs(out, exist_ok=True)
    write_samples(run, f"{out}/samples.csv")
    text = table(run, host, problems)
    with open(f"{out}/table.md", "w") as f:
        f.write(text)
    print(text, end="")
    print(f"bench-ulp: {len(run.cycles)} cycles; {out}/samples.csv, {out}/table.md")
    if problems:
        sys.exit(f"bench-ulp-report: {log}: incomplete run: " + "; ".join(problems))


if __name__ == "__main__":
    main()
