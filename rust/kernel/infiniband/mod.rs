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
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

mod concurrent;
mod cq;
mod cqe;
mod device;
mod marker;
mod owned_qp;
mod pd;
mod qp;
mod slots;
mod srq;

pub use concurrent::drain_rq_concurrently;
pub use cq::{Cq, OwnedCq, PollContext};
pub use cqe::{CompletionHandler, Cqe, WcStatus, WorkCompletion};
pub use device::{Device, DeviceName, DeviceRef, GidAttr, RegisteredDevice};
pub use marker::DrainMarker;
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
