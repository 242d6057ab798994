//! Buffers the provider allocates (`ibv_alloc_buf`, rdma-core v65 and
//! newer): memory placed where the provider wants it (mlx5: by its
//! allocation policy, possibly backed by a DMA-BUF), at least page-aligned,
//! registered with `ibv_reg_buf_mr` ([`LibBuffer::reg_mr`]) and exported
//! with `ibv_export_buf_dmabuf_fd` where a DMA-BUF backs it.
//!
//! Where the provider has no allocator of its own (rxe, siw), libibverbs
//! allocates page-aligned memory itself: the buffer works, its region is
//! an ordinary one, and the export answers `ENODATA` (no DMA-BUF backs it).
//!
//! The memory follows the crate's model of registered memory (see the
//! module docs of [`mr`](crate::mr)): Rust reaches it only through the
//! copies of its region. So that two regions over one buffer never race
//! their copies, a buffer has at most one region at a time.

use std::fmt;
use std::ops::{Bound, Deref, RangeBounds};
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::sys;
use crate::{AccessFlags, Error, MemoryRegion, ProtectionDomain, Result};

/// A buffer of the provider's allocation (`ibv_alloc_buf`), freed
/// (`ibv_free_buf`) when the last of it and its region is gone.
pub struct LibBuffer {
    inner: Arc<BufInner>,
}

struct BufInner {
    pd: ProtectionDomain,
    raw: NonNull<sys::ibv_buf>,
    addr: NonNull<u8>,
    len: usize,
    /// Whether a region over the buffer exists.
    registered: AtomicBool,
    /// Whether a region over the buffer was ever made.
    ever_registered: AtomicBool,
}

// SAFETY: the `ibv_buf` is written only by its allocation; its memory is
// reached only through the copies of its one region (see `MemoryRegion`'s
// Send and Sync) and by the device; `ibv_free_buf` (in Drop) may run on any
// thread.
unsafe impl Send for BufInner {}
// SAFETY: as above; `registered` is atomic.
unsafe impl Sync for BufInner {}

impl Drop for BufInner {
    fn drop(&mut self) {
        // Where the provider has no allocator of its own the buffer is heap
        // memory (libibverbs' `posix_memalign`), which `ibv_free_buf` hands
        // back to the allocator. On iWARP a placement already past its key
        // check may still land after deregistration (siw: see the module
        // docs of `mr`, "What deregistration fences"), and it would land in
        // whatever the allocator gave that memory to next: a buffer that
        // was ever registered on an iWARP device is therefore leaked.
        if self.ever_registered.load(Ordering::Acquire) && self.pd.context().is_iwarp() {
            return;
        }
        // SAFETY: freed once, after its region (which holds this Arc) was
        // deregistered: a region whose deregistration failed leaks its hold
        // (`Memory::Kept`), so this runs only if every region is gone.
        unsafe { sys::ibv_free_buf(self.raw.as_ptr()) };
    }
}

impl LibBuffer {
    /// Allocates `len` bytes for `pd` (`ibv_alloc_buf`). A length of 0 is
    /// refused (`EINVAL`) before the provider sees it.
    pub fn new(pd: &ProtectionDomain, len: usize) -> Result<LibBuffer> {
        const VERB: &str = "ibv_alloc_buf";
        if len == 0 {
            return Err(Error::invalid(VERB, "a buffer of 0 bytes"));
        }
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live PD; `raw` is writable and set on success only.
        let addr = unsafe { sys::ibv_alloc_buf(pd.as_raw(), len, &mut raw) };
        let (Some(addr), Some(raw)) = (NonNull::new(addr.cast::<u8>()), NonNull::new(raw)) else {
            return Err(Error::last(VERB));
        };
        Ok(LibBuffer {
            inner: Arc::new(BufInner {
                pd: pd.clone(),
                raw,
                addr,
                len,
                registered: AtomicBool::new(false),
                ever_registered: AtomicBool::new(false),
            }),
        })
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the length is 0 (never).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The buffer's first byte (page-aligned). Only the buffer's region
    /// reaches the memory from safe code.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.addr.as_ptr()
    }

    /// The PD the buffer was allocated for.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// The raw buffer handle, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_buf {
        self.inner.raw.as_ptr()
    }

    /// A new descriptor of the DMA-BUF that backs the buffer
    /// (`ibv_export_buf_dmabuf_fd`), owned by the value returned. A buffer
    /// no DMA-BUF backs (every buffer of rxe and siw, whose memory
    /// libibverbs allocates) gives `ENODATA`.
    pub fn export_dmabuf_fd(&self) -> Result<OwnedFd> {
        const VERB: &str = "ibv_export_buf_dmabuf_fd";
        // SAFETY: a live buffer; the call returns a new fd or -1.
        let fd = unsafe { sys::ibv_export_buf_dmabuf_fd(self.as_raw()) };
        if fd < 0 {
            let e = Error::last(VERB);
            return Err(if e.errno() == libc::ENODATA {
                e.with_hint("no DMA-BUF backs the buffer: the provider allocated plain memory")
            } else {
                e
            });
        }
        // SAFETY: a new descriptor the call made for its caller alone.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Registers `range` of the buffer in its PD (`ibv_reg_buf_mr`). The
    /// region keeps the buffer alive, and is the buffer's only one while
    /// it lives: a second is refused (`EBUSY`). An empty range, or one past
    /// the buffer, is refused (`EINVAL`) before any call.
    pub fn reg_mr(
        &self,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
    ) -> Result<BufMemoryRegion> {
        const VERB: &str = "ibv_reg_buf_mr";
        let (off, len) = sub_range(VERB, &range, self.len())?;
        if self
            .inner
            .registered
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(Error::new(VERB, libc::EBUSY).with_hint(
                "the buffer has a region already: two regions over one memory would race their copies",
            ));
        }
        self.inner.ever_registered.store(true, Ordering::Release);
        let guard = Registered(self.inner.clone());
        // SAFETY: `off + len` lies inside the buffer (checked above).
        let addr = unsafe { self.as_ptr().add(off) };
        // SAFETY: a live PD and buffer of that PD; the range lies inside
        // the buffer, which stays allocated until the region is
        // deregistered (the region holds `guard`, dropped after it).
        let raw = unsafe {
            sys::ibv_reg_buf_mr(
                self.pd().as_raw(),
                self.as_raw(),
                addr.cast(),
                len,
                access.bits() as i32,
            )
        };
        let raw = NonNull::new(raw)
            .ok_or_else(|| super::registration_error(Error::last(VERB), len, access))?;
        // A buffer a DMA-BUF backs is registered by its fd: libibverbs then
        // leaves the offset in `addr`, and the IOVA it registers is the
        // process address. The region's copies and SGEs need that address.
        // SAFETY: the registration just made, not yet shared; `addr` is
        // read by libibverbs' deregistration only for regions of process
        // memory, where it already holds this value.
        unsafe { (*raw.as_ptr()).addr = addr.cast() };
        // The region holds the buffer until it is deregistered; if that
        // fails, the hold is leaked with it (the device may still reach it).
        let kept = super::Memory::Kept(std::mem::ManuallyDrop::new(Box::new(guard)));
        let mr = MemoryRegion::assemble(raw, kept, access, None, self.pd());
        Ok(BufMemoryRegion { mr })
    }
}

/// The offset and length of `range` in `len` bytes; empty or outside:
/// `EINVAL`.
fn sub_range(
    verb: &'static str,
    range: &impl RangeBounds<usize>,
    len: usize,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s < e && e <= len => Ok((s, e - s)),
        _ => Err(Error::invalid(
            verb,
            format!("the range is empty or outside the {len}-byte buffer"),
        )),
    }
}

impl fmt::Debug for LibBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LibBuffer")
            .field("device", &self.inner.pd.context().name())
            .field("len", &self.inner.len)
            .finish()
    }
}

/// Marks the buffer registered while it lives, and keeps it allocated.
struct Registered(Arc<BufInner>);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.registered.store(false, Ordering::Release);
    }
}

/// The region of a [`LibBuffer`] ([`LibBuffer::reg_mr`]): a
/// [`MemoryRegion`] (through `Deref`) that keeps its buffer allocated until
/// it is deregistered.
pub struct BufMemoryRegion {
    // Its memory is `Memory::Kept`: the buffer's hold, released after
    // deregistration.
    mr: MemoryRegion,
}

impl Deref for BufMemoryRegion {
    type Target = MemoryRegion;

    fn deref(&self) -> &MemoryRegion {
        &self.mr
    }
}

impl fmt::Debug for BufMemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufMemoryRegion")
            .field("len", &self.mr.len())
            .field("lkey", &format_args!("{:#x}", self.mr.lkey()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_must_be_inside_and_not_empty() {
        assert_eq!(sub_range("x", &(..), 64).unwrap(), (0, 64));
        assert_eq!(sub_range("x", &(8..16), 64).unwrap(), (8, 8));
        assert_eq!(sub_range("x", &(60..=63), 64).unwrap(), (60, 4));
        for r in [(0, 0), (8, 8), (60, 65), (65, 70), (16, 8)] {
            let e = sub_range("ibv_reg_buf_mr", &(r.0..r.1), 64).unwrap_err();
            assert_eq!(
                (e.errno(), e.verb()),
                (libc::EINVAL, "ibv_reg_buf_mr"),
                "{r:?}"
            );
        }
        assert!(sub_range("x", &(..=usize::MAX), 64).is_err());
    }
}
