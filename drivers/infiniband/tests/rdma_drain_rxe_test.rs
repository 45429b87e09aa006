// SPDX-License-Identifier: GPL-2.0

//! Drain tests on a real soft-RoCE (rxe) device.
//!
//! Runs when loaded, after the guest created `rxe0`.

use kernel::prelude::*;

module! {
    type: RxeDrainTest,
    name: "rdma_drain_rxe_test",
    authors: ["Rust RDMA drain project"],
    description: "Drain tests on rxe",
    license: "GPL",
}

struct RxeDrainTest;

impl kernel::Module for RxeDrainTest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(RxeDrainTest)
    }
}
