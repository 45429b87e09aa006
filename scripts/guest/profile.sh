#!/bin/sh
# Guest side of `make bench-profile`: the direct-CQ drain (Rust) and the
# floor, once untraced and then under ftrace with the events that mark each
# step of one drain, on rxe over dummy0 (set up by /init). Prints the trace
# between two marker lines for scripts/bench-profile.py.
# Usage: sh /profile.sh SAMPLES
T=/sys/kernel/tracing
samples=${1:-100}
bench=$(find /lib/modules/*/updates -name rdma_drain_bench.ko)

probe() {
	echo "$1" >>$T/kprobe_events || echo "rust-drain: profile: cannot add probe '$1'"
}

echo "rust-drain: profile: untraced run"
insmod "$bench" samples="$samples" direct_only=1
rmmod rdma_drain_bench
echo "rust-drain: profile: traced run"
echo 0 >$T/tracing_on
echo >$T/trace
# One clock for all CPUs: steps of one drain run on both.
echo global >$T/trace_clock
echo 32768 >$T/buffer_size_kb
probe 'p:drain ib_core:ib_drain_rq'
probe 'r:drain_ret ib_core:ib_drain_rq'
probe 'r:modify_ret ib_core:ib_modify_qp'
probe 'p:post rdma_rxe:rxe_post_recv'
probe 'p:task rdma_rxe:do_work'
probe 'p:cqpost rdma_rxe:rxe_cq_post'
for e in drain drain_ret modify_ret post task cqpost; do
	echo 1 >$T/events/kprobes/$e/enable
done
echo 'workqueue == "rxe_wq"' >$T/events/workqueue/workqueue_queue_work/filter
echo 1 >$T/events/workqueue/workqueue_queue_work/enable
echo 'rc > 0' >$T/events/rdma_core/cq_poll/filter
echo 1 >$T/events/rdma_core/cq_poll/enable
echo 1 >$T/tracing_on
insmod "$bench" samples="$samples" direct_only=1
echo 0 >$T/tracing_on
echo "rust-drain: profile: trace begin"
cat $T/trace
echo "rust-drain: profile: trace end"
