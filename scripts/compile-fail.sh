#!/usr/bin/env bash
# Usage: scripts/compile-fail.sh FLAVOUR
# The type-level half of kernel::infiniband's soundness: each snippet in
# drivers/infiniband/tests/compile_fail/ is a module that must not build
# against the FLAVOUR kernel, with the error its "//! expect:" line names;
# its "//! control:" sed script turns it into one that must build, so that
# the check fails if the snippet breaks for another reason. Prints one
# NAME=RC word per snippet (0: as expected), for run-tests.sh's host checks.
. "$(dirname "$0")/lib.sh"

build=$CACHE/build-${1:-test}
log=$CACHE/logs/compile-fail.log
: >"$log"
for f in "$TOP"/drivers/infiniband/tests/compile_fail/*.rs; do
	name=$(basename "$f" .rs)
	expect=$(sed -n 's|^//! expect: ||p' "$f")
	control=$(sed -n 's|^//! control: ||p' "$f")
	tmp=$(mktemp -d)
	echo "obj-m := compile_fail.o" >"$tmp/Kbuild"
	cp "$f" "$tmp/compile_fail.rs"
	rc=0
	if make -C "$build" LLVM=1 M="$tmp" modules >"$tmp/out" 2>&1; then
		echo "$name: built, but must not" >>"$log"
		rc=1
	elif ! grep -qE "$expect" "$tmp/out"; then
		{ echo "$name: failed, but not with /$expect/:"; cat "$tmp/out"; } >>"$log"
		rc=1
	fi
	sed "$control" "$f" >"$tmp/compile_fail.rs"
	rm -f "$tmp"/*.o "$tmp"/*.ko
	if ! make -C "$build" LLVM=1 M="$tmp" modules >"$tmp/out" 2>&1; then
		{ echo "$name: its control does not build:"; cat "$tmp/out"; } >>"$log"
		rc=1
	fi
	[ "$rc" = 0 ] && echo "$name: refused as expected; its control builds" >>"$log"
	rm -rf "$tmp"
	echo "compile_fail_$name=$rc"
done
