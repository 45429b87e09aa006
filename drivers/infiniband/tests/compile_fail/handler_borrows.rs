// SPDX-License-Identifier: GPL-2.0

//! Must not compile: a completion handler that borrows. A posted `Cqe` may
//! be leaked (`mem::forget`) or dropped, and the provider then calls its
//! handler on a flush or a peer's send, after the borrowed frame is gone.
//!
//! expect: E0477|E0478|lifetime may not live long enough
//! control: s/&'a u32/\&'static u32/; s/<'a>//g; s/<'_>//g

use kernel::infiniband::{CompletionHandler, WorkCompletion};
use kernel::prelude::*;

struct Borrows<'a>(&'a u32);

impl CompletionHandler for Borrows<'_> {
    fn done(&self, _wc: &WorkCompletion) {
        let _ = *self.0;
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
        let _ = core::mem::size_of::<Borrows<'_>>();
        Ok(CompileFail)
    }
}
