#!/bin/sh
# Guest side of `make bench-profile`: the benchmark's direct-CQ sequence
# (Rust, the floor, C) at N = 0, 1 and 64, once untraced and then under
# ftrace with the events that mark each step of a drain, each run of
# rxe's worker and each time the benchmark's task is switched in, on rxe
# over dummy0 (set up by /init). Prints the probes' hit counts and the
# trace between marker lines for scripts/bench-profile.py.
# Usage: sh /profile.sh SAMPLES
T=/sys/kernel/tracing
samples=${1:-100}
. /rdma.sh

probe() {
	echo "$1" >>$T/kprobe_events || echo "rust-drain: profile: cannot add probe '$1'"
}

echo "rust-drain: profile: untraced run"
bench_insmod samples="$samples" contexts=1 depths=7
rmmod rdma_drain_bench
echo "rust-drain: profile: traced run"
echo 0 >$T/tracing_on
echo >$T/trace
# One clock for all CPUs: steps of one drain run on both.
echo global >$T/trace_clock
echo 32768 >$T/buffer_size_kb
probe 'p:drain ib_core:ib_drain_rq'
probe 'r:drain_ret ib_core:ib_drain_rq'
probe 'p:cdrain ib_core:ib_drain_rq_c'
probe 'r:cdrain_ret ib_core:ib_drain_rq_c'
probe 'p:modify ib_core:ib_modify_qp'
probe 'r:modify_ret ib_core:ib_modify_qp'
probe 'p:rmodify rdma_rxe:rxe_modify_qp'
probe 'r:rmodify_ret rdma_rxe:rxe_modify_qp'
probe 'p:post rdma_rxe:rxe_post_recv'
probe 'r:post_ret rdma_rxe:rxe_post_recv'
probe 'p:task rdma_rxe:do_work'
probe 'r:task_ret rdma_rxe:do_work'
probe 'p:cqpost rdma_rxe:rxe_cq_post'
for e in drain drain_ret cdrain cdrain_ret modify modify_ret rmodify \
	rmodify_ret post post_ret task task_ret cqpost; do
	echo 1 >$T/events/kprobes/$e/enable
done
echo 'rc > 0' >$T/events/rdma_core/cq_poll/filter
# When the benchmark's task (in insmod's init_module) gets a CPU again.
echo 'next_comm == "insmod"' >$T/events/sched/sched_switch/filter
echo 1 >$T/events/sched/sched_switch/enable
echo 1 >$T/events/rdma_core/cq_poll/enable
echo 1 >$T/tracing_on
bench_insmod samples="$samples" contexts=1 depths=7
echo 0 >$T/tracing_on
echo "rust-drain: profile: kprobe_profile begin"
cat $T/kprobe_profile
echo "rust-drain: profile: kprobe_profile end"
echo "rust-drain: profile: trace begin"
cat $T/trace
echo "rust-drain: profile: trace end"
