#!/usr/bin/env bash
# Usage: scripts/test-2host.sh FLAVOUR [ROUNDS]
# Two VMs of the FLAVOUR kernel and initramfs, an nvme-rdma initiator and
# an nvmet-rdma target, each with rxe on a virtio NIC; the NICs are joined
# by a QEMU datagram link over two Unix sockets in a private directory, so
# the pair reaches nothing else (-nic none otherwise). The initiator runs
# drivers/infiniband/tests/ulp/twohost.sh and asks for each fault on its
# console; this script does it: SIGKILL of the target's QEMU and a fresh
# boot, the target's NIC link off and on through its QEMU monitor, or the
# wire cut (both sockets renamed away) and restored. Results: the
# initiator's suites, each target boot's console clean, 'N passed, N failed'.
# panic_on_warn=1 as in make test; KUnit off: the suites at boot are make
# test's, and they would only slow each boot.
. "$(dirname "$0")/lib.sh"

flavour=${1:-test}
rounds=${2:-10}
# The debug kernel boots and recovers several times slower.
timeout_s=${BOOT_TIMEOUT:-$([ "$flavour" = debug ] && echo 7200 || echo 3600)}
ilog=$CACHE/logs/2host-$flavour-initiator.log
tlogs=$CACHE/logs/2host-$flavour-target
dir=$(mktemp -d)
rm -f "$ilog" "$tlogs"-*.log
init_pid="" target_pid="" boots=0
: >"$ilog"

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	for p in $init_pid $target_pid; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT

# qemu ROLE MAC SOCK PEER LOG: one VM of the pair, in the background.
qemu() {
	guest_qemu "$flavour" "$5" panic_on_warn=1 kunit.enable=0 rust_drain_2host="$1" rust_drain_2host_rounds="$rounds"
	"${QEMU[@]}" -nic none \
		-netdev "dgram,id=n0,local.type=unix,local.path=$dir/$3,remote.type=unix,remote.path=$dir/$4" \
		-device "virtio-net-pci,netdev=n0,id=nic0,mac=$2" \
		-monitor "unix:$dir/$1.mon,server=on,wait=off" </dev/null &
}

boot_target() {
	boots=$((boots + 1))
	rm -f "$dir/target.sock" "$dir/target.mon"
	qemu target 52:54:00:12:02:02 target.sock initiator.sock "$tlogs-$boots.log"
	target_pid=$!
}

# monitor CMD: one command to the target's QEMU monitor.
monitor() {
	python3 - "$dir/target.mon" "$1" <<'EOF'
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
s.recv(4096)
s.sendall((sys.argv[2] + "\n").encode())
time.sleep(0.3)
s.recv(4096)
s.close()
EOF
}

# act ACTION: what the initiator asked for.
act() {
	case $1 in
	kill-target)
		{ kill -9 "$target_pid" && wait "$target_pid" 2>/dev/null; } || true
		target_pid=""
		;;
	boot-target) boot_target ;;
	link-off) monitor "set_link nic0 off" ;;
	link-on) monitor "set_link nic0 on" ;;
	# Each QEMU sends to the other's socket by name: without the names,
	# its packets are dropped, and no NIC sees a carrier change.
	wire-off) mv "$dir/target.sock" "$dir/target.cut" && mv "$dir/initiator.sock" "$dir/initiator.cut" ;;
	wire-on) mv "$dir/target.cut" "$dir/target.sock" && mv "$dir/initiator.cut" "$dir/initiator.sock" ;;
	*) echo "2host: unknown request '$1'" >&2; return 1 ;;
	esac
}

step "2host: $flavour kernel, $rounds rounds of each fault (consoles: $ilog, $tlogs-N.log)"
t0=$(date +%s)
boot_target
qemu initiator 52:54:00:12:02:01 initiator.sock target.sock "$ilog"
init_pid=$!

# Serve the initiator's requests, in order, once each, until it powers off.
done_n=0 timed_out=0 act_rc=0
while kill -0 "$init_pid" 2>/dev/null; do
	if [ $(($(date +%s) - t0)) -ge "$timeout_s" ]; then
		echo "2host: TIMEOUT after ${timeout_s}s" | tee -a "$ilog"
		timed_out=1
		kill -9 "$init_pid" 2>/dev/null || true
		break
	fi
	next=$(tr -d '\r' <"$ilog" | grep -ao 'rust-drain: 2host: request [a-z-]* #[0-9]*' |
		awk -v n=$((done_n + 1)) 'substr($5, 2) == n { print $4; exit }' || true)
	if [ -n "$next" ]; then
		echo "2host: $(($(date +%s) - t0)) s: request #$((done_n + 1)): $next"
		act "$next" || act_rc=1
		done_n=$((done_n + 1))
		continue
	fi
	sleep 0.5
done
init_rc=0
wait "$init_pid" || init_rc=$?
init_pid=""
[ -n "$target_pid" ] && { kill -9 "$target_pid" 2>/dev/null || true; wait "$target_pid" 2>/dev/null || true; }
target_pid=""
done_step
echo "2host: $done_n requests served, $boots target boots, $(($(date +%s) - t0)) s"
tr -d '\r' <"$ilog" | grep -a 'rust-drain: 2host: .* round .* took' | sed 's/^\[[^]]*\] *//' |
	awk '{ s[$3] += $(NF - 1); n[$3]++ } END { for (f in s) printf "2host: %s: %d rounds, %.1f s each\n", f, n[f], s[f] / n[f] }' ||
	true

# Every target boot's console: its setup suite, and no kernel report.
# Both consoles stay in $CACHE/logs.
cat "$tlogs"-*.log >"$dir/targets.log"
target_rc=0
python3 "$TOP/scripts/results.py" "$CACHE/src" "$dir/targets.log" noend \
	"expect=$TOP/scripts/expected/2host-target.suites" >"$CACHE/logs/2host-$flavour-targets.results" 2>&1 ||
	target_rc=1
sed 's/^/   target: /' "$CACHE/logs/2host-$flavour-targets.results" | grep -v ' passed, ' || true
cpu_rc=0
vcpus_up "$ilog" || cpu_rc=1
rc=0
python3 "$TOP/scripts/results.py" "$CACHE/src" "$ilog" "qemu_exit=$init_rc" "no_timeout=$timed_out" \
	"requests_served=$act_rc" \
	"all_vcpus_up=$cpu_rc" "target_consoles_clean=$target_rc" \
	"expect=$TOP/scripts/expected/2host.suites" || rc=$?
[ "$rc" = 0 ] || echo "consoles: $ilog $tlogs-*.log"
exit "$rc"
