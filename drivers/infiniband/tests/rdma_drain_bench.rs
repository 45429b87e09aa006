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
//! posted are drained, alternating Rust and C (the order flips every
//! sample), after a discarded warm-up. Each sample is printed as a line
//! `rdma_drain_bench: sample,<ctx>,<n>,<impl>,<i>,<ns>` for the host to
//! collect (scripts/bench-report.py).

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::infiniband::{
    CompletionHandler, Cqe, DeviceRef, OwnedCq, OwnedQp, Pd, PollContext, QpConfig, WorkCompletion,
};
use kernel::prelude::*;
use kernel::sync::Completion;
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
            default: 200,
            description: "Measured samples per implementation, context and depth",
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
    Floor,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Rust => "rust",
            Impl::C => "c",
            Impl::Floor => "floor",
        }
    }
}

/// Counts completions; completes `all` when `target` have been seen.
struct Counter<'a> {
    count: AtomicU32,
    target: u32,
    all: &'a Completion,
}

impl CompletionHandler for Counter<'_> {
    fn done(&self, _wc: &WorkCompletion) {
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.all.complete_all();
        }
    }
}

/// Drains the receive queue with the C drain that the Rust one replaced,
/// which ib_core keeps under its own name for this comparison.
#[cfg(CONFIG_INFINIBAND_DRAIN_C_REFERENCE)]
fn drain_rq_c(qp: &mut OwnedQp) {
    extern "C" {
        fn ib_drain_rq_c(qp: *mut kernel::bindings::ib_qp);
    }
    // SAFETY: The C drain has the contract of `ib_drain_rq()`, which an
    // `OwnedQp` keeps by construction; `&mut` keeps other posters away.
    unsafe { ib_drain_rq_c(qp.as_raw()) }
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
    stack_pin_init!(let all = Completion::new());
    stack_pin_init!(let cqe = Cqe::new(Counter {
        count: AtomicU32::new(0),
        target: n,
        all: &all,
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
        Impl::Rust => qp.drain_rq(),
        #[cfg(CONFIG_INFINIBAND_DRAIN_C_REFERENCE)]
        Impl::C => drain_rq_c(&mut qp),
        #[cfg(not(CONFIG_INFINIBAND_DRAIN_C_REFERENCE))]
        Impl::C => return Err(ENOTSUPP),
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

fn run(samples: u32) -> Result {
    let dev = DeviceRef::get_by_netdev(c"dummy0")?;
    for ctx in CONTEXTS {
        for n in DEPTHS {
            let warmup = if samples > 1 { WARMUP } else { 0 };
            for i in 0..warmup + samples {
                let order = if i % 2 == 0 {
                    [Impl::Rust, Impl::C, Impl::Floor]
                } else {
                    [Impl::C, Impl::Rust, Impl::Floor]
                };
                // Without the C reference (the test kernel's smoke run):
                // Rust and the floor only.
                let with_c = cfg!(CONFIG_INFINIBAND_DRAIN_C_REFERENCE);
                for imp in order.into_iter().filter(|&m| with_c || m != Impl::C) {
                    let ns = one(&dev, ctx, n, imp)?;
                    if i >= warmup {
                        pr_info!("sample,{:?},{n},{},{},{ns}\n", ctx, imp.name(), i - warmup);
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
        pr_info!("start,samples={samples}\n");
        match run(samples) {
            Ok(()) => pr_info!("end,ok\n"),
            Err(e) => pr_info!("end,error {}\n", e.to_errno()),
        }
        Ok(DrainBench)
    }
}
