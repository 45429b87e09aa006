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
//! the provider, so the drain keeps waiting, as the C drain does. After
//! [`STUCK_REPORT_SECS`] it prints one line naming the device, QP, queue and
//! CQ (no WARN: `panic_on_warn` must not turn a slow provider into a crash),
//! then sleeps on untimed, so that the hung-task detector reports it as it
//! reports the C drain (a direct CQ's drainer polls on in C's 100 ms slices,
//! which the detector does not see, as with C). Rust callers cannot get there:
//! `kernel::infiniband::OwnedQp` reserves CQ room for its queues and their
//! markers, and refuses posts beyond a queue's depth.
//!
//! A drain whose contract is broken is refused, as C's `WARN_ONCE()`s do, and
//! where C would hang or crash: the QP is moved to the error state first, as
//! C does, and no marker is posted that could not be waited for. The first
//! refusal of each queue and reason WARNs, after a line naming the device,
//! QP, reason and errno; later ones print that line through the kernel's rate
//! limiter.

use kernel::infiniband::{DrainMarker, PollContext, Qp, RecvQueue, WorkQueue};
use kernel::prelude::*;
use kernel::processor::cpu_relax;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::task::might_sleep;
use kernel::time::{delay::fsleep, Delta, Instant, Jiffies, Monotonic};
use pin_init::stack_pin_init;

// Benchmark only: `bench_switch!` (`CONFIG_INFINIBAND_DRAIN_SWITCH`).
#[macro_use]
mod drain_switch;

/// Prefix of this object's messages (it is part of ib_core, not a module of its own).
const __LOG_PREFIX: &[u8] = b"ib_core\0";

/// How long a drain waits before it says so, once.
const STUCK_REPORT_SECS: u32 = 5;
const STUCK_REPORT_JIFFIES: Jiffies = secs_to_jiffies(STUCK_REPORT_SECS);

/// `secs` in jiffies, at build time as C's `secs * HZ` (`msecs_to_jiffies()`
/// is a call). `CONFIG_HZ`: the bindings' `HZ` is the uapi one.
const fn secs_to_jiffies(secs: u32) -> Jiffies {
    (secs * kernel::bindings::CONFIG_HZ) as Jiffies
}

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
/// Once reported stuck, a direct drain waits for its marker in C's slices.
const DIRECT_STUCK_JIFFIES: Jiffies = secs_to_jiffies(1) / 10;

/// Blocks until all receive completions of `qp` have been consumed.
///
/// # Safety
///
/// `qp` must be a valid QP, and no other context may post receives on it
/// until this returns. The rest of the C drain's contract (room for the
/// marker in the queue and its CQ; a direct CQ may be reaped here) is
/// assumed, as C assumes it.
#[export]
pub unsafe extern "C" fn ib_drain_rq(qp: *mut kernel::bindings::ib_qp) {
    might_sleep();
    bench_switch!(qp, ib_drain_rq_c);
    // SAFETY: The caller guarantees a valid QP and exclusive posting, and
    // keeps the rest of the drain's contract.
    unsafe { drain(&mut Qp::from_raw(qp).recv_queue()) };
}

/// Blocks until all send completions of `qp` have been consumed.
///
/// # Safety
///
/// `qp` must be a valid QP, and no other context may post sends on it until
/// this returns. The rest as for [`ib_drain_rq`].
#[export]
pub unsafe extern "C" fn ib_drain_sq(qp: *mut kernel::bindings::ib_qp) {
    might_sleep();
    bench_switch!(qp, ib_drain_sq_c);
    // SAFETY: As in `ib_drain_rq`, for the send queue.
    unsafe { drain(&mut Qp::from_raw(qp).send_queue()) };
}

/// Blocks until all completions of `qp`, send and receive, have been consumed.
///
/// # Safety
///
/// As for [`ib_drain_rq`] and [`ib_drain_sq`] together. On a QP with an SRQ,
/// the drain may reap the SRQ's CQ beside its poller, as C's does.
#[export]
pub unsafe extern "C" fn ib_drain_qp(qp: *mut kernel::bindings::ib_qp) {
    might_sleep();
    bench_switch!(qp, ib_drain_qp_c);
    // SAFETY: The caller guarantees a valid QP and exclusive posting on both
    // queues, and keeps the rest of the drain's contract.
    unsafe {
        let qp = Qp::from_raw(qp);
        drain(&mut qp.send_queue());
        if qp.has_srq() {
            drain_srq(&mut qp.recv_queue());
        } else {
            drain(&mut qp.recv_queue());
        }
    }
}

/// Drains one work queue, with the provider's drain if it has one.
///
/// # Safety
///
/// The C drain's contract: the queue and its CQ have room for the marker, and
/// a CQ that `drain_generic` does not refuse may be polled here if it is
/// direct. (The provider's op is called as C calls it, without the checks
/// `drain_generic` makes: the provider owns that path.)
unsafe fn drain<'a, Q: WorkQueue<'a>>(q: &mut Q) {
    // SAFETY: The caller keeps the C drain's contract.
    if !unsafe { q.provider_drain() } {
        // SAFETY: As above.
        unsafe { drain_generic(q) };
    }
    if let Some(cq) = q.cq() {
        cq.trace_drain_complete();
    }
}

/// The drain of a queue without the provider's op: see the module docs.
///
/// # Safety
///
/// As for [`drain`].
unsafe fn drain_generic<'a, Q: WorkQueue<'a>>(q: &mut Q) {
    let qp = q.qp();
    // As C: the error state first, whatever is refused after it.
    if let Err(e) = qp.set_error_state() {
        refuse(qp, Q::NAME, Why::Modify, e);
        return;
    }
    // C's post would fail: no queue of its own to post a marker on.
    if q.is_shared() {
        refuse(qp, Q::NAME, Why::OnSrq, EINVAL);
        return;
    }
    // C would dereference a NULL CQ.
    let Some(cq) = q.cq() else {
        refuse(qp, Q::NAME, Why::NoCq, EINVAL);
        return;
    };
    // The marker's completion must reach `DrainMarker`'s `done`, which only
    // ib_alloc_cq() CQs call; C would post and wait forever.
    if !cq.calls_cqe_done() {
        refuse(qp, Q::NAME, Why::CqNotAllocated, EINVAL);
        return;
    }

    stack_pin_init!(let marker = DrainMarker::new());
    // SAFETY: The caller keeps the C drain's contract; the CQ was checked.
    if let Err(e) = unsafe { q.post_marker(marker.as_ref()) } {
        refuse(qp, Q::NAME, Why::Post, e);
        return;
    }

    // From here on the provider points at `marker`: never return before it
    // completed (`DrainMarker`'s drop would wait too).
    if cq.poll_context() == Some(PollContext::Direct) {
        // SAFETY: A direct CQ from ib_alloc_cq() (checked above): its
        // completions are ours to reap, here.
        unsafe { reap_direct(q, marker.as_ref()) };
        return;
    }
    if !marker.as_ref().wait_timeout(STUCK_REPORT_JIFFIES) {
        report_stuck(qp, Q::NAME, cq.id());
        marker.as_ref().wait();
    }
}

/// Says, once, that a drain of `qp`'s `queue` has waited
/// [`STUCK_REPORT_SECS`] for its marker on CQ `cq_id`. Not a WARN:
/// `panic_on_warn` must not turn a slow provider into a crash.
fn report_stuck(qp: &Qp, queue: &str, cq_id: u32) {
    pr_warn!(
        "{}: QP {:#x}: {queue} drain waiting for {STUCK_REPORT_SECS} s on CQ {cq_id}, \
         marker not reaped yet\n",
        qp.device().name(),
        qp.qp_num()
    );
}

/// Reaps a direct CQ until `marker`, posted on `q`, is done: no CQ poller
/// does it for us. Never returns before that.
///
/// The provider's flush usually lands within a few hundred microseconds of
/// the post, so the CQ is polled in a loop for [`DIRECT_SPIN`] (longer while
/// the flush is landing), then after sleeps of [`DIRECT_SLEEP_MIN_US`] for
/// [`DIRECT_SHORT_SLEEPS`], then with back-off, instead of in 100 ms slices
/// like C. It does not spin longer: the flush may wait for this very CPU.
/// After [`STUCK_REPORT_SECS`] it says so once, as a drain that sleeps does,
/// and then does as C does: waits for the marker up to 100 ms (another
/// poller of the CQ may reap it), polls, and so on.
///
/// # Safety
///
/// `q`'s CQ must be a direct CQ from `ib_alloc_cq()`, whose completions the
/// caller may reap here.
unsafe fn reap_direct<'a, Q: WorkQueue<'a>>(q: &mut Q, marker: Pin<&DrainMarker>) {
    let start = Instant::<Monotonic>::now();
    let mut sleep_us = DIRECT_SLEEP_MIN_US;
    let stuck = Delta::from_secs(STUCK_REPORT_SECS.into());
    let mut reported = false;
    loop {
        // SAFETY: The caller guarantees that the CQ may be reaped here.
        let reaped = unsafe { q.poll_cq() };
        if marker.is_done() {
            return;
        }
        if reported {
            // C's loop: the wait ends early if another poller reaps it.
            if marker.wait_timeout(DIRECT_STUCK_JIFFIES) {
                return;
            }
            continue;
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
        if waited >= stuck {
            reported = true;
            report_stuck(q.qp(), Q::NAME, q.cq().map_or(0, |cq| cq.id()));
        }
    }
}

/// Whether a direct drain polls again at once, `spun` after the marker's
/// post, its last poll having reaped `reaped` completions: a flush that needs
/// this CPU must not wait longer than the spin's bounds.
const fn keep_spinning(spun: Delta, reaped: i32) -> bool {
    let ns = spun.as_nanos();
    ns < DIRECT_SPIN.as_nanos() || (reaped > 0 && ns < DIRECT_SPIN_MAX.as_nanos())
}

// The spin ends at `DIRECT_SPIN` without progress, and at `DIRECT_SPIN_MAX`
// however busy the CQ is: checked when ib_core is built.
const SPIN_NS: i64 = DIRECT_SPIN.as_nanos();
const SPIN_MAX_NS: i64 = DIRECT_SPIN_MAX.as_nanos();
static_assert!(SPIN_NS < SPIN_MAX_NS);
static_assert!(keep_spinning(Delta::from_nanos(0), 0));
static_assert!(keep_spinning(Delta::from_nanos(SPIN_NS - 1), 0));
static_assert!(!keep_spinning(Delta::from_nanos(SPIN_NS), 0));
static_assert!(!keep_spinning(Delta::from_nanos(SPIN_MAX_NS - 1), 0));
static_assert!(keep_spinning(Delta::from_nanos(SPIN_NS), 1));
static_assert!(keep_spinning(Delta::from_nanos(SPIN_MAX_NS - 1), 16));
static_assert!(!keep_spinning(Delta::from_nanos(SPIN_MAX_NS), 1));
static_assert!(!keep_spinning(Delta::from_secs(10), 1));

/// Why a drain was refused. With the queue, one of C's `WARN_ONCE()` sites
/// (send and recv queue: modify, post; shared recv queue: modify, no CQ), or
/// a case where C would dereference NULL (no CQ), hang (a CQ not from
/// `ib_alloc_cq()`; on an SRQ, jump to its `wr_id`) or post in vain (an SRQ).
#[derive(Clone, Copy)]
enum Why {
    Modify,
    OnSrq,
    NoCq,
    CqNotAllocated,
    Post,
}

impl kernel::fmt::Display for Why {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        match self {
            Why::Modify => f.write_str("cannot move the QP to the error state"),
            Why::OnSrq => f.write_str("its receives come from an SRQ, drain it with ib_drain_qp()"),
            Why::NoCq => f.write_str("no CQ"),
            Why::CqNotAllocated => f.write_str("its CQ is not from ib_alloc_cq()"),
            Why::Post => f.write_str("cannot post the marker"),
        }
    }
}

/// The queues a drain refuses, as its messages name them.
const QUEUES: [&str; 3] = ["send", "recv", "shared recv"];

/// Which site (queue and reason) has WARNed: each does once, as C's
/// `WARN_ONCE()`, and, as its flags, in `.data..once` (which
/// `/sys/kernel/debug/clear_warn_once` re-arms in a built-in ib_core).
#[link_section = ".data..once"]
static WARNED: [Atomic<bool>; QUEUES.len() * WHYS] =
    [const { Atomic::new(false) }; QUEUES.len() * WHYS];
const WHYS: usize = Why::Post as usize + 1;

extern "C" {
    /// The limit of refusal lines after the first of each site, printk's
    /// default (`DEFINE_RATELIMIT_STATE` in verbs.c).
    static mut ib_drain_ratelimit: kernel::bindings::ratelimit_state;
}

/// Refuses a drain: a line naming the device, QP, queue, reason and errno,
/// and a WARN the first time for this queue and reason; later refusals print
/// the line through the kernel's rate limiter, and do not WARN.
fn refuse(qp: &Qp, queue: &str, why: Why, err: Error) {
    let q = QUEUES.iter().position(|&n| n == queue).unwrap_or(0);
    let first = !WARNED[q * WHYS + why as usize].xchg(true, Relaxed);
    if first || ratelimit() {
        pr_warn!(
            "{}: QP {:#x}: failed to drain {queue} queue: {}: {why}\n",
            qp.device().name(),
            qp.qp_num(),
            err.to_errno()
        );
    }
    kernel::warn_on!(first);
}

/// Whether the kernel's rate limiter lets another refusal line through.
fn ratelimit() -> bool {
    // SAFETY: verbs.c defines the state, initialized; `___ratelimit()` takes
    // its lock. The name is a NUL-terminated static string.
    unsafe {
        kernel::bindings::___ratelimit(&raw mut ib_drain_ratelimit, c"ib_drain".as_char_ptr()) != 0
    }
}

/// Drains a QP on an SRQ, as the IB spec asks (10.3.1): error state, wait
/// for the Last WQE Reached event, then poll the CQ until it is empty.
///
/// # Safety
///
/// The C drain's contract for a QP on an SRQ: the drain may reap the SRQ's
/// CQ beside its poller, as C's `__ib_drain_srq()` does.
unsafe fn drain_srq(rq: &mut RecvQueue<'_>) {
    let qp = rq.qp();
    if let Err(e) = qp.set_error_state() {
        refuse(qp, "shared recv", Why::Modify, e);
        return;
    }
    let Some(cq) = rq.srq_cq() else {
        refuse(qp, "shared recv", Why::NoCq, EINVAL);
        return;
    };
    // Polling runs each completion's `ib_cqe::done`: only CQs from
    // ib_alloc_cq() have one. C would jump to whatever `wr_id` holds.
    if !cq.calls_cqe_done() {
        refuse(qp, "shared recv", Why::CqNotAllocated, EINVAL);
        return;
    }
    // SAFETY: This is the SRQ drain.
    if unsafe { qp.wait_last_wqe_reached(secs_to_jiffies(60)) } {
        let mut polled = 0;
        while polled < cq.capacity() {
            // SAFETY: A CQ from ib_alloc_cq() (checked above); the caller
            // lets the drain reap it.
            let n = unsafe { rq.poll_srq_cq(cq, cq.capacity() - polled) };
            if n <= 0 {
                break;
            }
            polled += n;
        }
    }
}
