#!/bin/sh
# Guest side of `make bench-profile`: the benchmark's direct-CQ sequence
# (Rust, the floor, C) at N = 0, 1 and 64, once untraced and then under
# ftrace with the events that mark each step of a drain, each run of
# rxe's worker and each time the benchmark's task is switched in, on rxe
# over dummy0 (set up by /init). Prints the probes' hit counts and the
# trace between marker lines for scripts/bench-profile.py.
# With rust_drain_profile=steps (make bench-steps): the cells that the
# command line's rdma_drain_bench.contexts= and depths= select, on the TSC
# clock, with the waits and the task's wake-ups as well, for
# scripts/bench-profile.py --steps.
# Usage: sh /profile.sh SAMPLES
T=/sys/kernel/tracing
samples=${1:-100}
. /rdma.sh

probe() {
	echo "$1" >>$T/kprobe_events || echo "rust-drain: profile: cannot add probe '$1'"
}

steps=""
grep -q 'rust_drain_profile=steps' /proc/cmdline && steps=1
# The direct context at N = 0, 1 and 64, unless the command line says (a
# module parameter may be given once).
cells=""
grep -q 'rdma_drain_bench\.contexts=' /proc/cmdline || cells="contexts=1"
grep -q 'rdma_drain_bench\.depths=' /proc/cmdline || cells="$cells depths=7"

echo "rust-drain: profile: untraced run"
# shellcheck disable=SC2086 # cells: one word per parameter
bench_insmod samples="$samples" $cells
rmmod rdma_drain_bench
echo "rust-drain: profile: traced run"
echo 0 >$T/tracing_on
echo >$T/trace
# One clock for all CPUs: steps of one drain run on both. The steps want
# nanoseconds: the TSC (the host's, at tsc_early_khz).
if [ -n "$steps" ]; then
	echo x86-tsc >$T/trace_clock
else
	echo global >$T/trace_clock
fi
echo 32768 >$T/buffer_size_kb
probe 'p:drain ib_core:ib_drain_rq'
probe 'r:drain_ret ib_core:ib_drain_rq'
probe 'p:cdrain ib_core:ib_drain_rq_c'
probe 'r:cdrain_ret ib_core:ib_drain_rq_c'
# Not for the steps: the C drain inlines ib_modify_qp(), so only Rust's
# would take these probes' time.
if [ -z "$steps" ]; then
	probe 'p:modify ib_core:ib_modify_qp'
	probe 'r:modify_ret ib_core:ib_modify_qp'
fi
probe 'p:rmodify rdma_rxe:rxe_modify_qp'
probe 'r:rmodify_ret rdma_rxe:rxe_modify_qp'
probe 'p:post rdma_rxe:rxe_post_recv'
probe 'r:post_ret rdma_rxe:rxe_post_recv'
probe 'p:task rdma_rxe:do_work'
probe 'r:task_ret rdma_rxe:do_work'
probe 'p:cqpost rdma_rxe:rxe_cq_post'
if [ -n "$steps" ]; then
	probe 'p:wait wait_for_completion'
	probe 'r64:wait_ret wait_for_completion'
	probe 'p:twait wait_for_completion_timeout'
	probe 'r64:twait_ret wait_for_completion_timeout'
	echo 'comm == "insmod"' >$T/events/sched/sched_wakeup/filter
	echo 1 >$T/events/sched/sched_wakeup/enable
fi
for e in "$T"/events/kprobes/*/enable; do
	echo 1 >"$e"
done
echo 'rc > 0' >$T/events/rdma_core/cq_poll/filter
# When the benchmark's task (in insmod's init_module) gets a CPU again.
echo 'next_comm == "insmod"' >$T/events/sched/sched_switch/filter
echo 1 >$T/events/sched/sched_switch/enable
echo 1 >$T/events/rdma_core/cq_poll/enable
echo 1 >$T/tracing_on
# shellcheck disable=SC2086 # as above
bench_insmod samples="$samples" $cells
echo 0 >$T/tracing_on
echo "rust-drain: profile: kprobe_profile begin"
cat $T/kprobe_profile
echo "rust-drain: profile: kprobe_profile end"
echo "rust-drain: profile: trace begin"
cat $T/trace
echo "rust-drain: profile: trace end"
