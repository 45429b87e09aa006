# ib_free_cq() of a softirq CQ waits for a poller still in ->req_notify_cq() (cq.c fix, patch 0001).
# shellcheck shell=sh
# helpers/rdma_cq_free_race.c: each loop schedules a softirq CQ's poll on
# one CPU and frees the CQ on the other, while kprobes hold the poller in
# rxe_req_notify_cq(), after irq_poll_complete(), until irq_poll_disable()
# has returned. With the fix every loop's free is held until the poller
# is done; without it (mutant 27) every loop reaches rxe_destroy_cq()
# under the poller and the module fails to load. A loop whose free was
# held up by the spinning CPU ("missed") is run again.
# rust_drain_cq_race_loops=N on the command line sets the loops.
cq_race_loops=$(sed -n 's/.*rust_drain_cq_race_loops=\([0-9]*\).*/\1/p' /proc/cmdline)
cq_race_loops=${cq_race_loops:-200}
ktap_begin rdma_cq_free_race
check cqs_freed_after_their_pollers insmod "$(mod_path rdma_cq_free_race)" loops="$cq_race_loops"
check every_loop_held sh -c "dmesg | grep -E 'rdma_cq_free_race: [0-9]+ loops, result 0: $cq_race_loops held, 0 under the poller, [0-9]+ missed'"
check rmmod_rdma_cq_free_race rmmod rdma_cq_free_race
ktap_end rdma_cq_free_race
