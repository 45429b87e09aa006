// SPDX-License-Identifier: GPL-2.0

//! The marker work request that drains a work queue.
//!
//! A drain posts one work request behind everything else on the queue and
//! waits until the consumer has reaped its completion. Completions are reaped
//! in order, so by then every earlier completion has been consumed.

use crate::{
    bindings, container_of,
    prelude::*,
    sync::Completion,
    time::{msecs_to_jiffies, Jiffies},
    types::Opaque,
};
use core::cell::Cell;

/// A drain marker: an `ib_cqe` whose `done` callback completes a [`Completion`].
///
/// The provider keeps a pointer to the marker from the moment it is posted
/// until its completion is reaped, so the marker is pinned, and dropping a
/// posted marker waits for that completion first: it can never be freed while
/// the provider may still touch it.
///
/// # Invariants
///
/// `cqe.done` is [`DrainMarker::done_callback`].
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
        // INVARIANT: `cqe.done` is set to `done_callback` here and never changed.
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

    /// Returns the `ib_cqe` to put in a work request's `wr_cqe`.
    #[inline]
    pub(crate) fn cqe(&self) -> *mut bindings::ib_cqe {
        self.cqe.get()
    }

    /// Records that the marker was posted: from now on it must complete.
    #[inline]
    pub(crate) fn set_posted(&self) {
        self.state.set(State::Posted);
    }

    /// Returns `true` if the marker was never posted: a marker serves once.
    #[inline]
    pub fn is_fresh(&self) -> bool {
        self.state.get() == State::Fresh
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

    /// Waits at most `timeout` for the marker's completion to be reaped.
    ///
    /// Returns `true` if it was.
    #[inline]
    pub fn wait_timeout(&self, timeout: Jiffies) -> bool {
        let done = self.done.wait_for_completion_timeout(timeout);
        if done {
            // As in `is_done`.
            self.state.set(State::Reaped);
        }
        done
    }
}

#[pinned_drop]
impl PinnedDrop for DrainMarker {
    fn drop(self: Pin<&mut Self>) {
        if self.state.get() != State::Posted {
            return;
        }
        // The provider still points at this marker: freeing it before its
        // completion would be a use-after-free, so wait, however long it takes.
        while !self
            .done
            .wait_for_completion_timeout(msecs_to_jiffies(10_000))
        {
            pr_warn!("RDMA drain marker still pending, waiting for its completion\n");
        }
    }
}
