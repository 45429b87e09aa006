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
		'^infiniband rxe0|^ok [0-9]+ (rdma_rxe_setup|rdma_drain_unit|rdma_drain_rxe|nvme_rdma_rxe|rdma_ib_core_reload)$|cq_drain_complete events|^smp: Brought up' |
		grep -v speed | awk '!seen[$0]++' | sed 's/^/   /'
	echo "== the exported drain, in the built objects:"
	sed 's/^/   /' "$CACHE/logs/check-symbols.log" "$CACHE/logs/vcpus.log"
	echo "== make test runs every suite and ends with 'N passed, N failed'"
	exit 0
fi
cat "$CACHE/logs/check-symbols.log" "$CACHE/logs/vcpus.log"
# A drain that waits long is reported by one line naming device, QP, queue
# and CQ (no WARN), while it still waits: ib_core's fault suite has two such
# drains on its fake device, each ~11 s, and the debug kernel's hung-task
# suite one more (60 s). Each prints "stuck drain begins" right before the
# drain and "stuck drain's marker completes" when its marker is completed:
# one stuck line must come between the two, 5 to 8 s after the first (a
# line every 5 s would make two; one printed only when the marker came, none).
stuck_rc=0
n_stuck=$(tr -d '\r' <"$log" | awk '
	function ts(l) { return substr(l, 2, index(l, "]") - 2) + 0 }
	/^\[ *[0-9.]+\] ib_drain_test: stuck drain begins$/ { t0 = ts($0); lines = 0; open = 1; next }
	/^\[ *[0-9.]+\] fake0: QP 0x42: recv drain waiting for 5 s on CQ 9, marker not reaped yet/ {
		if (open && ts($0) - t0 >= 5 && ts($0) - t0 <= 8) lines++; else bad++
		next
	}
	/^\[ *[0-9.]+\] ib_drain_test: stuck drain.s marker completes$/ {
		if (open && lines == 1) ok++; else bad++
		open = 0
	}
	END { print (bad ? -1 : ok + 0) }')
n_faults=$(tr -d '\r' <"$log" | grep -cE '# Subtest: rdma_drain_unit_faults$' || true)
n_hung=$(tr -d '\r' <"$log" | grep -cE '# Subtest: rdma_drain_hung_task$' || true)
echo "stuck drains: $n_stuck reported once while waiting, for $n_faults fault suite runs (2 each) and $n_hung hung-task runs (1 each); -1: a line out of place"
[ "$n_faults" -ge 1 ] && [ "$n_stuck" -eq $((2 * n_faults + n_hung)) ] || stuck_rc=1
# Every refusal of ib_core's fault suite printed its line naming the
# device, QP, queue, errno and reason (the WARNs are counted by the suite).
refusal_rc=0
for why in 'send queue: -22: cannot move the QP to the error state' \
	'recv queue: -22: cannot move the QP to the error state' \
	'recv queue: -12: cannot post the marker' \
	'send queue: -12: cannot post the marker' \
	'recv queue: -22: its CQ is not from ib_alloc_cq()' \
	'recv queue: -22: its receives come from an SRQ, drain it with ib_drain_qp()' \
	'recv queue: -22: no CQ' \
	'send queue: -22: no CQ' \
	'send queue: -22: its CQ is not from ib_alloc_cq()' \
	'shared recv queue: -22: cannot move the QP to the error state' \
	'shared recv queue: -22: its CQ is not from ib_alloc_cq()' \
	'shared recv queue: -22: no CQ'; do
	# No grep -q in a pipe: under pipefail, tr's SIGPIPE would fail it.
	tr -d '\r' <"$log" | grep -F "fake0: QP 0x42: failed to drain $why" >/dev/null || {
		echo "refusal line not found: $why"
		refusal_rc=1
	}
done
# The fault suite's burst of 41 refusals within one interval of the rate
# limit (10 lines per 5 s) prints at least its first line, at most 10.
n_burst=$(tr -d '\r' <"$log" | awk '
	/ib_drain_test: refusal burst begins$/ { open = 1; n = 0; next }
	open && /fake0: QP 0x42: failed to drain recv queue: -12: cannot post the marker/ { n++ }
	/ib_drain_test: refusal burst ends$/ { if (open) { runs++; if (n < 1 || n > 10) bad++ } open = 0 }
	END { print (bad || !runs ? -1 : runs) }')
echo "refusal bursts: $n_burst within the rate limit (-1: none, or one with 0 or more than 10 lines)"
burst_rc=0
[ "$n_burst" -ge 1 ] || burst_rc=1
checks=("check_symbols=$sym_rc" "all_vcpus_up=$cpu_rc" "stuck_drain_reported=$stuck_rc"
	"refusals_reported=$refusal_rc" "refusal_lines_rate_limited=$burst_rc")
# What the types of kernel::infiniband refuse: snippets that must not build,
# each beside a control that must (scripts/compile-fail.sh).
mapfile -t cf < <("$TOP/scripts/compile-fail.sh" "$flavour")
cat "$CACHE/logs/compile-fail.log"
checks+=("${cf[@]}")
# The debug kernel keeps one drain waiting past the hung-task timeout: the
# detector's report must name the drain (the guest checks its count).
if grep -qx 'CONFIG_KASAN=y' "$CACHE/build-$flavour/.config"; then
	hung_rc=0
	tr -d '\r' <"$log" | grep -A 40 'blocked for more than' | grep 'ib_drain_rq' >/dev/null || hung_rc=1
	checks+=("hung_task_names_the_drain=$hung_rc")
fi
# The debug kernel calls each exported drain in atomic context: might_sleep()
# must report each, at its line in drain.rs (the line of the might_sleep()
# call in that export's body, read from the built source).
if grep -qx 'CONFIG_DEBUG_ATOMIC_SLEEP=y' "$CACHE/build-$flavour/.config"; then
	sleep_rc=0
	drain_rs=${SRC_TREE:-$CACHE/src}/drivers/infiniband/core/drain.rs
	for f in ib_drain_sq ib_drain_rq ib_drain_qp; do
		line=$(awk -v f="$f" '$0 ~ "fn " f "\\(" { in_f = 1; next } in_f && /fn / { exit } in_f && /might_sleep\(\);/ { print NR; exit }' "$drain_rs")
		if [ -z "$line" ] || ! tr -d '\r' <"$log" |
			grep -E "BUG: sleeping function called from invalid context at drivers/infiniband/core/drain\.rs:$line\$" >/dev/null; then
			echo "might_sleep(): no report from $f (drain.rs:${line:-none})"
			sleep_rc=1
		fi
	done
	checks+=("might_sleep_names_the_drain=$sleep_rc")
fi
# Every suite this flavour must report, with its least number of cases and
# runs (with INFINIBAND=m, ib_core's and the rxe suites run again after the
# ib_core reload).
# (make mutants boots a broken test kernel: it must meet the test manifest.)
case $flavour in
mutant) expect="test" ;;
mutant-debug) expect=debug ;;
*) expect=$flavour ;;
esac
expect=$TOP/scripts/expected/$expect.suites
rc=0
python3 "$TOP/scripts/results.py" "$CACHE/src" "$log" "${checks[@]}" "expect=$expect" || rc=$?
[ "$rc" = 0 ] || echo "console log: $log"
exit "$rc"
