// SPDX-License-Identifier: GPL-2.0

//! A Rust ULP that holds `rxe0` while it is loaded: a `DeviceRef`, and a PD,
//! a CQ and a QP on the device, which hold clones of it; or (`gid_only`) no
//! more than an entry of its GID table, which holds the device too. The
//! guest deletes `rxe0` meanwhile (suite `rdma_device_hold`):
//! `ib_unregister_device()` must wait until this module lets go at unload,
//! never free the device under its objects, and then finish.

use kernel::infiniband::{
    DeviceRef, GidAttr, OwnedCq, OwnedQp, Pd, PollContext, QpConfig, RegisteredDevice,
};
use kernel::prelude::*;

module! {
    type: DeviceHold,
    name: "rdma_device_hold",
    authors: ["Rust RDMA drain project"],
    description: "Holds rxe0 until unloaded",
    license: "GPL",
    params: {
        gid_only: bool {
            default: false,
            description: "Hold only a GID entry of rxe0, no DeviceRef",
        },
    },
}

/// What the module holds, dropped in field order: the QP before its device.
enum DeviceHold {
    Objects { _qp: OwnedQp, _dev: DeviceRef },
    Gid { _gid: GidAttr },
}

impl kernel::Module for DeviceHold {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
        if module_parameters::gid_only.value() {
            let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
            pr_info!("holding {}: GID entry {}\n", dev.name(), gid.index());
            return Ok(DeviceHold::Gid { _gid: gid });
        }
        let pd = Pd::alloc(&dev)?;
        let cq = OwnedCq::alloc(&dev, 4, 0, PollContext::Softirq)?;
        let cfg = QpConfig {
            send_depth: 1,
            recv_depth: 1,
        };
        let qp = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
        pr_info!("holding {}: QP {:#x}\n", dev.name(), qp.qp_num());
        Ok(DeviceHold::Objects { _qp: qp, _dev: dev })
    }
}

impl Drop for DeviceHold {
    fn drop(&mut self) {
        pr_info!("releasing rxe0\n");
    }
}
