# A module that forgot a QP with a receive posted is held until it flushes.
# shellcheck shell=sh
# A module forgets a QP with a receive posted, whose completion entry calls
# the module's code: ib_core holds the module (a module reference) while the
# receive is outstanding, so rmmod is refused, as for any module in use.
# rdma_qp_set_error.ko flushes the receive: the handler runs, the module is
# let go and unloads. Unloaded earlier, the flush would call freed code.
ktap_begin rdma_drain_forgotten_posted
check insmod_forget_posted insmod "$(mod_path rdma_drain_forget)"
qpn=$(dmesg | sed -n 's/.*rdma_drain_forget: forgetting QP \(0x[0-9a-f]*\) .*/\1/p' | tail -n 1)
check the_module_is_held grep -x 1 /sys/module/rdma_drain_forget/refcnt
# In the background: an unload that waits instead (not held) must not hang
# the suite.
rmmod rdma_drain_forget &
rm_pid=$!
rm_rc=0
pid_ends_within 5 "$rm_pid" && { wait "$rm_pid"; rm_rc=$?; }
check rmmod_is_refused_at_once test "$rm_rc" != 0
check handler_not_run_yet sh -c "! dmesg | grep 'rdma_drain_forget: handler ran'"
check qp_set_error insmod "$(mod_path rdma_qp_set_error)" qpn="${qpn:-0}"
# shellcheck disable=SC2016 # expanded by the inner sh
check the_module_is_let_go sh -c 'i=0; until grep -x 0 /sys/module/rdma_drain_forget/refcnt; do i=$((i + 1)); [ $i -gt 10 ] && exit 1; sleep 1; done'
check handler_ran sh -c "dmesg | grep 'rdma_drain_forget: handler ran: FlushError'"
pid_ends_within 10 "$rm_pid" && wait "$rm_pid" 2>/dev/null
check rmmod_succeeds_now rmmod rdma_drain_forget
check module_gone test ! -e /sys/module/rdma_drain_forget
# The same, but its init fails after forgetting: the module goes although
# it is held, and ib_core's module notifier makes insmod wait until the
# flush has run the handler, before the module is freed.
insmod "$(mod_path rdma_drain_forget)" fail_init=1 &
ins_pid=$!
sleep 3
check failed_init_waits_for_the_flush eval "! pid_ends_within 0 $ins_pid"
check failed_init_says_why sh -c "dmesg | grep 'rdma_drain_forget: goes with 1 work requests posted'"
# busybox's insmod retries a failed finit_module() with init_module(), so
# the init may run (and leak) twice: flush each QP it leaked.
flushed=0
for _ in 1 2; do
	qpn=$(dmesg | sed -n 's/.*rdma_drain_forget: forgetting QP \(0x[0-9a-f]*\) .*/\1/p' | tail -n 1)
	rmmod rdma_qp_set_error 2>/dev/null
	insmod "$(mod_path rdma_qp_set_error)" qpn="${qpn:-0}" && flushed=$((flushed + 1))
	pid_ends_within 5 "$ins_pid" && break
done
check qp_set_error_again test "$flushed" -ge 1
ins_rc=0
pid_ends_within 10 "$ins_pid" && { wait "$ins_pid"; ins_rc=$?; }
check failed_init_ends_after_the_flush test "$ins_rc" != 0
# Every leaked receive (at least one) ran its handler, flushed.
check its_handler_ran_first sh -c "f=\$(dmesg | grep -c 'rdma_drain_forget: forgetting QP .* with a receive posted'); test \$f -ge 1 && test \$(dmesg | grep -c 'rdma_drain_forget: handler ran: FlushError') = \$f"
check rmmod_rdma_qp_set_error rmmod rdma_qp_set_error
ktap_end rdma_drain_forgotten_posted
