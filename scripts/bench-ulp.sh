#!/usr/bin/env bash
# Usage: scripts/bench-ulp.sh [ROUNDS]
# Build the bench-ulp kernel (the bench kernel with CONFIG_INFINIBAND_DRAIN_SWITCH:
# ib_core.drain_c=1 runs the C reference drain behind the exports), boot it
# once, and time the in-tree ULPs' teardown and recovery cycles over rxe0,
# arms rust, c and c2 (C again, for noise) in turn; into
# out/bench-ulp/{samples.csv,table.md}. Timings never fail a test.
# ROUNDS (default 12), CYCLES=K (cycles per arm and round, default 4) and
# ULPS=srp,nvme,rnbd,nfs (the default: all four).
. "$(dirname "$0")/lib.sh"

"$TOP/scripts/build.sh" bench-ulp
"$TOP/scripts/initramfs.sh" bench-ulp
rounds=${1:-${ROUNDS:-12}} log=$CACHE/logs/console-bench-ulp.log
args="rust_drain_bench_ulp=$rounds rust_drain_bench_ulp_cycles=${CYCLES:-4}"
[ -z "${ULPS:-}" ] || args="$args rust_drain_ulps=$ULPS"
rm -f "$log" "$log.pin"
[ "${PIN_VCPUS:-1}" = 1 ] || echo "pin: not pinned: PIN_VCPUS=${PIN_VCPUS}" >"$log.pin"
PIN_VCPUS=${PIN_VCPUS:-1} BOOT_TIMEOUT=${BOOT_TIMEOUT:-3600} "$TOP/scripts/boot.sh" bench-ulp "$log" "$args"
vcpus_up "$log" || die bench-ulp "$log" "the guest did not bring up all its vCPUs"
# A run that did not end still gets the table of its complete variants;
# the report then says what is missing and fails.
grep -q 'rust-drain: bench-ulp: start,' "$log" ||
	die bench-ulp "$log" "the ULP benchmark did not start"
host="Host: $(sed 's/^pin: //' "$log.pin" | paste -sd ';' | sed 's/;/; /g')."
python3 "$TOP/scripts/bench-ulp-report.py" "$log" "$TOP/out/bench-ulp" "$host"
