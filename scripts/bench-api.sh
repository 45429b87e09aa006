#!/usr/bin/env bash
# Usage: scripts/bench-api.sh [ROUNDS]
# make bench-api: the first user of kernel::infiniband against the C verbs.
# Boots the bench kernel once (production build flags: -O2, Rust's
# opt-level 2, static keys; the test kernel's size optimisation leaves the
# kernel crate's small accessors as calls, which C inlines). The guest
# (rust_drain_bench_api in scripts/guest/init) loads the Rust ping-pong
# sample (samples/rust/rust_rdma_pingpong.rs) and its C reference
# (drivers/infiniband/tests/helpers/rdma_pingpong_c.c) in turn, arms rust,
# c and c2 (C again: the noise), at 64 B and 4 KiB, each load ITERATIONS
# round trips (default 2000) over rxe0; into
# out/bench-api/{samples.csv,table.md}. Timings never fail a test.
. "$(dirname "$0")/lib.sh"

"$TOP/scripts/build.sh" bench
"$TOP/scripts/initramfs.sh" bench
rounds=${1:-${ROUNDS:-10}} log=$CACHE/logs/console-bench-api.log
args="rust_drain_bench_api=$rounds rust_drain_bench_api_iterations=${ITERATIONS:-2000}"
rm -f "$log" "$log.pin"
[ "${PIN_VCPUS:-1}" = 1 ] || echo "pin: not pinned: PIN_VCPUS=${PIN_VCPUS}" >"$log.pin"
PIN_VCPUS=${PIN_VCPUS:-1} BOOT_TIMEOUT=${BOOT_TIMEOUT:-3600} "$TOP/scripts/boot.sh" bench "$log" "$args"
vcpus_up "$log" || die bench-api "$log" "the guest did not bring up all its vCPUs"
grep -q 'rust-drain: bench-api: start,' "$log" ||
	die bench-api "$log" "the API benchmark did not start"
host="Host: $(sed 's/^pin: //' "$log.pin" 2>/dev/null | paste -sd ';' | sed 's/;/; /g')."
python3 "$TOP/scripts/bench-api-report.py" "$log" "$TOP/out/bench-api" "$host"
