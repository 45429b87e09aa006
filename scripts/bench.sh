#!/usr/bin/env bash
# Usage: scripts/bench.sh [SAMPLES]
# Build the bench kernel (test kernel + C reference drain), boot it once to
# run rdma_drain_bench on rxe, and turn its console lines into
# out/bench/{samples.csv,table.md,latency.png}. Timings never fail a test.
. "$(dirname "$0")/lib.sh"

samples=${1:-${SAMPLES:-420}}
flavour=bench
"$TOP/scripts/build.sh" "$flavour"
"$TOP/scripts/initramfs.sh" "$flavour"
log=$CACHE/logs/console-$flavour.log
rm -f "$log"
BOOT_TIMEOUT=${BOOT_TIMEOUT:-3000} "$TOP/scripts/boot.sh" "$flavour" "$log" "rust_drain_bench=$samples"
vcpus_up "$log" || die bench "$log" "the guest did not bring up all its vCPUs"
grep -q 'rdma_drain_bench: end,ok' "$log" ||
	die bench "$log" "the benchmark did not finish"
python3 "$TOP/scripts/bench-report.py" "$log" "$TOP/out/$flavour"
