# shellcheck shell=sh
# Helpers that init and the guest's suites (drivers/infiniband/tests/) share:
# the project's modules, the cq_drain_complete tracepoint, rxe0's port.

TRACE=/sys/kernel/tracing

# The KUnit test modules (drivers/infiniband/tests/Makefile), in the order
# init loads them and rdma_drain_teardown unloads them.
# rdma_drain_doctests_test is built only with CONFIG_RUST_KERNEL_DOCTESTS.
TEST_MODULES="rdma_drain_doctests_test rdma_drain_rxe_test rdma_drain_stress_test"

# mod_path NAME: the path of the project's module NAME.ko; nothing if it is
# not installed.
mod_path() { find /lib/modules/*/updates -name "$1.ko"; }

# test_modules: the path of each of TEST_MODULES that is installed, in
# that order.
test_modules() {
	for _m in $TEST_MODULES; do
		mod_path "$_m"
	done
}

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

# A second rxe device, rxe1 on dummy1 (dummy.numdummies=2), for the rxe
# suite's check that objects of two devices do not mix; rxe1_delete
# removes it again.
rxe1_add() {
	ip link set dummy1 up && rdma link add rxe1 type rxe netdev dummy1
}
rxe1_delete() {
	rdma link delete rxe1 &
	pid_ends_within 60 $! || { echo "rdma link delete rxe1 still waits after 60 s"; return 1; }
	wait $!
}

# The soft-iWARP device, siw0 on dummy2, for the suites on siw
# (rdma_drain_siw, rdma_drain_siw_srq, the ULPs over siw); siw0_delete
# removes it again. siw speaks TCP: between two addresses of this guest
# it goes through lo, which must be up (rxe loops back by itself).
siw0_add() {
	ip link set lo up && modprobe siw && ip link set dummy2 up &&
		rdma link add siw0 type siw netdev dummy2
}
siw0_delete() {
	rdma link delete siw0 &
	pid_ends_within 60 $! || { echo "rdma link delete siw0 still waits after 60 s"; return 1; }
	wait $!
}

# on_siw CMD...: runs CMD (a ULP's suite over siw) between siw0_add and
# siw0_delete; says so on the console if either fails.
on_siw() {
	siw0_add || { echo "rust-drain: siw0 could not be added"; return 1; }
	"$@"
	siw0_delete || echo "rust-drain: siw0 could not be deleted"
}

# pid_ends_within SECONDS PID: whether the child PID of this shell exits
# (or is a zombie, not reaped yet) within SECONDS.
pid_ends_within() {
	_i=0
	while [ -e "/proc/$2" ] && [ "$(cut -d' ' -f3 "/proc/$2/stat" 2>/dev/null)" != Z ]; do
		_i=$((_i + 1))
		[ "$_i" -gt "$1" ] && return 1
		sleep 1
	done
	return 0
}

# count_is RES N: `rdma resource show RES` lists N objects that
# kernel::infiniband made. (It cuts a kernel owner's name to 16 bytes:
# "comm [kernel::infiniba".)
count_is() {
	_owned=$(rdma resource show "$1") || { echo "rdma resource show $1 failed"; return 1; }
	c=$(printf '%s\n' "$_owned" | grep -c 'comm \[kernel::infiniba')
	echo "$c $1 objects of kernel::infiniband, want $2"
	[ "$c" = "$2" ] && return 0
	# On the console, not in the KTAP line: which objects they are.
	printf '%s\n' "$_owned" | grep 'comm \[kernel::infiniba' |
		sed 's/^/rust-drain: left: /' >/dev/console
	return 1
}

# owned RES: how many objects `rdma resource show RES` lists for
# kernel::infiniband; fails if rdma does.
owned() {
	_owned=$(rdma resource show "$1") || return 1
	printf '%s\n' "$_owned" | grep -c 'comm \[kernel::infiniba'
	return 0
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
# that holds every function FN. A stacktrace entry follows its event on the
# same CPU (ftrace merges the CPUs' buffers by time, so another CPU's
# entries may come between): each is matched by its [CPU] field.
drains_from() {
	awk -v fns="$*" '
		function cpu_of(i) {
			for (i = 1; i <= NF; i++) if ($i ~ /^\[[0-9]+\]$/) return $i
			return "?"
		}
		function finish(i, ok) {
			if (cur == "") return
			if (pend[cur]) {
				ok = 1
				for (i = 1; i <= nf; i++) if (!(f[i] in st)) ok = 0
				hits += ok
				pend[cur] = 0
			}
			cur = ""
			split("", st)
		}
		BEGIN { nf = split(fns, f, " ") }
		/^ => / { if (cur != "") { sub(/\+.*/, "", $2); st[$2] = 1 }; next }
		{ finish() }
		/ cq_drain_complete: / { pend[cpu_of()] = 1; next }
		/<stack trace>/ { cur = cpu_of() }
		END { finish(); print hits + 0 }' $TRACE/trace
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

# refusals: how many drain refusals ib_core has logged (they fire the
# tracepoint too, so a drain count alone cannot tell them from drains).
refusals() {
	dmesg | grep -cE 'ib_core: .*failed to drain|ib_drain: [0-9]+ callbacks suppressed'
}

# no_refusals_since N: no refusal was logged after refusals said N.
no_refusals_since() {
	c=$(refusals)
	echo "$((c - $1)) drain refusals logged during the suite"
	[ "$c" -le "$1" ]
}

# bounded SECS CMD...: runs CMD (a command or a function, in a subshell),
# failing if it has not ended within SECS s; a stuck CMD is left behind,
# unwaited. Its output goes to a file, not to a pipe that a stuck process
# would hold open (check reads its command's output to the end).
bounded() {
	_bsecs=$1
	shift
	"$@" </dev/null >/tmp/bounded.out 2>&1 &
	_bpid=$!
	_bi=0
	while kill -0 $_bpid 2>/dev/null; do
		if [ $_bi -ge $((_bsecs * 10)) ]; then
			echo "still running after $_bsecs s: $*"
			return 1
		fi
		sleep 0.1
		_bi=$((_bi + 1))
	done
	wait $_bpid
	_brc=$?
	cat /tmp/bounded.out
	return $_brc
}

# qp_count: the QPs rdma knows of (the ULPs' and the GSI QPs).
qp_count() {
	rdma resource show qp | grep -c 'lqpn'
}

# qps_back SECS N: waits at most SECS s until rxe holds at most N QPs. ULPs
# free their transports from work items that may run after the call that
# ended the session returned (NFS's unmount, RNBD's unmap).
qps_back() {
	for _ in $(seq $(($1 * 10))); do
		[ "$(qp_count)" -le "$2" ] && return 0
		sleep 0.1
	done
	echo "$(qp_count) QPs after $1 s, $2 before"
	return 1
}

# Waits at most $1 s for the command "$2..." to succeed.
wait_until() {
	t=$1
	shift
	for _ in $(seq $((t * 10))); do
		"$@" && return 0
		sleep 0.1
	done
	echo "after $t s still not: $*"
	return 1
}

# nullb_add NAME: a 64 MiB null_blk disk of its own, made through configfs
# (iblock opens its disk exclusively, so each suite has one).
nullb_add() {
	mkdir "/sys/kernel/config/nullb/$1" && echo 64 >"/sys/kernel/config/nullb/$1/size" &&
		echo 1 >"/sys/kernel/config/nullb/$1/memory_backed" &&
		echo 1 >"/sys/kernel/config/nullb/$1/power" && wait_until 5 test -b "/dev/$1"
}

# Runs rdma_drain_bench with "$@" and the kernel command line's
# rdma_drain_bench.* parameters (bench.sh's BENCH_PARAMS). The module keeps
# its samples until the drains are done and then prints them in a burst;
# they stay off the kernel console (log level 5 meanwhile) and this prints
# the whole log buffer from here instead, in one stream that nothing else
# on the console cuts into (bench.sh boots with a log buffer big enough).
bench_insmod() {
	# shellcheck disable=SC3043 # busybox sh has local
	local ko params level rc
	ko=$(find /lib/modules/*/updates -name rdma_drain_bench.ko)
	params=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^rdma_drain_bench\.//p')
	level=$(cut -f1 /proc/sys/kernel/printk)
	dmesg -c >/dev/null
	echo 5 >/proc/sys/kernel/printk
	# shellcheck disable=SC2086 # params: one word per parameter
	insmod "$ko" "$@" $params
	rc=$?
	dmesg -c
	echo "$level" >/proc/sys/kernel/printk
	return $rc
}
