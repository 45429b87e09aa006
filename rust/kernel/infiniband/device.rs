// SPDX-License-Identifier: GPL-2.0

//! RDMA devices.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::{
    bindings,
    error::to_result,
    prelude::*,
    sync::aref::{ARef, AlwaysRefCounted},
    types::Opaque,
};
use core::{ops::Deref, ptr::NonNull};

/// A view of a registered RDMA device (`struct ib_device`).
///
/// # Examples
///
/// A [`DeviceRef`] gives access to the device it holds:
///
/// ```
/// use kernel::infiniband::{Device, RegisteredDevice};
///
/// let held = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let dev: &Device = &held;
/// assert!(dev.name().as_c_str().to_bytes().starts_with(b"rxe"));
/// assert_eq!(dev.as_raw(), held.as_raw());
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// The inner `struct ib_device` is valid for as long as a `&Device` exists.
#[repr(transparent)]
pub struct Device(Opaque<bindings::ib_device>);

// SAFETY: The RDMA core uses `struct ib_device` from any thread; the methods
// of `Device` only read fields that do not change after registration, and
// the name, which `name()` copies under the lock that a rename takes.
unsafe impl Send for Device {}

// SAFETY: See `Send`; concurrent reads of those fields are fine.
unsafe impl Sync for Device {}

impl Device {
    /// Creates a reference to a [`Device`] from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a valid `struct ib_device` that stays valid for `'a`.
    #[inline]
    pub unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `Device` is a transparent wrapper of `struct ib_device`, and the
        // caller guarantees that `ptr` is valid for `'a`.
        unsafe { &*ptr.cast() }
    }

    /// Returns the raw `struct ib_device` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::ib_device {
        self.0.get()
    }

    /// Returns a copy of the device's name, such as `rxe0`.
    ///
    /// A copy, taken under the lock that a rename (`rdma dev set ... name`),
    /// which may come at any time, holds while it rewrites the name. May
    /// sleep.
    #[inline]
    pub fn name(&self) -> DeviceName {
        let mut name = [0u8; NAME_MAX];
        // SAFETY: By the type invariant the device is valid; `name` has room
        // for the `IB_DEVICE_NAME_MAX` bytes that ib_device_copy_name() may
        // write.
        unsafe { bindings::ib_device_copy_name(self.as_raw(), name.as_mut_ptr().cast()) };
        // INVARIANT: ib_device_copy_name() copies with `strscpy()`, which
        // ends the copy with a NUL within the array.
        DeviceName(name)
    }

    /// Returns whether the device has every verb that kernel ULPs need
    /// (ib_core's `kverbs_provider`, which it sets at registration).
    #[inline]
    pub fn has_kernel_verbs(&self) -> bool {
        // SAFETY: By the type invariant the device is valid; the bit is set
        // once, before the device is registered, and read here without a
        // reference to the whole device.
        unsafe { bindings::ib_device::kverbs_provider_raw(self.as_raw()) != 0 }
    }

    /// Returns the device's attributes, which the provider sets before
    /// registering it.
    #[inline]
    pub(crate) fn attrs(&self) -> &bindings::ib_device_attr {
        // SAFETY: By the type invariant the device is valid, and its
        // attributes are set once before registration.
        unsafe { &(*self.as_raw()).attrs }
    }

    /// Returns the device's operations table.
    #[inline]
    pub(crate) fn ops(&self) -> &bindings::ib_device_ops {
        // SAFETY: By the type invariant the device is valid, and its ops are
        // set once before registration.
        unsafe { &(*self.as_raw()).ops }
    }
}

/// The length of `ib_device::name`, its NUL included.
const NAME_MAX: usize = bindings::IB_DEVICE_NAME_MAX as usize;

/// A copy of an RDMA device's name, for messages.
///
/// # Examples
///
/// ```
/// use kernel::{infiniband::RegisteredDevice, str::CString};
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let name = dev.name();
/// let printed = CString::try_from_fmt(fmt!("{name}"))?;
/// assert_eq!(printed.to_bytes(), name.as_c_str().to_bytes());
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// The array holds a NUL.
#[derive(Clone, Copy)]
pub struct DeviceName([u8; NAME_MAX]);

impl DeviceName {
    /// Returns the name as a C string.
    #[inline]
    pub fn as_c_str(&self) -> &CStr {
        // By the type invariant there is a NUL; the fallback is never taken.
        CStr::from_bytes_until_nul(&self.0).unwrap_or(c"")
    }
}

impl crate::fmt::Display for DeviceName {
    #[inline]
    fn fmt(&self, f: &mut crate::fmt::Formatter<'_>) -> crate::fmt::Result {
        crate::fmt::Display::fmt(self.as_c_str(), f)
    }
}

/// A registered RDMA device, held through [`DeviceRef`]s
/// (`ARef<RegisteredDevice>`), which keep it from being unregistered until
/// dropped.
///
/// Each is a registration reference, as `ib_device_try_get()` takes:
/// `ib_unregister_device()` (`rdma link delete`, a driver unbinding) waits
/// until every one is dropped. So hold it, and the objects created on the
/// device, which hold clones, only for the work they are for; a ULP that
/// must follow devices coming and going needs an `ib_client`, which this
/// crate does not wrap yet. (The `rdma_device_hold` suite checks both: the
/// delete waits while a holder holds, and ends once it lets go.)
///
/// # Examples
///
/// ```
/// use kernel::infiniband::RegisteredDevice;
///
/// // The rxe device on `dummy0`, held until `dev` and its clones are dropped.
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let other = dev.clone();
/// assert_eq!(other.as_raw(), dev.as_raw());
/// assert!(matches!(RegisteredDevice::get_by_netdev(c"nosuchdev0"), Err(e) if e == ENODEV));
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// A `&RegisteredDevice` exists only while a registration reference on its
/// device is held (by an [`ARef`]): the count is not zero.
#[repr(transparent)]
pub struct RegisteredDevice(Device);

/// A registration reference on an RDMA device: see [`RegisteredDevice`].
pub type DeviceRef = ARef<RegisteredDevice>;

impl RegisteredDevice {
    /// Finds the RDMA device bound to the network device named `netdev` in
    /// the initial network namespace (where RDMA devices are in the default,
    /// shared, namespace mode), such as the `dummy0` of an rxe device, of
    /// any driver. `ENODEV` if there is none, `EOPNOTSUPP` if the device
    /// lacks verbs that kernel ULPs need (see [`Device::has_kernel_verbs`]).
    #[inline]
    pub fn get_by_netdev(netdev: &CStr) -> Result<ARef<Self>> {
        let net = &raw mut bindings::init_net;
        // SAFETY: Under the RCU read lock the netdev found stays valid, and
        // ib_device_get_by_netdev() only compares its address.
        let dev = unsafe {
            bindings::rcu_read_lock();
            let ndev = bindings::dev_get_by_name_rcu(net, netdev.as_char_ptr());
            let dev = if ndev.is_null() {
                core::ptr::null_mut()
            } else {
                bindings::ib_device_get_by_netdev(
                    ndev,
                    bindings::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
                )
            };
            bindings::rcu_read_unlock();
            dev
        };
        let ptr = NonNull::new(dev).ok_or(ENODEV)?;
        // INVARIANT: The `ARef` owns the reference just taken, so the count is
        // not zero while it, or a `&RegisteredDevice` from it, lives.
        // SAFETY: ib_device_get_by_netdev() took one registration reference,
        // which the `ARef` takes over; `RegisteredDevice` is a transparent
        // wrapper of `Device`, itself of `struct ib_device`.
        let dev: ARef<Self> = unsafe { ARef::from_raw(ptr.cast()) };
        // ib_core hands such a device to no kernel client: it lacks verbs
        // that the objects made here call (usnic has no `get_dma_mr`,
        // `post_send`, `poll_cq`, ...).
        if !dev.has_kernel_verbs() {
            return Err(EOPNOTSUPP);
        }
        Ok(dev)
    }
}

impl Deref for RegisteredDevice {
    type Target = Device;

    #[inline]
    fn deref(&self) -> &Device {
        &self.0
    }
}

// SAFETY: A registration reference keeps the device registered, and so in
// memory: unregistration (`disable_device()`) waits on `unreg_completion`
// for the last one, and a driver frees the device (`ib_dealloc_device()`)
// only after unregistering it. `inc_ref` takes one more on a count that, by
// the type invariant, is not zero, as `ib_device_try_get()` would; `dec_ref`
// drops one with `ib_device_put()`. Every `RegisteredDevice` is reached
// through such a reference. (`Device` itself is not `AlwaysRefCounted`: for
// an arbitrary `struct ib_device`, such as a C ULP's QP's, the count may be
// zero, not registered yet or past `disable_device()`'s wait, and a
// reference may only be tried, with `ib_device_try_get()`.)
unsafe impl AlwaysRefCounted for RegisteredDevice {
    #[inline]
    fn inc_ref(&self) {
        // SAFETY: By the type invariant the count is not zero.
        unsafe { bindings::refcount_inc(&raw mut (*self.as_raw()).refcount) };
    }

    #[inline]
    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller gives back one registration reference.
        unsafe { bindings::ib_device_put(obj.as_ptr().cast()) };
    }
}

/// An entry of a port's GID table, held until dropped.
///
/// # Examples
///
/// The RoCE v2 entry of an IPv4 address of the port's network device:
///
/// ```
/// use kernel::infiniband::{RegisteredDevice, GidAttr};
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
/// assert!(gid.is_ipv4());
/// let again = GidAttr::get(&dev, 1, gid.index())?;
/// assert_eq!(again.gid(), gid.gid());
/// assert!(gid.mac()? != [0; 6]);
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `ptr` is a valid `struct ib_gid_attr` on which this object holds one
/// reference (`rdma_get_gid_attr()`), of the device `_dev` holds: the
/// entry's device is not counted by the entry, and its release (queued
/// work) reaches into the device.
pub struct GidAttr {
    ptr: NonNull<bindings::ib_gid_attr>,
    _dev: DeviceRef,
}

// SAFETY: A held GID entry may be put from any thread; but for its netdev,
// which `mac()` reads under RCU, it does not change.
unsafe impl Send for GidAttr {}

// SAFETY: See `Send`; the methods only read the entry.
unsafe impl Sync for GidAttr {}

impl GidAttr {
    /// Returns the entry `index` of `port`'s GID table.
    #[inline]
    pub fn get(dev: &DeviceRef, port: u32, index: u32) -> Result<Self> {
        let index = i32::try_from(index).map_err(|_| EINVAL)?;
        // SAFETY: `dev` is a valid device.
        let ptr = crate::error::from_err_ptr(unsafe {
            bindings::rdma_get_gid_attr(dev.as_raw(), port, index).cast_mut()
        })?;
        let ptr = NonNull::new(ptr).ok_or(ENOENT)?;
        // INVARIANT: rdma_get_gid_attr() returned a held entry of `dev`.
        Ok(Self {
            ptr,
            _dev: dev.clone(),
        })
    }

    /// Returns the first valid entry of `port`'s GID table that satisfies
    /// `pred`, or `ENOENT`.
    #[inline]
    pub fn find(dev: &DeviceRef, port: u32, pred: impl Fn(&GidAttr) -> bool) -> Result<Self> {
        for index in 0..=u32::from(u16::MAX) {
            match Self::get(dev, port, index) {
                Ok(g) if pred(&g) => return Ok(g),
                // Past the end of the table, or no such port.
                Err(e) if e == EINVAL => break,
                // A valid entry that does not match, or an empty one.
                _ => {}
            }
        }
        Err(ENOENT)
    }

    #[inline]
    fn raw(&self) -> &bindings::ib_gid_attr {
        // SAFETY: By the type invariant the entry is valid and held.
        unsafe { self.ptr.as_ref() }
    }

    /// Returns the GID.
    #[inline]
    pub fn gid(&self) -> [u8; 16] {
        // SAFETY: Every bit pattern of the union is a valid `raw`.
        unsafe { self.raw().gid.raw }
    }

    /// Returns the index of the entry in its table.
    #[inline]
    pub fn index(&self) -> u32 {
        u32::from(self.raw().index)
    }

    /// Returns `true` if the GID is an IPv4-mapped IPv6 address.
    #[inline]
    pub fn is_ipv4(&self) -> bool {
        let g = self.gid();
        g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff
    }

    /// Returns the MAC address of the entry's network device.
    #[inline]
    pub fn mac(&self) -> Result<[u8; 6]> {
        let mut mac = [0u8; 6];
        // SAFETY: The entry is valid; `mac` has room for ETH_ALEN bytes.
        to_result(unsafe {
            bindings::rdma_read_gid_l2_fields(
                self.ptr.as_ptr(),
                core::ptr::null_mut(),
                mac.as_mut_ptr(),
            )
        })?;
        Ok(mac)
    }
}

impl Drop for GidAttr {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: By the type invariant `self` holds one reference; the
        // device is held until after this (`_dev` is dropped after `drop`).
        unsafe { bindings::rdma_put_gid_attr(self.ptr.as_ptr()) };
    }
}
