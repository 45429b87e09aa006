#!/bin/sh
# rdma_ib_core_reload: ib_core.ko out and in again, then the drain on rxe0.
#
# ib_core.ko out and in again (CONFIG_INFINIBAND=m): remove the nvmet
# configuration and rxe0 that the earlier suites left, unload every module
# that uses ib_core and then ib_core itself, load ib_core and rdma_rxe
# again, add rxe0 again, and run the rxe suite (a Rust ULP,
# kernel::infiniband) on it, and its siw suite on siw0, added again too.
# The drain's KUnit tests (ib_drain_test) load again after ib_core, which
# runs none itself. Prints the KTAP suite rdma_ib_core_reload; the host
# requires a second run of rdma_drain_unit and rdma_drain_rxe
# (run-tests.sh).

CFG=/sys/kernel/config/nvmet

. /ktap.sh
. /rdma.sh
ktap_begin rdma_ib_core_reload

# The target's ports, namespaces and subsystems hold nvmet-rdma.
nvmet_clear() {
	[ -d $CFG/ports ] || { echo "no nvmet configuration at $CFG"; return 1; }
	for l in "$CFG"/ports/*/subsystems/*; do [ -L "$l" ] && rm "$l"; done
	for d in "$CFG"/ports/* "$CFG"/subsystems/*/namespaces/* "$CFG"/subsystems/*; do
		[ -d "$d" ] && rmdir "$d"
	done
	# shellcheck disable=SC2010 # the entries of both, without ls's headers; configfs names: no blanks
	ls $CFG/ports $CFG/subsystems | grep -v ':$' | grep . && return 1
	return 0
}

# Unloads module $1 after every module that uses it.
unload_tree() {
	# shellcheck disable=SC3043 # busybox sh has local (unload_tree recurses)
	local users u
	users=$(awk -v m="$1" '$1 == m && $4 != "-" { print $4 }' /proc/modules | tr ',' ' ')
	for u in $users; do
		unload_tree "$u" || return 1
	done
	if grep -q "^$1 " /proc/modules; then
		rmmod "$1" || return 1
	fi
}

# Loads and unloads the rxe suite; its KUnit results print on the console
# as their own stream, which the host reads.
rxe_suite() {
	rxe1_add || return 1
	siw0_add || { rxe1_delete; return 1; }
	# shellcheck disable=SC2015 # delete both if either fails
	insmod "$(find /lib/modules/*/updates -name rdma_drain_rxe_test.ko)" &&
		rmmod rdma_drain_rxe_test || { rxe1_delete; siw0_delete; return 1; }
	_rc=0
	rxe1_delete || _rc=1
	siw0_delete || _rc=1
	return $_rc
}

check ib_core_is_a_loaded_module grep -q '^ib_core ' /proc/modules
check nvmet_config_removed nvmet_clear
check rxe0_deleted rdma link delete rxe0
check unload_all_users_of_ib_core unload_tree ib_core
check ib_core_unloaded sh -c '! grep -q "^ib_core " /proc/modules'
# ib_core runs no test when it loads: its KUnit tests are a module of
# their own, loaded again here, first, as at boot.
echo "rust-drain: reload: ib_core loads" >/dev/kmsg
check modprobe_rdma_rxe_again modprobe rdma_rxe
# shellcheck disable=SC2016 # $p: sed's last line, in the inner shell
check ib_core_load_runs_no_test sh -c 'dmesg | grep -q "rust-drain: reload: ib_core loads" &&
	! dmesg | sed -n "/rust-drain: reload: ib_core loads/,\$p" | grep -q "# Subtest:"'
check drain_unit_tests_load_again modprobe ib_drain_test
console_settle
check rxe0_added_again rdma link add rxe0 type rxe netdev dummy0
check rxe0_active_again rxe_wait_active
check drain_tracepoint_enabled trace_on
check rxe_suite_runs_again rxe_suite
console_settle
# The rxe suite drains dozens of queues; its own KTAP says how each went.
check drains_ran_after_reload drains_traced 20
ktap_end rdma_ib_core_reload
