// SPDX-License-Identifier: GPL-2.0

//! Queue pair drain: `ib_drain_sq()`, `ib_drain_rq()` and `ib_drain_qp()`.
//!
//! A drain moves the QP to the error state, so that the provider flushes
//! every outstanding work request, then posts a marker work request behind
//! them and blocks until the consumer has reaped the marker's completion:
//! completions are reaped in order, so every earlier one has been consumed
//! by then. The receive side of a QP on an SRQ has no queue of its own to
//! post on: it waits for the Last WQE Reached event instead, then reaps the
//! CQ.
//!
//! This is the C drain of verbs.c, function by function, with its C
//! prototypes, exports and callers' contract.
//!
//! A drain whose contract is broken is refused, as at C's `WARN_ONCE()`s,
//! and where C would hang or crash: the QP is moved to the error state
//! first, as C does, and no marker is posted that could not be waited for.
//! Each refusal prints a line naming the device, QP, queue, errno and
//! reason, through the kernel's rate limiter; the first at each call site
//! WARNs, as C's `WARN_ONCE()`.
//!
//! A full CQ drops completions, the marker's too: no drain can then finish,
//! and returning would free the marker under the provider, so the drain
//! keeps waiting, as C's does. After [`STUCK_REPORT_SECS`] it prints one
//! line naming the device, QP, queue and CQ (not a WARN: `panic_on_warn`
//! must not turn a slow provider into a crash), then waits on as C does, so
//! that the hung-task detector reports it as it reports C's.
//!
//! Nobody else polls a direct CQ: the drainer reaps it itself, at once
//! after the post, then between sleeps that grow from 16 us to 16 ms, where
//! C sleeps in 100 ms slices ([`reap_direct`]).

use core::ffi::{c_int, c_void};
use core::fmt;
use kernel::{
    bindings, container_of,
    prelude::*,
    sync::Completion,
    task::might_sleep,
    time::{delay::fsleep, Delta, Instant, Monotonic},
    types::Opaque,
};
use pin_init::stack_pin_init;

// Benchmark only: `bench_switch!` (`CONFIG_INFINIBAND_DRAIN_SWITCH`).
#[macro_use]
mod drain_switch;

/// `HZ`: the bindings' `HZ` is the uapi one.
const HZ: kernel::time::Jiffies = bindings::CONFIG_HZ as kernel::time::Jiffies;

/// Refuses a drain of `$qp`'s `$queue` queue, for `$why`, with errno `$err`:
/// a line naming the device and QP, through the kernel's rate limiter, and
/// the first time at this call site a WARN, as C's `WARN_ONCE()`.
macro_rules! refuse {
    ($qp:expr, $queue:literal, $err:expr, $why:literal) => {{
        let (qp, err): (*mut bindings::ib_qp, c_int) = ($qp, $err);
        // SAFETY: The drain's QP is valid.
        unsafe {
            refused(
                qp,
                format_args!(
                    concat!("failed to drain ", $queue, " queue: {}: ", $why, "\n"),
                    err
                ),
            )
        };
        kernel::warn_once!(
            concat!("failed to drain ", $queue, " queue: {}: ", $why, "\n"),
            err
        );
    }};
}

extern "C" {
    /// The limit of refusal lines: printk's default (verbs.c).
    static ib_drain_ratelimit: Opaque<bindings::ratelimit_state>;
}

/// Prints the line of a refused drain of `qp`, if the kernel's rate limiter
/// lets it through.
///
/// # Safety
///
/// `qp` must be a valid QP.
unsafe fn refused(qp: *mut bindings::ib_qp, args: fmt::Arguments<'_>) {
    // SAFETY: verbs.c defines the state, initialized; `___ratelimit()` takes
    // its lock. The name is a NUL-terminated static string.
    let print =
        unsafe { bindings::___ratelimit(ib_drain_ratelimit.get(), c"ib_drain".as_ptr().cast()) }
            != 0;
    if print {
        // SAFETY: The caller guarantees a valid QP.
        unsafe { qp_warn(qp, args) };
    }
}

/// How long a drain waits for its marker before it says so, once.
const STUCK_REPORT_SECS: u32 = 5;

/// A direct CQ is polled at once after the post, then after a sleep of this
/// long, and then twice as long each time...
const DIRECT_SLEEP_MIN_US: i64 = 16;
/// ... up to this (C sleeps 100 ms).
const DIRECT_SLEEP_MAX_US: i64 = 16_384;

const EINVAL: c_int = -(bindings::EINVAL as c_int);

mod trace {
    use kernel::bindings;

    kernel::declare_trace! {
        /// # Safety
        ///
        /// `cq` must be a valid CQ.
        pub(super) unsafe fn cq_drain_complete(cq: *const bindings::ib_cq);
    }
}

/// The marker (C's `struct ib_drain_cqe`): an `ib_cqe` whose `done`
/// completes `done`.
#[pin_data]
struct DrainCqe {
    #[pin]
    cqe: Opaque<bindings::ib_cqe>,
    #[pin]
    done: Completion,
}

impl DrainCqe {
    fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            cqe: Opaque::new(bindings::ib_cqe {
                done: Some(ib_drain_qp_done),
            }),
            done <- Completion::new(),
        })
    }

    /// The `ib_cqe` for the marker's work request, from a pointer to the
    /// whole marker: `ib_drain_qp_done()` goes back from it to `done`.
    fn wr_cqe(&self) -> *mut bindings::ib_cqe {
        let this = core::ptr::from_ref(self);
        // SAFETY: `this` comes from a reference, so the projection is in
        // bounds.
        Opaque::cast_into(unsafe { &raw const (*this).cqe })
    }
}

/// Runs in the CQ's poll context when the marker's completion is reaped.
///
/// # Safety
///
/// `wc` must be a valid work completion whose `wr_cqe` is the `cqe` of a
/// live [`DrainCqe`].
unsafe extern "C" fn ib_drain_qp_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: The caller guarantees that `wc` is valid.
    let cqe = unsafe { (*wc).__bindgen_anon_1.wr_cqe }.cast::<Opaque<bindings::ib_cqe>>();
    // SAFETY: `cqe` is the `cqe` field of a live `DrainCqe`.
    let drain = unsafe { container_of!(cqe, DrainCqe, cqe) };
    // `complete_all()` takes `done`'s lock, which the waiter takes before it
    // returns, and touches `done` no more once it has dropped it; `Completion`
    // is `Opaque` inside, so a reference to it need not outlive the call.
    // SAFETY: The drainer does not return before `done` has completed, so
    // the marker is live.
    unsafe { (*drain).done.complete_all() };
}

/// Moves `qp` to the error state.
///
/// # Safety
///
/// `qp` must be a valid QP.
unsafe fn modify_to_err(qp: *mut bindings::ib_qp) -> c_int {
    let mut attr = bindings::ib_qp_attr {
        qp_state: bindings::ib_qp_state_IB_QPS_ERR,
        ..Default::default()
    };
    // SAFETY: The caller guarantees a valid QP; `attr` is valid for the mask.
    unsafe {
        bindings::ib_modify_qp(
            qp,
            &mut attr,
            bindings::ib_qp_attr_mask_IB_QP_STATE as c_int,
        )
    }
}

/// Blocks until the completion of `drain`, posted on `qp`'s `queue`, has
/// been reaped on `cq`. A direct CQ is polled here. After
/// [`STUCK_REPORT_SECS`], says so once.
///
/// # Safety
///
/// `qp` and `cq` must be valid.
unsafe fn wait_for_marker(
    qp: *mut bindings::ib_qp,
    queue: &str,
    cq: *mut bindings::ib_cq,
    drain: &DrainCqe,
) {
    // SAFETY: The caller guarantees a valid CQ.
    if unsafe { (*cq).poll_ctx } == bindings::ib_poll_context_IB_POLL_DIRECT {
        // SAFETY: The caller guarantees a valid QP and CQ.
        unsafe { reap_direct(qp, queue, cq, drain) };
    } else if !drain
        .done
        .wait_for_completion_timeout(STUCK_REPORT_SECS as kernel::time::Jiffies * HZ)
    {
        // SAFETY: As above.
        unsafe { report_stuck(qp, queue, cq) };
        drain.done.wait_for_completion();
    }
}

/// Reaps the direct CQ `cq` until `drain` is done: nobody but its user polls
/// it.
///
/// The provider's flush usually lands within a few hundred microseconds of
/// the post, so the CQ is polled at once, then after sleeps that double
/// from [`DIRECT_SLEEP_MIN_US`] to [`DIRECT_SLEEP_MAX_US`], instead of in
/// C's 100 ms slices: the marker is reaped roughly twice as late as it lands
/// (plus `fsleep()`'s slack and the wake-up), with few polls where many
/// drains wait at once. It does not spin: the flush may need this very CPU.
/// After [`STUCK_REPORT_SECS`] it says so once, and then does as C does:
/// waits for the marker up to 100 ms (another poller may reap it), polls,
/// and so on.
///
/// # Safety
///
/// `qp` and `cq` must be valid, and `cq` a direct CQ.
unsafe fn reap_direct(
    qp: *mut bindings::ib_qp,
    queue: &str,
    cq: *mut bindings::ib_cq,
    drain: &DrainCqe,
) {
    let start = Instant::<Monotonic>::now();
    let stuck = Delta::from_secs(STUCK_REPORT_SECS.into());
    let mut sleep_us = DIRECT_SLEEP_MIN_US;
    loop {
        // SAFETY: The caller guarantees a valid direct CQ, polled by its
        // user, here.
        unsafe { bindings::ib_process_cq_direct(cq, -1) };
        if drain.done.completion_done() {
            return;
        }
        if start.elapsed() >= stuck {
            break;
        }
        fsleep(Delta::from_micros(sleep_us));
        sleep_us = (sleep_us * 2).min(DIRECT_SLEEP_MAX_US);
    }
    // SAFETY: The caller guarantees a valid QP and CQ.
    unsafe { report_stuck(qp, queue, cq) };
    while !drain.done.wait_for_completion_timeout(HZ / 10) {
        // SAFETY: As above.
        unsafe { bindings::ib_process_cq_direct(cq, -1) };
    }
}

/// Says that a drain of `qp`'s `queue` has waited [`STUCK_REPORT_SECS`] for
/// its marker on `cq`. Not a WARN: `panic_on_warn` must not turn a slow
/// provider into a crash.
///
/// # Safety
///
/// `qp` and `cq` must be valid.
unsafe fn report_stuck(qp: *mut bindings::ib_qp, queue: &str, cq: *mut bindings::ib_cq) {
    // SAFETY: The caller guarantees a valid CQ.
    let cq_id = unsafe { (*cq).res.id };
    // SAFETY: The caller guarantees a valid QP.
    unsafe {
        qp_warn(
            qp,
            format_args!(
                "{queue} drain waiting for {STUCK_REPORT_SECS} s on CQ {cq_id}, \
                 marker not reaped yet\n"
            ),
        )
    };
}

/// Prints a warning about `qp` as `ibdev_warn()` does: the device's name,
/// then "QP <number>: " and `args`.
///
/// # Safety
///
/// `qp` must be a valid QP.
unsafe fn qp_warn(qp: *mut bindings::ib_qp, args: fmt::Arguments<'_>) {
    // SAFETY: The caller guarantees a valid QP, whose device is valid;
    // `%pA` takes a pointer to a `fmt::Arguments`, valid for the call.
    unsafe {
        bindings::ibdev_warn(
            (*qp).device,
            c"QP %#x: %pA".as_ptr().cast(),
            (*qp).qp_num,
            core::ptr::from_ref(&args).cast::<c_void>(),
        )
    };
}

/// Why a drain cannot wait for a marker on a CQ.
enum BadCq {
    /// No CQ: C would dereference NULL.
    None,
    /// Not from `ib_alloc_cq()`: the marker's `done` would never run, and C
    /// would wait forever.
    NotAllocated,
}

/// Checks that a marker's completion on `cq` would complete the marker.
///
/// # Safety
///
/// `cq` must be a valid CQ, or NULL.
unsafe fn check_cq(cq: *mut bindings::ib_cq) -> Result<(), BadCq> {
    if cq.is_null() {
        return Err(BadCq::None);
    }
    // SAFETY: The caller guarantees a valid CQ. ib_alloc_cq() sets the flag
    // before it returns the CQ; nothing changes it.
    if !unsafe { (*cq).from_ib_alloc_cq } {
        return Err(BadCq::NotAllocated);
    }
    Ok(())
}

/// Posts a marker on the send queue and blocks until its completion is
/// reaped.
///
/// # Safety
///
/// `qp` must be a valid QP.
unsafe fn __ib_drain_sq(qp: *mut bindings::ib_qp) {
    // SAFETY: The caller guarantees a valid QP.
    let cq = unsafe { (*qp).send_cq };

    // SAFETY: As above.
    let ret = unsafe { modify_to_err(qp) };
    if ret != 0 {
        refuse!(qp, "send", ret, "cannot move the QP to the error state");
        return;
    }
    // SAFETY: The CQ, if any, is valid.
    if let Err(why) = unsafe { check_cq(cq) } {
        match why {
            BadCq::None => refuse!(qp, "send", EINVAL, "no CQ"),
            BadCq::NotAllocated => refuse!(qp, "send", EINVAL, "its CQ is not from ib_alloc_cq()"),
        }
        return;
    }

    stack_pin_init!(let sdrain = DrainCqe::new());
    let mut swr = bindings::ib_rdma_wr::default();
    swr.wr.__bindgen_anon_1.wr_cqe = sdrain.wr_cqe();
    swr.wr.opcode = bindings::ib_wr_opcode_IB_WR_RDMA_WRITE;

    // SAFETY: The QP and `swr` are valid. The marker is pinned, and once
    // posted it is not dropped before its completion: this function does not
    // return before then.
    let ret = unsafe { bindings::ib_post_send(qp, &swr.wr, core::ptr::null_mut()) };
    if ret != 0 {
        refuse!(qp, "send", ret, "cannot post the marker");
        return;
    }

    // SAFETY: The QP is valid, and the CQ was checked above.
    unsafe { wait_for_marker(qp, "send", cq, &sdrain) };
}

/// Posts a marker on the receive queue and blocks until its completion is
/// reaped.
///
/// # Safety
///
/// `qp` must be a valid QP.
unsafe fn __ib_drain_rq(qp: *mut bindings::ib_qp) {
    // SAFETY: The caller guarantees a valid QP.
    let cq = unsafe { (*qp).recv_cq };

    // SAFETY: As above.
    let ret = unsafe { modify_to_err(qp) };
    if ret != 0 {
        refuse!(qp, "recv", ret, "cannot move the QP to the error state");
        return;
    }
    // SAFETY: As above. A QP on an SRQ has no receive queue to post on:
    // depending on the provider, C's post fails, or waits forever.
    if !unsafe { (*qp).srq }.is_null() {
        refuse!(
            qp,
            "recv",
            EINVAL,
            "its receives come from an SRQ, drain it with ib_drain_qp()"
        );
        return;
    }
    // SAFETY: The CQ, if any, is valid.
    if let Err(why) = unsafe { check_cq(cq) } {
        match why {
            BadCq::None => refuse!(qp, "recv", EINVAL, "no CQ"),
            BadCq::NotAllocated => refuse!(qp, "recv", EINVAL, "its CQ is not from ib_alloc_cq()"),
        }
        return;
    }

    stack_pin_init!(let rdrain = DrainCqe::new());
    let mut rwr = bindings::ib_recv_wr::default();
    rwr.__bindgen_anon_1.wr_cqe = rdrain.wr_cqe();

    // SAFETY: As in `__ib_drain_sq()`, for the receive queue.
    let ret = unsafe { bindings::ib_post_recv(qp, &rwr, core::ptr::null_mut()) };
    if ret != 0 {
        refuse!(qp, "recv", ret, "cannot post the marker");
        return;
    }

    // SAFETY: The QP is valid, and the CQ was checked above.
    unsafe { wait_for_marker(qp, "recv", cq, &rdrain) };
}

/// Blocks until the Last WQE Reached event of a QP on an SRQ arrives, or
/// 60 s have passed, then reaps the CQ until it is empty.
///
/// This is the first option of the IB specification (10.3.1, Queue Pair and
/// EE Context States) for a QP on an SRQ: put the QP in the error state,
/// wait for the Affiliated Asynchronous Last WQE Reached Event, then poll
/// the CQ until it is empty or the number of polls has reached its
/// capacity.
///
/// # Safety
///
/// `qp` must be a valid QP.
unsafe fn __ib_drain_srq(qp: *mut bindings::ib_qp) {
    // SAFETY: The caller guarantees a valid QP.
    let (srq, qp_num) = unsafe { ((*qp).srq, (*qp).qp_num) };
    if srq.is_null() {
        kernel::warn_once!("QP {qp_num:#x} is not associated with SRQ\n");
        return;
    }

    // SAFETY: As above.
    let ret = unsafe { modify_to_err(qp) };
    if ret != 0 {
        refuse!(
            qp,
            "shared recv",
            ret,
            "cannot move the QP to the error state"
        );
        return;
    }

    // SAFETY: The QP and its SRQ are valid.
    let (has_cq, srq_cq, recv_cq) = unsafe {
        (
            bindings::ib_srq_has_cq((*srq).srq_type),
            (*srq).ext.cq,
            (*qp).recv_cq,
        )
    };
    let cq = if has_cq {
        srq_cq
    } else if !recv_cq.is_null() {
        recv_cq
    } else {
        refuse!(qp, "shared recv", EINVAL, "no CQ");
        return;
    };
    // Polling runs each completion's `ib_cqe::done`, which only CQs from
    // ib_alloc_cq() have: C would call whatever `wr_id` holds.
    // SAFETY: `cq` is valid.
    if unsafe { check_cq(cq) }.is_err() {
        refuse!(
            qp,
            "shared recv",
            EINVAL,
            "its CQ is not from ib_alloc_cq()"
        );
        return;
    }

    // SAFETY: The QP is valid; ib_core initializes `srq_completion` when it
    // creates the QP and completes it on the QP's Last WQE Reached event.
    let reached =
        unsafe { bindings::wait_for_completion_timeout(&raw mut (*qp).srq_completion, 60 * HZ) }
            > 0;
    if reached {
        // SAFETY: `cq` is the valid CQ of the QP's receives.
        let cqe = unsafe { (*cq).cqe };
        let mut polled = 0;
        while polled != cqe {
            // SAFETY: As above; the drain reaps it as C's does.
            let n = unsafe { bindings::ib_process_cq_direct(cq, cqe - polled) };
            if n == 0 {
                return;
            }
            polled += n;
        }
    }
}

/// Blocks until all send completions of `qp` have been consumed by the
/// application. May sleep.
///
/// If the device has a provider-specific drain function, then call that.
/// Otherwise call the generic drain function.
///
/// The caller must ensure there is room in the CQ and SQ for the drain work
/// request and completion, allocate the CQ using `ib_alloc_cq()`, and ensure
/// that there are no other contexts that are posting WRs concurrently.
/// Otherwise the drain is not guaranteed.
///
/// # Safety
///
/// `qp` must be a valid QP.
#[export]
pub unsafe extern "C" fn ib_drain_sq(qp: *mut bindings::ib_qp) {
    might_sleep();
    bench_switch!(qp, ib_drain_sq_c);
    // SAFETY: The caller guarantees a valid QP, whose device is valid.
    let drain_sq = unsafe { (*(*qp).device).ops.drain_sq };
    match drain_sq {
        // SAFETY: The provider's op takes a valid QP.
        Some(drain_sq) => unsafe { drain_sq(qp) },
        // SAFETY: The caller guarantees a valid QP.
        None => unsafe { __ib_drain_sq(qp) },
    }
    // SAFETY: The QP is valid, and so is its send CQ, if any.
    let cq = unsafe { (*qp).send_cq };
    if !cq.is_null() {
        // SAFETY: `cq` is valid.
        unsafe { trace::cq_drain_complete(cq) };
    }
}

/// Blocks until all receive completions of `qp` have been consumed by the
/// application. May sleep.
///
/// If the device has a provider-specific drain function, then call that.
/// Otherwise call the generic drain function.
///
/// The caller must ensure there is room in the CQ and RQ for the drain work
/// request and completion, allocate the CQ using `ib_alloc_cq()`, and ensure
/// that there are no other contexts that are posting WRs concurrently.
/// Otherwise the drain is not guaranteed.
///
/// # Safety
///
/// `qp` must be a valid QP.
#[export]
pub unsafe extern "C" fn ib_drain_rq(qp: *mut bindings::ib_qp) {
    might_sleep();
    bench_switch!(qp, ib_drain_rq_c);
    // SAFETY: The caller guarantees a valid QP, whose device is valid.
    let drain_rq = unsafe { (*(*qp).device).ops.drain_rq };
    match drain_rq {
        // SAFETY: The provider's op takes a valid QP.
        Some(drain_rq) => unsafe { drain_rq(qp) },
        // SAFETY: The caller guarantees a valid QP.
        None => unsafe { __ib_drain_rq(qp) },
    }
    // SAFETY: The QP is valid, and so is its receive CQ, if any.
    let cq = unsafe { (*qp).recv_cq };
    if !cq.is_null() {
        // SAFETY: `cq` is valid.
        unsafe { trace::cq_drain_complete(cq) };
    }
}

/// Blocks until all completions of `qp`, on both the RQ and the SQ, have
/// been consumed by the application. May sleep.
///
/// The caller must ensure there is room in the CQ(s), SQ and RQ for drain
/// work requests and completions, allocate the CQs using `ib_alloc_cq()`,
/// and ensure that there are no other contexts that are posting WRs
/// concurrently. Otherwise the drain is not guaranteed.
///
/// # Safety
///
/// `qp` must be a valid QP.
#[export]
pub unsafe extern "C" fn ib_drain_qp(qp: *mut bindings::ib_qp) {
    might_sleep();
    bench_switch!(qp, ib_drain_qp_c);
    // SAFETY: The caller guarantees a valid QP.
    unsafe { ib_drain_sq(qp) };
    // SAFETY: As above.
    if unsafe { (*qp).srq }.is_null() {
        // SAFETY: As above.
        unsafe { ib_drain_rq(qp) };
    } else {
        // SAFETY: As above.
        unsafe { __ib_drain_srq(qp) };
    }
}
