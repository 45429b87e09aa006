// SPDX-License-Identifier: GPL-2.0

//! Draining many QPs at the same time: [`drain_rq_concurrently`].

use super::OwnedQp;
use crate::{
    bindings,
    prelude::*,
    sync::atomic::{Atomic, Full},
    sync::{Arc, Completion},
    workqueue::{self, Work, WorkItem},
};

/// Drains the receive queues of all `qps` at the same time, each from its own
/// worker of the unbound workqueue, and returns when every drain has.
///
/// The QPs may share CQs, directly polled ones included. `&mut` on the slice
/// keeps every other poster away for the whole time. Refused (`EDEADLK`) as
/// [`OwnedQp::drain_rq`].
///
/// # Examples
///
/// ```
/// use kernel::infiniband::{
///     drain_rq_concurrently, CompletionHandler, Cqe, RegisteredDevice, OwnedCq, OwnedQp, Pd,
///     PollContext, QpConfig, WorkCompletion,
/// };
/// # struct Ignore;
/// # impl CompletionHandler for Ignore {
/// #     fn done(&self, _wc: &WorkCompletion) {}
/// # }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 16, 0, PollContext::Direct)?;
/// let cqe = Cqe::new(Ignore)?;
/// let mut qps = KVec::new();
/// for _ in 0..4 {
///     let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, QpConfig { send_depth: 0, recv_depth: 1 })?;
///     qp.init(1)?;
///     qp.rq().post(&cqe)?;
///     qps.push(qp, GFP_KERNEL)?;
/// }
/// assert_eq!(cqe.outstanding(), 4);
/// drain_rq_concurrently(&mut qps)?;
/// assert_eq!(cqe.outstanding(), 0);
/// # Ok::<(), Error>(())
/// ```
#[inline]
pub fn drain_rq_concurrently(qps: &mut [OwnedQp]) -> Result {
    OwnedQp::may_drain()?;
    let n = qps.len();
    let countdown = Arc::pin_init(
        pin_init!(Countdown {
            left: Atomic::new(n),
            zero <- Completion::new(),
        }),
        GFP_KERNEL,
    )?;
    let mut queued = 0;
    let mut result = Ok(());
    for qp in qps.iter_mut() {
        // As `OwnedQp::drain_rq()`: a QP on an SRQ is drained whole.
        let drain = if qp.has_srq() {
            bindings::ib_drain_qp
        } else {
            bindings::ib_drain_rq
        };
        if let Err(e) = DrainJob::queue(qp.as_raw(), drain, &countdown) {
            result = Err(e);
            break;
        }
        queued += 1;
    }
    // Jobs that were never made count down here. The jobs point at the QPs
    // that `qps` borrows: return only after every queued one has run.
    countdown.count_down(n - queued);
    countdown.zero.wait_for_completion();
    for qp in &mut qps[..queued] {
        let whole = qp.has_srq();
        qp.after_drain(whole);
    }
    result
}

/// Counts the drains of [`drain_rq_concurrently`] down to zero.
#[pin_data]
struct Countdown {
    left: Atomic<usize>,
    #[pin]
    zero: Completion,
}

impl Countdown {
    #[inline]
    fn count_down(&self, k: usize) {
        if self.left.fetch_sub(k, Full) == k {
            self.zero.complete_all();
        }
    }
}

/// A QP pointer that a drain job carries to its worker.
struct RawQpPtr(*mut bindings::ib_qp);

// SAFETY: The QP may be drained from any thread; `drain_rq_concurrently`
// keeps it alive and free of other posters until the job has run.
unsafe impl Send for RawQpPtr {}

// SAFETY: Only the worker that runs the job uses the pointer.
unsafe impl Sync for RawQpPtr {}

/// One drain of [`drain_rq_concurrently`].
///
/// Unlike the rest of this module, the job is not `#[inline]`: its worker
/// still runs after it has woken the caller, which may be a module that is
/// unloaded next, so the work function must be in vmlinux. The drain itself,
/// in ib_core, is called through `drain`, and has returned by then.
#[pin_data]
struct DrainJob {
    #[pin]
    work: Work<DrainJob>,
    qp: RawQpPtr,
    drain: unsafe extern "C" fn(*mut bindings::ib_qp),
    countdown: Arc<Countdown>,
}

impl DrainJob {
    /// Queues `drain(qp)` on the unbound workqueue; it counts `countdown` down.
    #[inline(never)]
    fn queue(
        qp: *mut bindings::ib_qp,
        drain: unsafe extern "C" fn(*mut bindings::ib_qp),
        countdown: &Arc<Countdown>,
    ) -> Result {
        let job = Arc::pin_init(
            pin_init!(DrainJob {
                work <- crate::new_work!("drain_rq_concurrently"),
                qp: RawQpPtr(qp),
                drain,
                countdown: countdown.clone(),
            }),
            GFP_KERNEL,
        )?;
        // Each job is new, so it cannot be queued already.
        let _ = workqueue::system_unbound().enqueue(job);
        Ok(())
    }
}

crate::impl_has_work! {
    impl HasWork<Self> for DrainJob { self.work }
}

impl WorkItem for DrainJob {
    type Pointer = Arc<DrainJob>;

    #[inline(never)]
    fn run(this: Arc<DrainJob>) {
        // SAFETY: `drain` is `ib_drain_rq()`, or `ib_drain_qp()` for a QP on
        // an SRQ. `drain_rq_concurrently` holds the QP by `&mut` and waits for
        // this job before it returns: the QP is valid and nobody else posts
        // on it, receives or sends.
        unsafe { (this.drain)(this.qp.0) };
        this.countdown.count_down(1);
    }
}
