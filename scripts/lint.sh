#!/usr/bin/env bash
# Usage: scripts/lint.sh
# The review checks: shellcheck on every shell script of the repo and the
# unit tests of the Python tools (scripts/*_test.py), and that every mutant
# of make mutants applies, which need no kernel build; then rustfmt on every .rs of the project, clippy over the
# kernel's Rust and the project's modules (make LLVM=1 CLIPPY=1), and
# checkpatch.pl on the format-patch series (scripts/patches.sh), and docutils
# on the reStructuredText the series adds to Documentation/.
. "$(dirname "$0")/lib.sh"

src=$CACHE/src build=$CACHE/build-test
log=$CACHE/logs/lint.log
rc=0

# shell_scripts: the repo's shell scripts, one a line: every tracked *.sh,
# and every other tracked file whose first line runs a shell (#!/bin/sh,
# #!/usr/bin/env bash, ...) or tells shellcheck which shell it is for.
shell_scripts() {
	local f first
	git -C "$TOP" ls-files | while read -r f; do
		case $f in
		*.sh) echo "$f" ;;
		*)
			first=""
			if [ -f "$TOP/$f" ]; then IFS= read -r first <"$TOP/$f" || true; fi
			if [[ $first =~ ^#!\ *(/usr)?/bin/(env\ +)?(ba|da|k)?sh(\ |$) ||
				$first =~ ^#\ shellcheck\ shell= ]]; then
				echo "$f"
			fi
			;;
		esac
	done
}

step "lint: shellcheck"
mapfile -t scripts < <(shell_scripts)
echo "lint: shellcheck: ${#scripts[@]} scripts"
# From the top: .shellcheckrc there lets it follow the sourced files.
if ! (cd "$TOP" && shellcheck "${scripts[@]}") >"$log.shellcheck" 2>&1; then
	cat "$log.shellcheck"
	rc=1
fi
done_step

# results_test.py runs results.py, which parses with the tree's kunit.py:
# without a fetched tree ($src) its tests are skipped, and say so.
step "lint: python unit tests"
if ! KERNEL_SRC=$src python3 -m unittest discover -v -s "$TOP/scripts" -p '*_test.py' >"$log.unittest" 2>&1; then
	cat "$log.unittest"
	rc=1
else
	grep -E "^(Ran |OK)|skipped '" "$log.unittest" || true
fi
done_step

# make mutants applies each to a copy of the overlay: one that no longer
# applies (the code it breaks has moved) would be reported only there.
step "lint: every mutant applies and names what catches it"
tmp=$(mktemp -d)
(cd "$TOP" && cp -a Kbuild rust drivers samples patches "$tmp/")
for m in "$TOP"/scripts/mutants/*.patch; do
	(cd "$tmp" && git apply --check "$m") 2>/dev/null ||
		{ echo "$(basename "$m") does not apply: regenerate it"; rc=1; }
	grep -qE '^# (Caught-by|Build): .' "$m" ||
		{ echo "$(basename "$m") names neither what catches it (# Caught-by:) nor a build pattern"; rc=1; }
	# A misspelt or renamed name never matches: each plain name must be
	# defined (a line of code, not a comment, or a suite's file name).
	for name in $(sed -n 's/^# Caught-by: //p' "$m" | tr '|' '\n' | grep -xE '[a-z0-9_]+'); do
		(cd "$TOP" && { grep -rhw -- "$name" drivers rust samples scripts/run-tests.sh |
			grep -Ev '^[[:space:]]*(//|#([^[]|$)|\*|/\*)'; find drivers -name "$name.sh"; } | grep . >/dev/null) ||
			{ echo "$(basename "$m"): no test is named $name"; rc=1; }
	done
done
rm -rf "$tmp"
done_step

[ -f "$build/vmlinux" ] || die lint "" "build the test kernel first (make)"

step "lint: rustfmt --check"
if ! (cd "$TOP" && git ls-files '*.rs' | xargs rustfmt --check --edition 2021 \
	--config-path "$src/.rustfmt.toml") >"$log" 2>&1; then
	cat "$log"
	rc=1
fi
done_step

step "lint: clippy (CLIPPY=1)"
{ run_logged "$log.clippy" make -C "$src" O="$build" LLVM=1 -j"$(nproc)" CLIPPY=1 &&
	run_logged "$log.clippy-ext" make -C "$build" LLVM=1 M="$TOP" MO="$CACHE/ext-test" CLIPPY=1 modules; } ||
	die lint "$log.clippy" "the clippy build failed"
# Only what the project's files add; the rest of the tree is not ours.
mine=$(cd "$TOP" && git ls-files '*.rs' | sed 's|^|/|' | paste -sd'|')
if grep -hE -A6 '^(warning|error)' "$log.clippy" "$log.clippy-ext" | grep -E -B2 -A4 "$mine" | grep -q .; then
	grep -hE -A6 '^(warning|error)' "$log.clippy" "$log.clippy-ext" | grep -E -B2 -A4 "$mine"
	rc=1
fi
done_step

# The pages the series adds (the toctrees that list them are Sphinx's, which
# plain docutils does not know): each parses without a warning, and its
# directory's index.rst lists it.
step "lint: reStructuredText of the series' new Documentation/ pages"
for f in $(cd "$TOP" && awk '/^--- \/dev\/null$/ { getline; if ($2 ~ /^b\/Documentation\/.*\.rst$/) print substr($2, 3) }' patches/*.patch | sort -u); do
	grep -qx "   $(basename "$f" .rst)" "$src/$(dirname "$f")/index.rst" ||
		{ echo "$(dirname "$f")/index.rst does not list $(basename "$f" .rst)"; rc=1; }
	python3 - "$src/$f" <<-'EOF' || rc=1
		import sys, docutils.core
		docutils.core.publish_string(open(sys.argv[1]).read(), source_path=sys.argv[1],
		    writer_name="null", settings_overrides={"halt_level": 2, "report_level": 2})
	EOF
done
done_step

"$TOP/scripts/patches.sh" || rc=1
[ "$rc" = 0 ] && echo "lint: clean"
exit "$rc"
