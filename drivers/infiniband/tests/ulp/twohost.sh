#!/bin/sh
# twohost_*: nvme-rdma between two VMs, the target and the wire made to fail.
#
# make test-2host, guest side: two VMs joined by a QEMU datagram link, each
# with rxe on its virtio NIC. `twohost.sh target` serves a null_blk
# namespace over nvmet-rdma until it is killed; `twohost.sh initiator
# ROUNDS` connects to it with nvme-rdma and runs each fault ROUNDS times,
# with I/O verified after every recovery and the drain proven by its stack.
#
# The host (scripts/test-2host.sh) makes the faults: the initiator prints
# "rust-drain: 2host: request ACTION #SEQ" (again every 5 s until it sees
# the effect: a console line can be cut by a printk) and the host does it
# once per SEQ: kill-target, boot-target, link-off and link-on (the
# target's NIC, through its QEMU monitor: the target sees its carrier go),
# wire-off and wire-on (both ends' sockets renamed away and back: packets
# are dropped between the NICs, and neither end sees a carrier change).

ROLE=$1
ROUNDS=${2:-10}
INITIATOR=169.254.2.1
TARGET=169.254.2.2
NQN=nqn.2026-12.rust-drain:2host
CFG=/sys/kernel/config/nvmet
# Fabrics options, explicit: keep-alive 10 s, a reconnect attempt every
# second, 10 minutes before the host gives up on the controller (longer
# than any outage below), and I/O failed after 2 s of reconnecting, so
# that no writer sleeps in D state past the hung-task timeout (20 s) while
# the target reboots. I/O commands time out after 10 s too (below).
OPTS=keep_alive_tmo=10,reconnect_delay=1,ctrl_loss_tmo=600,fast_io_fail_tmo=2
# Outages: SHORT (plus up to ~2 s until the initiator sees the wire cut)
# stays well inside both 10 s timeouts, LONG outlasts them and several
# reconnect attempts.
SHORT=1
LONG=25
# The namespace's identifiers, the same on every boot of the target: with
# new ones (nvmet makes random ones) the initiator drops the namespace on
# reconnect.
UUID=3f1c7a52-8d0e-4b6a-9c41-2e7d5b9a0c11

. /ktap.sh
. /rdma.sh

# The NIC up with its address, rxe0 on it.
nic_up() {
	modprobe virtio_net && wait_until 10 test -d /sys/class/net/eth0 &&
		ip link set eth0 up && ip addr add "$1/16" dev eth0 &&
		modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0 && rxe_wait_active
}

target_setup() {
	modprobe null_blk nr_devices=1 gb=1 memory_backed=1 && modprobe nvmet-rdma &&
		mount -t configfs none /sys/kernel/config 2>/dev/null
	[ -d $CFG ] || return 1
	s=$CFG/subsystems/$NQN p=$CFG/ports/1
	mkdir $s && echo 1 >$s/attr_allow_any_host && echo 2host0001 >$s/attr_serial &&
		mkdir $s/namespaces/1 && echo /dev/nullb0 >$s/namespaces/1/device_path &&
		echo $UUID >$s/namespaces/1/device_uuid && echo $UUID >$s/namespaces/1/device_nguid &&
		echo 1 >$s/namespaces/1/enable &&
		mkdir $p && echo rdma >$p/addr_trtype && echo ipv4 >$p/addr_adrfam &&
		echo $TARGET >$p/addr_traddr && echo 4420 >$p/addr_trsvcid &&
		ln -s $s $p/subsystems/$NQN
}

case $ROLE in
target | initiator) ;;
*)
	echo "rust-drain: 2host: unknown role '$ROLE'"
	exit 1
	;;
esac

if [ "$ROLE" = target ]; then
	ktap_begin twohost_target
	check nic_and_rxe_up nic_up $TARGET
	check nvmet_rdma_listening target_setup
	check drain_tracepoint_enabled trace_on
	ktap_end twohost_target
	echo "rust-drain: 2host: target ready"
	# Until the host kills this VM; now and then, what drained so far.
	while :; do
		sleep 30
		echo "rust-drain: 2host: target: $(grep -c cq_drain_complete "$TRACE/trace") drains so far"
	done
fi

# Lines for the host go to the console itself: check captures its command's
# output. check runs each command in a subshell, so SEQ lives in a file.
say() { echo "rust-drain: 2host: $*" >/dev/console; }

# request ACTION: ask the host for ACTION (a new SEQ).
request() {
	seq=$(($(cat /tmp/seq 2>/dev/null || echo 0) + 1))
	echo $seq >/tmp/seq
	action=$1
	say "request $action #$seq"
}

# effect SECS CMD...: waits at most SECS s (of uptime: CMD may take long)
# for CMD to succeed, repeating the last request every 5 s meanwhile.
effect() {
	t=$1
	shift
	now=$(cut -d. -f1 /proc/uptime)
	end=$((now + t)) said=$now
	while :; do
		"$@" && return 0
		now=$(cut -d. -f1 /proc/uptime)
		[ "$now" -ge "$end" ] && break
		if [ -n "${action:-}" ] && [ $((now - said)) -ge 5 ]; then
			say "request $action #$seq"
			said=$now
		fi
		sleep 0.1
	done
	echo "after $t s still not: $*"
	return 1
}

reachable() { ping -c 1 -W 1 $TARGET >/dev/null 2>&1; }
unreachable() { ! reachable; }

# The one controller (a new one may get another number) and its namespace.
# shellcheck disable=SC2012 # sysfs names: no blanks
ctrl() { ls -d /sys/class/nvme/nvme* 2>/dev/null | head -n 1; }
ns() { c=$(ctrl) && echo "/dev/${c##*/}n1"; }
state() { cat "$(ctrl)/state" 2>/dev/null; }
live() { [ "$(state)" = live ]; }
not_live() { [ "$(state)" != live ]; }
no_ctrl() { [ -z "$(ctrl)" ]; }

connect() {
	# shellcheck disable=SC2016 # $0: the inner sh's first argument
	echo "transport=rdma,traddr=$TARGET,trsvcid=4420,nqn=$NQN,$OPTS" >/dev/nvme-fabrics &&
		wait_until 10 sh -c 'test -b "$0"' "$(ns)" && live
}

# The target boots alongside: it may not listen yet.
connect_retry() {
	for _ in $(seq 100); do
		connect 2>/dev/null && return 0
		[ -n "$(ctrl)" ] && echo 1 >"$(ctrl)/delete_controller"
		sleep 2
	done
	return 1
}

# is_ns: the namespace is there, a block device (dd would make a file).
is_ns() {
	# shellcheck disable=SC2015 # the message if either fails
	d=$(ns) && [ -b "$d" ] || { echo "no namespace block device ($d)"; return 1; }
}

# write_at BLOCK: a fresh 256 KiB pattern at BLOCK (4 KiB blocks), kept
# in /tmp/pattern.BLOCK; check_at BLOCK reads it back and compares.
write_at() {
	is_ns && dd if=/dev/urandom of="/tmp/pattern.$1" bs=4096 count=64 2>/dev/null &&
		dd if="/tmp/pattern.$1" of="$(ns)" bs=4096 count=64 seek="$1" oflag=direct 2>/dev/null
}
check_at() {
	is_ns && dd if="$(ns)" of=/tmp/readback bs=4096 count=64 skip="$1" iflag=direct 2>/dev/null &&
		cmp "/tmp/pattern.$1" /tmp/readback
}
io_verified() { write_at "$1" && check_at "$1"; }

# I/O in flight through a fault: direct writes in a loop, until stopped.
io_start() {
	d=$(ns)
	# Its output not to check's pipe: a loop left behind would hold it.
	(while [ -b "$d" ]; do
		dd if=/dev/zero of="$d" bs=4096 count=256 seek=4096 oflag=direct 2>/dev/null || sleep 1
	done) >/dev/null 2>&1 &
	io_pid=$!
	echo $io_pid >/tmp/io_pid
}
# It must end within 120 s of being told to (a request held across the
# outage completes or fails once the controller is back).
io_stop() {
	kill "$io_pid" 2>/dev/null
	wait_until 120 sh -c "! kill -0 $io_pid 2>/dev/null" && rm -f /tmp/io_pid
}

# After a failed round: no I/O loop left, the link on, the target up, so
# that the next suites start from a known state.
restore() {
	[ -f /tmp/io_pid ] && kill "$(cat /tmp/io_pid)" 2>/dev/null
	rm -f /tmp/io_pid
	if [ -f /tmp/link_off ]; then
		request "$(cat /tmp/link_off)-on"
		rm -f /tmp/link_off
	fi
	if [ -f /tmp/target_dead ]; then
		request boot-target
		rm -f /tmp/target_dead
	fi
	effect 600 reachable
}

# The drains error recovery ran: cq_drain_complete events whose stack holds
# ib_drain_qp and the recovery work, since the trace was last cleared. One
# ib_drain_qp() is two events (its send and its receive queue). Every
# queue of the controller (admin and I/O) drains once: in the recovery, or
# in the timeout of a command it left waiting, if that came first
# (nvme_rdma_timeout() stops a queue itself once the controller is not
# live; seen on the debug kernel).
RECOVERY="ib_drain_qp nvme_rdma_error_recovery_work"
TIMEOUT="ib_drain_qp blk_mq_timeout_work"
clear_trace() { echo >$TRACE/trace; }
# events_per_ctrl: the events of draining each queue of the controller.
events_per_ctrl() {
	q=$(cat "$(ctrl)/queue_count") && echo $((2 * q))
}

# recovered N: the recovery drained at least one QP, and the recovery and
# command timeouts at least N events in all. Each round's count goes to
# the console too (check keeps only the last).
recovered() {
	echo 0 >"$TRACE/tracing_on"
	# shellcheck disable=SC2086 # RECOVERY: drains_from's FN list
	by_recovery=$(drains_from $RECOVERY)
	# shellcheck disable=SC2086 # TIMEOUT: drains_from's FN list
	by_timeout=$(drains_from $TIMEOUT)
	echo 1 >"$TRACE/tracing_on"
	out="$by_recovery drain events in error recovery, $by_timeout in command timeouts, want $1 in all and 2 in recovery"
	echo "$out"
	say "round $r: $out"
	[ "$by_recovery" -ge 2 ] && [ $((by_recovery + by_timeout)) -ge "$1" ]
}

# (a) The target VM dies mid-I/O (SIGKILL of its QEMU) and boots again.
# null_blk forgets everything with it: verify I/O written afterwards.
target_killed() {
	clear_trace
	want=$(events_per_ctrl) || return 1
	io_start
	request kill-target
	touch /tmp/target_dead
	effect 60 unreachable || return 1
	effect 60 not_live || { echo "controller still live with the target dead"; return 1; }
	request boot-target
	rm /tmp/target_dead
	effect 600 live || { echo "no reconnect: state $(state)"; return 1; }
	io_stop || { echo "I/O did not end after the reconnect"; return 1; }
	io_verified "$(($1 * 64))" || { echo "I/O after the reconnect does not verify"; return 1; }
	recovered "$want"
}

# (b) The wire is cut for less than the keep-alive timeout: nothing is torn
# down, nothing drains, and the data written before reads back. (Not the
# NIC's link: rxe fails a send on a NIC without carrier, and the target's
# QPs go to the error state at once, however short the outage.)
link_cut_short() {
	clear_trace
	write_at "$(($1 * 64))" || return 1
	io_start
	request wire-off
	echo wire >/tmp/link_off
	effect 30 unreachable || return 1
	sleep $SHORT
	request wire-on
	rm /tmp/link_off
	effect 60 reachable || return 1
	io_stop || return 1
	live || { echo "controller $(state) after a ${SHORT} s outage"; return 1; }
	check_at "$(($1 * 64))" || { echo "data written before the outage does not verify"; return 1; }
	io_verified "$(($1 * 64 + 32768))" || return 1
	echo 0 >$TRACE/tracing_on
	n=$(grep -c cq_drain_complete $TRACE/trace)
	echo 1 >$TRACE/tracing_on
	echo "$n drains during a ${SHORT} s outage, want 0"
	say "round $r: $n drains during a ${SHORT} s outage, want 0"
	[ "$n" = 0 ]
}

# (b) ... and the target's NIC link down for longer: error recovery drains,
# the reconnect attempts fail until the link is back, then the controller
# reconnects by itself and everything written before the cut reads back
# (the target lived on).
link_cut_long() {
	clear_trace
	want=$(events_per_ctrl) || return 1
	write_at "$(($1 * 64))" || return 1
	io_start
	request link-off
	echo link >/tmp/link_off
	effect 30 unreachable || return 1
	effect 60 not_live || { echo "controller still live after 60 s without a link"; return 1; }
	sleep $LONG
	request link-on
	rm /tmp/link_off
	effect 60 reachable || return 1
	effect 300 live || { echo "no reconnect: state $(state)"; return 1; }
	io_stop || return 1
	check_at "$(($1 * 64))" || { echo "data written before the outage does not verify"; return 1; }
	io_verified "$(($1 * 64 + 32768))" || return 1
	recovered "$want"
}

# delete_ctrl: deletes the controller, which must exist.
delete_ctrl() {
	# shellcheck disable=SC2015 # the message if either fails
	c=$(ctrl) && [ -n "$c" ] || { echo "no controller to delete"; return 1; }
	bounded 180 sh -c "echo 1 >$c/delete_controller" && wait_until 60 no_ctrl
}

# (c) The initiator deletes its controller while the target is unreachable:
# the delete drains every queue without the peer and ends (bounded), then
# a new controller connects once the link is back. Each queue drains once,
# in the delete or in the timeout of a command that it left waiting.
delete_unreachable() {
	clear_trace
	want=$(events_per_ctrl) || return 1
	io_start
	request wire-off
	echo wire >/tmp/link_off
	effect 30 unreachable || return 1
	delete_ctrl || return 1
	io_stop || return 1
	echo 0 >"$TRACE/tracing_on"
	by_delete=$(drains_from "$QP_DRAIN" nvme_do_delete_ctrl)
	# shellcheck disable=SC2086 # TIMEOUT: drains_from's FN list
	by_timeout=$(drains_from $TIMEOUT)
	echo 1 >"$TRACE/tracing_on"
	echo "$by_delete drain events in the delete, $by_timeout in command timeouts, want $want in all"
	say "round $r: $by_delete drain events in the delete, $by_timeout in command timeouts, want $want in all"
	[ $((by_delete + by_timeout)) -ge "$want" ] || return 1
	request wire-on
	rm /tmp/link_off
	effect 60 reachable || return 1
	bounded 120 connect || { echo "no new controller after the link came back"; return 1; }
	io_verified "$(($1 * 64 + 65536))"
}

# rounds FN: FN 0..ROUNDS-1, stopping at the first that fails.
rounds() {
	r=0
	while [ $r -lt "$ROUNDS" ]; do
		s=$(cut -d' ' -f1 /proc/uptime)
		"$1" $r || {
			echo "$1: round $r failed"
			restore
			return 1
		}
		say "$1 round $r took $(awk -v s="$s" '{ printf "%.1f", $1 - s }' /proc/uptime) s"
		r=$((r + 1))
	done
}

ktap_begin twohost_initiator
check nic_and_rxe_up nic_up $INITIATOR
check nvme_rdma_loaded modprobe nvme-rdma
# Commands time out after 5 s (admin) and 10 s (I/O), not 60 and 30: a
# delete with the target unreachable waits for its in-flight I/O and its
# shutdown command that long, and a writer in D state as long.
check nvme_timeouts_5s_admin_10s_io sh -c 'echo 5 >/sys/module/nvme_core/parameters/admin_timeout &&
	echo 10 >/sys/module/nvme_core/parameters/io_timeout'
check drain_stacks_traced trace_stacks_on
# The target boots alongside; give it time under TCG.
check target_reachable effect 600 reachable
check nvme_rdma_connects bounded 300 connect_retry
check io_verified io_verified 0
ktap_end twohost_initiator
console_settle

ktap_begin twohost_target_killed
check "target_killed_mid_io_${ROUNDS}_times" rounds target_killed
ktap_end twohost_target_killed
console_settle

ktap_begin twohost_link_cut
check "wire_cut_${SHORT}s_${ROUNDS}_times" rounds link_cut_short
check "nic_link_down_${LONG}s_${ROUNDS}_times" rounds link_cut_long
ktap_end twohost_link_cut
console_settle

ktap_begin twohost_delete_unreachable
check "delete_while_unreachable_${ROUNDS}_times" rounds delete_unreachable
check controller_deleted_at_the_end delete_ctrl
ktap_end twohost_delete_unreachable

echo "rust-drain: tests done"
poweroff -f
