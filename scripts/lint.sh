#!/usr/bin/env bash
# Usage: scripts/lint.sh
# The review checks: rustfmt on every .rs of the project, clippy over the
# kernel's Rust and the project's modules (make LLVM=1 CLIPPY=1), and
# checkpatch.pl on the format-patch series (scripts/patches.sh).
. "$(dirname "$0")/lib.sh"

src=$CACHE/src build=$CACHE/build-test
[ -f "$build/vmlinux" ] || die lint "" "build the test kernel first (make)"
log=$CACHE/logs/lint.log
rc=0

step "lint: rustfmt --check"
if ! (cd "$TOP" && git ls-files '*.rs' | xargs rustfmt --check --edition 2021 \
	--config-path "$src/.rustfmt.toml") >"$log" 2>&1; then
	cat "$log"
	rc=1
fi
done_step

step "lint: clippy (CLIPPY=1)"
run_logged "$log.clippy" make -C "$src" O="$build" LLVM=1 -j"$(nproc)" CLIPPY=1 &&
	run_logged "$log.clippy-ext" make -C "$build" LLVM=1 M="$TOP" MO="$CACHE/ext-test" CLIPPY=1 modules ||
	die lint "$log.clippy" "the clippy build failed"
# Only what the project's files add; the rest of the tree is not ours.
mine=$(cd "$TOP" && git ls-files '*.rs' | sed 's|^|/|' | paste -sd'|')
if grep -hE -A6 '^(warning|error)' "$log.clippy" "$log.clippy-ext" | grep -E -B2 -A4 "$mine" | grep -q .; then
	grep -hE -A6 '^(warning|error)' "$log.clippy" "$log.clippy-ext" | grep -E -B2 -A4 "$mine"
	rc=1
fi
done_step

"$TOP/scripts/patches.sh" || rc=1
[ "$rc" = 0 ] && echo "lint: clean"
exit "$rc"
