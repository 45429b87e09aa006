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

if [ "$mode" = demo ]; then
	echo "== demo: rxe and the drain in the booted kernel"
	grep -E 'rust-drain:|rdma_rxe_setup|rxe0|exported_drain_is_rust' "$log" | sed 's/^\[[^]]*\] //' | head -n 20
	cat "$CACHE/logs/check-symbols.log"
	exit 0
fi
cat "$CACHE/logs/check-symbols.log"
rc=0
python3 "$TOP/scripts/results.py" "$CACHE/src" "$log" "check_symbols=$sym_rc" || rc=$?
[ "$rc" = 0 ] || echo "console log: $log"
exit "$rc"
