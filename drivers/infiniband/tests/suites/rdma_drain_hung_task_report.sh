# The hung-task detector reported the drain rdma_drain_hung_task kept waiting.
# shellcheck shell=sh
# Debug kernel: ib_core's suite rdma_drain_hung_task kept a drain waiting
# for 60 s; like the C drain it sleeps untimed and unwoken, so the hung-task
# detector (20 s) must have reported it. This counts any report since
# boot (ib_drain_test is built in and ran before the guest's init); the
# host check hung_task_names_the_drain ties the report to the drain.
ktap_begin rdma_drain_hung_task_report
# shellcheck disable=SC2016 # expanded by the inner sh
check hung_task_detector_fired sh -c '[ "$(cat /proc/sys/kernel/hung_task_detect_count)" -ge 1 ]'
ktap_end rdma_drain_hung_task_report
