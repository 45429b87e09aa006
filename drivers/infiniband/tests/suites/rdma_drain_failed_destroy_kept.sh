# A QP whose destroy fails is leaked whole, and events still reach it.
# shellcheck shell=sh
# A QP destroy that fails: rdma_qp_destroy_fail.ko fails the next destroy
# of a QP on an SRQ, the Rust QP's drop, which must leak the QP whole (its
# SRQ with its CQ, its send CQ, its PD) rather than free what rxe and the
# core still use; events still reach the QP afterwards.
insmod "$(mod_path rdma_qp_destroy_fail)" fail=1 || echo "rust-drain: insmod rdma_qp_destroy_fail.ko failed"
echo "rust-drain: loading rdma_drain_destroy_fail.ko"
insmod "$(mod_path rdma_drain_destroy_fail)" || echo "rust-drain: insmod rdma_drain_destroy_fail.ko failed"
console_settle
ktap_begin rdma_drain_failed_destroy_kept
check one_destroy_failed grep -qx 1 /sys/module/rdma_qp_destroy_fail/parameters/failed
# shellcheck disable=SC2016 # expanded by the inner sh
check events_reached_the_leaked_qp sh -c 'n=$(cat /sys/module/rdma_qp_destroy_fail/parameters/events_after); echo "$n Last WQE Reached events after the failed destroy"; [ "$n" -ge 1 ]'
check the_drop_said_so sh -c "dmesg | grep -q 'ib_destroy_qp_user() failed: -16; its memory is leaked'"
check rmmod_rdma_qp_destroy_fail rmmod rdma_qp_destroy_fail
check its_qp_lives_on count_is qp 4
check its_pd_lives_on count_is pd 4
check its_cqs_live_on count_is cq 6
check its_srq_lives_on count_is srq 2
ktap_end rdma_drain_failed_destroy_kept
