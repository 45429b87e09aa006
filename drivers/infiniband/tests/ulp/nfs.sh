#!/bin/sh
# nfs_rdma_*: NFS over RDMA, client and server, over rxe0.
#
# NFSv4.2 over RDMA in one guest, over rxe0: knfsd (svcrdma) exports a
# tmpfs, the NFS client (xprtrdma) mounts it with proto=rdma. The client is
# the one in-tree ULP that calls ib_drain_rq() itself (rpcrdma_xprt_drain():
# ib_drain_rq(), then ib_drain_sq()); the server calls ib_drain_qp() from
# svc_rdma_free(). A stacktrace trigger on cq_drain_complete tells whose
# drain each event was.
# Usage: nfs.sh CYCLES [siw]. Prints three KTAP suites: nfs_rdma_rxe,
# nfs_rdma_server_restart, nfs_rdma_rxe_removal; with siw, the cycles alone
# over siw0 (iWARP, through the iw_cm): nfs_rdma_siw.
# BENCH_ROUNDS=R nfs.sh K: make bench-ulp's cycles instead (below).

CYCLES=${1:-20}
PROVIDER=${2:-rxe}
ADDR=169.254.1.1
if [ "$PROVIDER" = siw ]; then
	ADDR=10.99.0.1
	ip addr replace $ADDR/24 dev dummy2
fi
PORT=20049
EXPORT=/srv/nfs
MNT=/mnt/nfs
NFSD=/proc/fs/nfsd
OPTS=vers=4.2,proto=rdma,port=$PORT
# nfs-utils lives in /usr/sbin.
PATH=$PATH:/usr/sbin

. /ktap.sh
. /rdma.sh

# Waits at most $1 s for `cat $2` to print $3.
wait_for() {
	for _ in $(seq $(($1 * 10))); do
		[ "$(cat "$2" 2>/dev/null)" = "$3" ] && return 0
		sleep 0.1
	done
	echo "$2 is '$(cat "$2" 2>/dev/null)' after $1 s, want '$3'"
	return 1
}

# Starts knfsd on the RDMA port only (no TCP, no UDP): NFSv4 only, so that
# neither lockd nor rpcbind is needed; a 10 s grace period (the least).
server_start() {
	echo "-2 -3 +4 +4.1 +4.2" >$NFSD/versions &&
		echo 10 >$NFSD/nfsv4gracetime && echo 10 >$NFSD/nfsv4leasetime &&
		echo "rdma $PORT" >$NFSD/portlist && echo 4 >$NFSD/threads &&
		grep -q "rdma $PORT" $NFSD/portlist || return 1
	# Without nfsdcld there is no client tracking: the grace period runs to
	# its end, and opens wait until then.
	wait_for 30 $NFSD/v4_end_grace Y
}

server_stop() {
	echo 0 >$NFSD/threads && wait_for 30 $NFSD/threads 0
}

setup() {
	ip link set lo up
	modprobe nfsd && modprobe rpcrdma && modprobe nfsv4 || return 1
	mount -t nfsd nfsd $NFSD || return 1
	mkdir -p $EXPORT $MNT /var/lib/nfs /run &&
		mount -t tmpfs -o size=64m tmpfs $EXPORT || return 1
	echo "$EXPORT *(rw,fsid=0,no_root_squash,insecure,no_subtree_check,sync)" >/etc/exports
	exportfs -ra || return 1
	# rpc.mountd answers the kernel's export upcalls; -N 2 -N 3: v4 only.
	rpc.mountd -F -N 2 -N 3 -u >/tmp/mountd.log 2>&1 &
	echo $! >/tmp/mountd.pid
	server_start
}

# Every NFS operation is bounded: on a hard mount whose server is gone
# they would block for good.
nfs_mount() {
	bounded 60 mount.nfs4 $ADDR:/ $MNT -o $OPTS || { echo "mount.nfs4 -o $OPTS failed"; return 1; }
}

nfs_umount() {
	bounded 60 umount $MNT || { echo "umount $MNT failed"; return 1; }
}

# Writes 4 MiB of random data to $MNT/$1 and keeps a copy in /tmp.
write_file() {
	dd if=/dev/urandom of="/tmp/nfs.$1" bs=64k count=64 2>/dev/null &&
		bounded 60 sh -c "cp /tmp/nfs.$1 $MNT/$1 && sync"
}

# Compares $MNT/$1 with the copy in /tmp.
same() {
	bounded 60 cmp "/tmp/nfs.$1" "$MNT/$1"
}

# Leaves nothing for the suites after this one (a failed step above may
# have left a mount, nfsd or rxe0's removal): ends with checks that it did.
cleanup() {
	grep -q " $MNT " /proc/mounts && umount -f -l $MNT
	rdma dev show rxe0 >/dev/null 2>&1 ||
		{ rdma link add rxe0 type rxe netdev dummy0 && rxe_wait_active; }
	server_stop
	kill "$(cat /tmp/mountd.pid)" 2>/dev/null
	exportfs -ua
	umount $EXPORT
	umount $NFSD
	! grep -qE " ($MNT|$EXPORT|$NFSD) " /proc/mounts && rdma dev show rxe0 >/dev/null &&
		grep -qx 0 /sys/module/rpcrdma/refcnt
}

# One cycle: mount, write, unmount, mount again (nothing cached), read back
# and compare, remove, unmount. Each unmount closes the client's transport.
cycle() {
	rc=0
	nfs_mount && write_file "f$1" && nfs_umount && nfs_mount || return 1
	same "f$1" || rc=1
	bounded 60 rm -f "$MNT/f$1"
	rm -f "/tmp/nfs.f$1"
	nfs_umount && [ $rc = 0 ]
}

cycles() {
	[ "$CYCLES" -ge 1 ] || { echo "CYCLES is $CYCLES: nothing would be tested"; return 1; }
	i=0
	while [ $i -lt "$CYCLES" ]; do
		cycle $i || { echo "cycle $i failed"; return 1; }
		i=$((i + 1))
	done
}

# make bench-ulp (BENCH_ROUNDS set: scripts/guest/init): the server started
# once (setup), then BENCH_ROUNDS rounds of CYCLES cycles per arm
# (bench_ulp, rdma.sh), then cleanup; no suite. A cycle mounts and
# unmounts (no I/O; the unmount closes the connection: the client drains
# its queues, the server its QP from a work item) and ends when both
# sides' QPs are freed.
bench_cycle() {
	nfs_mount && bench_phase mount && nfs_umount && bench_phase umount && qps_back 30 "$QP0"
}
if [ -n "${BENCH_ROUNDS:-}" ]; then
	QP0=$(qp_count)
	bench_step nfs setup setup && bench_ulp nfs "$BENCH_ROUNDS" "$CYCLES" bench_cycle
	rc=$?
	bench_step nfs cleanup cleanup || rc=1
	exit $rc
fi

QP0=$(qp_count)
REFUSALS0=$(refusals)

ktap_begin "nfs_rdma_$PROVIDER"
check nfsd_rdma_server_setup setup
check drain_stacks_traced trace_stacks_on
check "nfs_rdma_${CYCLES}_cycles_data_matches" cycles
# Every drain is in the trace before it stops.
check transports_freed qps_back 30 "$QP0"
trace_stacks_off
# Each cycle unmounts twice, and each unmount closes one connection: the
# client drains its RQ and then its SQ, the server its QP (SQ and RQ). A
# slow guest may see the client reconnect once more (siw, 2026-12-06: 41
# connections for 20 cycles): one drain per queue of each connection.
# At most two more: a drain run twice on both sides would double them all.
check client_ib_drain_rq_ran drains_between $((CYCLES * 2)) $((CYCLES * 2 + 2)) ib_drain_rq rpcrdma_xprt_disconnect
conns=$(drains_from ib_drain_rq rpcrdma_xprt_disconnect)
check client_ib_drain_sq_ran drains_exactly "$conns" ib_drain_sq rpcrdma_xprt_disconnect
check server_ib_drain_qp_ran drains_exactly $((conns * 2)) "$QP_DRAIN" svc_rdma_free
check no_drain_refused no_refusals_since "$REFUSALS0"
if [ "$PROVIDER" = siw ]; then
	check nfs_left_nothing cleanup
	ktap_end nfs_rdma_siw
	exit 0
fi
ktap_end nfs_rdma_rxe

# The server restarts under a mounted client: the client reconnects (and,
# the server having no client tracking, recovers its lease from scratch),
# the file written before reads back, and new I/O works.
restart() {
	nfs_mount && write_file before || return 1
	server_stop || return 1
	server_start || return 1
	write_file after || return 1
	# A new mount: what reads back comes from the server.
	nfs_umount && nfs_mount || return 1
	same before && same after || return 1
	bounded 60 rm -f $MNT/before $MNT/after
	nfs_umount
}

ktap_begin nfs_rdma_server_restart
trace_stacks_on
check server_restart_under_a_mount restart
check transports_freed qps_back 30 "$QP0"
trace_stacks_off
# The stop and two unmounts each closed one connection: the server drained
# each once (it has no listener while it is down); the client's reconnect
# attempts in that time drain more.
check server_drained_at_stop_and_unmounts drains_exactly 6 "$QP_DRAIN" svc_rdma_free
check client_drained_at_stop_and_unmounts drains_at_least 3 ib_drain_rq rpcrdma_xprt_disconnect
check no_drain_refused no_refusals_since "$REFUSALS0"
ktap_end nfs_rdma_server_restart

# rxe0 goes away under a mount: xprtrdma's ib_client remove callback makes
# the client drop its transport (it drains first) and the removal waits for
# that; svcrdma closes its connection on DEVICE_REMOVAL. Both sides finish
# within 60 s. With rxe0 back, the hard mount reconnects and I/O resumes.
removal() {
	nfs_mount && write_file gone || return 1
	bounded 60 rdma link delete rxe0 || { echo "rdma link delete failed"; return 1; }
	rdma link add rxe0 type rxe netdev dummy0 && rxe_wait_active || return 1
	write_file back || return 1
	nfs_umount && nfs_mount || return 1
	same gone && same back || return 1
	bounded 60 rm -f $MNT/gone $MNT/back
	nfs_umount
}

ktap_begin nfs_rdma_rxe_removal
trace_stacks_on
check rxe_removal_under_a_mount removal
check transports_freed qps_back 30 "$QP0"
trace_stacks_off
# As for the restart: the removal and two unmounts each closed one (the
# client cannot reconnect while rxe0 is gone).
check client_drained_at_removal_and_unmounts drains_at_least 3 ib_drain_rq rpcrdma_xprt_disconnect
check server_drained_at_removal_and_unmounts drains_exactly 6 "$QP_DRAIN" svc_rdma_free
check no_drain_refused no_refusals_since "$REFUSALS0"
check nfs_left_nothing cleanup
ktap_end nfs_rdma_rxe_removal
echo "rust-drain: mountd said: $(tr '\n' ' ' </tmp/mountd.log | cut -c1-300)"
