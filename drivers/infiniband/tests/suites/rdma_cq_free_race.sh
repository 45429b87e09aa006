# ib_free_cq() at once after the last completion of a softirq CQ: no report (cq.c fix, patch 0001).
# shellcheck shell=sh
# helpers/rdma_cq_free_race.c: each loop frees a softirq CQ as soon as the
# handler of its last flushed receive has woken the module. Without the
# fix the poller, still in ib_poll_handler(), uses the freed CQ: an Oops
# within a second on two CPUs, which fails the run (mutant 27).
# rust_drain_cq_race_loops=N on the command line sets the loops.
cq_race_loops=$(sed -n 's/.*rust_drain_cq_race_loops=\([0-9]*\).*/\1/p' /proc/cmdline)
ktap_begin rdma_cq_free_race
check cqs_freed_under_their_pollers insmod "$(mod_path rdma_cq_free_race)" loops="${cq_race_loops:-20000}"
check said_how_many sh -c "dmesg | grep 'rdma_cq_free_race: ${cq_race_loops:-20000} loops, result 0'"
check rmmod_rdma_cq_free_race rmmod rdma_cq_free_race
ktap_end rdma_cq_free_race
