// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues.
//!
//! A QP on an SRQ takes its receives from the SRQ, so draining the QP cannot
//! flush them: `ib_drain_qp()` waits for the QP's Last WQE Reached event
//! instead, and the receives stay on the SRQ until it is destroyed, when they
//! are discarded without a completion.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{CompletionHandler, Cqe, OwnedCq, Pd};
use crate::{bindings, error::from_err_ptr, error::to_result, prelude::*};
use core::{marker::PhantomData, mem::ManuallyDrop, ptr::NonNull};

/// A basic SRQ that owns the CQ its receives complete on, destroyed when
/// dropped.
///
/// Every receive posted on it runs the SRQ's one completion handler. The SRQ
/// owns that CQ so that it can free it between destroying the SRQ and
/// forgetting the receives the SRQ discarded: `ib_free_cq()` waits for a
/// poller that may still be running a handler.
///
/// # Invariants
///
/// `ptr` is a valid SRQ owned by this object, with `depth` entries, created
/// on a PD that outlives `'a`. QPs on it use `cq` as their receive CQ, in
/// which `depth` entries are reserved for it. `cq` is dropped only by
/// `PinnedDrop`.
#[pin_data(PinnedDrop)]
pub struct OwnedSrq<'a, H: CompletionHandler> {
    ptr: NonNull<bindings::ib_srq>,
    cq: ManuallyDrop<OwnedCq<'a>>,
    depth: u32,
    #[pin]
    cqe: Cqe<H>,
    _pd: PhantomData<&'a Pd<'a>>,
}

// SAFETY: An SRQ may be used and destroyed from any thread; `Cqe<H>` is
// `Send` for `H: Send`.
unsafe impl<H: CompletionHandler + Send> Send for OwnedSrq<'_, H> {}

// SAFETY: Posting on an SRQ is serialized by the provider; the rest is
// read-only or `Sync`.
unsafe impl<H: CompletionHandler> Sync for OwnedSrq<'_, H> {}

impl<'a, H: CompletionHandler> OwnedSrq<'a, H> {
    /// Creates an SRQ of `depth` receives on `pd`, whose receives complete on
    /// `cq` and run `handler`.
    ///
    /// Fails with `EBUSY` if `cq` has less than `depth` entries free.
    pub fn new(
        pd: &'a Pd<'a>,
        cq: OwnedCq<'a>,
        depth: u32,
        handler: H,
    ) -> impl PinInit<Self, Error> + 'a
    where
        H: 'a,
    {
        try_pin_init!(Self {
            ptr: Self::create(pd, &cq, depth)?,
            cq: ManuallyDrop::new(cq),
            depth,
            cqe <- Cqe::new(handler),
            _pd: PhantomData,
        }? Error)
    }

    fn create(pd: &Pd<'a>, cq: &OwnedCq<'a>, depth: u32) -> Result<NonNull<bindings::ib_srq>> {
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
        })
        .and_then(|p| NonNull::new(p).ok_or(ENOMEM));
        if ptr.is_err() {
            cq.unreserve(depth);
        }
        ptr
    }

    /// Returns the raw `struct ib_srq` pointer.
    pub fn as_raw(&self) -> *mut bindings::ib_srq {
        self.ptr.as_ptr()
    }

    /// Returns the CQ that the receives of the SRQ's QPs complete on.
    pub fn cq(&self) -> &OwnedCq<'a> {
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
    /// SRQ holds `depth` receives, so the CQ never overflows.
    pub fn post(self: Pin<&Self>) -> Result {
        let mut wr = bindings::ib_recv_wr::default();
        let depth = usize::try_from(self.depth)?;
        wr.__bindgen_anon_1.wr_cqe = self.cqe.get_bounded(depth).ok_or(EBUSY)?;
        // SAFETY: The SRQ and `wr` are valid. The `Cqe` is pinned with `self`,
        // and outlives every completion of the SRQ (see `PinnedDrop`).
        let ret = to_result(unsafe {
            bindings::ib_post_srq_recv(self.as_raw(), &wr, core::ptr::null_mut())
        });
        if ret.is_err() {
            self.cqe.put_unposted();
        }
        ret
    }
}

#[pinned_drop]
impl<H: CompletionHandler> PinnedDrop for OwnedSrq<'_, H> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant we own the SRQ; its QPs borrow `self`,
        // so they are destroyed already.
        let ret = unsafe { bindings::ib_destroy_srq_user(self.as_raw(), core::ptr::null_mut()) };
        if ret != 0 {
            pr_warn!("ib_destroy_srq_user() failed: {ret}\n");
        }
        // SAFETY: `cq` is not used again (`cqe` and `PhantomData` are all that
        // is left), and it is not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        this.cq.unreserve(this.depth);
        // SAFETY: By the type invariant only this drop drops `cq`, once.
        unsafe { ManuallyDrop::drop(&mut this.cq) };
        // The CQ is freed, so no handler runs any more: what is still counted
        // sat on the SRQ and was discarded with it.
        this.cqe.forget_outstanding();
    }
}
