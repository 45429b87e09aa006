// SPDX-License-Identifier: GPL-2.0

//! RDMA protection domains.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::DeviceRef;
use crate::{bindings, error::from_err_ptr, prelude::*, sync::Arc};
use core::{mem::ManuallyDrop, ptr::NonNull};

/// A protection domain, deallocated when the last reference is dropped.
///
/// The objects created on it (QPs, SRQs) hold a reference, so it outlives
/// them, even one that is leaked.
///
/// # Examples
///
/// ```
/// use kernel::infiniband::{RegisteredDevice, Pd};
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let pd = Pd::alloc(&dev)?;
/// assert_eq!(pd.device().as_raw(), dev.as_raw());
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `ptr` is a valid `struct ib_pd` owned by this object, on `dev`. `dev` is
/// dropped only by `Drop`, after the PD was deallocated.
pub struct Pd {
    ptr: NonNull<bindings::ib_pd>,
    dev: ManuallyDrop<DeviceRef>,
}

// `Drop` may move a `Pd` out of itself, to defer it: no field may be dropped
// after it.
crate::static_assert!(
    !core::mem::needs_drop::<NonNull<bindings::ib_pd>>()
        && !core::mem::needs_drop::<ManuallyDrop<DeviceRef>>()
);

// SAFETY: A PD may be used and deallocated from any thread.
unsafe impl Send for Pd {}

// SAFETY: `Pd` has no methods that mutate it through `&self`.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a protection domain on `dev`.
    #[inline]
    pub fn alloc(dev: &DeviceRef) -> Result<Arc<Self>> {
        // SAFETY: `dev` is a valid, registered device.
        let ptr =
            from_err_ptr(unsafe { bindings::__ib_alloc_pd(dev.as_raw(), 0, super::kern_name()) })?;
        // INVARIANT: __ib_alloc_pd() returned a valid PD or an error.
        let pd = Self {
            ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
            dev: ManuallyDrop::new(dev.clone()),
        };
        Ok(Arc::new(pd, GFP_KERNEL)?)
    }

    /// Returns the raw `struct ib_pd` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::ib_pd {
        self.ptr.as_ptr()
    }

    /// Returns the device the PD is on.
    #[inline]
    pub fn device(&self) -> &DeviceRef {
        &self.dev
    }
}

impl Drop for Pd {
    #[inline]
    fn drop(&mut self) {
        if super::defer::must_defer() {
            // SAFETY: No field of `self` is dropped after this (checked beside
            // the struct): the copy takes `self` over, and is dropped again,
            // in process context, where the provider may sleep.
            super::defer::defer_drop(unsafe { core::ptr::read(self) }, "PD");
            return;
        }
        // SAFETY: By the type invariant we own the PD; the objects on it hold
        // references to `self`, so they are gone already.
        let ret = unsafe { bindings::ib_dealloc_pd_user(self.as_raw(), core::ptr::null_mut()) };
        if ret != 0 {
            // The provider kept it: so does the C side, and it is leaked,
            // with the device reference it needs.
            pr_warn!(
                "{}: ib_dealloc_pd_user() failed: {ret}; it is leaked\n",
                self.dev.name()
            );
            return;
        }
        // SAFETY: By the type invariant only this drop drops `dev`, once,
        // and the PD on it is gone.
        unsafe { ManuallyDrop::drop(&mut self.dev) };
    }
}
