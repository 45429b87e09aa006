// SPDX-License-Identifier: GPL-2.0
/*
 * Fault injection for a QP destroy: while loaded, the next @fail QP
 * destroys on rxe fail with -EBUSY, as rxe's own rxe_qp_chk_destroy()
 * fails one for a QP still attached to a multicast group. A kretprobe on
 * that check changes its result, before rxe has torn anything down, so
 * the QP stays whole and ib_destroy_qp_user() returns the error. Used by
 * rdma_drain_destroy_fail.ko to show that an OwnedQp whose destroy fails
 * leaks what the provider may still touch.
 */
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/spinlock.h>

static int fail = 1;
module_param(fail, int, 0644);
MODULE_PARM_DESC(fail, "QP destroys still to fail");

static int failed;
module_param(failed, int, 0444);
MODULE_PARM_DESC(failed, "QP destroys failed so far");

static DEFINE_SPINLOCK(lock);

static int chk_destroy_ret(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	unsigned long flags;

	spin_lock_irqsave(&lock, flags);
	if (fail > 0 && regs_return_value(regs) == 0) {
		fail--;
		failed++;
		regs_set_return_value(regs, -EBUSY);
	}
	spin_unlock_irqrestore(&lock, flags);
	return 0;
}

static struct kretprobe probe = {
	.kp.symbol_name = "rxe_qp_chk_destroy",
	.handler = chk_destroy_ret,
	.maxactive = 8,
};

static int __init destroy_fail_init(void)
{
	return register_kretprobe(&probe);
}

static void __exit destroy_fail_exit(void)
{
	unregister_kretprobe(&probe);
}

module_init(destroy_fail_init);
module_exit(destroy_fail_exit);
MODULE_DESCRIPTION("Fail rxe QP destroys on demand, for the Rust drain tests");
MODULE_LICENSE("GPL");
