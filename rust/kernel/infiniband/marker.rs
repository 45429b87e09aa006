// SPDX-License-Identifier: GPL-2.0

//! The marker work request that drains a work queue.
//!
//! A drain posts one work request behind everything else on the queue and
//! waits until the consumer has reaped its completion. Completions are reaped
//! in order, so by then every earlier completion has been consumed.
//!
//! The drain waits for it untimed and uninterruptibly, as the C drain does,
//! so that the hung-task detector (and `hung_task_panic`) sees a drain that
//! never ends exactly as it would see the C drain.

use crate::{bindings, container_of, prelude::*, sync::Completion, time::Jiffies, types::Opaque};
use core::cell::Cell;

/// A drain marker: an `ib_cqe` whose `done` callback completes a [`Completion`].
///
/// It is posted only through the queue's
/// [`WorkQueue::post_marker`](super::WorkQueue::post_marker). The provider
/// keeps a pointer to the marker from then until its completion is reaped,
/// so the marker is pinned, and dropping a posted marker waits for that
/// completion first: it can never be freed while the provider may still
/// touch it.
///
/// # Invariants
///
/// `cqe.done` is [`DrainMarker::done_callback`].
///
/// # Examples
///
/// Only a drain posts a marker. One that was never posted is not done, and
/// waiting for it returns at once:
///
/// ```
/// use kernel::infiniband::DrainMarker;
/// use pin_init::stack_pin_init;
///
/// stack_pin_init!(let marker = DrainMarker::new());
/// assert!(!marker.is_done());
/// marker.as_ref().wait();
/// assert!(!marker.is_done());
/// # Ok::<(), Error>(())
/// ```
#[pin_data(PinnedDrop)]
pub struct DrainMarker {
    #[pin]
    cqe: Opaque<bindings::ib_cqe>,
    #[pin]
    done: Completion,
    state: Cell<State>,
}

/// Where a marker is in its one use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not posted yet.
    Fresh,
    /// Posted: the provider points at it until its completion is reaped.
    Posted,
    /// Its completion was reaped; it cannot be posted again.
    Reaped,
}

impl DrainMarker {
    /// Creates an initializer for a new, not yet posted marker.
    #[inline]
    pub fn new() -> impl PinInit<Self> {
        // INVARIANT: `cqe.done` is set to `done_callback` here and never
        // changed.
        pin_init!(Self {
            cqe: Opaque::new(bindings::ib_cqe {
                done: Some(Self::done_callback),
            }),
            done <- Completion::new(),
            state: Cell::new(State::Fresh),
        })
    }

    /// Runs in the CQ's poll context when the marker's completion is reaped.
    ///
    /// # Safety
    ///
    /// `wc` must be a valid work completion whose `wr_cqe` is the `cqe` of a
    /// live [`DrainMarker`].
    #[inline(never)]
    unsafe extern "C" fn done_callback(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // SAFETY: The caller guarantees that `wc` is valid.
        let cqe = unsafe { (*wc).__bindgen_anon_1.wr_cqe };
        // SAFETY: `cqe` points to the `cqe` field of a live `DrainMarker`
        // (`Opaque<T>` is a transparent wrapper of `T`).
        let marker = unsafe { container_of!(cqe.cast::<Opaque<bindings::ib_cqe>>(), Self, cqe) };
        // SAFETY: The marker is live: a posted marker is not dropped before this
        // completion has run (see `PinnedDrop`). Only the `Sync` field is used.
        unsafe { (*marker).done.complete_all() };
    }

    /// Returns the `ib_cqe` to put in a work request's `wr_cqe`, if the
    /// marker was never posted: a marker serves once.
    #[inline]
    pub(crate) fn cqe_if_fresh(&self) -> Option<*mut bindings::ib_cqe> {
        if self.state.get() != State::Fresh {
            return None;
        }
        // From a pointer to the whole marker, not to the field:
        // `done_callback` goes from the `ib_cqe` back to the marker.
        let this = core::ptr::from_ref(self);
        // SAFETY: `this` comes from a reference, so it is valid to project.
        Some(Opaque::cast_into(unsafe { &raw const (*this).cqe }))
    }

    /// Records that the marker was posted: from now on it must complete.
    #[inline]
    pub(crate) fn set_posted(&self) {
        self.state.set(State::Posted);
    }

    /// Returns `true` once the marker's completion has been reaped.
    #[inline]
    pub fn is_done(&self) -> bool {
        let done = self.done.completion_done();
        if done {
            // The provider is done with the marker: its drop need not wait.
            self.state.set(State::Reaped);
        }
        done
    }

    /// Waits at most `timeout` until the marker's completion has been
    /// reaped; returns `true` if it has, or if the marker is not posted.
    ///
    /// The task sleeps uninterruptibly, as in the C drain.
    #[inline]
    pub fn wait_timeout(self: Pin<&Self>, timeout: Jiffies) -> bool {
        if self.state.get() != State::Posted {
            return true;
        }
        let done = self.done.wait_for_completion_timeout(timeout);
        if done {
            self.state.set(State::Reaped);
        }
        done
    }

    /// Waits, however long it takes, until the marker's completion has been
    /// reaped. Returns at once if the marker is not posted.
    ///
    /// The task sleeps untimed and uninterruptibly, as in the C drain, so the
    /// hung-task detector reports a wait that never ends.
    #[inline]
    pub fn wait(self: Pin<&Self>) {
        if self.state.get() != State::Posted {
            return;
        }
        self.done.wait_for_completion();
        self.state.set(State::Reaped);
    }
}

#[pinned_drop]
impl PinnedDrop for DrainMarker {
    fn drop(self: Pin<&mut Self>) {
        if self.state.get() != State::Posted {
            return;
        }
        // The provider still points at this marker: freeing it before its
        // completion would be a use-after-free. Wait as `wait` does.
        self.as_ref().wait();
    }
}
