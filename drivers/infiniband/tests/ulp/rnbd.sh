#!/bin/sh
# rnbd_rxe: RNBD over RTRS, client and server, over rxe0.
#
# RNBD over RTRS in one guest, over rxe0: rnbd-server exports a null_blk
# disk, rnbd-client maps it (sysfs), I/O is verified, it is unmapped. The
# last unmap closes the RTRS session: the client's close work runs
# rdma_disconnect() and ib_drain_qp() per connection (rtrs-clt.c
# stop_cm()); the server's close work, queued on the DISCONNECTED event,
# does the same (rtrs_srv_close_work()).
# Usage: rnbd.sh CYCLES. Prints the KTAP suite rnbd_rxe.
# BENCH_ROUNDS=R rnbd.sh K: make bench-ulp's cycles instead (below).

CYCLES=${1:-20}
ADDR=169.254.1.1
CFS=/sys/kernel/config
SESS=rust-drain
# More options of map_device (" nr_poll_queues=2": make bench-ulp).
MAP_OPTS=""

. /ktap.sh
. /rdma.sh

setup() {
	mount -t configfs none $CFS 2>/dev/null
	modprobe null_blk && modprobe rnbd-server && modprobe rnbd-client || return 1
	nullb_add nullb2
}

# A map left by a failed cycle goes first, then its session; no rmmod if
# it is still closing. After the client's sysfs session is gone, free_sess()
# still frees the tag set (an SRCU barrier) and unlinks the session: the
# second before rmmod narrows that window, nothing here can close it.
teardown() {
	for u in /sys/block/rnbd*/rnbd/unmap_device; do
		[ -e "$u" ] && echo force >"$u"
	done
	closed || return 1
	[ -d $CFS/nullb/nullb2 ] && rmdir $CFS/nullb/nullb2
	sleep 1
	rmmod rnbd_client rnbd_server
}

# Maps the disk; sets $dev (rnbdN).
map() {
	bounded 60 sh -c "echo sessname=$SESS path=ip:$ADDR device_path=/dev/nullb2$MAP_OPTS \
		>/sys/class/rnbd-client/ctl/map_device" || { echo "map_device refused"; return 1; }
	dev=$(basename "$(readlink "/sys/class/rnbd-client/ctl/devices/!dev!nullb2@$SESS")")
	wait_until 10 test -b "/dev/$dev"
}

# Waits until the session is closed on both sides. The unmap can return
# first: when rnbd's close-confirmation work (a schedule_work() item) puts
# the device's last reference, and with it the session's, that work closes
# RTRS (drains, then up to 30 s for the CM's disconnects) and removes the
# client's sysfs directory only at the end. An rmmod before the session
# is freed WARNs in rnbd_destroy_sessions() and frees code the work runs.
closed() {
	wait_until 60 sh -c "! test -e /sys/class/rtrs-client/$SESS" &&
		wait_until 30 sh -c "! test -e /sys/class/rtrs-server/$SESS" &&
		qps_back 30 "$QP0"
}

# Unmaps it: the session closes with it.
unmap_device() {
	bounded 60 sh -c "echo normal >/sys/block/$dev/rnbd/unmap_device" ||
		{ echo "unmap_device refused"; return 1; }
}

unmap() {
	unmap_device && closed
}

# One cycle: map, write a pattern at block $1, read it back, compare, unmap.
cycle() {
	map || return 1
	dd if=/dev/urandom of=/tmp/rnbd.pattern bs=4096 count=64 2>/dev/null
	dd if=/tmp/rnbd.pattern of="/dev/$dev" bs=4096 count=64 seek="$1" oflag=direct 2>/dev/null &&
		dd if="/dev/$dev" of=/tmp/rnbd.readback bs=4096 count=64 skip="$1" iflag=direct 2>/dev/null &&
		cmp /tmp/rnbd.pattern /tmp/rnbd.readback
	rc=$?
	unmap || rc=1
	return $rc
}

cycles() {
	[ "$CYCLES" -ge 1 ] || { echo "CYCLES is $CYCLES: nothing would be tested"; return 1; }
	i=0
	while [ $i -lt "$CYCLES" ]; do
		cycle $((i * 64)) || { echo "cycle $i failed"; return 1; }
		i=$((i + 1))
	done
}

# make bench-ulp (BENCH_ROUNDS set: scripts/guest/init): between setup and
# teardown, BENCH_ROUNDS rounds of CYCLES cycles per arm (bench_ulp,
# rdma.sh), no suite. A cycle maps and unmaps (no I/O), until the session
# is closed on both sides (both drain every connection). Two variants:
# rnbd, and rnbd-poll with two poll queues more (connections whose CQs
# the client polls directly, IB_POLL_DIRECT).
bench_cycle() {
	map && bench_phase map && unmap_device && bench_phase unmap && closed
}
# The session of the map made now has $1 poll queues.
poll_queues_are() {
	read -r _pq_n <"/sys/block/$dev/rnbd/nr_poll_queues"
	echo "$dev: $_pq_n poll queues, want $1"
	[ "$_pq_n" = "$1" ]
}
# bench_variant NAME OPTIONS: the variant NAME, map_device given OPTIONS,
# checked by one map first.
bench_variant() {
	MAP_OPTS=$2
	bench_step "$1" "first map" map || return 1
	if [ -n "$2" ]; then
		bench_step "$1" "poll queues" poll_queues_are 2 || { unmap; return 1; }
	fi
	bench_step "$1" "first unmap" unmap &&
		bench_ulp "$1" "$BENCH_ROUNDS" "$CYCLES" bench_cycle
}
if [ -n "${BENCH_ROUNDS:-}" ]; then
	QP0=$(qp_count)
	bench_step rnbd setup setup && bench_variant rnbd "" &&
		bench_variant rnbd-poll " nr_poll_queues=2"
	rc=$?
	bench_step rnbd teardown teardown || rc=1
	exit $rc
fi

QP0=$(qp_count)
REFUSALS0=$(refusals)
ktap_begin rnbd_rxe
check rnbd_server_setup setup
check drain_stacks_traced trace_stacks_on
check "rnbd_${CYCLES}_maps_data_match" cycles
trace_stacks_off
# A session has a connection per CPU and one for user messages; on close
# each side drains SQ and RQ of every one.
cons=$(($(grep -c ^processor /proc/cpuinfo) + 1))
check client_ib_drain_qp_ran drains_at_least $((CYCLES * cons * 2)) "$QP_DRAIN" rtrs_clt_close_work
check server_ib_drain_qp_ran drains_at_least $((CYCLES * cons * 2)) "$QP_DRAIN" rtrs_srv_close_work
check no_drain_refused no_refusals_since "$REFUSALS0"
check rnbd_removed teardown
ktap_end rnbd_rxe
