// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues.
//!
//! A QP on an SRQ takes its receives from the SRQ, so draining the QP cannot
//! flush them: `ib_drain_qp()` waits for the QP's Last WQE Reached event
//! instead, and the receives stay on the SRQ until it is destroyed, when they
//! are discarded without a completion.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{CompletionHandler, Cqe, OwnedCq, Pd, PollContext};
use crate::{bindings, error::from_err_ptr, error::to_result, prelude::*, sync::Arc};
use core::{mem::ManuallyDrop, ptr::NonNull};

/// A basic SRQ with the CQ its receives complete on, destroyed when the last
/// reference is dropped.
///
/// Every receive posted on it runs the SRQ's one completion handler. The QPs
/// on it hold references. The SRQ owns its CQ so that it can free it between
/// destroying the SRQ and forgetting the receives the SRQ discarded:
/// `ib_free_cq()` waits for a poller that may still be running a handler.
///
/// # Examples
///
/// A QP on an SRQ, drained: its Last WQE Reached event ends the drain, and
/// the receives the SRQ still holds stay for its other QPs.
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, RegisteredDevice, OwnedCq, OwnedQp, OwnedSrq, Pd, PollContext, QpConfig,
///     WorkCompletion,
/// };
/// # struct Ignore;
/// # impl CompletionHandler for Ignore {
/// #     fn done(&self, _wc: &WorkCompletion) {}
/// # }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 4, 0, PollContext::Softirq)?;
/// let srq = OwnedSrq::new(&pd, 4, PollContext::Softirq, Ignore)?;
/// for _ in 0..4 {
///     srq.post()?;
/// }
/// assert!(matches!(srq.post(), Err(e) if e == EBUSY));
/// let cfg = QpConfig { send_depth: 1, recv_depth: 0 };
/// let mut qp = OwnedQp::create_rc_on_srq(&pd, &cq, &srq, cfg)?;
/// qp.init(1)?;
/// qp.drain()?;
/// assert_eq!(srq.outstanding(), 4);
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `ptr` is a valid SRQ owned by this object, with `depth` entries, created
/// on `pd`. QPs on it use `cq` as their receive CQ, in which `depth` entries
/// are reserved for it. Whatever the provider may touch (`cq`, `cqe`, `pd`)
/// is dropped only by `Drop`, and only after the SRQ was destroyed.
pub struct OwnedSrq<H: CompletionHandler> {
    ptr: NonNull<bindings::ib_srq>,
    cq: ManuallyDrop<OwnedCq>,
    depth: u32,
    cqe: ManuallyDrop<Cqe<H>>,
    pd: ManuallyDrop<Arc<Pd>>,
}

// SAFETY: An SRQ may be used and destroyed from any thread; `Cqe<H>` is
// `Send` for `H: Send`.
unsafe impl<H: CompletionHandler + Send> Send for OwnedSrq<H> {}

// SAFETY: Posting on an SRQ is serialized by the provider; the rest is
// read-only or `Sync`.
unsafe impl<H: CompletionHandler> Sync for OwnedSrq<H> {}

/// What a QP on an SRQ needs of it, whatever its handler.
pub(crate) trait SrqOwner: Send + Sync {
    /// The raw `struct ib_srq`.
    fn as_raw(&self) -> *mut bindings::ib_srq;
    /// The CQ its receives complete on.
    fn cq(&self) -> &OwnedCq;
}

impl<H: CompletionHandler + Send> SrqOwner for OwnedSrq<H> {
    fn as_raw(&self) -> *mut bindings::ib_srq {
        self.ptr.as_ptr()
    }

    fn cq(&self) -> &OwnedCq {
        &self.cq
    }
}

impl<H: CompletionHandler> OwnedSrq<H> {
    /// Creates an SRQ of `depth` receives on `pd`, whose receives complete on
    /// a CQ of its own, polled in `ctx`, and run `handler`.
    ///
    /// `EOPNOTSUPP` if the device has no SRQs (`ib_create_srq_user()` does
    /// not check), `EINVAL` if `depth` is 0 or more than the device's
    /// `max_srq_wr`.
    pub fn new(pd: &Arc<Pd>, depth: u32, ctx: PollContext, handler: H) -> Result<Arc<Self>> {
        let dev = pd.device();
        if dev.ops().create_srq.is_none() || dev.ops().size_ib_srq == 0 || dev.attrs().max_srq == 0
        {
            return Err(EOPNOTSUPP);
        }
        if depth == 0 || depth > dev.attrs().max_srq_wr {
            return Err(EINVAL);
        }
        let cqe = Cqe::new(handler)?;
        let cq = OwnedCq::alloc_unshared(pd.device(), depth, 0, ctx)?;
        cq.reserve(depth)?;
        let mut attr = bindings::ib_srq_init_attr {
            srq_type: bindings::ib_srq_type_IB_SRQT_BASIC,
            ..Default::default()
        };
        attr.attr.max_wr = depth;
        attr.attr.max_sge = 1;
        // SAFETY: `pd` and `attr` are valid; a kernel SRQ has no uobject or udata.
        let ptr = from_err_ptr(unsafe {
            bindings::ib_create_srq_user(
                pd.as_raw(),
                &mut attr,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        })?;
        // INVARIANT: A new SRQ on `pd`, `depth` entries reserved in `cq`.
        let srq = Self {
            ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
            cq: ManuallyDrop::new(cq),
            depth,
            cqe: ManuallyDrop::new(cqe),
            pd: ManuallyDrop::new(pd.clone()),
        };
        Ok(Arc::new(srq, GFP_KERNEL)?)
    }

    /// Returns the raw `struct ib_srq` pointer.
    pub fn as_raw(&self) -> *mut bindings::ib_srq {
        self.ptr.as_ptr()
    }

    /// Returns the CQ that the receives of the SRQ's QPs complete on.
    pub fn cq(&self) -> &OwnedCq {
        &self.cq
    }

    /// Returns the number of receives the SRQ holds.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Returns the completion handler.
    pub fn handler(&self) -> &H {
        self.cqe.handler()
    }

    /// Returns the number of receives posted and not completed yet.
    pub fn outstanding(&self) -> usize {
        self.cqe.outstanding()
    }

    /// Posts a receive work request without buffers; it matches a
    /// zero-length send on any QP of the SRQ. Fails with `EBUSY` while the
    /// SRQ holds `depth` receives, so the CQ never overflows; a receive whose
    /// handler runs counts until it returns, so a handler that posts again on
    /// a full SRQ gets `EBUSY` too.
    pub fn post(&self) -> Result {
        let mut wr = bindings::ib_recv_wr::default();
        let depth = usize::try_from(self.depth)?;
        wr.__bindgen_anon_1.wr_cqe = self.cqe.count_post(depth)?;
        // SAFETY: The SRQ and `wr` are valid. The entry of the `Cqe` is kept
        // until the completion returns, by the reference `count_post()` took.
        let ret = to_result(unsafe {
            bindings::ib_post_srq_recv(self.as_raw(), &wr, core::ptr::null_mut())
        });
        if ret.is_err() {
            self.cqe.uncount(1);
        }
        ret
    }
}

// `Drop` may move an `OwnedSrq` out of itself, to defer it: no field may be
// dropped after it (the others are `ManuallyDrop`).
crate::static_assert!(
    !core::mem::needs_drop::<NonNull<bindings::ib_srq>>() && !core::mem::needs_drop::<u32>()
);

impl<H: CompletionHandler> Drop for OwnedSrq<H> {
    fn drop(&mut self) {
        if super::defer::must_defer() {
            // SAFETY: No field of `self` is dropped after this (checked
            // above): the copy takes `self` over, and is dropped again, in
            // process context.
            super::defer::defer_drop(unsafe { core::ptr::read(self) }, "SRQ");
            return;
        }
        // SAFETY: By the type invariant we own the SRQ; its QPs hold
        // references to `self`, so they are destroyed already.
        let ret = unsafe { bindings::ib_destroy_srq_user(self.as_raw(), core::ptr::null_mut()) };
        if ret != 0 {
            // The SRQ lives on, with receives that point at `cqe` and a CQ
            // and PD under it: leak them all rather than free them.
            pr_warn!("ib_destroy_srq_user() failed: {ret}; its memory is leaked\n");
            return;
        }
        self.cq.unreserve(self.depth);
        if self.cq.in_use() {
            // Its drop would keep it, with completions in it that point at
            // `cqe`: leak them both, and the PD.
            pr_warn!("the CQ of a destroyed SRQ is still used; its memory is leaked\n");
            return;
        }
        // SAFETY: By the type invariant only this drop drops `cq`, once; it
        // is not in use, so it is freed.
        unsafe { ManuallyDrop::drop(&mut self.cq) };
        // The CQ is freed, so no handler runs any more: what is still counted
        // sat on the SRQ, or completed unpolled in the CQ, and was discarded
        // with it.
        self.cqe.forget_outstanding();
        // SAFETY: As for `cq`; nothing points at the entry any more.
        unsafe { ManuallyDrop::drop(&mut self.cqe) };
        // SAFETY: As for `cq`; the SRQ no longer uses the PD.
        unsafe { ManuallyDrop::drop(&mut self.pd) };
    }
}
