// SPDX-License-Identifier: GPL-2.0

#include <rdma/ib_verbs.h>

__rust_helper bool rust_helper_ib_srq_has_cq(enum ib_srq_type srq_type)
{
	return ib_srq_has_cq(srq_type);
}

__rust_helper int rust_helper_ib_post_recv(struct ib_qp *qp,
					   const struct ib_recv_wr *recv_wr,
					   const struct ib_recv_wr **bad_recv_wr)
{
	return ib_post_recv(qp, recv_wr, bad_recv_wr);
}

__rust_helper int rust_helper_ib_post_send(struct ib_qp *qp,
					   const struct ib_send_wr *send_wr,
					   const struct ib_send_wr **bad_send_wr)
{
	return ib_post_send(qp, send_wr, bad_send_wr);
}

__rust_helper int rust_helper_ib_post_srq_recv(struct ib_srq *srq,
					       const struct ib_recv_wr *recv_wr,
					       const struct ib_recv_wr **bad_recv_wr)
{
	return ib_post_srq_recv(srq, recv_wr, bad_recv_wr);
}

__rust_helper u64 rust_helper_ib_dma_map_single(struct ib_device *dev,
						void *cpu_addr, size_t size,
						enum dma_data_direction direction)
{
	return ib_dma_map_single(dev, cpu_addr, size, direction);
}

__rust_helper int rust_helper_ib_dma_mapping_error(struct ib_device *dev,
						   u64 dma_addr)
{
	return ib_dma_mapping_error(dev, dma_addr);
}

__rust_helper void
rust_helper_dma_unmap_single_attrs(struct device *dev, dma_addr_t addr,
				   size_t size, enum dma_data_direction dir,
				   unsigned long attrs)
{
	dma_unmap_single_attrs(dev, addr, size, dir, attrs);
}

__rust_helper void
rust_helper_dma_sync_single_for_cpu(struct device *dev, dma_addr_t addr,
				    size_t size, enum dma_data_direction dir)
{
	dma_sync_single_for_cpu(dev, addr, size, dir);
}

__rust_helper void
rust_helper_dma_sync_single_for_device(struct device *dev, dma_addr_t addr,
				       size_t size, enum dma_data_direction dir)
{
	dma_sync_single_for_device(dev, addr, size, dir);
}
