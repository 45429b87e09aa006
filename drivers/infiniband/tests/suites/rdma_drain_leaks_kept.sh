# QPs forgotten and leaked keep their PDs, CQs and SRQ on rxe0 for good.
# shellcheck shell=sh
# Leaking is safe: QPs forgotten and leaked keep their PDs, CQs and SRQ,
# on rxe0 for good (so after everything that deletes rxe0, and after the
# kmemleak scan); none of what they hold is freed.
echo "rust-drain: loading rdma_drain_leak.ko"
insmod "$(find /lib/modules/*/updates -name rdma_drain_leak.ko)" || echo "rust-drain: insmod rdma_drain_leak.ko failed"
console_settle
ktap_begin rdma_drain_leaks_kept
check leaked_qps_live_on count_is qp 3
check their_pds_live_on count_is pd 3
check their_cqs_live_on count_is cq 4
check their_srq_lives_on count_is srq 1
ktap_end rdma_drain_leaks_kept
