#!/usr/bin/env bash
# Usage: scripts/build.sh FLAVOUR
# (OVERLAY=DIR SRC_TREE=DIR: build another overlay in another tree, as make
# mutants does with its flavours "mutant" and "mutant-debug", the test and
# debug kernels' configs.)
# Build the test kernel of FLAVOUR (its Kconfig fragments are listed below)
# out of tree in $CACHE/build-FLAVOUR, then the project's modules (Kbuild),
# and install all modules into $CACHE/build-FLAVOUR/mods.
. "$(dirname "$0")/lib.sh"

flavour=${1:-test}
case "$flavour" in
test | mutant) frags=("$TOP/scripts/config/base.config") ;;
debug | mutant-debug) frags=("$TOP/scripts/config/base.config" "$TOP/scripts/config/debug.config") ;;
upstream) frags=("$TOP/scripts/config/base.config" "$TOP/scripts/config/debug.config"
	"$TOP/scripts/config/upstream.config") ;;
bench) frags=("$TOP/scripts/config/base.config" "$TOP/scripts/config/bench.config") ;;
bench-inline) frags=("$TOP/scripts/config/base.config" "$TOP/scripts/config/bench.config"
	"$TOP/scripts/config/bench-inline.config")
	[ "$LLVM_VERSION" = 22 ] || die build "" "the bench-inline kernel needs RDMA_RUST_LLVM=22 (make bench-inline)" ;;
bench-ulp) frags=("$TOP/scripts/config/base.config" "$TOP/scripts/config/bench.config"
	"$TOP/scripts/config/bench-ulp.config") ;;
*) die build "" "unknown flavour '$flavour'" ;;
esac

"$TOP/scripts/toolchain.sh"
"$TOP/scripts/fetch-kernel.sh"
"$TOP/scripts/prepare-tree.sh"

src=${SRC_TREE:-$CACHE/src} build=$CACHE/build-$flavour
overlay=${OVERLAY:-$TOP}
log=$CACHE/logs/build-$flavour.log
# bench-ulp is bench's kernel plus one option: begin with bench's objects if
# they are there, and Kbuild rebuilds only what the option touches (the
# Rust crates and ib_core) instead of the whole kernel.
if [ "$flavour" = bench-ulp ] && [ ! -e "$build" ] && [ -f "$CACHE/build-bench/vmlinux" ]; then
	rm -rf "$build.tmp"
	cp -a "$CACHE/build-bench" "$build.tmp"
	mv "$build.tmp" "$build"
fi
"$TOP/scripts/config.sh" "$src" "$build" "${frags[@]}"

K=(make -C "$src" O="$build" LLVM=1 -j"$(nproc)")
step "build: kernel ($flavour)"
run_logged "$log" "${K[@]}" all || die build "$log" "kernel build failed"
done_step

step "build: project modules"
# Kbuild does not rebuild the Rust modules when only the kernel's
# configuration changed (their layout of struct module may differ, and
# insmod says "invalid module format"): start over when it did.
ext=$CACHE/ext-$flavour
sum=$(sha256sum "$build/.config" | cut -d' ' -f1)
if [ "$(cat "$ext/.kernel-config-sum" 2>/dev/null)" != "$sum" ]; then
	rm -rf "$ext"
	mkdir -p "$ext"
	echo "$sum" >"$ext/.kernel-config-sum"
fi
run_logged "$log.ext" make -C "$build" LLVM=1 -j"$(nproc)" M="$overlay" MO="$ext" modules ||
	die build "$log.ext" "project module build failed"
done_step

step "build: modules_install"
rm -rf "$build/mods.tmp"
{
	"${K[@]}" INSTALL_MOD_PATH="$build/mods.tmp" INSTALL_MOD_STRIP=1 modules_install &&
		make -C "$build" LLVM=1 M="$overlay" MO="$ext" \
			INSTALL_MOD_PATH="$build/mods.tmp" INSTALL_MOD_STRIP=1 modules_install
} >"$log.install" 2>&1 || die build "$log.install" "modules_install failed"
rm -rf "$build/mods"
mv "$build/mods.tmp" "$build/mods"
done_step
