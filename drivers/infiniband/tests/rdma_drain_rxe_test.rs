// SPDX-License-Identifier: GPL-2.0

//! Drain tests on the two software providers, soft-RoCE and soft-iWARP,
//! through `kernel::infiniband`.
//!
//! The guest creates `rxe0` on `dummy0` and `siw0` on `dummy2` before it
//! loads this module; the suites run when the module loads. The cases that
//! need no connected peer take their provider as a parameter and run in
//! `rdma_drain_rxe` and `rdma_drain_siw` alike; the rest are rxe's alone
//! (siw connects through the iWARP CM only, which these suites do not use).
//!
//! Written as a Rust ULP would be: no raw bindings, and the drain contract
//! (room for the marker, nobody posting during a drain) holds by
//! construction. The exception: two soundness cases play a provider that
//! lacks a capability by clearing it on rxe1 (`with_rxe1_lacking`).

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use kernel::bindings;
use kernel::infiniband::{
    drain_rq_concurrently, CompletionHandler, Cqe, DmaBuf, GidAttr, OwnedCq, OwnedQp, OwnedSrq, Pd,
    PollContext, QpConfig, QpState, RegisteredDevice, WorkCompletion,
};
use kernel::sync::{new_spinlock_irq, Arc, Completion, SpinLockIrq};
use kernel::time::{delay::fsleep, Delta};
use kernel::workqueue::{self, impl_has_work, new_work, Work, WorkItem};
use kernel::{kunit, prelude::*};

module! {
    type: RxeDrainTest,
    name: "rdma_drain_rxe_test",
    authors: ["Rust RDMA drain project"],
    description: "ib_drain_rq/sq/qp tests on rxe and siw",
    license: "GPL",
}

struct RxeDrainTest;

impl kernel::Module for RxeDrainTest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(RxeDrainTest)
    }
}

mod common;
use common::{connect_pair, rxe, wait_until, Counter, Provider, CONTEXTS, RXE, SIW};

/// RQ depth of the drain cases: the deepest case fills the RQ but for the
/// marker's reserved slot.
const RQ_DEPTH: u32 = 255;

/// Posts `n` receives on a fresh QP of `p` polled in `ctx`, drains the RQ
/// and returns the (success, flushed, other) completion counts seen by then.
fn drain_rq_case(p: &Provider, ctx: PollContext, n: u32) -> Result<(u32, u32, u32)> {
    let dev = p.device()?;
    let pd = Pd::alloc(&dev)?;
    let cq = OwnedCq::alloc(&dev, RQ_DEPTH + 2, 0, ctx)?;
    // Declared before the QP: the QP is dropped (and drained) first.
    let cqe = Cqe::new(Counter::default())?;
    let mut qp = OwnedQp::create_rc(
        &pd,
        &cq,
        &cq,
        QpConfig {
            send_depth: 0,
            recv_depth: RQ_DEPTH,
        },
    )?;
    qp.init(1)?;
    for _ in 0..n {
        qp.rq().post(&cqe)?;
    }
    qp.drain_rq()?;
    let counts = cqe.handler().counts();
    // The drain consumed everything: a direct CQ has nothing left to reap.
    let left = qp.rq().poll_cq_direct();
    if left != 0 {
        pr_err!("{ctx:?} n={n}: {left} completions left in the CQ after the drain\n");
        return Err(EINVAL);
    }
    if cqe.outstanding() != 0 {
        pr_err!(
            "{ctx:?} n={n}: {} receives outstanding after the drain\n",
            cqe.outstanding()
        );
        return Err(EINVAL);
    }
    Ok(counts)
}

/// Drains an RQ that was never posted to, then the SQ and the whole QP:
/// each returns, and the QP is left in the error state.
fn drain_sq_and_qp_case(p: &Provider, ctx: PollContext) -> Result {
    let dev = p.device()?;
    let pd = Pd::alloc(&dev)?;
    let cq = OwnedCq::alloc(&dev, 8, 0, ctx)?;
    let mut qp = OwnedQp::create_rc(
        &pd,
        &cq,
        &cq,
        QpConfig {
            send_depth: 2,
            recv_depth: 2,
        },
    )?;
    qp.init(1)?;
    qp.drain_sq()?;
    qp.drain_rq()?;
    qp.drain()?;
    check(
        p,
        format_args!("{ctx:?}: the state after the drains"),
        qp.state()?,
        QpState::Err,
    )
}

/// Fails the case with `EINVAL`, saying what differed on which provider,
/// unless `got` is `want`: for the cases that run on either provider, out
/// of the reach of a suite's `assert_eq!`.
fn check<T: PartialEq + core::fmt::Debug>(
    p: &Provider,
    what: core::fmt::Arguments<'_>,
    got: T,
    want: T,
) -> Result {
    if got == want {
        return Ok(());
    }
    pr_err!("{}: {what}: {got:?}, want {want:?}\n", p.name);
    Err(EINVAL)
}

/// Live traffic: two connected RC QPs on rxe0, `k` zero-length sends from
/// one to the other; once half of them have been acknowledged, with the rest
/// in flight, the receiver's RQ (`r` receives, polled in `ctx`) is drained.
/// Returns the receiver's (received, flushed, other) counts and its
/// outstanding receives, read when the drain returned.
fn live_traffic_case(ctx: PollContext, k: u32, r: u32) -> Result<((u32, u32, u32), usize)> {
    let dev = rxe()?;
    let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
    let pd = Pd::alloc(&dev)?;
    let cq_a = OwnedCq::alloc(&dev, 2 * (k + 1), 0, PollContext::Softirq)?;
    let cq_b = OwnedCq::alloc(&dev, 2 * (r + 1), 0, ctx)?;
    let sent = Cqe::new(Counter::default())?;
    let received = Cqe::new(Counter::default())?;
    let depth = QpConfig {
        send_depth: k.max(r),
        recv_depth: k.max(r),
    };
    let mut a = OwnedQp::create_rc(
        &pd,
        &cq_a,
        &cq_a,
        QpConfig {
            recv_depth: 0,
            ..depth
        },
    )?;
    let mut b = OwnedQp::create_rc(
        &pd,
        &cq_b,
        &cq_b,
        QpConfig {
            send_depth: 0,
            ..depth
        },
    )?;
    connect_pair(&mut a, &mut b, &gid)?;
    for _ in 0..r {
        b.rq().post(&received)?;
    }
    for _ in 0..k {
        a.sq().post_send(&sent)?;
    }
    // Bounded: traffic that never flows fails the case instead of hanging.
    let mut waited = 0;
    while sent.handler().counts().0 < k / 2 {
        if waited == 5000 {
            pr_err!(
                "{ctx:?}: sends not acknowledged: {:?}\n",
                sent.handler().counts()
            );
            return Err(ETIMEDOUT);
        }
        fsleep(Delta::from_millis(1));
        waited += 1;
    }
    b.drain_rq()?;
    Ok((received.handler().counts(), received.outstanding()))
}

/// Waits, at most 5 s, until `cqe` has seen `n` successful completions.
fn wait_for_successes(cqe: &Cqe<Counter>, n: u32) -> Result {
    if wait_until(5000, || cqe.handler().counts().0 >= n) {
        return Ok(());
    }
    pr_err!("completions missing: {:?}\n", cqe.handler().counts());
    Err(ETIMEDOUT)
}

/// What a QP on an SRQ showed when [`srq_case`] drained it.
#[derive(Debug, PartialEq)]
struct SrqDrain {
    /// `ib_drain_rq()` on it was refused with its site's WARN, twice (a
    /// warning that KUnit suppresses does not use up the site's once).
    refused_warned_each_time: bool,
    /// The QP's state after that refusal: the error state, as C leaves it.
    state_after_refusal: QpState,
    /// The SRQ's (received, flushed, other) counts when `ib_drain_qp()` returned.
    counts: (u32, u32, u32),
    /// Whether the QP had had its Last WQE Reached event by then.
    last_wqe_reached: bool,
    /// Receives still on the SRQ.
    left_on_srq: usize,
    /// Whether `OwnedQp::reset()` after `ib_drain_qp()` drained the QP again
    /// (the drop decides the same way): some providers raise Last WQE
    /// Reached once, and a second drain would wait 60 s for it.
    drained_again_by_reset: bool,
}

/// A QP `b` on an SRQ of `r` receives, whose CQ is polled in `ctx`,
/// connected to a plain QP `a`. `a` sends `k` zero-length messages; once
/// they are acknowledged, `ib_drain_rq(b)` is refused (in the error state,
/// as C leaves it), and `ib_drain_qp(b)` takes the SRQ path.
fn srq_case(ctx: PollContext, k: u32, r: u32) -> Result<SrqDrain> {
    let dev = rxe()?;
    let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
    let pd = Pd::alloc(&dev)?;
    let cq = OwnedCq::alloc(&dev, 2 * (k + 2), 0, PollContext::Softirq)?;
    let sent = Cqe::new(Counter::default())?;
    let srq = OwnedSrq::new(&pd, r, ctx, Counter::default())?;
    let mut a = OwnedQp::create_rc(
        &pd,
        &cq,
        &cq,
        QpConfig {
            send_depth: k,
            recv_depth: 0,
        },
    )?;
    let no_depth = QpConfig {
        send_depth: 0,
        recv_depth: 0,
    };
    let mut b = OwnedQp::create_rc_on_srq(&pd, &cq, &srq, no_depth)?;
    connect_pair(&mut a, &mut b, &gid)?;
    for _ in 0..r {
        srq.post()?;
    }
    for _ in 0..k {
        a.sq().post_send(&sent)?;
    }
    wait_for_successes(&sent, k)?;
    // The exported `ib_drain_rq()`, as a C ULP calls it (`OwnedQp::drain_rq`
    // drains a QP on an SRQ whole).
    // SAFETY: `b` is a valid QP, and nothing else posts on it meanwhile.
    let drain_rq = || unsafe { kernel::bindings::ib_drain_rq(b.as_raw()) };
    let refused_warnings = kunit::count_warnings(drain_rq);
    let again = kunit::count_warnings(drain_rq);
    let state_after_refusal = b.state()?;
    let events_before_drain = b.last_wqe_events();
    b.drain()?;
    let counts = srq.handler().counts();
    // The core wakes the drain before it calls the QP's own event handler,
    // which counts the event: give that handler a moment.
    let last_wqe_reached = wait_until(1000, || b.last_wqe_events() > events_before_drain);
    // rxe raises the event, late, on every move to the error state (the
    // refusals' too): once they have settled, a second drain would show.
    let mut events = b.last_wqe_events();
    while wait_until(200, || b.last_wqe_events() != events) {
        events = b.last_wqe_events();
    }
    b.reset()?;
    Ok(SrqDrain {
        refused_warned_each_time: refused_warnings == Some(1) && again == Some(1),
        state_after_refusal,
        counts,
        last_wqe_reached,
        left_on_srq: srq.outstanding(),
        drained_again_by_reset: wait_until(500, || b.last_wqe_events() != events),
    })
}

/// One drain case run by a worker of the unbound workqueue.
#[pin_data]
struct DrainJob {
    #[pin]
    work: Work<DrainJob>,
    provider: &'static Provider,
    ctx: PollContext,
    n: u32,
    /// 0: the counts were right; otherwise a negative errno or 1.
    result: AtomicI32,
    #[pin]
    done: Completion,
}

impl_has_work! {
    impl HasWork<Self> for DrainJob { self.work }
}

impl WorkItem for DrainJob {
    type Pointer = Arc<DrainJob>;

    fn run(this: Arc<DrainJob>) {
        let r = match drain_rq_case(this.provider, this.ctx, this.n) {
            Ok(c) if c == (0, this.n, 0) => 0,
            Ok(_) => 1,
            Err(e) => e.to_errno(),
        };
        this.result.store(r, Ordering::Relaxed);
        this.done.complete_all();
    }
}

// The cases that run on either provider (`rdma_drain_rxe`, `rdma_drain_siw`).

/// Every posted receive is consumed, flushed, before `ib_drain_rq()`
/// returns, in every poll context and at every depth.
fn every_receive_is_consumed(p: &Provider) -> Result {
    for ctx in CONTEXTS {
        for n in [0, 1, 63, RQ_DEPTH] {
            let counts = drain_rq_case(p, ctx, n)?;
            check(
                p,
                format_args!("{ctx:?} n={n}: (success, flushed, other)"),
                counts,
                (0, n, 0),
            )?;
        }
    }
    Ok(())
}

/// The drains of the SQ, the RQ and the QP return in every poll context and
/// leave the QP in the error state.
fn every_drain_returns(p: &Provider) -> Result {
    for ctx in CONTEXTS {
        drain_sq_and_qp_case(p, ctx)?;
    }
    Ok(())
}

/// 16 QPs, each with its own CQ, drained at the same time from 16
/// workqueue workers, spread over the four poll contexts.
fn concurrent_drains(p: &'static Provider) -> Result {
    let mut jobs = KVec::new();
    for i in 0..16u32 {
        let job = Arc::pin_init(
            pin_init!(DrainJob {
                work <- new_work!("DrainJob::work"),
                provider: p,
                ctx: CONTEXTS[(i % 4) as usize],
                n: 1 + i * 8,
                result: AtomicI32::new(-1),
                done <- Completion::new(),
            }),
            GFP_KERNEL,
        )?;
        jobs.push(job.clone(), GFP_KERNEL)?;
        let _ = workqueue::system_unbound().enqueue(job);
    }
    for job in &jobs {
        job.done.wait_for_completion();
    }
    for (i, job) in jobs.iter().enumerate() {
        let r = job.result.load(Ordering::Relaxed);
        check(p, format_args!("drain job {i}: result"), r, 0)?;
    }
    Ok(())
}

/// 16 QPs sharing one CQ, each with 8 receives, drained at the same time
/// from 16 workers, in every poll context: all 128 receives flushed and
/// consumed when the drains return.
fn concurrent_drains_on_one_cq(p: &Provider) -> Result {
    for ctx in CONTEXTS {
        let dev = p.device()?;
        let pd = Pd::alloc(&dev)?;
        let cfg = QpConfig {
            send_depth: 0,
            recv_depth: 8,
        };
        let cq = OwnedCq::alloc(&dev, 16 * (1 + 9), 0, ctx)?;
        let cqe = Cqe::new(Counter::default())?;
        let mut qps = KVec::new();
        for _ in 0..16 {
            let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
            qp.init(1)?;
            for _ in 0..8 {
                qp.rq().post(&cqe)?;
            }
            qps.push(qp, GFP_KERNEL)?;
        }
        drain_rq_concurrently(&mut qps)?;
        check(
            p,
            format_args!("{ctx:?}: counts"),
            cqe.handler().counts(),
            (0, 128, 0),
        )?;
        check(
            p,
            format_args!("{ctx:?}: outstanding"),
            cqe.outstanding(),
            0,
        )?;
    }
    Ok(())
}

/// The CQ's room is reserved by construction: a QP that would not leave
/// room for its drain markers is refused.
fn cq_room_is_reserved(p: &Provider) -> Result {
    let dev = p.device()?;
    let pd = Pd::alloc(&dev)?;
    let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
    let full = QpConfig {
        send_depth: 4,
        recv_depth: 4,
    };
    let refused = OwnedQp::create_rc(&pd, &cq, &cq, full).err();
    check(p, format_args!("a QP without room"), refused, Some(EBUSY))?;
    let fits = QpConfig {
        send_depth: 3,
        recv_depth: 3,
    };
    let _qp = OwnedQp::create_rc(&pd, &cq, &cq, fits)?;
    check(p, format_args!("room left"), cq.available(), 0)
}

/// A full receive queue cannot happen through the API: the post after
/// `recv_depth` receives is refused, and the drain, whose marker has its
/// own slot, still consumes every receive without a warning. Where the
/// provider can reuse a QP, the reaped receives free their slots.
fn full_receive_queue_is_refused(p: &Provider) -> Result {
    for ctx in CONTEXTS {
        let dev = p.device()?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 2 * (RQ_DEPTH + 1), 0, ctx)?;
        let cqe = Cqe::new(Counter::default())?;
        let cfg = QpConfig {
            send_depth: 0,
            recv_depth: RQ_DEPTH,
        };
        let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        qp.init(1)?;
        for _ in 0..RQ_DEPTH {
            qp.rq().post(&cqe)?;
        }
        let post = qp.rq().post(&cqe);
        check(
            p,
            format_args!("{ctx:?}: post to a full RQ"),
            post,
            Err(EBUSY),
        )?;
        let warnings = warnings_of(|| qp.drain_rq())?;
        check(p, format_args!("{ctx:?}: warnings"), warnings, Some(0))?;
        let counts = cqe.handler().counts();
        check(p, format_args!("{ctx:?}: counts"), counts, (0, RQ_DEPTH, 0))?;
        check(
            p,
            format_args!("{ctx:?}: outstanding"),
            cqe.outstanding(),
            0,
        )?;
        if p.reusable {
            qp.reset()?;
            qp.init(1)?;
            qp.rq().post(&cqe)?;
        }
    }
    Ok(())
}

/// The PD, CQ and device handles go first: the QP still posts, drains,
/// and is destroyed, on the PD and CQ it holds.
fn qp_outlives_its_parents(p: &Provider) -> Result {
    let dev = p.device()?;
    let pd = Pd::alloc(&dev)?;
    let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
    let cqe = Cqe::new(Counter::default())?;
    let cfg = QpConfig {
        send_depth: 2,
        recv_depth: 2,
    };
    let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
    drop(pd);
    drop(cq);
    drop(dev);
    qp.init(1)?;
    qp.rq().post(&cqe)?;
    qp.drain_rq()?;
    check(p, format_args!("counts"), cqe.handler().counts(), (0, 1, 0))?;
    drop(qp);
    check(p, format_args!("outstanding"), cqe.outstanding(), 0)
}

/// Direct polling through the safe API reaps only a directly polled
/// CQ: on a softirq CQ it does nothing, and the completion still reaches
/// its handler once, from the CQ's own poller.
fn poll_cq_direct_leaves_a_softirq_cq(p: &Provider) -> Result {
    let dev = p.device()?;
    let pd = Pd::alloc(&dev)?;
    let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
    let cqe = Cqe::new(Counter::default())?;
    let cfg = QpConfig {
        send_depth: 0,
        recv_depth: 2,
    };
    let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
    qp.init(1)?;
    qp.rq().post(&cqe)?;
    qp.set_error_state()?;
    let mut polled = 0;
    for _ in 0..100 {
        polled += qp.rq().poll_cq_direct();
        fsleep(Delta::from_millis(1));
    }
    qp.drain_rq()?;
    check(p, format_args!("reaped directly"), polled, 0)?;
    check(p, format_args!("counts"), cqe.handler().counts(), (0, 1, 0))
}

/// The provider's device is up under its name, and a QP can be created on
/// it and taken to INIT.
fn a_qp_can_be_created(p: &Provider) -> Result {
    let dev = p.device()?;
    check(p, format_args!("name"), dev.name().as_c_str(), p.name)?;
    let pd = Pd::alloc(&dev)?;
    let cq = OwnedCq::alloc(&dev, 16, 0, PollContext::Softirq)?;
    let mut qp = OwnedQp::create_rc(
        &pd,
        &cq,
        &cq,
        QpConfig {
            send_depth: 4,
            recv_depth: 4,
        },
    )?;
    check(p, format_args!("a QP number"), qp.qp_num() != 0, true)?;
    qp.init(1)?;
    check(
        p,
        format_args!("the state after init"),
        qp.state()?,
        QpState::Init,
    )
}

#[kunit_tests(rdma_drain_rxe)]
mod tests {
    use super::*;

    #[test]
    fn rxe0_is_up_and_a_qp_can_be_created() -> Result {
        a_qp_can_be_created(&RXE)
    }

    #[test]
    fn drain_rq_consumes_every_receive() -> Result {
        every_receive_is_consumed(&RXE)
    }

    #[test]
    fn drain_sq_and_drain_qp_return_in_every_context() -> Result {
        every_drain_returns(&RXE)
    }

    /// `ib_drain_qp()` consumes both queues: 4 sends held by RNR (the peer
    /// has no receives) and 2 receives, all flushed before it returns.
    #[test]
    fn drain_qp_consumes_sends_and_receives() -> Result {
        for ctx in CONTEXTS {
            let dev = rxe()?;
            let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
            let pd = Pd::alloc(&dev)?;
            let cq = OwnedCq::alloc(&dev, 32, 0, ctx)?;
            let sent = Cqe::new(Counter::default())?;
            let received = Cqe::new(Counter::default())?;
            let cfg = QpConfig {
                send_depth: 4,
                recv_depth: 2,
            };
            let mut a = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
            let mut b = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
            connect_pair(&mut a, &mut b, &gid)?;
            for _ in 0..2 {
                a.rq().post(&received)?;
            }
            for _ in 0..4 {
                a.sq().post_send(&sent)?;
            }
            a.drain()?;
            let (ok, flushed, other) = sent.handler().counts();
            if (ok, flushed + other) != (0, 4) || sent.outstanding() != 0 {
                pr_err!(
                    "{ctx:?}: sends {:?}, {} outstanding\n",
                    (ok, flushed, other),
                    sent.outstanding()
                );
            }
            assert_eq!((ok, flushed + other), (0, 4));
            assert_eq!(sent.outstanding(), 0);
            assert_eq!(received.handler().counts(), (0, 2, 0));
            assert_eq!(received.outstanding(), 0);
        }
        Ok(())
    }

    /// Receives consumed by live sends and receives flushed by the drain add
    /// up to what was posted, and nothing of the RQ is outstanding when
    /// `ib_drain_rq()` returns, while sends are still arriving.
    #[test]
    fn drain_rq_under_live_traffic_accounts_for_every_receive() -> Result {
        for ctx in CONTEXTS {
            let ((received, flushed, other), outstanding) = live_traffic_case(ctx, 32, 64)?;
            pr_info!(
                "{ctx:?}: 64 receives: {received} received, {flushed} flushed, {other} other\n"
            );
            assert_eq!(received + flushed + other, 64);
            assert_eq!(other, 0);
            // The acknowledged sends consumed receives before the drain.
            assert!(received >= 16);
            assert!(received <= 32);
            assert_eq!(outstanding, 0);
        }
        Ok(())
    }

    #[test]
    fn sixteen_concurrent_drains() -> Result {
        concurrent_drains(&RXE)
    }

    #[test]
    fn sixteen_concurrent_drains_on_one_cq() -> Result {
        concurrent_drains_on_one_cq(&RXE)
    }

    #[test]
    fn cq_room_for_the_marker_is_reserved() -> Result {
        cq_room_is_reserved(&RXE)
    }

    /// A QP on an SRQ, in every poll context: `ib_drain_rq()` is refused
    /// and leaves the QP in the error state, as C does; `ib_drain_qp()`
    /// returns after the Last WQE Reached event with the 8 receives
    /// consumed; the 24 unused ones stay on the SRQ; `reset()` does not
    /// drain it again.
    #[test]
    fn qp_on_an_srq_is_drained_by_drain_qp() -> Result {
        for ctx in CONTEXTS {
            let got = srq_case(ctx, 8, 32)?;
            let want = SrqDrain {
                refused_warned_each_time: true,
                state_after_refusal: QpState::Err,
                counts: (8, 0, 0),
                last_wqe_reached: true,
                left_on_srq: 24,
                drained_again_by_reset: false,
            };
            if got != want {
                pr_err!("{ctx:?}: {got:?}\n");
            }
            assert_eq!(got, want);
        }
        Ok(())
    }
}

/// Faults on rxe that the drain, or the API, must turn into a clean outcome.
/// (On the fake provider: `rdma_drain_unit_faults`.)
#[kunit_tests(rdma_drain_rxe_faults)]
mod fault_tests {
    use super::*;

    /// rxe refuses RESET -> ERR: the drain of a QP never taken to INIT
    /// returns, with nothing posted and the QP left in RESET, and WARNs at
    /// its queue's site each time (a warning that KUnit suppresses does not
    /// use up the site's once).
    #[test]
    fn drain_of_a_qp_in_reset_warns_and_returns() -> Result {
        let dev = rxe()?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
        let cfg = QpConfig {
            send_depth: 2,
            recv_depth: 2,
        };
        let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        let rq = warnings_of(|| qp.drain_rq())?;
        let rq_again = warnings_of(|| qp.drain_rq())?;
        let sq = warnings_of(|| qp.drain_sq())?;
        assert_eq!((rq, rq_again, sq), (Some(1), Some(1), Some(1)));
        assert_eq!(qp.state()?, QpState::Reset);
        Ok(())
    }

    #[test]
    fn full_receive_queue_is_refused_and_the_drain_still_works() -> Result {
        full_receive_queue_is_refused(&RXE)
    }

    /// The same for sends: sends to a peer without receives wait (RNR) and
    /// fill the send queue; the next post is refused, and the drain flushes
    /// them all.
    #[test]
    fn full_send_queue_is_refused_and_the_drain_still_works() -> Result {
        let dev = rxe()?;
        let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 64, 0, PollContext::Softirq)?;
        let sent = Cqe::new(Counter::default())?;
        let cfg = QpConfig {
            send_depth: 8,
            recv_depth: 0,
        };
        let mut a = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        let mut b = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        connect_pair(&mut a, &mut b, &gid)?;
        for _ in 0..8 {
            a.sq().post_send(&sent)?;
        }
        assert_eq!(a.sq().post_send(&sent), Err(EBUSY));
        assert_eq!(warnings_of(|| a.drain_sq())?, Some(0));
        let (ok, flushed, other) = sent.handler().counts();
        assert_eq!(ok, 0);
        assert_eq!(flushed + other, 8);
        assert_eq!(sent.outstanding(), 0);
        Ok(())
    }
}

/// Safe code cannot make the provider touch freed memory by dropping, or
/// leaking, the handles in an order C would not allow: children hold
/// counted references to their parents. On the debug kernel KASAN watches.
/// (`mem::forget` of a QP keeps its parents the same way, forever; these
/// cases drop the QP last instead, so that nothing is left behind.)
#[kunit_tests(rdma_drain_rxe_soundness)]
mod soundness_tests {
    use super::*;

    #[test]
    fn a_qp_outlives_the_handles_of_its_parents() -> Result {
        qp_outlives_its_parents(&RXE)
    }

    /// The same for a QP on an SRQ: dropping the SRQ's handle before the QP
    /// leaves the SRQ (its receives, their handler, its CQ) to the QP, and
    /// a send still lands on it.
    #[test]
    fn a_qp_outlives_the_handle_of_its_srq() -> Result {
        let dev = rxe()?;
        let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
        let sent = Cqe::new(Counter::default())?;
        let srq = OwnedSrq::new(&pd, 4, PollContext::Softirq, Counter::default())?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 0,
        };
        let mut a = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        let mut b = OwnedQp::create_rc_on_srq(&pd, &cq, &srq, cfg)?;
        connect_pair(&mut a, &mut b, &gid)?;
        srq.post()?;
        drop(srq);
        drop(pd);
        a.sq().post_send(&sent)?;
        a.drain_sq()?;
        b.drain()?;
        assert_eq!(sent.handler().counts().0 + sent.handler().counts().1, 1);
        Ok(())
    }

    /// A QP in RESET can only be moved out by its provider's rules:
    /// `set_error_state()` through `Deref` is refused (the IB state table
    /// has no RESET -> ERR; rxe says `EINVAL`), and the QP stays in RESET.
    #[test]
    fn a_qp_in_reset_is_not_moved_behind_its_handle() -> Result {
        let dev = rxe()?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 1,
        };
        let qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        let moved = qp.set_error_state();
        assert_eq!(moved, Err(EINVAL));
        assert_eq!(qp.state()?, QpState::Reset);
        Ok(())
    }

    /// A QP on an SRQ that left RESET may hold a receive it took from the
    /// SRQ, though none of its own slots is in use: `reset()` drains it
    /// whole (error state, Last WQE Reached) before RESET. `OwnedQp` asks
    /// the provider for the state each time rather than remember it (mutant
    /// 23: a handle that takes "no slot in use" for idle skips that drain,
    /// and rxe raises no event).
    #[test]
    fn a_qp_on_an_srq_out_of_reset_is_drained_whole_by_reset() -> Result {
        let dev = rxe()?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
        let srq = OwnedSrq::new(&pd, 4, PollContext::Softirq, Counter::default())?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 0,
        };
        let mut qp = OwnedQp::create_rc_on_srq(&pd, &cq, &srq, cfg)?;
        qp.init(1)?;
        let before = qp.last_wqe_events();
        qp.reset()?;
        // The core wakes the drain before the QP's own handler counts the
        // event: give that handler a moment.
        let drained = wait_until(1000, || qp.last_wqe_events() > before);
        let state = qp.state()?;
        drop((qp, srq));
        assert_eq!(before, 0);
        assert!(drained);
        assert_eq!(state, QpState::Reset);
        Ok(())
    }

    /// A QP's PD, CQs and SRQ must be on one device: the provider takes each
    /// for one of its own. Objects of a second rxe device (the guest's rxe1
    /// on dummy1) are refused with `EINVAL` before the provider sees them;
    /// so is a buffer mapped for it, or a send longer than its buffer. A
    /// posted buffer is the device's until its completion, and a receive's
    /// alone (`EBUSY`).
    #[test]
    fn objects_of_another_device_are_refused() -> Result {
        let dev = rxe()?;
        let other = RegisteredDevice::get_by_netdev(c"dummy1")?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
        let other_cq = OwnedCq::alloc(&other, 8, 0, PollContext::Softirq)?;
        let other_srq = OwnedSrq::new(
            &Pd::alloc(&other)?,
            4,
            PollContext::Softirq,
            Counter::default(),
        )?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 1,
        };
        let on_srq = QpConfig {
            send_depth: 1,
            recv_depth: 0,
        };
        let send_elsewhere = OwnedQp::create_rc(&pd, &other_cq, &cq, cfg).err();
        let recv_elsewhere = OwnedQp::create_rc(&pd, &cq, &other_cq, cfg).err();
        let srq_elsewhere = OwnedQp::create_rc_on_srq(&pd, &cq, &other_srq, on_srq).err();
        let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        qp.init(1)?;
        // A buffer is posted only on the device it is mapped for, and only
        // as long as it is.
        let cqe = Cqe::new(Counter::default())?;
        let other_buf = DmaBuf::alloc(&other, 64)?;
        let mut buf = DmaBuf::alloc(&dev, 64)?;
        let buf_elsewhere = qp.rq().post_buf(&cqe, &other_buf).err();
        let too_long = qp.sq().post_send_buf(&cqe, &buf, 65).err();
        let own_buf = qp.rq().post_buf(&cqe, &buf);
        let held = buf.as_mut_slice().err();
        // A receive holds its buffer alone: no send shares it.
        let shared = qp.sq().post_send_buf(&cqe, &buf, 8).err();
        // Drains: the flushed receive gives the buffer back.
        drop(qp);
        let given_back = buf.as_mut_slice().is_ok();
        // A failed assertion ends the test without drops: let go of rxe1
        // (and every object) first, so that its delete does not wait.
        drop((other_buf, other_srq, other_cq, other, cq, pd, dev));
        assert_eq!(send_elsewhere, Some(EINVAL));
        assert_eq!(recv_elsewhere, Some(EINVAL));
        assert_eq!(srq_elsewhere, Some(EINVAL));
        assert_eq!(buf_elsewhere, Some(EINVAL));
        assert_eq!(too_long, Some(EINVAL));
        assert_eq!(own_buf, Ok(()));
        assert_eq!(held, Some(EBUSY));
        assert_eq!(shared, Some(EBUSY));
        assert!(given_back);
        assert_eq!(cqe.outstanding(), 0);
        Ok(())
    }

    /// Arguments ib_core passes on unchecked, trusting kernel callers, are
    /// refused before: a port the device does not have (ib_modify_qp()
    /// indexes its port data with it; KASAN in `make test-debug`), a
    /// completion vector it does not have (mlx4 and cxgb4 index with it), a
    /// CQ or SRQ of no entries (`__ib_alloc_cq()` WARNs).
    #[test]
    fn arguments_the_core_trusts_are_checked() -> Result {
        let dev = rxe()?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 1,
        };
        let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        for port in [0, 2, u32::MAX] {
            assert_eq!(qp.init(port), Err(EINVAL));
        }
        assert_eq!(qp.state()?, QpState::Reset);
        qp.init(1)?;
        for vector in [-1, i32::MAX] {
            let refused = OwnedCq::alloc(&dev, 8, vector, PollContext::Softirq).err();
            assert_eq!(refused, Some(EINVAL));
        }
        let no_entries = OwnedCq::alloc(&dev, 0, 0, PollContext::Softirq).err();
        assert_eq!(no_entries, Some(EINVAL));
        let empty_srq = OwnedSrq::new(&pd, 0, PollContext::Softirq, Counter::default()).err();
        assert_eq!(empty_srq, Some(EINVAL));
        Ok(())
    }

    #[test]
    fn poll_cq_direct_leaves_other_cqs_alone() -> Result {
        poll_cq_direct_leaves_a_softirq_cq(&RXE)
    }

    /// A handler may drop what it holds, in every poll context: its own QP,
    /// a CQ, an SRQ, a PD and its own `Cqe`. Nothing sleeps in softirq
    /// context (`make test-debug` reports it) or waits for the completion
    /// being handled: the QP, CQ, SRQ and PD are torn down later, in process
    /// context, and restrack sees them go; the handler's drain of its own QP is
    /// refused with `EDEADLK`.
    #[test]
    fn a_handler_may_drop_what_it_holds() -> Result {
        for ctx in CONTEXTS {
            let seen = handler_tears_down(ctx)?;
            assert!(seen.ran);
            assert_eq!(seen.drain, EDEADLK.to_errno());
            assert!(seen.torn_down);
        }
        Ok(())
    }

    /// A device without the verbs kernel ULPs need (ib_core's
    /// `kverbs_provider` clear, as for usnic, which has no `get_dma_mr`,
    /// `post_send` or `poll_cq`) is refused with `EOPNOTSUPP` when it is
    /// looked up, before any op of it can be called.
    #[test]
    fn a_device_without_kernel_verbs_is_refused() -> Result {
        let refused = with_rxe1_lacking(Lacks::KernelVerbs, || {
            RegisteredDevice::get_by_netdev(c"dummy1").err()
        })?;
        assert_eq!(refused, Some(EOPNOTSUPP));
        assert!(RegisteredDevice::get_by_netdev(c"dummy1").is_ok());
        Ok(())
    }

    /// An SRQ is made only on a device with SRQs: `ib_create_srq_user()`
    /// checks neither `ops.create_srq` nor that the provider declared the
    /// size of its `struct ib_srq` (erdma and mana have neither; it would
    /// write through ZERO_SIZE_PTR), nor the depth against `max_srq_wr`.
    #[test]
    fn an_srq_is_made_only_where_the_device_has_srqs() -> Result {
        let mut refused = KVec::new();
        for lacks in [Lacks::CreateSrq, Lacks::SrqSize, Lacks::MaxSrq] {
            let pd = Pd::alloc(&RegisteredDevice::get_by_netdev(c"dummy1")?)?;
            let err = with_rxe1_lacking(lacks, || {
                OwnedSrq::new(&pd, 4, PollContext::Softirq, Counter::default()).err()
            })?;
            refused.push(err, GFP_KERNEL)?;
        }
        let dev = RegisteredDevice::get_by_netdev(c"dummy1")?;
        let pd = Pd::alloc(&dev)?;
        // SAFETY: `dev` is held; its attributes do not change.
        let (max_wr, max_cqe) = unsafe {
            let attrs = &raw const (*dev.as_raw()).attrs;
            ((*attrs).max_srq_wr, (*attrs).max_cqe)
        };
        let too_deep = OwnedSrq::new(&pd, max_wr + 1, PollContext::Softirq, Counter::default());
        // The SRQ's CQ has an entry for each receive.
        let deepest = max_wr.min(u32::try_from(max_cqe)?);
        let deepest = OwnedSrq::new(&pd, deepest, PollContext::Softirq, Counter::default());
        let (too_deep, deepest) = (too_deep.err(), deepest.is_ok());
        assert_eq!(&refused[..], &[Some(EOPNOTSUPP); 3]);
        assert_eq!(too_deep, Some(EINVAL));
        assert!(deepest);
        Ok(())
    }
}

/// What a [`TearsDown`] handler holds, and drops at its first completion.
#[derive(Default)]
struct Owned {
    qp: Option<OwnedQp>,
    _cq: Option<Arc<OwnedCq>>,
    _srq: Option<Arc<OwnedSrq<Counter>>>,
    /// A PD nothing else holds, so that the handler's drop is its last.
    _pd: Option<Arc<Pd>>,
    cqe: Option<Cqe<TearsDown>>,
}

/// What a [`TearsDown`] handler saw, for the test.
#[derive(Default)]
struct Seen {
    calls: AtomicU32,
    /// The errno of the handler's drain of its QP (0: not refused).
    drain: AtomicI32,
    /// The handler was dropped, with its entry.
    dropped: AtomicBool,
}

/// A handler that, at its first completion, drains the QP it holds, then
/// drops everything it holds: that QP, a CQ, an SRQ, a PD and its own
/// `Cqe`.
struct TearsDown {
    owned: Arc<SpinLockIrq<Owned>>,
    seen: Arc<Seen>,
}

impl CompletionHandler for TearsDown {
    fn done(&self, _wc: &WorkCompletion) {
        if self.seen.calls.fetch_add(1, Ordering::Relaxed) != 0 {
            return;
        }
        let taken = {
            let mut owned = self.owned.lock();
            if let Some(qp) = owned.qp.as_mut() {
                let drain = qp.drain_rq().err().map_or(0, |e| e.to_errno());
                self.seen.drain.store(drain, Ordering::Relaxed);
            }
            core::mem::take(&mut *owned)
        };
        drop(taken);
    }
}

impl Drop for TearsDown {
    fn drop(&mut self) {
        self.seen.dropped.store(true, Ordering::Relaxed);
    }
}

/// Whether `dev`'s restrack still has the object `id` of `kind`.
fn restrack_has(dev: &RegisteredDevice, (kind, id): (bindings::rdma_restrack_type, u32)) -> bool {
    // SAFETY: `dev` is a registered device, held.
    let res = unsafe { bindings::rdma_restrack_get_byid(dev.as_raw(), kind, id) };
    match kernel::error::from_err_ptr(res) {
        Ok(res) => {
            // SAFETY: `rdma_restrack_get_byid()` took a reference on `res`.
            unsafe { bindings::rdma_restrack_put(res) };
            true
        }
        Err(_) => false,
    }
}

/// What [`handler_tears_down`] saw.
struct TornDown {
    /// The handler ran for both completions.
    ran: bool,
    /// The errno of its drain of its own QP.
    drain: i32,
    /// The handler was dropped, and the objects it dropped are gone.
    torn_down: bool,
}

/// A handler that drains and drops its own QP, and drops a CQ, an SRQ, a
/// PD and its own `Cqe`, polled in `ctx`: the drain is refused
/// (`EDEADLK`), and the QP, CQ, SRQ and PD are torn down afterwards, in
/// process context.
fn handler_tears_down(ctx: PollContext) -> Result<TornDown> {
    use bindings::{
        rdma_restrack_type_RDMA_RESTRACK_CQ as CQ, rdma_restrack_type_RDMA_RESTRACK_PD as PD,
        rdma_restrack_type_RDMA_RESTRACK_QP as QP, rdma_restrack_type_RDMA_RESTRACK_SRQ as SRQ,
    };
    let dev = rxe()?;
    let pd = Pd::alloc(&dev)?;
    // Room for two QPs: each queue's depth and its drain marker.
    let cq = OwnedCq::alloc(&dev, 10, 0, ctx)?;
    let cfg = QpConfig {
        send_depth: 1,
        recv_depth: 2,
    };
    // Of a direct CQ, this test is the poller, through a QP of its own.
    let mut poller = match ctx {
        PollContext::Direct => Some(OwnedQp::create_rc(&pd, &cq, &cq, cfg)?),
        _ => None,
    };
    let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
    qp.init(1)?;
    qp.set_error_state()?;
    let srq = OwnedSrq::new(&pd, 2, ctx, Counter::default())?;
    let lone_pd = Pd::alloc(&dev)?;
    // The objects the handler drops, by their restrack IDs (not reused at
    // once: allocated cyclically, as rxe's QP numbers are), not by counts,
    // which other tests' teardowns finishing meanwhile would change: the
    // QP, the SRQ and its own CQ, the lone PD, and the QPs' CQ, except a
    // direct one, which the poller's QP holds.
    // SAFETY: The objects are live; restrack set their IDs when they were
    // added, and does not change them.
    let ids = unsafe {
        [
            (QP, (*qp.as_raw()).res.id),
            (SRQ, (*srq.as_raw()).res.id),
            (CQ, (*srq.cq().as_raw()).res.id),
            (PD, (*lone_pd.as_raw()).res.id),
            (CQ, (*cq.as_raw()).res.id),
        ]
    };
    let ids = if poller.is_some() {
        &ids[..4]
    } else {
        &ids[..]
    };
    let owned = Arc::pin_init(new_spinlock_irq!(Owned::default()), GFP_KERNEL)?;
    let seen = Arc::new(Seen::default(), GFP_KERNEL)?;
    let cqe = Cqe::new(TearsDown {
        owned: owned.clone(),
        seen: seen.clone(),
    })?;
    {
        let mut o = owned.lock();
        *o = Owned {
            qp: Some(qp),
            _cq: Some(cq),
            _srq: Some(srq),
            _pd: Some(lone_pd),
            cqe: Some(cqe),
        };
        // Posted in the error state: flushed, so the handler runs.
        if let Owned {
            qp: Some(qp),
            cqe: Some(cqe),
            ..
        } = &mut *o
        {
            qp.rq().post(cqe)?;
            qp.rq().post(cqe)?;
        }
    }
    let ran = wait_until(5000, || {
        if let Some(p) = poller.as_mut() {
            p.rq().poll_cq_direct();
        }
        seen.calls.load(Ordering::Relaxed) == 2
    });
    // Up to 30,000 sleeps of 1 ms or more: it usually takes milliseconds,
    // but the debug kernel's sleeps are longer, and its workqueues slower.
    let left = || ids.iter().filter(|&&o| restrack_has(&dev, o)).count();
    let gone = wait_until(30_000, || {
        seen.dropped.load(Ordering::Relaxed) && left() == 0
    });
    let drain = seen.drain.load(Ordering::Relaxed);
    pr_info!("{ctx:?}: handler ran: {ran}, drain: {drain}, torn down: {gone}\n");
    if !gone {
        let (dropped, n) = (seen.dropped.load(Ordering::Relaxed), left());
        pr_info!("{ctx:?}: handler dropped: {dropped}, objects left: {n}\n");
    }
    Ok(TornDown {
        ran,
        drain,
        torn_down: gone,
    })
}

/// The WARNs that `f` raised, if it returned `Ok`.
fn warnings_of(f: impl FnOnce() -> Result) -> Result<Option<u32>> {
    let mut ret = Ok(());
    let warnings = kunit::count_warnings(|| ret = f());
    ret.map(|()| warnings)
}

/// A capability that [`with_rxe1_lacking`] takes from rxe1.
#[derive(Clone, Copy)]
enum Lacks {
    /// ib_core's `kverbs_provider` bit.
    KernelVerbs,
    /// `ops.create_srq`.
    CreateSrq,
    /// `ops.size_ib_srq`, the size of the provider's `struct ib_srq`.
    SrqSize,
    /// `attrs.max_srq`.
    MaxSrq,
}

/// Runs `f` with rxe1 (on `dummy1`, which only these suites use) lacking
/// `lacks`, as a provider without it would, and puts it back after.
fn with_rxe1_lacking<R>(lacks: Lacks, f: impl FnOnce() -> R) -> Result<R> {
    let dev = RegisteredDevice::get_by_netdev(c"dummy1")?;
    let raw: *mut bindings::ib_device = dev.as_raw();
    // Nothing else uses rxe1 while the suites run one case at a time:
    // ib_core reads `kverbs_provider` when a client registers (none does
    // meanwhile) and the rest when an SRQ is created, which only `f` does.
    // SAFETY: `dev` holds rxe1 registered; the fields are written through the
    // raw pointer, with no reference to the live device, and put back below.
    let saved = unsafe {
        let saved = (
            bindings::ib_device::kverbs_provider_raw(raw),
            (*raw).ops.create_srq,
            (*raw).ops.size_ib_srq,
            (*raw).attrs.max_srq,
        );
        match lacks {
            Lacks::KernelVerbs => bindings::ib_device::set_kverbs_provider_raw(raw, 0),
            Lacks::CreateSrq => (*raw).ops.create_srq = None,
            Lacks::SrqSize => (*raw).ops.size_ib_srq = 0,
            Lacks::MaxSrq => (*raw).attrs.max_srq = 0,
        }
        saved
    };
    let r = f();
    // SAFETY: As above.
    unsafe {
        bindings::ib_device::set_kverbs_provider_raw(raw, saved.0);
        (*raw).ops.create_srq = saved.1;
        (*raw).ops.size_ib_srq = saved.2;
        (*raw).attrs.max_srq = saved.3;
    }
    Ok(r)
}

/// The cases above that need no connected peer, on soft-iWARP (`siw0`).
/// siw flushes a work request posted in the error state inside the post
/// call, so a drain's marker can complete, and its handler run, before
/// `ib_post_recv()` returns. Left to rxe: the cases with a connected pair
/// (siw reaches RTS only through the iWARP CM), and those of a QP in RESET
/// (siw has none: RESET and INIT are both its IDLE, which may go to ERR).
/// A QP on an SRQ on siw: `rdma_drain_siw_srq` (rdma_drain_stress_test).
#[kunit_tests(rdma_drain_siw)]
mod siw_tests {
    use super::*;

    #[test]
    fn siw0_is_up_and_a_qp_can_be_created() -> Result {
        a_qp_can_be_created(&SIW)
    }

    #[test]
    fn drain_rq_consumes_every_receive() -> Result {
        every_receive_is_consumed(&SIW)
    }

    #[test]
    fn drain_sq_and_drain_qp_return_in_every_context() -> Result {
        every_drain_returns(&SIW)
    }

    #[test]
    fn sixteen_concurrent_drains() -> Result {
        concurrent_drains(&SIW)
    }

    #[test]
    fn sixteen_concurrent_drains_on_one_cq() -> Result {
        concurrent_drains_on_one_cq(&SIW)
    }

    #[test]
    fn cq_room_for_the_marker_is_reserved() -> Result {
        cq_room_is_reserved(&SIW)
    }

    #[test]
    fn full_receive_queue_is_refused_and_the_drain_still_works() -> Result {
        full_receive_queue_is_refused(&SIW)
    }

    #[test]
    fn a_qp_outlives_the_handles_of_its_parents() -> Result {
        qp_outlives_its_parents(&SIW)
    }

    #[test]
    fn poll_cq_direct_leaves_other_cqs_alone() -> Result {
        poll_cq_direct_leaves_a_softirq_cq(&SIW)
    }

    /// A QP's objects must be on its device, across providers too: a CQ of
    /// rxe0 is refused for a QP on siw0.
    #[test]
    fn objects_of_another_provider_are_refused() -> Result {
        let dev = SIW.device()?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
        let rxe_cq = OwnedCq::alloc(&rxe()?, 8, 0, PollContext::Softirq)?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 1,
        };
        let send_elsewhere = OwnedQp::create_rc(&pd, &rxe_cq, &cq, cfg).err();
        let recv_elsewhere = OwnedQp::create_rc(&pd, &cq, &rxe_cq, cfg).err();
        // A failed assertion ends the test without drops: let go of both
        // devices first, so that their deletes do not wait.
        drop((rxe_cq, cq, pd, dev));
        assert_eq!(send_elsewhere, Some(EINVAL));
        assert_eq!(recv_elsewhere, Some(EINVAL));
        Ok(())
    }
}
