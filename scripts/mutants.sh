#!/usr/bin/env bash
# Usage: scripts/mutants.sh [NAME...]
# Deliberate breakages (scripts/mutants/*.patch, each a small diff of the
# overlay with its reason on the first line: of drain.rs or
# rust/kernel/infiniband, or the removal of a fix of patches/), applied
# one at a time to a copy of the overlay, built in a tree of their own
# ($CACHE/mutant-src, build dir build-mutant, the test kernel's config),
# booted and judged as `make test` does (run-tests.sh, the test
# manifest), or caught by the build (a mutant's "# Build: PATTERN" line).
# A mutant with a line "# Kernel: debug" is built and booted as make
# test-debug does (flavour mutant-debug: the debug kernel's config, its
# kernel arguments and timeout, the debug manifest): what only the debug
# kernel checks (might_sleep(), the hung-task report).
# Each must be caught, and by what its line "# Caught-by: ERE" names (a
# suite, a case, a host check or a label of the table, matched whole
# against each name scripts/mutants-caught.py --names gives): a run that
# passes, or fails only elsewhere (a flaky test proves nothing about the
# mutant), is a failure of `make mutants`.
# Prints a table (also out/mutants.md): breakage, what caught it, time.
# NAME selects mutants by file name prefix. Each boot stops at the first
# failed test (boot.sh's STOP_AT_FAILURE); MUTANTS_FULL=1 runs each to its
# end, to name every suite that catches it.
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
	(cd "$TOP" && cp -a Kbuild rust drivers samples patches "$stage/")
	if ! (cd "$stage" && git apply "$TOP/scripts/mutants/$m") 2>"$CACHE/logs/mutant-apply.log"; then
		echo "| ${m%.patch}: $what | NOT APPLIED (update the mutant) | 0 |" >>"$table"
		rc=1
		continue
	fi
	caught=""
	# A mutant with a line "# Build: PATTERN" is caught by a build that fails
	# with PATTERN in its log (a const assertion).
	build_pat=$(sed -n 's/^# Build: //p' "$TOP/scripts/mutants/$m")
	flavour=mutant timeout=${MUTANT_BOOT_TIMEOUT:-600} args=panic_on_warn=1
	if grep -qx '# Kernel: debug' "$TOP/scripts/mutants/$m"; then
		# As make test-debug (the Makefile), with its fewest cycles.
		flavour=mutant-debug timeout=${MUTANT_BOOT_TIMEOUT:-3000}
		args="kunit.filter_glob=rdma_drain* rust_drain_stress_cycles=100 rust_drain_nvme_cycles=10 rust_drain_ulp_cycles=1 rust_drain_ulps=srp,iser rust_drain_cq_race_loops=50"
	fi
	if ! "$TOP/scripts/build.sh" "$flavour" >"$CACHE/logs/mutant-build.log" 2>&1; then
		if [ -n "$build_pat" ] && cat "$CACHE/logs/mutant-build.log" "$CACHE/logs/build-mutant.log" 2>/dev/null | grep -E "$build_pat" >/dev/null; then
			caught="the build ($build_pat)"
		else
			caught="NOT BUILT (fix the mutant; $CACHE/logs/mutant-build.log)"
			rc=1
		fi
	elif [ -n "$build_pat" ]; then
		caught="NOT CAUGHT (built, though it should fail with $build_pat)"
		rc=1
	else
		"$TOP/scripts/initramfs.sh" "$flavour" >/dev/null 2>&1 || die mutants "" "initramfs failed"
		res=$CACHE/logs/mutant-results.log
		# make test's timeout: a shorter one ends every run before the
		# last suites, and "catches" a mutant that breaks nothing.
		stop=1
		[ "${MUTANTS_FULL:-0}" = 1 ] && stop=0
		if BOOT_TIMEOUT=$timeout KERNEL_ARGS=$args STOP_AT_FAILURE=$stop \
			"$TOP/scripts/run-tests.sh" "$flavour" test >"$res" 2>&1; then
			caught="NOT CAUGHT"
			rc=1
		else
			caught=$(python3 "$TOP/scripts/mutants-caught.py" "$res" "$flavour")
			want=$(sed -n 's/^# Caught-by: //p' "$TOP/scripts/mutants/$m")
			if [ -z "$want" ]; then
				caught="$caught (NO Caught-by LINE)"
				rc=1
			elif ! names=$(python3 "$TOP/scripts/mutants-caught.py" --names "$res" "$flavour") ||
				! grep -Ex -- "$want" >/dev/null <<<"$names"; then
				caught="CAUGHT ELSEWHERE: $(paste -sd'|' <<<"$names") (expected: $want)"
				rc=1
			fi
		fi
	fi
	echo "| ${m%.patch}: $what | $caught | $(($(date +%s) - start)) |" >>"$table"
	tail -n 1 "$table"
done
echo
cat "$table"
[ "$rc" = 0 ] || die mutants "" "a mutant was not caught, or caught elsewhere, or did not apply or build (see the table)"
echo "mutants: all ${#chosen[@]} caught"
