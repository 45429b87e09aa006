#!/bin/sh
# srp_rxe: SRP initiator and target over rxe0, a direct CQ drained.
#
# SRP over RDMA/CM in one guest, over rxe0: LIO's ib_srpt exports a
# null_blk disk (iblock backstore, set up through configfs by hand), the
# ib_srp initiator logs in, I/O is verified, it logs out. Logout destroys
# each channel with srp_destroy_qp(): ib_drain_qp(), its send CQ polled
# directly (IB_POLL_DIRECT), so the Rust drain's direct path runs under a
# real ULP. ib_srpt itself never calls ib_drain_*(): it moves its QPs to
# ERR and waits for the flush in its own code.
# Usage: srp.sh CYCLES. Prints the KTAP suite srp_rxe.
# BENCH_ROUNDS=R srp.sh K: make bench-ulp's cycles instead (below).

CYCLES=${1:-20}
ADDR=169.254.1.1
PORT=5555
CFS=/sys/kernel/config
BS=$CFS/target/core/iblock_1/nullb1
S=$CFS/target/srpt
# The target port is named after rxe0's port GID 0 (its interface id,
# "xxxx:xxxx:xxxx:xxxx"); with that name ib_srpt calls an RDMA/CM initiator
# by its IP address, the ACL's name. (Set here: each check runs in a
# subshell.)
TP=$(cut -d: -f5-8 /sys/class/infiniband/rxe0/ports/1/gids/0)
P=$S/$TP/tpg_1

. /ktap.sh
. /rdma.sh

setup() {
	mount -t configfs none $CFS 2>/dev/null
	modprobe null_blk && modprobe target_core_iblock && modprobe ib_srpt &&
		modprobe sd_mod && modprobe ib_srp || return 1
	nullb_add nullb1 || return 1
	mkdir -p $BS && echo "udev_path=/dev/nullb1" >$BS/control && echo 1 >$BS/enable || return 1
	mkdir -p $S && echo $PORT >$S/discovery_auth/rdma_cm_port || return 1
	mkdir -p "$P/lun/lun_0" && ln -s "$BS" "$P/lun/lun_0/nullb1" &&
		mkdir -p "$P/acls/$ADDR/lun_0" && ln -s "$P/lun/lun_0" "$P/acls/$ADDR/lun_0/lun_0" &&
		echo 1 >"$P/enable"
}

# Best effort, step by step: a setup that stopped halfway leaves less to
# remove, and what is left would keep ib_srpt loaded for reload.sh.
teardown() {
	for r in /sys/class/srp_remote_ports/port-*; do
		[ -e "$r/delete" ] && echo 1 >"$r/delete"
	done
	[ -e "$P/enable" ] && echo 0 >"$P/enable"
	[ -L "$P/acls/$ADDR/lun_0/lun_0" ] && rm "$P/acls/$ADDR/lun_0/lun_0"
	for d in "$P/acls/$ADDR/lun_0" "$P/acls/$ADDR"; do [ -d "$d" ] && rmdir "$d"; done
	[ -L "$P/lun/lun_0/nullb1" ] && rm "$P/lun/lun_0/nullb1"
	for d in "$P/lun/lun_0" "$P" "$S/$TP"; do [ -d "$d" ] && rmdir "$d"; done
	[ -e $S/discovery_auth/rdma_cm_port ] && echo 0 >$S/discovery_auth/rdma_cm_port
	for d in $S "$BS" $CFS/target/core/iblock_1 $CFS/nullb/nullb1; do [ -d "$d" ] && rmdir "$d"; done
	wait_until 30 sh -c "! ls -d /sys/class/srp_remote_ports/port-* >/dev/null 2>&1" &&
		rmmod ib_srp ib_srpt target_core_iblock
}

# Logs in; sets $rport (srp_remote_ports), $host and $dev (the SCSI disk).
login() {
	g=$(cat /sys/module/ib_srpt/parameters/srpt_service_guid)
	g=${g#0x}
	bounded 60 sh -c "echo id_ext=$g,ioc_guid=$g,dest=$ADDR:$PORT,ch_count=2 \
		>/sys/class/infiniband_srp/srp-rxe0-1/add_target" || { echo "add_target refused"; return 1; }
	# shellcheck disable=SC2012 # sysfs names: no blanks
	rport=$(ls -d /sys/class/srp_remote_ports/port-* | head -n 1)
	host=${rport##*/port-}
	host=${host%%:*}
	dev=""
	for _ in $(seq $((10 * POLL_HZ))); do
		# shellcheck disable=SC2012 # sysfs names: no blanks
		dev=$(ls /sys/class/scsi_host/host"$host"/device/target*/*/block 2>/dev/null | head -n 1)
		[ -n "$dev" ] && [ -b "/dev/$dev" ] && return 0
		sleep $POLL
	done
	echo "no disk on SCSI host $host within 10 s"
	return 1
}

logout() {
	echo 1 >"$rport/delete" && wait_until 30 sh -c "! test -e /sys/class/scsi_host/host$host"
}

# One cycle: log in, write a pattern at block $1, read it back, compare,
# log out (the initiator's QPs drain).
cycle() {
	login || return 1
	dd if=/dev/urandom of=/tmp/srp.pattern bs=4096 count=64 2>/dev/null
	dd if=/tmp/srp.pattern of="/dev/$dev" bs=4096 count=64 seek="$1" oflag=direct 2>/dev/null &&
		dd if="/dev/$dev" of=/tmp/srp.readback bs=4096 count=64 skip="$1" iflag=direct 2>/dev/null &&
		cmp /tmp/srp.pattern /tmp/srp.readback
	rc=$?
	logout || rc=1
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
# rdma.sh), no suite. A cycle logs in and out (no I/O; the logout drains
# the initiator's channels) and ends when the target's channels are gone
# too (ib_srpt frees them from a work item).
bench_cycle() {
	login && bench_phase login && logout && bench_phase logout && qps_back 30 "$QP0"
}
if [ -n "${BENCH_ROUNDS:-}" ]; then
	QP0=$(qp_count)
	bench_step srp setup setup && bench_ulp srp "$BENCH_ROUNDS" "$CYCLES" bench_cycle
	rc=$?
	bench_step srp teardown teardown || rc=1
	exit $rc
fi

REFUSALS0=$(refusals)
ktap_begin srp_rxe
check srpt_target_setup setup
check drain_stacks_traced trace_stacks_on
check "srp_${CYCLES}_logins_data_match" cycles
trace_stacks_off
# Each logout drains both channels (ch_count=2), SQ and RQ of each.
check initiator_ib_drain_qp_ran drains_exactly $((CYCLES * 4)) "$QP_DRAIN" srp_destroy_qp
check no_drain_refused no_refusals_since "$REFUSALS0"
check target_config_removed teardown
ktap_end srp_rxe
