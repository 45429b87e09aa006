# shellcheck shell=bash
# Common settings and helpers, sourced by every script in scripts/.

set -euo pipefail
trap 'echo "ERROR: $0: line $LINENO: command failed (exit $?)" >&2' ERR

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${RDMA_RUST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-rust-drain}
# shellcheck disable=SC2034 # for the scripts that source this file
KVER_SERIES=7.3
# shellcheck disable=SC2034 # for the scripts that source this file
KVER_PIN=7.3.4-1~bpo13+1
# shellcheck disable=SC2034 # for the scripts that source this file
BINDGEN_VERSION=0.73.2
# Debian's LLVM 19, as the platform has it; RDMA_RUST_LLVM=22 for make
# bench-inline only: rustc's own LLVM major, which CONFIG_RUST_INLINE_HELPERS
# needs in clang too.
LLVM_VERSION=${RDMA_RUST_LLVM:-19}
LLVM_BIN=/usr/lib/llvm-$LLVM_VERSION/bin

# vCPUs of every test VM: the host's CPUs, at least two, so that the
# concurrency tests really run concurrently, and at most eight (TCG, 2 GiB).
# The guest must bring up all of them (vcpus_up).
GUEST_CPUS=${GUEST_CPUS:-$(n=$(nproc) && echo $((n < 2 ? 2 : n > 8 ? 8 : n)))}

export PATH="$LLVM_BIN:$CACHE/tools/bin:$HOME/.cargo/bin:$PATH"
export LIBCLANG_PATH=/usr/lib/llvm-$LLVM_VERSION/lib

mkdir -p "$CACHE/logs"

_t0=$(date +%s)

# step NAME: announce the start of a long step.
step() {
	_step=$1
	_step_t0=$(date +%s)
	echo ">> $_step ..."
}

# done_step: announce the end of the current step with its elapsed time.
done_step() {
	echo "<< $_step done in $(($(date +%s) - _step_t0)) s"
}

# die STEP LOG MSG: one clear line, the tail of the log, non-zero exit.
die() {
	local what=$1 log=$2
	shift 2
	echo "ERROR in $what: $*" >&2
	if [ -n "$log" ] && [ -f "$log" ]; then
		echo "---- last lines of $log ----" >&2
		tail -n 30 "$log" >&2
		echo "---- full log: $log ----" >&2
	fi
	exit 1
}

# run_logged LOG CMD...: run CMD with output to LOG (live too with V=1).
run_logged() {
	local log=$1
	shift
	if [ "${V:-0}" = 1 ]; then
		"$@" 2>&1 | tee "$log"
		return "${PIPESTATUS[0]}"
	fi
	"$@" >"$log" 2>&1
}

# The series' new files: patches/new-files gives each new kernel file (kept at
# its final version, at its kernel path) to the patch that adds it. A later
# patch may extend such a file with ordinary diff hunks (the ULP API adds to
# rust/kernel/infiniband/qp.rs, for one). The file after patch K is then the
# final version with the hunks of the patches after K for it reverse-applied,
# last patch first; each later patch applies its hunks forward again.
# prepare-tree.sh skips such hunks: it copies the final versions.

# new_file_paths OVERLAY PATCH...: the paths that the PATCHes have hunks
# for and that are new files of OVERLAY (there, not in the pristine tree).
new_file_paths() {
	local overlay=$1 f
	shift
	[ $# -gt 0 ] || return 0
	while read -r f; do
		if [ -f "$overlay/$f" ] && [ ! -f "$CACHE/pristine/$f" ]; then
			echo "$f"
		fi
	done < <(sed -n 's|^+++ b/||p' "$@" | LC_ALL=C sort -u)
}

# copy_series_files PATCH DIR: copy the new files that patches/new-files gives
# to PATCH (a file name in patches/) to the same paths under DIR, each as
# it is after PATCH. Fails if a later patch's hunks do not reverse-apply.
copy_series_files() {
	local name=$1 dir=$2 path f p tmp
	local -a later=()
	for p in "$TOP"/patches/*.patch; do
		if [[ $(basename "$p") > "$name" ]]; then later=("$p" "${later[@]}"); fi
	done
	tmp=$(mktemp -d)
	# shellcheck disable=SC2013 # words: a line of new-files gives several paths
	for path in $(awk -F': ' -v n="$name" '$1 == n { print $2 }' "$TOP/patches/new-files"); do
		[ -e "$TOP/$path" ] || die series "" "patches/new-files: no $path"
		for f in $(cd "$TOP" && find "$path" -type f | LC_ALL=C sort); do
			mkdir -p "$tmp/$(dirname "$f")" "$dir/$(dirname "$f")"
			cp "$TOP/$f" "$tmp/$f"
			for p in "${later[@]}"; do
				grep -qxF "+++ b/$f" "$p" || continue
				(cd "$tmp" && git apply -R --include="$f" "$p") || {
					rm -rf "$tmp"
					die series "" "$(basename "$p") does not reverse-apply to $f: the patch and the file disagree"
				}
			done
			cp "$tmp/$f" "$dir/$f"
		done
	done
	rm -rf "$tmp"
}

# apply_series_hunks PATCH DIR: apply the hunks of PATCH (a file name in
# patches/) for new files of earlier patches to their copies under DIR.
apply_series_hunks() {
	local p=$TOP/patches/$1 f
	local -a inc=()
	for f in $(new_file_paths "$TOP" "$p"); do inc+=(--include="$f"); done
	[ ${#inc[@]} = 0 ] || (cd "$2" && git apply "${inc[@]}" "$p") ||
		die series "" "$1: its hunks for new files do not apply under $2"
}

# Hash of everything in the repo that goes into the kernel tree.
overlay_hash() { # overlay_hash [DIR]: of the project's overlay, or of DIR
	(cd "${1:-$TOP}" && { find rust drivers samples patches -type f 2>/dev/null || true; } |
		LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -c1-16
}

# tsc_args: kernel arguments for a TCG guest's clock. High-resolution
# timers need a one-shot clock event device that keeps running in idle
# (ARAT, on QEMU's -cpu) and a clocksource valid for them (TSC). Under TCG
# the guest's TSC calibration against the PIT sometimes fails and leaves it
# on jiffies, so tell it the TSC rate (the host's: TCG's guest TSC is the
# host's) and skip the watchdog.
tsc_args() {
	local khz
	khz=$(awk -F: '/^cpu MHz/ { printf "%d", $2 * 1000; exit }' /proc/cpuinfo 2>/dev/null || true)
	[ -z "$khz" ] || echo "tsc_early_khz=$khz tsc=reliable"
}

# guest_qemu FLAVOUR LOG KERNEL-ARGS...: sets QEMU to the command line
# that every test VM shares: the FLAVOUR kernel and initramfs under TCG on
# GUEST_CPUS vCPUs, the console to LOG; the caller adds its devices.
guest_qemu() {
	local flavour=$1 build=$CACHE/build-$1 log=$2
	shift 2
	# shellcheck disable=SC2034 # for the caller
	QEMU=(qemu-system-x86_64 -name "rdma-$flavour,debug-threads=on" -machine q35 -cpu "max,+arat" -smp "$GUEST_CPUS" -m 2G
		-kernel "$build/arch/x86/boot/bzImage" -initrd "$build/initramfs.cpio.gz"
		-append "$(tsc_args) console=ttyS0 panic=-1 oops=panic rdinit=/init loglevel=7 dummy.numdummies=3 $*"
		-display none -serial "file:$log" -no-reboot)
}

# host_cpus: the host CPUs this script may run on, one a line.
host_cpus() {
	local r
	for r in $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr , ' '); do
		seq "${r%-*}" "${r#*-}"
	done
}

# pin_vcpus PID: pins each vCPU thread of the QEMU that PID started
# ("CPU n/TCG", named by guest_qemu's -name) to a host CPU of its own. Left
# to the host scheduler, each vCPU thread of a bench run waited 2.6-10
# times as long in a host run queue, and rxe's modify stalled for
# milliseconds about 5 times as often or more (README, "Why the bench pins
# its vCPUs").
# Prints what it did; non-zero if it could not pin every vCPU.
pin_vcpus() {
	local cpus qemu="" f comm i tid pinned=0
	mapfile -t cpus < <(host_cpus)
	if [ "${#cpus[@]}" -lt "$GUEST_CPUS" ]; then
		echo "pin: not pinned: $GUEST_CPUS vCPUs, ${#cpus[@]} host CPUs"
		return 1
	fi
	for _ in $(seq 300); do
		kill -0 "$1" 2>/dev/null || break
		qemu=$(pgrep -P "$1" -x qemu-system-x86 || true)
		[ -n "$qemu" ] && [ "$(cat /proc/"$qemu"/task/*/comm 2>/dev/null |
			grep -cx 'CPU [0-9]*/TCG' || true)" -ge "$GUEST_CPUS" ] && break
		sleep 0.1
	done
	for f in /proc/"$qemu"/task/*/comm; do
		comm=$(cat "$f" 2>/dev/null) || continue
		[[ $comm =~ ^CPU\ ([0-9]+)/TCG$ ]] || continue
		i=${BASH_REMATCH[1]} tid=${f%/comm} tid=${tid##*/}
		if taskset -pc "${cpus[i]}" "$tid" >/dev/null; then
			echo "pin: vCPU $i on host CPU ${cpus[i]}"
			pinned=$((pinned + 1))
		fi
	done
	[ "$pinned" = "$GUEST_CPUS" ] || {
		echo "pin: not pinned: $pinned of $GUEST_CPUS vCPU threads"
		return 1
	}
}

# vcpus_up LOG: the kernel whose console is LOG brought up all GUEST_CPUS
# vCPUs. Prints what it found; non-zero if it found fewer.
vcpus_up() {
	local n
	n=$(tr -d '\r' <"$1" | sed -n 's/.*smp: Brought up [0-9]* nodes\?, \([0-9]*\) CPUs\?$/\1/p' | tail -n 1)
	echo "vcpus: QEMU gave $GUEST_CPUS, the guest brought up ${n:-none}"
	[ "${n:-0}" = "$GUEST_CPUS" ]
}
