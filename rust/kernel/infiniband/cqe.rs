// SPDX-License-Identifier: GPL-2.0

//! Completion handlers for posted work requests.

use crate::{
    bindings, container_of,
    error::to_result,
    ffi::{c_long, c_void},
    prelude::*,
    sync::atomic::{Acquire, Atomic, Relaxed},
    types::Opaque,
};
use core::ptr::NonNull;

/// Status of a work completion.
///
/// # Examples
///
/// Receives still posted when the QP goes to the error state are flushed:
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, Cqe, OwnedCq, OwnedQp, Pd, PollContext, QpConfig, RegisteredDevice,
///     WcStatus, WorkCompletion,
/// };
/// use kernel::sync::atomic::{Atomic, Relaxed};
///
/// struct Flushed(Atomic<u32>);
///
/// impl CompletionHandler for Flushed {
///     fn done(&self, wc: &WorkCompletion) {
///         if wc.status() == WcStatus::FlushError {
///             self.0.add(1, Relaxed);
///         }
///     }
/// }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
/// let cqe = Cqe::new(Flushed(Atomic::new(0)))?;
/// let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, QpConfig { send_depth: 0, recv_depth: 2 })?;
/// qp.init(1)?;
/// qp.rq().post(&cqe)?;
/// qp.rq().post(&cqe)?;
/// qp.drain_rq()?;
/// assert_eq!(cqe.handler().0.load(Relaxed), 2);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// The work request completed successfully.
    Success,
    /// The work request was flushed: the QP was in the error state.
    FlushError,
    /// Any other error, with its `enum ib_wc_status` value.
    Other(u32),
}

/// A work completion, as passed to [`CompletionHandler::done`].
///
/// It does not give the QP the work request was posted on: a CQ may have
/// several pollers, and the QP may be destroyed while one of them runs a
/// handler. A handler knows its work requests by its [`Cqe`].
#[repr(transparent)]
pub struct WorkCompletion(bindings::ib_wc);

impl WorkCompletion {
    /// Returns the completion's status.
    pub fn status(&self) -> WcStatus {
        match self.0.status {
            bindings::ib_wc_status_IB_WC_SUCCESS => WcStatus::Success,
            bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR => WcStatus::FlushError,
            other => WcStatus::Other(other),
        }
    }

    /// Returns the number of bytes a receive got (`byte_len`); meaningful
    /// only for a receive that completed successfully.
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
}

/// What to do when a work request's completion is reaped.
///
/// # Examples
///
/// A handler that counts completions by status, and a receive that is
/// matched by a send from another QP:
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, Cqe, RegisteredDevice, GidAttr, Mtu, OwnedCq, OwnedQp, Pd, PollContext,
///     QpConfig, RcParams, WcStatus, WorkCompletion,
/// };
/// use kernel::sync::atomic::{Atomic, Relaxed};
/// use kernel::time::{delay::fsleep, Delta};
///
/// struct Counts {
///     ok: Atomic<u32>,
///     failed: Atomic<u32>,
/// }
///
/// impl Counts {
///     fn new() -> Self {
///         Self { ok: Atomic::new(0), failed: Atomic::new(0) }
///     }
/// }
///
/// impl CompletionHandler for Counts {
///     fn done(&self, wc: &WorkCompletion) {
///         match wc.status() {
///             WcStatus::Success => self.ok.add(1, Relaxed),
///             _ => self.failed.add(1, Relaxed),
///         }
///     }
/// }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
/// let sent = Cqe::new(Counts::new())?;
/// let received = Cqe::new(Counts::new())?;
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
/// for _ in 0..5000 {
///     if sent.outstanding() + received.outstanding() == 0 {
///         break;
///     }
///     fsleep(Delta::from_millis(1));
/// }
/// # // Nothing in flight if a check fails: a failed check drops nothing.
/// # a.drain()?;
/// # b.drain()?;
/// assert_eq!(sent.handler().ok.load(Relaxed), 1);
/// assert_eq!(received.handler().ok.load(Relaxed), 1);
/// assert_eq!(received.handler().failed.load(Relaxed), 0);
/// # Ok::<(), Error>(())
/// ```
///
/// A handler borrows nothing (`'static`): a [`Cqe`] may be leaked
/// (`mem::forget`), or dropped with work requests outstanding, and the
/// provider then calls its handler later, on a flush or a peer's send, long
/// after any borrowed stack frame is gone. The handler is dropped with the
/// last of them, on whichever thread that is (`Send`).
///
/// `done` runs without preemption, in every poll context, and must not
/// sleep, nor call what may (creating, modifying or querying an object,
/// [`Device::name`](super::Device::name)); the handler's drop neither.
/// Either may post again, and drop what it holds: a [`Cqe`] never waits,
/// and the QPs, CQs, SRQs and PDs dropped there are torn down later, in
/// process context. A drain from there is refused (`EDEADLK`): it would
/// wait for the very completion being handled.
pub trait CompletionHandler: Send + Sync + 'static {
    /// Called once per completed work request: in the CQ's poll context, or
    /// in the task that drains a QP on an SRQ; without preemption.
    fn done(&self, wc: &WorkCompletion);
}

/// A completion entry that any number of posted work requests can point to,
/// with the handler they run.
///
/// A reference to an entry that ib_core counts (`struct ib_counted_cqe`):
/// each posted work request holds one until its completion has returned,
/// so dropping a `Cqe` never waits, and the entry, with its handler, is
/// freed by whichever of them goes last. The module of the handler is held
/// while work requests are outstanding (ib_core's `counted_cqe.c`).
///
/// # Examples
///
/// One entry for all the receives of a queue:
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, Cqe, RegisteredDevice, OwnedCq, OwnedQp, Pd, PollContext, QpConfig,
///     WorkCompletion,
/// };
///
/// struct Ignore;
///
/// impl CompletionHandler for Ignore {
///     fn done(&self, _wc: &WorkCompletion) {}
/// }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::UnboundWorkqueue)?;
/// let cqe = Cqe::new(Ignore)?;
/// let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, QpConfig { send_depth: 0, recv_depth: 3 })?;
/// qp.init(1)?;
/// for _ in 0..3 {
///     qp.rq().post(&cqe)?;
/// }
/// assert_eq!(cqe.outstanding(), 3);
/// qp.drain_rq()?;
/// assert_eq!(cqe.outstanding(), 0);
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `ptr` points to a live [`Entry<H>`] made by [`Cqe::new`], on which this
/// object holds one of the references that `inner.refs` counts.
pub struct Cqe<H: CompletionHandler> {
    ptr: NonNull<Entry<H>>,
}

/// The entry a [`Cqe`] refers to.
///
/// # Invariants
///
/// `inner` is an `ib_counted_cqe` whose `cqe.done` is ib_core's
/// `ib_counted_cqe_done()`, whose `done` and `release` are
/// `Cqe::<H>::done_callback` and `Cqe::<H>::release_callback`, and whose
/// `refs` counts the [`Cqe`] that refers to it, if it lives, and the posted
/// work requests whose completion has not returned yet, each also counted
/// by `ib_counted_cqe_post()`; `refs` is only accessed atomically. The
/// entry is a `KBox` allocation, freed by `release_callback` when `refs`
/// drops to zero.
#[repr(C)]
struct Entry<H> {
    /// First: `release_callback` goes from it back to the entry.
    inner: Opaque<bindings::ib_counted_cqe>,
    handler: H,
}

// SAFETY: Through `&Cqe` only the handler (`Sync`) and the atomic count are
// reached; ib_core reads `inner` only after initialization, but for
// `inner.owner`, which it sets once under its lock.
unsafe impl<H: CompletionHandler> Sync for Cqe<H> {}

// SAFETY: Dropping a `Cqe` on any thread may drop the handler there, which
// is `Send`; nothing else in it is tied to a thread.
unsafe impl<H: CompletionHandler> Send for Cqe<H> {}

impl<H: CompletionHandler> Cqe<H> {
    /// Creates a completion entry that calls `handler`.
    ///
    /// The module that `H`'s code is in is held (a module reference) while a
    /// work request posted with the entry is outstanding, so that the
    /// provider never calls freed code, even if the entry and its QP are
    /// leaked: `rmmod` is refused meanwhile (ib_core's `counted_cqe.c`).
    pub fn new(handler: H) -> Result<Self> {
        let done: unsafe extern "C" fn(*mut bindings::ib_cq, *mut bindings::ib_wc) =
            Self::done_callback;
        let release: unsafe extern "C" fn(*mut bindings::ib_counted_cqe) = Self::release_callback;
        let entry = KBox::new(
            Entry {
                inner: Opaque::new(bindings::ib_counted_cqe {
                    cqe: bindings::ib_cqe {
                        done: Some(bindings::ib_counted_cqe_done),
                    },
                    done: Some(done),
                    release: Some(release),
                    mod_: super::module_of(done as *const c_void),
                    owner: core::ptr::null_mut(),
                    refs: bindings::atomic_long_t { counter: 1 },
                }),
                handler,
            },
            GFP_KERNEL,
        )?;
        // INVARIANT: A new entry, whose one reference is this object's.
        Ok(Self {
            // SAFETY: `KBox::into_raw` returns a non-null pointer.
            ptr: unsafe { NonNull::new_unchecked(KBox::into_raw(entry)) },
        })
    }

    /// Returns the handler.
    pub fn handler(&self) -> &H {
        // SAFETY: By the type invariant the entry lives while `self` does.
        unsafe { &(*self.ptr.as_ptr()).handler }
    }

    /// Returns the number of posted work requests not completed yet.
    pub fn outstanding(&self) -> usize {
        // CAST: The count is at least one, this object's.
        (self.count().load(Acquire) - 1) as usize
    }

    /// The count of references to the entry (`inner.refs`), which ib_core
    /// decrements.
    fn count(&self) -> &Atomic<c_long> {
        // SAFETY: `raw_inner()` is valid to project.
        let counter = unsafe { &raw mut (*self.raw_inner()).refs.counter };
        // CAST: `atomic_long_t` is `atomic64_t` or `atomic_t` as `long` is 64
        // or 32 bits wide, so its counter has the size and alignment of a
        // `long`, and `Atomic<c_long>` uses the same atomic operations.
        crate::static_assert!(
            size_of::<bindings::atomic_long_t>() == size_of::<c_long>()
                && align_of::<bindings::atomic_long_t>() == align_of::<c_long>()
        );
        // SAFETY: The entry lives as long as `self`; `refs` is only accessed
        // atomically, here and by ib_core's `atomic_long_*()`.
        unsafe { Atomic::from_ptr(counter.cast::<c_long>()) }
    }

    /// Called by ib_core's `ib_counted_cqe_done()`, which then drops the
    /// work request's reference to the entry and lets the module go if this
    /// was its last outstanding work request.
    ///
    /// # Safety
    ///
    /// `wc` must be a valid work completion whose `wr_cqe` is the `cqe` of
    /// the `inner` of a live `Entry<H>`.
    unsafe extern "C" fn done_callback(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // SAFETY: The caller guarantees that `wc` is valid.
        let cqe = unsafe { (*wc).__bindgen_anon_1.wr_cqe };
        let entry =
            // SAFETY: `cqe` is the `cqe` field of the `inner` of a live
            // `Entry<H>`, which the completion's reference keeps; `inner` is
            // its first field (`repr(C)`), and `Opaque<T>` a transparent
            // wrapper of `T`.
            unsafe { &*container_of!(cqe, bindings::ib_counted_cqe, cqe).cast::<Entry<H>>() };
        // SAFETY: `WorkCompletion` is a transparent wrapper of `struct ib_wc`.
        entry.handler.done(unsafe { &*wc.cast::<WorkCompletion>() });
    }

    /// Called by ib_core when the last reference to the entry is dropped:
    /// frees it, and drops the handler.
    ///
    /// # Safety
    ///
    /// `c` must be the `inner` of an `Entry<H>` made by [`Cqe::new`], to
    /// which no reference is left.
    unsafe extern "C" fn release_callback(c: *mut bindings::ib_counted_cqe) {
        // SAFETY: `inner` is the first field of the `repr(C)` entry, which
        // `Cqe::new` allocated as a `KBox` and nothing refers to any more.
        drop(unsafe { KBox::from_raw(c.cast::<Entry<H>>()) });
    }

    /// The entry's `ib_counted_cqe`, from a pointer to the whole entry, not
    /// to the field: ib_core's callbacks go from it back to the entry.
    fn raw_inner(&self) -> *mut bindings::ib_counted_cqe {
        // SAFETY: By the type invariant the entry lives while `self` does, so
        // the pointer is valid to project.
        Opaque::cast_into(unsafe { &raw const (*self.ptr.as_ptr()).inner })
    }

    /// Counts a work request about to be posted with this entry, unless
    /// `max` are outstanding already (`EBUSY`); returns the `ib_cqe` to post
    /// it with.
    pub(crate) fn count_post(&self, max: usize) -> Result<*mut bindings::ib_cqe> {
        let count = self.count();
        let mut n = count.load(Relaxed);
        loop {
            // CAST: The count is at least one, this object's.
            if (n - 1) as usize >= max {
                return Err(EBUSY);
            }
            match count.cmpxchg(n, n + 1, Relaxed) {
                Ok(_) => break,
                Err(cur) => n = cur,
            }
        }
        let inner = self.raw_inner();
        // SAFETY: `inner` was initialized by `Cqe::new`.
        if let Err(e) = to_result(unsafe { bindings::ib_counted_cqe_post(inner) }) {
            // This object's reference keeps the count above zero.
            count.fetch_sub(1, Relaxed);
            return Err(e);
        }
        // SAFETY: `inner` is valid to project.
        Ok(unsafe { &raw mut (*inner).cqe })
    }

    /// Undoes [`Cqe::count_post`] for `n` work requests that will never
    /// complete: not posted, or posted to a queue that was destroyed (and its
    /// CQ freed) without completing them.
    pub(crate) fn uncount(&self, n: usize) {
        // SAFETY: `inner` was initialized by `Cqe::new`, and counted `n`
        // posts (a count of work requests fits in a `long`); this object's
        // reference keeps the entry.
        unsafe { bindings::ib_counted_cqe_unpost(self.raw_inner(), n as c_long) };
    }

    /// Forgets every work request still counted: see [`Cqe::uncount`].
    pub(crate) fn forget_outstanding(&self) {
        self.uncount(self.outstanding());
    }
}

impl<H: CompletionHandler> Drop for Cqe<H> {
    fn drop(&mut self) {
        // SAFETY: By the type invariant this object holds a reference to the
        // entry, given back here; whichever reference goes last frees it.
        unsafe { bindings::ib_counted_cqe_put(self.raw_inner()) };
    }
}
