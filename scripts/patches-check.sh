#!/usr/bin/env bash
# Usage: scripts/patches-check.sh
# The series is bisectable: after each patch (with the new files that
# patches/new-files gives it), the test kernel and its modules build with
# LLVM=1 and no compiler warning from a file of the series. One tree and
# one build dir in the cache ($CACHE/bisect-src, $CACHE/build-bisect), so
# each step after the first builds incrementally. Each prefix has the new
# files as they are after its last patch (copy_series_files and
# apply_series_hunks in scripts/lib.sh).
. "$(dirname "$0")/lib.sh"

"$TOP/scripts/toolchain.sh"
"$TOP/scripts/fetch-kernel.sh"
tree=$CACHE/bisect-src build=$CACHE/build-bisect
mkdir -p "$build"
# The test kernel's configuration, as each prefix can have it: options that
# later patches add are dropped by olddefconfig until they exist.
"$TOP/scripts/config.sh" "$CACHE/src" "$CACHE/build-bisect-config" "$TOP/scripts/config/base.config"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/patches"
mapfile -t series < <(cd "$TOP/patches" && ls -- *.patch)
k=0
for name in "${series[@]}"; do
	k=$((k + 1))
	cp "$TOP/patches/$name" "$stage/patches/"
	apply_series_hunks "$name" "$stage"
	copy_series_files "$name" "$stage"
	OVERLAY=$stage SRC_TREE=$tree "$TOP/scripts/prepare-tree.sh"
	log=$CACHE/logs/patches-check-$k.log
	step "patches-check: $k/${#series[@]} $name"
	cp "$CACHE/build-bisect-config/.config" "$build/.config"
	K=(make -C "$tree" O="$build" LLVM=1 -j"$(nproc)")
	run_logged "$log" "${K[@]}" olddefconfig all ||
		die patches-check "$log" "the tree does not build after $name"
	# Warnings in the series' own files (Rust and C) fail the check too.
	files=$(cd "$stage" && find rust drivers samples -type f 2>/dev/null; sed -n 's|^+++ b/||p' patches/*.patch)
	for f in $files; do
		if grep -E -A4 '^warning|: warning:' "$log" | grep -qF "$f"; then
			die patches-check "$log" "$name: a compiler warning in $f"
		fi
	done
	done_step
done
echo "patches-check: all ${#series[@]} prefixes of the series build"
