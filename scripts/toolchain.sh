#!/usr/bin/env bash
# Usage: scripts/toolchain.sh
# Install what the build needs (idempotent; fast when everything is there).
. "$(dirname "$0")/lib.sh"

PKGS="clang-$LLVM_VERSION lld-$LLVM_VERSION llvm-$LLVM_VERSION libclang-$LLVM_VERSION-dev flex bison bc libelf-dev libssl-dev
cpio busybox-static qemu-system-x86 iproute2 kmod rsync dwarves xz-utils python3
gnuplot-nox python3-docutils shellcheck"

log=$CACHE/logs/toolchain.log
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	step "toolchain: apt-get install$missing"
	[ "$(id -u)" = 0 ] || die toolchain "" "need root to install:$missing"
	run_logged "$log" apt-get update ||
		die toolchain "$log" "apt-get update failed (mirror unreachable?)"
	# shellcheck disable=SC2086 # missing: package names, one word each
	DEBIAN_FRONTEND=noninteractive run_logged "$log" \
		apt-get install -y --no-install-recommends $missing ||
		die toolchain "$log" "apt-get install failed"
	done_step
fi

if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src'; then
	step "toolchain: rustup component add rust-src"
	run_logged "$log" rustup component add rust-src ||
		die toolchain "$log" "rustup component add rust-src failed"
	done_step
fi

if ! bindgen --version 2>/dev/null | grep -q "$BINDGEN_VERSION"; then
	step "toolchain: cargo install bindgen-cli $BINDGEN_VERSION"
	run_logged "$log" cargo install bindgen-cli --version "$BINDGEN_VERSION" \
		--locked --root "$CACHE/tools" ||
		die toolchain "$log" "cargo install bindgen-cli failed"
	done_step
fi
