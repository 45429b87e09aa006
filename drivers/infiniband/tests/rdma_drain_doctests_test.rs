// SPDX-License-Identifier: GPL-2.0

//! The `# Examples` of `kernel::infiniband`, run as the KUnit suite
//! `rdma_drain_doctests` when this module loads, on the guest's rxe0.
//!
//! The examples call into ib_core, which may be a module, so they cannot be
//! linked into vmlinux with the kernel crate's other doctests, nor run at
//! boot, before rxe0 exists. The kernel's doctest generator writes them to a
//! file of their own instead, which this module includes.

use kernel::prelude::*;

module! {
    type: Doctests,
    name: "rdma_drain_doctests_test",
    authors: ["Rust RDMA drain project"],
    description: "The kernel::infiniband doctests, on rxe0",
    license: "GPL",
}

struct Doctests;

impl kernel::Module for Doctests {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(Self)
    }
}

/// The generated tests, and `DOCTEST_CASES`.
mod generated {
    include!(concat!(
        env!("OBJTREE"),
        "/rust/doctests_kernel_infiniband_generated.rs"
    ));

    kernel::kunit_unsafe_test_suite!(rdma_drain_doctests, DOCTEST_CASES);
}
