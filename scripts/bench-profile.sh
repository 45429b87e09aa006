#!/usr/bin/env bash
# Usage: scripts/bench-profile.sh [SAMPLES]
# Where the direct-CQ drain's time goes: boot the bench kernel once with
# ftrace events on each step of a drain (scripts/guest/profile.sh), and
# turn the trace into out/bench/profile.md (scripts/bench-profile.py).
# The probes cost time themselves; the table says how much.
. "$(dirname "$0")/lib.sh"

samples=${1:-${SAMPLES:-100}}
"$TOP/scripts/build.sh" bench
"$TOP/scripts/initramfs.sh" bench
log=$CACHE/logs/console-bench-profile.log
rm -f "$log"
BOOT_TIMEOUT=${BOOT_TIMEOUT:-1800} "$TOP/scripts/boot.sh" bench "$log" \
	"rust_drain_bench=$samples rust_drain_profile"
grep -q 'rust-drain: profile: trace end' "$log" ||
	die bench-profile "$log" "the profile did not finish"
grep -q 'rdma_drain_bench: end,ok' "$log" ||
	die bench-profile "$log" "the benchmark did not finish"
python3 "$TOP/scripts/bench-profile.py" "$log" "$TOP/out/bench"
