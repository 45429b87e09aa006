// SPDX-License-Identifier: GPL-2.0

//! RDMA completion queues.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::DeviceRef;
use crate::{
    bindings,
    error::from_err_ptr,
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
    sync::Arc,
    types::Opaque,
};
use core::{mem::ManuallyDrop, ops::Deref, ptr::NonNull};

/// The context in which the completions of a [`Cq`] are reaped.
///
/// # Examples
///
/// ```
/// use kernel::infiniband::{RegisteredDevice, OwnedCq, PollContext};
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// for ctx in [PollContext::Softirq, PollContext::Workqueue, PollContext::Direct] {
///     let cq = OwnedCq::alloc(&dev, 4, 0, ctx)?;
///     assert_eq!(cq.poll_context(), Some(ctx));
/// }
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollContext {
    /// Polled from softirq context.
    Softirq,
    /// Polled from a bound workqueue.
    Workqueue,
    /// Polled from an unbound workqueue.
    UnboundWorkqueue,
    /// Nobody polls in the background: the consumer calls
    /// `ib_process_cq_direct()` itself.
    Direct,
}

impl PollContext {
    /// Returns the C `enum ib_poll_context` value.
    #[inline]
    pub fn as_raw(self) -> bindings::ib_poll_context {
        match self {
            Self::Softirq => bindings::ib_poll_context_IB_POLL_SOFTIRQ,
            Self::Workqueue => bindings::ib_poll_context_IB_POLL_WORKQUEUE,
            Self::UnboundWorkqueue => bindings::ib_poll_context_IB_POLL_UNBOUND_WORKQUEUE,
            Self::Direct => bindings::ib_poll_context_IB_POLL_DIRECT,
        }
    }

    #[inline]
    fn from_raw(raw: bindings::ib_poll_context) -> Option<Self> {
        [
            Self::Softirq,
            Self::Workqueue,
            Self::UnboundWorkqueue,
            Self::Direct,
        ]
        .into_iter()
        .find(|c| c.as_raw() == raw)
    }
}

/// A view of a completion queue (`struct ib_cq`).
///
/// # Examples
///
/// The CQs of a QP, seen through its work queues:
///
/// ```
/// use kernel::infiniband::{
///     Cq, RegisteredDevice, OwnedCq, OwnedQp, Pd, PollContext, QpConfig, WorkQueue,
/// };
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Workqueue)?;
/// let cfg = QpConfig { send_depth: 1, recv_depth: 1 };
/// let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// let recv_cq: &Cq = qp.rq().cq().ok_or(EINVAL)?;
/// assert_eq!(recv_cq.id(), cq.id());
/// assert!(recv_cq.capacity() >= 8);
/// // From ib_alloc_cq(), so a drain marker's completion reaches it.
/// assert!(recv_cq.calls_cqe_done());
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// The inner `struct ib_cq` is valid for as long as a `&Cq` exists.
#[repr(transparent)]
pub struct Cq(Opaque<bindings::ib_cq>);

// SAFETY: The RDMA core uses `struct ib_cq` from any thread; `Cq`'s safe
// methods only read fields that are set when the CQ is created (`cqe` changes
// only in `ops.resize_user_cq()`, for userspace CQs, which no kernel QP
// uses), and polling it is `unsafe`, left to callers that may reap it.
unsafe impl Send for Cq {}

// SAFETY: See `Send`; concurrent reads of those fields are fine.
unsafe impl Sync for Cq {}

impl Cq {
    /// Creates a reference to a [`Cq`] from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a valid `struct ib_cq` that stays valid for `'a`.
    #[inline]
    pub unsafe fn from_raw<'a>(ptr: *mut bindings::ib_cq) -> &'a Self {
        // SAFETY: `Cq` is a transparent wrapper of `struct ib_cq`, and the caller
        // guarantees that `ptr` is valid for `'a`.
        unsafe { &*ptr.cast() }
    }

    /// Like [`Cq::from_raw`], for a pointer that may be null.
    ///
    /// # Safety
    ///
    /// `ptr` must be null or point to a valid `struct ib_cq` that stays valid
    /// for `'a`.
    #[inline]
    pub(crate) unsafe fn from_raw_opt<'a>(ptr: *mut bindings::ib_cq) -> Option<&'a Self> {
        // SAFETY: Non-null, so valid for `'a` by the caller's guarantee.
        (!ptr.is_null()).then(|| unsafe { Self::from_raw(ptr) })
    }

    /// Returns the raw `struct ib_cq` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::ib_cq {
        self.0.get()
    }

    /// Returns the CQ's restrack id, as the rdma_core tracepoints print it.
    #[inline]
    pub fn id(&self) -> u32 {
        // SAFETY: By the type invariant the CQ is valid.
        unsafe { (*self.as_raw()).res.id }
    }

    /// Returns the number of entries the CQ holds.
    #[inline]
    pub fn capacity(&self) -> i32 {
        // SAFETY: By the type invariant the CQ is valid.
        unsafe { (*self.as_raw()).cqe }
    }

    /// Returns how the CQ is polled, or `None` for an unknown value.
    #[inline]
    pub fn poll_context(&self) -> Option<PollContext> {
        // SAFETY: By the type invariant the CQ is valid.
        PollContext::from_raw(unsafe { (*self.as_raw()).poll_ctx })
    }

    /// Returns `true` if completions on this CQ call their `ib_cqe::done`.
    ///
    /// Only CQs from `ib_alloc_cq()` do, and it marks them so
    /// (`from_ib_alloc_cq`). A CQ from `ib_create_cq()` reports completions to
    /// its own handler, so a drain marker posted to it would never complete.
    #[inline]
    pub fn calls_cqe_done(&self) -> bool {
        // SAFETY: By the type invariant the CQ is valid. The flag is zeroed
        // at allocation (`rdma_zalloc_drv_obj()`), set by `__ib_alloc_cq()`
        // before it returns the CQ, and never changed.
        unsafe { (*self.as_raw()).from_ib_alloc_cq }
    }

    /// Polls up to `budget` completions (all if negative) and runs their `done`.
    ///
    /// # Safety
    ///
    /// The caller must be allowed to reap this CQ's completions: a direct CQ
    /// whose owner lets its handlers run in the caller's context.
    #[inline]
    pub(crate) unsafe fn process_direct(&self, budget: i32) -> i32 {
        // SAFETY: The CQ is valid, and the caller may reap it. Another poller
        // beside this one (the CQ's own, or a second direct one) only shares
        // the handlers: ib_process_cq_direct() reaps into an array of its own
        // stack, and the provider's poll takes the CQ's lock.
        unsafe { bindings::ib_process_cq_direct(self.as_raw(), budget) }
    }
}

/// A completion queue allocated with `ib_alloc_cq()`, freed when the last
/// reference is dropped.
///
/// Every QP created on it holds a reference and reserves room for all the
/// work requests it can have outstanding plus one drain marker per work
/// queue, so a drain can never find the CQ full: a full CQ drops the marker's
/// completion and the drain would wait forever.
///
/// # Examples
///
/// ```
/// use kernel::infiniband::{RegisteredDevice, OwnedCq, OwnedQp, Pd, PollContext, QpConfig};
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
/// let cfg = QpConfig { send_depth: 2, recv_depth: 1 };
/// let qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// // Each queue's depth, plus one for its drain marker.
/// assert_eq!(cq.available(), 8 - (2 + 1) - (1 + 1));
/// // A second such QP does not fit.
/// assert!(matches!(OwnedQp::create_rc(&pd, &cq, &cq, cfg), Err(e) if e == EBUSY));
/// drop(qp);
/// assert_eq!(cq.available(), 8);
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `ptr` is a valid CQ from `ib_alloc_cq()` on `dev`, owned by this object,
/// with `capacity` entries of which `reserved` are promised to QPs. `dev`
/// is dropped only by `Drop`, after the CQ was freed.
pub struct OwnedCq {
    ptr: NonNull<bindings::ib_cq>,
    capacity: u32,
    reserved: Atomic<u32>,
    dev: ManuallyDrop<DeviceRef>,
}

// `Drop` may move an `OwnedCq` out of itself, to defer it: no field may be
// dropped after it.
crate::static_assert!(
    !core::mem::needs_drop::<NonNull<bindings::ib_cq>>()
        && !core::mem::needs_drop::<u32>()
        && !core::mem::needs_drop::<Atomic<u32>>()
        && !core::mem::needs_drop::<ManuallyDrop<DeviceRef>>()
);

// SAFETY: A CQ may be used and freed from any thread.
unsafe impl Send for OwnedCq {}

// SAFETY: The reservation count is atomic; everything else is read-only.
unsafe impl Sync for OwnedCq {}

impl OwnedCq {
    /// Allocates a CQ with `entries` entries on `dev`, polled in `ctx`.
    /// `EINVAL` if `entries` is zero or the device has no completion vector
    /// `comp_vector`.
    #[inline]
    pub fn alloc(
        dev: &DeviceRef,
        entries: u32,
        comp_vector: i32,
        ctx: PollContext,
    ) -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self::alloc_unshared(dev, entries, comp_vector, ctx)?,
            GFP_KERNEL,
        )?)
    }

    /// Like [`OwnedCq::alloc`], for an owner that frees it itself.
    #[inline]
    pub(crate) fn alloc_unshared(
        dev: &DeviceRef,
        entries: u32,
        comp_vector: i32,
        ctx: PollContext,
    ) -> Result<Self> {
        let nr = i32::try_from(entries).map_err(|_| EINVAL)?;
        // SAFETY: `dev` is valid; `num_comp_vectors` is set before it registers.
        let vectors = unsafe { (*dev.as_raw()).num_comp_vectors };
        // ib_alloc_cq() trusts its caller: no entries WARNs, and providers
        // index their vectors unchecked.
        if nr == 0 || !(0..vectors).contains(&comp_vector) {
            return Err(EINVAL);
        }
        // SAFETY: `dev` is a valid, registered device.
        let ptr = from_err_ptr(unsafe {
            bindings::__ib_alloc_cq(
                dev.as_raw(),
                core::ptr::null_mut(),
                nr,
                comp_vector,
                ctx.as_raw(),
                super::kern_name(),
            )
        })?;
        let ptr = NonNull::new(ptr).ok_or(ENOMEM)?;
        // INVARIANT: A new CQ with no QP on it.
        Ok(Self {
            ptr,
            capacity: entries,
            reserved: Atomic::new(0),
            dev: ManuallyDrop::new(dev.clone()),
        })
    }

    /// Reserves `n` entries for a work queue; `EBUSY` if the CQ has no room.
    #[inline]
    pub(crate) fn reserve(&self, n: u32) -> Result {
        let mut old = self.reserved.load(Relaxed);
        loop {
            let new = old
                .checked_add(n)
                .filter(|&t| t <= self.capacity)
                .ok_or(EBUSY)?;
            match self.reserved.cmpxchg(old, new, Relaxed) {
                Ok(_) => return Ok(()),
                Err(cur) => old = cur,
            }
        }
    }

    /// Returns `n` entries reserved with [`OwnedCq::reserve`].
    #[inline]
    pub(crate) fn unreserve(&self, n: u32) {
        self.reserved.fetch_sub(n, Relaxed);
    }

    /// Returns the number of entries not yet reserved by QPs.
    #[inline]
    pub fn available(&self) -> u32 {
        self.capacity - self.reserved.load(Relaxed)
    }

    /// Whether a QP or SRQ still uses the CQ (`usecnt`), which
    /// `ib_free_cq()` would then keep.
    #[inline]
    pub(crate) fn in_use(&self) -> bool {
        // SAFETY: By the type invariant the CQ is valid; `usecnt` is atomic.
        unsafe { bindings::atomic_read(&raw const (*self.ptr.as_ptr()).usecnt) != 0 }
    }

    /// Returns the device the CQ is on.
    #[inline]
    pub fn device(&self) -> &DeviceRef {
        &self.dev
    }
}

impl Deref for OwnedCq {
    type Target = Cq;

    #[inline]
    fn deref(&self) -> &Cq {
        // SAFETY: By the type invariant the CQ is valid while `self` lives.
        unsafe { Cq::from_raw(self.ptr.as_ptr()) }
    }
}

impl Drop for OwnedCq {
    #[inline]
    fn drop(&mut self) {
        if super::defer::must_defer() {
            // SAFETY: No field of `self` is dropped after this (checked beside
            // the struct): the copy takes `self` over, and is dropped again,
            // in process context.
            super::defer::defer_drop(unsafe { core::ptr::read(self) }, "CQ");
            return;
        }
        if self.in_use() {
            // ib_free_cq() would keep it, with a WARN: keep its device too.
            pr_warn!(
                "{}: CQ {} still used when dropped; its memory is leaked\n",
                self.dev.name(),
                self.id()
            );
            return;
        }
        // SAFETY: By the type invariant we own the CQ, and it came from
        // ib_alloc_cq(); nothing uses it. ib_free_cq() waits for a softirq
        // poller that is still running; this is process context, and not a
        // handler of the CQ.
        unsafe { bindings::ib_free_cq(self.ptr.as_ptr()) };
        // SAFETY: By the type invariant only this drop drops `dev`, once,
        // after the CQ was freed.
        unsafe { ManuallyDrop::drop(&mut self.dev) };
    }
}
