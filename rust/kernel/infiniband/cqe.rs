// SPDX-License-Identifier: GPL-2.0

//! Completion handlers for posted work requests.

use crate::{
    bindings, container_of,
    error::to_result,
    ffi::{c_long, c_void},
    prelude::*,
    sync::atomic::{Acquire, Atomic, Relaxed},
    time::{delay::fsleep, Delta},
    types::Opaque,
};

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
/// use pin_init::stack_pin_init;
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
/// stack_pin_init!(let cqe = Cqe::new(Flushed(Atomic::new(0))));
/// let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, QpConfig { send_depth: 0, recv_depth: 2 })?;
/// qp.init(1)?;
/// qp.rq().post(cqe.as_ref())?;
/// qp.rq().post(cqe.as_ref())?;
/// qp.drain_rq();
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
/// use pin_init::stack_pin_init;
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
/// stack_pin_init!(let sent = Cqe::new(Counts::new()));
/// stack_pin_init!(let received = Cqe::new(Counts::new()));
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
/// b.rq().post(received.as_ref())?;
/// a.sq().post_send(sent.as_ref())?;
/// for _ in 0..5000 {
///     if sent.outstanding() + received.outstanding() == 0 {
///         break;
///     }
///     fsleep(Delta::from_millis(1));
/// }
/// # // Nothing in flight if a check fails: a failed check drops nothing.
/// # a.drain();
/// # b.drain();
/// assert_eq!(sent.handler().ok.load(Relaxed), 1);
/// assert_eq!(received.handler().ok.load(Relaxed), 1);
/// assert_eq!(received.handler().failed.load(Relaxed), 0);
/// # Ok::<(), Error>(())
/// ```
///
/// A handler borrows nothing (`'static`): a posted [`Cqe`] may be leaked
/// (`mem::forget` of its box), and the provider then calls its handler later,
/// on a flush or a peer's send, long after any borrowed stack frame is gone.
///
/// `done` may post again, but must not drain, nor drop the [`Cqe`], QP, SRQ
/// or CQ of the completion it handles: each waits for this very completion,
/// and may sleep where `done` runs in softirq context.
pub trait CompletionHandler: Sync + 'static {
    /// Called once per completed work request: in the CQ's poll context, or
    /// in the task that drains a QP on an SRQ (process context).
    fn done(&self, wc: &WorkCompletion);
}

/// A completion entry that any number of posted work requests can point to.
///
/// The provider keeps a pointer to it until each of those work requests has
/// completed, so it is pinned, and dropping it waits until none is
/// outstanding. Drain the QP before dropping a `Cqe` that was posted on it.
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
/// use pin_init::stack_pin_init;
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
/// // Declared before the QP, so that it is dropped after the QP is drained.
/// stack_pin_init!(let cqe = Cqe::new(Ignore));
/// let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, QpConfig { send_depth: 0, recv_depth: 3 })?;
/// qp.init(1)?;
/// for _ in 0..3 {
///     qp.rq().post(cqe.as_ref())?;
/// }
/// assert_eq!(cqe.outstanding(), 3);
/// qp.drain_rq();
/// assert_eq!(cqe.outstanding(), 0);
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `inner` is an `ib_counted_cqe` whose `cqe.done` is ib_core's
/// `ib_counted_cqe_done()` and whose `done` is `Cqe::<H>::done_callback`;
/// `inner.outstanding` counts the posted work requests whose completion has
/// not returned yet, each also counted by `ib_counted_cqe_post()`; it is only
/// accessed atomically.
#[pin_data(PinnedDrop)]
pub struct Cqe<H: CompletionHandler> {
    handler: H,
    #[pin]
    inner: Opaque<bindings::ib_counted_cqe>,
}

// SAFETY: The C side only reads `inner` after initialization, but for
// `inner.owner`, which ib_core sets once under its lock, and
// `inner.outstanding`, which is atomic; `H` is `Sync`.
unsafe impl<H: CompletionHandler> Sync for Cqe<H> {}

// SAFETY: As for `Sync`; nothing in a `Cqe` is tied to a thread.
unsafe impl<H: CompletionHandler + Send> Send for Cqe<H> {}

impl<H: CompletionHandler> Cqe<H> {
    /// Creates an initializer for a completion entry that calls `handler`.
    ///
    /// The module that `H`'s code is in is held (a module reference) while a
    /// work request posted with the entry is outstanding, so that the
    /// provider never calls freed code, even if the entry and its QP are
    /// leaked: `rmmod` is refused meanwhile (ib_core's `counted_cqe.c`).
    pub fn new(handler: H) -> impl PinInit<Self> {
        let done: unsafe extern "C" fn(*mut bindings::ib_cq, *mut bindings::ib_wc) =
            Self::done_callback;
        // INVARIANT: `inner` is set here once; nothing is posted yet.
        pin_init!(Self {
            handler,
            inner <- Opaque::ffi_init(move |slot: *mut bindings::ib_counted_cqe| {
                // SAFETY: `slot` is valid for writes.
                unsafe {
                    slot.write(bindings::ib_counted_cqe {
                        cqe: bindings::ib_cqe {
                            done: Some(bindings::ib_counted_cqe_done),
                        },
                        done: Some(done),
                        mod_: super::module_of(done as *const c_void),
                        owner: core::ptr::null_mut(),
                        outstanding: bindings::atomic_long_t { counter: 0 },
                    })
                };
            }),
        })
    }

    /// Returns the handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Returns the number of posted work requests not completed yet.
    pub fn outstanding(&self) -> usize {
        // CAST: The count is never negative.
        self.count().load(Acquire) as usize
    }

    /// The count of posted work requests whose completion has not returned
    /// yet (`inner.outstanding`), which ib_core decrements.
    fn count(&self) -> &Atomic<c_long> {
        // SAFETY: `raw_inner()` is valid to project.
        let counter = unsafe { &raw mut (*self.raw_inner()).outstanding.counter };
        // CAST: `atomic_long_t` is `atomic64_t` or `atomic_t` as `long` is 64
        // or 32 bits wide, so its counter has the size and alignment of a
        // `long`, and `Atomic<c_long>` uses the same atomic operations.
        crate::static_assert!(
            size_of::<bindings::atomic_long_t>() == size_of::<c_long>()
                && align_of::<bindings::atomic_long_t>() == align_of::<c_long>()
        );
        // SAFETY: `inner` was initialized by `Cqe::new` and lives as long as
        // `self`; `outstanding` is only accessed atomically, here and by
        // ib_core's `atomic_long_*()`.
        unsafe { Atomic::from_ptr(counter.cast::<c_long>()) }
    }

    /// Called by ib_core's `ib_counted_cqe_done()`, which then lets the
    /// module go if this was its last outstanding work request, and then
    /// takes the work request off the entry's count.
    ///
    /// # Safety
    ///
    /// `wc` must be a valid work completion whose `wr_cqe` is the `cqe` of
    /// the `inner` of a live `Cqe<H>`.
    unsafe extern "C" fn done_callback(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // SAFETY: The caller guarantees that `wc` is valid.
        let cqe = unsafe { (*wc).__bindgen_anon_1.wr_cqe };
        // SAFETY: `cqe` is the `cqe` field of the `inner` of a live `Cqe<H>`
        // (`Opaque<T>` is a transparent wrapper of `T`); it was posted with a
        // pointer from the whole entry (`raw_inner`).
        let this = unsafe {
            let inner = container_of!(cqe, bindings::ib_counted_cqe, cqe);
            &*container_of!(
                inner.cast::<Opaque<bindings::ib_counted_cqe>>(),
                Self,
                inner
            )
        };
        // SAFETY: `WorkCompletion` is a transparent wrapper of `struct ib_wc`.
        this.handler.done(unsafe { &*wc.cast::<WorkCompletion>() });
    }

    /// The `ib_counted_cqe`, from a pointer to the whole entry, not to the
    /// field: `done_callback` goes from it back to the entry.
    fn raw_inner(&self) -> *mut bindings::ib_counted_cqe {
        let this = core::ptr::from_ref(self);
        // SAFETY: `this` comes from a reference, so it is valid to project.
        Opaque::cast_into(unsafe { &raw const (*this).inner })
    }

    /// Counts a work request about to be posted with this entry, unless
    /// `max` are outstanding already (`EBUSY`); returns the `ib_cqe` to post
    /// it with.
    pub(crate) fn count_post(&self, max: usize) -> Result<*mut bindings::ib_cqe> {
        let count = self.count();
        let mut n = count.load(Relaxed);
        loop {
            // CAST: The count is never negative.
            if n as usize >= max {
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
        // posts (a count of work requests fits in a `long`).
        unsafe { bindings::ib_counted_cqe_unpost(self.inner.get(), n as c_long) };
    }

    /// Forgets every work request still counted: see [`Cqe::uncount`].
    pub(crate) fn forget_outstanding(&self) {
        self.uncount(self.outstanding());
    }
}

#[pinned_drop]
impl<H: CompletionHandler> PinnedDrop for Cqe<H> {
    fn drop(self: Pin<&mut Self>) {
        // A posted work request still points at this entry: wait for it.
        let mut waited_ms = 0u32;
        while self.outstanding() != 0 {
            fsleep(Delta::from_millis(1));
            waited_ms += 1;
            if waited_ms % 10_000 == 0 {
                pr_warn!(
                    "RDMA completion entry dropped with {} work requests outstanding, waiting\n",
                    self.outstanding()
                );
            }
        }
        // SAFETY: `inner` was initialized by `Cqe::new`; nothing is posted
        // with it, and it is freed after this.
        unsafe { bindings::ib_counted_cqe_release(self.inner.get()) };
    }
}
