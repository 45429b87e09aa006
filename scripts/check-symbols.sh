#!/usr/bin/env bash
# Usage: scripts/check-symbols.sh BUILD
# Check, in the built objects of the kernel in BUILD (and of the project's
# modules built against it, $CACHE/ext-FLAVOUR):
# - drain.o (Rust) defines ib_drain_rq, ib_drain_sq and ib_drain_qp, and
#   verbs.o (C) does not;
# - the parts of vmlinux written for Rust (the kernel crate, its doctests,
#   the C helpers) reference no symbol of ib_core or any other RDMA module:
#   kernel::infiniband is compiled into its users, so ib_core can be a module;
# - the other way round, the work function that outlives its caller
#   (drain_rq_concurrently()'s workers) is in vmlinux, and no Rust object
#   of ib_core or of a project module has a copy; so are the QP event
#   handler and the slots' completion entry, whose addresses C keeps;
# - the owner name that kernel::infiniband gives restrack is a string of
#   vmlinux and of no module: restrack keeps the pointer, and an object can
#   outlive the module that made it.
. "$(dirname "$0")/lib.sh"

build=$1
ext=$CACHE/ext-${build##*/build-}
core=$build/drivers/infiniband/core
rc=0
fail() {
	echo "symbols: $*"
	rc=1
}
# defined OBJ [OPTIONS]: the symbols OBJ defines; fails if it cannot be read.
defined() {
	local o=$1
	shift
	[ -f "$o" ] || { echo "symbols: no $o" >&2; return 1; }
	llvm-nm --defined-only "$@" "$o"
}

for sym in ib_drain_rq ib_drain_sq ib_drain_qp; do
	if ! d=$(defined "$core/drain.o") || ! v=$(defined "$core/verbs.o"); then
		fail "cannot read drain.o or verbs.o"
	elif ! grep -qE " T $sym\$" <<<"$d"; then
		fail "$sym is not defined by the Rust drain.o"
	elif grep -qE " [Tt] $sym\$" <<<"$v"; then
		fail "$sym is defined by verbs.o too"
	else
		echo "symbols: $sym is defined by drain.o (Rust), not by verbs.o"
	fi
done

rdma=$(find "$build/drivers/infiniband" -name '*.o' ! -name '*.mod.o' -print0 |
	xargs -0 llvm-nm --defined-only -g -j 2>/dev/null | grep -v ':$' | sort -u)
[ "$(wc -l <<<"$rdma")" -gt 100 ] || fail "too few RDMA symbols under $build/drivers/infiniband"
for o in rust/kernel.o rust/doctests_kernel_generated.o rust/helpers/helpers.o; do
	if ! u=$(
		set -o pipefail
		[ -f "$build/$o" ] && llvm-nm -u -j "$build/$o" | sort -u
	); then
		fail "cannot read $o"
		continue
	fi
	refs=$(comm -12 <(echo "$u") <(echo "$rdma") | tr '\n' ' ')
	if [ -n "$refs" ]; then
		fail "$o (vmlinux) references RDMA module symbols: $refs"
	else
		echo "symbols: $o (vmlinux) references no symbol of ib_core or another RDMA module"
	fi
done

kernel=$(defined "$build/rust/kernel.o" -C) || fail "cannot read rust/kernel.o"
mods=("$core"/drain*.o)
mapfile -t -O "${#mods[@]}" mods < <(find "$ext" -name '*.o' ! -name '*.mod.o' 2>/dev/null)
[ "${#mods[@]}" -ge 4 ] || fail "expected drain.o, drain_test.o and the project's modules, found: ${mods[*]}"
# shellcheck disable=SC2043 # one type today; the list is where another goes
for t in infiniband::concurrent::DrainJob; do
	# No grep -q in pipes here: with pipefail, its early exit is a failure.
	if ! grep -F "$t>" <<<"$kernel" | grep -F 'WorkItemPointer<0>>::run' >/dev/null; then
		fail "the work function of $t is not in rust/kernel.o (vmlinux)"
		continue
	fi
	copies=$(for m in "${mods[@]}"; do
		if ! d=$(defined "$m" -C); then
			echo "(unreadable)${m##*/}"
		elif grep -F "$t" <<<"$d" >/dev/null; then
			echo "${m##*/}"
		fi
	done | tr '\n' ' ')
	if [ -n "$copies" ]; then
		fail "$t has code in modules: $copies"
	else
		echo "symbols: $t runs from vmlinux only (${#mods[@]} module objects checked)"
	fi
done

# The functions whose addresses C keeps for objects that may be leaked (a
# QP's event handler, the slots' completion entry) are vmlinux's, too.
for handler in '<kernel::infiniband::owned_qp::QpEvents>::handle' \
	'<kernel::infiniband::slots::Slot>::forward'; do
	# shellcheck disable=SC2001 # per line, anchored at its start
	if ! grep -qxF "$handler" <<<"$(sed 's/^[0-9a-f]* [Tt] //' <<<"$kernel")"; then
		fail "$handler is not in rust/kernel.o"
		continue
	fi
	copies=$(for m in "${mods[@]}"; do
		d=$(defined "$m" -C -j) || { echo "(unreadable)${m##*/}"; continue; }
		# A substring: a local copy may carry a suffix (.llvm.N).
		if grep -F "$handler" <<<"$d" >/dev/null; then echo "${m##*/}"; fi
	done | tr '\n' ' ')
	if [ -n "$copies" ]; then
		fail "$handler has code in modules: $copies"
	else
		echo "symbols: $handler is in rust/kernel.o (vmlinux) only"
	fi
done

# names OBJ: how many lines of OBJ, debug info left out (its type names
# are qualified), hold the owner name with its NUL.
names() {
	local t rc=0
	t=$(mktemp)
	llvm-objcopy --strip-debug "$1" "$t" || rc=1
	[ "$rc" = 0 ] && { LC_ALL=C grep -caP 'kernel::infiniband\x00' "$t" || [ $? = 1 ]; } || rc=1
	rm -f "$t"
	return "$rc"
}
owner="restrack's owner name \"kernel::infiniband\""
in_mods=$(for m in "${mods[@]}"; do
	n=$(names "$m") || n=unreadable
	[ "$n" = 0 ] || echo "${m##*/}"
done | tr '\n' ' ')
owner_ok=1
[ -z "$in_mods" ] || { fail "$owner is in modules: $in_mods"; owner_ok=0; }
if ! [ "$(names "$build/rust/kernel.o")" -ge 1 ] 2>/dev/null; then
	fail "$owner is not in rust/kernel.o"
	owner_ok=0
fi
[ "$owner_ok" = 0 ] ||
	echo "symbols: $owner is in rust/kernel.o (vmlinux), in none of ${#mods[@]} module objects"
exit "$rc"
