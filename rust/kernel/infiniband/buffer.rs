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
//! A buffer's memory is freed by its last reference, the handle's or a work
//! request's, so it outlives every work request that points at it, even if
//! the handle is dropped, or leaked with its QP.

use crate::{bindings, prelude::*, sync::Refcount};
use core::ptr::NonNull;

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
/// `ptr` points to a live [`Buf`] made by [`DmaBuf::alloc`], on which this
/// handle holds one of the references that `refs` counts.
pub struct DmaBuf {
    ptr: NonNull<Buf>,
}

/// The memory a [`DmaBuf`] refers to, and its mapping.
///
/// # Invariants
///
/// `cpu`, `len` and `cap` are the parts of a `KVec<u8>`, mapped at `dma` for
/// `dma_dev` in both directions, or, where `dma_dev` is null, for a device
/// that uses virtual addresses (`ib_uses_virt_dma()`). `dma_dev`, if not
/// null, holds a reference (`get_device()`). `ib_dev` is the device the
/// buffer was mapped for, compared, never dereferenced. `refs` counts the
/// handle, if it lives, and the posted work requests that point at the
/// buffer and have not completed; the last reference frees the buffer.
pub(crate) struct Buf {
    refs: Refcount,
    cpu: NonNull<u8>,
    len: usize,
    cap: usize,
    dma: u64,
    dma_dev: *mut bindings::device,
    ib_dev: *const bindings::ib_device,
}

// SAFETY: The handle gives the bytes out only by `&mut`, and only while no
// work request holds them; the count is atomic.
unsafe impl Send for DmaBuf {}

// SAFETY: Through `&DmaBuf` only the length, and posting (which counts a
// reference atomically), are reachable.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates a buffer of `len` bytes (at least one), zeroed, and maps it
    /// for `dev`.
    pub fn alloc(dev: &super::DeviceRef, len: usize) -> Result<Self> {
        if len == 0 || u32::try_from(len).is_err() {
            return Err(EINVAL);
        }
        let (cpu, _, cap) = KVec::from_elem(0u8, len, GFP_KERNEL)?.into_raw_parts();
        // SAFETY: A vector's pointer is never null.
        let cpu = unsafe { NonNull::new_unchecked(cpu) };
        let ib_dev = dev.as_raw();
        // SAFETY: The device is registered, so its `dma_device` is set and
        // lives (the device holds a reference on it).
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
            // SAFETY: `dma_dev` is a live device; the reference is kept in
            // the `Buf`, and given back when it is freed.
            unsafe { bindings::get_device(dma_dev) };
            dma
        };
        let buf = Buf {
            refs: Refcount::new(1),
            cpu,
            len,
            cap,
            dma,
            dma_dev,
            ib_dev,
        };
        match KBox::new(buf, GFP_KERNEL) {
            // INVARIANT: A new buffer, whose one reference is this handle's.
            Ok(b) => Ok(Self {
                // SAFETY: `KBox::into_raw` returns a non-null pointer.
                ptr: unsafe { NonNull::new_unchecked(KBox::into_raw(b)) },
            }),
            Err(_) => {
                // The `Buf` was dropped unboxed: free what it held by hand.
                Buf::free_parts(cpu, len, cap, dma, dma_dev);
                Err(ENOMEM)
            }
        }
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
    /// completion).
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        let buf = self.buf();
        // Acquire: pairs with the release of the completion that gave the
        // last work request's reference back, after the device was done.
        if buf.refs.as_atomic().load(crate::sync::atomic::Acquire) != 1 {
            return Err(EBUSY);
        }
        if !buf.dma_dev.is_null() {
            // SAFETY: Mapped at `dma` for `dma_dev` by the type invariant.
            unsafe {
                bindings::dma_sync_single_for_cpu(
                    buf.dma_dev,
                    buf.dma,
                    buf.len,
                    bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                )
            };
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

    /// Takes a reference for a work request about to be posted on `dev`:
    /// returns the buffer's DMA address, or `EINVAL` if the buffer is not
    /// mapped for `dev`, or `len` exceeds it.
    ///
    /// The reference is given back by [`Buf::put`], from the work request's
    /// completion, or at once if it is not posted.
    pub(crate) fn get_for(
        &self,
        dev: *const bindings::ib_device,
        len: usize,
    ) -> Result<NonNull<Buf>> {
        let buf = self.buf();
        if buf.ib_dev != dev || len > buf.len {
            return Err(EINVAL);
        }
        // SAFETY: `dev` is the QP's device, live while the caller posts; the
        // mapping is for its `dma_device`, counted by this buffer, so a
        // later device at the same address never gets a stale mapping.
        if unsafe { (*dev).dma_device } != buf.dma_dev {
            return Err(EINVAL);
        }
        buf.refs.inc();
        if !buf.dma_dev.is_null() {
            // SAFETY: Mapped at `dma` for `dma_dev` by the type invariant.
            unsafe {
                bindings::dma_sync_single_for_device(
                    buf.dma_dev,
                    buf.dma,
                    buf.len,
                    bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                )
            };
        }
        Ok(self.ptr)
    }
}

impl Buf {
    /// The DMA address of the buffer.
    pub(crate) fn dma(&self) -> u64 {
        self.dma
    }

    /// Gives back a reference taken by [`DmaBuf::get_for`]; the last one
    /// frees the buffer. Any context: it neither sleeps nor calls ib_core.
    ///
    /// # Safety
    ///
    /// `this` must hold a reference to a live `Buf`, given back once.
    // Never inlined: it runs from a completion after the module that posted
    // may have gone, so it must stay in vmlinux.
    #[inline(never)]
    pub(crate) unsafe fn put(this: NonNull<Buf>) {
        // SAFETY: The caller's reference keeps the buffer until this.
        if unsafe { this.as_ref() }.refs.dec_and_test() {
            // SAFETY: The last reference: `Buf`s are `KBox` allocations
            // (`DmaBuf::alloc`), and nothing refers to this one any more.
            let b = unsafe { KBox::from_raw(this.as_ptr()) };
            Self::free_parts(b.cpu, b.len, b.cap, b.dma, b.dma_dev);
        }
    }

    /// Unmaps and frees a buffer's memory, and lets its device go.
    #[inline(never)]
    fn free_parts(
        cpu: NonNull<u8>,
        len: usize,
        cap: usize,
        dma: u64,
        dma_dev: *mut bindings::device,
    ) {
        if !dma_dev.is_null() {
            // SAFETY: Mapped at `dma` for `dma_dev`, which the buffer's
            // reference keeps; given back here, once.
            unsafe {
                bindings::dma_unmap_single_attrs(
                    dma_dev,
                    dma,
                    len,
                    bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                    0,
                );
                bindings::put_device(dma_dev);
            }
        }
        // SAFETY: The parts of a `KVec<u8>` that nothing refers to any more.
        drop(unsafe { KVec::from_raw_parts(cpu.as_ptr(), len, cap) });
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the handle holds a reference, given
        // back here, once.
        unsafe { Buf::put(self.ptr) };
    }
}
