#!/usr/bin/env bash
# Usage: scripts/boot.sh FLAVOUR LOG [KERNEL-ARGS...]
# Boot the FLAVOUR test kernel under QEMU (TCG) with its initramfs; the
# console goes to LOG. No network leaves the VM (-nic none). A hard timeout
# always ends QEMU; its exit status is that of the timeout. PIN_VCPUS=1:
# each vCPU thread on a host CPU of its own (pin_vcpus), noted in LOG.pin.
# STOP_AT_FAILURE=1 (make mutants): QEMU is stopped as soon as LOG shows a
# failed KTAP case or suite ("not ok"), noted in LOG; the run then reads as
# cut short, with that failure in it.
. "$(dirname "$0")/lib.sh"

flavour=${1:-test} log=$2
shift 2
timeout_s=${BOOT_TIMEOUT:-300}

step "boot: $flavour kernel (console: $log)"
rc=0
guest_qemu "$flavour" "$log" "$@"
timeout --foreground -k 10 "$timeout_s" "${QEMU[@]}" -monitor none -nic none </dev/null &
qpid=$!
# However this script ends, QEMU ends with it.
trap 'kill "$qpid" 2>/dev/null || true' EXIT
if [ "${PIN_VCPUS:-0}" = 1 ]; then
	pin_vcpus "$qpid" >"$log.pin" || true
	cat "$log.pin"
fi
if [ "${STOP_AT_FAILURE:-0}" = 1 ]; then
	while kill -0 "$qpid" 2>/dev/null; do
		# No grep -q in a pipe: under pipefail, tr's SIGPIPE would fail it.
		if tr -d '\r' <"$log" | grep -E '^(\[ *[0-9.]+\])? *not ok [0-9]+ ' >/dev/null; then
			kill "$qpid" 2>/dev/null || true
			stopped=1
			break
		fi
		sleep 2
	done
fi
wait "$qpid" || rc=$?
trap - EXIT
if [ "${stopped:-0}" = 1 ]; then
	echo "boot: stopped at the first failed test (STOP_AT_FAILURE=1)" >>"$log"
	done_step
	exit 0
fi
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
	echo "boot: TIMEOUT after ${timeout_s}s" >>"$log"
	die boot "$log" "QEMU did not power off within ${timeout_s}s"
fi
[ "$rc" = 0 ] || die boot "$log" "QEMU failed (exit $rc)"
done_step
