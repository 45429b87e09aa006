// SPDX-License-Identifier: GPL-2.0

//! Teardowns deferred out of completion handlers and atomic context.
//!
//! Dropping a QP drains it, and dropping a CQ frees it, which waits for its
//! poller: in a completion handler that waits for the very completion being
//! handled, and in softirq context it may not sleep (nor may a provider
//! destroying a PD). So a QP, CQ, SRQ or PD dropped there is dropped again
//! later, in process context, on ib_core's teardown workqueue
//! (`ib_defer_drop()`); a module goes only once no teardown is pending, as
//! the teardown is its code.

use crate::{alloc::flags::__GFP_NOWARN, bindings, prelude::*, types::Opaque};
use core::mem::ManuallyDrop;

/// Whether a teardown here must be deferred: in a counted entry's `done`
/// or `release` (a completion handler, or a handler's drop), or in atomic
/// context (ib_core's `ib_counted_cqe_in_done()`).
#[inline]
pub(crate) fn must_defer() -> bool {
    // SAFETY: It reads the current context; no preconditions.
    unsafe { bindings::ib_counted_cqe_in_done() }
}

/// A value to drop on ib_core's teardown workqueue.
///
/// # Invariants
///
/// `raw.run` is `run::<T>`.
#[repr(C)]
struct Deferred<T> {
    /// First: `run` goes from it back to the whole.
    raw: Opaque<bindings::ib_deferred_drop>,
    value: ManuallyDrop<T>,
}

/// Called by ib_core on its teardown workqueue: drops the value and frees
/// the box.
///
/// # Safety
///
/// `d` must be the `raw` of a `Deferred<T>` that [`defer_drop`] allocated,
/// run once.
unsafe extern "C" fn run<T>(d: *mut bindings::ib_deferred_drop) {
    // SAFETY: `raw` is the first field of the `repr(C)` `Deferred<T>`, which
    // `defer_drop` allocated as a `KBox` and handed to ib_core, which gives
    // it back once.
    let mut d = unsafe { KBox::from_raw(d.cast::<Deferred<T>>()) };
    // SAFETY: The value is dropped once, here.
    unsafe { ManuallyDrop::drop(&mut d.value) };
}

/// Drops `value` in process context, on ib_core's teardown workqueue.
///
/// Without memory for the work item (`GFP_ATOMIC`), `value` is leaked, with
/// a line: what a provider may still use is never freed.
#[inline]
pub(crate) fn defer_drop<T: Send + 'static>(value: T, what: &str) {
    let run: unsafe extern "C" fn(*mut bindings::ib_deferred_drop) = run::<T>;
    let Ok(slot) = KBox::<Deferred<T>>::new_uninit(GFP_ATOMIC | __GFP_NOWARN) else {
        pr_err!("RDMA: no memory to tear a {what} down in process context; it is leaked\n");
        core::mem::forget(value);
        return;
    };
    // INVARIANT: `run` is `run::<T>`.
    let d = KBox::into_raw(KBox::write(
        slot,
        Deferred {
            raw: Opaque::new(bindings::ib_deferred_drop {
                run: Some(run),
                ..Default::default()
            }),
            value: ManuallyDrop::new(value),
        },
    ));
    // SAFETY: `d` is valid; its `raw` is set up as ib_defer_drop() asks, and
    // handed over to it, which gives it back to `run` once.
    unsafe { bindings::ib_defer_drop(Opaque::cast_into(&raw const (*d).raw)) };
}
