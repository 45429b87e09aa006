// SPDX-License-Identifier: GPL-2.0
/*
 * Calls ib_drain_rq() @drains times, as a C ULP would, on a QP that rxe
 * cannot move to the error state (RESET: rxe refuses RESET -> ERR), outside
 * KUnit and its warning suppression: on load, on the rxe device of netdev
 * @netdev. Not a test; used by the suite rdma_drain_warn_once, which counts
 * the WARNs and lines that the refusals leave on the console.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>

static char *netdev = "dummy0";
module_param(netdev, charp, 0444);
MODULE_PARM_DESC(netdev, "The netdev of the rxe device");

static uint drains = 3;
module_param(drains, uint, 0444);
MODULE_PARM_DESC(drains, "How many times to drain the QP");

static int __init drain_refused_init(void)
{
	struct ib_qp_init_attr init = {
		.qp_type = IB_QPT_RC,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ib_qp_attr attr;
	struct ib_device *ibdev;
	struct net_device *ndev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;
	uint i;
	int ret;

	ndev = dev_get_by_name(&init_net, netdev);
	if (!ndev)
		return -ENODEV;
	ibdev = ib_device_get_by_netdev(ndev, RDMA_DRIVER_RXE);
	dev_put(ndev);
	if (!ibdev)
		return -ENODEV;
	pd = ib_alloc_pd(ibdev, 0);
	if (IS_ERR(pd)) {
		ret = PTR_ERR(pd);
		goto put_dev;
	}
	cq = ib_alloc_cq(ibdev, NULL, 4, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(cq)) {
		ret = PTR_ERR(cq);
		goto free_pd;
	}
	init.send_cq = cq;
	init.recv_cq = cq;
	qp = ib_create_qp(pd, &init);
	if (IS_ERR(qp)) {
		ret = PTR_ERR(qp);
		goto free_cq;
	}
	for (i = 0; i < drains; i++)
		ib_drain_rq(qp);
	ret = ib_query_qp(qp, &attr, IB_QP_STATE, &init);
	pr_info("%u drains of QP %#x in RESET: %d, state %d after\n", drains,
		qp->qp_num, ret, ret ? -1 : attr.qp_state);
	ib_destroy_qp(qp);
free_cq:
	ib_free_cq(cq);
free_pd:
	ib_dealloc_pd(pd);
put_dev:
	ib_device_put(ibdev);
	return ret;
}

static void __exit drain_refused_exit(void)
{
}

module_init(drain_refused_init);
module_exit(drain_refused_exit);
MODULE_DESCRIPTION("Drains a QP that rxe cannot move to the error state, for a test");
MODULE_LICENSE("GPL");
