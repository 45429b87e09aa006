// SPDX-License-Identifier: GPL-2.0

//! Must not compile: a handler reading the QP of its completion. With
//! several pollers on a CQ, the QP may be destroyed while one of them runs
//! the handler; `WorkCompletion` does not give it out.
//!
//! expect: no method named `qp_num` found
//! control: s/wc.qp_num()/wc.status() == WcStatus::Success/

use kernel::infiniband::{CompletionHandler, WcStatus, WorkCompletion};
use kernel::prelude::*;

struct LastQp;

impl CompletionHandler for LastQp {
    fn done(&self, wc: &WorkCompletion) {
        let _ = wc.qp_num();
        let _ = WcStatus::Success;
    }
}

module! {
    type: CompileFail,
    name: "compile_fail",
    authors: ["Rust RDMA drain project"],
    description: "must not compile",
    license: "GPL",
}

struct CompileFail;

impl kernel::Module for CompileFail {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let _ = LastQp;
        Ok(CompileFail)
    }
}
