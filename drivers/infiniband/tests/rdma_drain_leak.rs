// SPDX-License-Identifier: GPL-2.0

//! Leaking is safe: QPs that are forgotten (`mem::forget`) or leaked
//! (`KBox::leak`) keep what the provider may still touch, their PD, CQs and
//! SRQ, after every other handle to those is dropped. Work requests still
//! land on them and complete, through CQs whose last handle is gone.
//!
//! A parent freed under its child is caught here: `ib_free_cq()` of a used
//! CQ WARNs (`panic_on_warn`), a refused destroy of a used SRQ prints
//! "... failed", which the host counts as a report, rxe waits for a used
//! PD's users for 50 s and then WARNs, and on the debug kernel KASAN sees
//! the completion that uses a freed object.
//!
//! The QPs stay on rxe0 for good, and with them a reference to the device,
//! which then can no longer be deleted. So the guest loads this module last,
//! after everything that deletes rxe0 and after the kmemleak scan, and never
//! unloads it: the completion handlers of the leaked objects are its code.
//! They are left with empty queues, so no rxe retransmit timer is armed.

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::infiniband::{
    CompletionHandler, Cqe, GidAttr, OwnedCq, OwnedQp, OwnedSrq, Pd, PollContext, QpConfig,
    WcStatus, WorkCompletion,
};
use kernel::prelude::*;

module! {
    type: LeakTest,
    name: "rdma_drain_leak",
    authors: ["Rust RDMA drain project"],
    description: "Leaked and forgotten QPs on rxe0, for good",
    license: "GPL",
}

struct LeakTest;

impl kernel::Module for LeakTest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(LeakTest)
    }
}

#[allow(dead_code)] // Not every helper is used here.
mod common;
use common::{connect_pair, rxe, wait_until, Counter};

/// One entry per queue: each QP here is on CQs of its own.
const CFG: QpConfig = QpConfig {
    send_depth: 1,
    recv_depth: 1,
};

/// Successful completions on the SRQ of the SRQ case.
static SRQ_RECEIVED: AtomicU32 = AtomicU32::new(0);

/// Counts the SRQ case's successful receives in [`SRQ_RECEIVED`].
struct SrqReceived;

impl CompletionHandler for SrqReceived {
    fn done(&self, wc: &WorkCompletion) {
        if wc.status() == WcStatus::Success {
            SRQ_RECEIVED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[kunit_tests(rdma_drain_leaks)]
mod tests {
    use super::*;

    /// `a` has a receive posted and is forgotten; its PD, CQ and device
    /// handles are dropped. A send from `b` still lands in that receive and
    /// completes through `a`'s CQ, which only the forgotten QP holds.
    #[test]
    fn a_forgotten_qp_keeps_its_parents() -> Result {
        let dev = rxe()?;
        let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
        let pd = Pd::alloc(&dev)?;
        let cq_a = OwnedCq::alloc(&dev, 4, 0, PollContext::Softirq)?;
        let cq_b = OwnedCq::alloc(&dev, 4, 0, PollContext::Softirq)?;
        let received = Cqe::new(Counter::default())?;
        let sent = Cqe::new(Counter::default())?;
        let mut a = OwnedQp::create_rc(&pd, &cq_a, &cq_a, CFG)?;
        let mut b = OwnedQp::create_rc(&pd, &cq_b, &cq_b, CFG)?;
        connect_pair(&mut a, &mut b, &gid)?;
        a.rq().post(&received)?;
        core::mem::forget(a);
        drop(cq_a);
        drop(pd);
        drop(dev);
        b.sq().post_send(&sent)?;
        // The ACK comes back after the receive completed: wait for both.
        let landed = wait_until(5000, || received.outstanding() + sent.outstanding() == 0);
        b.drain()?;
        assert!(landed);
        assert_eq!(received.handler().counts(), (1, 0, 0));
        assert_eq!(sent.handler().counts(), (1, 0, 0));
        Ok(())
    }

    /// The same for a QP on an SRQ: the SRQ and PD handles go, the
    /// forgotten QP keeps the SRQ, its CQ and its handler, and a send to
    /// the QP consumes a receive of the SRQ. (Were the SRQ not held, its
    /// destroy would be refused, and its drop would say so.)
    #[test]
    fn a_forgotten_qp_keeps_its_srq() -> Result {
        let dev = rxe()?;
        let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
        let sent = Cqe::new(Counter::default())?;
        let srq = OwnedSrq::new(&pd, 2, PollContext::Softirq, SrqReceived)?;
        let on_srq = QpConfig {
            send_depth: 1,
            recv_depth: 0,
        };
        let mut a = OwnedQp::create_rc_on_srq(&pd, &cq, &srq, on_srq)?;
        let mut b = OwnedQp::create_rc(&pd, &cq, &cq, CFG)?;
        connect_pair(&mut a, &mut b, &gid)?;
        srq.post()?;
        core::mem::forget(a);
        drop(srq);
        drop(pd);
        b.sq().post_send(&sent)?;
        let landed = wait_until(5000, || {
            SRQ_RECEIVED.load(Ordering::Relaxed) == 1 && sent.outstanding() == 0
        });
        b.drain()?;
        assert!(landed);
        assert_eq!(sent.handler().counts(), (1, 0, 0));
        Ok(())
    }

    /// A QP leaked into a `&'static mut`, whose PD, CQ and device handles
    /// are then dropped, still posts, drains, and is reset and used again.
    #[test]
    fn a_leaked_qp_stays_usable() -> Result {
        let dev = rxe()?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 4, 0, PollContext::Workqueue)?;
        let qp = KBox::leak(KBox::new(
            OwnedQp::create_rc(&pd, &cq, &cq, CFG)?,
            GFP_KERNEL,
        )?);
        drop(cq);
        drop(pd);
        drop(dev);
        let cqe = Cqe::new(Counter::default())?;
        for _ in 0..2 {
            qp.init(1)?;
            qp.rq().post(&cqe)?;
            qp.drain_rq()?;
            qp.reset()?;
        }
        assert_eq!(cqe.handler().counts(), (0, 2, 0));
        assert_eq!(cqe.outstanding(), 0);
        Ok(())
    }
}
