// SPDX-License-Identifier: GPL-2.0
/*
 * Reproducer of an upstream race in ib_core (7.3 cq.c), not in the drain,
 * fixed by patch 0001: ib_poll_handler() still used the CQ after
 * irq_poll_complete(), while ib_free_cq()'s irq_poll_disable() returned
 * as soon as the poll was complete, and the CQ was freed under the poller.
 * Each loop: a softirq CQ on rxe0, a QP with receives, moved to the error
 * state; the completion handler of the last flushed receive wakes this
 * task, which at once destroys the QP and frees the CQ. Without the fix,
 * on two CPUs, the poller oopses in rxe_req_notify_cq() within a second.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/completion.h>
#include <net/net_namespace.h>
#include <rdma/ib_verbs.h>

static unsigned int loops = 20000;
module_param(loops, uint, 0444);
MODULE_PARM_DESC(loops, "CQ lifetimes to try");

struct race_wait {
	struct ib_cqe cqe;
	atomic_t left;
	struct completion done;
};

static void race_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct race_wait *w = container_of(wc->wr_cqe, struct race_wait, cqe);

	if (atomic_dec_and_test(&w->left))
		complete(&w->done);
}

static int race_once(struct ib_device *dev, struct ib_pd *pd)
{
	struct ib_qp_init_attr init = {
		.cap = { .max_send_wr = 1, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.qp_type = IB_QPT_RC,
	};
	struct ib_qp_attr attr = {
		.qp_state = IB_QPS_INIT,
		.port_num = 1,
	};
	struct race_wait w = { .cqe.done = race_done };
	struct ib_recv_wr wr = { .wr_cqe = &w.cqe };
	const struct ib_recv_wr *bad;
	struct ib_qp *qp;
	struct ib_cq *cq;
	int i, ret;

	init_completion(&w.done);
	atomic_set(&w.left, 4);
	cq = ib_alloc_cq(dev, NULL, 8, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(cq))
		return PTR_ERR(cq);
	init.send_cq = cq;
	init.recv_cq = cq;
	qp = ib_create_qp(pd, &init);
	if (IS_ERR(qp)) {
		ret = PTR_ERR(qp);
		goto free_cq;
	}
	ret = ib_modify_qp(qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX |
			   IB_QP_PORT | IB_QP_ACCESS_FLAGS);
	for (i = 0; !ret && i < 4; i++)
		ret = ib_post_recv(qp, &wr, &bad);
	if (ret)
		goto destroy_qp;
	attr.qp_state = IB_QPS_ERR;
	ret = ib_modify_qp(qp, &attr, IB_QP_STATE);
	if (!ret)
		wait_for_completion(&w.done);
destroy_qp:
	ib_destroy_qp(qp);
free_cq:
	ib_free_cq(cq);
	return ret;
}

static int __init race_init(void)
{
	struct net_device *ndev;
	struct ib_device *dev;
	struct ib_pd *pd;
	unsigned int i;
	int ret = 0;

	ndev = dev_get_by_name(&init_net, "dummy0");
	if (!ndev)
		return -ENODEV;
	dev = ib_device_get_by_netdev(ndev, RDMA_DRIVER_RXE);
	dev_put(ndev);
	if (!dev)
		return -ENODEV;
	pd = ib_alloc_pd(dev, 0);
	if (IS_ERR(pd)) {
		ret = PTR_ERR(pd);
		goto put;
	}
	for (i = 0; i < loops && !ret; i++)
		ret = race_once(dev, pd);
	pr_info("rdma_cq_free_race: %u loops, result %d\n", i, ret);
	ib_dealloc_pd(pd);
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
