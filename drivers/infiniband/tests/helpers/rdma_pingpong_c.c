// SPDX-License-Identifier: GPL-2.0
/*
 * The ping-pong of samples/rust/rust_rdma_pingpong.rs, written against the
 * C verbs as a C ULP would write it: the reference that make bench-api
 * compares the Rust API with, and that make test checks the same way.
 *
 * Two RC QPs on the RDMA device of dummy0, connected over RoCE loopback,
 * bounce a message of @size bytes @iterations times; each end checks every
 * byte. One CQ, polled directly by the module. It prints the same line as
 * the Rust sample and fails to load if a byte or a completion was wrong.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/ipv6.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/slab.h>
#include <net/ipv6.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>

static uint size = 64;
module_param(size, uint, 0444);
MODULE_PARM_DESC(size, "Message size in bytes (1 to 65536)");
static uint iterations = 1000;
module_param(iterations, uint, 0444);
MODULE_PARM_DESC(iterations, "Round trips");

#define ROUND_TRIP_LIMIT_NS (10ULL * NSEC_PER_SEC)

struct done {
	struct ib_cqe cqe;
	u32 ok, failed, len;
};

static void done_fn(struct ib_cq *cq, struct ib_wc *wc)
{
	struct done *d = container_of(wc->wr_cqe, struct done, cqe);

	if (wc->status == IB_WC_SUCCESS) {
		d->len = wc->byte_len;
		d->ok++;
	} else {
		d->failed++;
	}
}

struct end {
	struct ib_qp *qp;
	bool connected;
	u8 *out, *in;
	u64 out_dma, in_dma;
};

/* Longer than the messages, as the Rust sample's. */
#define BUF_LEN (size + 64)

static struct ib_device *dev;
static struct ib_pd *pd;
static struct ib_cq *cq;
static struct end a, b;
static struct done sent = { .cqe.done = done_fn };
static struct done received = { .cqe.done = done_fn };

static u8 pattern(u32 round, size_t i)
{
	return (u8)(round * 31 + i);
}

static int pp_map(u8 **buf, u64 *dma)
{
	*buf = kzalloc(BUF_LEN, GFP_KERNEL);
	if (!*buf)
		return -ENOMEM;
	*dma = ib_dma_map_single(dev, *buf, BUF_LEN, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, *dma)) {
		kfree(*buf);
		*buf = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void pp_unmap(u8 *buf, u64 dma)
{
	if (!buf)
		return;
	ib_dma_unmap_single(dev, dma, BUF_LEN, DMA_BIDIRECTIONAL);
	kfree(buf);
}

static int create_end(struct end *e)
{
	struct ib_qp_init_attr attr = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = IB_QPT_RC,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = {
			/* One work request, and the drain's marker. */
			.max_send_wr = 2,
			.max_recv_wr = 2,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
	};
	struct ib_qp_attr qa = {
		.qp_state = IB_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IB_ACCESS_LOCAL_WRITE,
	};
	int ret;

	e->qp = ib_create_qp(pd, &attr);
	if (IS_ERR(e->qp)) {
		ret = PTR_ERR(e->qp);
		e->qp = NULL;
		return ret;
	}
	ret = pp_map(&e->out, &e->out_dma);
	if (!ret)
		ret = pp_map(&e->in, &e->in_dma);
	if (!ret)
		ret = ib_modify_qp(e->qp, &qa, IB_QP_STATE | IB_QP_PKEY_INDEX |
				   IB_QP_PORT | IB_QP_ACCESS_FLAGS);
	return ret;
}

static int pp_connect(struct end *e, const struct ib_gid_attr *gid, u32 qpn)
{
	struct ib_qp_attr qa = {
		.qp_state = IB_QPS_RTR,
		.path_mtu = IB_MTU_1024,
		.dest_qp_num = qpn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
	};
	struct rdma_ah_attr *ah = &qa.ah_attr;
	int ret;

	ah->type = RDMA_AH_ATTR_TYPE_ROCE;
	ah->port_num = 1;
	ah->ah_flags = IB_AH_GRH;
	memcpy(ah->grh.dgid.raw, gid->gid.raw, sizeof(gid->gid.raw));
	ah->grh.sgid_index = gid->index;
	ah->grh.hop_limit = 64;
	ret = rdma_read_gid_l2_fields(gid, NULL, ah->roce.dmac);
	if (ret)
		return ret;
	ret = ib_modify_qp(e->qp, &qa, IB_QP_STATE | IB_QP_AV |
			   IB_QP_PATH_MTU | IB_QP_DEST_QPN | IB_QP_RQ_PSN |
			   IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IB_QPS_RTS;
	qa.timeout = 14;
	qa.retry_cnt = 7;
	qa.rnr_retry = 7;
	qa.max_rd_atomic = 1;
	ret = ib_modify_qp(e->qp, &qa, IB_QP_STATE | IB_QP_TIMEOUT |
			   IB_QP_RETRY_CNT | IB_QP_RNR_RETRY | IB_QP_SQ_PSN |
			   IB_QP_MAX_QP_RD_ATOMIC);
	e->connected = !ret;
	return ret;
}

/* Sends @size bytes of @from->out into @to->in; polls for both. */
static int bounce(struct end *from, struct end *to)
{
	u32 want_sent = sent.ok + sent.failed + 1;
	u32 want_received = received.ok + received.failed + 1;
	struct ib_sge rsge = {
		.addr = to->in_dma, .length = BUF_LEN, .lkey = pd->local_dma_lkey,
	};
	struct ib_sge ssge = {
		.addr = from->out_dma, .length = size,
		.lkey = pd->local_dma_lkey,
	};
	struct ib_recv_wr rwr = {
		.wr_cqe = &received.cqe, .sg_list = &rsge, .num_sge = 1,
	};
	struct ib_send_wr swr = {
		.wr_cqe = &sent.cqe, .sg_list = &ssge, .num_sge = 1,
		.opcode = IB_WR_SEND, .send_flags = IB_SEND_SIGNALED,
	};
	u64 start;
	int ret;

	ib_dma_sync_single_for_device(dev, to->in_dma, BUF_LEN, DMA_BIDIRECTIONAL);
	ret = ib_post_recv(to->qp, &rwr, NULL);
	if (ret)
		return ret;
	ib_dma_sync_single_for_device(dev, from->out_dma, BUF_LEN,
				      DMA_BIDIRECTIONAL);
	ret = ib_post_send(from->qp, &swr, NULL);
	if (ret)
		return ret;
	start = ktime_get_ns();
	while (sent.ok + sent.failed < want_sent ||
	       received.ok + received.failed < want_received) {
		if (!ib_process_cq_direct(cq, -1)) {
			if (ktime_get_ns() - start > ROUND_TRIP_LIMIT_NS) {
				pr_err("no completion in 10 s\n");
				return -ETIMEDOUT;
			}
			cpu_relax();
		}
	}
	if (received.len != size) {
		pr_err("received %u bytes, not %u\n", received.len, size);
		return -EIO;
	}
	return 0;
}

/* Fills @buf with what round @round must not find there. */
static void poison(u8 *buf, u32 round)
{
	size_t i;

	for (i = 0; i < size; i++)
		buf[i] = ~pattern(round, i);
}

static u64 matching(const u8 *buf, u32 round)
{
	u64 n = 0;
	size_t i;

	for (i = 0; i < size; i++)
		n += buf[i] == pattern(round, i);
	return n;
}

static int run(u64 *verified, u64 *wrong, u64 *busy)
{
	u64 t, echo, back;
	u32 round;
	size_t i;
	int ret;

	for (round = 0; round < iterations; round++) {
		ib_dma_sync_single_for_cpu(dev, a.out_dma, BUF_LEN,
					   DMA_BIDIRECTIONAL);
		for (i = 0; i < size; i++)
			a.out[i] = pattern(round, i);
		poison(a.in, round);
		poison(b.in, round);
		t = ktime_get_ns();
		ret = bounce(&a, &b);
		*busy += ktime_get_ns() - t;
		if (ret)
			return ret;
		/* Outside the timing, as the Rust sample's first access. */
		ib_dma_sync_single_for_cpu(dev, b.in_dma, BUF_LEN,
					   DMA_BIDIRECTIONAL);
		echo = matching(b.in, round);
		ib_dma_sync_single_for_cpu(dev, b.out_dma, BUF_LEN,
					   DMA_BIDIRECTIONAL);
		memcpy(b.out, b.in, size);
		t = ktime_get_ns();
		ret = bounce(&b, &a);
		*busy += ktime_get_ns() - t;
		if (ret)
			return ret;
		ib_dma_sync_single_for_cpu(dev, a.in_dma, BUF_LEN,
					   DMA_BIDIRECTIONAL);
		back = matching(a.in, round);
		*verified += echo + back;
		*wrong += 2 * size - echo - back;
	}
	return 0;
}

static void destroy_end(struct end *e)
{
	if (e->qp) {
		/* A QP still in RESET or INIT has nothing to drain. */
		if (e->connected)
			ib_drain_qp(e->qp);
		ib_destroy_qp(e->qp);
	}
	pp_unmap(e->out, e->out_dma);
	pp_unmap(e->in, e->in_dma);
}

static int find_gid(const struct ib_gid_attr **gid)
{
	const struct ib_gid_attr *g;
	int i;

	for (i = 0; i <= U16_MAX; i++) {
		g = rdma_get_gid_attr(dev, 1, i);
		/* Past the end of the table. */
		if (PTR_ERR(g) == -EINVAL)
			break;
		if (IS_ERR(g))
			continue;
		if (ipv6_addr_v4mapped((const struct in6_addr *)g->gid.raw)) {
			*gid = g;
			return 0;
		}
		rdma_put_gid_attr(g);
	}
	return -ENOENT;
}

static int __init pingpong_init(void)
{
	const struct ib_gid_attr *gid = NULL;
	u64 verified = 0, wrong = 0, busy = 0;
	struct net_device *ndev;
	int ret;

	if (size < 1 || size > 65536) {
		pr_err("size must be 1 to 65536 bytes, not %u\n", size);
		return -EINVAL;
	}
	ndev = dev_get_by_name(&init_net, "dummy0");
	if (!ndev)
		return -ENODEV;
	dev = ib_device_get_by_netdev(ndev, RDMA_DRIVER_UNKNOWN);
	dev_put(ndev);
	if (!dev)
		return -ENODEV;
	ret = find_gid(&gid);
	if (ret)
		goto out_dev;
	pd = ib_alloc_pd(dev, 0);
	if (IS_ERR(pd)) {
		ret = PTR_ERR(pd);
		goto out_gid;
	}
	cq = ib_alloc_cq(dev, NULL, 8, 0, IB_POLL_DIRECT);
	if (IS_ERR(cq)) {
		ret = PTR_ERR(cq);
		goto out_pd;
	}
	ret = create_end(&a);
	if (!ret)
		ret = create_end(&b);
	if (!ret)
		ret = pp_connect(&a, gid, b.qp->qp_num);
	if (!ret)
		ret = pp_connect(&b, gid, a.qp->qp_num);
	if (!ret)
		ret = run(&verified, &wrong, &busy);
	destroy_end(&a);
	destroy_end(&b);
	if (!ret) {
		busy = max(busy, 1ULL);
		pr_info("send %u B x %u: %llu bytes verified, %llu wrong\n",
			size, iterations, verified, wrong);
		pr_info("send %u B x %u: %llu ns per round trip, %llu KB/s\n",
			size, iterations, busy / max(iterations, 1U),
			verified * 1000000 / busy);
		if (wrong || sent.failed || received.failed) {
			pr_err("%llu bytes wrong, %u completions failed\n",
			       wrong, sent.failed + received.failed);
			ret = -EIO;
		}
	}
	ib_free_cq(cq);
out_pd:
	ib_dealloc_pd(pd);
out_gid:
	rdma_put_gid_attr(gid);
out_dev:
	ib_device_put(dev);
	return ret;
}
module_init(pingpong_init);

static void __exit pingpong_exit(void)
{
}
module_exit(pingpong_exit);

MODULE_DESCRIPTION("C verbs reference for the Rust RDMA ping-pong sample");
MODULE_LICENSE("GPL");
