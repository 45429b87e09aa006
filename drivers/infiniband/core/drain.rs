// SPDX-License-Identifier: GPL-2.0

//! Queue pair drain: `ib_drain_rq()`, `ib_drain_sq()` and `ib_drain_qp()`.
//!
//! A drain moves the QP to the error state, so that the provider flushes every
//! outstanding work request, then posts a marker work request behind them and
//! waits until the consumer has reaped the marker's completion: completions
//! are reaped in order, so every earlier one has been consumed by then.
//!
//! The C callers' contract (kernel-doc of `ib_drain_rq()`): the CQ and the
//! work queue have room for the marker, the CQ comes from `ib_alloc_cq()`, and
//! nobody else posts during the drain. The last rule is why the drain takes the
//! work queue's posting token by `&mut`.
//!
//! A full CQ drops completions, the marker's too (rxe raises a CQ error
//! event): no drain can then finish, and returning would free the marker under
//! the provider, so the drain reports itself stuck every few seconds and keeps
//! waiting. Rust callers cannot get there: `kernel::infiniband::OwnedQp`
//! reserves CQ room for its queues and their markers, and refuses posts beyond
//! a queue's depth.

use kernel::infiniband::{DrainMarker, PollContext, Qp, RawQp, RecvQueue, WorkQueue};
use kernel::prelude::*;
use kernel::time::{delay::fsleep, msecs_to_jiffies, Delta};
use pin_init::stack_pin_init;

/// Prefix of this object's messages (it is part of ib_core, not a module of its own).
const __LOG_PREFIX: &[u8] = b"ib_core\0";

/// How long a drain waits before it reports itself stuck, and how often after.
const STUCK_REPORT_MS: u32 = 5_000;

/// Back-off bounds for polling an `IB_POLL_DIRECT` CQ.
const DIRECT_POLL_MIN_US: i64 = 16;
const DIRECT_POLL_MAX_US: i64 = 16_384;

/// Blocks until all receive completions of `qp` have been consumed.
///
/// # Safety
///
/// `qp` must be a valid QP, and no other context may post receives on it
/// until this returns.
#[export]
pub unsafe extern "C" fn ib_drain_rq(qp: *mut RawQp) {
    // SAFETY: The caller guarantees a valid QP and exclusive posting.
    let mut rq = unsafe { Qp::from_raw(qp).recv_queue() };
    drain(&mut rq);
}

/// Blocks until all send completions of `qp` have been consumed.
///
/// # Safety
///
/// `qp` must be a valid QP, and no other context may post sends on it until
/// this returns.
#[export]
pub unsafe extern "C" fn ib_drain_sq(qp: *mut RawQp) {
    // SAFETY: The caller guarantees a valid QP and exclusive posting.
    let mut sq = unsafe { Qp::from_raw(qp).send_queue() };
    drain(&mut sq);
}

/// Blocks until all completions of `qp`, send and receive, have been consumed.
///
/// # Safety
///
/// As for [`ib_drain_rq`] and [`ib_drain_sq`] together.
#[export]
pub unsafe extern "C" fn ib_drain_qp(qp: *mut RawQp) {
    // SAFETY: The caller guarantees a valid QP and exclusive posting.
    let (mut sq, mut rq) = unsafe {
        let qp = Qp::from_raw(qp);
        (qp.send_queue(), qp.recv_queue())
    };
    drain(&mut sq);
    if rq.qp().has_srq() {
        drain_srq(&mut rq);
    } else {
        drain(&mut rq);
    }
}

/// Drains one work queue, with the provider's drain if it has one.
fn drain<'a, Q: WorkQueue<'a>>(q: &mut Q) {
    if !q.provider_drain() {
        drain_generic(q);
    }
    if let Some(cq) = q.cq() {
        cq.trace_drain_complete();
    }
}

fn drain_generic<'a, Q: WorkQueue<'a>>(q: &mut Q) {
    let qp = q.qp();
    // The C drain would move the QP to the error state and then fail to post.
    if q.is_shared() {
        refuse(
            qp,
            format_args!(
                "{} queue is an SRQ, drain the QP with ib_drain_qp()",
                Q::NAME
            ),
        );
        return;
    }
    let Some(cq) = q.cq() else {
        refuse(qp, format_args!("no {} CQ, cannot drain", Q::NAME));
        return;
    };
    // The marker's completion must reach `DrainMarker`'s `done`, which only
    // ib_alloc_cq() CQs call; the C drain would wait forever here.
    if !cq.calls_cqe_done() {
        refuse(
            qp,
            format_args!(
                "{} CQ {} is not from ib_alloc_cq(), cannot drain",
                Q::NAME,
                cq.id()
            ),
        );
        return;
    }
    if let Err(e) = qp.set_error_state() {
        refuse(
            qp,
            format_args!("failed to drain {} queue: {}", Q::NAME, e.to_errno()),
        );
        return;
    }

    stack_pin_init!(let marker = DrainMarker::new());
    if let Err(e) = q.post_marker(marker.as_ref()) {
        refuse(
            qp,
            format_args!("failed to drain {} queue: {}", Q::NAME, e.to_errno()),
        );
        return;
    }

    // From here on the provider points at `marker`: never return before it
    // completed. `DrainMarker`'s drop would wait too; this loop also reports.
    let mut waited_ms = 0;
    if cq.poll_context() == Some(PollContext::Direct) {
        // Nobody else reaps a direct CQ: poll it ourselves soon after the
        // provider flushes, instead of sleeping in 100 ms slices like C. We
        // sleep rather than spin between polls: the flush may be work that
        // waits for this very CPU.
        let mut backoff_us = DIRECT_POLL_MIN_US;
        let mut since_report_us = 0;
        loop {
            q.poll_cq();
            if marker.is_done() {
                return;
            }
            fsleep(Delta::from_micros(backoff_us));
            since_report_us += backoff_us;
            backoff_us = (backoff_us * 2).min(DIRECT_POLL_MAX_US);
            if since_report_us >= i64::from(STUCK_REPORT_MS) * 1000 {
                since_report_us = 0;
                waited_ms += STUCK_REPORT_MS;
                report_stuck(qp, Q::NAME, cq.id(), waited_ms);
            }
        }
    }
    marker.as_ref().wait_reporting(STUCK_REPORT_MS, || {
        waited_ms += STUCK_REPORT_MS;
        report_stuck(qp, Q::NAME, cq.id(), waited_ms);
    });
}

/// Refuses a drain that cannot start: a message naming the QP, and a WARN.
fn refuse(qp: &Qp, why: core::fmt::Arguments<'_>) {
    pr_warn!("{}: QP {:#x}: {why}\n", qp.device().name(), qp.qp_num());
    kernel::warn_on!(true);
}

/// Says that a drain is stuck: a line every `STUCK_REPORT_MS`, with a
/// backtrace the first time, so that the waiter can be found.
fn report_stuck(qp: &Qp, queue: &str, cq_id: u32, waited_ms: u32) {
    pr_warn!(
        "{}: QP {:#x}: {queue} drain waiting for {} s on CQ {cq_id}, marker not reaped yet\n",
        qp.device().name(),
        qp.qp_num(),
        waited_ms / 1000
    );
    if waited_ms == STUCK_REPORT_MS {
        kernel::warn_on!(true);
    }
}

/// Drains a QP on an SRQ, as the IB spec asks (10.3.1): error state, wait
/// for the Last WQE Reached event, then poll the CQ until it is empty.
fn drain_srq(rq: &mut RecvQueue<'_>) {
    let qp = rq.qp();
    if let Err(e) = qp.set_error_state() {
        refuse(
            qp,
            format_args!("failed to drain shared recv queue: {}", e.to_errno()),
        );
        return;
    }
    let Some(cq) = rq.srq_cq() else {
        refuse(qp, format_args!("no CQ associated with its SRQ"));
        return;
    };
    if qp.wait_last_wqe_reached(msecs_to_jiffies(60_000)) {
        let mut polled = 0;
        while polled < cq.capacity() {
            let n = rq.poll_srq_cq(cq, cq.capacity() - polled);
            if n <= 0 {
                break;
            }
            polled += n;
        }
    }
}

#[kunit_tests(rdma_drain_abi)]
mod tests {
    use kernel::bindings;

    /// The `ib_drain_*` that ib_core's C resolves is the Rust definition in
    /// this file, not the C one in verbs.c. Its export (`EXPORT_SYMBOL` in
    /// verbs.c), which the module loader gives other modules, is resolved by
    /// the same link, built in or as ib_core.ko.
    #[test]
    fn exported_drain_is_rust() {
        assert_eq!(
            bindings::ib_drain_rq as *const () as usize,
            super::ib_drain_rq as *const () as usize
        );
        assert_eq!(
            bindings::ib_drain_sq as *const () as usize,
            super::ib_drain_sq as *const () as usize
        );
        assert_eq!(
            bindings::ib_drain_qp as *const () as usize,
            super::ib_drain_qp as *const () as usize
        );
    }
}
