// SPDX-License-Identifier: GPL-2.0
/*
 * Fault injection for a QP destroy: while loaded, the next @fail destroys
 * of a QP on an SRQ on rxe fail with -EBUSY, as rxe's own
 * rxe_qp_chk_destroy() fails one for a QP still attached to a multicast
 * group. A kretprobe on that check changes its result, before rxe has torn
 * anything down, so the QP stays whole and ib_destroy_qp_user() returns
 * the error. A kprobe on ib_core's QP event handler then counts the
 * events that still reach the QP (@events_after). Used by
 * rdma_drain_destroy_fail.ko: an OwnedQp whose destroy fails must leak
 * what the provider and the core may still touch.
 */
#include <linux/kprobes.h>
#include <linux/module.h>
#include <rdma/ib_verbs.h>

static atomic_t fail_left = ATOMIC_INIT(1);
static int fail_set(const char *val, const struct kernel_param *kp)
{
	int n, ret = kstrtoint(val, 0, &n);

	if (!ret)
		atomic_set(&fail_left, n);
	return ret;
}

static int fail_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&fail_left));
}

static const struct kernel_param_ops fail_ops = {
	.set = fail_set,
	.get = fail_get,
};
module_param_cb(fail, &fail_ops, NULL, 0644);
MODULE_PARM_DESC(fail, "Destroys of a QP on an SRQ still to fail");

static int failed;
module_param(failed, int, 0444);
MODULE_PARM_DESC(failed, "QP destroys failed so far");

static int events_after;
module_param(events_after, int, 0444);
MODULE_PARM_DESC(events_after, "Last WQE Reached events of a failed QP since");

/* The QP whose destroy failed last (rxe's QP starts with its ib_qp). */
static struct ib_qp *failed_qp;

struct chk_call {
	struct ib_qp *qp;
};

static int chk_destroy_entry(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	((struct chk_call *)ri->data)->qp = (struct ib_qp *)regs->di;
	return 0;
}

static int chk_destroy_ret(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	struct ib_qp *qp = ((struct chk_call *)ri->data)->qp;

	if ((int)regs_return_value(regs) || !qp->srq ||
	    atomic_dec_if_positive(&fail_left) < 0)
		return 0;
	WRITE_ONCE(failed_qp, qp);
	WRITE_ONCE(failed, failed + 1);
	regs_set_return_value(regs, -EBUSY);
	return 0;
}

static struct kretprobe chk_probe = {
	.kp.symbol_name = "rxe_qp_chk_destroy",
	.entry_handler = chk_destroy_entry,
	.handler = chk_destroy_ret,
	.data_size = sizeof(struct chk_call),
	.maxactive = 8,
};

static int qp_event(struct kprobe *p, struct pt_regs *regs)
{
	struct ib_event *ev = (struct ib_event *)regs->di;

	if (ev->event == IB_EVENT_QP_LAST_WQE_REACHED &&
	    ev->element.qp == READ_ONCE(failed_qp))
		WRITE_ONCE(events_after, events_after + 1);
	return 0;
}

static struct kprobe event_probe = {
	.symbol_name = "__ib_qp_event_handler",
	.pre_handler = qp_event,
};

static int __init destroy_fail_init(void)
{
	int ret = register_kprobe(&event_probe);

	if (ret)
		return ret;
	ret = register_kretprobe(&chk_probe);
	if (ret)
		unregister_kprobe(&event_probe);
	return ret;
}

static void __exit destroy_fail_exit(void)
{
	unregister_kretprobe(&chk_probe);
	unregister_kprobe(&event_probe);
}

module_init(destroy_fail_init);
module_exit(destroy_fail_exit);
MODULE_DESCRIPTION("Fail rxe QP destroys on demand, for the Rust drain tests");
MODULE_LICENSE("GPL");
