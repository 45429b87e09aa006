#!/usr/bin/env bash
# Usage: scripts/check-symbols.sh BUILD
# Check, in the built objects, that drain.o (Rust) defines ib_drain_rq,
# ib_drain_sq and ib_drain_qp and that verbs.o (C) does not; and that the
# kernel crate, which is part of vmlinux, references no symbol of ib_core or
# any other RDMA module (kernel::infiniband is compiled into its users).
. "$(dirname "$0")/lib.sh"

core=$1/drivers/infiniband/core
rc=0
for sym in ib_drain_rq ib_drain_sq ib_drain_qp; do
	if ! llvm-nm --defined-only "$core/drain.o" 2>/dev/null | grep -qE " T $sym\$"; then
		echo "symbols: $sym is not defined by the Rust drain.o"
		rc=1
	elif llvm-nm --defined-only "$core/verbs.o" | grep -qE " [Tt] $sym\$"; then
		echo "symbols: $sym is defined by verbs.o too"
		rc=1
	else
		echo "symbols: $sym is defined by drain.o (Rust), not by verbs.o"
	fi
done

rdma=$(find "$1/drivers/infiniband" -name '*.o' ! -name '*.mod.o' -print0 |
	xargs -0 llvm-nm --defined-only -g -j 2>/dev/null | grep -v ':$' | sort -u)
[ -n "$rdma" ] || { echo "symbols: no RDMA objects under $1/drivers/infiniband"; exit 1; }
for o in rust/kernel.o rust/doctests_kernel_generated.o rust/helpers/helpers.o; do
	refs=$(llvm-nm -u -j "$1/$o" | sort -u | comm -12 - <(echo "$rdma") | tr '\n' ' ')
	if [ -n "$refs" ]; then
		echo "symbols: $o (vmlinux) references RDMA module symbols: $refs"
		rc=1
	else
		echo "symbols: $o (vmlinux) references no symbol of ib_core or another RDMA module"
	fi
done
exit "$rc"
