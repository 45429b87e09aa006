// SPDX-License-Identifier: GPL-2.0

//! What the test modules on rxe and siw share (`mod common;` in each): the
//! providers, the poll contexts, a completion counter and connecting two
//! QPs.

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::infiniband::{
    CompletionHandler, DeviceRef, GidAttr, Mtu, OwnedQp, PollContext, RcParams, RegisteredDevice,
    WcStatus, WorkCompletion,
};
use kernel::prelude::*;
use kernel::time::{delay::fsleep, Delta};

/// The four contexts a CQ can be polled in.
pub(crate) const CONTEXTS: [PollContext; 4] = [
    PollContext::Direct,
    PollContext::Softirq,
    PollContext::Workqueue,
    PollContext::UnboundWorkqueue,
];

/// A software provider the guest created a device of, and what the suites
/// that run on either must know of it.
pub(crate) struct Provider {
    /// The device's name: `rxe0`, `siw0`.
    #[allow(dead_code)] // Not every module that shares this file reads it.
    pub(crate) name: &'static CStr,
    /// The netdev the guest created it on.
    netdev: &'static CStr,
    /// Whether a QP in the error state can go back to RESET and be used
    /// again. siw's error state is final (`siw_qp_modify()`).
    #[allow(dead_code)] // As for `name`.
    pub(crate) reusable: bool,
}

impl Provider {
    /// The provider's device.
    pub(crate) fn device(&self) -> Result<DeviceRef> {
        RegisteredDevice::get_by_netdev(self.netdev)
    }
}

/// Soft-RoCE, `rxe0` on `dummy0`.
pub(crate) static RXE: Provider = Provider {
    name: c"rxe0",
    netdev: c"dummy0",
    reusable: true,
};

/// Soft-iWARP, `siw0` on `dummy2` (scripts/guest/rdma.sh: `siw0_add`). Its
/// QPs reach RTS only through the iWARP CM, so the suites on it drain QPs
/// that were never connected: receives posted in INIT, nothing sent. It
/// flushes a work request posted in the error state inside the post call.
#[allow(dead_code)] // Not every module that shares this file runs on siw.
pub(crate) static SIW: Provider = Provider {
    name: c"siw0",
    netdev: c"dummy2",
    reusable: false,
};

/// The rxe device the guest created on `dummy0`.
pub(crate) fn rxe() -> Result<DeviceRef> {
    RXE.device()
}

/// Counts completions by status.
#[derive(Default)]
pub(crate) struct Counter {
    success: AtomicU32,
    flushed: AtomicU32,
    other: AtomicU32,
}

impl CompletionHandler for Counter {
    fn done(&self, wc: &WorkCompletion) {
        let c = match wc.status() {
            WcStatus::Success => &self.success,
            WcStatus::FlushError => &self.flushed,
            WcStatus::Other(_) => &self.other,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

impl Counter {
    /// The (success, flushed, other) counts so far.
    pub(crate) fn counts(&self) -> (u32, u32, u32) {
        (
            self.success.load(Ordering::Relaxed),
            self.flushed.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
        )
    }
}

/// The connection the tests use: rxe's default MTU, and retries that ride
/// out a busy TCG guest (RNR retried forever: a test may post its receives
/// after the peer sends).
pub(crate) const RC: RcParams = RcParams {
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

/// Takes two QPs in RESET to INIT on port 1 and connects them to each other
/// through `gid`.
#[allow(dead_code)] // The stress test reconnects used QPs only.
pub(crate) fn connect_pair(a: &mut OwnedQp, b: &mut OwnedQp, gid: &GidAttr) -> Result {
    a.init(1)?;
    b.init(1)?;
    connect_inited(a, b, gid)
}

/// Connects two QPs in INIT to each other through `gid`.
fn connect_inited(a: &mut OwnedQp, b: &mut OwnedQp, gid: &GidAttr) -> Result {
    let (qpn_a, qpn_b) = (a.qp_num(), b.qp_num());
    a.connect(gid, qpn_b, &RC)?;
    b.connect(gid, qpn_a, &RC)
}

/// Takes two used QPs through RESET to INIT and connects them again, like
/// [`connect_pair`]. A QP must read RESET once `reset()` has returned (rxe
/// set ERR behind a reset until patch 0002: `rdma_rxe_late_err`).
#[allow(dead_code)] // Not every module that shares this file reuses QPs.
pub(crate) fn reconnect_pair(a: &mut OwnedQp, b: &mut OwnedQp, gid: &GidAttr) -> Result {
    for qp in [&mut *a, &mut *b] {
        qp.reset()?;
        qp.init(1).inspect_err(|e| {
            pr_err!(
                "QP {:#x}: INIT after reset: {e:?}, the QP reads {:?}\n",
                qp.qp_num(),
                qp.state()
            )
        })?;
    }
    connect_inited(a, b, gid).inspect_err(|e| {
        pr_err!(
            "QPs {:#x}, {:#x}: connecting again: {e:?}, they read {:?}, {:?}\n",
            a.qp_num(),
            b.qp_num(),
            a.state(),
            b.state()
        )
    })
}

/// Polls `done()` every millisecond for at most `limit_ms`; returns its last
/// value, so that a wait that runs out fails its test instead of hanging it.
#[allow(dead_code)] // Not every module that shares this file waits.
pub(crate) fn wait_until(limit_ms: u32, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..limit_ms {
        if done() {
            return true;
        }
        fsleep(Delta::from_millis(1));
    }
    done()
}
