#!/usr/bin/env bash
# Usage: scripts/check-symbols.sh BUILD
# Check, in the built objects, that drain.o (Rust) defines ib_drain_rq,
# ib_drain_sq and ib_drain_qp and that verbs.o (C) does not.
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
exit "$rc"
