// SPDX-License-Identifier: GPL-2.0

//! A module that forgets a QP and is then unloaded (suites
//! `rdma_drain_forgotten_unloaded` and `rdma_drain_forgotten_posted`).
//!
//! With `post=0`, nothing is ever posted on the QP and it is never
//! connected, so no completion and no event can reach code of this module
//! once it is gone; restrack keeps the name of its owner as a pointer, so
//! `rdma resource show` must still read it after the module's memory is gone.
//!
//! By default a receive is posted first, whose completion entry calls this
//! module's code when the receive completes, which is only when the QP is
//! flushed, by `rdma_qp_set_error.ko`. Until then ib_core holds this module
//! (`counted_cqe.c`), and `rmmod` is refused; unloaded earlier, the flush
//! would call freed code. With `fail_init`, the init fails after
//! forgetting: the module goes regardless of the reference, and ib_core's
//! module notifier keeps it (and `insmod`) waiting until the flush.
//!
//! The QP, its PD and its CQ stay on rxe0 for good.

use kernel::infiniband::{
    CompletionHandler, Cqe, OwnedCq, OwnedQp, Pd, PollContext, QpConfig, RegisteredDevice,
    WorkCompletion,
};
use kernel::prelude::*;

module! {
    type: Forget,
    name: "rdma_drain_forget",
    authors: ["Rust RDMA drain project"],
    description: "Forgets a QP, with a receive posted or not, to be unloaded",
    license: "GPL",
    params: {
        post: bool {
            default: true,
            description: "Post a receive before forgetting the QP",
        },
        fail_init: bool {
            default: false,
            description: "Fail the init after forgetting: the module goes regardless",
        },
    },
}

/// Says that it ran, and with which status: code of this module.
struct SayDone;

impl CompletionHandler for SayDone {
    fn done(&self, wc: &WorkCompletion) {
        pr_info!("handler ran: {:?}\n", wc.status());
    }
}

struct Forget;

impl kernel::Module for Forget {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 4, 0, PollContext::Softirq)?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 1,
        };
        let mut qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        if !module_parameters::post.value() {
            pr_info!("forgetting QP {:#x} on {}\n", qp.qp_num(), dev.name());
            core::mem::forget(qp);
            return Ok(Forget);
        }
        qp.init(1)?;
        let cqe = Cqe::new(SayDone)?;
        qp.rq().post(&cqe)?;
        pr_info!(
            "forgetting QP {:#x} on {} with a receive posted\n",
            qp.qp_num(),
            dev.name()
        );
        core::mem::forget(qp);
        core::mem::forget(cqe);
        if module_parameters::fail_init.value() {
            return Err(EINVAL);
        }
        Ok(Forget)
    }
}
