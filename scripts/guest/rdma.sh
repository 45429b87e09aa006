# shellcheck shell=sh
# Helpers the guest's RDMA suites share (nvme.sh, reload.sh): the
# cq_drain_complete tracepoint, and waiting for rxe0's port.

TRACE=/sys/kernel/tracing

# Starts counting cq_drain_complete events from zero.
trace_on() {
	echo 0 >$TRACE/tracing_on && echo >$TRACE/trace &&
		echo 1 >$TRACE/events/rdma_core/cq_drain_complete/enable &&
		echo 1 >$TRACE/tracing_on
}

# Stops tracing; fails unless at least $1 cq_drain_complete events were seen.
drains_traced() {
	echo 0 >$TRACE/tracing_on
	c=$(grep -c 'cq_drain_complete' $TRACE/trace)
	echo "cq_drain_complete events: $c"
	[ "$c" -ge "$1" ]
}

# Waits at most 10 s for rxe0's port to become ACTIVE.
rxe_wait_active() {
	for _ in $(seq 100); do
		rdma link show rxe0/1 2>/dev/null | grep -q 'state ACTIVE' && return 0
		sleep 0.1
	done
	echo "rxe0 not ACTIVE after 10 s"
	return 1
}
