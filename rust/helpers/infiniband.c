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
