// SPDX-License-Identifier: GPL-2.0

//! RDMA queue pairs and their work queues.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{Cq, Device, DrainMarker};
use crate::{bindings, error::to_result, prelude::*, time::Jiffies, types::Opaque};

/// The C `struct ib_qp`, for `extern "C"` entry points that receive one.
pub type RawQp = bindings::ib_qp;

/// A view of a queue pair (`struct ib_qp`).
///
/// # Invariants
///
/// The inner `struct ib_qp` is valid for as long as a `&Qp` exists.
#[repr(transparent)]
pub struct Qp(Opaque<bindings::ib_qp>);

// SAFETY: The RDMA core uses `struct ib_qp` from any thread; the verbs `Qp`
// calls may run in any process context.
unsafe impl Send for Qp {}

// SAFETY: See `Send`; posting, the one operation that must not run
// concurrently, needs a `RecvQueue` or `SendQueue` token by `&mut`.
unsafe impl Sync for Qp {}

impl Qp {
    /// Creates a reference to a [`Qp`] from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a valid `struct ib_qp` that stays valid for `'a`.
    pub unsafe fn from_raw<'a>(ptr: *mut bindings::ib_qp) -> &'a Self {
        // SAFETY: `Qp` is a transparent wrapper of `struct ib_qp`, and the caller
        // guarantees that `ptr` is valid for `'a`.
        unsafe { &*ptr.cast() }
    }

    /// Returns the raw `struct ib_qp` pointer.
    pub fn as_raw(&self) -> *mut bindings::ib_qp {
        self.0.get()
    }

    /// Returns the device the QP belongs to.
    pub fn device(&self) -> &Device {
        // SAFETY: A valid QP points to its valid device, which outlives it.
        unsafe { Device::from_raw((*self.as_raw()).device) }
    }

    /// Returns the QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: By the type invariant the QP is valid.
        unsafe { (*self.as_raw()).qp_num }
    }

    /// Returns `true` if the QP receives through a shared receive queue.
    pub fn has_srq(&self) -> bool {
        // SAFETY: By the type invariant the QP is valid.
        !unsafe { (*self.as_raw()).srq }.is_null()
    }

    /// Moves the QP to the error state: the provider then flushes every
    /// outstanding work request with `IB_WC_WR_FLUSH_ERR`.
    pub fn set_error_state(&self) -> Result {
        let mut attr = bindings::ib_qp_attr {
            qp_state: bindings::ib_qp_state_IB_QPS_ERR,
            ..Default::default()
        };
        // SAFETY: The QP is valid and `attr` is a valid attribute set for the
        // mask `IB_QP_STATE`.
        to_result(unsafe {
            bindings::ib_modify_qp(
                self.as_raw(),
                &mut attr,
                bindings::ib_qp_attr_mask_IB_QP_STATE as i32,
            )
        })
    }

    /// Waits at most `timeout` for the `IB_EVENT_QP_LAST_WQE_REACHED` event of a
    /// QP on an SRQ. Returns `true` if it arrived.
    pub fn wait_last_wqe_reached(&self, timeout: Jiffies) -> bool {
        // SAFETY: `srq_completion` of a valid QP is initialized when the QP is
        // created and completed by the core's QP event handler.
        unsafe {
            bindings::wait_for_completion_timeout(&raw mut (*self.as_raw()).srq_completion, timeout)
                != 0
        }
    }

    /// Returns the receive queue's posting token.
    ///
    /// # Safety
    ///
    /// While the token lives, no other context may post receive work requests
    /// on this QP, nor poll its receive CQ if that CQ is `IB_POLL_DIRECT`.
    pub unsafe fn recv_queue(&self) -> RecvQueue<'_> {
        // INVARIANT: The caller guarantees exclusive posting and direct polling.
        RecvQueue { qp: self }
    }

    /// Returns the send queue's posting token.
    ///
    /// # Safety
    ///
    /// While the token lives, no other context may post send work requests on
    /// this QP, nor poll its send CQ if that CQ is `IB_POLL_DIRECT`.
    pub unsafe fn send_queue(&self) -> SendQueue<'_> {
        // INVARIANT: The caller guarantees exclusive posting and direct polling.
        SendQueue { qp: self }
    }
}

/// One work queue of a QP, as far as a drain needs it.
pub trait WorkQueue<'a> {
    /// `"recv"` or `"send"`, for messages.
    const NAME: &'static str;

    /// The QP the queue belongs to.
    fn qp(&self) -> &'a Qp;

    /// The CQ the queue's completions go to, if it has one.
    fn cq(&self) -> Option<&'a Cq>;

    /// Runs the provider's own drain for this queue; `false` if it has none.
    fn provider_drain(&mut self) -> bool;

    /// Posts `marker` behind all outstanding work requests.
    fn post_marker(&mut self, marker: Pin<&DrainMarker>) -> Result;

    /// Polls the queue's CQ in the caller's context; returns how many
    /// completions were reaped.
    fn poll_cq(&mut self) -> i32;
}

/// The right to post receive work requests on a QP.
///
/// # Invariants
///
/// While a `RecvQueue` exists, no other context posts receives on `qp`, nor
/// polls its receive CQ if that CQ is `IB_POLL_DIRECT`.
pub struct RecvQueue<'a> {
    qp: &'a Qp,
}

impl<'a> WorkQueue<'a> for RecvQueue<'a> {
    const NAME: &'static str = "recv";

    fn qp(&self) -> &'a Qp {
        self.qp
    }

    fn cq(&self) -> Option<&'a Cq> {
        // SAFETY: The QP is valid.
        let cq = unsafe { (*self.qp.as_raw()).recv_cq };
        // SAFETY: A QP's CQ outlives the QP.
        (!cq.is_null()).then(|| unsafe { Cq::from_raw(cq) })
    }

    fn provider_drain(&mut self) -> bool {
        let Some(drain) = self.qp.device().ops().drain_rq else {
            return false;
        };
        // SAFETY: The QP is valid and, by the type invariant, nobody posts
        // receives while the provider drains.
        unsafe { drain(self.qp.as_raw()) };
        true
    }

    fn post_marker(&mut self, marker: Pin<&DrainMarker>) -> Result {
        if marker.is_posted() {
            return Err(EBUSY);
        }
        let mut wr = bindings::ib_recv_wr::default();
        wr.__bindgen_anon_1.wr_cqe = marker.cqe();
        // SAFETY: The QP and `wr` are valid. The marker is pinned and, once
        // posted, is not dropped before its completion (`DrainMarker`'s drop).
        // By the type invariant nobody else posts receives now.
        to_result(unsafe { bindings::ib_post_recv(self.qp.as_raw(), &wr, core::ptr::null_mut()) })?;
        marker.set_posted();
        Ok(())
    }

    fn poll_cq(&mut self) -> i32 {
        match self.cq() {
            // SAFETY: By the type invariant nobody else polls this direct CQ.
            Some(cq) => unsafe { cq.process_direct(-1) },
            None => 0,
        }
    }
}

impl<'a> RecvQueue<'a> {
    /// The CQ that the completions of a QP on an SRQ go to: the SRQ's own CQ
    /// for the SRQ types that have one, the QP's receive CQ otherwise.
    pub fn srq_cq(&self) -> Option<&'a Cq> {
        // SAFETY: The QP is valid, and so is its SRQ when it has one.
        let cq = unsafe {
            let srq = (*self.qp.as_raw()).srq;
            if srq.is_null() {
                return None;
            }
            match (*srq).srq_type {
                bindings::ib_srq_type_IB_SRQT_XRC | bindings::ib_srq_type_IB_SRQT_TM => {
                    (*srq).ext.cq
                }
                _ => (*self.qp.as_raw()).recv_cq,
            }
        };
        // SAFETY: A CQ outlives the QPs and SRQs that use it.
        (!cq.is_null()).then(|| unsafe { Cq::from_raw(cq) })
    }

    /// Polls at most `budget` completions from `cq` in the caller's context.
    ///
    /// `cq` must be this QP's receive or SRQ CQ, which the token covers.
    pub fn poll_srq_cq(&mut self, cq: &Cq, budget: i32) -> i32 {
        // SAFETY: The token covers the QP's receive side, and the C contract of
        // the SRQ drain (`ib_drain_qp()`) is that nobody else polls it now.
        unsafe { cq.process_direct(budget) }
    }
}

/// The right to post send work requests on a QP.
///
/// # Invariants
///
/// While a `SendQueue` exists, no other context posts sends on `qp`, nor
/// polls its send CQ if that CQ is `IB_POLL_DIRECT`.
pub struct SendQueue<'a> {
    qp: &'a Qp,
}

impl<'a> WorkQueue<'a> for SendQueue<'a> {
    const NAME: &'static str = "send";

    fn qp(&self) -> &'a Qp {
        self.qp
    }

    fn cq(&self) -> Option<&'a Cq> {
        // SAFETY: The QP is valid.
        let cq = unsafe { (*self.qp.as_raw()).send_cq };
        // SAFETY: A QP's CQ outlives the QP.
        (!cq.is_null()).then(|| unsafe { Cq::from_raw(cq) })
    }

    fn provider_drain(&mut self) -> bool {
        let Some(drain) = self.qp.device().ops().drain_sq else {
            return false;
        };
        // SAFETY: The QP is valid and, by the type invariant, nobody posts
        // sends while the provider drains.
        unsafe { drain(self.qp.as_raw()) };
        true
    }

    fn post_marker(&mut self, marker: Pin<&DrainMarker>) -> Result {
        if marker.is_posted() {
            return Err(EBUSY);
        }
        // A zero-length RDMA WRITE: valid on every connected QP, and flushed
        // like any other send once the QP is in the error state.
        let mut wr = bindings::ib_rdma_wr::default();
        wr.wr.__bindgen_anon_1.wr_cqe = marker.cqe();
        wr.wr.opcode = bindings::ib_wr_opcode_IB_WR_RDMA_WRITE;
        // SAFETY: As for `RecvQueue::post_marker`, for the send queue.
        to_result(unsafe { bindings::ib_post_send(self.qp.as_raw(), &wr.wr, core::ptr::null_mut()) })?;
        marker.set_posted();
        Ok(())
    }

    fn poll_cq(&mut self) -> i32 {
        match self.cq() {
            // SAFETY: By the type invariant nobody else polls this direct CQ.
            Some(cq) => unsafe { cq.process_direct(-1) },
            None => 0,
        }
    }
}
