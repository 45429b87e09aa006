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

# As trace_on, and each cq_drain_complete event records its stack too.
trace_stacks_on() {
	trace_on && echo stacktrace >$TRACE/events/rdma_core/cq_drain_complete/trigger
}

trace_stacks_off() {
	echo 0 >$TRACE/tracing_on
	echo '!stacktrace' >$TRACE/events/rdma_core/cq_drain_complete/trigger
}

# drains_from FN...: how many traced cq_drain_complete events have a stack
# that holds every function FN (the stacktrace entry follows its event).
drains_from() {
	awk -v fns="$*" '
		function done_event() {
			if (!ev) return
			ok = 1
			for (i = 1; i <= nf; i++) if (!(f[i] in st)) ok = 0
			hits += ok
			ev = 0
			split("", st)
		}
		BEGIN { nf = split(fns, f, " ") }
		/ cq_drain_complete: / { done_event(); ev = 1; next }
		/^ => / { if (ev) { sub(/\+.*/, "", $2); st[$2] = 1 }; next }
		/<stack trace>/ { next }
		{ done_event() }
		END { done_event(); print hits + 0 }' $TRACE/trace
}

# drains_at_least N FN...: at least N traced drains had every FN on their
# stack.
drains_at_least() {
	want=$1
	shift
	c=$(drains_from "$@")
	echo "$c drains with $* on their stack, want at least $want"
	[ "$c" -ge "$want" ]
}

# drains_exactly N FN...: exactly N did (where the ULP's teardown fixes
# the number: one drain per queue of each connection it closed).
drains_exactly() {
	want=$1
	shift
	c=$(drains_from "$@")
	echo "$c drains with $* on their stack, want $want"
	[ "$c" = "$want" ]
}
