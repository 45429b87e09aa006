// SPDX-License-Identifier: GPL-2.0
/*
 * Reproducer of an upstream race in ib_core (7.3 cq.c), not in the drain,
 * fixed by patch 0001: ib_poll_handler() still uses the CQ after
 * irq_poll_complete() (it calls ->req_notify_cq()), while ib_free_cq()'s
 * irq_poll_disable() returns as soon as the poll is complete, so the CQ
 * can be destroyed and freed under the poller.
 *
 * Left to chance the window is a few instructions wide, and often closed:
 * a poll that runs inside rxe's own task (a softirq on its way out of an
 * interrupt) holds up the QP's destroy, and so the free. Each loop here
 * therefore makes the race happen: a softirq CQ on rxe0 gets a completion
 * event, as rxe raises one, on this CPU, while the other CPU frees the CQ.
 * Three probes keep the window open and watch it:
 *  - the poller's rxe_req_notify_cq() of that CQ, the call after
 *    irq_poll_complete(), waits until ib_free_cq()'s irq_poll_disable()
 *    has returned, then up to 20 ms for the free to reach the provider's
 *    destroy;
 *  - irq_poll_disable()'s return of that CQ says so;
 *  - rxe_destroy_cq() of that CQ waits until the poller's call has
 *    returned: the CQ is never freed under it here, the module sees the
 *    bug and fails instead of oopsing.
 * With the fix the free waits for the poller and no destroy starts in
 * the window ("held"); without it every loop's destroy starts while the
 * poller is still in ->req_notify_cq() ("under the poller"). A loop whose
 * free did not reach irq_poll_disable() in time ("missed": the spinning
 * CPU held up something the free needed, such as the kprobe optimizer's
 * IPIs) is run again. This shows the order of the two CPUs, not how often
 * a ULP meets it; the rdma_dim() half of the bug is not exercised (rxe
 * has no DIM).
 */
#include <linux/delay.h>
#include <linux/interrupt.h>
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/timekeeping.h>
#include <linux/workqueue.h>
#include <net/net_namespace.h>
#include <rdma/ib_verbs.h>

static unsigned int loops = 200;
module_param(loops, uint, 0444);
MODULE_PARM_DESC(loops, "CQ lifetimes to try");

/* One loop's state, shared by the loop, the free's work and the probes. */
static struct {
	struct ib_cq *cq;	/* the CQ the probes watch, or NULL */
	bool disabled;		/* ib_free_cq()'s irq_poll_disable() returned */
	bool destroying;	/* ib_free_cq() reached ->destroy_cq() */
	bool poller_done;	/* the poller's ->req_notify_cq() returned */
	struct work_struct free;
} race;

static unsigned int held, under_poller, missed;

/* The free, on the other CPU (with no CQ: a warm-up of that CPU's pool). */
static void race_free(struct work_struct *work)
{
	if (race.cq)
		ib_free_cq(race.cq);
}

/* Spin (in a probe: no sleeping) until *flag is set, for at most @ms. */
static bool race_wait(bool *flag, unsigned int ms)
{
	u64 end = ktime_get_mono_fast_ns() + ms * NSEC_PER_MSEC;

	/* Pairs with the probes' smp_store_release() of the flag. */
	while (!smp_load_acquire(flag)) {
		if (ktime_get_mono_fast_ns() > end)
			return false;
		udelay(1);
	}
	return true;
}

static struct ib_cq *arg_cq(struct pt_regs *regs)
{
	return (struct ib_cq *)regs_get_kernel_argument(regs, 0);
}

/* The poller's ->req_notify_cq() of the CQ, after irq_poll_complete(). */
static int notify_entry(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	struct ib_cq *cq = READ_ONCE(race.cq);

	if (!cq || arg_cq(regs) != cq || !in_serving_softirq())
		return 1;	/* not that call: no return probe */
	if (!race_wait(&race.disabled, MSEC_PER_SEC))
		missed++;
	else if (race_wait(&race.destroying, 20))
		under_poller++;
	else
		held++;
	return 0;
}

/* That call returned: the poller no longer uses the CQ. */
static int notify_return(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	/* Pairs with race_wait(): the poller's counts are written. */
	smp_store_release(&race.poller_done, true);
	return 0;
}

static int disable_entry(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	struct ib_cq *cq = READ_ONCE(race.cq);

	return !cq || (void *)regs_get_kernel_argument(regs, 0) != &cq->iop;
}

static int disable_return(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	/* Pairs with race_wait() in notify_entry(). */
	smp_store_release(&race.disabled, true);
	return 0;
}

static int destroy_pre(struct kprobe *p, struct pt_regs *regs)
{
	struct ib_cq *cq = READ_ONCE(race.cq);

	if (!cq || arg_cq(regs) != cq)
		return 0;
	/* Pairs with race_wait() in notify_entry(). */
	smp_store_release(&race.destroying, true);
	/*
	 * The poller's probe waits at most 1 s + 20 ms, so this runs out only
	 * if the loop's poll never reached ->req_notify_cq() (the free's
	 * irq_poll_disable() came first): then nothing uses the CQ, and the
	 * loop, counted nowhere, is run again.
	 */
	race_wait(&race.poller_done, 2 * MSEC_PER_SEC);
	return 0;
}

static struct kretprobe notify_probe = {
	.kp.symbol_name = "rxe_req_notify_cq",
	.entry_handler = notify_entry,
	.handler = notify_return,
	.maxactive = 4,
};

static struct kretprobe disable_probe = {
	.kp.symbol_name = "irq_poll_disable",
	.entry_handler = disable_entry,
	.handler = disable_return,
	.maxactive = 4,
};

static struct kprobe destroy_probe = {
	.symbol_name = "rxe_destroy_cq",
	.pre_handler = destroy_pre,
};

static int race_once(struct ib_device *dev)
{
	struct ib_cq *cq;
	unsigned int other;

	cq = ib_alloc_cq(dev, NULL, 8, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(cq))
		return PTR_ERR(cq);
	WRITE_ONCE(race.disabled, false);
	WRITE_ONCE(race.destroying, false);
	WRITE_ONCE(race.poller_done, false);
	WRITE_ONCE(race.cq, cq);

	/*
	 * A completion event schedules the poll on this CPU; it runs when
	 * bottom halves are enabled again, by then the free is queued.
	 */
	local_bh_disable();
	cq->comp_handler(cq, cq->cq_context);
	other = cpumask_any_but(cpu_online_mask, smp_processor_id());
	queue_work_on(other, system_highpri_wq, &race.free);
	local_bh_enable();

	flush_work(&race.free);
	WRITE_ONCE(race.cq, NULL);
	return 0;
}

static int __init race_init(void)
{
	struct net_device *ndev;
	struct ib_device *dev;
	unsigned int cpu, i;
	int ret;

	if (num_online_cpus() < 2 || !loops) {
		pr_err("rdma_cq_free_race: needs two CPUs and loops > 0\n");
		return -EINVAL;
	}
	/* Each CPU's worker pool up before a probe spins: no worker to fork. */
	INIT_WORK(&race.free, race_free);
	for_each_online_cpu(cpu) {
		queue_work_on(cpu, system_highpri_wq, &race.free);
		flush_work(&race.free);
	}
	ndev = dev_get_by_name(&init_net, "dummy0");
	if (!ndev)
		return -ENODEV;
	dev = ib_device_get_by_netdev(ndev, RDMA_DRIVER_RXE);
	dev_put(ndev);
	if (!dev)
		return -ENODEV;
	ret = register_kretprobe(&notify_probe);
	if (ret)
		goto put;
	ret = register_kretprobe(&disable_probe);
	if (ret)
		goto notify;
	ret = register_kprobe(&destroy_probe);
	if (ret)
		goto disable;
	/* Let the kprobe optimizer's IPIs pass before a probe spins. */
	msleep(200);
	/* A missed loop proves nothing: run it again, a few times at most. */
	for (i = 0; i < loops + loops / 10 + 2 && held + under_poller < loops &&
	     !ret; i++)
		ret = race_once(dev);
	pr_info("rdma_cq_free_race: %u loops, result %d: %u held, %u under the poller, %u missed\n",
		i, ret, held, under_poller, missed);
	if (!ret && held != loops)
		ret = -EIO;
	unregister_kprobe(&destroy_probe);
disable:
	unregister_kretprobe(&disable_probe);
notify:
	unregister_kretprobe(&notify_probe);
put:
	ib_device_put(dev);
	return ret;
}

static void __exit race_exit(void)
{
}

module_init(race_init);
module_exit(race_exit);
MODULE_DESCRIPTION("Reproducer: ib_free_cq() against a running softirq poller");
MODULE_LICENSE("GPL");
