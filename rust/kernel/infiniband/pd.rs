// SPDX-License-Identifier: GPL-2.0

//! RDMA protection domains.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::Device;
use crate::{bindings, error::from_err_ptr, prelude::*};
use core::{marker::PhantomData, ptr::NonNull};

/// A protection domain, deallocated when dropped.
///
/// # Invariants
///
/// `ptr` is a valid `struct ib_pd` owned by this object, on a device that
/// outlives `'d`.
pub struct Pd<'d> {
    ptr: NonNull<bindings::ib_pd>,
    _dev: PhantomData<&'d Device>,
}

// SAFETY: A PD may be used and deallocated from any thread.
unsafe impl Send for Pd<'_> {}

// SAFETY: `Pd` has no methods that mutate it through `&self`.
unsafe impl Sync for Pd<'_> {}

impl<'d> Pd<'d> {
    /// Allocates a protection domain on `dev`.
    #[inline]
    pub fn alloc(dev: &'d Device) -> Result<Self> {
        // SAFETY: `dev` is a valid, registered device.
        let ptr = from_err_ptr(unsafe {
            bindings::__ib_alloc_pd(dev.as_raw(), 0, c"kernel::infiniband".as_char_ptr())
        })?;
        // INVARIANT: __ib_alloc_pd() returned a valid PD or an error.
        NonNull::new(ptr)
            .map(|ptr| Self {
                ptr,
                _dev: PhantomData,
            })
            .ok_or(ENOMEM)
    }

    /// Returns the raw `struct ib_pd` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::ib_pd {
        self.ptr.as_ptr()
    }
}

impl Drop for Pd<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: By the type invariant we own the PD; the QPs on it borrow
        // `self`, so they are gone already.
        unsafe { bindings::ib_dealloc_pd_user(self.as_raw(), core::ptr::null_mut()) };
    }
}
