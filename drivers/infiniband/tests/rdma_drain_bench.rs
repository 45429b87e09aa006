// SPDX-License-Identifier: GPL-2.0

//! Drain latency on rxe: the Rust `ib_drain_rq()` against the C one it
//! replaced (`ib_drain_rq_c()`, CONFIG_INFINIBAND_DRAIN_C_REFERENCE), and
//! against the floor: the time from `modify_qp(ERR)` until the core's
//! softirq poller has handed the provider's last flush completion to the
//! consumer and the waiting task has woken up, without any drain machinery.
//! The provider's flush does not depend on the CQ's poll context, so one
//! floor (softirq CQ) serves all four contexts.
//!
//! For each poll context and depth, identical fresh QPs with `n` receives
//! posted are drained by Rust, by C, by C again (`c2`: C against itself
//! shows how far two identical drains differ here) and by Rust again
//! (`rust2`: so that Rust follows its own code as often as C does), in the
//! orders of a balanced design in turn (see [`order`]), then the floor is
//! taken; all after a discarded warm-up. The direct context has neither: C
//! sleeps 100 ms there, and Rust is judged against the floor, with which it
//! alternates. The samples are kept until every drain is done (a line
//! printed meanwhile would wake the console's printer thread beside the
//! timed drains), then printed as lines
//! `rdma_drain_bench: sample,<ctx>,<n>,<impl>,<i>,<ns>,<position in the
//! sample>` for the host to collect (scripts/bench-report.py).
//!
//! Then many direct drains at once ([`concurrent`]): 16 and 128 fresh QPs,
//! each on a directly polled CQ of its own or all on one, drained at the
//! same time from workers of the unbound workqueue, by Rust and by C in
//! turn, after a discarded round: the time until every drain has returned,
//! the CPU time the drainers ran (each worker's `sum_exec_runtime` across its
//! drain), and the CPU time all CPUs spent meanwhile (`kernel_cpustat`,
//! sampled at the tick: only a mean over many rounds means anything), as
//! lines `rdma_drain_bench: concurrent,<QPs>,<own|shared>,<impl>,<round>,
//! <ns>,<busy ns>,<drainers' ns>`.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::bindings;
use kernel::infiniband::{
    CompletionHandler, Cqe, DeviceRef, OwnedCq, OwnedQp, Pd, PollContext, QpConfig,
    RegisteredDevice, WorkCompletion,
};
use kernel::prelude::*;
use kernel::sync::{Arc, Completion};
use kernel::time::{msecs_to_jiffies, Instant, Monotonic};
use kernel::workqueue::{self, Work, WorkItem};

module! {
    type: DrainBench,
    name: "rdma_drain_bench",
    authors: ["Rust RDMA drain project"],
    description: "ib_drain_rq latency: Rust vs C vs floor, on rxe",
    license: "GPL",
    params: {
        samples: u32 {
            default: 420,
            description: "Measured samples per implementation, context and depth (1, or a multiple of 4)",
        },
        contexts: u32 {
            default: 15,
            description: "Poll contexts to run, a bit each: 1 direct, 2 softirq, 4 workqueue, 8 unbound",
        },
        depths: u32 {
            default: 15,
            description: "Depths to run, a bit each: 1 N=0, 2 N=1, 4 N=64, 8 N=1024",
        },
        rounds: u32 {
            default: 40,
            description: "Rounds of each concurrent cell per implementation, after one discarded (0: none; 1 with samples=1)",
        },
    },
}

const CONTEXTS: [PollContext; 4] = [
    PollContext::Direct,
    PollContext::Softirq,
    PollContext::Workqueue,
    PollContext::UnboundWorkqueue,
];
const DEPTHS: [u32; 4] = [0, 1, 64, 1024];
const WARMUP: u32 = 5;
/// How many QPs are drained at once in the concurrent cells.
const CONCURRENT: [u32; 2] = [16, 128];

#[derive(Clone, Copy, PartialEq)]
enum Impl {
    Rust,
    C,
    /// The C drain again, as a second arm.
    C2,
    /// The Rust drain again, so that the design treats both drains alike.
    Rust2,
    Floor,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Rust => "rust",
            Impl::C => "c",
            Impl::C2 => "c2",
            Impl::Rust2 => "rust2",
            Impl::Floor => "floor",
        }
    }
}

/// Counts completions; completes `all` when `target` have been seen.
struct Counter {
    count: AtomicU32,
    target: u32,
    all: Arc<Completion>,
}

impl CompletionHandler for Counter {
    fn done(&self, _wc: &WorkCompletion) {
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.all.complete_all();
        }
    }
}

/// Drains the receive queue of `qp` with the exported `ib_drain_rq()`, or
/// with the C drain that the Rust one replaced, which ib_core keeps under its
/// own name for this comparison. Called as C callers call them: the arms
/// time the two drains alone, without `OwnedQp::drain_rq()`'s work around
/// them.
///
/// # Safety
///
/// `qp` is an `OwnedQp`'s QP, created by `create_rc` (no SRQ), which lives
/// until this returns, and nobody else posts on it meanwhile.
unsafe fn drain_rq(qp: *mut bindings::ib_qp, imp: Impl) -> Result {
    #[cfg(CONFIG_INFINIBAND_DRAIN_C_REFERENCE)]
    extern "C" {
        // `struct ib_qp *`, opaque here: its zero-sized members are not
        // FFI-safe for the `improper_ctypes` lint.
        fn ib_drain_rq_c(qp: *mut core::ffi::c_void);
    }
    // An `OwnedQp` keeps the drain's contract by construction: its CQ comes
    // from ib_alloc_cq(), and the QP's receive queue and that CQ have room
    // reserved for the marker.
    match imp {
        // SAFETY: The QP is valid and keeps the contract (above); the caller
        // keeps other posters away.
        Impl::Rust | Impl::Rust2 => unsafe { bindings::ib_drain_rq(qp) },
        // SAFETY: As above; the C drain has the same contract.
        #[cfg(CONFIG_INFINIBAND_DRAIN_C_REFERENCE)]
        Impl::C | Impl::C2 => unsafe { ib_drain_rq_c(qp.cast()) },
        _ => return Err(ENOTSUPP),
    }
    Ok(())
}

/// Sets up a fresh QP with `n` receives, times one drain by `imp`, and
/// checks that every receive was consumed. Returns nanoseconds.
fn one(dev: &DeviceRef, ctx: PollContext, n: u32, imp: Impl) -> Result<i64> {
    let ctx_used = if imp == Impl::Floor {
        PollContext::Softirq
    } else {
        ctx
    };
    let pd = Pd::alloc(dev)?;
    let cq = OwnedCq::alloc(dev, n + 3, 0, ctx_used)?;
    let all = Arc::pin_init(Completion::new(), GFP_KERNEL)?;
    let cqe = Cqe::new(Counter {
        count: AtomicU32::new(0),
        target: n,
        all: all.clone(),
    })?;
    let mut qp = OwnedQp::create_rc(
        &pd,
        &cq,
        &cq,
        QpConfig {
            send_depth: 0,
            recv_depth: n.max(1),
        },
    )?;
    qp.init(1)?;
    for _ in 0..n {
        qp.rq().post(&cqe)?;
    }
    let start = Instant::<Monotonic>::now();
    match imp {
        Impl::Floor => {
            qp.set_error_state()?;
            if n > 0 && !all.wait_for_completion_timeout(msecs_to_jiffies(10_000)) {
                pr_err!("n={n}: flush did not finish in 10 s\n");
                return Err(ETIMEDOUT);
            }
        }
        // SAFETY: `qp` is owned here and lives until the end; nothing else
        // posts on it.
        _ => unsafe { drain_rq(qp.as_raw(), imp)? },
    }
    let ns = start.elapsed().as_nanos();
    if cqe.handler().count.load(Ordering::Relaxed) != n {
        pr_err!(
            "{:?} n={n} {}: receives not all consumed\n",
            ctx,
            imp.name()
        );
        return Err(EINVAL);
    }
    Ok(ns)
}

/// The arms of sample `i`, in the order they run. Rust, C, C2 and Rust2 go
/// through the orders of a Williams square in turn: each runs at each
/// position, and right after each other one, once in four samples; then the
/// floor. A design with C2 alone would let C follow its own code (C2's) and
/// never Rust; code that ran just before may run faster (warm caches, TCG's
/// translations), so Rust2 balances that: at each position Rust follows its
/// own code exactly when C does (scripts/bench-report.py weighs positions
/// against a carry-over of the other kind). In the direct context Rust and
/// the floor alternate, as they are compared there, and C comes last (it
/// sleeps 100 ms, after which the guest is idle).
fn order(ctx: PollContext, i: u32) -> impl Iterator<Item = Impl> {
    const ORDERS: [[Impl; 4]; 4] = {
        use Impl::{Rust as R, Rust2 as R2, C, C2};
        [
            [R, C, C2, R2],
            [C, R2, R, C2],
            [R2, C2, C, R],
            [C2, R, R2, C],
        ]
    };
    // Without the C reference (a kernel built without it): Rust and the
    // floor only.
    let with_c = cfg!(CONFIG_INFINIBAND_DRAIN_C_REFERENCE);
    let sample = i as usize;
    let mut arms = [Impl::Floor; 5];
    let len = if with_c && ctx != PollContext::Direct {
        arms[..4].copy_from_slice(&ORDERS[sample % 4]);
        5
    } else {
        if sample % 2 == 0 {
            arms[0] = Impl::Rust;
        } else {
            arms[1] = Impl::Rust;
        }
        arms[2] = Impl::C;
        if with_c {
            3
        } else {
            2
        }
    };
    arms.into_iter().take(len)
}

/// One timed drain.
struct Sample {
    ctx: PollContext,
    n: u32,
    imp: Impl,
    i: u32,
    ns: i64,
    pos: usize,
}

/// Runs the selected cells, keeping each sample in `kept`, whose capacity
/// the caller reserved: nothing is allocated or printed between drains.
fn run(samples: u32, contexts: u32, depths: u32, kept: &mut KVec<Sample>) -> Result {
    let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
    for (bit, ctx) in CONTEXTS.into_iter().enumerate() {
        if contexts & (1 << bit) == 0 {
            continue;
        }
        for (bit, n) in DEPTHS.into_iter().enumerate() {
            if depths & (1 << bit) == 0 {
                continue;
            }
            let warmup = if samples > 1 { WARMUP } else { 0 };
            for i in 0..warmup + samples {
                for (pos, imp) in order(ctx, i).enumerate() {
                    let ns = one(&dev, ctx, n, imp)?;
                    if i >= warmup {
                        let i = i - warmup;
                        kept.push(
                            Sample {
                                ctx,
                                n,
                                imp,
                                i,
                                ns,
                                pos,
                            },
                            GFP_KERNEL,
                        )?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// A QP pointer that a [`Job`] carries to its worker.
struct QpPtr(*mut bindings::ib_qp);

// SAFETY: A QP may be drained from any thread; [`concurrent`] keeps it alive
// and free of other posters until the job has run.
unsafe impl Send for QpPtr {}

// SAFETY: Only the worker that runs the job uses the pointer.
unsafe impl Sync for QpPtr {}

/// One drain of a concurrent round, run by a worker of the unbound
/// workqueue.
#[pin_data]
struct Job {
    #[pin]
    work: Work<Job>,
    qp: QpPtr,
    imp: Impl,
    result: AtomicU32,
    /// CPU time this job's worker ran during the drain (ns).
    cpu_ns: AtomicU64,
}

kernel::impl_has_work! {
    impl HasWork<Self> for Job { self.work }
}

impl WorkItem for Job {
    type Pointer = Arc<Job>;

    fn run(this: Arc<Job>) {
        let cpu = own_runtime_ns();
        // SAFETY: [`concurrent`] keeps the QP alive and every other poster
        // away until it has flushed this job.
        let res = unsafe { drain_rq(this.qp.0, this.imp) };
        this.cpu_ns.store(own_runtime_ns() - cpu, Ordering::Relaxed);
        this.result.store(res.is_err().into(), Ordering::Relaxed);
    }
}

/// CPU time the current task has run (ns), as the scheduler last accounted
/// it: `se.sum_exec_runtime`, brought up to date when the task sleeps and at
/// each tick, so it leaves out at most the time since then.
fn own_runtime_ns() -> u64 {
    // SAFETY: The current task lives while it runs this; the scheduler
    // writes the field of a running task only on its own CPU (the tick, a
    // switch), so the task reads a whole value.
    unsafe { (&raw const (*bindings::get_current()).se.sum_exec_runtime).read_volatile() }
}

/// Busy CPU time of all CPUs so far (ns): `kernel_cpustat`, which the tick
/// samples (`CONFIG_TICK_CPU_ACCOUNTING`): exact only over many ticks.
fn busy_ns() -> u64 {
    let busy = [
        bindings::cpu_usage_stat_CPUTIME_USER,
        bindings::cpu_usage_stat_CPUTIME_NICE,
        bindings::cpu_usage_stat_CPUTIME_SYSTEM,
        bindings::cpu_usage_stat_CPUTIME_SOFTIRQ,
        bindings::cpu_usage_stat_CPUTIME_IRQ,
        bindings::cpu_usage_stat_CPUTIME_STEAL,
    ];
    // SAFETY: Set once at boot.
    let cpus = unsafe { bindings::nr_cpu_ids } as usize;
    let bits = usize::BITS as usize;
    let mut sum = 0;
    for cpu in 0..cpus {
        // SAFETY: The mask of possible CPUs is set at boot.
        let possible = unsafe { (*(&raw const bindings::__cpu_possible_mask)).bits[cpu / bits] };
        if possible >> (cpu % bits) & 1 == 0 {
            continue;
        }
        // As per_cpu_ptr(&kernel_cpustat, cpu): the symbol's address plus
        // the CPU's offset, modulo 2^64 as in C, an address C hides from its
        // compiler (RELOC_HIDE()); here an exposed one.
        // SAFETY: `__per_cpu_offset` is set at boot for every possible CPU.
        let off = unsafe { (*(&raw const bindings::__per_cpu_offset))[cpu] } as usize;
        let addr = (&raw const bindings::kernel_cpustat)
            .expose_provenance()
            .wrapping_add(off);
        let stat = core::ptr::with_exposed_provenance::<bindings::kernel_cpustat>(addr);
        for i in busy {
            // SAFETY: `stat` is that CPU's `kernel_cpustat`, which lives for
            // good; the tick updates it, which /proc/stat reads the same way.
            sum += unsafe { (&raw const (*stat).cpustat[i as usize]).read_volatile() };
        }
    }
    sum
}

/// One round of a concurrent cell: `qps` fresh QPs with one receive each,
/// on directly polled CQs (one each, or one for all if `shared`), drained at
/// once by `imp`. Returns the time until every drain has returned, the CPU
/// time all CPUs spent meanwhile, and the CPU time the drainers ran (ns).
fn concurrent(dev: &DeviceRef, qps: u32, shared: bool, imp: Impl) -> Result<(i64, u64, u64)> {
    let pd = Pd::alloc(dev)?;
    let mut cqs = KVec::new();
    let cq_count = if shared { 1 } else { qps };
    for _ in 0..cq_count {
        let size = if shared { 3 * qps } else { 3 };
        cqs.push(
            OwnedCq::alloc(dev, size, 0, PollContext::Direct)?,
            GFP_KERNEL,
        )?;
    }
    let all = Arc::pin_init(Completion::new(), GFP_KERNEL)?;
    let cqe = Cqe::new(Counter {
        count: AtomicU32::new(0),
        target: qps,
        all,
    })?;
    let mut owned = KVec::with_capacity(qps as usize, GFP_KERNEL)?;
    let mut jobs = KVec::with_capacity(qps as usize, GFP_KERNEL)?;
    for i in 0..qps as usize {
        let cq = &cqs[if shared { 0 } else { i }];
        let config = QpConfig {
            send_depth: 0,
            recv_depth: 1,
        };
        let mut qp = OwnedQp::create_rc(&pd, cq, cq, config)?;
        qp.init(1)?;
        qp.rq().post(&cqe)?;
        let raw = qp.as_raw();
        let job = Arc::pin_init(
            pin_init!(Job {
                work <- kernel::new_work!("rdma_drain_bench::Job"),
                qp: QpPtr(raw),
                imp,
                result: AtomicU32::new(0),
                cpu_ns: AtomicU64::new(0),
            }),
            GFP_KERNEL,
        )?;
        owned.push(qp, GFP_KERNEL)?;
        jobs.push(job, GFP_KERNEL)?;
    }
    let busy = busy_ns();
    let start = Instant::<Monotonic>::now();
    for job in &jobs {
        // Each job is new, so it cannot be queued already.
        let _ = workqueue::system_unbound().enqueue(job.clone());
    }
    // The jobs point at `owned`'s QPs, and their code is in this module:
    // go on only once each has returned.
    for job in &jobs {
        // SAFETY: `job` keeps its work item alive.
        unsafe { bindings::flush_work(Work::raw_get(&raw const job.work)) };
    }
    let ns = start.elapsed().as_nanos();
    let busy = busy_ns() - busy;
    let count = cqe.handler().count.load(Ordering::Relaxed);
    let failed = jobs.iter().any(|j| j.result.load(Ordering::Relaxed) != 0);
    if failed || count != qps {
        pr_err!(
            "concurrent {qps} {}: {count} receives consumed\n",
            imp.name()
        );
        return Err(EINVAL);
    }
    let drainers = jobs.iter().map(|j| j.cpu_ns.load(Ordering::Relaxed)).sum();
    Ok((ns, busy, drainers))
}

/// A round of a concurrent cell.
struct Round {
    qps: u32,
    shared: bool,
    imp: Impl,
    i: u32,
    ns: i64,
    busy: u64,
    drainers: u64,
}

/// Runs `rounds` rounds of each concurrent cell, Rust and C in turn (which
/// goes first alternates), after one discarded round (the unbound
/// workqueue's pool grows in the first), keeping each in `kept`, whose
/// capacity the caller reserved.
fn run_concurrent(rounds: u32, kept: &mut KVec<Round>) -> Result {
    let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
    let with_c = cfg!(CONFIG_INFINIBAND_DRAIN_C_REFERENCE);
    for qps in CONCURRENT {
        for shared in [false, true] {
            let warmup = u32::from(rounds > 1);
            for i in 0..warmup + rounds {
                let mut arms = [Impl::Rust, Impl::C];
                if i % 2 == 1 {
                    arms.reverse();
                }
                for imp in arms {
                    if imp == Impl::C && !with_c {
                        continue;
                    }
                    let (ns, busy, drainers) = concurrent(&dev, qps, shared, imp)?;
                    if i < warmup {
                        continue;
                    }
                    let i = i - warmup;
                    kept.push(
                        Round {
                            qps,
                            shared,
                            imp,
                            i,
                            ns,
                            busy,
                            drainers,
                        },
                        GFP_KERNEL,
                    )?;
                }
            }
        }
    }
    Ok(())
}

struct DrainBench;

impl kernel::Module for DrainBench {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let samples = module_parameters::samples.value();
        let contexts = module_parameters::contexts.value();
        let depths = module_parameters::depths.value();
        let rounds = module_parameters::rounds.value();
        let all_contexts = (1u32 << CONTEXTS.len()) - 1;
        let all_depths = (1u32 << DEPTHS.len()) - 1;
        if contexts == 0
            || contexts & !all_contexts != 0
            || depths == 0
            || depths & !all_depths != 0
        {
            pr_err!("contexts={contexts:#x} depths={depths:#x}: a bit each, at least one\n");
            return Err(EINVAL);
        }
        // Whole turns of the orders, or a smoke run of one sample.
        if samples == 0 || (samples != 1 && samples % 4 != 0) {
            pr_err!("samples={samples}: 1 or a multiple of 4\n");
            return Err(EINVAL);
        }
        // Up to 5 arms a sample (Rust, C, C2, Rust2, floor).
        let cells = (contexts.count_ones() * depths.count_ones()) as usize;
        let mut kept = KVec::with_capacity(cells * samples as usize * 5, GFP_KERNEL)?;
        pr_info!("start,samples={samples},contexts={contexts:#x},depths={depths:#x}\n");
        let res = run(samples, contexts, depths, &mut kept);
        for s in &kept {
            let (ctx, n, name, i, ns, pos) = (s.ctx, s.n, s.imp.name(), s.i, s.ns, s.pos);
            pr_info!("sample,{ctx:?},{n},{name},{i},{ns},{pos}\n");
        }
        let rounds = if samples == 1 { rounds.min(1) } else { rounds };
        let mut kept = KVec::with_capacity(CONCURRENT.len() * 4 * rounds as usize, GFP_KERNEL)?;
        let res = res.and_then(|()| run_concurrent(rounds, &mut kept));
        for r in &kept {
            let (qps, name, i, ns, busy) = (r.qps, r.imp.name(), r.i, r.ns, r.busy);
            let cqs = if r.shared { "shared" } else { "own" };
            let drainers = r.drainers;
            pr_info!("concurrent,{qps},{cqs},{name},{i},{ns},{busy},{drainers}\n");
        }
        match res {
            Ok(()) => pr_info!("end,ok\n"),
            Err(e) => pr_info!("end,error {}\n", e.to_errno()),
        }
        Ok(DrainBench)
    }
}
