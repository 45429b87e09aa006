// SPDX-License-Identifier: GPL-2.0

//! Rust RDMA ping-pong sample: a first user of `kernel::infiniband`.
//!
//! Two RC queue pairs on the RDMA device of `dummy0` (an rxe device, say:
//! `rdma link add rxe0 type rxe netdev dummy0`) are connected to each other
//! over RoCE loopback and bounce a message of `size` bytes `iterations`
//! times. In each round A sends a pattern to B, B checks every byte and
//! sends it back, and A checks it again. Both QPs share one CQ that the
//! sample polls itself (`IB_POLL_DIRECT`), so a round trip is two posted
//! receives, two posted sends and the polling for their four completions.
//!
//! On loading, it prints the bytes verified, the mean time of a round trip
//! (its posting and polling only), and the throughput, then fails to load
//! if a byte or a completion was wrong:
//!
//! ```text
//! rust_rdma_pingpong: send 64 B x 1000: 128000 bytes verified, 0 wrong
//! rust_rdma_pingpong: send 64 B x 1000: 41234 ns per round trip, 3104 KB/s
//! ```

use kernel::{
    infiniband::{
        CompletionHandler, Cqe, DmaBuf, GidAttr, Mtu, OwnedCq, OwnedQp, Pd, PollContext, QpConfig,
        RcParams, RegisteredDevice, WcStatus, WorkCompletion,
    },
    prelude::*,
    sync::atomic::{Acquire, Atomic, Relaxed, Release},
    time::{Delta, Instant, Monotonic},
};

module! {
    type: PingPong,
    name: "rust_rdma_pingpong",
    authors: ["Rust for Linux Contributors"],
    description: "Rust RDMA ping-pong sample",
    license: "GPL",
    params: {
        size: u32 {
            default: 64,
            description: "Message size in bytes (1 to 65536)",
        },
        iterations: u32 {
            default: 1000,
            description: "Round trips",
        },
    },
}

/// How long a round trip may take before the sample gives up.
const ROUND_TRIP_LIMIT: Delta = Delta::from_secs(10);

/// Counts the completions of one kind of work request, and keeps the byte
/// count of the last one.
struct Done {
    ok: Atomic<u32>,
    failed: Atomic<u32>,
    len: Atomic<u32>,
}

impl Done {
    fn new() -> Self {
        Self {
            ok: Atomic::new(0),
            failed: Atomic::new(0),
            len: Atomic::new(0),
        }
    }

    /// Completions so far, successful or not.
    fn count(&self) -> u32 {
        self.ok.load(Acquire) + self.failed.load(Acquire)
    }
}

impl CompletionHandler for Done {
    fn done(&self, wc: &WorkCompletion) {
        if wc.status() == WcStatus::Success {
            self.len.store(wc.byte_len(), Relaxed);
            self.ok.fetch_add(1, Release);
        } else {
            self.failed.fetch_add(1, Release);
        }
    }
}

/// One end of the ping-pong: a QP and its two buffers.
struct End {
    qp: OwnedQp,
    out: DmaBuf,
    into: DmaBuf,
}

/// The byte of round `round` at offset `i`.
fn pattern(round: u32, i: usize) -> u8 {
    // CAST: Only the low byte is wanted.
    (round as usize).wrapping_mul(31).wrapping_add(i) as u8
}

/// Fills the first `size` bytes of `buf` with what round `round` must not
/// find there, so that a receive that wrote nothing is seen.
fn poison(buf: &mut DmaBuf, round: u32, size: usize) -> Result {
    for (i, byte) in buf.as_mut_slice()?[..size].iter_mut().enumerate() {
        *byte = !pattern(round, i);
    }
    Ok(())
}

/// The bytes of `buf`'s first `size` that hold round `round`'s pattern.
fn matching(buf: &mut DmaBuf, round: u32, size: usize) -> Result<usize> {
    Ok(buf.as_mut_slice()?[..size]
        .iter()
        .enumerate()
        .filter(|&(i, &byte)| byte == pattern(round, i))
        .count())
}

/// Bounces messages between `a` and `b`; returns the bytes received as
/// sent, those that were not, and the time spent posting and polling.
fn run(
    a: &mut End,
    b: &mut End,
    sent: &Cqe<Done>,
    received: &Cqe<Done>,
    size: usize,
    iterations: u32,
) -> Result<(u64, u64, Delta)> {
    let (mut verified, mut wrong) = (0u64, 0u64);
    let mut busy = Delta::from_nanos(0);
    for round in 0..iterations {
        for (i, byte) in a.out.as_mut_slice()?[..size].iter_mut().enumerate() {
            *byte = pattern(round, i);
        }
        poison(&mut b.into, round, size)?;
        poison(&mut a.into, round, size)?;
        // A -> B.
        let start = Instant::<Monotonic>::now();
        bounce(a, b, sent, received, size)?;
        busy += start.elapsed();
        let echo = matching(&mut b.into, round, size)?;
        // B sends back what it received.
        b.out.as_mut_slice()?[..size].copy_from_slice(&b.into.as_mut_slice()?[..size]);
        // B -> A.
        let start = Instant::<Monotonic>::now();
        bounce(b, a, sent, received, size)?;
        busy += start.elapsed();
        let back = matching(&mut a.into, round, size)?;
        // CAST: Counts of bytes of a buffer.
        let (echo, back) = (echo as u64, back as u64);
        verified += echo + back;
        wrong += 2 * size as u64 - echo - back;
    }
    Ok((verified, wrong, busy))
}

/// Sends `size` bytes of `from.out` into `to.into`, and polls until both
/// the send and the receive have completed.
fn bounce(
    from: &mut End,
    to: &mut End,
    sent: &Cqe<Done>,
    received: &Cqe<Done>,
    size: usize,
) -> Result {
    let (want_sent, want_received) = (sent.handler().count() + 1, received.handler().count() + 1);
    to.qp.rq().post_buf(received, &to.into)?;
    from.qp.sq().post_send_buf(sent, &from.out, size)?;
    let start = Instant::<Monotonic>::now();
    // Both QPs complete on one direct CQ: reaping it through either QP
    // runs the handlers of both.
    while sent.handler().count() < want_sent || received.handler().count() < want_received {
        if to.qp.rq().poll_cq_direct() == 0 {
            if start.elapsed() > ROUND_TRIP_LIMIT {
                pr_err!(
                    "no completion in {} s\n",
                    ROUND_TRIP_LIMIT.as_nanos() / 1_000_000_000
                );
                return Err(ETIMEDOUT);
            }
            core::hint::spin_loop();
        }
    }
    if received.handler().len.load(Relaxed) as usize != size {
        let got = received.handler().len.load(Relaxed);
        pr_err!("received {got} bytes, not {size}\n");
        return Err(EIO);
    }
    Ok(())
}

struct PingPong;

impl kernel::Module for PingPong {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let size = module_parameters::size.value();
        let iterations = module_parameters::iterations.value();
        if !(1..=65536).contains(&size) {
            pr_err!("size must be 1 to 65536 bytes, not {size}\n");
            return Err(EINVAL);
        }
        let size = usize::try_from(size)?;
        let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
        let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Direct)?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 1,
        };
        let params = RcParams {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            hop_limit: 64,
            sq_psn: 0,
            rq_psn: 0,
        };
        // Longer than the messages: a send of the whole buffer, not of the
        // message, is seen in the receive's byte count.
        let len = size + 64;
        let mut a = End {
            qp: OwnedQp::create_rc(&pd, &cq, &cq, cfg)?,
            out: DmaBuf::alloc(&dev, len)?,
            into: DmaBuf::alloc(&dev, len)?,
        };
        let mut b = End {
            qp: OwnedQp::create_rc(&pd, &cq, &cq, cfg)?,
            out: DmaBuf::alloc(&dev, len)?,
            into: DmaBuf::alloc(&dev, len)?,
        };
        a.qp.init(1)?;
        b.qp.init(1)?;
        let (qpn_a, qpn_b) = (a.qp.qp_num(), b.qp.qp_num());
        a.qp.connect(&gid, qpn_b, &params)?;
        b.qp.connect(&gid, qpn_a, &params)?;
        let sent = Cqe::new(Done::new())?;
        let received = Cqe::new(Done::new())?;

        let ran = run(&mut a, &mut b, &sent, &received, size, iterations);
        // Dropping the QPs drains them: nothing is outstanding after this.
        drop(a);
        drop(b);
        let (verified, wrong, busy) = ran?;
        let failed = sent.handler().failed.load(Relaxed) + received.handler().failed.load(Relaxed);
        // CAST: Nanoseconds of a run are not negative.
        let ns = busy.as_nanos().max(1) as u64;
        let n = iterations;
        let rtt = ns / u64::from(n.max(1));
        let kbs = verified * 1_000_000 / ns;
        pr_info!("send {size} B x {n}: {verified} bytes verified, {wrong} wrong\n");
        pr_info!("send {size} B x {n}: {rtt} ns per round trip, {kbs} KB/s\n");
        if wrong != 0 || failed != 0 {
            pr_err!("{wrong} bytes wrong, {failed} completions failed\n");
            return Err(EIO);
        }
        Ok(PingPong)
    }
}
