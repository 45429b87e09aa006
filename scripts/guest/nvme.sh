#!/bin/sh
# nvme-rdma host and nvmet-rdma target over rxe0 in one guest: CYCLES times
# connect, write a pattern, read it back, compare, disconnect. Teardown of
# both sides runs ib_drain_qp(); the cq_drain_complete tracepoint count
# proves that drains ran (and ib_drain_* is the Rust one: rdma_drain_abi).
# Prints one KTAP suite, nvme_rdma_rxe.

CYCLES=${1:-20}
ADDR=169.254.1.1
NQN=nqn.2026-11.rust-drain:test
CFG=/sys/kernel/config/nvmet
TRACE=/sys/kernel/tracing

. /ktap.sh
ktap_begin

setup_target() {
	modprobe null_blk nr_devices=1 gb=1 memory_backed=1 &&
		modprobe nvmet-rdma && modprobe nvme-rdma &&
		mount -t configfs none /sys/kernel/config 2>/dev/null
	[ -d $CFG ] || return 1
	mkdir $CFG/subsystems/$NQN &&
		echo 1 >$CFG/subsystems/$NQN/attr_allow_any_host &&
		mkdir $CFG/subsystems/$NQN/namespaces/1 &&
		echo /dev/nullb0 >$CFG/subsystems/$NQN/namespaces/1/device_path &&
		echo 1 >$CFG/subsystems/$NQN/namespaces/1/enable &&
		mkdir $CFG/ports/1 &&
		echo rdma >$CFG/ports/1/addr_trtype &&
		echo ipv4 >$CFG/ports/1/addr_adrfam &&
		echo $ADDR >$CFG/ports/1/addr_traddr &&
		echo 4420 >$CFG/ports/1/addr_trsvcid &&
		ln -s $CFG/subsystems/$NQN $CFG/ports/1/subsystems/$NQN
}

trace_on() {
	echo 0 >$TRACE/tracing_on && echo >$TRACE/trace &&
		echo 1 >$TRACE/events/rdma_core/cq_drain_complete/enable &&
		echo 1 >$TRACE/tracing_on
}

# One cycle: connect, find the namespace, write, read back, compare, delete.
cycle() {
	i=$1
	echo "transport=rdma,traddr=$ADDR,trsvcid=4420,nqn=$NQN" >/dev/nvme-fabrics ||
		{ echo "connect failed"; return 1; }
	dev=""
	for _ in $(seq 50); do
		dev=$(ls /dev/nvme*n1 2>/dev/null | head -n 1)
		[ -n "$dev" ] && break
		sleep 0.1
	done
	ctrl=$(ls -d /sys/class/nvme/nvme* 2>/dev/null | head -n 1)
	[ -n "$dev" ] || { echo "no namespace after connect"; echo 1 >"$ctrl/delete_controller"; return 1; }
	dd if=/dev/urandom of=/tmp/pattern bs=4096 count=64 2>/dev/null
	dd if=/tmp/pattern of="$dev" bs=4096 count=64 seek=$((i * 64)) oflag=direct 2>/dev/null &&
		dd if="$dev" of=/tmp/readback bs=4096 count=64 skip=$((i * 64)) iflag=direct 2>/dev/null
	rc=$?
	cmp /tmp/pattern /tmp/readback || rc=1
	echo 1 >"$ctrl/delete_controller" || rc=1
	for _ in $(seq 50); do
		[ -e "$ctrl" ] || break
		sleep 0.1
	done
	[ -e "$ctrl" ] && { echo "controller $ctrl not deleted"; rc=1; }
	return $rc
}

cycles() {
	i=0
	while [ $i -lt "$CYCLES" ]; do
		cycle $i || { echo "cycle $i failed"; return 1; }
		i=$((i + 1))
	done
}

drains_traced() {
	echo 0 >$TRACE/tracing_on
	c=$(grep -c 'cq_drain_complete' $TRACE/trace)
	echo "cq_drain_complete events: $c"
	# Each cycle tears down an admin and at least one I/O queue on each side.
	[ "$c" -ge $((CYCLES * 4)) ]
}

check nvmet_rdma_target_setup setup_target
check drain_tracepoint_enabled trace_on
check nvme_rdma_${CYCLES}_cycles_data_matches cycles
check drains_ran_on_both_sides drains_traced
echo "rust-drain: $(grep -c cq_drain_complete $TRACE/trace 2>/dev/null) cq_drain_complete events in $CYCLES nvme cycles"

ktap_end nvme_rdma_rxe
