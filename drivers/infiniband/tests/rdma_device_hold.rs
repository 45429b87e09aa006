// SPDX-License-Identifier: GPL-2.0

//! A Rust ULP that holds `rxe0` while it is loaded: a `DeviceRef`, and a PD,
//! a CQ and a QP on the device, which hold clones of it. The guest deletes
//! `rxe0` meanwhile (suite `rdma_device_hold`): `ib_unregister_device()`
//! must wait until this module lets go at unload, never free the device
//! under its objects, and then finish.

use kernel::infiniband::{
    DeviceRef, OwnedCq, OwnedQp, Pd, PollContext, QpConfig, RegisteredDevice,
};
use kernel::prelude::*;

module! {
    type: DeviceHold,
    name: "rdma_device_hold",
    authors: ["Rust RDMA drain project"],
    description: "Holds rxe0 until unloaded",
    license: "GPL",
}

struct DeviceHold {
    // Dropped in this order: the QP before what it holds.
    _qp: OwnedQp,
    _dev: DeviceRef,
}

impl kernel::Module for DeviceHold {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 4, 0, PollContext::Softirq)?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 1,
        };
        let qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        pr_info!("holding {}: QP {:#x}\n", dev.name(), qp.qp_num());
        Ok(DeviceHold { _qp: qp, _dev: dev })
    }
}

impl Drop for DeviceHold {
    fn drop(&mut self) {
        pr_info!("releasing rxe0\n");
    }
}
