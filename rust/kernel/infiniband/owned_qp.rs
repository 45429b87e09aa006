// SPDX-License-Identifier: GPL-2.0

//! Queue pairs created and owned by Rust code: [`OwnedQp`].
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    slots::WrSlots, srq::SrqOwner, CompletionHandler, GidAttr, OwnedCq, OwnedSrq, Pd, Qp, QpState,
    RecvQueue, SendQueue,
};
use crate::{
    bindings,
    error::{from_err_ptr, to_result},
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
    sync::Arc,
};
use core::{ffi::c_void, mem::ManuallyDrop, ops::Deref, ptr::NonNull};

/// Sizes of a new QP's work queues, as the consumer will use them.
///
/// # Examples
///
/// A queue of depth 0 posts nothing, but still has room for its drain marker:
///
/// ```
/// use kernel::infiniband::{RegisteredDevice, OwnedCq, OwnedQp, Pd, PollContext, QpConfig};
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 32, 0, PollContext::Softirq)?;
/// let cfg = QpConfig { send_depth: 0, recv_depth: 16 };
/// let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// assert_eq!(qp.config().recv_depth, 16);
/// assert_eq!(cq.available(), 32 - 1 - 17);
/// qp.init(1)?;
/// qp.drain()?;
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    /// Send work requests the consumer may have outstanding.
    pub send_depth: u32,
    /// Receive work requests the consumer may have outstanding.
    pub recv_depth: u32,
}

/// A path MTU (`enum ib_mtu`).
///
/// # Examples
///
/// Two QPs `a` and `b`, set up as in the [`RcParams`] example, connected
/// with the smallest MTU, carry a zero-length send:
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, Cqe, RegisteredDevice, GidAttr, Mtu, OwnedCq, OwnedQp, Pd, PollContext,
///     QpConfig, RcParams, WcStatus, WorkCompletion,
/// };
/// use kernel::sync::atomic::{Atomic, Relaxed};
/// use kernel::time::{delay::fsleep, Delta};
/// # struct Received(Atomic<u32>);
/// # impl CompletionHandler for Received {
/// #     fn done(&self, wc: &WorkCompletion) {
/// #         if wc.status() == WcStatus::Success {
/// #             self.0.add(1, Relaxed);
/// #         }
/// #     }
/// # }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// # let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
/// # let pd = Pd::alloc(&dev)?;
/// # let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
/// # let received = Cqe::new(Received(Atomic::new(0)))?;
/// # let sent = Cqe::new(Received(Atomic::new(0)))?;
/// # let cfg = QpConfig { send_depth: 1, recv_depth: 1 };
/// # let mut a = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// # let mut b = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
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
/// let small = RcParams { mtu: Mtu::Mtu256, ..params };
/// a.init(1)?;
/// b.init(1)?;
/// let (qpn_a, qpn_b) = (a.qp_num(), b.qp_num());
/// a.connect(&gid, qpn_b, &small)?;
/// b.connect(&gid, qpn_a, &small)?;
/// b.rq().post(&received)?;
/// a.sq().post_send(&sent)?;
/// for _ in 0..5000 {
///     if received.outstanding() + sent.outstanding() == 0 {
///         break;
///     }
///     fsleep(Delta::from_millis(1));
/// }
/// # // Nothing in flight if the check fails: a failed check drops nothing.
/// # a.drain()?;
/// # b.drain()?;
/// assert_eq!(received.handler().0.load(Relaxed), 1);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    fn as_raw(self) -> bindings::ib_mtu {
        match self {
            Self::Mtu256 => bindings::ib_mtu_IB_MTU_256,
            Self::Mtu512 => bindings::ib_mtu_IB_MTU_512,
            Self::Mtu1024 => bindings::ib_mtu_IB_MTU_1024,
            Self::Mtu2048 => bindings::ib_mtu_IB_MTU_2048,
            Self::Mtu4096 => bindings::ib_mtu_IB_MTU_4096,
        }
    }
}

/// The path and retry attributes of a reliable connection, for
/// [`OwnedQp::connect`]: the `struct ib_qp_attr` fields of the INIT -> RTR
/// and RTR -> RTS transitions, with the meaning the IB spec gives them.
///
/// # Examples
///
/// Two QPs connected to each other through a RoCE GID of one port, and a
/// zero-length send from one to the other:
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, Cqe, RegisteredDevice, GidAttr, Mtu, OwnedCq, OwnedQp, Pd, PollContext,
///     QpConfig, RcParams, WorkCompletion,
/// };
/// use kernel::time::{delay::fsleep, Delta};
/// # struct Ignore;
/// # impl CompletionHandler for Ignore {
/// #     fn done(&self, _wc: &WorkCompletion) {}
/// # }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Workqueue)?;
/// let received = Cqe::new(Ignore)?;
/// let sent = Cqe::new(Ignore)?;
/// let cfg = QpConfig { send_depth: 1, recv_depth: 1 };
/// let mut a = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// let mut b = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// let params = RcParams {
///     mtu: Mtu::Mtu1024,
///     timeout: 14,
///     retry_cnt: 7,
///     rnr_retry: 7,
///     min_rnr_timer: 12,
///     max_rd_atomic: 1,
///     max_dest_rd_atomic: 1,
///     hop_limit: 64,
///     sq_psn: 0,
///     rq_psn: 0,
/// };
/// a.init(1)?;
/// b.init(1)?;
/// let (qpn_a, qpn_b) = (a.qp_num(), b.qp_num());
/// a.connect(&gid, qpn_b, &params)?;
/// b.connect(&gid, qpn_a, &params)?;
/// b.rq().post(&received)?;
/// a.sq().post_send(&sent)?;
/// let mut waited_ms = 0;
/// while received.outstanding() + sent.outstanding() != 0 && waited_ms < 5000 {
///     fsleep(Delta::from_millis(1));
///     waited_ms += 1;
/// }
/// # a.drain()?;
/// # b.drain()?;
/// assert!(waited_ms < 5000);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RcParams {
    /// The path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout, 4.096 us * 2^`timeout` (0: wait forever).
    pub timeout: u8,
    /// Retries after an ACK timeout, 0 to 7.
    pub retry_cnt: u8,
    /// Retries after a receiver-not-ready NAK, 0 to 6, or 7 for forever.
    pub rnr_retry: u8,
    /// The RNR NAK timer code (0 to 31) the peer is asked to wait.
    pub min_rnr_timer: u8,
    /// RDMA reads and atomics outstanding as the initiator.
    pub max_rd_atomic: u8,
    /// RDMA reads and atomics outstanding as the responder.
    pub max_dest_rd_atomic: u8,
    /// The GRH hop limit.
    pub hop_limit: u8,
    /// The first packet sequence number sent.
    pub sq_psn: u32,
    /// The first packet sequence number expected.
    pub rq_psn: u32,
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
/// fn post_during_drain<H: CompletionHandler>(qp: &mut OwnedQp, cqe: &Cqe<H>) -> Result {
///     let mut rq = qp.rq();
///     qp.drain_rq()?; // error[E0499]: cannot borrow `*qp` as mutable more than once
///     rq.post(cqe);
/// }
/// ```
///
/// (`ignore`: the kernel's doctests run as KUnit and cannot check that
/// something fails to build.)
///
/// # Examples
///
/// A QP used, reset and used again; dropping it drains it:
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, Cqe, RegisteredDevice, OwnedCq, OwnedQp, Pd, PollContext, QpConfig,
///     WorkCompletion,
/// };
/// # struct Ignore;
/// # impl CompletionHandler for Ignore {
/// #     fn done(&self, _wc: &WorkCompletion) {}
/// # }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
/// let cqe = Cqe::new(Ignore)?;
/// let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, QpConfig { send_depth: 1, recv_depth: 2 })?;
/// qp.init(1)?;
/// qp.rq().post(&cqe)?;
/// // RESET would discard the receive without completing it: reset() drains first.
/// qp.reset()?;
/// assert_eq!(cqe.outstanding(), 0);
/// qp.init(1)?;
/// qp.rq().post(&cqe)?;
/// assert_eq!(cqe.outstanding(), 1);
/// drop(qp);
/// assert_eq!(cqe.outstanding(), 0);
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `ptr` is a valid QP owned by this object, created on `held`'s PD, CQs and
/// SRQ, in whose CQs it reserved `send_depth + 1` and `recv_reserved` entries
/// (`recv_depth + 1`, or none on an SRQ, whose own reservation covers its
/// receives). `held` is dropped only by `Drop`, after the QP was destroyed.
pub struct OwnedQp {
    ptr: NonNull<bindings::ib_qp>,
    config: QpConfig,
    recv_reserved: u32,
    /// Whether [`OwnedQp::drain`] ran since the QP last left RESET: then a
    /// QP on an SRQ takes no more receives from it (the error state), and
    /// draining it again would wait for a Last WQE Reached event that some
    /// providers raise once.
    drained: bool,
    held: ManuallyDrop<Held>,
}

// `Drop` may move an `OwnedQp` out of itself, to defer it: no field may be
// dropped after it.
crate::static_assert!(
    !core::mem::needs_drop::<NonNull<bindings::ib_qp>>()
        && !core::mem::needs_drop::<QpConfig>()
        && !core::mem::needs_drop::<u32>()
        && !core::mem::needs_drop::<bool>()
        && !core::mem::needs_drop::<ManuallyDrop<Held>>()
);

/// What a QP's provider may touch until the QP is destroyed: its parents
/// (counted references, so that they outlive it even if it is leaked) and
/// the memory its work requests and events point to.
struct Held {
    send_cq: Arc<OwnedCq>,
    recv: RecvCq,
    _pd: Arc<Pd>,
    /// One slot per work request each queue may hold (none for an SRQ's).
    sq_slots: KBox<WrSlots>,
    rq_slots: KBox<WrSlots>,
    /// The QP's asynchronous events seen so far (its `qp_context`).
    events: KBox<QpEvents>,
}

/// Where a QP's receives complete.
enum RecvCq {
    /// On a CQ of its own.
    Cq(Arc<OwnedCq>),
    /// On the CQ of the SRQ it takes its receives from.
    Srq(Arc<dyn SrqOwner>),
}

impl RecvCq {
    fn cq(&self) -> &OwnedCq {
        match self {
            Self::Cq(cq) => cq,
            Self::Srq(srq) => srq.cq(),
        }
    }
}

// SAFETY: A QP may be used and destroyed from any thread.
unsafe impl Send for OwnedQp {}

// SAFETY: Through `&self` only the thread-safe `Qp` methods are reachable.
unsafe impl Sync for OwnedQp {}

impl OwnedQp {
    /// Creates an RC QP on `pd` with the given CQs and queue depths.
    ///
    /// Fails with `EBUSY` if a CQ has no room for the new queues, and with
    /// `EINVAL` if the PD and the CQs are not all on one device.
    #[inline]
    pub fn create_rc(
        pd: &Arc<Pd>,
        send_cq: &Arc<OwnedCq>,
        recv_cq: &Arc<OwnedCq>,
        config: QpConfig,
    ) -> Result<Self> {
        let recv = config.recv_depth.checked_add(1).ok_or(EINVAL)?;
        Self::create(pd, send_cq, RecvCq::Cq(recv_cq.clone()), config, recv)
    }

    /// Creates an RC QP on `pd` that receives through `srq`, on the SRQ's CQ.
    /// `config.recv_depth` must be 0; the PD, the CQ and the SRQ must all be
    /// on one device (else `EINVAL`).
    pub fn create_rc_on_srq<H: CompletionHandler + Send>(
        pd: &Arc<Pd>,
        send_cq: &Arc<OwnedCq>,
        srq: &Arc<OwnedSrq<H>>,
        config: QpConfig,
    ) -> Result<Self> {
        if config.recv_depth != 0 {
            return Err(EINVAL);
        }
        Self::create(pd, send_cq, RecvCq::Srq(srq.clone()), config, 0)
    }

    #[inline]
    fn create(
        pd: &Arc<Pd>,
        send_cq: &Arc<OwnedCq>,
        recv: RecvCq,
        config: QpConfig,
        recv_n: u32,
    ) -> Result<Self> {
        let send = config.send_depth.checked_add(1).ok_or(EINVAL)?;
        // The provider takes each object for one of its own (`container_of`):
        // the PD, the CQs and the SRQ (through its CQ) must all be on its
        // device.
        let dev = pd.device().as_raw();
        if send_cq.device().as_raw() != dev || recv.cq().device().as_raw() != dev {
            return Err(EINVAL);
        }
        let held = Held {
            send_cq: send_cq.clone(),
            recv,
            _pd: pd.clone(),
            sq_slots: WrSlots::new(config.send_depth, false)?,
            rq_slots: WrSlots::new(recv_n.saturating_sub(1), true)?,
            events: KBox::new(
                QpEvents {
                    last_wqe: Atomic::new(0),
                },
                GFP_KERNEL,
            )?,
        };
        let (send_cq, recv_cq) = (&*held.send_cq, held.recv.cq());
        if core::ptr::eq(send_cq, recv_cq) {
            send_cq.reserve(send.checked_add(recv_n).ok_or(EINVAL)?)?;
        } else {
            send_cq.reserve(send)?;
            if let Err(e) = recv_cq.reserve(recv_n) {
                send_cq.unreserve(send);
                return Err(e);
            }
        }
        let srq = match &held.recv {
            RecvCq::Srq(srq) => srq.as_raw(),
            RecvCq::Cq(_) => core::ptr::null_mut(),
        };
        let mut attr = bindings::ib_qp_init_attr {
            send_cq: send_cq.as_raw(),
            recv_cq: recv_cq.as_raw(),
            srq,
            event_handler: Some(QpEvents::handle),
            qp_context: (&raw const *held.events).cast_mut().cast(),
            qp_type: bindings::ib_qp_type_IB_QPT_RC,
            sq_sig_type: bindings::ib_sig_type_IB_SIGNAL_REQ_WR,
            ..Default::default()
        };
        attr.cap.max_send_wr = send;
        attr.cap.max_recv_wr = recv_n;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = if srq.is_null() { 1 } else { 0 };
        // SAFETY: `pd`, the CQs, the SRQ if any and `attr` are valid.
        let ptr = from_err_ptr(unsafe {
            bindings::ib_create_qp_kernel(pd.as_raw(), &mut attr, super::kern_name())
        });
        let ptr = match ptr.map(NonNull::new) {
            Ok(Some(ptr)) => ptr,
            Ok(None) | Err(_) => {
                send_cq.unreserve(send);
                recv_cq.unreserve(recv_n);
                return Err(ptr.err().unwrap_or(ENOMEM));
            }
        };
        // INVARIANT: The QP is new and owned; the reservations were made.
        Ok(Self {
            ptr,
            config,
            recv_reserved: recv_n,
            drained: false,
            held: ManuallyDrop::new(held),
        })
    }

    /// Returns how many Last WQE Reached events the QP has had: a QP on an
    /// SRQ has one when it enters the error state. The core wakes a drain
    /// waiting for the event before the QP's handler counts it, so the count
    /// may lag just after [`OwnedQp::drain`] returns.
    #[inline]
    pub fn last_wqe_events(&self) -> u32 {
        self.held.events.last_wqe.load(Relaxed)
    }

    /// Returns the queue depths the QP was created with.
    #[inline]
    pub fn config(&self) -> QpConfig {
        self.config
    }

    /// Moves the new QP to the INIT state on `port`, so that receives can be
    /// posted; local writes only. `EINVAL` if the device has no such port.
    #[inline]
    pub fn init(&mut self, port: u32) -> Result {
        // SAFETY: The device is valid; `phys_port_cnt` is set before it registers.
        let ports = unsafe { (*self.device().as_raw()).phys_port_cnt };
        // ib_modify_qp() trusts its caller: it indexes the port data with it.
        if !(1..=ports).contains(&port) {
            return Err(EINVAL);
        }
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
        self.drained = false;
        Ok(())
    }

    /// Connects the QP, in INIT, to the QP numbered `remote_qpn` behind the
    /// same GID `gid`, with the path and retry attributes `params`: INIT ->
    /// RTR -> RTS. Loopback only (RoCE): `gid` and its MAC address are both
    /// ends' (a peer on another host needs a connection manager, which this
    /// crate does not wrap yet).
    #[inline]
    pub fn connect(&mut self, gid: &GidAttr, remote_qpn: u32, params: &RcParams) -> Result {
        let mut attr = bindings::ib_qp_attr {
            qp_state: bindings::ib_qp_state_IB_QPS_RTR,
            path_mtu: params.mtu.as_raw(),
            dest_qp_num: remote_qpn,
            rq_psn: params.rq_psn,
            max_dest_rd_atomic: params.max_dest_rd_atomic,
            min_rnr_timer: params.min_rnr_timer,
            ..Default::default()
        };
        let ah = &mut attr.ah_attr;
        ah.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        // SAFETY: A valid QP.
        ah.port_num = unsafe { (*self.as_raw()).port };
        ah.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        ah.grh.dgid.raw = gid.gid();
        ah.grh.sgid_index = u8::try_from(gid.index()).map_err(|_| EINVAL)?;
        ah.grh.hop_limit = params.hop_limit;
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
            timeout: params.timeout,
            retry_cnt: params.retry_cnt,
            rnr_retry: params.rnr_retry,
            sq_psn: params.sq_psn,
            max_rd_atomic: params.max_rd_atomic,
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
    /// their slots would wait forever. Refused as [`OwnedQp::drain_rq`]:
    /// it may drain, and the provider may sleep.
    #[inline]
    pub fn reset(&mut self) -> Result {
        Self::may_drain()?;
        if !self.idle() {
            self.drain_outstanding();
        } else if matches!(self.state(), Ok(QpState::Reset)) {
            return Ok(());
        }
        self.set_state(bindings::ib_qp_state_IB_QPS_RESET)
    }

    /// Drains the queues with work requests not completed yet (their slots
    /// tell), and a QP on an SRQ not drained whole since it left RESET: it
    /// may hold a receive it took from the SRQ, which only the drain of the
    /// whole QP (Last WQE Reached) accounts for.
    #[inline]
    fn drain_outstanding(&mut self) {
        let (sq, rq) = (self.held.sq_slots.in_use(), self.held.rq_slots.in_use());
        if (self.has_srq() && !self.drained) || (sq && rq) {
            self.drain_whole();
        } else if sq {
            self.drain_send();
        } else if rq {
            self.drain_recv();
        }
    }

    /// Refuses a drain where it would wait for the completion being handled
    /// (in a completion handler, or a handler's drop), or sleep in atomic
    /// context: `EDEADLK`, and a line, once. (Not a WARN: a test of it from
    /// a softirq handler could not suppress one.)
    #[inline]
    pub(super) fn may_drain() -> Result {
        if super::defer::must_defer() {
            crate::pr_warn_once!(
                "RDMA: a QP drain in a completion handler or atomic context is refused\n"
            );
            return Err(EDEADLK);
        }
        Ok(())
    }

    /// Whether no work request is outstanding and the QP holds no receive
    /// of an SRQ: it is in RESET, or drained whole and not moved to INIT since. Then
    /// neither [`OwnedQp::reset`] nor the drop drains it (providers may refuse
    /// RESET -> ERR). It asks the provider each time: the state can change
    /// without this handle, through [`Qp::set_error_state`] or on the
    /// provider's own (a fatal error).
    #[inline]
    fn idle(&self) -> bool {
        !self.held.sq_slots.in_use()
            && !self.held.rq_slots.in_use()
            && (self.drained || matches!(self.state(), Ok(QpState::Reset)))
    }

    /// Returns the receive queue's posting token.
    #[inline]
    pub fn rq(&mut self) -> RecvQueue<'_> {
        // INVARIANT: `&mut self` excludes every other poster on this QP; the
        // handlers of an `OwnedQp`'s completions may run in any context that
        // reaps its CQs; the slots are the receive queue's.
        RecvQueue {
            qp: self,
            slots: Some(&self.held.rq_slots),
        }
    }

    /// Returns the send queue's posting token.
    #[inline]
    pub fn sq(&mut self) -> SendQueue<'_> {
        // INVARIANT: As for `rq`, for the send queue.
        SendQueue {
            qp: self,
            slots: Some(&self.held.sq_slots),
        }
    }

    /// Blocks until every receive completion has been consumed
    /// (`ib_drain_rq()`). The QP is in the error state afterwards.
    ///
    /// A QP on an SRQ is drained whole (`ib_drain_qp()`): its receives come
    /// from the SRQ, which `ib_drain_rq()` refuses, with a WARN.
    ///
    /// The drain waits for the handlers of its queue's completions: it is
    /// refused (`EDEADLK`, with a line once) in a completion handler and in
    /// atomic context. Nor may it be called holding a lock that a handler
    /// takes.
    #[inline]
    pub fn drain_rq(&mut self) -> Result {
        Self::may_drain()?;
        self.drain_recv();
        Ok(())
    }

    /// Blocks until every send completion has been consumed
    /// (`ib_drain_sq()`); refused as [`OwnedQp::drain_rq`].
    #[inline]
    pub fn drain_sq(&mut self) -> Result {
        Self::may_drain()?;
        self.drain_send();
        Ok(())
    }

    /// Blocks until every completion has been consumed (`ib_drain_qp()`);
    /// refused as [`OwnedQp::drain_rq`].
    #[inline]
    pub fn drain(&mut self) -> Result {
        Self::may_drain()?;
        self.drain_whole();
        Ok(())
    }

    #[inline]
    fn drain_recv(&mut self) {
        if self.has_srq() {
            self.drain_whole();
            return;
        }
        // SAFETY: The QP is valid, and `&mut self` excludes other posters.
        unsafe { bindings::ib_drain_rq(self.as_raw()) };
        self.after_drain(false);
    }

    #[inline]
    fn drain_send(&mut self) {
        // SAFETY: As for `drain_recv`.
        unsafe { bindings::ib_drain_sq(self.as_raw()) };
        // As in `after_drain`.
        self.held.sq_slots.wait_idle();
    }

    #[inline]
    fn drain_whole(&mut self) {
        // SAFETY: As for `drain_recv`.
        unsafe { bindings::ib_drain_qp(self.as_raw()) };
        self.after_drain(true);
    }

    /// Called after `ib_drain_rq()`, or `ib_drain_qp()` (`whole`), of the QP.
    #[inline]
    pub(super) fn after_drain(&mut self, whole: bool) {
        // A second poller of a shared direct CQ may have reaped a completion
        // before the marker and still be in its handler: wait for it.
        if whole {
            self.held.sq_slots.wait_idle();
            // Unless the drain was refused before the error state.
            self.drained = matches!(self.state(), Ok(QpState::Err));
        }
        self.held.rq_slots.wait_idle();
    }
}

impl Deref for OwnedQp {
    type Target = Qp;

    #[inline]
    fn deref(&self) -> &Qp {
        // SAFETY: By the type invariant the QP is valid while `self` lives.
        unsafe { Qp::from_raw(self.ptr.as_ptr()) }
    }
}

impl Drop for OwnedQp {
    #[inline]
    fn drop(&mut self) {
        if super::defer::must_defer() {
            // SAFETY: No field of `self` is dropped after this (checked beside
            // the struct): the copy takes `self` over, and is dropped again,
            // in process context.
            super::defer::defer_drop(unsafe { core::ptr::read(self) }, "QP");
            return;
        }
        // Drain first, so that every posted work request has completed.
        if !self.idle() {
            self.drain_outstanding();
        }
        // SAFETY: By the type invariant we own the QP.
        let ret = unsafe { bindings::ib_destroy_qp_user(self.ptr.as_ptr(), core::ptr::null_mut()) };
        if ret != 0 {
            // The QP lives on: what it points to, and its parents, must too.
            pr_warn!(
                "{}: QP {:#x}: ib_destroy_qp_user() failed: {ret}; its memory is leaked\n",
                self.device().name(),
                self.qp_num()
            );
            return;
        }
        let held = &*self.held;
        // A poller on another CPU may still be in a slot's completion.
        held.sq_slots.wait_idle();
        held.rq_slots.wait_idle();
        held.send_cq.unreserve(self.config.send_depth + 1);
        held.recv.cq().unreserve(self.recv_reserved);
        // SAFETY: By the type invariant only this drop drops `held`, once,
        // and the QP that used it is destroyed.
        unsafe { ManuallyDrop::drop(&mut self.held) };
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
    // Never inlined: it must stay in vmlinux, as a leaked QP's events come
    // after the module that made it has gone.
    #[inline(never)]
    unsafe extern "C" fn handle(event: *mut bindings::ib_event, context: *mut c_void) {
        // SAFETY: The caller guarantees both; an `OwnedQp` frees its
        // `QpEvents` only after destroying the QP.
        let (event, this) = unsafe { ((*event).event, &*context.cast::<QpEvents>()) };
        if event == bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED {
            this.last_wqe.add(1, Relaxed);
        }
    }
}
