// SPDX-License-Identifier: GPL-2.0

//! A QP forgotten by a module that is then unloaded: restrack keeps the
//! name of its owner as a pointer, so `rdma resource show` must still read
//! it after the module's memory is gone (suite
//! `rdma_drain_forgotten_unloaded`).
//!
//! Nothing is ever posted on the QP and it is never connected, so no
//! completion and no event can reach code of this module once it is gone.
//! The QP, its PD and its CQ stay on rxe0 for good.

use kernel::infiniband::{OwnedCq, OwnedQp, Pd, PollContext, QpConfig, RegisteredDevice};
use kernel::prelude::*;

module! {
    type: ForgetUnload,
    name: "rdma_drain_forget_unload",
    authors: ["Rust RDMA drain project"],
    description: "Forgets a QP on rxe0, to be unloaded",
    license: "GPL",
}

struct ForgetUnload;

impl kernel::Module for ForgetUnload {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 4, 0, PollContext::Softirq)?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 1,
        };
        let qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        pr_info!("forgetting QP {:#x} on {}\n", qp.qp_num(), dev.name());
        core::mem::forget(qp);
        Ok(ForgetUnload)
    }
}
