#!/usr/bin/env bash
# Usage: scripts/bench.sh [SAMPLES]
# Build the bench kernel (test kernel + C reference drain), boot it once to
# run rdma_drain_bench on rxe, and turn its console lines into
# out/bench/{samples.csv,concurrent.csv,table.md,latency.png}. Timings
# never fail a test.
# PROFILE=1 (make bench-profile): the direct-CQ drain alone, untraced and
# then under ftrace (scripts/guest/profile.sh), into out/bench/profile.md.
# PROFILE=steps (make bench-steps): Rust's and C's drains of one cell
# (BENCH_PARAMS, default softirq N=0) step by step under ftrace, into
# out/bench/steps.md (scripts/bench-profile.py --steps).
# BENCH_PARAMS="contexts=1 depths=7": more rdma_drain_bench parameters
# (make bench and make bench-steps; make bench-profile sets its own).
. "$(dirname "$0")/lib.sh"

case ${PROFILE:-0} in
0 | 1 | steps) ;;
*) die bench "" "PROFILE=${PROFILE}: 1 (make bench-profile) or steps (make bench-steps)" ;;
esac

# BENCH_FLAVOUR=bench-inline (make bench-inline): the same on a kernel built with
# LLVM 22 and CONFIG_RUST_INLINE_HELPERS, into out/bench-inline/.
flavour=${BENCH_FLAVOUR:-bench}
"$TOP/scripts/build.sh" "$flavour"
"$TOP/scripts/initramfs.sh" "$flavour"
if [ "${PROFILE:-0}" = 1 ]; then
	samples=${1:-${SAMPLES:-100}} log=$CACHE/logs/console-bench-profile.log
	args="rust_drain_bench=$samples rust_drain_profile"
elif [ "${PROFILE:-0}" = steps ]; then
	samples=${1:-${SAMPLES:-600}} log=$CACHE/logs/console-bench-steps.log
	args="rust_drain_bench=$samples rust_drain_profile=steps"
	BENCH_PARAMS=${BENCH_PARAMS:-contexts=2 depths=1}
else
	samples=${1:-${SAMPLES:-420}} log=$CACHE/logs/console-$flavour.log
	args="rust_drain_bench=$samples"
fi
# rdma_drain_bench.rs runs whole turns of its orders: check before booting.
[ "$samples" = 1 ] || { [[ $samples =~ ^[1-9][0-9]*$ ]] && ((samples % 4 == 0)); } ||
	die bench "" "SAMPLES=$samples: 1 or a multiple of 4"
# The samples wait in the log buffer until the drains are done
# (scripts/guest/rdma.sh): 25,200 lines by default, ~64 bytes each.
# shellcheck disable=SC2017 # 8 MiB per 420 samples or part of 420: rounded up first
args="$args log_buf_len=$(((samples + 419) / 420 * 8))M"
if [ "${PROFILE:-0}" != 1 ]; then
	for p in ${BENCH_PARAMS:-}; do
		args="$args rdma_drain_bench.$p"
	done
fi
# Each vCPU on a host core of its own: the host scheduler's placement is
# not what this measures (pin_vcpus in lib.sh). PIN_VCPUS=0: the control.
rm -f "$log" "$log.pin"
[ "${PIN_VCPUS:-1}" = 1 ] || echo "pin: not pinned: PIN_VCPUS=${PIN_VCPUS}" >"$log.pin"
PIN_VCPUS=${PIN_VCPUS:-1} BOOT_TIMEOUT=${BOOT_TIMEOUT:-3000} "$TOP/scripts/boot.sh" "$flavour" "$log" "$args"
vcpus_up "$log" || die bench "$log" "the guest did not bring up all its vCPUs"
grep -q 'rdma_drain_bench: end,ok' "$log" ||
	die bench "$log" "the benchmark did not finish"
host="Host: $(sed 's/^pin: //' "$log.pin" | paste -sd ';' | sed 's/;/; /g')."
if [ "${PROFILE:-0}" != 0 ]; then
	grep -q 'rust-drain: profile: trace end' "$log" ||
		die bench "$log" "the profile's trace did not reach the console"
fi
if [ "${PROFILE:-0}" = 1 ]; then
	python3 "$TOP/scripts/bench-profile.py" "$log" "$TOP/out/bench" "$host"
elif [ "${PROFILE:-0}" = steps ]; then
	python3 "$TOP/scripts/bench-profile.py" --steps "$log" "$TOP/out/bench" "$host"
else
	python3 "$TOP/scripts/bench-report.py" "$log" "$TOP/out/$flavour" "$host"
fi
