#!/usr/bin/env bash
# Usage: scripts/mutants.sh [NAME...]
# Deliberate breakages of the drain (scripts/mutants/*.patch, each a small
# diff of drain.rs or rust/kernel/infiniband with its reason on the first
# line), applied one at a time to a copy of the overlay, built in a tree of
# their own ($CACHE/mutant-src, build dir build-mutant, the test kernel's
# config), booted as `make test` boots, and judged by the same results.py
# and manifest. Each must be caught: a run that passes is a failure of
# `make mutants`. Prints a table (also out/mutants.md): breakage, what
# caught it, time. NAME selects mutants by file name prefix.
. "$(dirname "$0")/lib.sh"

mapfile -t all < <(cd "$TOP/scripts/mutants" && ls -- *.patch)
chosen=()
for m in "${all[@]}"; do
	if [ $# = 0 ]; then chosen+=("$m"); continue; fi
	for want in "$@"; do
		case "$m" in "$want"*) chosen+=("$m") ;; esac
	done
done
[ ${#chosen[@]} -gt 0 ] || die mutants "" "no mutant matches: $*"

stage=$CACHE/mutant-overlay
export SRC_TREE=$CACHE/mutant-src OVERLAY=$stage
log=$CACHE/logs/console-mutant.log
mkdir -p "$TOP/out"
table=$TOP/out/mutants.md
{
	echo "| breakage | caught by | time (s) |"
	echo "|---|---|---:|"
} >"$table"
rc=0
for m in "${chosen[@]}"; do
	what=$(sed -n '1s/^# //p' "$TOP/scripts/mutants/$m")
	start=$(date +%s)
	rm -rf "$stage"
	mkdir -p "$stage"
	(cd "$TOP" && cp -a Kbuild rust drivers patches "$stage/")
	if ! (cd "$stage" && git apply "$TOP/scripts/mutants/$m") 2>"$CACHE/logs/mutant-apply.log"; then
		echo "| ${m%.patch}: $what | NOT APPLIED (update the mutant) | 0 |" >>"$table"
		rc=1
		continue
	fi
	caught=""
	if ! "$TOP/scripts/build.sh" mutant >"$CACHE/logs/mutant-build.log" 2>&1; then
		caught="NOT BUILT (fix the mutant; $CACHE/logs/mutant-build.log)"
		rc=1
	else
		"$TOP/scripts/initramfs.sh" mutant >/dev/null 2>&1 || die mutants "" "initramfs failed"
		rm -f "$log"
		BOOT_TIMEOUT=${MUTANT_BOOT_TIMEOUT:-200} "$TOP/scripts/boot.sh" mutant "$log" panic_on_warn=1 \
			>/dev/null 2>&1 || true
		res=$CACHE/logs/mutant-results.log
		stuck_rc=0
		[ "$(tr -d '\r' <"$log" | grep -c 'ib_core: fake0: QP 0x42: recv drain waiting for 5 s on CQ 0')" -ge 2 ] ||
			stuck_rc=1
		if python3 "$TOP/scripts/results.py" "$CACHE/src" "$log" "stuck_drain_reported=$stuck_rc" \
			"expect=$TOP/scripts/expected/test.suites" >"$res" 2>&1; then
			caught="NOT CAUGHT"
			rc=1
		else
			# Suites with failed cases, then the run-level failures.
			caught=$( {
				sed -n 's/^  \([a-z_]*\): [0-9]* passed, [1-9][0-9]* failed.*/\1/p' "$res"
				sed -n 's/^FAIL: \(kernel report\|the run did not reach its end\|suite [a-z_]* did not report\).*/\1/p' "$res" | sort -u | head -n 3
			} | paste -sd, - | sed 's/,/, /g')
		fi
	fi
	echo "| ${m%.patch}: $what | $caught | $(($(date +%s) - start)) |" >>"$table"
	tail -n 1 "$table"
done
echo
cat "$table"
[ "$rc" = 0 ] || die mutants "" "a mutant was not caught, or did not apply or build (see the table)"
echo "mutants: all ${#chosen[@]} caught"
