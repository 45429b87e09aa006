#!/bin/sh
# iser_rxe: iSCSI over iSER, initiator and target, over rxe0.
#
# iSCSI over iSER in one guest, over rxe0: LIO's iSCSI target exports a
# null_blk disk (iblock backstore, configfs by hand) on a portal with iSER
# on, open-iscsi (iscsid, iscsiadm) logs in over ib_iser, I/O is verified,
# it logs out. The initiator drains its QP once per connection when the
# connection stops (iser_conn_terminate(): ib_drain_qp(), softirq CQ); the
# target twice when it closes it (isert_wait_conn(), isert_free_conn():
# ib_drain_qp(), workqueue CQ).
# Usage: iser.sh CYCLES. Prints the KTAP suite iser_rxe.

CYCLES=${1:-20}
ADDR=169.254.1.1
PORT=3260
IQN=iqn.2003-01.org.linux-iscsi.rust-drain:iser
INAME=iqn.2003-01.org.linux-iscsi.rust-drain:initiator
CFS=/sys/kernel/config
# iblock_3: srp.sh's backstore is iblock_1.
BS=$CFS/target/core/iblock_3/nullb3
T=$CFS/target/iscsi/$IQN
P=$T/tpgt_1
NP=$P/np/$ADDR:$PORT

. /ktap.sh
. /rdma.sh

# Every iscsiadm call is bounded: a login or logout that hangs fails its
# check instead of the run.
adm() {
	timeout 60 iscsiadm "$@"
}

# The node record of the target, on open-iscsi's built-in iface "iser".
node() {
	adm -m node -T $IQN -p $ADDR:$PORT -I iser "$@"
}

# Process $1 has exited. An exited iscsid may stay a zombie until init
# reaps it: that counts as gone.
gone() {
	s=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' /proc/"$1"/status 2>/dev/null)
	[ -z "$s" ] || [ "$s" = Z ]
}

target_setup() {
	mount -t configfs none $CFS 2>/dev/null
	modprobe null_blk && modprobe target_core_iblock && modprobe iscsi_target_mod &&
		modprobe ib_isert || return 1
	nullb_add nullb3 || return 1
	mkdir -p $BS && echo "udev_path=/dev/nullb3" >$BS/control && echo 1 >$BS/enable || return 1
	mkdir -p $P/lun/lun_0 && ln -s $BS $P/lun/lun_0/nullb3 || return 1
	# Demo mode: no CHAP, and any initiator gets an ACL of its own, with
	# every LUN of the TPG, writable, at login.
	echo 0 >$P/attrib/authentication && echo 1 >$P/attrib/generate_node_acls &&
		echo 1 >$P/attrib/cache_dynamic_acls &&
		echo 0 >$P/attrib/demo_mode_write_protect || return 1
	# The portal listens on TCP; its iser attribute adds ib_isert's RDMA/CM
	# listener on the same address.
	# shellcheck disable=SC2015 # the message on a failure of any step
	mkdir $NP && echo 1 >$NP/iser && grep -qx 1 $NP/iser || { echo "no iSER listener on $ADDR:$PORT"; return 1; }
	echo 1 >$P/enable
}

# iscsid in the foreground, in the background, with what it needs and no
# more: no iscsid.startup (it would call systemctl), so an iscsiadm that
# finds no iscsid fails instead of starting one.
initiator_setup() {
	modprobe sd_mod && modprobe ib_iser || return 1
	mkdir -p /etc/iscsi/nodes /etc/iscsi/send_targets /etc/iscsi/ifaces \
		/run/lock/iscsi /var/lib/iscsi || return 1
	echo "InitiatorName=$INAME" >/etc/iscsi/initiatorname.iscsi
	# iscsid serves root only: by uid with ipc_auth_uid, else by name
	# (getpwuid(), hence the passwd line).
	echo "iscsid.ipc_auth_uid = Yes" >/etc/iscsi/iscsid.conf
	[ -e /etc/passwd ] || echo "root:x:0:0:root:/root:/bin/sh" >/etc/passwd
	# In a session of its own: on SIGTERM iscsid signals its whole
	# process group, which would otherwise be this script's.
	setsid iscsid -f -n >/tmp/iscsid.log 2>&1 &
	echo $! >/tmp/iscsid.pid
	# iscsiadm gives up at once on no daemon: wait for its socket.
	wait_until 10 grep -q ISCSIADM_ABSTRACT_NAMESPACE /proc/net/unix ||
		{ echo "iscsid said: $(tail -n 3 /tmp/iscsid.log | tr '\n' ' ')"; return 1; }
	adm -m node -o new -T $IQN -p $ADDR:$PORT,1 -I iser || return 1
	# Fail fast: a login gives up after 2 x 15 s, and I/O on a lost
	# session fails after 15 s, all within adm's 60 s.
	node -o update -n node.session.initial_login_retry_max -v 2 &&
		node -o update -n 'node.conn[0].timeo.login_timeout' -v 15 &&
		node -o update -n 'node.conn[0].timeo.logout_timeout' -v 15 &&
		node -o update -n node.session.timeo.replacement_timeout -v 15
}

# The target's session of our initiator exists; it goes only after the
# target closed the connection, its drains done (iscsit_close_connection()).
target_has_session() {
	grep -qF $INAME $P/dynamic_sessions
}

# Logs in; sets $sess (the iscsi_session in sysfs) and $dev (its SCSI disk).
login() {
	node --login || { echo "login to $IQN failed"; return 1; }
	# shellcheck disable=SC2012 # sysfs names: no blanks
	sess=$(ls -d /sys/class/iscsi_session/session* 2>/dev/null | head -n 1)
	[ -n "$sess" ] || { echo "logged in, but no iscsi_session"; return 1; }
	wait_until 10 target_has_session || return 1
	dev=""
	# The LUN scan runs after the login returns.
	for _ in $(seq 200); do
		# shellcheck disable=SC2012 # sysfs names: no blanks
		dev=$(ls "$sess"/device/target*/*/block 2>/dev/null | head -n 1)
		[ -n "$dev" ] && [ -b "/dev/$dev" ] && return 0
		sleep 0.1
	done
	echo "no disk on ${sess##*/} within 20 s"
	return 1
}

logout() {
	node --logout || { echo "logout from $IQN failed"; return 1; }
	wait_until 30 sh -c "! test -e $sess" || return 1
	wait_until 30 sh -c "! grep -qF $INAME $P/dynamic_sessions"
}

# One cycle: log in, write a pattern at block $1, read it back, compare,
# log out (the initiator's QP drains, then the target's).
cycle() {
	login || return 1
	dd if=/dev/urandom of=/tmp/iser.pattern bs=4096 count=64 2>/dev/null
	rc=1
	if ! dd if=/tmp/iser.pattern of="/dev/$dev" bs=4096 count=64 seek="$1" oflag=direct 2>/tmp/iser.dd; then
		echo "write to /dev/$dev: $(tail -n 1 /tmp/iser.dd)"
	elif ! dd if="/dev/$dev" of=/tmp/iser.readback bs=4096 count=64 skip="$1" iflag=direct 2>/tmp/iser.dd; then
		echo "read from /dev/$dev: $(tail -n 1 /tmp/iser.dd)"
	else
		cmp /tmp/iser.pattern /tmp/iser.readback && rc=0
	fi
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

# No session left (a failed cycle may leave one), no node record, no iscsid.
initiator_remove() {
	rc=0
	node --logout >/dev/null 2>&1
	wait_until 30 sh -c '! ls -d /sys/class/iscsi_session/session* >/dev/null 2>&1' || rc=1
	node -o delete || rc=1
	# iscsid goes in any case.
	pid=$(cat /tmp/iscsid.pid 2>/dev/null)
	if [ -n "$pid" ]; then
		# shellcheck disable=SC2015 # kill -9 if either fails
		kill "$pid" && wait_until 10 gone "$pid" || { kill -9 "$pid"; rc=1; }
	fi
	return $rc
}

# The reverse of target_setup, step by step (a setup that stopped halfway
# leaves less); the sessions are gone, so are their drains.
# target_core_iblock stays if another suite's backstore still holds it.
target_remove() {
	[ -e $P/enable ] && echo 0 >$P/enable
	[ -e $NP/iser ] && echo 0 >$NP/iser
	[ -d $NP ] && rmdir $NP
	[ -L $P/lun/lun_0/nullb3 ] && rm $P/lun/lun_0/nullb3
	for d in $P/lun/lun_0 $P $T $CFS/target/iscsi $BS $CFS/target/core/iblock_3 \
		$CFS/nullb/nullb3; do
		[ -d "$d" ] && rmdir "$d"
	done
	rmmod ib_isert iscsi_target_mod || return 1
	ls -d $CFS/target/core/iblock_* >/dev/null 2>&1 || rmmod target_core_iblock
}

teardown() {
	rc=0
	initiator_remove || rc=1
	rmmod ib_iser || rc=1
	target_remove || rc=1
	return $rc
}

REFUSALS0=$(refusals)
ktap_begin iser_rxe
check iscsi_target_setup target_setup
check iscsid_node_setup initiator_setup
check drain_stacks_traced trace_stacks_on
check "iser_${CYCLES}_logins_data_match" cycles
trace_stacks_off
# One connection per session; each drain of a QP drains its SQ and RQ. The
# initiator drains it once per logout, the target twice (the
# iscsit_close_connection() callbacks wait_conn, then free_conn).
check initiator_ib_drain_qp_ran drains_exactly $((CYCLES * 2)) "$QP_DRAIN" iser_conn_terminate
check target_drained_in_wait_conn drains_exactly $((CYCLES * 2)) "$QP_DRAIN" isert_wait_conn
check target_drained_in_free_conn drains_exactly $((CYCLES * 2)) "$QP_DRAIN" isert_free_conn
check no_drain_refused no_refusals_since "$REFUSALS0"
check iser_config_removed teardown
ktap_end iser_rxe
echo "rust-drain: iscsid said: $(tr '\n' ' ' </tmp/iscsid.log 2>/dev/null | cut -c1-300)"
