// SPDX-License-Identifier: GPL-2.0

//! Queue pairs as the RDMA core hands them out, and their work queues: the
//! borrowed [`Qp`] view, and the [`RecvQueue`]/[`SendQueue`] tokens that
//! posting and draining take by `&mut`.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    buffer::{Buf, DmaBuf},
    slots::WrSlots,
    CompletionHandler, Cq, Cqe, Device,
};
use crate::{bindings, error::to_result, prelude::*, types::Opaque};
use core::ptr::NonNull;

/// A queue pair's state (`enum ib_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// `IB_QPS_RESET`: new or reset; nothing can be posted.
    Reset,
    /// `IB_QPS_INIT`: receives can be posted.
    Init,
    /// `IB_QPS_RTR`: ready to receive.
    Rtr,
    /// `IB_QPS_RTS`: ready to send.
    Rts,
    /// `IB_QPS_SQD`: the send queue is drained or draining.
    Sqd,
    /// `IB_QPS_SQE`: a send queue error (unreliable types only).
    Sqe,
    /// `IB_QPS_ERR`: every work request is flushed.
    Err,
}

impl QpState {
    fn from_raw(state: bindings::ib_qp_state) -> Result<Self> {
        Ok(match state {
            bindings::ib_qp_state_IB_QPS_RESET => Self::Reset,
            bindings::ib_qp_state_IB_QPS_INIT => Self::Init,
            bindings::ib_qp_state_IB_QPS_RTR => Self::Rtr,
            bindings::ib_qp_state_IB_QPS_RTS => Self::Rts,
            bindings::ib_qp_state_IB_QPS_SQD => Self::Sqd,
            bindings::ib_qp_state_IB_QPS_SQE => Self::Sqe,
            bindings::ib_qp_state_IB_QPS_ERR => Self::Err,
            _ => return Err(EINVAL),
        })
    }
}

/// A view of a queue pair (`struct ib_qp`).
///
/// # Examples
///
/// An [`OwnedQp`](super::OwnedQp) is a `Qp`:
///
/// ```
/// use kernel::infiniband::{RegisteredDevice, OwnedCq, OwnedQp, Pd, PollContext, Qp, QpConfig};
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
/// let mut owned = OwnedQp::create_rc(&pd, &cq, &cq, QpConfig { send_depth: 1, recv_depth: 1 })?;
/// owned.init(1)?;
/// let qp: &Qp = &owned;
/// assert!(qp.qp_num() != 0);
/// assert!(!qp.has_srq());
/// assert_eq!(qp.device().as_raw(), dev.as_raw());
/// qp.set_error_state()?;
/// # Ok::<(), Error>(())
/// ```
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
    #[inline]
    pub unsafe fn from_raw<'a>(ptr: *mut bindings::ib_qp) -> &'a Self {
        // SAFETY: `Qp` is a transparent wrapper of `struct ib_qp`, and the caller
        // guarantees that `ptr` is valid for `'a`.
        unsafe { &*ptr.cast() }
    }

    /// Returns the raw `struct ib_qp` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::ib_qp {
        self.0.get()
    }

    /// Returns the device the QP belongs to.
    #[inline]
    pub fn device(&self) -> &Device {
        // SAFETY: A valid QP points to its valid device, which outlives it.
        unsafe { Device::from_raw((*self.as_raw()).device) }
    }

    /// Returns the QP number.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        // SAFETY: By the type invariant the QP is valid.
        unsafe { (*self.as_raw()).qp_num }
    }

    /// Returns `true` if the QP receives through a shared receive queue.
    #[inline]
    pub fn has_srq(&self) -> bool {
        // SAFETY: By the type invariant the QP is valid.
        !unsafe { (*self.as_raw()).srq }.is_null()
    }

    /// Returns the QP's state as its provider reports it (`ib_query_qp()`).
    /// A provider moves a QP on its own too: to ERR on an error it detects.
    #[inline]
    pub fn state(&self) -> Result<QpState> {
        let mut attr = bindings::ib_qp_attr::default();
        let mut init_attr = bindings::ib_qp_init_attr::default();
        // SAFETY: The QP is valid; `attr` and `init_attr` are valid for writes.
        to_result(unsafe {
            bindings::ib_query_qp(
                self.as_raw(),
                &mut attr,
                bindings::ib_qp_attr_mask_IB_QP_STATE as i32,
                &mut init_attr,
            )
        })?;
        QpState::from_raw(attr.qp_state)
    }

    /// Moves the QP to the error state: the provider then flushes every
    /// outstanding work request with `IB_WC_WR_FLUSH_ERR`.
    #[inline]
    pub fn set_error_state(&self) -> Result {
        self.set_state(bindings::ib_qp_state_IB_QPS_ERR)
    }

    /// Moves the QP to `state`, changing nothing else.
    #[inline]
    pub(crate) fn set_state(&self, state: bindings::ib_qp_state) -> Result {
        let mut attr = bindings::ib_qp_attr {
            qp_state: state,
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

    /// Returns the receive queue's posting token.
    ///
    /// # Safety
    ///
    /// While the token lives, no other context may post receive work requests
    /// on this QP. If the receive CQ is polled directly, the token's holder
    /// may reap it ([`WorkQueue::poll_cq`]): the QP's owner lets the handlers
    /// of its completions run in that context.
    #[inline]
    pub unsafe fn recv_queue(&self) -> RecvQueue<'_> {
        // INVARIANT: The caller guarantees exclusive posting, and the right
        // to reap a direct receive CQ.
        RecvQueue {
            qp: self,
            slots: None,
        }
    }

    /// Returns the send queue's posting token.
    ///
    /// # Safety
    ///
    /// While the token lives, no other context may post send work requests on
    /// this QP. As for [`Qp::recv_queue`], for the send CQ.
    #[inline]
    pub unsafe fn send_queue(&self) -> SendQueue<'_> {
        // INVARIANT: The caller guarantees exclusive posting, and the right
        // to reap a direct send CQ.
        SendQueue {
            qp: self,
            slots: None,
        }
    }
}

mod private {
    /// Only this crate's queues are work queues.
    pub trait Sealed {}
}

/// One work queue of a QP.
///
/// Reaping its CQ is `unsafe`: the handlers run in the caller's context,
/// which the QP's owner must allow. Safe code cannot reap a CQ whose
/// handlers run elsewhere:
///
/// ```ignore,compile_fail
/// # use kernel::infiniband::{OwnedQp, WorkQueue};
/// fn reap(qp: &mut OwnedQp) -> i32 {
///     qp.rq().poll_cq() // error[E0133]: call to unsafe function
/// }
/// ```
///
/// (`ignore`: the kernel's doctests run as KUnit and cannot check that
/// something fails to build.)
///
/// # Examples
///
/// ```
/// use kernel::infiniband::{
///     OwnedCq, OwnedQp, Pd, PollContext, QpConfig, RegisteredDevice, WorkQueue,
/// };
///
/// fn describe<'a>(q: &impl WorkQueue<'a>) -> (u32, Option<u32>, bool) {
///     (q.qp().qp_num(), q.cq().map(|cq| cq.id()), q.is_shared())
/// }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let send_cq = OwnedCq::alloc(&dev, 4, 0, PollContext::Softirq)?;
/// let recv_cq = OwnedCq::alloc(&dev, 4, 0, PollContext::Softirq)?;
/// let cfg = QpConfig { send_depth: 1, recv_depth: 1 };
/// let mut qp = OwnedQp::create_rc(&pd, &send_cq, &recv_cq, cfg)?;
/// let qpn = qp.qp_num();
/// assert_eq!(describe(&qp.sq()), (qpn, Some(send_cq.id()), false));
/// assert_eq!(describe(&qp.rq()), (qpn, Some(recv_cq.id()), false));
/// # Ok::<(), Error>(())
/// ```
pub trait WorkQueue<'a>: private::Sealed {
    /// The QP the queue belongs to.
    fn qp(&self) -> &'a Qp;

    /// The CQ the queue's completions go to, if it has one.
    fn cq(&self) -> Option<&'a Cq>;

    /// Returns `true` if the QP takes this queue's work requests from a shared
    /// queue.
    fn is_shared(&self) -> bool {
        false
    }

    /// Polls the queue's CQ in the caller's context; returns how many
    /// completions were reaped.
    ///
    /// # Safety
    ///
    /// The CQ comes from `ib_alloc_cq()` (its `wr_id`s are `ib_cqe`s), and
    /// the handlers of its completions may run in the caller's context: it is
    /// polled directly ([`PollContext::Direct`](super::PollContext::Direct)),
    /// and the QP's owner allows it (see [`Qp::recv_queue`]).
    unsafe fn poll_cq(&mut self) -> i32 {
        match self.cq() {
            // SAFETY: The caller guarantees both. Direct processing may run
            // beside other pollers: it reaps into its own stack array and
            // providers serialize `poll_cq`.
            Some(cq) => unsafe { cq.process_direct(-1) },
            None => 0,
        }
    }
}

/// The right to post receive work requests on a QP.
///
/// # Examples
///
/// On a directly polled CQ the consumer reaps its own completions:
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, Cqe, RegisteredDevice, OwnedCq, OwnedQp, Pd, PollContext, QpConfig,
///     WorkCompletion,
/// };
/// use kernel::time::{delay::fsleep, Delta};
/// # struct Ignore;
/// # impl CompletionHandler for Ignore {
/// #     fn done(&self, _wc: &WorkCompletion) {}
/// # }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Direct)?;
/// let cqe = Cqe::new(Ignore)?;
/// let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, QpConfig { send_depth: 0, recv_depth: 2 })?;
/// qp.init(1)?;
/// let mut rq = qp.rq();
/// rq.post(&cqe)?;
/// rq.post(&cqe)?;
/// // The queue is as deep as asked, no deeper.
/// assert!(matches!(rq.post(&cqe), Err(e) if e == EBUSY));
/// qp.set_error_state()?;
/// let mut reaped = 0;
/// for _ in 0..5000 {
///     reaped += qp.rq().poll_cq_direct();
///     if reaped == 2 {
///         break;
///     }
///     fsleep(Delta::from_millis(1));
/// }
/// assert_eq!(reaped, 2);
/// assert_eq!(cqe.outstanding(), 0);
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// While a `RecvQueue` exists, no other context posts receives on `qp`, and
/// its holder may reap `qp`'s receive CQ if it is polled directly. `slots`,
/// if any, bound the receives outstanding on `qp`.
pub struct RecvQueue<'a> {
    pub(crate) qp: &'a Qp,
    pub(crate) slots: Option<&'a WrSlots>,
}

impl private::Sealed for RecvQueue<'_> {}

impl<'a> WorkQueue<'a> for RecvQueue<'a> {
    #[inline]
    fn qp(&self) -> &'a Qp {
        self.qp
    }

    #[inline]
    fn cq(&self) -> Option<&'a Cq> {
        // SAFETY: The QP is valid, and its CQ outlives it.
        unsafe { Cq::from_raw_opt((*self.qp.as_raw()).recv_cq) }
    }

    #[inline]
    fn is_shared(&self) -> bool {
        self.qp.has_srq()
    }
}

/// The right to post send work requests on a QP.
///
/// # Examples
///
/// Two connected QPs; sends still queued when the sender is drained
/// complete, successfully or flushed, before the drain returns:
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, Cqe, RegisteredDevice, GidAttr, Mtu, OwnedCq, OwnedQp, Pd, PollContext,
///     QpConfig, RcParams, WorkCompletion,
/// };
/// # struct Ignore;
/// # impl CompletionHandler for Ignore {
/// #     fn done(&self, _wc: &WorkCompletion) {}
/// # }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// # let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
/// # let params = RcParams {
/// #     mtu: Mtu::Mtu1024,
/// #     timeout: 14,
/// #     retry_cnt: 7,
/// #     rnr_retry: 7,
/// #     min_rnr_timer: 12,
/// #     max_rd_atomic: 1,
/// #     max_dest_rd_atomic: 1,
/// #     hop_limit: 64,
/// #     sq_psn: 0,
/// #     rq_psn: 0,
/// # };
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 16, 0, PollContext::Softirq)?;
/// let sent = Cqe::new(Ignore)?;
/// let received = Cqe::new(Ignore)?;
/// let cfg = QpConfig { send_depth: 3, recv_depth: 3 };
/// let mut a = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// let mut b = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// a.init(1)?;
/// b.init(1)?;
/// let (qpn_a, qpn_b) = (a.qp_num(), b.qp_num());
/// a.connect(&gid, qpn_b, &params)?;
/// b.connect(&gid, qpn_a, &params)?;
/// for _ in 0..3 {
///     b.rq().post(&received)?;
/// }
/// let mut sq = a.sq();
/// for _ in 0..3 {
///     sq.post_send(&sent)?;
/// }
/// let fourth = sq.post_send(&sent);
/// a.drain_sq()?;
/// assert!(matches!(fourth, Err(e) if e == EBUSY));
/// assert_eq!(sent.outstanding(), 0);
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// While a `SendQueue` exists, no other context posts sends on `qp`, and its
/// holder may reap `qp`'s send CQ if it is polled directly. `slots`, if
/// any, bound the sends outstanding on `qp`.
pub struct SendQueue<'a> {
    pub(crate) qp: &'a Qp,
    pub(crate) slots: Option<&'a WrSlots>,
}

impl private::Sealed for SendQueue<'_> {}

impl<'a> WorkQueue<'a> for SendQueue<'a> {
    #[inline]
    fn qp(&self) -> &'a Qp {
        self.qp
    }

    #[inline]
    fn cq(&self) -> Option<&'a Cq> {
        // SAFETY: The QP is valid, and its CQ outlives it.
        unsafe { Cq::from_raw_opt((*self.qp.as_raw()).send_cq) }
    }
}

impl RecvQueue<'_> {
    /// Reaps the receive CQ in the caller's context, if it is polled
    /// directly ([`PollContext::Direct`](super::PollContext::Direct)) and
    /// comes from `ib_alloc_cq()`; returns how many completions, 0 for any
    /// other CQ.
    #[inline]
    pub fn poll_cq_direct(&mut self) -> i32 {
        match self.cq() {
            Some(cq)
                if cq.calls_cqe_done() && cq.poll_context() == Some(super::PollContext::Direct) =>
            {
                // SAFETY: Just checked: a direct CQ from ib_alloc_cq(), which
                // by the type invariant this token's holder may reap.
                unsafe { self.poll_cq() }
            }
            _ => 0,
        }
    }

    /// Posts a receive work request without buffers, whose completion runs
    /// `cqe`'s handler. It matches a zero-length send, or is flushed.
    ///
    /// On an [`OwnedQp`](super::OwnedQp), fails with `EBUSY` while the queue holds as many
    /// receives as its depth.
    pub fn post<H: CompletionHandler>(&mut self, cqe: &Cqe<H>) -> Result {
        let mut wr = bindings::ib_recv_wr::default();
        let wr_cqe = take_slot(self.slots, cqe, None)?;
        wr.__bindgen_anon_1.wr_cqe = wr_cqe;
        // SAFETY: The QP and `wr` are valid. The entry of `cqe` is kept until
        // the completion returns, by the reference `count_post()` took; a slot
        // is kept until its completion returns too. By the type invariant
        // nobody else posts receives now.
        let ret = to_result(unsafe {
            bindings::ib_post_recv(self.qp.as_raw(), &wr, core::ptr::null_mut())
        });
        if ret.is_err() {
            put_unposted(self.slots, cqe, wr_cqe);
        }
        ret
    }

    /// Posts a receive work request into `buf`, whose completion runs
    /// `cqe`'s handler; [`WorkCompletion::byte_len`] is what arrived.
    ///
    /// The work request holds `buf` until its completion, given back before
    /// the handler runs, and for itself: `EBUSY` while another work request
    /// holds `buf`. Fails with `EINVAL` if `buf` is mapped for another
    /// device, or the queue is not an [`OwnedQp`](super::OwnedQp)'s; with
    /// `EBUSY` while the queue holds as many receives as its depth.
    ///
    /// [`WorkCompletion::byte_len`]: super::WorkCompletion::byte_len
    pub fn post_buf<H: CompletionHandler>(&mut self, cqe: &Cqe<H>, buf: &DmaBuf) -> Result {
        let (wr_cqe, mut sge) = take_buf_slot(self.qp, self.slots, cqe, buf, buf.len())?;
        let mut wr = bindings::ib_recv_wr::default();
        wr.__bindgen_anon_1.wr_cqe = wr_cqe;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        // SAFETY: As for `post`; the buffer stays mapped until the device is
        // done with it, by the reference its slot holds until the completion
        // (given back before the handler runs).
        let ret = to_result(unsafe {
            bindings::ib_post_recv(self.qp.as_raw(), &wr, core::ptr::null_mut())
        });
        if ret.is_err() {
            put_unposted(self.slots, cqe, wr_cqe);
        }
        ret
    }
}

/// Counts a work request posted with `cqe` and, on a bounded queue, takes a
/// slot for it, holding `buf`; returns the `ib_cqe` to post.
fn take_slot<H: CompletionHandler>(
    slots: Option<&WrSlots>,
    cqe: &Cqe<H>,
    buf: Option<NonNull<Buf>>,
) -> Result<*mut bindings::ib_cqe> {
    // A slot bounds the queue.
    let target = cqe.count_post(usize::MAX)?;
    match slots.map(|s| s.take(target, buf)) {
        None => Ok(target),
        Some(Ok(slot)) => Ok(slot),
        Some(Err(e)) => {
            cqe.uncount(1);
            Err(e)
        }
    }
}

/// Takes a slot of a bounded queue for a work request of `len` bytes of
/// `buf`: returns the `ib_cqe` and the scatter/gather entry to post.
fn take_buf_slot<H: CompletionHandler>(
    qp: &Qp,
    slots: Option<&WrSlots>,
    cqe: &Cqe<H>,
    buf: &DmaBuf,
    len: usize,
) -> Result<(*mut bindings::ib_cqe, bindings::ib_sge)> {
    // A buffer's reference travels in a slot.
    let slots = slots.ok_or(EINVAL)?;
    let b = buf.get_for(qp.device().as_raw(), len, slots.is_receive())?;
    let wr_cqe = match take_slot(Some(slots), cqe, Some(b)) {
        Ok(c) => c,
        Err(e) => {
            // SAFETY: The reference just taken, for a slot not taken.
            unsafe { Buf::put(b, slots.is_receive()) };
            return Err(e);
        }
    };
    let sge = bindings::ib_sge {
        // SAFETY: The buffer lives: `buf` borrows it.
        addr: unsafe { b.as_ref() }.dma(),
        // CAST: `get_for` checked that `len` fits the buffer, whose length
        // fits in a `u32` (`DmaBuf::alloc`).
        length: len as u32,
        // SAFETY: The QP and its PD are valid.
        lkey: unsafe { (*(*qp.as_raw()).pd).local_dma_lkey },
    };
    Ok((wr_cqe, sge))
}

/// Undoes [`take_slot`] for a work request that was not posted.
fn put_unposted<H: CompletionHandler>(
    slots: Option<&WrSlots>,
    cqe: &Cqe<H>,
    wr_cqe: *mut bindings::ib_cqe,
) {
    if let Some(s) = slots {
        s.put_unposted(wr_cqe);
    }
    cqe.uncount(1);
}

impl SendQueue<'_> {
    /// Posts a signaled zero-length SEND, whose completion runs `cqe`'s handler.
    ///
    /// On an [`OwnedQp`](super::OwnedQp), fails with `EBUSY` while the queue holds as many
    /// sends as its depth.
    pub fn post_send<H: CompletionHandler>(&mut self, cqe: &Cqe<H>) -> Result {
        let mut wr = bindings::ib_send_wr::default();
        let wr_cqe = take_slot(self.slots, cqe, None)?;
        wr.__bindgen_anon_1.wr_cqe = wr_cqe;
        wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
        wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED;
        // SAFETY: As for `RecvQueue::post`, for the send queue.
        let ret = to_result(unsafe {
            bindings::ib_post_send(self.qp.as_raw(), &wr, core::ptr::null_mut())
        });
        if ret.is_err() {
            put_unposted(self.slots, cqe, wr_cqe);
        }
        ret
    }

    /// Posts a signaled SEND of the first `len` bytes of `buf`, whose
    /// completion runs `cqe`'s handler.
    ///
    /// The work request holds `buf` until its completion, given back before
    /// the handler runs; other sends may share it, a receive may not
    /// (`EBUSY`). Fails with `EINVAL` if `buf` is mapped for another device,
    /// is shorter than `len`, or the queue is not an
    /// [`OwnedQp`](super::OwnedQp)'s; with `EBUSY` while the queue holds as
    /// many sends as its depth.
    pub fn post_send_buf<H: CompletionHandler>(
        &mut self,
        cqe: &Cqe<H>,
        buf: &DmaBuf,
        len: usize,
    ) -> Result {
        let (wr_cqe, mut sge) = take_buf_slot(self.qp, self.slots, cqe, buf, len)?;
        let mut wr = bindings::ib_send_wr::default();
        wr.__bindgen_anon_1.wr_cqe = wr_cqe;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
        wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED;
        // SAFETY: As for `RecvQueue::post_buf`, for the send queue.
        let ret = to_result(unsafe {
            bindings::ib_post_send(self.qp.as_raw(), &wr, core::ptr::null_mut())
        });
        if ret.is_err() {
            put_unposted(self.slots, cqe, wr_cqe);
        }
        ret
    }
}
