// SPDX-License-Identifier: GPL-2.0

//! Benchmark only (`CONFIG_INFINIBAND_DRAIN_SWITCH`, `make bench-ulp`; not
//! for merge): `bench_switch!` at the top of each exported drain of drain.rs
//! times it, and runs the C reference drain instead when the module
//! parameter `ib_core.drain_c` is set. The parameter and the counters
//! (`ib_core.drain_ns`, `ib_core.drain_calls`) are in verbs.c. Without the
//! option the macro expands to nothing.

#[cfg(CONFIG_INFINIBAND_DRAIN_SWITCH)]
pub(crate) mod imp {
    use core::ffi::c_void;
    use kernel::time::{Instant, Monotonic};

    // Declared in core_priv.h (bindgen does not read it); `struct ib_qp *`
    // as `c_void`: bindgen's `ib_qp` contains, through a nested type, a
    // zero-sized array, which the improper_ctypes lint rejects.
    extern "C" {
        fn ib_drain_use_c() -> bool;
        fn ib_drain_account(ns: i64);
        pub(crate) fn ib_drain_sq_c(qp: *mut c_void);
        pub(crate) fn ib_drain_rq_c(qp: *mut c_void);
        pub(crate) fn ib_drain_qp_c(qp: *mut c_void);
    }

    /// Adds the time from its start to its drop to `ib_core.drain_ns`.
    pub(crate) struct Timed(Instant<Monotonic>);

    impl Timed {
        pub(crate) fn start() -> Self {
            Self(Instant::now())
        }
    }

    impl Drop for Timed {
        fn drop(&mut self) {
            // SAFETY: It adds to two atomic counters; any context may call it.
            unsafe { ib_drain_account(self.0.elapsed().as_nanos()) };
        }
    }

    /// Whether `ib_core.drain_c` is set.
    pub(crate) fn use_c() -> bool {
        // SAFETY: It reads the parameter once (`READ_ONCE()`); any context.
        unsafe { ib_drain_use_c() }
    }
}

/// Times the exported drain it begins, and runs the C reference drain `$c`
/// instead if `ib_core.drain_c` is set (`CONFIG_INFINIBAND_DRAIN_SWITCH`).
#[cfg(CONFIG_INFINIBAND_DRAIN_SWITCH)]
macro_rules! bench_switch {
    ($qp:ident, $c:ident) => {
        let _timed = $crate::drain_switch::imp::Timed::start();
        if $crate::drain_switch::imp::use_c() {
            // SAFETY: The caller keeps the C drain's contract, as the
            // benchmark's ULPs do: with `drain_c` set, a drain that breaks it
            // is not refused, it hangs or oopses as in C.
            return unsafe { $crate::drain_switch::imp::$c($qp.cast()) };
        }
    };
}
#[cfg(not(CONFIG_INFINIBAND_DRAIN_SWITCH))]
macro_rules! bench_switch {
    ($qp:ident, $c:ident) => {};
}
