// SPDX-License-Identifier: GPL-2.0

//! Bounded posting: one slot per work request a queue may have outstanding.
//!
//! A work request posted through an [`OwnedQp`](super::OwnedQp) points at a
//! slot of its queue, which frees the slot and forwards the completion to
//! the caller's [`Cqe`](super::Cqe). A queue with no free slot
//! refuses the post, so it never holds more than its depth and its CQ never
//! more than the QP reserved there: the drain marker always finds room in
//! both. (A full CQ drops completions, the marker's too, and the drain could
//! never finish.)

use super::buffer::Buf;
use crate::{
    bindings, container_of,
    prelude::*,
    sync::atomic::{Acquire, Atomic, Relaxed, Release},
    time::{delay::fsleep, Delta},
    types::Opaque,
};
use core::ptr::{null_mut, NonNull};

/// The trampoline of one posted work request.
///
/// # Invariants
///
/// `cqe.done` is [`Slot::forward`]; once [`WrSlots::new`] returned, `owner`
/// points to the [`WrSlots`] that holds this slot. `buf` is null, or holds
/// a reference to a live [`Buf`] while `target` is not null.
struct Slot {
    cqe: Opaque<bindings::ib_cqe>,
    /// The caller's `ib_cqe` while a work request uses the slot, else null.
    target: Atomic<*mut bindings::ib_cqe>,
    /// The buffer the work request holds a reference to, if any.
    buf: Atomic<*mut Buf>,
    owner: Atomic<*mut WrSlots>,
}

impl Slot {
    /// The `ib_cqe`, from a pointer to the whole slot, not to the field:
    /// `forward` goes from it back to the slot.
    fn raw_cqe(&self) -> *mut bindings::ib_cqe {
        let this = core::ptr::from_ref(self);
        // SAFETY: `this` comes from a reference, so it is valid to project.
        Opaque::cast_into(unsafe { &raw const (*this).cqe })
    }

    /// Frees the slot and passes its completion on to the caller's entry;
    /// `in_use` counts it until the entry's handler has returned.
    ///
    /// # Safety
    ///
    /// `wc` must be a valid work completion whose `wr_cqe` is the `cqe` of a
    /// slot in use.
    // Never inlined: it must stay in vmlinux. It runs on after the caller's
    // entry has let its module go (ib_core's `ib_counted_cqe_done()`).
    #[inline(never)]
    unsafe extern "C" fn forward(cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // SAFETY: The caller guarantees that `wc` is valid.
        let cqe = unsafe { (*wc).__bindgen_anon_1.wr_cqe };
        // SAFETY: `cqe` is the `cqe` field of a live slot (`Opaque<T>` is a
        // transparent wrapper of `T`): its owner waits until it is free.
        let slot = unsafe { &*container_of!(cqe.cast::<Opaque<bindings::ib_cqe>>(), Slot, cqe) };
        let target = slot.target.load(Acquire);
        let owner = slot.owner.load(Relaxed);
        let buf = slot.buf.xchg(null_mut(), Relaxed);
        // The device is done with the buffer: give it back before the
        // handler runs, so that what the handler signals may use it.
        if let Some(buf) = NonNull::new(buf) {
            // SAFETY: The work request's reference, given back once; `owner`
            // lives until `in_use` drops, below.
            unsafe { Buf::put(buf, (*owner).receive) };
        }
        // The slot is free again, for a handler that posts again too; the
        // completion is still counted in `in_use` until it has returned.
        slot.target.store(null_mut(), Release);
        // SAFETY: `wc` is valid and ours while this runs; `target` is the entry
        // the work request was posted with, live until its completion ran.
        unsafe {
            (*wc).__bindgen_anon_1.wr_cqe = target;
            if let Some(done) = (*target).done {
                done(cq, wc);
            }
        }
        // SAFETY: By the type invariant `owner` holds the slot; it is not
        // freed before `in_use` dropped to zero (`WrSlots::wait_idle`), and
        // this is the last access to it.
        unsafe { (*owner).in_use.fetch_sub(1, Release) };
    }
}

/// The slots of one work queue.
///
/// # Invariants
///
/// `in_use` counts the slots whose `target` is not null, and the
/// completions [`Slot::forward`] has not returned from; `slots` never
/// grows after [`WrSlots::new`], so the slots never move. The owner frees a
/// `WrSlots` only after [`WrSlots::wait_idle`], and only ever uses it through
/// `&self`: a poller may be in [`Slot::forward`] until then.
pub(crate) struct WrSlots {
    slots: KVec<Slot>,
    /// A receive queue's: its work requests' buffers are receives'.
    receive: bool,
    in_use: Atomic<u32>,
    next: Atomic<usize>,
}

// SAFETY: The slots are atomics and C entries that the provider reads; the
// owner pointers point to the `WrSlots` itself, which is boxed.
unsafe impl Send for WrSlots {}

// SAFETY: See `Send`; taking and freeing slots is atomic.
unsafe impl Sync for WrSlots {}

impl WrSlots {
    /// Allocates `n` free slots, of a receive queue if `receive`.
    pub(crate) fn new(n: u32, receive: bool) -> Result<KBox<Self>> {
        let n = usize::try_from(n)?;
        let mut this = KBox::new(
            WrSlots {
                slots: KVec::with_capacity(n, GFP_KERNEL)?,
                receive,
                in_use: Atomic::new(0),
                next: Atomic::new(0),
            },
            GFP_KERNEL,
        )?;
        for _ in 0..n {
            // `with_capacity` made room for all of them, so none moves.
            this.slots.push(
                Slot {
                    cqe: Opaque::new(bindings::ib_cqe {
                        done: Some(Slot::forward),
                    }),
                    target: Atomic::new(null_mut()),
                    buf: Atomic::new(null_mut()),
                    owner: Atomic::new(null_mut()),
                },
                GFP_KERNEL,
            )?;
        }
        // From here on only shared access: a pointer taken before the pushes
        // would have been invalidated by them.
        let owner = core::ptr::from_ref::<WrSlots>(&this).cast_mut();
        for slot in &this.slots {
            // INVARIANT: `forward`, and the box that holds the slots.
            slot.owner.store(owner, Relaxed);
        }
        Ok(this)
    }

    /// Takes a free slot for a work request posted with `target`, holding a
    /// reference to `buf`, if any (taken for a receive if the queue is a
    /// receive queue), which its completion gives back; returns
    /// the `ib_cqe` to post instead, or `EBUSY` if the queue is full.
    pub(crate) fn take(
        &self,
        target: *mut bindings::ib_cqe,
        buf: Option<NonNull<Buf>>,
    ) -> Result<*mut bindings::ib_cqe> {
        let n = self.slots.len();
        let start = self.next.load(Relaxed);
        for i in 0..n {
            let k = (start + i) % n;
            let slot = &self.slots[k];
            if slot.target.cmpxchg(null_mut(), target, Acquire).is_ok() {
                let buf = buf.map_or(null_mut(), NonNull::as_ptr);
                slot.buf.store(buf, Relaxed);
                // INVARIANT: Counted as soon as taken.
                self.in_use.add(1, Relaxed);
                self.next.store(k + 1, Relaxed);
                return Ok(slot.raw_cqe());
            }
        }
        Err(EBUSY)
    }

    /// Returns `true` for a receive queue's slots.
    pub(crate) fn is_receive(&self) -> bool {
        self.receive
    }

    /// Returns `true` while a work request posted with a slot has not
    /// completed, or its handler has not returned yet.
    pub(crate) fn in_use(&self) -> bool {
        self.in_use.load(Acquire) != 0
    }

    /// Frees the slot of a work request that was not posted.
    pub(crate) fn put_unposted(&self, cqe: *mut bindings::ib_cqe) {
        if let Some(slot) = self.slots.iter().find(|s| s.raw_cqe() == cqe) {
            if let Some(buf) = NonNull::new(slot.buf.xchg(null_mut(), Relaxed)) {
                // SAFETY: The reference of a work request never posted.
                unsafe { Buf::put(buf, self.receive) };
            }
            slot.target.store(null_mut(), Release);
            // INVARIANT: Uncounted as it is freed.
            self.in_use.fetch_sub(1, Release);
        }
    }

    /// Waits until no work request uses a slot, and no poller is inside one:
    /// after a drain (a second poller of a shared direct CQ), and before the
    /// owner frees the slots, after its QP is destroyed.
    pub(crate) fn wait_idle(&self) {
        let mut waited_ms = 0u32;
        while self.in_use.load(Acquire) != 0 {
            fsleep(Delta::from_millis(1));
            waited_ms += 1;
            if waited_ms % 10_000 == 0 {
                pr_warn!(
                    "RDMA work queue: waiting for {} work requests to complete\n",
                    self.in_use.load(Relaxed)
                );
            }
        }
    }
}
