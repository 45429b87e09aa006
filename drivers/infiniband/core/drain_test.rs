// SPDX-License-Identifier: GPL-2.0

//! KUnit tests of the queue pair drain against a fake provider, a module of
//! their own (`ib_drain_test`): loading ib_core runs no test.
//!
//! The fake device, CQs and QPs are plain zeroed C objects with a few
//! `ib_device_ops` that record what the drain asks of them; nothing is
//! registered with the RDMA core. The drain is called through the exported C
//! ABI, as every C caller does; of ib_core's internals the tests use only
//! the drain's tracepoint and its rate limit, exported for KUnit. Expected
//! WARNs are counted with KUnit's warning suppression, so they neither print
//! nor fail the log scan.
//!
//! # What a caller observes
//!
//! Each behaviour a caller can observe, one per item: the tests that fail
//! when it changes (cases here unless named otherwise: suites of `make
//! test`, or its host checks on the console), and the deliberate breakages
//! of the project's `scripts/mutants/` that show they do ((d): on the debug
//! kernel).
//!
//! - A provider's `drain_sq`/`drain_rq` op replaces the generic path. Fails:
//!   `provider_drain_ops_replace_the_generic_path`. Mutants: 04.
//! - Error state, then the marker: a bare receive, or a zero-length RDMA WRITE.
//!   Fails: `rq_goes_to_error_then_posts_a_bare_marker`,
//!   `sq_marker_is_a_zero_length_rdma_write`. Mutants: 01, 02, 36.
//! - Returns only once the marker has completed. Fails:
//!   `stuck_drain_on_a_softirq_cq_is_reported_once_and_waits`. Mutants: 03.
//! - `ib_drain_qp()`: send queue, then receive queue (even after the send queue
//!   was refused) or the SRQ path. Fails: `drain_qp_drains_sq_then_rq`,
//!   `drain_qp_drains_the_rq_after_the_sq_is_refused`,
//!   `drain_qp_with_an_srq_takes_the_srq_path`. Mutants: 07.
//! - `cq_drain_complete` once per drain, with its CQ, after either path; none
//!   where the QP has no such CQ. Fails:
//!   `tracepoint_fires_once_per_drain_with_its_cq`,
//!   `provider_drain_ops_replace_the_generic_path`,
//!   `drain_sq_without_a_cq_is_refused_in_the_error_state`. Mutants: 04, 06.
//! - No allocation. Fails: `drain_allocates_nothing`. Mutants: 37.
//! - Direct CQ: polled at once after the post, then after sleeps from 16 us to
//!   16 ms, in 100 ms slices after the line. Fails:
//!   `direct_cq_is_polled_until_the_marker_is_reaped`,
//!   `stuck_drain_is_reported_once_and_keeps_waiting`. Mutants: 09, 16, 29, 44,
//!   45, 51.
//! - SRQ path: polls only after Last WQE Reached (at most 60 s), at most the CQ's
//!   capacity, on the SRQ's own CQ where it has one. Fails:
//!   `srq_path_polls_only_after_last_wqe_reached`,
//!   `srq_path_reaps_at_most_the_cq_s_capacity`,
//!   `srq_path_reaps_the_srq_s_own_cq`, `rdma_drain_siw_srq_bound`. Mutants: 08,
//!   31, 35, 46.
//! - Refusals (modify fails, post fails on either queue, CQ not from
//!   `ib_alloc_cq()`, no CQ on either queue, `ib_drain_rq()` on a QP on an SRQ,
//!   the SRQ path's own): error state first where it can, a WARN each, no wait.
//!   Fails: `failed_modify_warns_on_each_queue_and_posts_nothing`,
//!   `failed_post_warns_and_does_not_wait_on_either_queue`,
//!   `cq_not_from_ib_alloc_cq_is_refused_in_the_error_state`,
//!   `drain_without_a_cq_is_refused_in_the_error_state`,
//!   `drain_sq_without_a_cq_is_refused_in_the_error_state`,
//!   `drain_rq_of_a_qp_on_an_srq_is_refused_in_the_error_state`,
//!   `srq_path_failed_modify_warns_and_posts_nothing`,
//!   `srq_path_refuses_a_cq_it_cannot_poll`, `rdma_drain_rxe_faults`. Mutants:
//!   05, 15, 20, 34.
//! - A site WARNs once, its text in the splat (one site shown: the receive
//!   queue's failed modify; KUnit's suppression does not use up the once). Fails:
//!   `rdma_drain_warn_once`. Mutants: 13.
//! - A line per refusal, naming device, QP, queue, errno and reason, through the
//!   kernel's rate limiter. Fails: host checks `refusals_reported` and
//!   `refusal_lines_rate_limited` (1 to 10 lines of the burst),
//!   `a_burst_of_refusals_is_rate_limited` (the limiter's count). Mutants: 12,
//!   22, 43.
//! - QPs in RESET (RESET -> ERR allowed, or refused as the core's table and rxe
//!   do: a failed modify) and INIT. Fails:
//!   `qps_in_reset_and_init_are_drained_as_the_provider_allows`. Mutants: 32.
//! - As C's drain, side by side, in every case C survives, but for two
//!   differences. Fails: `c_and_rust_drains_are_seen_alike`. Mutants: 01, 07, 20,
//!   32.
//! - A drain that waits 5 s says so once, while it waits, naming device, QP,
//!   queue and CQ, without a WARN. Fails: host check `stuck_drain_reported` (the
//!   line between the marks the stuck cases print, 5 to 8 s after the first),
//!   `stuck_drain_is_reported_once_and_keeps_waiting`,
//!   `stuck_drain_on_a_softirq_cq_is_reported_once_and_waits`. Mutants: 14, 21,
//!   33.
//! - The hung-task detector reports a drain blocked long (`CONFIG_KASAN`
//!   kernels). Fails: `rdma_drain_hung_task_report`, host check
//!   `hung_task_names_the_drain`;
//!   `a_drain_blocked_for_long_is_seen_by_the_hung_task_detector` keeps one
//!   blocked. Mutants: 39 (d).
//! - `might_sleep()` on entry of each export (`CONFIG_DEBUG_ATOMIC_SLEEP`).
//!   Fails: host check `might_sleep_names_the_drain`;
//!   `a_drain_in_atomic_context_is_reported_by_each_export` calls each in atomic
//!   context. Mutants: 38 (d).
//!
//! Each test prints what the console checks need.

use core::ptr::null_mut;
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, Ordering::SeqCst,
};
use kernel::{bindings, error::to_result, kunit, prelude::*};

module! {
    type: DrainTest,
    name: "ib_drain_test",
    authors: ["Rust RDMA drain project"],
    description: "KUnit tests of the queue pair drain",
    license: "GPL",
    imports_ns: ["EXPORTED_FOR_KUNIT_TESTING"],
}

struct DrainTest;

impl kernel::Module for DrainTest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(DrainTest)
    }
}

/// A QP's state, as the tests compare it.
#[derive(Debug, PartialEq, Clone, Copy)]
enum QpState {
    Reset,
    Init,
    Rts,
    Err,
    Other(bindings::ib_qp_state),
}

/// What the fake provider saw, and how it behaves. One test at a time.
struct Fake {
    seq: AtomicU32,
    modify_calls: AtomicU32,
    modify_seq: AtomicU32,
    modify_state: AtomicU32,
    modify_ret: AtomicI32,
    /// The QP's state: what the last successful modify set.
    qp_state: AtomicU32,
    /// Refuse RESET -> ERR with `EINVAL`, as the core's state table
    /// (`ib_modify_qp_is_ok()`) and rxe do; siw allows it.
    refuse_reset_to_err: AtomicBool,
    post_recv_calls: AtomicU32,
    post_recv_seq: AtomicU32,
    post_send_calls: AtomicU32,
    post_send_seq: AtomicU32,
    post_ret: AtomicI32,
    posted_num_sge: AtomicI32,
    posted_has_next: AtomicBool,
    posted_opcode: AtomicU32,
    posted_cqe: AtomicPtr<bindings::ib_cqe>,
    /// The CQ of the last post.
    posted_cq: AtomicPtr<bindings::ib_cq>,
    /// Complete a posted marker from inside post (a provider that flushes at
    /// once, reaped by the core's poller).
    complete_on_post: AtomicBool,
    polls: AtomicU32,
    /// `seq` at the first poll (0: none yet).
    first_poll_seq: AtomicU32,
    /// The CQ of the last poll.
    polled_cq: AtomicPtr<bindings::ib_cq>,
    /// Return the marker's completion from this poll on (0: never).
    complete_on_poll: AtomicU32,
    /// ... and not before this many ms after the first poll.
    complete_after_ms: AtomicU32,
    /// `ktime_get()` at the last post.
    posted_ns: AtomicI64,
    /// `ktime_get()` at each of the first nine polls.
    poll_ns: [AtomicI64; 9],
    /// Polls 1 to 5 s after the first.
    mid_polls: AtomicU32,
    /// Polls more than 6 s after the first.
    stuck_polls: AtomicU32,
    drain_rq_calls: AtomicU32,
    drain_sq_calls: AtomicU32,
    trace_hits: AtomicU32,
    trace_cq: AtomicPtr<bindings::ib_cq>,
    /// Completions other than the marker that the CQ holds, each returned
    /// with `backlog_cqe`, whose `done` counts them in `backlog_reaped`.
    backlog: AtomicU32,
    backlog_cqe: AtomicPtr<bindings::ib_cqe>,
    backlog_reaped: AtomicU32,
}

static FAKE: Fake = Fake {
    seq: AtomicU32::new(0),
    modify_calls: AtomicU32::new(0),
    modify_seq: AtomicU32::new(0),
    modify_state: AtomicU32::new(0),
    modify_ret: AtomicI32::new(0),
    qp_state: AtomicU32::new(0),
    refuse_reset_to_err: AtomicBool::new(false),
    post_recv_calls: AtomicU32::new(0),
    post_recv_seq: AtomicU32::new(0),
    post_send_calls: AtomicU32::new(0),
    post_send_seq: AtomicU32::new(0),
    post_ret: AtomicI32::new(0),
    posted_num_sge: AtomicI32::new(-1),
    posted_has_next: AtomicBool::new(false),
    posted_opcode: AtomicU32::new(u32::MAX),
    posted_cqe: AtomicPtr::new(null_mut()),
    posted_cq: AtomicPtr::new(null_mut()),
    polled_cq: AtomicPtr::new(null_mut()),
    complete_on_post: AtomicBool::new(false),
    polls: AtomicU32::new(0),
    first_poll_seq: AtomicU32::new(0),
    complete_on_poll: AtomicU32::new(0),
    complete_after_ms: AtomicU32::new(0),
    posted_ns: AtomicI64::new(0),
    poll_ns: [const { AtomicI64::new(0) }; 9],
    mid_polls: AtomicU32::new(0),
    stuck_polls: AtomicU32::new(0),
    drain_rq_calls: AtomicU32::new(0),
    drain_sq_calls: AtomicU32::new(0),
    trace_hits: AtomicU32::new(0),
    trace_cq: AtomicPtr::new(null_mut()),
    backlog: AtomicU32::new(0),
    backlog_cqe: AtomicPtr::new(null_mut()),
    backlog_reaped: AtomicU32::new(0),
};

impl Fake {
    fn reset(&self) {
        for a in [
            &self.seq,
            &self.modify_calls,
            &self.modify_seq,
            &self.modify_state,
            &self.post_recv_calls,
            &self.post_recv_seq,
            &self.post_send_calls,
            &self.post_send_seq,
            &self.polls,
            &self.first_poll_seq,
            &self.complete_on_poll,
            &self.complete_after_ms,
            &self.mid_polls,
            &self.stuck_polls,
            &self.drain_rq_calls,
            &self.drain_sq_calls,
            &self.trace_hits,
            &self.backlog,
            &self.backlog_reaped,
        ] {
            a.store(0, SeqCst);
        }
        self.backlog_cqe.store(null_mut(), SeqCst);
        self.modify_ret.store(0, SeqCst);
        self.qp_state
            .store(bindings::ib_qp_state_IB_QPS_RTS, SeqCst);
        self.refuse_reset_to_err.store(false, SeqCst);
        self.post_ret.store(0, SeqCst);
        self.posted_num_sge.store(-1, SeqCst);
        self.posted_has_next.store(false, SeqCst);
        self.posted_opcode.store(u32::MAX, SeqCst);
        self.posted_cqe.store(null_mut(), SeqCst);
        self.posted_cq.store(null_mut(), SeqCst);
        self.complete_on_post.store(true, SeqCst);
        self.trace_cq.store(null_mut(), SeqCst);
        self.polled_cq.store(null_mut(), SeqCst);
        self.posted_ns.store(0, SeqCst);
        for t in &self.poll_ns {
            t.store(0, SeqCst);
        }
    }

    fn tick(&self) -> u32 {
        self.seq.fetch_add(1, SeqCst) + 1
    }
}

/// Completes the marker `cqe` on `cq` with a flush error, as the core's
/// poller would.
///
/// # Safety
///
/// `cqe` must be the posted marker and `cq` a valid CQ.
unsafe fn complete(cq: *mut bindings::ib_cq, cqe: *mut bindings::ib_cqe) {
    let mut wc = bindings::ib_wc {
        status: bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR,
        ..Default::default()
    };
    wc.__bindgen_anon_1.wr_cqe = cqe;
    // SAFETY: The caller guarantees a valid marker; its `done` is set.
    unsafe { ((*cqe).done.unwrap())(cq, &mut wc) };
}

/// The fake `ops.modify_qp`: records the call and returns `FAKE.modify_ret`.
///
/// # Safety
///
/// Called by the RDMA core with valid arguments.
unsafe extern "C" fn fake_modify_qp(
    _qp: *mut bindings::ib_qp,
    attr: *mut bindings::ib_qp_attr,
    _mask: i32,
    _udata: *mut bindings::ib_udata,
) -> i32 {
    FAKE.modify_calls.fetch_add(1, SeqCst);
    FAKE.modify_seq.store(FAKE.tick(), SeqCst);
    // SAFETY: The core passes a valid attribute set.
    let state = unsafe { (*attr).qp_state };
    FAKE.modify_state.store(state, SeqCst);
    let mut ret = FAKE.modify_ret.load(SeqCst);
    if FAKE.qp_state.load(SeqCst) == bindings::ib_qp_state_IB_QPS_RESET
        && state == bindings::ib_qp_state_IB_QPS_ERR
        && FAKE.refuse_reset_to_err.load(SeqCst)
    {
        ret = -(bindings::EINVAL as i32);
    }
    if ret == 0 {
        FAKE.qp_state.store(state, SeqCst);
    }
    ret
}

/// The fake `ops.query_qp`: the state the last successful modify set.
///
/// # Safety
///
/// Called by the RDMA core with valid arguments.
unsafe extern "C" fn fake_query_qp(
    _qp: *mut bindings::ib_qp,
    attr: *mut bindings::ib_qp_attr,
    _mask: i32,
    _init_attr: *mut bindings::ib_qp_init_attr,
) -> i32 {
    // SAFETY: The core passes a valid attribute set.
    unsafe { (*attr).qp_state = FAKE.qp_state.load(SeqCst) };
    0
}

/// The fake `ops.post_recv`: records the work request; may complete it.
/// As real providers (rxe's `rxe_post_recv()`), it fails with `EINVAL` on a
/// QP whose receives come from an SRQ, and on a QP in RESET.
///
/// # Safety
///
/// Called by the RDMA core with valid arguments.
unsafe extern "C" fn fake_post_recv(
    qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_recv_wr,
    _bad: *mut *const bindings::ib_recv_wr,
) -> i32 {
    FAKE.post_recv_calls.fetch_add(1, SeqCst);
    FAKE.post_recv_seq.store(FAKE.tick(), SeqCst);
    // SAFETY: The core passes a valid QP.
    if !unsafe { (*qp).srq }.is_null()
        || FAKE.qp_state.load(SeqCst) == bindings::ib_qp_state_IB_QPS_RESET
    {
        return -(bindings::EINVAL as i32);
    }
    // SAFETY: The core passes a valid QP and work request.
    unsafe {
        record_post(
            (*qp).recv_cq,
            (*wr).__bindgen_anon_1.wr_cqe,
            (*wr).num_sge,
            !(*wr).next.is_null(),
        )
    }
}

/// Records a posted work request and returns `FAKE.post_ret`; completes the
/// request on `cq` if the post succeeds and `FAKE.complete_on_post` is set.
///
/// # Safety
///
/// `cq` must be a valid CQ of the fake QP, and `cqe` the posted entry.
unsafe fn record_post(
    cq: *mut bindings::ib_cq,
    cqe: *mut bindings::ib_cqe,
    num_sge: i32,
    has_next: bool,
) -> i32 {
    let ret = FAKE.post_ret.load(SeqCst);
    FAKE.posted_num_sge.store(num_sge, SeqCst);
    FAKE.posted_has_next.store(has_next, SeqCst);
    FAKE.posted_cqe.store(cqe, SeqCst);
    FAKE.posted_cq.store(cq, SeqCst);
    // SAFETY: Reads the clock; no preconditions.
    let now = unsafe { bindings::ktime_get() };
    FAKE.posted_ns.store(now, SeqCst);
    if ret == 0 && FAKE.complete_on_post.load(SeqCst) {
        // SAFETY: The caller guarantees a valid CQ; `cqe` is the marker.
        unsafe { complete(cq, cqe) };
    }
    ret
}

/// The fake `ops.post_send`: records the work request; may complete it.
/// As real providers, it fails with `EINVAL` on a QP in RESET or INIT.
///
/// # Safety
///
/// Called by the RDMA core with valid arguments.
unsafe extern "C" fn fake_post_send(
    qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_send_wr,
    _bad: *mut *const bindings::ib_send_wr,
) -> i32 {
    FAKE.post_send_calls.fetch_add(1, SeqCst);
    FAKE.post_send_seq.store(FAKE.tick(), SeqCst);
    let state = FAKE.qp_state.load(SeqCst);
    if state == bindings::ib_qp_state_IB_QPS_RESET || state == bindings::ib_qp_state_IB_QPS_INIT {
        return -(bindings::EINVAL as i32);
    }
    // SAFETY: The core passes a valid QP and work request.
    unsafe {
        FAKE.posted_opcode.store((*wr).opcode, SeqCst);
        record_post(
            (*qp).send_cq,
            (*wr).__bindgen_anon_1.wr_cqe,
            (*wr).num_sge,
            !(*wr).next.is_null(),
        )
    }
}

/// The fake `ops.poll_cq`: returns the marker from poll `FAKE.complete_on_poll`
/// on, and not before `FAKE.complete_after_ms` since the first poll.
///
/// # Safety
///
/// Called by the RDMA core with valid arguments.
unsafe extern "C" fn fake_poll_cq(
    cq: *mut bindings::ib_cq,
    num_entries: i32,
    wc: *mut bindings::ib_wc,
) -> i32 {
    FAKE.polled_cq.store(cq, SeqCst);
    let n = FAKE.polls.fetch_add(1, SeqCst) + 1;
    // SAFETY: Reads the clock; no preconditions.
    let now = unsafe { bindings::ktime_get() };
    if n == 1 {
        FAKE.first_poll_seq.store(FAKE.tick(), SeqCst);
    }
    if let Some(t) = FAKE.poll_ns.get(n as usize - 1) {
        t.store(now, SeqCst);
    }
    let first = FAKE.poll_ns[0].load(SeqCst);
    if (1_000_000_001..=5_000_000_000).contains(&(now - first)) {
        FAKE.mid_polls.fetch_add(1, SeqCst);
    }
    if now - first > 6_000_000_000 {
        FAKE.stuck_polls.fetch_add(1, SeqCst);
    }
    let backlog = FAKE.backlog.load(SeqCst);
    let backlog_cqe = FAKE.backlog_cqe.load(SeqCst);
    if backlog > 0 && num_entries > 0 && !backlog_cqe.is_null() {
        let n = backlog.min(num_entries.unsigned_abs());
        for i in 0..n as usize {
            // SAFETY: The core passes room for `num_entries` completions.
            unsafe {
                *wc.add(i) = bindings::ib_wc {
                    status: bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR,
                    ..Default::default()
                };
                (*wc.add(i)).__bindgen_anon_1.wr_cqe = backlog_cqe;
            }
        }
        FAKE.backlog.fetch_sub(n, SeqCst);
        // CAST: At most `num_entries`.
        return n as i32;
    }
    let at = FAKE.complete_on_poll.load(SeqCst);
    let not_before = first + i64::from(FAKE.complete_after_ms.load(SeqCst)) * 1_000_000;
    let cqe = FAKE.posted_cqe.swap(null_mut(), SeqCst);
    if at == 0 || n < at || now < not_before || cqe.is_null() || num_entries < 1 {
        if !cqe.is_null() {
            FAKE.posted_cqe.store(cqe, SeqCst);
        }
        return 0;
    }
    // SAFETY: The core passes room for `num_entries` completions.
    unsafe {
        *wc = bindings::ib_wc {
            status: bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR,
            ..Default::default()
        };
        (*wc).__bindgen_anon_1.wr_cqe = cqe;
    }
    if FAKE.complete_after_ms.load(SeqCst) != 0 {
        pr_info!("{STUCK_MARKER_DONE}\n");
    }
    1
}

/// The `done` of the backlog's completions: counts them.
///
/// # Safety
///
/// Called by the RDMA core's poller with valid arguments.
unsafe extern "C" fn backlog_done(_cq: *mut bindings::ib_cq, _wc: *mut bindings::ib_wc) {
    FAKE.backlog_reaped.fetch_add(1, SeqCst);
}

/// Printed right before a stuck drain begins, and when its marker is
/// completed: `make test` checks that the drain's stuck line comes between
/// the two, 5 s after the first (run-tests.sh).
const STUCK_BEGINS: &str = "stuck drain begins";
const STUCK_MARKER_DONE: &str = "stuck drain's marker completes";

/// The fake provider `ops.drain_rq`: counts calls.
///
/// # Safety
///
/// Called by the RDMA core with valid arguments.
unsafe extern "C" fn fake_drain_rq(_qp: *mut bindings::ib_qp) {
    FAKE.drain_rq_calls.fetch_add(1, SeqCst);
}

/// The fake provider `ops.drain_sq`: counts calls.
///
/// # Safety
///
/// Called by the RDMA core with valid arguments.
unsafe extern "C" fn fake_drain_sq(_qp: *mut bindings::ib_qp) {
    FAKE.drain_sq_calls.fetch_add(1, SeqCst);
}

/// Probe of `cq_drain_complete`: counts hits, keeps the last CQ.
///
/// # Safety
///
/// Called by the tracepoint with valid arguments.
unsafe extern "C" fn trace_probe(_data: *mut c_void, cq: *const bindings::ib_cq) {
    FAKE.trace_hits.fetch_add(1, SeqCst);
    FAKE.trace_cq.store(cq.cast_mut(), SeqCst);
}

/// Heap allocations made by `ALLOC_TASK` while it is set.
static ALLOCS: AtomicU32 = AtomicU32::new(0);
static ALLOC_TASK: AtomicPtr<bindings::task_struct> = AtomicPtr::new(null_mut());

#[expect(
    improper_ctypes,
    reason = "only the addresses of these statics are used, never their contents"
)]
extern "C" {
    // Exported by mm/slab_common.c (EXPORT_TRACEPOINT_SYMBOL).
    static mut __tracepoint_kmalloc: bindings::tracepoint;
    static mut __tracepoint_kmem_cache_alloc: bindings::tracepoint;
}

fn count_alloc() {
    // SAFETY: Reading the current task pointer is always allowed.
    if unsafe { bindings::get_current() } == ALLOC_TASK.load(SeqCst) {
        ALLOCS.fetch_add(1, SeqCst);
    }
}

/// Probe of the `kmalloc` tracepoint.
///
/// # Safety
///
/// Called by the tracepoint with valid arguments.
unsafe extern "C" fn kmalloc_probe(
    _data: *mut c_void,
    _site: usize,
    _ptr: *const c_void,
    _req: usize,
    _alloc: usize,
    _gfp: bindings::gfp_t,
    _node: i32,
) {
    count_alloc();
}

/// Probe of the `kmem_cache_alloc` tracepoint.
///
/// # Safety
///
/// Called by the tracepoint with valid arguments.
unsafe extern "C" fn cache_alloc_probe(
    _data: *mut c_void,
    _site: usize,
    _ptr: *const c_void,
    _s: *mut bindings::kmem_cache,
    _gfp: bindings::gfp_t,
    _node: i32,
) {
    count_alloc();
}

/// Runs `f` and returns how many heap allocations this task made meanwhile.
fn count_allocations(f: impl FnOnce()) -> Result<u32> {
    let km = &raw mut __tracepoint_kmalloc;
    let kc = &raw mut __tracepoint_kmem_cache_alloc;
    let (pk, pc) = (
        kmalloc_probe as *const () as *mut c_void,
        cache_alloc_probe as *const () as *mut c_void,
    );
    // SAFETY: The probes have the events' prototypes and are static.
    to_result(unsafe { bindings::tracepoint_probe_register(km, pk, null_mut()) })?;
    // SAFETY: As above.
    if let Err(e) = to_result(unsafe { bindings::tracepoint_probe_register(kc, pc, null_mut()) }) {
        // SAFETY: Registered above.
        unsafe { bindings::tracepoint_probe_unregister(km, pk, null_mut()) };
        return Err(e);
    }
    // Count only inside `f`: registering a probe allocates too.
    ALLOCS.store(0, SeqCst);
    // SAFETY: Reading the current task pointer is always allowed.
    ALLOC_TASK.store(unsafe { bindings::get_current() }, SeqCst);
    f();
    ALLOC_TASK.store(null_mut(), SeqCst);
    // SAFETY: Both registered above.
    unsafe {
        bindings::tracepoint_probe_unregister(km, pk, null_mut());
        bindings::tracepoint_probe_unregister(kc, pc, null_mut());
    }
    Ok(ALLOCS.load(SeqCst))
}

/// Runs `f` with [`trace_probe`] on `cq_drain_complete`.
fn with_trace_probe(f: impl FnOnce()) -> Result {
    let tp = &raw mut bindings::__tracepoint_cq_drain_complete;
    let probe = trace_probe as *const () as *mut c_void;
    // SAFETY: The probe has the event's prototype and, like FAKE, is static.
    to_result(unsafe { bindings::tracepoint_probe_register(tp, probe, null_mut()) })?;
    f();
    // SAFETY: Registered above.
    unsafe { bindings::tracepoint_probe_unregister(tp, probe, null_mut()) };
    Ok(())
}

/// A zero-filled heap object.
fn zeroed_box<T>() -> Result<KBox<T>> {
    let b = KBox::<T>::new_uninit(GFP_KERNEL)?;
    // SAFETY: All-zero bytes are a valid value for the C structs used here
    // (integers, raw pointers, `Option` of function pointers).
    Ok(unsafe {
        let raw = KBox::into_raw(b);
        raw.cast::<u8>().write_bytes(0, core::mem::size_of::<T>());
        KBox::from_raw(raw.cast::<T>())
    })
}

/// A fake device, one CQ per queue and a QP, wired together.
struct Setup {
    dev: KBox<bindings::ib_device>,
    ports: KBox<[bindings::ib_port_data; 2]>,
    send_cq: KBox<bindings::ib_cq>,
    recv_cq: KBox<bindings::ib_cq>,
    srq: KBox<bindings::ib_srq>,
    qp: KBox<bindings::ib_qp>,
}

impl Setup {
    fn new(recv_ctx: bindings::ib_poll_context) -> Result<Self> {
        FAKE.reset();
        let mut s = Self {
            dev: zeroed_box()?,
            ports: zeroed_box()?,
            send_cq: zeroed_box()?,
            recv_cq: zeroed_box()?,
            srq: zeroed_box()?,
            qp: zeroed_box()?,
        };
        s.dev.port_data = s.ports.as_mut_ptr();
        for (d, &b) in s.dev.name.iter_mut().zip(FAKE_NAME.to_bytes()) {
            *d = b as c_char;
        }
        // The drain prints with ibdev_warn(), which names the device by
        // dev_name(): the device is not registered, so its init_name.
        s.dev.__bindgen_anon_1.dev.init_name = FAKE_NAME.as_char_ptr();
        s.dev.ops.modify_qp = Some(fake_modify_qp);
        s.dev.ops.query_qp = Some(fake_query_qp);
        s.dev.ops.post_recv = Some(fake_post_recv);
        s.dev.ops.post_send = Some(fake_post_send);
        s.dev.ops.poll_cq = Some(fake_poll_cq);
        let dev: *mut bindings::ib_device = &mut *s.dev;
        // Distinct restrack ids: the stuck line must name the drained CQ.
        for (cq, ctx, id) in [
            (
                &mut s.send_cq,
                bindings::ib_poll_context_IB_POLL_SOFTIRQ,
                SEND_CQ_ID,
            ),
            (&mut s.recv_cq, recv_ctx, RECV_CQ_ID),
        ] {
            cq.res.id = id;
            cq.device = dev;
            cq.poll_ctx = ctx;
            cq.cqe = 4;
            // As ib_alloc_cq() marks its CQs: completions call their done.
            cq.from_ib_alloc_cq = true;
        }
        s.qp.device = dev;
        s.qp.send_cq = &mut *s.send_cq;
        s.qp.recv_cq = &mut *s.recv_cq;
        s.qp.qp_num = 0x42;
        s.qp.real_qp = &mut *s.qp;
        s.srq.srq_type = bindings::ib_srq_type_IB_SRQT_BASIC;
        // SAFETY: `srq_completion` is ours to initialize.
        unsafe { bindings::init_completion(&mut s.qp.srq_completion) };
        Ok(s)
    }

    fn qp(&mut self) -> *mut bindings::ib_qp {
        &mut *self.qp
    }

    /// The QP's state, as `ib_query_qp()` reports it.
    fn state(&mut self) -> Result<QpState> {
        let mut attr = bindings::ib_qp_attr::default();
        let mut init_attr = bindings::ib_qp_init_attr::default();
        // SAFETY: The fake QP is valid while `self` lives; `attr` and
        // `init_attr` are valid for writes.
        to_result(unsafe {
            bindings::ib_query_qp(
                self.qp(),
                &mut attr,
                bindings::ib_qp_attr_mask_IB_QP_STATE as i32,
                &mut init_attr,
            )
        })?;
        Ok(match attr.qp_state {
            bindings::ib_qp_state_IB_QPS_RESET => QpState::Reset,
            bindings::ib_qp_state_IB_QPS_INIT => QpState::Init,
            bindings::ib_qp_state_IB_QPS_RTS => QpState::Rts,
            bindings::ib_qp_state_IB_QPS_ERR => QpState::Err,
            other => QpState::Other(other),
        })
    }
}

/// The fake device's name, in the reports of a long drain.
const FAKE_NAME: &CStr = c"fake0";

/// The fake CQs' restrack ids, in the reports of a long drain
/// (`scripts/run-tests.sh` reads the receive CQ's).
const SEND_CQ_ID: u32 = 7;
const RECV_CQ_ID: u32 = 9;

const SOFTIRQ: bindings::ib_poll_context = bindings::ib_poll_context_IB_POLL_SOFTIRQ;
const DIRECT: bindings::ib_poll_context = bindings::ib_poll_context_IB_POLL_DIRECT;

#[kunit_tests(rdma_drain_unit)]
mod tests {
    use super::*;

    /// The provider's ops replace the generic path, and the tracepoint
    /// fires after them too, once per drain, with the queue's CQ.
    #[test]
    fn provider_drain_ops_replace_the_generic_path() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        s.dev.ops.drain_rq = Some(fake_drain_rq);
        s.dev.ops.drain_sq = Some(fake_drain_sq);
        let qp = s.qp();
        let mut hits = [(0, null_mut()); 2];
        with_trace_probe(|| {
            // SAFETY: A valid fake QP; nothing else posts.
            unsafe { bindings::ib_drain_rq(qp) };
            hits[0] = (FAKE.trace_hits.load(SeqCst), FAKE.trace_cq.load(SeqCst));
            // SAFETY: As above.
            unsafe { bindings::ib_drain_sq(qp) };
            hits[1] = (FAKE.trace_hits.load(SeqCst), FAKE.trace_cq.load(SeqCst));
        })?;
        assert_eq!(hits[0], (1, core::ptr::from_mut(&mut *s.recv_cq)));
        assert_eq!(hits[1], (2, core::ptr::from_mut(&mut *s.send_cq)));
        assert_eq!(FAKE.drain_rq_calls.load(SeqCst), 1);
        assert_eq!(FAKE.drain_sq_calls.load(SeqCst), 1);
        assert_eq!(FAKE.modify_calls.load(SeqCst), 0);
        assert_eq!(FAKE.post_recv_calls.load(SeqCst), 0);
        assert_eq!(FAKE.post_send_calls.load(SeqCst), 0);
        Ok(())
    }

    #[test]
    fn rq_goes_to_error_then_posts_a_bare_marker() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        // SAFETY: A valid fake QP; nothing else posts.
        unsafe { bindings::ib_drain_rq(s.qp()) };
        assert_eq!(FAKE.modify_calls.load(SeqCst), 1);
        assert_eq!(
            FAKE.modify_state.load(SeqCst),
            bindings::ib_qp_state_IB_QPS_ERR
        );
        assert_eq!(FAKE.post_recv_calls.load(SeqCst), 1);
        assert!(FAKE.modify_seq.load(SeqCst) < FAKE.post_recv_seq.load(SeqCst));
        assert_eq!(FAKE.posted_num_sge.load(SeqCst), 0);
        assert!(!FAKE.posted_has_next.load(SeqCst));
        assert!(!FAKE.posted_cqe.load(SeqCst).is_null());
        Ok(())
    }

    #[test]
    fn sq_marker_is_a_zero_length_rdma_write() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        // SAFETY: A valid fake QP; nothing else posts.
        unsafe { bindings::ib_drain_sq(s.qp()) };
        assert_eq!(FAKE.modify_calls.load(SeqCst), 1);
        assert_eq!(s.state()?, QpState::Err);
        assert!(FAKE.modify_seq.load(SeqCst) < FAKE.post_send_seq.load(SeqCst));
        assert_eq!(
            FAKE.posted_opcode.load(SeqCst),
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE
        );
        assert_eq!(FAKE.posted_num_sge.load(SeqCst), 0);
        assert_eq!(FAKE.post_recv_calls.load(SeqCst), 0);
        Ok(())
    }

    #[test]
    fn direct_cq_is_polled_until_the_marker_is_reaped() -> Result {
        let mut s = Setup::new(DIRECT)?;
        FAKE.complete_on_post.store(false, SeqCst);
        FAKE.complete_on_poll.store(3, SeqCst);
        // SAFETY: A valid fake QP; nothing else posts or polls.
        unsafe { bindings::ib_drain_rq(s.qp()) };
        // Reaped on the third poll, and no poll after it.
        assert_eq!(FAKE.polls.load(SeqCst), 3);
        assert!(FAKE.posted_cqe.load(SeqCst).is_null());
        Ok(())
    }

    #[test]
    fn tracepoint_fires_once_per_drain_with_its_cq() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        let qp = s.qp();
        let (mut rq_hits, mut rq_cq, mut sq_hits, mut sq_cq) = (0, null_mut(), 0, null_mut());
        with_trace_probe(|| {
            // SAFETY: A valid fake QP; nothing else posts.
            unsafe { bindings::ib_drain_rq(qp) };
            (rq_hits, rq_cq) = (FAKE.trace_hits.load(SeqCst), FAKE.trace_cq.load(SeqCst));
            // SAFETY: As above.
            unsafe { bindings::ib_drain_sq(qp) };
            (sq_hits, sq_cq) = (FAKE.trace_hits.load(SeqCst), FAKE.trace_cq.load(SeqCst));
        })?;
        assert_eq!(rq_hits, 1);
        assert_eq!(rq_cq, core::ptr::from_mut(&mut *s.recv_cq));
        assert_eq!(sq_hits, 2);
        assert_eq!(sq_cq, core::ptr::from_mut(&mut *s.send_cq));
        Ok(())
    }

    /// No heap allocation on the drain path, generic or direct: the marker
    /// lives on the stack. (The fake provider allocates nothing either.)
    #[test]
    fn drain_allocates_nothing() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        let qp = s.qp();
        // SAFETY: A valid fake QP; nothing else posts.
        let n = count_allocations(|| unsafe { bindings::ib_drain_qp(qp) })?;
        assert_eq!(n, 0);
        let mut s = Setup::new(DIRECT)?;
        FAKE.complete_on_post.store(false, SeqCst);
        FAKE.complete_on_poll.store(2, SeqCst);
        let qp = s.qp();
        // SAFETY: As above.
        let n = count_allocations(|| unsafe { bindings::ib_drain_rq(qp) })?;
        assert_eq!(n, 0);
        // The counter works: an allocation is seen (more than one on a
        // debug kernel, where kmemleak allocates its own tracking object).
        let n = count_allocations(|| drop(KBox::new(0u64, GFP_KERNEL)))?;
        assert!(n >= 1);
        Ok(())
    }

    #[test]
    fn drain_qp_drains_sq_then_rq() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        // SAFETY: A valid fake QP; nothing else posts.
        unsafe { bindings::ib_drain_qp(s.qp()) };
        assert_eq!(FAKE.post_send_calls.load(SeqCst), 1);
        assert_eq!(FAKE.post_recv_calls.load(SeqCst), 1);
        assert!(FAKE.post_send_seq.load(SeqCst) < FAKE.post_recv_seq.load(SeqCst));
        Ok(())
    }

    #[test]
    fn drain_qp_with_an_srq_takes_the_srq_path() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        s.qp.srq = &mut *s.srq;
        // The Last WQE Reached event has arrived.
        // SAFETY: Initialized in `Setup::new`.
        unsafe { bindings::complete(&mut s.qp.srq_completion) };
        // SAFETY: A valid fake QP; nothing else posts.
        unsafe { bindings::ib_drain_qp(s.qp()) };
        assert_eq!(FAKE.post_send_calls.load(SeqCst), 1);
        // No receive marker on an SRQ: error state, event, then poll the CQ.
        assert_eq!(FAKE.post_recv_calls.load(SeqCst), 0);
        assert_eq!(FAKE.modify_calls.load(SeqCst), 2);
        assert!(FAKE.polls.load(SeqCst) >= 1);
        // A basic SRQ has no CQ: its completions go to the QP's recv CQ.
        assert_eq!(FAKE.polled_cq.load(SeqCst), &raw mut *s.recv_cq);
        Ok(())
    }

    /// An SRQ type with a CQ of its own (XRC, tag matching): the SRQ path
    /// reaps that CQ, not the QP's receive CQ (`ib_srq_has_cq()`).
    #[test]
    fn srq_path_reaps_the_srq_s_own_cq() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        s.srq.srq_type = bindings::ib_srq_type_IB_SRQT_XRC;
        // The SRQ's own CQ: the send CQ, which the send queue's drain does
        // not poll (its marker completes in the post).
        s.srq.ext.cq = &raw mut *s.send_cq;
        s.qp.srq = &mut *s.srq;
        // SAFETY: Initialized in `Setup::new`.
        unsafe { bindings::complete(&mut s.qp.srq_completion) };
        // SAFETY: A valid fake QP; nothing else posts.
        unsafe { bindings::ib_drain_qp(s.qp()) };
        assert!(FAKE.polls.load(SeqCst) >= 1);
        assert_eq!(FAKE.polled_cq.load(SeqCst), &raw mut *s.send_cq);
        Ok(())
    }
}

/// The SRQ path waits for the Last WQE Reached event before it polls: a
/// worker raises the event 200 ms into the drain, and the first poll of
/// the SRQ's CQ comes after it.
#[kunit_tests(rdma_drain_unit_srq)]
mod srq_tests {
    use super::*;
    use kernel::io::poll::read_poll_timeout;
    use kernel::time::{delay::fsleep, Delta};
    use kernel::workqueue;

    #[test]
    fn srq_path_polls_only_after_last_wqe_reached() -> Result {
        static EVENT_SEQ: AtomicU32 = AtomicU32::new(0);
        static WORKER_DONE: AtomicBool = AtomicBool::new(false);
        let mut s = Setup::new(SOFTIRQ)?;
        s.qp.srq = &mut *s.srq;
        EVENT_SEQ.store(0, SeqCst);
        WORKER_DONE.store(false, SeqCst);
        let event = core::ptr::from_mut(&mut s.qp.srq_completion) as usize;
        workqueue::system_long().try_spawn(GFP_KERNEL, move || {
            fsleep(Delta::from_millis(200));
            EVENT_SEQ.store(FAKE.tick(), SeqCst);
            // SAFETY: The fake QP outlives the worker (see below).
            unsafe { bindings::complete(event as *mut bindings::completion) };
            WORKER_DONE.store(true, SeqCst);
        })?;
        // SAFETY: A valid fake QP; nothing else posts.
        unsafe { bindings::ib_drain_qp(s.qp()) };
        let first_poll = FAKE.first_poll_seq.load(SeqCst);
        // Whatever the drain did, the fake QP stays until the worker is done.
        let worker_done = read_poll_timeout(
            || Ok(WORKER_DONE.load(SeqCst)),
            |&done| done,
            Delta::from_millis(1),
            Delta::from_secs(10),
        );
        if worker_done.is_err() {
            core::mem::forget(s);
            return Err(ETIMEDOUT);
        }
        let event_seq = EVENT_SEQ.load(SeqCst);
        assert_ne!(first_poll, 0);
        assert!(first_poll > event_seq);
        Ok(())
    }

    /// After Last WQE Reached the SRQ path reaps at most the CQ's capacity
    /// (`cq->cqe`, 4 here), as C's: more is left to the CQ's own poller.
    #[test]
    fn srq_path_reaps_at_most_the_cq_s_capacity() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        s.qp.srq = &mut *s.srq;
        // SAFETY: The fake QP's completion, initialized by `Setup`: the
        // event came before the drain.
        unsafe { bindings::complete(&mut s.qp.srq_completion) };
        let mut cqe = KBox::new(
            bindings::ib_cqe {
                done: Some(backlog_done),
            },
            GFP_KERNEL,
        )?;
        FAKE.backlog_cqe.store(&mut *cqe, SeqCst);
        FAKE.backlog.store(10, SeqCst);
        // SAFETY: A valid fake QP; nothing else posts or polls.
        unsafe { bindings::ib_drain_qp(s.qp()) };
        FAKE.backlog_cqe.store(null_mut(), SeqCst);
        assert_eq!(FAKE.backlog_reaped.load(SeqCst), 4);
        assert_eq!(FAKE.backlog.load(SeqCst), 6);
        Ok(())
    }
}

/// Faults of the provider or the caller, each with its documented outcome:
/// the QP in the error state where the modify succeeded (as C leaves it), a
/// line naming device, QP, queue, errno and reason (the host checks the
/// console for each), and a WARN at each refusal site (`warn_once!()`, as
/// C's `WARN_ONCE()`); or, for a slow marker, one line without a WARN, and
/// a wait that still ends.
///
/// A warning that KUnit suppresses and counts does not use up its site's
/// once (as with C's `WARN_ONCE()`): every refusal here counts one WARN,
/// whatever refused drains before, and leaves the sites armed.
#[kunit_tests(rdma_drain_unit_faults)]
mod fault_tests {
    use super::*;

    /// Each queue's failed modify WARNs at its own site (C has a
    /// `WARN_ONCE()` in each queue's drain), posts nothing, and leaves the
    /// QP as it was.
    #[test]
    fn failed_modify_warns_on_each_queue_and_posts_nothing() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        FAKE.modify_ret.store(-(bindings::EINVAL as i32), SeqCst);
        let qp = s.qp();
        let mut warns = [None; 4];
        for (i, w) in warns.iter_mut().enumerate() {
            // SAFETY: A valid fake QP; nothing else posts.
            *w = kunit::count_warnings(|| unsafe {
                if i < 2 {
                    bindings::ib_drain_sq(qp)
                } else {
                    bindings::ib_drain_rq(qp)
                }
            });
        }
        assert_eq!(warns, [Some(1); 4]);
        assert_eq!(FAKE.modify_calls.load(SeqCst), 4);
        assert_eq!(FAKE.post_recv_calls.load(SeqCst), 0);
        assert_eq!(FAKE.post_send_calls.load(SeqCst), 0);
        assert_eq!(s.state()?, QpState::Rts);
        Ok(())
    }

    /// A marker the provider refuses, on either queue: WARN, error state,
    /// and no wait for a completion that cannot come.
    #[test]
    fn failed_post_warns_and_does_not_wait_on_either_queue() -> Result {
        for sq in [false, true] {
            let mut s = Setup::new(SOFTIRQ)?;
            FAKE.post_ret.store(-(bindings::ENOMEM as i32), SeqCst);
            let drain = if sq {
                bindings::ib_drain_sq
            } else {
                bindings::ib_drain_rq
            };
            // The post fails and the marker never completes: a drain that
            // waited anyway is ended by the watcher after 3 s, and seen.
            for _ in 0..2 {
                let w = watched_drain(s, 3_000, drain)?;
                s = w.s;
                assert!(!w.rescued);
                assert_eq!(w.warns, Some(1));
            }
            let posts = (
                FAKE.post_send_calls.load(SeqCst),
                FAKE.post_recv_calls.load(SeqCst),
            );
            assert_eq!(posts, if sq { (2, 0) } else { (0, 2) });
            assert_eq!(s.state()?, QpState::Err);
        }
        Ok(())
    }

    /// A QP in RESET or INIT is drained as any other. Where the provider
    /// allows RESET -> ERR (siw does), both queues go to the error state
    /// and their markers are flushed, with no WARN; where it refuses it, as
    /// the core's state table and rxe do, each queue's drain WARNs at its
    /// failed modify, posts nothing, and leaves the QP in RESET. As C does
    /// (`rdma_drain_unit_c_reference` runs both side by side).
    #[test]
    fn qps_in_reset_and_init_are_drained_as_the_provider_allows() -> Result {
        use bindings::{ib_qp_state_IB_QPS_INIT as INIT, ib_qp_state_IB_QPS_RESET as RESET};
        // (state before, provider refuses RESET -> ERR, WARNs, markers, state after)
        let cases = [
            (RESET, false, 0, 2, QpState::Err),
            (RESET, true, 2, 0, QpState::Reset),
            (INIT, false, 0, 2, QpState::Err),
        ];
        for (before, refuse, warns, markers, after) in cases {
            let mut s = Setup::new(SOFTIRQ)?;
            FAKE.qp_state.store(before, SeqCst);
            FAKE.refuse_reset_to_err.store(refuse, SeqCst);
            let qp = s.qp();
            // SAFETY: A valid fake QP; nothing else posts.
            let seen = kunit::count_warnings(|| unsafe { bindings::ib_drain_qp(qp) });
            assert_eq!(seen, Some(warns));
            let posts = FAKE.post_send_calls.load(SeqCst) + FAKE.post_recv_calls.load(SeqCst);
            assert_eq!(posts, markers);
            assert_eq!(FAKE.modify_calls.load(SeqCst), 2);
            assert_eq!(s.state()?, after);
        }
        Ok(())
    }

    /// Refusals print through the kernel's rate limiter (printk's default,
    /// 10 lines in 5 s): of a burst of 40 in one interval, at least 30 are
    /// counted as missed.
    #[test]
    fn a_burst_of_refusals_is_rate_limited() -> Result {
        extern "C" {
            static ib_drain_ratelimit: kernel::types::Opaque<bindings::ratelimit_state>;
        }
        // SAFETY: verbs.c defines it and exports it with
        // `EXPORT_SYMBOL_IF_KUNIT()`; `missed` is an `atomic_t`.
        let missed =
            || unsafe { bindings::atomic_read(&raw const (*ib_drain_ratelimit.get()).missed) };
        let mut s = Setup::new(SOFTIRQ)?;
        FAKE.post_ret.store(-(bindings::ENOMEM as i32), SeqCst);
        let qp = s.qp();
        // Let the limiter's interval end: the refusal after it starts a new
        // one, which the burst then fits in.
        kernel::time::delay::fsleep(kernel::time::Delta::from_millis(5_100));
        // `make test` counts the refusal lines between the two marks: at
        // most the limiter's burst (10), and at least the first.
        pr_info!("refusal burst begins\n");
        // SAFETY: A valid fake QP; nothing else posts.
        let mut warns = kunit::count_warnings(|| unsafe { bindings::ib_drain_rq(qp) });
        let before = missed();
        for _ in 0..40 {
            // SAFETY: As above.
            let w = kunit::count_warnings(|| unsafe { bindings::ib_drain_rq(qp) });
            warns = warns.zip(w).map(|(a, b)| a + b);
        }
        let after = missed();
        pr_info!("refusal burst ends\n");
        pr_info!("refusal burst: {} of 40 lines suppressed\n", after - before);
        assert_eq!(warns, Some(41));
        assert!(after - before >= 30);
        assert_eq!(FAKE.post_recv_calls.load(SeqCst), 41);
        Ok(())
    }

    /// A marker reaped only after ~11 s: the drain reports itself once (a
    /// line naming the device, QP, queue and CQ, which `make test` counts:
    /// one per drain, where a report every 5 s would make two; no WARN)
    /// and still returns only after the marker completed.
    #[test]
    fn stuck_drain_is_reported_once_and_keeps_waiting() -> Result {
        let mut s = Setup::new(DIRECT)?;
        FAKE.complete_on_post.store(false, SeqCst);
        FAKE.complete_on_poll.store(1, SeqCst);
        FAKE.complete_after_ms.store(11_000, SeqCst);
        let qp = s.qp();
        pr_info!("{STUCK_BEGINS}\n");
        // SAFETY: A valid fake QP; nothing else posts or polls.
        let warns = kunit::count_warnings(|| unsafe { bindings::ib_drain_rq(qp) });
        assert_eq!(warns, Some(0));
        // It polled at once, then slept between polls: 16 us first, then
        // twice as long each time up to 16 ms (a 16 ms `fsleep()` takes at
        // least 17 ms, so at most 250 polls from 1 s to 5 s; a drain that
        // never slept: millions). Reported at 5 s, it polls in C's 100 ms
        // slices (at most ~55 polls after 6 s; 16 ms sleeps: ~300), at least
        // twice as long as its sleeps before (sleeps capped at 100 ms: as
        // long). The early polls are judged against the same run's 16 ms
        // sleeps, so a slow guest (whose short sleeps take milliseconds)
        // passes, and sleeps of 16 ms from the start (8 sleeps as long as 8
        // of them) or a 16 ms sleep before the first poll do not.
        let t = |i: usize| FAKE.poll_ns[i].load(SeqCst);
        let first_us = (t(0) - FAKE.posted_ns.load(SeqCst)) / 1_000;
        let early_us = (t(8) - t(0)) / 1_000;
        let mid = FAKE.mid_polls.load(SeqCst);
        let gap_us = 4_000_000 / i64::from(mid.max(1));
        let stuck = FAKE.stuck_polls.load(SeqCst);
        let slice_us = 5_000_000 / i64::from(stuck.max(1));
        pr_info!(
            "stuck direct drain: first poll {} us after the post, 8 more in {} us, one every {} us from 1 s to 5 s, every {} us after 6 s\n",
            first_us,
            early_us,
            gap_us,
            slice_us
        );
        // Each bound is broken by a mutant of its own (16, 44, 45, 29, 51).
        assert!((16..=250).contains(&mid));
        assert!(first_us * 2 < gap_us);
        assert!(early_us < 4 * gap_us);
        assert!((20..=80).contains(&stuck));
        assert!(gap_us * 2 < slice_us);
        assert!(FAKE.posted_cqe.load(SeqCst).is_null());
        Ok(())
    }

    /// The same on a softirq CQ: one line after 5 s (no WARN), then an
    /// untimed sleep until the marker, completed by a worker after ~11 s,
    /// is reaped.
    #[test]
    fn stuck_drain_on_a_softirq_cq_is_reported_once_and_waits() -> Result {
        let late = late_marker_drain(11_000)?;
        assert_eq!(late.warns, Some(0));
        assert!(late.rescued);
        assert_eq!(FAKE.post_recv_calls.load(SeqCst), 1);
        Ok(())
    }

    /// C would post and wait forever: the marker's `done` is never called.
    #[test]
    fn cq_not_from_ib_alloc_cq_is_refused_in_the_error_state() -> Result {
        // One WARN, one modify (to ERR), no post.
        let refused = drain_rq_broken(|s| s.recv_cq.from_ib_alloc_cq = false)?;
        assert_eq!(refused, (Some(1), 1, 0, QpState::Err));
        Ok(())
    }

    /// `ib_drain_rq()` on a QP whose receives come from an SRQ has no queue
    /// to post its marker on: in the error state, as C leaves it, no post.
    #[test]
    fn drain_rq_of_a_qp_on_an_srq_is_refused_in_the_error_state() -> Result {
        // One WARN, one modify (to ERR), no post.
        let refused = drain_rq_broken(|s| s.qp.srq = &mut *s.srq)?;
        assert_eq!(refused, (Some(1), 1, 0, QpState::Err));
        Ok(())
    }

    /// No receive CQ: C would dereference NULL after the modify.
    #[test]
    fn drain_without_a_cq_is_refused_in_the_error_state() -> Result {
        // One WARN, one modify (to ERR), no post.
        let refused = drain_rq_broken(|s| s.qp.recv_cq = null_mut())?;
        assert_eq!(refused, (Some(1), 1, 0, QpState::Err));
        Ok(())
    }

    #[test]
    fn drain_sq_without_a_cq_is_refused_in_the_error_state() -> Result {
        // Let the rate limit's interval end: the refusals from here on (8
        // lines) print each, for `make test` to find.
        kernel::time::delay::fsleep(kernel::time::Delta::from_millis(5_100));
        let mut s = Setup::new(SOFTIRQ)?;
        s.qp.send_cq = null_mut();
        let qp = s.qp();
        let mut warns = None;
        with_trace_probe(|| {
            // SAFETY: A valid fake QP; nothing else posts.
            warns = kunit::count_warnings(|| unsafe { bindings::ib_drain_sq(qp) });
        })?;
        // One WARN, one modify (to ERR), no post, and no tracepoint (C's
        // passes it the NULL CQ, which the event dereferences).
        assert_eq!(warns, Some(1));
        assert_eq!(FAKE.trace_hits.load(SeqCst), 0);
        assert_eq!(FAKE.modify_calls.load(SeqCst), 1);
        assert_eq!(FAKE.post_send_calls.load(SeqCst), 0);
        assert_eq!(s.state()?, QpState::Err);
        Ok(())
    }

    /// The SRQ path's failed modify is a site of its own (C's "failed to
    /// drain shared recv queue"): `ib_drain_qp()` WARNs twice, for the send
    /// queue and for it, and posts nothing.
    #[test]
    fn srq_path_failed_modify_warns_and_posts_nothing() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        s.qp.srq = &mut *s.srq;
        FAKE.modify_ret.store(-(bindings::EINVAL as i32), SeqCst);
        let qp = s.qp();
        // SAFETY: A valid fake QP; nothing else posts.
        let first = kunit::count_warnings(|| unsafe { bindings::ib_drain_qp(qp) });
        // SAFETY: As above.
        let again = kunit::count_warnings(|| unsafe { bindings::ib_drain_qp(qp) });
        assert_eq!((first, again), (Some(2), Some(2)));
        assert_eq!(FAKE.modify_calls.load(SeqCst), 4);
        assert_eq!(FAKE.polls.load(SeqCst), 0);
        Ok(())
    }

    /// `ib_drain_qp()` goes on to the receive queue after the send queue
    /// was refused (here: a send CQ not from `ib_alloc_cq()`), as C does.
    #[test]
    fn drain_qp_drains_the_rq_after_the_sq_is_refused() -> Result {
        let mut s = Setup::new(SOFTIRQ)?;
        s.send_cq.from_ib_alloc_cq = false;
        let qp = s.qp();
        // SAFETY: A valid fake QP; nothing else posts.
        let warns = kunit::count_warnings(|| unsafe { bindings::ib_drain_qp(qp) });
        assert_eq!(warns, Some(1));
        assert_eq!(FAKE.post_send_calls.load(SeqCst), 0);
        assert_eq!(FAKE.post_recv_calls.load(SeqCst), 1);
        assert_eq!(s.state()?, QpState::Err);
        Ok(())
    }

    /// The SRQ path's CQ must come from `ib_alloc_cq()` and exist: its
    /// completions' `done` is run by the poll (C would jump to a `wr_id`, or
    /// dereference NULL). Each is refused in the error state, with no poll.
    #[test]
    fn srq_path_refuses_a_cq_it_cannot_poll() -> Result {
        for no_cq in [false, true] {
            let mut s = Setup::new(SOFTIRQ)?;
            s.qp.srq = &mut *s.srq;
            if no_cq {
                s.qp.recv_cq = null_mut();
            } else {
                s.recv_cq.from_ib_alloc_cq = false;
            }
            let qp = s.qp();
            // SAFETY: A valid fake QP; nothing else posts.
            let warns = kunit::count_warnings(|| unsafe { bindings::ib_drain_qp(qp) });
            assert_eq!(warns, Some(1));
            assert_eq!(FAKE.polls.load(SeqCst), 0);
            assert_eq!(s.state()?, QpState::Err);
        }
        Ok(())
    }
}

/// The C drain (`CONFIG_INFINIBAND_DRAIN_C_REFERENCE`) and the Rust one
/// side by side: in every case that C survives, each export of each drain
/// runs on a fake QP prepared the same way, and a caller sees the same
/// ([`Seen`]: WARNs, the QP's state, modifies, markers posted, polls,
/// tracepoint hits), but for two differences on purpose: on a QP whose
/// receives come from an SRQ, C's `ib_drain_rq()` posts a marker that the
/// provider refuses, where Rust's posts none; and C's SRQ path polls a CQ
/// not from `ib_alloc_cq()` without a WARN (it calls whatever a completion's
/// `wr_id` holds: here there is none), where Rust's refuses it with one.
/// Both return in each case. (Nor does Rust pass a NULL CQ to the
/// tracepoint, as C does where a QP has none: not run, as C's tracepoint
/// then dereferences it.)
/// Not compared here, the other differences on purpose: the WARNs' texts
/// (0010) and the line each refusal prints (0015), which C does not; the
/// console shows them. (A CQ not from `ib_alloc_cq()` hangs C, and so does
/// a missing CQ outside the SRQ path, or crashes it: not run;
/// `rdma_drain_unit_faults` has Rust's outcome there.)
#[cfg(CONFIG_INFINIBAND_DRAIN_C_REFERENCE)]
#[kunit_tests(rdma_drain_unit_c_reference)]
mod c_reference_tests {
    use super::*;

    extern "C" {
        // `struct ib_qp *`, opaque here: its zero-sized members are not
        // FFI-safe for the `improper_ctypes` lint.
        fn ib_drain_sq_c(qp: *mut c_void);
        fn ib_drain_rq_c(qp: *mut c_void);
        fn ib_drain_qp_c(qp: *mut c_void);
    }

    /// What a caller of a drain can observe.
    #[derive(Debug, PartialEq, Clone, Copy)]
    struct Seen {
        warns: Option<u32>,
        state: QpState,
        modifies: u32,
        send_posts: u32,
        recv_posts: u32,
        polls: u32,
        traces: u32,
    }

    /// One case: its name, the receive CQ's poll context, what it does to a
    /// fresh [`Setup`], and the exports it runs (a bit each: send queue,
    /// receive queue, both).
    type Case = (&'static str, bindings::ib_poll_context, fn(&mut Setup), u8);

    /// A QP on an SRQ whose Last WQE Reached came before the drain:
    /// `ib_drain_qp()` waits for it up to 60 s.
    fn on_srq(s: &mut Setup) {
        s.qp.srq = &mut *s.srq;
        // SAFETY: The fake QP's completion, initialized by `Setup`.
        unsafe { bindings::complete(&mut s.qp.srq_completion) };
    }

    const ALL: u8 = 0b111;

    const CASES: [Case; 11] = [
        ("no fault", SOFTIRQ, |_| {}, ALL),
        (
            "modify fails",
            SOFTIRQ,
            |_| FAKE.modify_ret.store(-(bindings::EINVAL as i32), SeqCst),
            ALL,
        ),
        (
            "post fails",
            SOFTIRQ,
            |_| FAKE.post_ret.store(-(bindings::ENOMEM as i32), SeqCst),
            ALL,
        ),
        (
            "QP in RESET, provider allows ERR",
            SOFTIRQ,
            |_| {
                FAKE.qp_state
                    .store(bindings::ib_qp_state_IB_QPS_RESET, SeqCst)
            },
            ALL,
        ),
        (
            "QP in RESET, provider refuses ERR",
            SOFTIRQ,
            |_| {
                FAKE.qp_state
                    .store(bindings::ib_qp_state_IB_QPS_RESET, SeqCst);
                FAKE.refuse_reset_to_err.store(true, SeqCst);
            },
            ALL,
        ),
        (
            "QP in INIT",
            SOFTIRQ,
            |_| {
                FAKE.qp_state
                    .store(bindings::ib_qp_state_IB_QPS_INIT, SeqCst)
            },
            ALL,
        ),
        ("QP on an SRQ", SOFTIRQ, on_srq, ALL),
        (
            "QP on an SRQ, modify fails",
            SOFTIRQ,
            |s| {
                on_srq(s);
                FAKE.modify_ret.store(-(bindings::EINVAL as i32), SeqCst);
            },
            ALL,
        ),
        // C's SRQ path polls a CQ not from `ib_alloc_cq()` (and calls
        // whatever its completions' `wr_id` holds): here it is empty, and
        // C returns silently where Rust refuses it with a WARN.
        (
            "QP on an SRQ, its CQ not from ib_alloc_cq()",
            SOFTIRQ,
            |s| {
                on_srq(s);
                s.recv_cq.from_ib_alloc_cq = false;
            },
            0b100,
        ),
        // C's `ib_drain_rq()` fires its tracepoint with a NULL CQ, which the
        // event dereferences: the SRQ path's drain only.
        (
            "QP on an SRQ, no CQ",
            SOFTIRQ,
            |s| {
                on_srq(s);
                s.qp.recv_cq = null_mut();
            },
            0b100,
        ),
        (
            "direct CQs",
            DIRECT,
            |s| {
                s.send_cq.poll_ctx = DIRECT;
                FAKE.complete_on_post.store(false, SeqCst);
                FAKE.complete_on_poll.store(1, SeqCst);
            },
            ALL,
        ),
    ];

    /// Runs `drain` (export `which`: 0 send queue, 1 receive queue, 2 both;
    /// of C if `c`) on a fake QP prepared by `case`.
    fn run(case: &Case, which: usize, c: bool) -> Result<Seen> {
        let (_, ctx, setup, _) = case;
        let mut s = Setup::new(*ctx)?;
        setup(&mut s);
        let qp = s.qp();
        let mut warns = None;
        with_trace_probe(|| {
            // SAFETY: A valid fake QP; nothing else posts or polls.
            warns = kunit::count_warnings(|| unsafe {
                match (which, c) {
                    (0, true) => ib_drain_sq_c(qp.cast()),
                    (1, true) => ib_drain_rq_c(qp.cast()),
                    (_, true) => ib_drain_qp_c(qp.cast()),
                    (0, false) => bindings::ib_drain_sq(qp),
                    (1, false) => bindings::ib_drain_rq(qp),
                    (_, false) => bindings::ib_drain_qp(qp),
                }
            });
        })?;
        Ok(Seen {
            warns,
            state: s.state()?,
            modifies: FAKE.modify_calls.load(SeqCst),
            send_posts: FAKE.post_send_calls.load(SeqCst),
            recv_posts: FAKE.post_recv_calls.load(SeqCst),
            polls: FAKE.polls.load(SeqCst),
            traces: FAKE.trace_hits.load(SeqCst),
        })
    }

    #[test]
    fn c_and_rust_drains_are_seen_alike() -> Result {
        for case in &CASES {
            for (which, export) in ["ib_drain_sq", "ib_drain_rq", "ib_drain_qp"]
                .into_iter()
                .enumerate()
            {
                if case.3 & (1 << which) == 0 {
                    continue;
                }
                let c = run(case, which, true)?;
                let rust = run(case, which, false)?;
                pr_info!("{}, {export}: C {c:?}, Rust {rust:?}\n", case.0);
                let expected = match (case.0, which) {
                    // C's drain, not Rust's, ran: it posts the marker that
                    // the provider refuses.
                    ("QP on an SRQ", 1) => {
                        assert_eq!((c.recv_posts, c.warns), (1, Some(1)));
                        Seen { recv_posts: 0, ..c }
                    }
                    // C polls the CQ it cannot poll safely (once: it is
                    // empty), without a WARN.
                    ("QP on an SRQ, its CQ not from ib_alloc_cq()", _) => {
                        assert!(c.warns == Some(0) && c.polls >= 1);
                        Seen {
                            warns: Some(1),
                            polls: c.polls - 1,
                            ..c
                        }
                    }
                    _ => c,
                };
                assert_eq!(rust, expected);
            }
        }
        Ok(())
    }
}

/// Every drain may sleep, as C's does: `might_sleep()` on entry of each
/// export reports a caller in atomic context even where this drain would
/// not sleep (the fake completes each marker inside its post, and the first
/// poll of the direct CQ finds it done). The host checks that there is a
/// report at the `might_sleep()` line of each of `ib_drain_sq()`,
/// `ib_drain_rq()` and `ib_drain_qp()` in drain.rs (run-tests.sh). Debug
/// kernel only (`CONFIG_DEBUG_ATOMIC_SLEEP`).
#[cfg(CONFIG_DEBUG_ATOMIC_SLEEP)]
#[kunit_tests(rdma_drain_might_sleep)]
mod might_sleep_tests {
    use super::*;
    use kernel::time::{delay::fsleep, Delta};
    use kernel::{new_spinlock, sync::SpinLock};
    use pin_init::stack_pin_init;

    #[test]
    fn a_drain_in_atomic_context_is_reported_by_each_export() -> Result {
        let exports: [unsafe extern "C" fn(*mut bindings::ib_qp); 3] = [
            bindings::ib_drain_sq,
            bindings::ib_drain_rq,
            bindings::ib_drain_qp,
        ];
        for (i, drain) in exports.into_iter().enumerate() {
            // The scheduler prints one such report a second.
            fsleep(Delta::from_millis(1_100));
            let mut s = Setup::new(DIRECT)?;
            let qp = s.qp();
            stack_pin_init!(let lock: SpinLock<()> = new_spinlock!(()));
            let guard = lock.lock();
            // Nothing blocks under the lock: the fake completes each marker
            // inside its post, so no wait sleeps, and the first poll of the
            // direct CQ finds its marker done.
            // SAFETY: A valid fake QP; nothing else posts or polls.
            unsafe { drain(qp) };
            drop(guard);
            let posts = FAKE.post_send_calls.load(SeqCst) + FAKE.post_recv_calls.load(SeqCst);
            assert_eq!(posts, if i == 2 { 2 } else { 1 });
            assert_eq!(s.state()?, QpState::Err);
        }
        Ok(())
    }
}

/// Runs `ib_drain_rq()` on a fake QP that `setup` breaks; returns the WARNs
/// it raised, the modifies and posts the provider saw, and the QP's state.
fn drain_rq_broken(setup: fn(&mut Setup)) -> Result<(Option<u32>, u32, u32, QpState)> {
    let mut s = Setup::new(SOFTIRQ)?;
    setup(&mut s);
    let qp = s.qp();
    // SAFETY: A valid fake QP; nothing else posts.
    let warns = kunit::count_warnings(|| unsafe { bindings::ib_drain_rq(qp) });
    let modifies = FAKE.modify_calls.load(SeqCst);
    Ok((
        warns,
        modifies,
        FAKE.post_recv_calls.load(SeqCst),
        s.state()?,
    ))
}

/// What [`watched_drain`] saw.
struct Watched {
    /// The fake QP, handed back.
    s: Setup,
    /// WARNs raised by the drain.
    warns: Option<u32>,
    /// The drain had not returned after the watch's time: the watcher
    /// completed the last marker posted (accepted or refused) to end it.
    rescued: bool,
}

/// Runs `drain` on `s`'s fake QP while a worker watches: if it has not
/// returned after `after_ms`, the worker completes the last marker the fake
/// saw posted, accepted or refused, on its CQ. A drain that waits for a
/// marker returns then, and reports it as [`Watched::rescued`]; one that
/// waits for a refused marker would otherwise never return. A drain that
/// returns at once costs the watcher one 10 ms poll.
fn watched_drain(
    mut s: Setup,
    after_ms: i64,
    drain: unsafe extern "C" fn(*mut bindings::ib_qp),
) -> Result<Watched> {
    use kernel::io::poll::read_poll_timeout;
    use kernel::time::Delta;
    use kernel::workqueue;
    static RETURNED: AtomicBool = AtomicBool::new(false);
    static RESCUED: AtomicBool = AtomicBool::new(false);
    static WATCHER_DONE: AtomicBool = AtomicBool::new(false);
    RETURNED.store(false, SeqCst);
    RESCUED.store(false, SeqCst);
    WATCHER_DONE.store(false, SeqCst);
    workqueue::system_long().try_spawn(GFP_KERNEL, move || {
        let returned = read_poll_timeout(
            || Ok(RETURNED.load(SeqCst)),
            |&r| r,
            Delta::from_millis(10),
            Delta::from_millis(after_ms),
        );
        if returned.is_err() {
            let cqe = FAKE.posted_cqe.swap(null_mut(), SeqCst);
            RESCUED.store(true, SeqCst);
            pr_info!("{STUCK_MARKER_DONE}\n");
            if !cqe.is_null() {
                // SAFETY: `cqe` is the marker of the drain still waiting
                // (it has not returned), posted on `posted_cq`, a CQ of the
                // fake QP, which stays until this worker is done.
                unsafe { complete(FAKE.posted_cq.load(SeqCst), cqe) };
            }
        }
        WATCHER_DONE.store(true, SeqCst);
    })?;
    let qp = s.qp();
    // SAFETY: A valid fake QP; nothing else posts.
    let warns = kunit::count_warnings(|| unsafe { drain(qp) });
    // Read before telling the watcher, which sets it first.
    let rescued = RESCUED.load(SeqCst);
    // A drain that returned left its marker, if it posted one, a dead stack
    // slot: the watcher must not complete it.
    FAKE.posted_cqe.store(null_mut(), SeqCst);
    RETURNED.store(true, SeqCst);
    // Whatever the drain did, the fake CQs stay until the watcher is done.
    let watcher_done = read_poll_timeout(
        || Ok(WATCHER_DONE.load(SeqCst)),
        |&done| done,
        Delta::from_millis(1),
        Delta::from_millis(after_ms + 10_000),
    );
    if watcher_done.is_err() {
        // The watcher may still use the fake CQs: leak them rather than
        // free them.
        core::mem::forget(s);
        return Err(ETIMEDOUT);
    }
    Ok(Watched { s, warns, rescued })
}

/// Drains the receive queue of a fake QP on a softirq CQ whose marker is
/// completed only after `delay_ms`, by [`watched_drain`]'s worker.
fn late_marker_drain(delay_ms: i64) -> Result<Watched> {
    let s = Setup::new(SOFTIRQ)?;
    FAKE.complete_on_post.store(false, SeqCst);
    pr_info!("{STUCK_BEGINS}\n");
    watched_drain(s, delay_ms, bindings::ib_drain_rq)
}

/// A drain that waits longer than the hung-task timeout (20 s in the debug
/// kernel's config) sleeps like the C drain, untimed and never woken after
/// its one line at 5 s, so the hung-task detector reports it; `make
/// test-debug` checks the report (the guest reads `hung_task_detect_count`).
/// The marker is completed after 60 s: the detector looks every 20 s and
/// must see the task blocked, unswitched, for a whole period after its
/// wake-up at 5 s, which it does by 45 s at the latest. Debug kernel only,
/// for those 60 s.
#[cfg(CONFIG_KASAN)]
#[kunit_tests(rdma_drain_hung_task)]
mod hung_task_tests {
    use super::*;

    #[test]
    fn a_drain_blocked_for_long_is_seen_by_the_hung_task_detector() -> Result {
        let late = late_marker_drain(60_000)?;
        assert_eq!(late.warns, Some(0));
        assert!(late.rescued);
        Ok(())
    }
}
