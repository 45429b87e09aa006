#!/usr/bin/env bash
# Usage: scripts/run-tests.sh FLAVOUR test|demo
# Boot the built FLAVOUR kernel once, then either print the results of every
# suite ('test') or a short demo of what runs ('demo').
. "$(dirname "$0")/lib.sh"

flavour=${1:-test} mode=${2:-test}
log=$CACHE/logs/console-$flavour.log
rm -f "$log"
# Object-level proof, besides the in-kernel one: the Rust object defines
# the exported drain functions and verbs.o does not.
sym_rc=0
"$TOP/scripts/check-symbols.sh" "$CACHE/build-$flavour" >"$CACHE/logs/check-symbols.log" 2>&1 || sym_rc=$?
# shellcheck disable=SC2086 # KERNEL_ARGS is a list of words
"$TOP/scripts/boot.sh" "$flavour" "$log" ${KERNEL_ARGS:-}
# Concurrency tests prove little on one CPU: the guest must run on all.
cpu_rc=0
vcpus_up "$log" >"$CACHE/logs/vcpus.log" || cpu_rc=$?

if [ "$mode" = demo ]; then
	echo "== demo: what the booted test kernel did (full log: $log)"
	tr -d '\r' <"$log" | sed 's/^\[[^]]*\] *//' | grep -E \
		'^infiniband rxe0|^ok [0-9]+ (rdma_rxe_setup|rdma_drain_abi|rdma_drain_unit|rdma_drain_rxe|nvme_rdma_rxe|rdma_ib_core_reload)$|exported_drain_is_rust|cq_drain_complete events|^smp: Brought up' |
		grep -v speed | awk '!seen[$0]++' | sed 's/^/   /'
	echo "== the exported drain, in the built objects:"
	sed 's/^/   /' "$CACHE/logs/check-symbols.log" "$CACHE/logs/vcpus.log"
	echo "== make test runs every suite and ends with 'N passed, N failed'"
	exit 0
fi
cat "$CACHE/logs/check-symbols.log" "$CACHE/logs/vcpus.log"
# A drain that waits long is reported by a line naming device and QP (no
# WARN): ib_core's fault suite has two such drains on its fake device.
stuck_rc=0
[ "$(tr -d '\r' <"$log" | grep -c 'ib_core: fake0: QP 0x42: recv drain waiting for 5 s on CQ 0, marker not reaped yet')" -ge 2 ] ||
	stuck_rc=1
# Every refusal of ib_core's fault suite printed its line naming the device
# and QP (the WARNs are counted by the suite itself).
refusal_rc=0
for why in 'failed to drain recv queue: -22' 'failed to drain recv queue: -12' \
	'cannot drain the recv queue: CQ 0 is not from ib_alloc_cq()' \
	'cannot drain the recv queue: it is an SRQ'; do
	# No grep -q in a pipe: under pipefail, tr's SIGPIPE would fail it.
	tr -d '\r' <"$log" | grep -F "ib_core: fake0: QP 0x42: $why" >/dev/null || refusal_rc=1
done
checks=("check_symbols=$sym_rc" "all_vcpus_up=$cpu_rc" "stuck_drain_reported=$stuck_rc"
	"refusals_reported=$refusal_rc")
# The debug kernel keeps one drain waiting past the hung-task timeout: the
# detector's report must name the drain (the guest checks its count).
if grep -qx 'CONFIG_KASAN=y' "$CACHE/build-$flavour/.config"; then
	hung_rc=0
	tr -d '\r' <"$log" | grep -A 40 'blocked for more than' | grep 'ib_drain_rq' >/dev/null || hung_rc=1
	checks+=("hung_task_names_the_drain=$hung_rc")
fi
# Every suite this flavour must report, with its least number of cases and
# runs (with INFINIBAND=m, ib_core's and the rxe suites run again after the
# ib_core reload).
# (make mutants boots a broken test kernel: it must meet the test manifest.)
expect=$TOP/scripts/expected/${flavour/mutant/test}.suites
rc=0
python3 "$TOP/scripts/results.py" "$CACHE/src" "$log" "${checks[@]}" "expect=$expect" || rc=$?
[ "$rc" = 0 ] || echo "console log: $log"
exit "$rc"
