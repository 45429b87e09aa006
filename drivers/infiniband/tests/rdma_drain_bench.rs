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

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::infiniband::{
    CompletionHandler, Cqe, DeviceRef, OwnedCq, OwnedQp, Pd, PollContext, QpConfig,
    RegisteredDevice, WorkCompletion,
};
use kernel::prelude::*;
use kernel::sync::{Arc, Completion};
use kernel::time::{msecs_to_jiffies, Instant, Monotonic};
use pin_init::stack_pin_init;

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

/// Drains the receive queue with the exported `ib_drain_rq()`, called as
/// C callers call it and as `drain_rq_c` calls the C drain: the arms time
/// the two drains alone, without `OwnedQp::drain_rq()`'s work around them.
fn drain_rq_rust(qp: &mut OwnedQp) {
    // SAFETY: The QP is valid while `qp` lives. An `OwnedQp` keeps the
    // drain's contract by construction: its CQ comes from ib_alloc_cq(), and
    // the QP's receive queue and that CQ have room reserved for the marker.
    // `&mut` keeps other posters away. The QP has no SRQ (`create_rc`).
    unsafe { kernel::bindings::ib_drain_rq(qp.as_raw()) }
}

/// Drains the receive queue with the C drain that the Rust one replaced,
/// which ib_core keeps under its own name for this comparison.
#[cfg(CONFIG_INFINIBAND_DRAIN_C_REFERENCE)]
fn drain_rq_c(qp: &mut OwnedQp) {
    extern "C" {
        // `struct ib_qp *`, opaque here: its zero-sized members are not
        // FFI-safe for the `improper_ctypes` lint.
        fn ib_drain_rq_c(qp: *mut core::ffi::c_void);
    }
    // SAFETY: The C drain has the contract of `ib_drain_rq()`, which an
    // `OwnedQp` keeps by construction; `&mut` keeps other posters away.
    unsafe { ib_drain_rq_c(qp.as_raw().cast()) }
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
    stack_pin_init!(let cqe = Cqe::new(Counter {
        count: AtomicU32::new(0),
        target: n,
        all: all.clone(),
    }));
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
        qp.rq().post(cqe.as_ref())?;
    }
    let start = Instant::<Monotonic>::now();
    match imp {
        Impl::Rust | Impl::Rust2 => drain_rq_rust(&mut qp),
        #[cfg(CONFIG_INFINIBAND_DRAIN_C_REFERENCE)]
        Impl::C | Impl::C2 => drain_rq_c(&mut qp),
        #[cfg(not(CONFIG_INFINIBAND_DRAIN_C_REFERENCE))]
        Impl::C | Impl::C2 => return Err(ENOTSUPP),
        Impl::Floor => {
            qp.set_error_state()?;
            if n > 0 && !all.wait_for_completion_timeout(msecs_to_jiffies(10_000)) {
                pr_err!("n={n}: flush did not finish in 10 s\n");
                return Err(ETIMEDOUT);
            }
        }
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

struct DrainBench;

impl kernel::Module for DrainBench {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let samples = module_parameters::samples.value();
        let contexts = module_parameters::contexts.value();
        let depths = module_parameters::depths.value();
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
        match res {
            Ok(()) => pr_info!("end,ok\n"),
            Err(e) => pr_info!("end,error {}\n", e.to_errno()),
        }
        Ok(DrainBench)
    }
}
