# shellcheck shell=sh
# Helpers that init and the guest's suites (drivers/infiniband/tests/) share:
# the project's modules, the cq_drain_complete tracepoint, rxe0's port.

TRACE=/sys/kernel/tracing

# wait_until, bounded and qps_back try POLL_HZ times a second: every 0.1 s,
# or every 0.01 s in make bench-ulp's runs (BENCH_ROUNDS set, bench_ulp
# below), whose cycles a tenth of a second per wait would round up (a
# qps_back then runs `rdma resource show` up to 100 times a second: a load
# every arm bears alike, and noise).
POLL=0.1 POLL_HZ=10
[ -z "${BENCH_ROUNDS:-}" ] || POLL=0.01 POLL_HZ=100

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

# still_running PID: PID has not ended (a zombie has: `kill -0` would
# still succeed on it).
still_running() {
	! pid_ends_within 0 "$1"
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

# What a drain by ib_drain_qp() has on its stack: ib_drain_qp() itself for
# the send queue, but it ends with ib_drain_rq(), which the compiler makes a
# tail call (C's drain compiles the same way), so the receive queue's drain
# has ib_drain_rq() and the caller instead.
QP_DRAIN='ib_drain_qp|ib_drain_rq'

# drains_from FN...: how many traced cq_drain_complete events have a stack
# that holds every function FN; an FN of the form A|B is either. A
# stacktrace entry follows its event on the same CPU (ftrace merges the
# CPUs' buffers by time, so another CPU's entries may come between): each
# is matched by its [CPU] field.
drains_from() {
	awk -v fns="$*" '
		function cpu_of(i) {
			for (i = 1; i <= NF; i++) if ($i ~ /^\[[0-9]+\]$/) return $i
			return "?"
		}
		function finish(i, j, ok, na, alt, hit) {
			if (cur == "") return
			if (pend[cur]) {
				ok = 1
				for (i = 1; i <= nf; i++) {
					na = split(f[i], alt, "|")
					hit = 0
					for (j = 1; j <= na; j++) if (alt[j] in st) hit = 1
					if (!hit) ok = 0
				}
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

# drains_between LO HI FN...: LO to HI traced drains did.
drains_between() {
	lo=$1 hi=$2
	shift 2
	c=$(drains_from "$@")
	echo "$c drains with $* on their stack, want $lo to $hi"
	[ "$c" -ge "$lo" ] && [ "$c" -le "$hi" ]
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
	dmesg | grep -cE ': QP 0x[0-9a-f]+: failed to drain|ib_drain: [0-9]+ callbacks suppressed'
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
		if [ $_bi -ge $((_bsecs * POLL_HZ)) ]; then
			echo "still running after $_bsecs s: $*"
			return 1
		fi
		sleep $POLL
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
	for _ in $(seq $(($1 * POLL_HZ))); do
		[ "$(qp_count)" -le "$2" ] && return 0
		sleep $POLL
	done
	echo "$(qp_count) QPs after $1 s, $2 before"
	return 1
}

# Waits at most $1 s for the command "$2..." to succeed.
wait_until() {
	t=$1
	shift
	for _ in $(seq $((t * POLL_HZ))); do
		"$@" && return 0
		sleep $POLL
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

# make bench-ulp (scripts/guest/init, rust_drain_bench_ulp=ROUNDS): a ULP's
# teardown or recovery cycle timed over the Rust drain and over the C
# reference drain, in one boot of the bench kernel, whose ib_core routes
# the exported ib_drain_*() by its parameter drain_c and counts the time
# spent in them and the calls (drain_ns, drain_calls: since boot, either
# drain).
DRAIN_P=/sys/module/ib_core/parameters
BENCH_OUT=/tmp/bench-ulp.out

# bench_failed NAME REASON: the console line that says NAME's bench failed.
bench_failed() {
	echo "rust-drain: bench-ulp: failed $1 $2"
}

# bench_last: the last line that the last bench step or cycle printed.
bench_last() {
	sed '/^$/d' $BENCH_OUT | tail -n 1
}

# bench_step NAME WHAT CMD...: runs CMD (a set-up or tear-down step of
# NAME's bench) in this shell, so that what it sets stays set, its output
# to a file; if it fails, says so with its last line of output.
bench_step() {
	_bs_name=$1 _bs_what=$2
	shift 2
	"$@" >$BENCH_OUT 2>&1 && return 0
	bench_failed "$_bs_name" "$_bs_what: $(bench_last)"
	return 1
}

# bench_mark WORD...: the ftrace marker "bench-ulp WORD... DRAIN_NS
# DRAIN_CALLS", the counters as read now.
bench_mark() {
	read -r _bm_ns <$DRAIN_P/drain_ns
	read -r _bm_calls <$DRAIN_P/drain_calls
	echo "bench-ulp $* $_bm_ns $_bm_calls" >$TRACE/trace_marker
}

# bench_phase NAME: in a CYCLE of bench_ulp, a marker that ends the
# cycle's phase NAME (where its time goes: bench-ulp-report.py's second
# table); the last phase ends at the end marker.
bench_phase() {
	[ -n "$_bu_at" ] || return 0 # the untimed first cycle
	bench_mark phase "$_bu_at" "$1"
}

# bench_ulp NAME ROUNDS K CYCLE: one untimed call of the function CYCLE,
# then ROUNDS rounds of three arms, each K calls
# of the function CYCLE (in this shell, its output to a file): rust
# (drain_c=0), c (drain_c=1) and c2 (C again: how far it is from c is the
# noise), in round r in the order of the permutation r mod 6, against
# order effects. An ftrace marker before and after each cycle, its
# timestamp in seconds and microseconds, says
#   bench-ulp start|end NAME ARM ROUND POSITION CYCLE DRAIN_NS DRAIN_CALLS
# (POSITION: the arm's in the round; the counters as read just before);
# the markers go to the console at the end, each line after
# "rust-drain: bench-ulp: " (scripts/bench-ulp-report.py). Nothing but
# the markers is traced, in one clock for every CPU: a cycle may start on
# one and end on another. A failed CYCLE ends the loop, with the line
# "rust-drain: bench-ulp: failed NAME ARM round R cycle I: <its last
# line of output>".
bench_ulp() {
	_bu_name=$1 _bu_rounds=$2 _bu_k=$3 _bu_fn=$4
	if ! [ -w $DRAIN_P/drain_c ] || ! [ -r $DRAIN_P/drain_ns ] || ! [ -r $DRAIN_P/drain_calls ]; then
		bench_failed "$_bu_name" "no $DRAIN_P/drain_c, drain_ns or drain_calls: not the bench-ulp kernel"
		return 1
	fi
	if ! [ "$_bu_rounds" -ge 1 ] || ! [ "$_bu_k" -ge 1 ]; then
		bench_failed "$_bu_name" "$_bu_rounds rounds of $_bu_k cycles: nothing to time"
		return 1
	fi
	{ echo 0 >$TRACE/tracing_on && echo 0 >$TRACE/events/enable &&
		echo nop >$TRACE/current_tracer && echo global >$TRACE/trace_clock &&
		echo >$TRACE/trace && echo 1 >$TRACE/tracing_on; } 2>/dev/null ||
		{ bench_failed "$_bu_name" "ftrace at $TRACE could not be set up"; return 1; }
	# The ULPs' info lines stay off the console while the cycles run
	# (warnings and worse still show).
	_bu_level=$(cut -f1 /proc/sys/kernel/printk)
	echo 5 >/proc/sys/kernel/printk
	_bu_rc=0 _bu_r=0 _bu_at=""
	# One cycle untimed first (Rust's arm): what only a first cycle does
	# (caches, first connections) falls on no arm.
	if ! "$_bu_fn" >$BENCH_OUT 2>&1; then
		bench_failed "$_bu_name" "untimed first cycle: $(bench_last)"
		_bu_rc=1 _bu_rounds=0
	fi
	while [ $_bu_r -lt "$_bu_rounds" ]; do
		case $((_bu_r % 6)) in
		0) _bu_arms="rust c c2" ;;
		1) _bu_arms="rust c2 c" ;;
		2) _bu_arms="c rust c2" ;;
		3) _bu_arms="c c2 rust" ;;
		4) _bu_arms="c2 rust c" ;;
		*) _bu_arms="c2 c rust" ;;
		esac
		_bu_pos=0
		for _bu_arm in $_bu_arms; do
			_bu_c=1 _bu_yn=Y _bu_v=""
			[ "$_bu_arm" = rust ] && _bu_c=0 _bu_yn=N
			echo $_bu_c >$DRAIN_P/drain_c && read -r _bu_v <$DRAIN_P/drain_c
			if [ "$_bu_v" != $_bu_yn ]; then
				bench_failed "$_bu_name" "drain_c: wrote $_bu_c, reads '$_bu_v'"
				_bu_rc=1
				break 2
			fi
			_bu_i=0
			while [ $_bu_i -lt "$_bu_k" ]; do
				_bu_at="$_bu_name $_bu_arm $_bu_r $_bu_pos $_bu_i"
				bench_mark start "$_bu_at"
				if ! "$_bu_fn" >$BENCH_OUT 2>&1; then
					bench_failed "$_bu_name" "$_bu_arm round $_bu_r cycle $_bu_i: $(bench_last)"
					_bu_rc=1
					break 3
				fi
				bench_mark end "$_bu_at"
				_bu_i=$((_bu_i + 1))
			done
			_bu_pos=$((_bu_pos + 1))
		done
		_bu_r=$((_bu_r + 1))
	done
	echo 0 >$DRAIN_P/drain_c
	_bu_at=""
	# The kernel's console output first, so that it cuts into none of
	# these lines.
	sleep 1
	grep 'tracing_mark_write: bench-ulp ' $TRACE/trace | sed 's/^/rust-drain: bench-ulp: /'
	echo >$TRACE/trace
	echo "$_bu_level" >/proc/sys/kernel/printk
	return $_bu_rc
}
