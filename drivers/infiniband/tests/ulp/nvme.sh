#!/bin/sh
# nvme_rdma_rxe, rxe_removal_race: nvme-rdma over rxe0; rxe0 removed under it.
#
# nvme-rdma host and nvmet-rdma target over rxe0 in one guest: CYCLES times
# connect, write a pattern, read it back, compare, disconnect. Teardown of
# both sides runs ib_drain_qp(); the cq_drain_complete tracepoint count
# proves that drains ran (and ib_drain_* is the Rust one: check_symbols).
# Then RACES times, rxe0's removal (`rdma link delete`) races the host's
# teardown of a connected controller, and rxe0 is added again.
# Prints two KTAP suites, nvme_rdma_rxe and rxe_removal_race.
# With siw as third argument: the cycles alone, over siw0 (iWARP, connected
# through the iw_cm), on a port of their own: nvme_rdma_siw. With srq as
# fourth argument (nvmet-rdma not loaded yet): the target's queues on an
# SRQ (use_srq=1), each QP drained whole when its queue goes, which waits
# for Last WQE Reached; after each cycle the target's QPs must be gone
# within 10 s of the host's delete: nvme_rdma_siw_srq.
# BENCH_ROUNDS=R nvme.sh K: make bench-ulp's cycles instead (below).

CYCLES=${1:-100}
RACES=${2:-6}
PROVIDER=${3:-rxe}
SRQ=${4:-}
if [ -n "$SRQ" ] && [ "$PROVIDER" != siw ]; then
	echo "nvme.sh: srq runs over siw only"
	exit 1
fi
# rust_drain_nvme_races=N on the kernel command line overrides it.
races_arg=$(sed -n 's/.*rust_drain_nvme_races=\([0-9]*\).*/\1/p' /proc/cmdline)
RACES=${races_arg:-$RACES}
ADDR=169.254.1.1
PORT=1
if [ "$PROVIDER" = siw ]; then
	# A port id the rxe races' new ports (2, 3, ...) never reach.
	ADDR=10.99.0.1 PORT=65000
	ip addr replace $ADDR/24 dev dummy2
fi
NQN=nqn.2026-11.rust-drain:test
CFG=/sys/kernel/config/nvmet
# More options of a connect (",nr_poll_queues=2": make bench-ulp).
CONNECT_OPTS=""

. /ktap.sh
. /rdma.sh
SUITE=nvme_rdma_$PROVIDER${SRQ:+_srq}
[ -n "${BENCH_ROUNDS:-}" ] || ktap_begin "$SUITE"

setup_target() {
	modprobe null_blk nr_devices=1 gb=1 memory_backed=1 &&
		modprobe nvmet-rdma ${SRQ:+use_srq=1} && modprobe nvme-rdma &&
		mount -t configfs none /sys/kernel/config 2>/dev/null
	[ -d $CFG ] || return 1
	if [ -n "$SRQ" ] && [ "$(cat /sys/module/nvmet_rdma/parameters/use_srq)" != Y ]; then
		echo "nvmet-rdma was loaded without use_srq=1"
		return 1
	fi
	# The rxe run made the subsystem already, before a siw run.
	[ -d $CFG/subsystems/$NQN ] || {
		mkdir $CFG/subsystems/$NQN &&
			echo 1 >$CFG/subsystems/$NQN/attr_allow_any_host &&
			mkdir $CFG/subsystems/$NQN/namespaces/1 &&
			echo /dev/nullb0 >$CFG/subsystems/$NQN/namespaces/1/device_path &&
			echo 1 >$CFG/subsystems/$NQN/namespaces/1/enable
	} || return 1
	mkdir $CFG/ports/$PORT &&
		echo rdma >$CFG/ports/$PORT/addr_trtype &&
		echo ipv4 >$CFG/ports/$PORT/addr_adrfam &&
		echo $ADDR >$CFG/ports/$PORT/addr_traddr &&
		echo 4420 >$CFG/ports/$PORT/addr_trsvcid &&
		ln -s $CFG/subsystems/$NQN $CFG/ports/$PORT/subsystems/$NQN
}

# Connects a controller; sets $dev (its namespace) and $ctrl (sysfs).
connect() {
	bounded 60 sh -c "echo transport=rdma,traddr=$ADDR,trsvcid=4420,nqn=$NQN,reconnect_delay=1$CONNECT_OPTS \
		>/dev/nvme-fabrics" ||
		{ echo "connect failed"; return 1; }
	dev=""
	for _ in $(seq $((5 * POLL_HZ))); do
		# shellcheck disable=SC2012 # device names: no blanks
		dev=$(ls /dev/nvme*n1 2>/dev/null | head -n 1)
		[ -n "$dev" ] && break
		sleep $POLL
	done
	# shellcheck disable=SC2012 # sysfs names: no blanks
	ctrl=$(ls -d /sys/class/nvme/nvme* 2>/dev/null | head -n 1)
	[ -n "$dev" ] || { echo "no namespace after connect"; echo 1 >"$ctrl/delete_controller"; return 1; }
}

# Writes a pattern at block $1 of the namespace, reads it back, compares,
# then deletes the controller and waits until it is gone.
io_and_delete() {
	dd if=/dev/urandom of=/tmp/pattern bs=4096 count=64 2>/dev/null
	dd if=/tmp/pattern of="$dev" bs=4096 count=64 seek="$1" oflag=direct 2>/dev/null &&
		dd if="$dev" of=/tmp/readback bs=4096 count=64 skip="$1" iflag=direct 2>/dev/null
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

# The target's QPs of a cycle are on SRQs (use_srq=1): siw0 has some.
on_srqs() {
	_srqs=$(rdma resource show srq dev siw0 | grep -c srqn)
	echo "$(qp_count) QPs, $_srqs SRQs on siw0"
	[ "$_srqs" -ge 1 ]
}

# The target frees its queues from work items after the host's delete
# returned, each QP drained whole: the QPs must be down to $1 within 10 s.
# Prints how long it took, waiting up to 90 s to tell (a drain that waits
# out __ib_drain_srq()'s 60 s for Last WQE Reached takes a minute).
target_queues_freed() {
	_t0=$(cut -d' ' -f1 /proc/uptime)
	qps_back 90 "$1"
	_t1=$(cut -d' ' -f1 /proc/uptime)
	_ms=$(echo "$_t0 $_t1" | awk '{ printf "%d", ($2 - $1) * 1000 }')
	echo "rust-drain: srq: the target's QPs freed $_ms ms after the delete"
	[ "$_ms" -le 10000 ]
}

# One cycle: connect, write, read back, compare, delete; with SRQs, the
# target's queues must be freed too.
cycle() {
	if [ -z "$SRQ" ]; then
		connect && io_and_delete $(($1 * 64))
		return
	fi
	_qp0=$(qp_count)
	connect || return 1
	on_srqs || { echo 1 >"$ctrl/delete_controller"; return 1; }
	io_and_delete $(($1 * 64)) && target_queues_freed "$_qp0"
}

cycles() {
	i=0
	while [ $i -lt "$CYCLES" ]; do
		cycle $i || { echo "cycle $i failed"; return 1; }
		i=$((i + 1))
	done
}

# make bench-ulp (BENCH_ROUNDS set: scripts/guest/init): after the target's
# setup, BENCH_ROUNDS rounds of CYCLES cycles per arm (bench_ulp, rdma.sh)
# of each variant, no suite. nvme-reset: a connected controller's
# reset_controller (both sides' queues drain, the host connects new ones;
# the write returns when it did); nvme-delete: its delete_controller,
# then a connect again; no I/O. nvme-reset-poll, nvme-delete-poll: the
# same with two poll queues more (CQs the host polls directly,
# IB_POLL_DIRECT). A cycle ends when the target's old queues are gone
# too (nvmet-rdma frees them, drains first, from a work item). The
# target stays, as after the suites.
ctrl_live() {
	read -r _cl_st <"$ctrl/state" && [ "$_cl_st" = live ]
}
ctrl_gone() {
	! [ -e "$ctrl" ]
}
delete_ctrl() {
	bounded 60 sh -c "echo 1 >$ctrl/delete_controller" && wait_until 10 ctrl_gone && return 0
	echo "controller $ctrl not deleted"
	return 1
}
bench_reset() {
	bounded 60 sh -c "echo 1 >$ctrl/reset_controller" || { echo "reset_controller failed"; return 1; }
	bench_phase reset
	wait_until 10 ctrl_live && bench_phase live && qps_back 30 "$QPC"
}
bench_delete() {
	delete_ctrl && bench_phase delete && connect && bench_phase connect && qps_back 30 "$QPC"
}
# The controller connected last maps at least one poll queue (its line
# "mapped D/R/P default/read/poll queues.").
poll_queues_mapped() {
	_pq=$(dmesg | sed -n 's|.*mapped [0-9]*/[0-9]*/\([0-9]*\) default/read/poll queues.*|\1|p' | tail -n 1)
	echo "$ctrl: ${_pq:-no} poll queues mapped"
	[ "${_pq:-0}" -ge 1 ]
}
# bench_variant NAME CYCLE OPTIONS: the variant NAME, the function CYCLE
# on a controller connected with CONNECT_OPTS=OPTIONS; it is deleted
# after.
bench_variant() {
	CONNECT_OPTS=$3
	bench_step "$1" connect connect || return 1
	if [ -n "$3" ] && ! bench_step "$1" "poll queues" poll_queues_mapped; then
		delete_ctrl
		return 1
	fi
	QPC=$(qp_count)
	bench_ulp "$1" "$BENCH_ROUNDS" "$CYCLES" "$2"
	_bv_rc=$?
	bench_step "$1" delete delete_ctrl && bench_step "$1" "queues freed" qps_back 30 "$QP0" || _bv_rc=1
	return $_bv_rc
}
if [ -n "${BENCH_ROUNDS:-}" ]; then
	QP0=$(qp_count)
	bench_step nvme setup setup_target &&
		bench_variant nvme-reset bench_reset "" &&
		bench_variant nvme-delete bench_delete "" &&
		bench_variant nvme-reset-poll bench_reset ",nr_poll_queues=2" &&
		bench_variant nvme-delete-poll bench_delete ",nr_poll_queues=2"
	exit $?
fi

check nvmet_rdma_target_setup setup_target
check drain_tracepoint_enabled trace_on
check "nvme_rdma_${CYCLES}_cycles_data_matches" cycles
# Each cycle tears down an admin and at least one I/O queue on each side.
check drains_ran_on_both_sides drains_traced $((CYCLES * 4))
echo "rust-drain: $(grep -c cq_drain_complete "$TRACE/trace" 2>/dev/null) cq_drain_complete events in $CYCLES nvme cycles"

if [ "$PROVIDER" = siw ]; then
	# The port stays: unlinking its subsystem after connects is the
	# lockdep report of patches/reports/nvmet-port-relink-lockdep.txt.
	# siw0's delete takes its listener away.
	ktap_end "$SUITE"
	exit 0
fi
ktap_end nvme_rdma_rxe

# Waits at most $2 seconds (of uptime, however long each sleep takes) for
# process $1; fails if it is still running.
wait_bounded() {
	end=$(($(cut -d. -f1 /proc/uptime) + $2))
	while kill -0 "$1" 2>/dev/null; do
		[ "$(cut -d. -f1 /proc/uptime)" -lt "$end" ] ||
			{ echo "pid $1 still running after $2 s"; return 1; }
		sleep 0.1
	done
}

rxe_readd() {
	rdma link add rxe0 type rxe netdev dummy0 && rxe_wait_active
}

# nvmet-rdma drops its listener when the device goes away and does not
# listen again by itself. Re-enabling the port (unlink and link its
# subsystem) makes lockdep report nvmet_config_sem against the rdma_cm
# handler_mutex (upstream 7.3, nvmet_port_subsys_drop_link()), so listen
# on a new port instead, same address. With rust_drain_race_known_bugs,
# both are shown (patches/reports/nvmet-*.txt): the old port is tried,
# then re-enabled.
port=1
# Re-enables port $port: unlinks its subsystem and links it again.
relink() {
	rm "$CFG/ports/$port/subsystems/$NQN" &&
		ln -s "$CFG/subsystems/$NQN" "$CFG/ports/$port/subsystems/$NQN"
}
relisten() {
	if [ -n "$known_bugs" ]; then
		sleep 6
		if connect 2>/dev/null; then
			io_and_delete 0
		else
			echo "nvmet: port $port does not listen again after rxe0 came back"
		fi
		relink
		return
	fi
	port=$((port + 1))
	p=$CFG/ports/$port
	mkdir $p &&
		echo rdma >$p/addr_trtype &&
		echo ipv4 >$p/addr_adrfam &&
		echo $ADDR >$p/addr_traddr &&
		echo 4420 >$p/addr_trsvcid &&
		ln -s $CFG/subsystems/$NQN $p/subsystems/$NQN
}

connect_retry() {
	for _ in $(seq 10); do
		connect 2>/dev/null && return 0
		sleep 1
	done
	echo "no connect within 10 s after rxe0 came back"
	return 1
}

# One race: rxe0's removal while a controller is connected, in turn during
# I/O and on an idle controller. The ULPs tear down from their ib_client
# remove callbacks; both sides must finish, the controller must be gone, and
# rxe0 must come back.
#
# Two more forms find upstream 7.3 bugs outside the drain, so they run only
# with rust_drain_race_known_bugs on the kernel command line:
# - reset: the host's reset_controller racing the removal: KASAN
#   slab-use-after-free in nvme_rdma_remove_one(), which reads
#   ctrl->device after nvme_rdma_reset_ctrl_work() freed it;
# - delete: the host's sysfs delete_controller racing the removal:
#   nvme_delete_ctrl_sync() tears down in the writer's context and
#   nvme_rdma_remove_one() only flushes nvme_delete_wq, so the device goes
#   away under the host's queues and ib_cq_pool_cleanup() WARNs.
race() {
	connect_retry || return 1
	# shellcheck disable=SC2086 # forms: a list of words, one per form
	set -- $forms
	shift $((race_i % $#))
	other=""
	case $1 in
	io)
		dd if="$dev" of=/dev/null bs=4096 count=100000 iflag=direct 2>/dev/null &
		other=$!
		sleep 0.2
		;;
	reset)
		echo 1 >"$ctrl/reset_controller" &
		other=$!
		;;
	delete)
		echo 1 >"$ctrl/delete_controller" &
		other=$!
		;;
	esac
	rdma link delete rxe0 &
	rm=$!
	wait_bounded $rm 60 || return 1
	[ -z "$other" ] || wait_bounded "$other" 60 || return 1
	for _ in $(seq 100); do
		[ -e "$ctrl" ] || break
		sleep 0.1
	done
	[ -e "$ctrl" ] && { echo "$1: controller $ctrl still there: $(cat "$ctrl/state")"; return 1; }
	rxe_readd && relisten
}

races() {
	race_i=0
	while [ $race_i -lt "$RACES" ]; do
		race || { echo "race $race_i failed"; return 1; }
		race_i=$((race_i + 1))
	done
	# The device and the ULP still work after the races.
	connect_retry && io_and_delete 0 || return 1
	# Known bugs: re-enabling a port that listens (unlink and link its
	# subsystem) after connects: lockdep.
	[ -z "$known_bugs" ] || relink
}

ktap_begin rxe_removal_race
forms="io idle"
known_bugs=""
grep -q rust_drain_race_known_bugs /proc/cmdline && forms="io idle reset delete" known_bugs=1
# rust_drain_race_forms=a,b: only these forms (make repro-upstream FORMS=a,b:
# without reset's KASAN report, which turns lockdep off).
forms_arg=$(sed -n 's/.*rust_drain_race_forms=\([a-z,]*\).*/\1/p' /proc/cmdline | tr , ' ')
forms=${forms_arg:-$forms}
# A host tearing down a controller whose target vanished waits for its
# commands to time out (60 s admin, 30 s I/O by default), longer than the
# debug kernel's hung-task timeout (20 s): shorten them for this suite.
echo 5 >/sys/module/nvme_core/parameters/admin_timeout
echo 5 >/sys/module/nvme_core/parameters/io_timeout
trace_on
check "rxe_removal_races_ulp_teardown_${RACES}_times" races
# Both sides drain at least one QP (two queues) per race.
check drains_ran_in_the_races drains_traced $((RACES * 4))
ktap_end rxe_removal_race
