// SPDX-License-Identifier: GPL-2.0

//! RDMA verbs: devices, completion queues, queue pairs, and draining them.
//!
//! The types here are views of objects that the RDMA core owns. The caller
//! rules of the verbs become type rules where Rust can express them: posting
//! on a work queue, and draining it, need the queue's [`RecvQueue`] or
//! [`SendQueue`] token by `&mut`, so no other context can post during a drain.
//!
//! ib_core may be a module (`CONFIG_INFINIBAND=m`, as distributions build it),
//! and this crate is part of vmlinux, which cannot call into a module. So every
//! function here that reaches ib_core is `#[inline]` or generic: it is compiled
//! into the module that uses it (ib_core's own drain, or a ULP), never into
//! vmlinux. What outlives its caller is the other way round: the workers of
//! [`drain_rq_concurrently`] are `#[inline(never)]`, so that they stay in
//! vmlinux and keep running when the module that started them is unloaded.
//!
//! # A ULP, step by step
//!
//! A kernel ULP owns what it makes through handles that destroy it when
//! dropped; each holds a counted reference to what it was made from.
//!
//! 1. The device: [`RegisteredDevice::get_by_netdev`] returns a
//!    [`DeviceRef`], which `ib_unregister_device()` waits for; a device
//!    without the verbs kernel ULPs need is refused (`EOPNOTSUPP`).
//! 2. A protection domain, [`Pd::alloc`], and completion queues,
//!    [`OwnedCq::alloc`], polled in a [`PollContext`]. They are always
//!    `ib_alloc_cq()` CQs, which call each work request's handler.
//! 3. An RC queue pair, [`OwnedQp::create_rc`] (or
//!    [`OwnedQp::create_rc_on_srq`] with an [`OwnedSrq`], where the device
//!    has SRQs), with the depth of each queue in a [`QpConfig`]. Its PD,
//!    CQs and SRQ must be on one device (else `EINVAL`). Its CQs reserve room
//!    for each queue and its drain marker, so the drain's contract holds by
//!    construction.
//! 4. [`OwnedQp::init`], then [`OwnedQp::connect`] to the peer's QP number
//!    through a [`GidAttr`], with [`RcParams`].
//! 5. Posting, through the queue's token: `qp.rq().post(&cqe)` and
//!    `qp.sq().post_send(&cqe)`. [`OwnedQp::rq`] and [`OwnedQp::sq`] take the
//!    QP by `&mut`, so nobody posts during a drain, and a queue holds at most
//!    its depth (`EBUSY`). Each work request holds a reference to a [`Cqe`],
//!    whose [`CompletionHandler`] runs when its completion is reaped; the
//!    handler borrows nothing (`'static`), as a leaked `Cqe` may be called
//!    late.
//! 6. Draining: [`OwnedQp::drain_rq`], [`OwnedQp::drain_sq`] and
//!    [`OwnedQp::drain`] call `ib_drain_rq()`, `ib_drain_sq()` and
//!    `ib_drain_qp()`; [`drain_rq_concurrently`] drains many QPs at once.
//!    Dropping an `OwnedQp` drains it, then destroys it.
//!
//! Handles may be dropped in any order, or leaked, without freeing what the
//! provider still uses, and a destroy that fails leaks rather than frees.
//! A handler may drop what it holds: a `Cqe` never waits, and a QP, CQ, SRQ
//! or PD dropped in a handler, or in atomic context, is torn down later, in
//! process context; a drain there is refused (`EDEADLK`), as it would wait
//! for the completion being handled.
//! A module is in use while work posted with its `Cqe`s is outstanding
//! (ib_core's `counted_cqe.c` holds a module reference), as the handlers
//! are its code: `rmmod` is refused until its QPs are drained or dropped,
//! and its SRQs with receives posted dropped.
//! So a ULP tears its QPs down before it is unloaded, from its `ib_client`'s
//! remove or its own control interface, not from its module's exit, which
//! `rmmod` does not reach while the module is in use.
//!
//! ```
//! use kernel::infiniband::{
//!     CompletionHandler, Cqe, OwnedCq, OwnedQp, Pd, PollContext, QpConfig, RegisteredDevice,
//!     WcStatus, WorkCompletion,
//! };
//! use kernel::sync::atomic::{Atomic, Relaxed};
//!
//! /// Counts the receives that were flushed.
//! struct Flushed(Atomic<u32>);
//!
//! impl CompletionHandler for Flushed {
//!     fn done(&self, wc: &WorkCompletion) {
//!         if wc.status() == WcStatus::FlushError {
//!             self.0.add(1, Relaxed);
//!         }
//!     }
//! }
//!
//! let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
//! let pd = Pd::alloc(&dev)?;
//! let cq = OwnedCq::alloc(&dev, 16, 0, PollContext::Softirq)?;
//! let cqe = Cqe::new(Flushed(Atomic::new(0)))?;
//! let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, QpConfig { send_depth: 1, recv_depth: 4 })?;
//! qp.init(1)?;
//! for _ in 0..4 {
//!     qp.rq().post(&cqe)?;
//! }
//! // The queue is full.
//! assert_eq!(qp.rq().post(&cqe), Err(EBUSY));
//! qp.drain_rq()?;
//! assert_eq!(cqe.handler().0.load(Relaxed), 4);
//! # Ok::<(), Error>(())
//! ```
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

mod buffer;
mod concurrent;
mod cq;
mod cqe;
mod defer;
mod device;
mod owned_qp;
mod pd;
mod qp;
mod slots;
mod srq;

pub use buffer::DmaBuf;
pub use concurrent::drain_rq_concurrently;
pub use cq::{Cq, OwnedCq, PollContext};
pub use cqe::{CompletionHandler, Cqe, WcStatus, WorkCompletion};
pub use device::{Device, DeviceName, DeviceRef, GidAttr, RegisteredDevice};
pub use owned_qp::{Mtu, OwnedQp, QpConfig, RcParams};
pub use pd::Pd;
pub use qp::{Qp, QpState, RecvQueue, SendQueue, WorkQueue};
pub use srq::OwnedSrq;

/// The owner that restrack names for the objects made here. restrack keeps
/// this pointer, not a copy, and an object can outlive the module that made
/// it (forgotten, or kept after a failed destroy), so the name is a static of
/// vmlinux: a literal in the inlined callers would live in their module.
static KERN_NAME: [u8; 19] = *b"kernel::infiniband\0";

/// [`KERN_NAME`] as the `caller` argument of the verbs that take one.
#[inline]
fn kern_name() -> *const crate::ffi::c_char {
    KERN_NAME.as_ptr().cast()
}

/// The module that the code at `f` is part of, or null if it is vmlinux's:
/// the module whose unload must wait for the completions that run `f`.
#[inline(never)]
fn module_of(f: *const crate::ffi::c_void) -> *mut crate::bindings::module {
    #[cfg(CONFIG_MODULES)]
    {
        let _rcu = crate::sync::rcu::read_lock();
        // SAFETY: Any address may be looked up, under the RCU read lock that
        // the module tree asks for. The module is not freed meanwhile: the
        // caller runs its code, or holds a reference to a type of it.
        unsafe { crate::bindings::__module_text_address(f as usize) }
    }
    #[cfg(not(CONFIG_MODULES))]
    {
        let _ = f;
        core::ptr::null_mut()
    }
}
