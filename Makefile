# Rust ib_drain_rq for the Linux RDMA core: the table of contents.
#
#   make         set up everything, build and boot the test kernel, show the demo
#   make test    everything `make` builds, then every test suite; ends with
#                'N passed, N failed'
#   make test-debug  the same suites on a KASAN/lockdep/kmemleak kernel
#   make test-2host  two VMs on a virtual wire, nvme-rdma: the target killed,
#                the link cut, a delete with the target unreachable
#                (FLAVOUR=debug, ROUNDS=N)
#   make repro-upstream  the nvme-rdma races of patches/reports/ on the
#                7.3 tree without our patches (RACES=N, FORMS=io,idle,reset,delete)
#   make bench   Rust vs C drain latency on rxe, and time and CPU of 16 and
#                128 direct drains at once (out/bench/: CSV, table, plot;
#                SAMPLES=24 for a quick run)
#   make bench-profile  the direct-CQ drain step by step under ftrace
#   make bench-steps  Rust's and C's softirq drain step by step under ftrace
#   make bench-ulp  in-tree ULPs' teardown cycles over the Rust and the C drain
#   make bench-api  the Rust ping-pong sample against its C verbs reference
#   make bench-inline  make bench, built with LLVM 22 and CONFIG_RUST_INLINE_HELPERS
#   make kunit   the drain's unit suites through the tree's kunit.py, on the
#                drain series alone
#   make lint    shellcheck, the scripts' Python unit tests, rustfmt, clippy
#                (CLIPPY=1) and checkpatch.pl on the change
#   make patches the drain series (out/patches/) and the RFC API series on it
#                (out/patches-api/), as git format-patch series
#   make patches-check  the kernel builds after each patch of the series
#   make mutants deliberate breakages of the drain, each must fail a suite
#   make clean   remove the build cache (it is rebuilt from nothing next time)
#
# V=1 shows the build's output live. RDMA_RUST_CACHE moves the cache.

SHELL := /bin/bash
CACHE ?= $(or $(RDMA_RUST_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/rdma-rust-drain)
export RDMA_RUST_CACHE := $(CACHE)

.PHONY: all demo test test-debug test-2host repro-upstream build bench bench-profile bench-steps bench-ulp bench-api bench-inline kunit patches patches-check mutants lint clean

all: demo

build:
	@scripts/build.sh test
	@scripts/initramfs.sh test

demo: build
	@scripts/run-tests.sh test demo

# panic_on_warn=1, as fleets run: the drains of every suite (a late marker
# too) must not WARN; only refusals do, under KUnit's warning suppression.
test: build
	@BOOT_TIMEOUT=$${BOOT_TIMEOUT:-600} KERNEL_ARGS="panic_on_warn=1 $${KERNEL_ARGS:-}" scripts/run-tests.sh test test

# The project's suites on the debug kernel (KASAN, lockdep, kmemleak, ...).
# The kernel's own Rust doctests run in make test; here they are filtered
# out: 7.3's hrtimer doctests put timers on the stack without annotating
# them, which DEBUG_OBJECTS reports. Under KASAN and lockdep each nvme
# cycle takes ~9 s and each ULP cycle 10-50 s: 10 nvme cycles, one per
# ULP, of the ULPs only SRP and iSER besides nvme (the debug kernel has
# no NFS or RNBD) and 50 loops of the CQ-free race, ~20 ms each (make
# test runs all of them, many cycles): CI from nothing must fit its time.
test-debug:
	@scripts/build.sh debug
	@scripts/initramfs.sh debug
	@BOOT_TIMEOUT=$${BOOT_TIMEOUT:-3000} KERNEL_ARGS="kunit.filter_glob=rdma_drain* rust_drain_stress_cycles=$${STRESS_CYCLES:-100} rust_drain_nvme_cycles=$${NVME_CYCLES:-10} rust_drain_ulp_cycles=$${ULP_CYCLES:-1} rust_drain_ulps=$${ULPS:-srp,iser} rust_drain_cq_race_loops=$${CQ_RACE_LOOPS:-50} $${KERNEL_ARGS:-}" \
		scripts/run-tests.sh debug test

test-2host:
	@scripts/build.sh $${FLAVOUR:-test}
	@scripts/initramfs.sh $${FLAVOUR:-test}
	@scripts/test-2host.sh $${FLAVOUR:-test} $${ROUNDS:-10}

# The bugs of patches/reports/ on the 7.3 tree without our patches (no
# project modules) with the debug kernel's config: nvme.sh alone, its
# removal racing resets and deletes too (RACES=16). Not a test: it ends
# with results.py's list of the kernel's reports and the symptoms' lines.
repro-upstream:
	@mkdir -p "$(CACHE)/upstream-overlay" && : >"$(CACHE)/upstream-overlay/Kbuild"
	@SRC_TREE="$(CACHE)/upstream-src" OVERLAY="$(CACHE)/upstream-overlay" scripts/build.sh upstream
	@scripts/initramfs.sh upstream
	@log="$(CACHE)/logs/console-upstream.log"; rc=0; \
	BOOT_TIMEOUT=$${BOOT_TIMEOUT:-1800} scripts/boot.sh upstream "$$log" \
		"rust_drain_ulp_cycles=1 rust_drain_ulps=nvme rust_drain_ulps_only rust_drain_race_known_bugs rust_drain_nvme_races=$${RACES:-16} $${FORMS:+rust_drain_race_forms=$$FORMS} $${KERNEL_ARGS:-}" || rc=$$?; \
	python3 scripts/results.py "$(CACHE)/upstream-src" "$$log" noend || rc=$$?; \
	grep -aE 'rdma\.c:[0-9]+|Connect rejected|does not listen again|KASAN:|circular locking' "$$log" || true; \
	exit $$rc

bench:
	@scripts/bench.sh

bench-profile:
	@PROFILE=1 scripts/bench.sh

bench-steps:
	@PROFILE=steps scripts/bench.sh

bench-ulp:
	@scripts/bench-ulp.sh

bench-api:
	@scripts/bench-api.sh

bench-inline:
	@RDMA_RUST_LLVM=22 BENCH_FLAVOUR=bench-inline scripts/bench.sh

kunit:
	@scripts/kunit.sh

lint: build
	@scripts/lint.sh

patches:
	@scripts/patches.sh

patches-check:
	@scripts/patches-check.sh

mutants:
	@scripts/mutants.sh $(MUTANTS)

clean:
	rm -rf "$(CACHE)"
