// SPDX-License-Identifier: GPL-2.0

//! Buffers that work requests carry: memory mapped for an RDMA device.
//!
//! A [`DmaBuf`] is kernel memory mapped for DMA by one device. Posting it
//! ([`RecvQueue::post_buf`](super::RecvQueue::post_buf),
//! [`SendQueue::post_send_buf`](super::SendQueue::post_send_buf)) hands the
//! device a reference to it, which the work request's completion gives
//! back before the handler runs. The CPU reaches the bytes only through
//! [`DmaBuf::as_mut_slice`], which needs the handle by `&mut` and fails with
//! `EBUSY` while a work request holds the buffer: no Rust reference ever
//! points at memory the device may read or write.
//!
//! A receive takes the buffer for itself (`EBUSY` while any other work
//! request holds it), sends may share it. The buffer is synced for the
//! device when a work request first takes it after the CPU had it, and for
//! the CPU when the CPU first takes it back.
//!
//! A buffer's memory is freed by its last reference, the handle's or a work
//! request's, so it outlives every work request that points at it, even if
//! the handle is dropped, or leaked with its QP. The handle holds its device
//! registered, and so bound to its driver, and so does the QP of each work
//! request (the buffer is posted only on its device's QPs): the mapping is
//! undone while the device is.

use super::DeviceRef;
use crate::{
    bindings,
    prelude::*,
    sync::atomic::{Acquire, Atomic, Full, Relaxed, Release},
};
use core::{mem::ManuallyDrop, ptr::NonNull};

/// A buffer of `len` bytes, mapped for DMA by an RDMA device.
///
/// # Examples
///
/// A message sent from one QP and received in a buffer of the other:
///
/// ```
/// use kernel::infiniband::{
///     CompletionHandler, Cqe, DmaBuf, GidAttr, Mtu, OwnedCq, OwnedQp, Pd, PollContext,
///     QpConfig, RcParams, RegisteredDevice, WcStatus, WorkCompletion,
/// };
/// use kernel::sync::atomic::{Atomic, Relaxed};
/// use kernel::time::{delay::fsleep, Delta};
///
/// /// The byte count of the last successful completion.
/// struct Len(Atomic<u32>);
///
/// impl CompletionHandler for Len {
///     fn done(&self, wc: &WorkCompletion) {
///         if wc.status() == WcStatus::Success {
///             self.0.store(wc.byte_len(), Relaxed);
///         }
///     }
/// }
///
/// let dev = RegisteredDevice::get_by_netdev(c"dummy0")?;
/// let gid = GidAttr::find(&dev, 1, GidAttr::is_ipv4)?;
/// # let params = RcParams {
/// #     mtu: Mtu::Mtu1024,
/// #     timeout: 14,
/// #     retry_cnt: 7,
/// #     rnr_retry: 7,
/// #     min_rnr_timer: 12,
/// #     max_rd_atomic: 1,
/// #     max_dest_rd_atomic: 1,
/// #     hop_limit: 64,
/// #     sq_psn: 0,
/// #     rq_psn: 0,
/// # };
/// let pd = Pd::alloc(&dev)?;
/// let cq = OwnedCq::alloc(&dev, 8, 0, PollContext::Softirq)?;
/// let cfg = QpConfig { send_depth: 1, recv_depth: 1 };
/// let mut a = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// let mut b = OwnedQp::create_rc(&pd, &cq, &cq, cfg)?;
/// a.init(1)?;
/// b.init(1)?;
/// let (qpn_a, qpn_b) = (a.qp_num(), b.qp_num());
/// a.connect(&gid, qpn_b, &params)?;
/// b.connect(&gid, qpn_a, &params)?;
///
/// let mut out = DmaBuf::alloc(&dev, 64)?;
/// let mut into = DmaBuf::alloc(&dev, 64)?;
/// out.as_mut_slice()?[..5].copy_from_slice(b"hello");
/// let sent = Cqe::new(Len(Atomic::new(0)))?;
/// let received = Cqe::new(Len(Atomic::new(0)))?;
/// b.rq().post_buf(&received, &into)?;
/// // The device holds the buffer until the receive completes.
/// assert_eq!(into.as_mut_slice().err(), Some(EBUSY));
/// a.sq().post_send_buf(&sent, &out, 5)?;
/// for _ in 0..5000 {
///     if received.outstanding() == 0 {
///         break;
///     }
///     fsleep(Delta::from_millis(1));
/// }
/// # a.drain()?;
/// # b.drain()?;
/// assert_eq!(received.handler().0.load(Relaxed), 5);
/// assert_eq!(&into.as_mut_slice()?[..5], b"hello");
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `ptr` points to a live [`Buf`] made by [`DmaBuf::alloc`] for `dev`, on
/// which this handle holds one of the references that `state` counts.
pub struct DmaBuf {
    ptr: NonNull<Buf>,
    dev: ManuallyDrop<DeviceRef>,
}

// `Drop` gives the device reference back after the buffer's: no field may be
// dropped by the compiler.
crate::static_assert!(
    !core::mem::needs_drop::<NonNull<Buf>>() && !core::mem::needs_drop::<ManuallyDrop<DeviceRef>>()
);

/// The bit of [`Buf::state`] that says a receive holds the buffer.
const RECEIVING: u32 = 1 << 31;

/// Who the buffer is synced for ([`Buf::owner`]).
const CPU: u32 = 0;
const SYNCING: u32 = 1;
const DEVICE: u32 = 2;

/// The memory a [`DmaBuf`] refers to, and its mapping.
///
/// # Invariants
///
/// `cpu`, `len` and `cap` are the parts of a `KVec<u8>`, mapped at `dma` for
/// `dma_dev` in both directions, or, where `dma_dev` is null, for a device
/// that uses virtual addresses (`ib_uses_virt_dma()`). The mapping's
/// device, `ib_dev` (compared, never dereferenced here), is registered while
/// a reference lives: the handle's `DeviceRef`, or the QP of a posted work
/// request. `state` counts the handle, if it lives, and the posted work
/// requests that point at the buffer and have not completed (below
/// [`RECEIVING`]), with [`RECEIVING`] set while one of them is a receive,
/// then the only one; the last reference frees the buffer. `owner` is
/// [`DEVICE`] once a work request took the buffer and until the handle's
/// holder takes it back ([`CPU`]), [`SYNCING`] in between.
pub(crate) struct Buf {
    state: Atomic<u32>,
    owner: Atomic<u32>,
    cpu: NonNull<u8>,
    len: usize,
    cap: usize,
    dma: u64,
    dma_dev: *mut bindings::device,
    ib_dev: *const bindings::ib_device,
}

// SAFETY: The handle gives the bytes out only by `&mut`, and only while no
// work request holds them; the rest is atomic, or does not change.
unsafe impl Send for DmaBuf {}

// SAFETY: Through `&DmaBuf` only the length, and posting (which takes a
// reference atomically), are reachable.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates a buffer of `len` bytes (at least one, at most `u32::MAX`),
    /// zeroed, and maps it for `dev`, which it holds.
    #[inline]
    pub fn alloc(dev: &DeviceRef, len: usize) -> Result<Self> {
        let ptr = Buf::new(dev.as_raw(), len)?;
        // INVARIANT: A new buffer, whose one reference is this handle's.
        Ok(Self {
            ptr,
            dev: ManuallyDrop::new(dev.clone()),
        })
    }

    /// Returns the buffer's length in bytes.
    pub fn len(&self) -> usize {
        self.buf().len
    }

    /// Returns `false`: a buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Returns the buffer's bytes, or `EBUSY` while a posted work request
    /// holds the buffer (the device may read or write it until its
    /// completion). The first call after a work request syncs the buffer for
    /// the CPU.
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        let buf = self.buf();
        // Acquire: pairs with the release of the completion that gave the
        // last work request's reference back, after the device was done.
        if buf.state.load(Acquire) != 1 {
            return Err(EBUSY);
        }
        // No work request holds the buffer, and none can take it while the
        // handle is borrowed mutably: `owner` is the CPU's or the device's.
        if buf.owner.load(Relaxed) == DEVICE {
            buf.sync(false);
            buf.owner.store(CPU, Relaxed);
        }
        // SAFETY: Only this handle refers to the buffer (the count is one),
        // and it is borrowed mutably for the slice's lifetime: no work
        // request can be posted with it meanwhile.
        Ok(unsafe { core::slice::from_raw_parts_mut(buf.cpu.as_ptr(), buf.len) })
    }

    fn buf(&self) -> &Buf {
        // SAFETY: By the type invariant the buffer lives while `self` does.
        unsafe { self.ptr.as_ref() }
    }

    /// Takes a reference for a work request of `len` bytes about to be
    /// posted on `dev`, a receive if `receive`: returns the buffer, synced
    /// for the device; `EINVAL` if it is not mapped for `dev` or shorter
    /// than `len`, `EBUSY` if a receive holds it, if a receive would share
    /// it, or while another work request syncs it for the device.
    ///
    /// The reference is given back by [`Buf::put`], from the work request's
    /// completion, or at once if it is not posted.
    pub(crate) fn get_for(
        &self,
        dev: *const bindings::ib_device,
        len: usize,
        receive: bool,
    ) -> Result<NonNull<Buf>> {
        let buf = self.buf();
        // The handle holds its device registered, so `dev` being the same
        // pointer is the same device, and its mapping is the buffer's.
        if buf.ib_dev != dev || len > buf.len {
            return Err(EINVAL);
        }
        if receive {
            buf.state
                .cmpxchg(1, 2 | RECEIVING, Relaxed)
                .map_err(|_| EBUSY)?;
        } else {
            let mut cur = buf.state.load(Relaxed);
            loop {
                // Sharing with a receive, or so many sends that the count
                // would reach the receive bit.
                if cur & RECEIVING != 0 || cur + 1 >= RECEIVING {
                    return Err(EBUSY);
                }
                match buf.state.cmpxchg(cur, cur + 1, Relaxed) {
                    Ok(_) => break,
                    Err(now) => cur = now,
                }
            }
        }
        // The first work request after the CPU had the buffer syncs it for
        // the device. One that comes meanwhile is refused rather than
        // waiting: it may be a handler that interrupted the syncing task on
        // its CPU, which would never finish.
        match buf.owner.cmpxchg(CPU, SYNCING, Acquire) {
            Ok(_) => {
                buf.sync(true);
                buf.owner.store(DEVICE, Release);
            }
            Err(DEVICE) => {}
            Err(_) => {
                // SAFETY: The reference just taken, not posted; the handle
                // holds another, so this is not the last.
                unsafe { Buf::put(self.ptr, receive) };
                return Err(EBUSY);
            }
        }
        Ok(self.ptr)
    }
}

impl Buf {
    /// Allocates and maps a buffer of `len` bytes for `ib_dev`, with one
    /// reference.
    fn new(ib_dev: *mut bindings::ib_device, len: usize) -> Result<NonNull<Buf>> {
        if len == 0 || len >= RECEIVING as usize {
            return Err(EINVAL);
        }
        let (cpu, _, cap) = KVec::from_elem(0u8, len, GFP_KERNEL)?.into_raw_parts();
        // SAFETY: A vector's pointer is never null.
        let cpu = unsafe { NonNull::new_unchecked(cpu) };
        // SAFETY: The caller's device is registered, so its `dma_device` is
        // set, and bound while it stays registered.
        let dma_dev = unsafe { (*ib_dev).dma_device };
        let dma = if dma_dev.is_null() {
            // CAST: Such a device takes kernel virtual addresses.
            cpu.as_ptr() as u64
        } else {
            // SAFETY: `cpu` is a live allocation of `len` bytes.
            let dma = unsafe {
                bindings::ib_dma_map_single(
                    ib_dev,
                    cpu.as_ptr().cast(),
                    len,
                    bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                )
            };
            // SAFETY: `dma` was just mapped for the device.
            if unsafe { bindings::ib_dma_mapping_error(ib_dev, dma) } != 0 {
                Buf::free_parts(cpu, len, cap, 0, core::ptr::null_mut());
                return Err(ENOMEM);
            }
            dma
        };
        let buf = Buf {
            state: Atomic::new(1),
            // A new mapping is the device's: the CPU syncs it first.
            owner: Atomic::new(DEVICE),
            cpu,
            len,
            cap,
            dma,
            dma_dev,
            ib_dev,
        };
        match KBox::new(buf, GFP_KERNEL) {
            // SAFETY: `KBox::into_raw` returns a non-null pointer.
            Ok(b) => Ok(unsafe { NonNull::new_unchecked(KBox::into_raw(b)) }),
            Err(_) => {
                // The `Buf` was dropped unboxed: free what it held by hand.
                Buf::free_parts(cpu, len, cap, dma, dma_dev);
                Err(ENOMEM)
            }
        }
    }

    /// The DMA address of the buffer.
    pub(crate) fn dma(&self) -> u64 {
        self.dma
    }

    /// Syncs the whole buffer for the device, or for the CPU.
    fn sync(&self, for_device: bool) {
        if self.dma_dev.is_null() {
            return;
        }
        let dir = bindings::dma_data_direction::DMA_BIDIRECTIONAL;
        // SAFETY: Mapped at `dma` for `dma_dev` by the type invariant, whose
        // device is registered while a reference lives.
        unsafe {
            if for_device {
                bindings::dma_sync_single_for_device(self.dma_dev, self.dma, self.len, dir);
            } else {
                bindings::dma_sync_single_for_cpu(self.dma_dev, self.dma, self.len, dir);
            }
        }
    }

    /// Gives back a reference taken by [`DmaBuf::get_for`] (for a receive if
    /// `receive`), or the handle's; the last one unmaps and frees the
    /// buffer. Any context: it neither sleeps nor calls ib_core.
    ///
    /// # Safety
    ///
    /// `this` must hold such a reference to a live `Buf`, given back once.
    // Never inlined: it runs from a completion after the module that posted
    // may have gone, so it must stay in vmlinux.
    #[inline(never)]
    pub(crate) unsafe fn put(this: NonNull<Buf>, receive: bool) {
        let sub = if receive { 1 | RECEIVING } else { 1 };
        // SAFETY: The caller's reference keeps the buffer until this. Full:
        // what the CPU or the device did with the buffer comes before the
        // next user sees the count drop, and before the last one frees it.
        let prev = unsafe { this.as_ref() }.state.fetch_sub(sub, Full);
        if prev == sub {
            // SAFETY: The last reference: `Buf`s are `KBox` allocations
            // (`Buf::new`), and nothing refers to this one any more.
            let b = unsafe { KBox::from_raw(this.as_ptr()) };
            Self::free_parts(b.cpu, b.len, b.cap, b.dma, b.dma_dev);
        }
    }

    /// Unmaps and frees a buffer's memory.
    #[inline(never)]
    fn free_parts(
        cpu: NonNull<u8>,
        len: usize,
        cap: usize,
        dma: u64,
        dma_dev: *mut bindings::device,
    ) {
        if !dma_dev.is_null() {
            // SAFETY: Mapped at `dma` for `dma_dev`, whose device is
            // registered while a reference lives, the caller's too; undone
            // here, once.
            unsafe {
                bindings::dma_unmap_single_attrs(
                    dma_dev,
                    dma,
                    len,
                    bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                    0,
                )
            };
        }
        // SAFETY: The parts of a `KVec<u8>` that nothing refers to any more.
        drop(unsafe { KVec::from_raw_parts(cpu.as_ptr(), len, cap) });
    }
}

impl Drop for DmaBuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: By the type invariant the handle holds a reference, given
        // back here, once.
        unsafe { Buf::put(self.ptr, false) };
        // SAFETY: Dropped once, here, after the buffer's reference: a last
        // one unmaps while the device is registered.
        unsafe { ManuallyDrop::drop(&mut self.dev) };
    }
}
