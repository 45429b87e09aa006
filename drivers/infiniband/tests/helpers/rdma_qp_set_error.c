// SPDX-License-Identifier: GPL-2.0
/*
 * Moves a QP that its owner forgot to the error state, by number, so that
 * the provider flushes its work requests: on load, QP @qpn of the rxe device
 * on netdev @netdev. Not a test; used by the suite rdma_drain_forgotten_posted
 * (rdma_drain_forget.ko).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>
#include <rdma/restrack.h>

static char *netdev = "dummy0";
module_param(netdev, charp, 0444);
MODULE_PARM_DESC(netdev, "The netdev of the rxe device");

static uint qpn;
module_param(qpn, uint, 0444);
MODULE_PARM_DESC(qpn, "The QP to move to the error state");

static int __init qp_set_error_init(void)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };
	struct rdma_restrack_entry *res;
	struct ib_device *ibdev;
	struct net_device *ndev;
	int ret;

	ndev = dev_get_by_name(&init_net, netdev);
	if (!ndev)
		return -ENODEV;
	ibdev = ib_device_get_by_netdev(ndev, RDMA_DRIVER_RXE);
	dev_put(ndev);
	if (!ibdev)
		return -ENODEV;
	res = rdma_restrack_get_byid(ibdev, RDMA_RESTRACK_QP, qpn);
	if (IS_ERR(res)) {
		ret = PTR_ERR(res);
	} else {
		ret = ib_modify_qp(container_of(res, struct ib_qp, res), &attr,
				   IB_QP_STATE);
		rdma_restrack_put(res);
	}
	ib_device_put(ibdev);
	pr_info("QP %#x on %s: error state: %d\n", qpn, netdev, ret);
	return ret;
}

static void __exit qp_set_error_exit(void)
{
}

module_init(qp_set_error_init);
module_exit(qp_set_error_exit);
MODULE_DESCRIPTION("Moves a forgotten QP to the error state, for a test");
MODULE_LICENSE("GPL");
