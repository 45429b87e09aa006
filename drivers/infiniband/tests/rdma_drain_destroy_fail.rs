// SPDX-License-Identifier: GPL-2.0

//! A QP whose destroy fails is leaked whole: `OwnedQp`'s drop keeps its
//! event counter, its slots and its parents, which the provider and the
//! core may still use.
//!
//! The guest loads `rdma_qp_destroy_fail.ko` first, armed to fail one
//! destroy of a QP on an SRQ: the QP here. rxe raises Last WQE Reached on
//! it again each time packets reach it in the error state; the core then
//! calls the QP's event handler with the leaked counter (KASAN watches on
//! the debug kernel), and the C module counts those events. The leaked objects stay on rxe0 for good,
//! and their handlers' code is in this module, so it is never unloaded.

use kernel::infiniband::{
    Cqe, GidAttr, OwnedCq, OwnedQp, OwnedSrq, Pd, PollContext, QpConfig, RcParams,
};
use kernel::prelude::*;

module! {
    type: DestroyFail,
    name: "rdma_drain_destroy_fail",
    authors: ["Rust RDMA drain project"],
    description: "A QP whose destroy fails, leaked whole on rxe0",
    license: "GPL",
}

struct DestroyFail;

impl kernel::Module for DestroyFail {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(DestroyFail)
    }
}

#[allow(dead_code)] // Not every helper is used here.
mod common;
use common::{rxe, wait_until, Counter, RC};

#[kunit_tests(rdma_drain_failed_destroy)]
mod tests {
    use super::*;

    /// `a`, on an SRQ, is dropped first: drained, then its destroy fails.
    /// Its peer `b` then sends to it twice; `a` answers nothing, so the
    /// first send ends with retries exceeded and the second is flushed,
    /// and each packet that reached `a` raised an event on it.
    #[test]
    fn a_qp_whose_destroy_fails_is_leaked_whole() -> Result {
        let dev = rxe()?;
        let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
        let sent = Cqe::new(Counter::default())?;
        let srq = OwnedSrq::new(&pd, 2, PollContext::Softirq, Counter::default())?;
        let on_srq = QpConfig {
            send_depth: 1,
            recv_depth: 0,
        };
        let mut a = OwnedQp::create_rc_on_srq(&pd, &cq, &srq, on_srq)?;
        let mut b = OwnedQp::create_rc(
            &pd,
            &cq,
            &cq,
            QpConfig {
                send_depth: 2,
                recv_depth: 0,
            },
        )?;
        a.init(1)?;
        b.init(1)?;
        let (qpn_a, qpn_b) = (a.qp_num(), b.qp_num());
        a.connect(&gid, qpn_b, &RC)?;
        // Few retries (rxe retries forever at 7): `b` soon gives up on `a`.
        let few_retries = RcParams {
            timeout: 12,
            retry_cnt: 2,
            ..RC
        };
        b.connect(&gid, qpn_a, &few_retries)?;
        drop(a);
        drop(srq);
        drop(pd);
        drop(cq);
        for _ in 0..2 {
            b.sq().post_send(&sent)?;
        }
        wait_until(10_000, || sent.outstanding() == 0);
        b.drain()?;
        let (ok, flushed, failed) = sent.handler().counts();
        assert_eq!(ok, 0);
        assert!(failed >= 1);
        assert_eq!(failed + flushed, 2);
        Ok(())
    }
}
