// SPDX-License-Identifier: GPL-2.0
/*
 * Reproducer of an upstream race in rxe (7.3), not in the drain, fixed by
 * patch 0002: sends posted to a QP in the error state are flushed by rxe's
 * completer at once, and then walked by its requester, one per run of the
 * send task, each run ending in rxe_qp_error(), which set ERR without
 * looking: a modify_qp(RESET) during the walk could leave the QP in ERR.
 * Each loop: a QP on rxe0 moved to INIT, then ERR, sends posted, the
 * first flushed completion awaited, then RESET; the QP must then read
 * RESET. The module loads only if it always did.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <net/net_namespace.h>
#include <rdma/ib_verbs.h>

static unsigned int loops = 10000;
module_param(loops, uint, 0444);
MODULE_PARM_DESC(loops, "flush-then-reset cycles to try");

static unsigned int sends = 16;
module_param(sends, uint, 0444);
MODULE_PARM_DESC(sends, "sends flushed in each cycle (at most 64)");

/* Cycles whose QP read ERR after the reset. */
static unsigned int late;

static void flushed(struct ib_cq *cq, struct ib_wc *wc)
{
}

static int late_once(struct ib_qp *qp, struct ib_cq *cq, struct ib_cqe *cqe)
{
	struct ib_qp_attr attr = {
		.qp_state = IB_QPS_INIT,
		.port_num = 1,
	};
	struct ib_send_wr wr = {
		.wr_cqe = cqe,
		.opcode = IB_WR_SEND,
		.send_flags = IB_SEND_SIGNALED,
	};
	struct ib_qp_init_attr init;
	const struct ib_send_wr *bad;
	unsigned int i, spins;
	int ret;

	ret = ib_modify_qp(qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX |
			   IB_QP_PORT | IB_QP_ACCESS_FLAGS);
	if (ret)
		return ret;
	attr.qp_state = IB_QPS_ERR;
	ret = ib_modify_qp(qp, &attr, IB_QP_STATE);
	for (i = 0; !ret && i < sends; i++)
		ret = ib_post_send(qp, &wr, &bad);
	if (ret)
		return ret;
	/* The completer has flushed: the requester walks the slots now. */
	for (spins = 0; spins < 10000 && !ib_process_cq_direct(cq, 1); spins++)
		cond_resched();
	attr.qp_state = IB_QPS_RESET;
	ret = ib_modify_qp(qp, &attr, IB_QP_STATE);
	if (!ret)
		ret = ib_query_qp(qp, &attr, IB_QP_STATE, &init);
	if (!ret && attr.qp_state != IB_QPS_RESET) {
		late++;
		attr.qp_state = IB_QPS_RESET;
		ret = ib_modify_qp(qp, &attr, IB_QP_STATE);
	}
	/* The reset waited for the send task: the other flushes are in. */
	ib_process_cq_direct(cq, -1);
	return ret;
}

static int __init late_init(void)
{
	struct ib_qp_init_attr init = {
		.cap = { .max_send_wr = 64, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.qp_type = IB_QPT_RC,
	};
	struct ib_cqe cqe = { .done = flushed };
	struct net_device *ndev;
	struct ib_device *dev;
	struct ib_qp *qp;
	struct ib_cq *cq;
	struct ib_pd *pd;
	unsigned int i;
	int ret = 0;

	if (!sends || sends > init.cap.max_send_wr)
		return -EINVAL;
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
	cq = ib_alloc_cq(dev, NULL, 2 * init.cap.max_send_wr, 0,
			 IB_POLL_DIRECT);
	if (IS_ERR(cq)) {
		ret = PTR_ERR(cq);
		goto dealloc_pd;
	}
	init.send_cq = cq;
	init.recv_cq = cq;
	qp = ib_create_qp(pd, &init);
	if (IS_ERR(qp)) {
		ret = PTR_ERR(qp);
		goto free_cq;
	}
	for (i = 0; i < loops && !ret; i++)
		ret = late_once(qp, cq, &cqe);
	pr_info("rdma_rxe_late_err: %u cycles of %u sends, %u read ERR after the reset, result %d\n",
		i, sends, late, ret);
	if (!ret && late)
		ret = -EIO;
	ib_destroy_qp(qp);
free_cq:
	ib_free_cq(cq);
dealloc_pd:
	ib_dealloc_pd(pd);
put:
	ib_device_put(dev);
	return ret;
}

static void __exit late_exit(void)
{
}

module_init(late_init);
module_exit(late_exit);
MODULE_DESCRIPTION("Reproducer: rxe's error state set after a racing reset");
MODULE_LICENSE("GPL");
