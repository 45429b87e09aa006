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
//! the provider, so the drain keeps waiting, as the C drain does, and the
//! marker's watchdog reports it every few seconds without waking it (no WARN:
//! `panic_on_warn` must not turn a slow provider into a crash). Rust callers
//! cannot get there: `kernel::infiniband::OwnedQp` reserves CQ room for its
//! queues and their markers, and refuses posts beyond a queue's depth.
//!
//! A drain that cannot start is refused: a rate-limited line, and one WARN
//! per reason, as the C drain's `WARN_ONCE()`s.

use kernel::infiniband::{DrainMarker, PollContext, Qp, RecvQueue, WorkQueue, STUCK_REPORT_SECS};
use kernel::prelude::*;
use kernel::processor::cpu_relax;
use kernel::sync::{
    atomic::{Atomic, Relaxed},
    SetOnce,
};
use kernel::time::{delay::fsleep, msecs_to_jiffies, Delta, Instant, Monotonic};
use pin_init::stack_pin_init;

/// Prefix of this object's messages (it is part of ib_core, not a module of its own).
const __LOG_PREFIX: &[u8] = b"ib_core\0";

/// A direct CQ is polled without sleeping for this long after the post (a
/// flush the provider has queued usually lands within it; a sleep would add
/// its wake-up to every drain)...
const DIRECT_SPIN: Delta = Delta::from_micros(256);
/// ... and on while each poll reaps something (the flush is landing), up to
/// this. Without progress the spin ends at [`DIRECT_SPIN`]; a flush that
/// needs this very CPU waits at most [`DIRECT_SPIN_MAX`] (any completion on
/// the CQ counts as progress).
const DIRECT_SPIN_MAX: Delta = Delta::from_millis(1);
/// `cpu_relax()`es between two polls of the spin: the poll takes the CQ's
/// lock, which the provider's flush takes for each completion.
const DIRECT_SPIN_RELAX: u32 = 32;
/// Then the sleep between polls, until [`DIRECT_SHORT_SLEEPS`] after the
/// post: a flush that waited for a worker to wake up lands then...
const DIRECT_SLEEP_MIN_US: i64 = 16;
const DIRECT_SHORT_SLEEPS: Delta = Delta::from_millis(5);
/// ... and then twice as long each time, up to this (C sleeps 100 ms).
const DIRECT_SLEEP_MAX_US: i64 = 16_384;

/// Blocks until all receive completions of `qp` have been consumed.
///
/// # Safety
///
/// `qp` must be a valid QP, and no other context may post receives on it
/// until this returns.
#[export]
pub unsafe extern "C" fn ib_drain_rq(qp: *mut kernel::bindings::ib_qp) {
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
pub unsafe extern "C" fn ib_drain_sq(qp: *mut kernel::bindings::ib_qp) {
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
pub unsafe extern "C" fn ib_drain_qp(qp: *mut kernel::bindings::ib_qp) {
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
    // SAFETY: The caller of `ib_drain_*()` keeps the C drain's contract.
    if !unsafe { q.provider_drain() } {
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
        refuse(qp, Q::NAME, Refusal::OnSrq);
        return;
    }
    let Some(cq) = q.cq() else {
        refuse(qp, Q::NAME, Refusal::NoCq);
        return;
    };
    // The marker's completion must reach `DrainMarker`'s `done`, which only
    // ib_alloc_cq() CQs call; the C drain would wait forever here.
    if !cq.calls_cqe_done() {
        refuse(qp, Q::NAME, Refusal::CqNotAllocated(cq.id()));
        return;
    }
    if let Err(e) = qp.set_error_state() {
        refuse(qp, Q::NAME, Refusal::Modify(e));
        return;
    }

    stack_pin_init!(let marker = DrainMarker::new());
    // SAFETY: The caller of `ib_drain_*()` keeps the C drain's contract.
    if let Err(e) = unsafe { q.post_marker(marker.as_ref()) } {
        refuse(qp, Q::NAME, Refusal::Post(e));
        return;
    }

    // From here on the provider points at `marker`: never return before it
    // completed (`DrainMarker`'s drop would wait too).
    if cq.poll_context() == Some(PollContext::Direct) {
        // SAFETY: A direct CQ from ib_alloc_cq() (checked above): its
        // completions are ours to reap, here.
        unsafe { reap_direct(q, &marker) };
        return;
    }
    marker.as_ref().wait();
}

/// Reaps a direct CQ until `marker`, posted on `q`, is done: nobody else
/// reaps a direct CQ. Never returns before that.
///
/// The provider's flush usually lands within a few hundred microseconds of
/// the post, so the CQ is polled in a loop for [`DIRECT_SPIN`] (longer while
/// the flush is landing), then after sleeps of [`DIRECT_SLEEP_MIN_US`] for
/// [`DIRECT_SHORT_SLEEPS`], then with back-off, instead of in 100 ms slices
/// like C. It does not spin longer: the flush may wait for this very CPU. The
/// watchdog cannot see this wait: it reports itself.
///
/// # Safety
///
/// `q`'s CQ must be a direct CQ from `ib_alloc_cq()`, whose completions the
/// caller may reap here.
unsafe fn reap_direct<'a, Q: WorkQueue<'a>>(q: &mut Q, marker: &DrainMarker) {
    let start = Instant::<Monotonic>::now();
    let mut sleep_us = DIRECT_SLEEP_MIN_US;
    let mut reported_s = 0;
    loop {
        // SAFETY: The caller guarantees that the CQ may be reaped here.
        let reaped = unsafe { q.poll_cq() };
        if marker.is_done() {
            return;
        }
        if keep_spinning(start.elapsed(), reaped) {
            for _ in 0..DIRECT_SPIN_RELAX {
                cpu_relax();
            }
            continue;
        }
        fsleep(Delta::from_micros(sleep_us));
        let waited = start.elapsed();
        if waited >= DIRECT_SHORT_SLEEPS {
            sleep_us = (sleep_us * 2).min(DIRECT_SLEEP_MAX_US);
        }
        let waited_s = waited.as_millis() / 1000;
        if waited_s >= reported_s + i64::from(STUCK_REPORT_SECS) {
            reported_s = waited_s - waited_s % i64::from(STUCK_REPORT_SECS);
            marker.report_waiting(u32::try_from(waited_s).unwrap_or(u32::MAX));
        }
    }
}

/// Whether a direct drain polls again at once, `spun` after the marker's
/// post, its last poll having reaped `reaped` completions: a flush that needs
/// this CPU must not wait longer than the spin's bounds.
fn keep_spinning(spun: Delta, reaped: i32) -> bool {
    spun < DIRECT_SPIN || (reaped > 0 && spun < DIRECT_SPIN_MAX)
}

/// Why a drain could not start. Each reason WARNs once, as the C drain's
/// `WARN_ONCE()`s do, and every refusal prints a rate-limited line.
#[derive(Clone, Copy)]
enum Refusal {
    OnSrq,
    NoCq,
    CqNotAllocated(u32),
    Modify(Error),
    Post(Error),
    SrqModify(Error),
    SrqNoCq,
}

/// Refuses a drain that cannot start: a rate-limited line naming the device
/// and QP, and one WARN per reason.
fn refuse(qp: &Qp, queue: &str, why: Refusal) {
    if let Some(missed) = RATELIMIT.allow() {
        let name = qp.device().name();
        let qpn = qp.qp_num();
        if missed > 0 {
            pr_warn!("{missed} drain refusals not reported\n");
        }
        match why {
            Refusal::OnSrq => pr_warn!(
                "{name}: QP {qpn:#x}: cannot drain the {queue} queue: it is an SRQ, drain the QP with ib_drain_qp()\n"
            ),
            Refusal::NoCq => {
                pr_warn!("{name}: QP {qpn:#x}: cannot drain the {queue} queue: no CQ\n")
            }
            Refusal::CqNotAllocated(id) => pr_warn!(
                "{name}: QP {qpn:#x}: cannot drain the {queue} queue: CQ {id} is not from ib_alloc_cq()\n"
            ),
            Refusal::Modify(e) => pr_warn!(
                "{name}: QP {qpn:#x}: failed to drain {queue} queue: {}\n",
                e.to_errno()
            ),
            Refusal::Post(e) => pr_warn!(
                "{name}: QP {qpn:#x}: failed to drain {queue} queue: {}\n",
                e.to_errno()
            ),
            Refusal::SrqModify(e) => pr_warn!(
                "{name}: QP {qpn:#x}: failed to drain shared recv queue: {}\n",
                e.to_errno()
            ),
            Refusal::SrqNoCq => {
                pr_warn!("{name}: QP {qpn:#x}: cannot drain: no CQ associated with its SRQ\n")
            }
        }
    }
    // One flag per reason: a WARN_ONCE() each, as in C.
    match why {
        Refusal::OnSrq => kernel::do_once_lite! { kernel::warn_on!(true); },
        Refusal::NoCq => kernel::do_once_lite! { kernel::warn_on!(true); },
        Refusal::CqNotAllocated(_) => kernel::do_once_lite! { kernel::warn_on!(true); },
        Refusal::Modify(_) => kernel::do_once_lite! { kernel::warn_on!(true); },
        Refusal::Post(_) => kernel::do_once_lite! { kernel::warn_on!(true); },
        Refusal::SrqModify(_) => kernel::do_once_lite! { kernel::warn_on!(true); },
        Refusal::SrqNoCq => kernel::do_once_lite! { kernel::warn_on!(true); },
    }
}

/// At most `BURST` refusal lines every `INTERVAL_MS`, as printk's default
/// rate limit (`DEFAULT_RATELIMIT_INTERVAL`, `DEFAULT_RATELIMIT_BURST`).
struct RateLimit {
    start: SetOnce<Instant<Monotonic>>,
    window: Atomic<i64>,
    printed: Atomic<u32>,
    missed: Atomic<u32>,
}

static RATELIMIT: RateLimit = RateLimit {
    start: SetOnce::new(),
    window: Atomic::new(0),
    printed: Atomic::new(0),
    missed: Atomic::new(0),
};

impl RateLimit {
    const INTERVAL_MS: i64 = 5_000;
    const BURST: u32 = 10;

    /// Returns `Some(lines missed since the last one)` if a line may be
    /// printed now. Approximate under races, like printk's.
    fn allow(&self) -> Option<u32> {
        self.start.populate(Instant::now());
        let window = self
            .start
            .as_ref()
            .map_or(0, |t| t.elapsed().as_millis() / Self::INTERVAL_MS);
        if self.window.xchg(window, Relaxed) != window {
            self.printed.store(0, Relaxed);
        }
        if self.printed.fetch_add(1, Relaxed) < Self::BURST {
            Some(self.missed.xchg(0, Relaxed))
        } else {
            self.missed.add(1, Relaxed);
            None
        }
    }
}

/// Drains a QP on an SRQ, as the IB spec asks (10.3.1): error state, wait
/// for the Last WQE Reached event, then poll the CQ until it is empty.
fn drain_srq(rq: &mut RecvQueue<'_>) {
    let qp = rq.qp();
    if let Err(e) = qp.set_error_state() {
        refuse(qp, "recv", Refusal::SrqModify(e));
        return;
    }
    let Some(cq) = rq.srq_cq() else {
        refuse(qp, "recv", Refusal::SrqNoCq);
        return;
    };
    if qp.wait_last_wqe_reached(msecs_to_jiffies(60_000)) {
        let mut polled = 0;
        while polled < cq.capacity() {
            // SAFETY: The C drain's contract for a QP on an SRQ: the caller
            // lets the drain reap the SRQ's CQ, as C's ib_drain_srq() does.
            let n = unsafe { rq.poll_srq_cq(cq, cq.capacity() - polled) };
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

#[kunit_tests(rdma_drain_spin)]
mod spin_tests {
    use super::{keep_spinning, DIRECT_SPIN, DIRECT_SPIN_MAX};
    use kernel::time::Delta;

    /// The direct drain's spin ends at [`DIRECT_SPIN`] without progress, and
    /// at [`DIRECT_SPIN_MAX`] however busy the CQ is.
    #[test]
    fn direct_spin_is_bounded() {
        let us = Delta::from_micros;
        let spin = DIRECT_SPIN.as_micros_ceil();
        let max = DIRECT_SPIN_MAX.as_micros_ceil();
        assert!(spin < max);
        assert!(keep_spinning(us(0), 0));
        assert!(keep_spinning(us(spin - 1), 0));
        assert!(!keep_spinning(us(spin), 0));
        assert!(!keep_spinning(us(max - 1), 0));
        assert!(keep_spinning(us(spin), 1));
        assert!(keep_spinning(us(max - 1), 16));
        assert!(!keep_spinning(us(max), 1));
        assert!(!keep_spinning(Delta::from_secs(10), 1));
    }
}
