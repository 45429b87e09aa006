// SPDX-License-Identifier: GPL-2.0

//! RDMA queue pairs and their work queues.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    marker::Drained, slots::WrSlots, CompletionHandler, Cq, Cqe, Device, DrainMarker, GidAttr,
    OwnedCq, OwnedSrq, Pd,
};
use crate::{
    bindings,
    error::{from_err_ptr, to_result},
    prelude::*,
    time::Jiffies,
    types::Opaque,
};
use crate::{
    sync::atomic::{Atomic, Full, Relaxed},
    sync::{Arc, Completion},
    workqueue::{self, Work, WorkItem},
};
use core::{
    ffi::c_void,
    marker::PhantomData,
    ops::Deref,
    ptr::NonNull,
};

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

    /// Moves the QP to the error state: the provider then flushes every
    /// outstanding work request with `IB_WC_WR_FLUSH_ERR`.
    #[inline]
    pub fn set_error_state(&self) -> Result {
        self.set_state(bindings::ib_qp_state_IB_QPS_ERR)
    }

    /// Moves the QP to `state`, changing nothing else.
    #[inline]
    fn set_state(&self, state: bindings::ib_qp_state) -> Result {
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

    /// Waits at most `timeout` for the `IB_EVENT_QP_LAST_WQE_REACHED` event of a
    /// QP on an SRQ. Returns `true` if it arrived.
    #[inline]
    pub fn wait_last_wqe_reached(&self, timeout: Jiffies) -> bool {
        // SAFETY: `srq_completion` of a valid QP is initialized when the QP is
        // created and completed by the core's QP event handler.
        unsafe {
            bindings::wait_for_completion_timeout(&raw mut (*self.as_raw()).srq_completion, timeout)
                != 0
        }
    }

    /// Runs a provider's `drain_rq`/`drain_sq` op on this QP if it has one;
    /// returns `false` if not.
    ///
    /// # Safety
    ///
    /// Nobody may post on the queue that `op` drains until it returns.
    #[inline]
    unsafe fn run_provider_drain(
        &self,
        op: Option<unsafe extern "C" fn(*mut bindings::ib_qp)>,
    ) -> bool {
        let Some(drain) = op else {
            return false;
        };
        // SAFETY: The QP is valid; the caller excludes other posters.
        unsafe { drain(self.as_raw()) };
        true
    }

    /// Returns the receive queue's posting token.
    ///
    /// # Safety
    ///
    /// While the token lives, no other context may post receive work requests
    /// on this QP.
    #[inline]
    pub unsafe fn recv_queue(&self) -> RecvQueue<'_> {
        // INVARIANT: The caller guarantees exclusive posting.
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
    /// this QP.
    #[inline]
    pub unsafe fn send_queue(&self) -> SendQueue<'_> {
        // INVARIANT: The caller guarantees exclusive posting.
        SendQueue {
            qp: self,
            slots: None,
        }
    }
}

mod private {
    /// Only this crate's queues are work queues: the drain trusts them.
    pub trait Sealed {}
}

/// One work queue of a QP, as far as a drain needs it.
///
/// The drain's own steps are `unsafe`: they are safe under the C drain's
/// contract (`ib_drain_rq()`'s kernel-doc), which only the drain can promise.
/// An [`OwnedQp`] keeps that contract by construction and drains through the
/// exported C functions.
pub trait WorkQueue<'a>: private::Sealed {
    /// `"recv"` or `"send"`, for messages.
    const NAME: &'static str;

    /// The QP the queue belongs to.
    fn qp(&self) -> &'a Qp;

    /// The CQ the queue's completions go to, if it has one.
    fn cq(&self) -> Option<&'a Cq>;

    /// Returns `true` if the QP takes this queue's work requests from a shared
    /// queue: the QP then has no queue of its own to post a marker on.
    fn is_shared(&self) -> bool {
        false
    }

    /// Runs the provider's own drain for this queue; `false` if it has none.
    ///
    /// # Safety
    ///
    /// The C drain's contract: the queue and its CQ have room for one more
    /// work request, and the CQ comes from `ib_alloc_cq()`.
    unsafe fn provider_drain(&mut self) -> bool;

    /// Posts `marker` behind all outstanding work requests, and records what
    /// it drains for the reports of a long wait. Fails with `EBUSY` if the
    /// marker was posted before.
    ///
    /// # Safety
    ///
    /// As for [`WorkQueue::provider_drain`]: a marker posted to a full queue
    /// or CQ, or to a CQ that does not call `ib_cqe::done`, never completes.
    unsafe fn post_marker(&mut self, marker: Pin<&DrainMarker>) -> Result;

    /// Polls the queue's CQ in the caller's context; returns how many
    /// completions were reaped.
    ///
    /// # Safety
    ///
    /// The CQ comes from `ib_alloc_cq()` (its `wr_id`s are `ib_cqe`s), and
    /// the handlers of its completions may run in the caller's context: it is
    /// polled directly ([`PollContext::Direct`](super::PollContext::Direct)),
    /// or the caller is the drain of a QP on an SRQ.
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

/// Records what `marker` drains, now that it is posted on `q`.
#[inline]
fn record_posted<'a, Q: WorkQueue<'a>>(q: &Q, marker: &DrainMarker) {
    let qp = q.qp();
    marker.set_posted(Drained {
        device: qp.device().name(),
        qp_num: qp.qp_num(),
        cq_id: q.cq().map_or(0, |cq| cq.id()),
        queue: Q::NAME,
    });
}

/// The right to post receive work requests on a QP.
///
/// # Invariants
///
/// While a `RecvQueue` exists, no other context posts receives on `qp`.
/// `slots`, if any, bound the receives outstanding on `qp`.
pub struct RecvQueue<'a> {
    qp: &'a Qp,
    slots: Option<&'a WrSlots>,
}

impl private::Sealed for RecvQueue<'_> {}

impl<'a> WorkQueue<'a> for RecvQueue<'a> {
    const NAME: &'static str = "recv";

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

    #[inline]
    unsafe fn provider_drain(&mut self) -> bool {
        // SAFETY: By the type invariant nobody posts receives meanwhile; the
        // caller guarantees the rest of the drain contract.
        unsafe { self.qp.run_provider_drain(self.qp.device().ops().drain_rq) }
    }

    #[inline]
    unsafe fn post_marker(&mut self, marker: Pin<&DrainMarker>) -> Result {
        let cqe = marker.cqe_if_fresh().ok_or(EBUSY)?;
        let mut wr = bindings::ib_recv_wr::default();
        wr.__bindgen_anon_1.wr_cqe = cqe;
        // SAFETY: The QP and `wr` are valid. The marker is pinned and, once
        // posted, is not dropped before its completion (`DrainMarker`'s drop).
        // By the type invariant nobody else posts receives now.
        to_result(unsafe { bindings::ib_post_recv(self.qp.as_raw(), &wr, core::ptr::null_mut()) })?;
        record_posted(self, &marker);
        Ok(())
    }
}

impl<'a> RecvQueue<'a> {
    /// The CQ that the completions of a QP on an SRQ go to: the SRQ's own CQ
    /// for the SRQ types that have one, the QP's receive CQ otherwise.
    #[inline]
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
        unsafe { Cq::from_raw_opt(cq) }
    }

    /// Polls at most `budget` completions from `cq` in the caller's context.
    ///
    /// # Safety
    ///
    /// As for [`WorkQueue::poll_cq`], for `cq`.
    #[inline]
    pub unsafe fn poll_srq_cq(&mut self, cq: &Cq, budget: i32) -> i32 {
        // SAFETY: The caller guarantees that `cq` may be polled here.
        unsafe { cq.process_direct(budget) }
    }
}

/// The right to post send work requests on a QP.
///
/// # Invariants
///
/// While a `SendQueue` exists, no other context posts sends on `qp`.
/// `slots`, if any, bound the sends outstanding on `qp`.
pub struct SendQueue<'a> {
    qp: &'a Qp,
    slots: Option<&'a WrSlots>,
}

impl private::Sealed for SendQueue<'_> {}

impl<'a> WorkQueue<'a> for SendQueue<'a> {
    const NAME: &'static str = "send";

    #[inline]
    fn qp(&self) -> &'a Qp {
        self.qp
    }

    #[inline]
    fn cq(&self) -> Option<&'a Cq> {
        // SAFETY: The QP is valid, and its CQ outlives it.
        unsafe { Cq::from_raw_opt((*self.qp.as_raw()).send_cq) }
    }

    #[inline]
    unsafe fn provider_drain(&mut self) -> bool {
        // SAFETY: By the type invariant nobody posts sends meanwhile; the
        // caller guarantees the rest of the drain contract.
        unsafe { self.qp.run_provider_drain(self.qp.device().ops().drain_sq) }
    }

    #[inline]
    unsafe fn post_marker(&mut self, marker: Pin<&DrainMarker>) -> Result {
        let cqe = marker.cqe_if_fresh().ok_or(EBUSY)?;
        // A zero-length RDMA WRITE: valid on every connected QP, and flushed
        // like any other send once the QP is in the error state.
        let mut wr = bindings::ib_rdma_wr::default();
        wr.wr.__bindgen_anon_1.wr_cqe = cqe;
        wr.wr.opcode = bindings::ib_wr_opcode_IB_WR_RDMA_WRITE;
        // SAFETY: As for `RecvQueue::post_marker`, for the send queue.
        to_result(unsafe {
            bindings::ib_post_send(self.qp.as_raw(), &wr.wr, core::ptr::null_mut())
        })?;
        record_posted(self, &marker);
        Ok(())
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
                if cq.calls_cqe_done()
                    && cq.poll_context() == Some(super::PollContext::Direct) =>
            {
                // SAFETY: Just checked: from ib_alloc_cq(), and nobody else
                // runs its handlers.
                unsafe { self.poll_cq() }
            }
            _ => 0,
        }
    }

    /// Posts a receive work request without buffers, whose completion runs
    /// `cqe`'s handler. It matches a zero-length send, or is flushed.
    ///
    /// On an [`OwnedQp`], fails with `EBUSY` while the queue holds as many
    /// receives as its depth.
    pub fn post<H: CompletionHandler>(&mut self, cqe: Pin<&Cqe<H>>) -> Result {
        let mut wr = bindings::ib_recv_wr::default();
        let wr_cqe = take_slot(self.slots, &cqe)?;
        wr.__bindgen_anon_1.wr_cqe = wr_cqe;
        // SAFETY: The QP and `wr` are valid. `cqe` is pinned and waits in its
        // drop for every completion counted by `get()`; a slot waits for its
        // completion too. By the type invariant nobody else posts receives now.
        let ret = to_result(unsafe {
            bindings::ib_post_recv(self.qp.as_raw(), &wr, core::ptr::null_mut())
        });
        if ret.is_err() {
            put_unposted(self.slots, &cqe, wr_cqe);
        }
        ret
    }
}

/// Counts a work request posted with `cqe` and, on a bounded queue, takes a
/// slot for it; returns the `ib_cqe` to post.
fn take_slot<H: CompletionHandler>(
    slots: Option<&WrSlots>,
    cqe: &Cqe<H>,
) -> Result<*mut bindings::ib_cqe> {
    let target = cqe.get();
    match slots.map(|s| s.take(target)) {
        None => Ok(target),
        Some(Ok(slot)) => Ok(slot),
        Some(Err(e)) => {
            cqe.put_unposted();
            Err(e)
        }
    }
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
    cqe.put_unposted();
}

impl SendQueue<'_> {
    /// Posts a signaled zero-length SEND, whose completion runs `cqe`'s handler.
    ///
    /// On an [`OwnedQp`], fails with `EBUSY` while the queue holds as many
    /// sends as its depth.
    pub fn post_send<H: CompletionHandler>(&mut self, cqe: Pin<&Cqe<H>>) -> Result {
        let mut wr = bindings::ib_send_wr::default();
        let wr_cqe = take_slot(self.slots, &cqe)?;
        wr.__bindgen_anon_1.wr_cqe = wr_cqe;
        wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
        wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED;
        // SAFETY: As for `RecvQueue::post`, for the send queue.
        let ret = to_result(unsafe {
            bindings::ib_post_send(self.qp.as_raw(), &wr, core::ptr::null_mut())
        });
        if ret.is_err() {
            put_unposted(self.slots, &cqe, wr_cqe);
        }
        ret
    }
}

/// Sizes of a new QP's work queues, as the consumer will use them.
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    /// Send work requests the consumer may have outstanding.
    pub send_depth: u32,
    /// Receive work requests the consumer may have outstanding.
    pub recv_depth: u32,
}

/// A reliable-connected QP, destroyed when dropped.
///
/// Both work queues and their CQs have one entry more than asked for, for
/// the drain marker, so "room for the drain" holds by construction.
/// Posting and draining need the queue's token by `&mut`, so nothing posts
/// during a drain:
///
/// ```ignore,compile_fail
/// # use kernel::infiniband::{CompletionHandler, Cqe, OwnedQp};
/// fn post_during_drain<H: CompletionHandler>(qp: &mut OwnedQp<'_>, cqe: Pin<&Cqe<H>>) {
///     let mut rq = qp.rq();
///     qp.drain_rq(); // error[E0499]: cannot borrow `*qp` as mutable more than once
///     rq.post(cqe);
/// }
/// ```
///
/// (`ignore`: the kernel's doctests run as KUnit and cannot check that
/// something fails to build.)
///
/// # Invariants
///
/// `ptr` is a valid QP owned by this object, created on a PD, CQs and SRQ
/// that outlive `'a`, in which it reserved `send_depth + 1` and
/// `recv_reserved` entries (`recv_depth + 1`, or none on an SRQ, whose own
/// reservation covers its receives).
pub struct OwnedQp<'a> {
    ptr: NonNull<bindings::ib_qp>,
    send_cq: &'a OwnedCq<'a>,
    recv_cq: &'a OwnedCq<'a>,
    config: QpConfig,
    recv_reserved: u32,
    in_reset: bool,
    /// One slot per work request each queue may hold (none for an SRQ's).
    sq_slots: KBox<WrSlots>,
    rq_slots: KBox<WrSlots>,
    /// The QP's asynchronous events seen so far (its `qp_context`).
    events: KBox<QpEvents>,
    _pd: PhantomData<&'a Pd<'a>>,
}

// SAFETY: A QP may be used and destroyed from any thread.
unsafe impl Send for OwnedQp<'_> {}

// SAFETY: Through `&self` only the thread-safe `Qp` methods are reachable.
unsafe impl Sync for OwnedQp<'_> {}

impl<'a> OwnedQp<'a> {
    /// Creates an RC QP on `pd` with the given CQs and queue depths.
    ///
    /// Fails with `EBUSY` if a CQ has no room for the new queues.
    #[inline]
    pub fn create_rc(
        pd: &'a Pd<'a>,
        send_cq: &'a OwnedCq<'a>,
        recv_cq: &'a OwnedCq<'a>,
        config: QpConfig,
    ) -> Result<Self> {
        let recv = config.recv_depth.checked_add(1).ok_or(EINVAL)?;
        Self::create(pd, send_cq, recv_cq, None, config, recv)
    }

    /// Creates an RC QP on `pd` that receives through `srq`, on the SRQ's CQ.
    /// `config.recv_depth` must be 0.
    pub fn create_rc_on_srq<H: CompletionHandler>(
        pd: &'a Pd<'a>,
        send_cq: &'a OwnedCq<'a>,
        srq: &'a OwnedSrq<'a, H>,
        config: QpConfig,
    ) -> Result<Self> {
        if config.recv_depth != 0 {
            return Err(EINVAL);
        }
        Self::create(pd, send_cq, srq.cq(), Some(srq.as_raw()), config, 0)
    }

    #[inline]
    fn create(
        pd: &'a Pd<'a>,
        send_cq: &'a OwnedCq<'a>,
        recv_cq: &'a OwnedCq<'a>,
        srq: Option<*mut bindings::ib_srq>,
        config: QpConfig,
        recv: u32,
    ) -> Result<Self> {
        let send = config.send_depth.checked_add(1).ok_or(EINVAL)?;
        let sq_slots = WrSlots::new(config.send_depth)?;
        let rq_slots = WrSlots::new(recv.saturating_sub(1))?;
        let events = KBox::new(
            QpEvents {
                last_wqe: Atomic::new(0),
            },
            GFP_KERNEL,
        )?;
        if core::ptr::eq(send_cq, recv_cq) {
            send_cq.reserve(send.checked_add(recv).ok_or(EINVAL)?)?;
        } else {
            send_cq.reserve(send)?;
            if let Err(e) = recv_cq.reserve(recv) {
                send_cq.unreserve(send);
                return Err(e);
            }
        }
        let mut attr = bindings::ib_qp_init_attr {
            send_cq: send_cq.as_raw(),
            recv_cq: recv_cq.as_raw(),
            srq: srq.unwrap_or(core::ptr::null_mut()),
            event_handler: Some(QpEvents::handle),
            qp_context: (&raw const *events).cast_mut().cast(),
            qp_type: bindings::ib_qp_type_IB_QPT_RC,
            sq_sig_type: bindings::ib_sig_type_IB_SIGNAL_REQ_WR,
            ..Default::default()
        };
        attr.cap.max_send_wr = send;
        attr.cap.max_recv_wr = recv;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = if srq.is_some() { 0 } else { 1 };
        // SAFETY: `pd`, the CQs, the SRQ if any and `attr` are valid.
        let ptr = from_err_ptr(unsafe {
            bindings::ib_create_qp_kernel(
                pd.as_raw(),
                &mut attr,
                c"kernel::infiniband".as_char_ptr(),
            )
        });
        let ptr = match ptr.map(NonNull::new) {
            Ok(Some(ptr)) => ptr,
            Ok(None) | Err(_) => {
                send_cq.unreserve(send);
                recv_cq.unreserve(recv);
                return Err(ptr.err().unwrap_or(ENOMEM));
            }
        };
        // INVARIANT: The QP is new and owned; the reservations were made.
        Ok(Self {
            ptr,
            send_cq,
            recv_cq,
            config,
            recv_reserved: recv,
            in_reset: true,
            sq_slots,
            rq_slots,
            events,
            _pd: PhantomData,
        })
    }

    /// Returns how many Last WQE Reached events the QP has had: a QP on an
    /// SRQ has one when it enters the error state.
    #[inline]
    pub fn last_wqe_events(&self) -> u32 {
        self.events.last_wqe.load(Relaxed)
    }

    /// Returns the queue depths the QP was created with.
    #[inline]
    pub fn config(&self) -> QpConfig {
        self.config
    }

    /// Moves the new QP to the INIT state on `port`, so that receives can be
    /// posted; local writes only.
    #[inline]
    pub fn init(&mut self, port: u32) -> Result {
        let mut attr = bindings::ib_qp_attr {
            qp_state: bindings::ib_qp_state_IB_QPS_INIT,
            port_num: port,
            pkey_index: 0,
            qp_access_flags: bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE as i32,
            ..Default::default()
        };
        let mask = bindings::ib_qp_attr_mask_IB_QP_STATE
            | bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX
            | bindings::ib_qp_attr_mask_IB_QP_PORT
            | bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS;
        // SAFETY: The QP and `attr` are valid, `&mut self` excludes concurrent
        // state changes through this handle.
        to_result(unsafe { bindings::ib_modify_qp(self.as_raw(), &mut attr, mask as i32) })?;
        self.in_reset = false;
        Ok(())
    }

    /// Connects the QP, in INIT, to the QP numbered `remote_qpn` that is
    /// reachable through `gid` (RoCE): INIT -> RTR -> RTS.
    #[inline]
    pub fn connect(&mut self, gid: &GidAttr, remote_qpn: u32) -> Result {
        let mut attr = bindings::ib_qp_attr {
            qp_state: bindings::ib_qp_state_IB_QPS_RTR,
            path_mtu: bindings::ib_mtu_IB_MTU_1024,
            dest_qp_num: remote_qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        let ah = &mut attr.ah_attr;
        ah.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        // SAFETY: A valid QP.
        ah.port_num = unsafe { (*self.as_raw()).port };
        ah.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        ah.grh.dgid.raw = gid.gid();
        ah.grh.sgid_index = u8::try_from(gid.index()).map_err(|_| EINVAL)?;
        ah.grh.hop_limit = 64;
        ah.__bindgen_anon_1.roce.dmac = gid.mac()?;
        let mask = bindings::ib_qp_attr_mask_IB_QP_STATE
            | bindings::ib_qp_attr_mask_IB_QP_AV
            | bindings::ib_qp_attr_mask_IB_QP_PATH_MTU
            | bindings::ib_qp_attr_mask_IB_QP_DEST_QPN
            | bindings::ib_qp_attr_mask_IB_QP_RQ_PSN
            | bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC
            | bindings::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER;
        // SAFETY: The QP and `attr` are valid; `&mut self` excludes
        // concurrent state changes through this handle.
        to_result(unsafe { bindings::ib_modify_qp(self.as_raw(), &mut attr, mask as i32) })?;

        let mut attr = bindings::ib_qp_attr {
            qp_state: bindings::ib_qp_state_IB_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 1,
            ..Default::default()
        };
        let mask = bindings::ib_qp_attr_mask_IB_QP_STATE
            | bindings::ib_qp_attr_mask_IB_QP_TIMEOUT
            | bindings::ib_qp_attr_mask_IB_QP_RETRY_CNT
            | bindings::ib_qp_attr_mask_IB_QP_RNR_RETRY
            | bindings::ib_qp_attr_mask_IB_QP_SQ_PSN
            | bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC;
        // SAFETY: As above.
        to_result(unsafe { bindings::ib_modify_qp(self.as_raw(), &mut attr, mask as i32) })
    }

    /// Returns the QP to RESET, for reuse with [`OwnedQp::init`]. A queue
    /// with work requests not completed yet (its slots tell) is drained
    /// first: RESET discards work requests without completing them, and
    /// their `Cqe` would wait forever.
    #[inline]
    pub fn reset(&mut self) -> Result {
        if self.in_reset {
            return Ok(());
        }
        match (self.sq_slots.in_use(), self.rq_slots.in_use()) {
            (true, true) => self.drain(),
            (true, false) => self.drain_sq(),
            (false, true) => self.drain_rq(),
            (false, false) => {}
        }
        self.set_state(bindings::ib_qp_state_IB_QPS_RESET)?;
        self.in_reset = true;
        Ok(())
    }

    /// Returns the receive queue's posting token.
    #[inline]
    pub fn rq(&mut self) -> RecvQueue<'_> {
        // INVARIANT: `&mut self` excludes every other poster on this QP; the
        // slots are the receive queue's.
        RecvQueue {
            qp: self,
            slots: Some(&self.rq_slots),
        }
    }

    /// Returns the send queue's posting token.
    #[inline]
    pub fn sq(&mut self) -> SendQueue<'_> {
        // INVARIANT: As for `rq`, for the send queue.
        SendQueue {
            qp: self,
            slots: Some(&self.sq_slots),
        }
    }

    /// Blocks until every receive completion has been consumed
    /// (`ib_drain_rq()`). The QP is in the error state afterwards.
    #[inline]
    pub fn drain_rq(&mut self) {
        // SAFETY: The QP is valid, and `&mut self` excludes other posters.
        unsafe { bindings::ib_drain_rq(self.as_raw()) }
    }

    /// Drains the receive queue with the C drain that the Rust one replaced
    /// (`ib_drain_rq_c()`), for side-by-side measurements. Test only.
    #[cfg(CONFIG_INFINIBAND_DRAIN_C_REFERENCE)]
    #[inline]
    pub fn drain_rq_c_reference(&mut self) {
        extern "C" {
            fn ib_drain_rq_c(qp: *mut bindings::ib_qp);
        }
        // SAFETY: As for `drain_rq`; the C drain has the same contract.
        unsafe { ib_drain_rq_c(self.as_raw()) }
    }

    /// Blocks until every send completion has been consumed (`ib_drain_sq()`).
    #[inline]
    pub fn drain_sq(&mut self) {
        // SAFETY: As for `drain_rq`.
        unsafe { bindings::ib_drain_sq(self.as_raw()) }
    }

    /// Blocks until every completion has been consumed (`ib_drain_qp()`).
    #[inline]
    pub fn drain(&mut self) {
        // SAFETY: As for `drain_rq`.
        unsafe { bindings::ib_drain_qp(self.as_raw()) }
    }
}

impl Deref for OwnedQp<'_> {
    type Target = Qp;

    #[inline]
    fn deref(&self) -> &Qp {
        // SAFETY: By the type invariant the QP is valid while `self` lives.
        unsafe { Qp::from_raw(self.ptr.as_ptr()) }
    }
}

impl Drop for OwnedQp<'_> {
    #[inline]
    fn drop(&mut self) {
        // Drain first, so that every posted work request has completed and no
        // `Cqe` it points to waits forever. A QP still in RESET has nothing
        // posted, and providers may refuse RESET -> ERR.
        if !self.in_reset {
            self.drain();
        }
        // SAFETY: By the type invariant we own the QP.
        unsafe { bindings::ib_destroy_qp_user(self.ptr.as_ptr(), core::ptr::null_mut()) };
        self.send_cq.unreserve(self.config.send_depth + 1);
        self.recv_cq.unreserve(self.recv_reserved);
    }
}

/// Counts a QP's asynchronous events; the QP's `qp_context` points to it.
struct QpEvents {
    last_wqe: Atomic<u32>,
}

impl QpEvents {
    /// The QP's event handler, called by the core after its own.
    ///
    /// # Safety
    ///
    /// `event` must be valid and `context` must point to a live `QpEvents`.
    unsafe extern "C" fn handle(event: *mut bindings::ib_event, context: *mut c_void) {
        // SAFETY: The caller guarantees both; an `OwnedQp` frees its
        // `QpEvents` only after destroying the QP.
        let (event, this) = unsafe { ((*event).event, &*context.cast::<QpEvents>()) };
        if event == bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED {
            this.last_wqe.add(1, Relaxed);
        }
    }
}

/// Drains the receive queues of all `qps` at the same time, each from its own
/// worker of the unbound workqueue, and returns when every drain has.
///
/// The QPs may share CQs, directly polled ones included. `&mut` on the slice
/// keeps every other poster away for the whole time.
#[inline]
pub fn drain_rq_concurrently(qps: &mut [OwnedQp<'_>]) -> Result {
    let n = qps.len();
    let countdown = Arc::pin_init(
        pin_init!(Countdown {
            left: Atomic::new(n),
            zero <- Completion::new(),
        }),
        GFP_KERNEL,
    )?;
    let mut queued = 0;
    let mut result = Ok(());
    for qp in qps.iter_mut() {
        if let Err(e) = DrainJob::queue(qp.as_raw(), bindings::ib_drain_rq, &countdown) {
            result = Err(e);
            break;
        }
        queued += 1;
    }
    // Jobs that were never made count down here. The jobs point at the QPs
    // that `qps` borrows: return only after every queued one has run.
    countdown.count_down(n - queued);
    countdown.zero.wait_for_completion();
    result
}

/// Counts the drains of [`drain_rq_concurrently`] down to zero.
#[pin_data]
struct Countdown {
    left: Atomic<usize>,
    #[pin]
    zero: Completion,
}

impl Countdown {
    #[inline]
    fn count_down(&self, k: usize) {
        if self.left.fetch_sub(k, Full) == k {
            self.zero.complete_all();
        }
    }
}

/// A QP pointer that a drain job carries to its worker.
struct RawQpPtr(*mut bindings::ib_qp);

// SAFETY: The QP may be drained from any thread; `drain_rq_concurrently`
// keeps it alive and free of other posters until the job has run.
unsafe impl Send for RawQpPtr {}

// SAFETY: Only the worker that runs the job uses the pointer.
unsafe impl Sync for RawQpPtr {}

/// One drain of [`drain_rq_concurrently`].
///
/// Unlike the rest of this module, the job is not `#[inline]`: its worker
/// still runs after it has woken the caller, which may be a module that is
/// unloaded next, so the work function must be in vmlinux. The drain itself,
/// in ib_core, is called through `drain`, and has returned by then.
#[pin_data]
struct DrainJob {
    #[pin]
    work: Work<DrainJob>,
    qp: RawQpPtr,
    drain: unsafe extern "C" fn(*mut bindings::ib_qp),
    countdown: Arc<Countdown>,
}

impl DrainJob {
    /// Queues `drain(qp)` on the unbound workqueue; it counts `countdown` down.
    #[inline(never)]
    fn queue(
        qp: *mut bindings::ib_qp,
        drain: unsafe extern "C" fn(*mut bindings::ib_qp),
        countdown: &Arc<Countdown>,
    ) -> Result {
        let job = Arc::pin_init(
            pin_init!(DrainJob {
                work <- crate::new_work!("drain_rq_concurrently"),
                qp: RawQpPtr(qp),
                drain,
                countdown: countdown.clone(),
            }),
            GFP_KERNEL,
        )?;
        // Each job is new, so it cannot be queued already.
        let _ = workqueue::system_unbound().enqueue(job);
        Ok(())
    }
}

crate::impl_has_work! {
    impl HasWork<Self> for DrainJob { self.work }
}

impl WorkItem for DrainJob {
    type Pointer = Arc<DrainJob>;

    #[inline(never)]
    fn run(this: Arc<DrainJob>) {
        // SAFETY: `drain` is `ib_drain_rq()`. `drain_rq_concurrently` holds
        // the QP by `&mut` and waits for this job before it returns: the QP
        // is valid and nobody else posts receives on it.
        unsafe { (this.drain)(this.qp.0) };
        this.countdown.count_down(1);
    }
}
