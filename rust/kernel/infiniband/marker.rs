// SPDX-License-Identifier: GPL-2.0

//! The marker work request that drains a work queue.
//!
//! A drain posts one work request behind everything else on the queue and
//! waits until the consumer has reaped its completion. Completions are reaped
//! in order, so by then every earlier completion has been consumed.
//!
//! A drain that waits too long must say so, but a timer per wait costs about
//! as much as the rest of the drain's own work. So the waits are untimed, and
//! one watchdog, which runs only while drains wait, wakes those that wait too
//! long so that they can report themselves.

use crate::{
    bindings, container_of, new_spinlock,
    prelude::*,
    sync::{atomic::Acquire, atomic::Atomic, atomic::Relaxed, atomic::Release},
    sync::{Arc, Completion, SetOnce, SpinLock},
    time::msecs_to_jiffies,
    types::Opaque,
    workqueue::{self, impl_has_delayed_work, new_delayed_work, DelayedWork, WorkItem},
};
use core::{cell::Cell, marker::PhantomPinned, ptr::null};

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
    /// The watchdog has woken the waiter, which has not looked yet.
    poked: Atomic<bool>,
    /// Its place on the watchdog's list while a drain waits on it.
    watch: Watch,
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
            poked: Atomic::new(false),
            watch: Watch::new(),
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

    /// Waits, however long it takes, until the marker's completion has been
    /// reaped, and calls `stuck` every `every_ms` milliseconds (give or take a
    /// second) while it waits. Returns at once if the marker is not posted.
    #[inline]
    pub fn wait_reporting(self: Pin<&Self>, every_ms: u32, mut stuck: impl FnMut()) {
        if self.state.get() != State::Posted {
            return;
        }
        let Some(dog) = Watchdog::get() else {
            // No watchdog (it could not be allocated): a timer per wait.
            while !self
                .done
                .wait_for_completion_timeout(msecs_to_jiffies(every_ms))
            {
                stuck();
            }
            self.state.set(State::Reaped);
            return;
        };
        dog.add(self, every_ms);
        loop {
            self.done.wait_for_completion();
            // Not poked: only the marker's `complete_all()` can have woken us,
            // and the wait saw it finish.
            if !self.poked.load(Acquire) {
                break;
            }
            // The poke's count is used up, and no other poke comes while
            // `poked` is set: only `complete_all()` can make this true.
            if self.done.completion_done() {
                break;
            }
            stuck();
            self.poked.store(false, Release);
        }
        dog.remove(self);
        self.state.set(State::Reaped);
    }
}

/// How often the watchdog looks at the waiting drains, in milliseconds.
const WATCHDOG_TICK_MS: u32 = 1_000;

/// A marker's links on the watchdog's list.
///
/// # Invariants
///
/// The fields are only accessed with the watchdog's lock held.
struct Watch {
    prev: Cell<*const DrainMarker>,
    next: Cell<*const DrainMarker>,
    /// Watchdog ticks between two reports, and ticks left until the next.
    every: Cell<u32>,
    left: Cell<u32>,
    _pin: PhantomPinned,
}

impl Watch {
    const fn new() -> Self {
        Self {
            prev: Cell::new(null()),
            next: Cell::new(null()),
            every: Cell::new(0),
            left: Cell::new(0),
            _pin: PhantomPinned,
        }
    }
}

/// The head of the watchdog's list of waiting markers.
///
/// # Invariants
///
/// `first` and the markers' `watch` links form a doubly linked list of
/// pinned, live markers: a marker is added by its waiter and taken off by the
/// same waiter, under the lock that protects this, before the waiter returns.
struct Waiting {
    first: *const DrainMarker,
    /// The watchdog will run (again).
    armed: bool,
}

// SAFETY: The markers on the list are only touched with the lock held that
// protects `Waiting`, from whichever task holds it.
unsafe impl Send for Waiting {}

/// Wakes drains that have waited too long on their markers, so that they
/// report themselves. Runs once a tick while any drain waits, and not at all
/// otherwise, on the power-efficient system queue (it is housekeeping).
#[pin_data]
struct Watchdog {
    #[pin]
    waiting: SpinLock<Waiting>,
    #[pin]
    work: DelayedWork<Watchdog>,
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self> for Watchdog { self.work }
}

/// The one watchdog, allocated by the first drain that waits.
static WATCHDOG: SetOnce<Arc<Watchdog>> = SetOnce::new();

// Never inlined, unlike the rest of this module: the watchdog outlives the
// drains, so its work function must be in vmlinux, not in the module (ib_core,
// or a ULP) whose drain happened to create it.
impl Watchdog {
    #[inline(never)]
    fn get() -> Option<&'static Arc<Watchdog>> {
        if let Some(dog) = WATCHDOG.as_ref() {
            return Some(dog);
        }
        let dog = Arc::pin_init(
            pin_init!(Self {
                waiting <- new_spinlock!(Waiting { first: null(), armed: false }),
                work <- new_delayed_work!("ib_drain_watchdog"),
            }),
            // Drains run in I/O error recovery, perhaps under memory pressure:
            // no reclaim here. Without the watchdog, drains use timed waits,
            // and the next one tries again.
            GFP_NOWAIT | __GFP_NOWARN,
        )
        .ok()?;
        // A racing drain may have set it first (then this one is freed), or
        // may still be setting it (then this drain uses a timer).
        WATCHDOG.populate(dog);
        WATCHDOG.as_ref()
    }

    /// Puts `marker` on the list, and makes sure that the watchdog runs.
    #[inline(never)]
    fn add(self: &Arc<Self>, marker: Pin<&DrainMarker>, every_ms: u32) {
        let m: *const DrainMarker = &*marker;
        let ticks = (every_ms / WATCHDOG_TICK_MS).max(1);
        let mut w = self.waiting.lock();
        marker.watch.prev.set(null());
        marker.watch.next.set(w.first);
        marker.watch.every.set(ticks);
        marker.watch.left.set(ticks);
        if !w.first.is_null() {
            // SAFETY: Markers on the list are alive: they leave it (under this
            // lock) before their waiter returns.
            unsafe { (*w.first).watch.prev.set(m) };
        }
        // INVARIANT: `marker` is pinned, and its waiter removes it before it
        // returns (`wait_reporting`).
        w.first = m;
        if !w.armed {
            // Pending already or queued now: it runs either way.
            let _ = workqueue::system_power_efficient()
                .enqueue_delayed(self.clone(), msecs_to_jiffies(WATCHDOG_TICK_MS));
            w.armed = true;
        }
    }

    /// Takes `marker` off the list.
    #[inline(never)]
    fn remove(&self, marker: Pin<&DrainMarker>) {
        let mut w = self.waiting.lock();
        let (prev, next) = (marker.watch.prev.get(), marker.watch.next.get());
        // SAFETY: Neighbours on the list are alive, as in `add`.
        // INVARIANT: The list stays linked without `marker`.
        unsafe {
            if !next.is_null() {
                (*next).watch.prev.set(prev);
            }
            if prev.is_null() {
                w.first = next;
            } else {
                (*prev).watch.next.set(next);
            }
        }
    }
}

impl WorkItem for Watchdog {
    type Pointer = Arc<Watchdog>;

    #[inline(never)]
    fn run(this: Arc<Watchdog>) {
        let mut w = this.waiting.lock();
        let mut m = w.first;
        while !m.is_null() {
            // SAFETY: Markers on the list are alive, as in `add`. From here,
            // only `watch` (under the lock), the atomic `poked` and the `Sync`
            // `done` are used.
            let marker = unsafe { &*m };
            let left = marker.watch.left.get() - 1;
            // A waiter that has not looked at its last poke yet gets no other.
            if left == 0 && !marker.poked.load(Relaxed) {
                marker.watch.left.set(marker.watch.every.get());
                // Before the wake-up: the woken waiter must see it.
                marker.poked.store(true, Relaxed);
                marker.done.complete();
            } else {
                marker.watch.left.set(left.max(1));
            }
            m = marker.watch.next.get();
        }
        w.armed = !w.first.is_null();
        if w.armed {
            let _ = workqueue::system_power_efficient()
                .enqueue_delayed(this.clone(), msecs_to_jiffies(WATCHDOG_TICK_MS));
        }
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
