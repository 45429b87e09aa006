// SPDX-License-Identifier: GPL-2.0

//! The marker work request that drains a work queue.
//!
//! A drain posts one work request behind everything else on the queue and
//! waits until the consumer has reaped its completion. Completions are reaped
//! in order, so by then every earlier completion has been consumed.
//!
//! A drain that waits too long must say so, but it must still sleep as the C
//! drain does: untimed and uninterruptible, so that the hung-task detector
//! (and `hung_task_panic`) sees it exactly as it would see the C drain, and
//! without a WARN, which `panic_on_warn` would turn into a crash of a machine
//! whose provider is merely slow. So the waiter never wakes for a report: one
//! watchdog, which runs only while drains wait, prints the reports of those
//! that wait long, from what their markers recorded when they were posted.

use super::DeviceName;
use crate::{
    bindings, container_of,
    prelude::*,
    print::{call_printk, format_strings},
    sync::{Arc, Completion, SetOnce, SpinLock},
    time::msecs_to_jiffies,
    types::Opaque,
    workqueue::{self, impl_has_delayed_work, new_delayed_work, DelayedWork, WorkItem},
};
use core::cell::Cell;

/// How long a drain waits before it is reported, and how often after.
pub const STUCK_REPORT_SECS: u32 = 5;

/// What a posted marker drains, for its reports.
#[derive(Clone, Copy)]
pub(crate) struct Drained {
    pub(crate) device: DeviceName,
    pub(crate) qp_num: u32,
    pub(crate) cq_id: u32,
    pub(crate) queue: &'static str,
}

/// A drain marker: an `ib_cqe` whose `done` callback completes a [`Completion`].
///
/// It is posted only through the queue's
/// [`WorkQueue::post_marker`](super::WorkQueue::post_marker), which records
/// what it drains. The provider keeps a pointer to the marker from then until
/// its completion is reaped, so the marker is pinned, and dropping a posted
/// marker waits for that completion first: it can never be freed while the
/// provider may still touch it.
///
/// # Invariants
///
/// `cqe.done` is [`DrainMarker::done_callback`]. `link` is on the watchdog's
/// list only while [`DrainMarker::wait`] runs. Meanwhile the watchdog reads
/// `drained` (set before, under the watchdog's lock) and uses `ticks`, under
/// that lock; the waiter only sleeps.
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
    /// What the marker drains, set when it is posted.
    drained: Cell<Option<Drained>>,
    /// Its place on the watchdog's list while a drain waits on it.
    #[pin]
    link: Opaque<bindings::list_head>,
    /// Watchdog ticks waited so far (under the watchdog's lock).
    ticks: Cell<u32>,
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
        // changed; `link` is on no list.
        pin_init!(Self {
            cqe: Opaque::new(bindings::ib_cqe {
                done: Some(Self::done_callback),
            }),
            done <- Completion::new(),
            state: Cell::new(State::Fresh),
            drained: Cell::new(None),
            link <- Opaque::ffi_init(|p| {
                // SAFETY: `p` is valid for writes; the head is pinned from now on.
                unsafe { bindings::INIT_LIST_HEAD(p) }
            }),
            ticks: Cell::new(0),
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
        (self.state.get() == State::Fresh).then(|| self.cqe.get())
    }

    /// Records that the marker was posted to drain `drained`: from now on it
    /// must complete.
    #[inline]
    pub(crate) fn set_posted(&self, drained: Drained) {
        self.drained.set(Some(drained));
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

    /// Prints that the drain has waited `secs` seconds for this marker. Does
    /// nothing if the marker was not posted.
    #[inline]
    pub fn report_waiting(&self, secs: u32) {
        let Some(d) = self.drained.get() else {
            return;
        };
        // SAFETY: A format string of `format_strings`, and a NUL-terminated
        // prefix: the drain's messages are ib_core's, wherever this runs.
        unsafe {
            call_printk(
                &format_strings::WARNING,
                b"ib_core\0",
                fmt!(
                    "{}: QP {:#x}: {} drain waiting for {secs} s on CQ {}, marker not reaped yet\n",
                    d.device,
                    d.qp_num,
                    d.queue,
                    d.cq_id
                ),
            )
        };
    }

    /// Waits, however long it takes, until the marker's completion has been
    /// reaped; the watchdog reports the wait every [`STUCK_REPORT_SECS`].
    /// Returns at once if the marker is not posted.
    ///
    /// The task sleeps uninterruptibly and is not woken before the marker
    /// completes, as in the C drain.
    #[inline]
    pub fn wait(self: Pin<&Self>) {
        if self.state.get() != State::Posted {
            return;
        }
        match Watchdog::get() {
            Some(dog) => {
                dog.add(self);
                self.done.wait_for_completion();
                dog.remove(self);
            }
            None => {
                // No watchdog (it could not be allocated): report once from
                // here, then sleep untimed like the C drain.
                let every = msecs_to_jiffies(STUCK_REPORT_SECS * 1000);
                if !self.done.wait_for_completion_timeout(every) {
                    self.report_waiting(STUCK_REPORT_SECS);
                    self.done.wait_for_completion();
                }
            }
        }
        self.state.set(State::Reaped);
    }
}

/// How often the watchdog looks at the waiting drains, in milliseconds.
const WATCHDOG_TICK_MS: u32 = 1_000;

/// Reports drains that have waited long on their markers. Runs once a tick
/// while any drain waits, and not at all otherwise, on the power-efficient
/// system queue (it is housekeeping).
///
/// # Invariants
///
/// `waiting` is a list of the `link`s of pinned, live markers, changed only
/// with `armed`'s lock held: a marker is added by its waiter and taken off by
/// the same waiter before the waiter returns.
#[pin_data]
struct Watchdog {
    /// The watchdog will run (again); its lock protects `waiting` too.
    #[pin]
    armed: SpinLock<bool>,
    #[pin]
    waiting: Opaque<bindings::list_head>,
    #[pin]
    work: DelayedWork<Watchdog>,
}

// SAFETY: The list is only touched with the lock held, from whichever task
// holds it; the markers on it are only read through `Sync` fields or under
// that lock.
unsafe impl Send for Watchdog {}

// SAFETY: See `Send`.
unsafe impl Sync for Watchdog {}

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
                armed <- crate::new_spinlock!(false),
                waiting <- Opaque::ffi_init(|p| {
                    // SAFETY: `p` is valid for writes; the head is pinned.
                    unsafe { bindings::INIT_LIST_HEAD(p) }
                }),
                work <- new_delayed_work!("ib_drain_watchdog"),
            }),
            // Drains run in I/O error recovery, perhaps under memory pressure:
            // no reclaim here. Without the watchdog, the drain reports itself
            // once after a timed wait, and the next one tries again.
            GFP_NOWAIT | __GFP_NOWARN,
        )
        .ok()?;
        // A racing drain may have set it first (then this one is freed), or
        // may still be setting it (then this drain does without).
        WATCHDOG.populate(dog);
        WATCHDOG.as_ref()
    }

    /// Puts `marker` on the list, and makes sure that the watchdog runs.
    #[inline(never)]
    fn add(self: &Arc<Self>, marker: Pin<&DrainMarker>) {
        let mut armed = self.armed.lock();
        marker.ticks.set(0);
        // SAFETY: Both heads are valid and pinned; the lock is held. The
        // marker's waiter takes it off (`remove`) before returning.
        unsafe { bindings::list_add_tail(marker.link.get(), self.waiting.get()) };
        if !*armed {
            // Pending already or queued now: it runs either way.
            let _ = workqueue::system_power_efficient()
                .enqueue_delayed(self.clone(), msecs_to_jiffies(WATCHDOG_TICK_MS));
            *armed = true;
        }
    }

    /// Takes `marker` off the list.
    #[inline(never)]
    fn remove(&self, marker: Pin<&DrainMarker>) {
        let _armed = self.armed.lock();
        // SAFETY: The marker is on the list (`add`); the lock is held.
        unsafe { bindings::list_del_init(marker.link.get()) };
    }
}

impl WorkItem for Watchdog {
    type Pointer = Arc<Watchdog>;

    #[inline(never)]
    fn run(this: Arc<Watchdog>) {
        let mut armed = this.armed.lock();
        let head = this.waiting.get();
        // SAFETY: The lock is held, so the list and its markers stay as they
        // are while it is walked.
        let mut link = unsafe { (*head).next };
        while link != head {
            // SAFETY: Every entry but the head is the `link` of a live marker
            // (type invariant); `Opaque<T>` is a transparent wrapper of `T`.
            let marker = unsafe {
                &*container_of!(
                    link.cast::<Opaque<bindings::list_head>>(),
                    DrainMarker,
                    link
                )
            };
            let ticks = marker.ticks.get() + 1;
            marker.ticks.set(ticks);
            let secs = ticks * WATCHDOG_TICK_MS / 1000;
            if ticks % (STUCK_REPORT_SECS * 1000 / WATCHDOG_TICK_MS) == 0 {
                marker.report_waiting(secs);
            }
            // SAFETY: As above.
            link = unsafe { (*link).next };
        }
        // SAFETY: As above.
        *armed = !unsafe { bindings::list_empty(head) };
        if *armed {
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
        // completion would be a use-after-free. Wait as `wait` does.
        self.as_ref().wait();
    }
}
