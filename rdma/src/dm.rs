//! Device memory: memory on the adapter itself (`ibv_alloc_dm`), filled
//! and read by copies (`ibv_memcpy_to_dm`, `ibv_memcpy_from_dm`) and
//! registered as a zero-based memory region (`ibv_reg_dm_mr`) that work
//! requests and peers use like any other.
//!
//! Safe code never holds a reference into device memory: it is reached
//! only through the provider's copies, with offsets checked here first.
//!
//! Neither soft device has device memory: rxe's and siw's providers answer
//! `ibv_alloc_dm` with `EOPNOTSUPP` ("not supported by rxe0",
//! [`Error::is_unsupported`]). mlx5 has it (`max_dm_size` in the device's
//! extended attributes).

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::sys;
use crate::{AccessFlags, Context, Error, ProtectionDomain, RemoteMemory, Result};

/// A block of device memory (`ibv_dm`).
///
/// Regions registered on it ([`DeviceMemory::reg_mr`]) keep it alive;
/// it is freed (`ibv_free_dm`) after the last of them.
pub struct DeviceMemory {
    inner: Arc<DmInner>,
}

pub(crate) struct DmInner {
    ctx: Context,
    raw: NonNull<sys::ibv_dm>,
    len: usize,
    imported: bool,
}

// SAFETY: the `ibv_dm` is written only by its allocation; copies in and
// out go through the provider's functions, which write device memory, not
// Rust memory, and `write` takes `&mut DeviceMemory` so no two copies into
// it from safe code overlap.
unsafe impl Send for DmInner {}
// SAFETY: as above.
unsafe impl Sync for DmInner {}

impl Drop for DmInner {
    fn drop(&mut self) {
        if self.imported {
            // SAFETY: imported once, released once after every region on it
            // (they hold this Arc); the memory stays its owner's.
            unsafe { sys::ibv_unimport_dm(self.raw.as_ptr()) };
        } else {
            // SAFETY: freed once, after every region on it (they hold this
            // Arc). A failure cannot be handled here.
            unsafe { sys::ibv_free_dm(self.raw.as_ptr()) };
        }
    }
}

impl DeviceMemory {
    /// Allocates `len` bytes of device memory on `ctx`, aligned to
    /// 2^`log_align` bytes (`ibv_alloc_dm`). A length of 0 is refused
    /// (`EINVAL`) before the provider sees it; more than the device's
    /// `max_dm_size` is the provider's to refuse.
    pub fn new(ctx: &Context, len: usize, log_align: u32) -> Result<DeviceMemory> {
        const VERB: &str = "ibv_alloc_dm";
        if len == 0 {
            return Err(Error::invalid(VERB, "device memory of 0 bytes"));
        }
        if log_align >= usize::BITS {
            return Err(Error::invalid(
                VERB,
                format!("an alignment of 2^{log_align} bytes is beyond the address space"),
            ));
        }
        let mut attr = alloc_attr(len, log_align);
        // SAFETY: a live context; `attr` is complete (no optional field).
        // ibv_alloc_dm is verbs.h's static inline, EOPNOTSUPP where the
        // provider has no device memory.
        let raw = unsafe { sys::ibv_alloc_dm(ctx.as_raw(), &mut attr) };
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::last(VERB).unsupported_on(ctx.name(), "device memory"))?;
        // SAFETY: allocated just now with `len` bytes, owned by the value.
        Ok(unsafe { DeviceMemory::from_raw(ctx, raw, len, false) })
    }

    /// Wraps `raw`.
    ///
    /// # Safety
    /// `raw` is live device memory of `ctx` of at least `len` bytes,
    /// allocated (or imported, if `imported`) for the value returned alone.
    pub(crate) unsafe fn from_raw(
        ctx: &Context,
        raw: NonNull<sys::ibv_dm>,
        len: usize,
        imported: bool,
    ) -> DeviceMemory {
        DeviceMemory {
            inner: Arc::new(DmInner {
                ctx: ctx.clone(),
                raw,
                len,
                imported,
            }),
        }
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the length is 0 (never, for memory this crate allocated).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The kernel's handle of the memory, which another process sharing
    /// the context imports it by.
    pub fn handle(&self) -> u32 {
        // SAFETY: a live `ibv_dm`; the handle is plain data set at creation.
        unsafe { (*self.as_raw()).handle }
    }

    /// The context the memory belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw device memory, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_dm {
        self.inner.raw.as_ptr()
    }

    /// Exports the memory as a DMA-BUF (`ibv_dm_export_dmabuf_fd`,
    /// rdma-core v65 and newer): a new file descriptor, owned by the value
    /// returned, that another device or driver imports the memory by (for
    /// example [`DmaBuf`](crate::DmaBuf) registration on another context).
    /// The DMA-BUF keeps the memory alive in the kernel for as long as it is
    /// open. [`Error::is_unsupported`] where the provider cannot export.
    #[cfg(has_ibv_dm_export_dmabuf_fd)]
    pub fn export_dmabuf_fd(&self) -> Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        const VERB: &str = "ibv_dm_export_dmabuf_fd";
        // SAFETY: live device memory; the call returns a new fd or -1.
        let fd = unsafe { sys::ibv_dm_export_dmabuf_fd(self.as_raw()) };
        if fd < 0 {
            let e = if fd == -1 {
                Error::last(VERB)
            } else {
                Error::new(VERB, -fd)
            };
            return Err(e.unsupported_on(self.context().name(), "DMA-BUF export of device memory"));
        }
        // SAFETY: a new descriptor the call made for its caller alone.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// Copies `data` into the memory at `offset` (`ibv_memcpy_to_dm`). A
    /// range past the end is refused (`EINVAL`, naming it) before the
    /// provider sees it. mlx5 asks offsets and lengths in multiples of 4.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        const VERB: &str = "ibv_memcpy_to_dm";
        check_range(VERB, self.len(), offset, data.len())?;
        // SAFETY: live device memory; `offset..offset + data.len()` lies
        // inside it (checked above); `data` is read during the call only.
        let rc = unsafe {
            sys::ibv_memcpy_to_dm(self.as_raw(), offset, data.as_ptr().cast(), data.len())
        };
        if rc != 0 {
            return Err(Error::from_rc(VERB, rc));
        }
        Ok(())
    }

    /// Copies the memory at `offset` into `buf` (`ibv_memcpy_from_dm`); a
    /// range past the end is refused (`EINVAL`) before the provider sees it.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        const VERB: &str = "ibv_memcpy_from_dm";
        check_range(VERB, self.len(), offset, buf.len())?;
        // SAFETY: live device memory; the range lies inside it (checked
        // above); `buf` is writable for its length during the call.
        let rc = unsafe {
            sys::ibv_memcpy_from_dm(buf.as_mut_ptr().cast(), self.as_raw(), offset, buf.len())
        };
        if rc != 0 {
            return Err(Error::from_rc(VERB, rc));
        }
        Ok(())
    }

    /// Registers `len` bytes of the memory from `offset` in `pd`
    /// (`ibv_reg_dm_mr`) as a zero-based region: its addresses start at
    /// 0. `ZERO_BASED` is added to `access`. The PD must be of the
    /// memory's context, and the range inside it (else `EINVAL`, before
    /// the provider sees them).
    pub fn reg_mr(
        &self,
        pd: &ProtectionDomain,
        offset: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<DmMemoryRegion> {
        const VERB: &str = "ibv_reg_dm_mr";
        crate::pd::same_context(VERB, "PD", pd.context(), "device memory", self.context())?;
        check_range(VERB, self.len(), offset, len)?;
        if len == 0 {
            return Err(Error::invalid(VERB, "a region of 0 bytes"));
        }
        let access = access | AccessFlags::ZERO_BASED;
        // SAFETY: a live PD and device memory of one context (checked
        // above), the range inside the memory; the region keeps both alive.
        let raw =
            unsafe { sys::ibv_reg_dm_mr(pd.as_raw(), self.as_raw(), offset, len, access.bits()) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last(VERB).unsupported_on(pd.context().name(), "device memory regions")
        })?;
        Ok(DmMemoryRegion {
            raw,
            len,
            _dm: self.inner.clone(),
            _pd: pd.clone(),
        })
    }
}

/// Refuses `offset..offset + len` that does not lie in `size` bytes.
pub(crate) fn check_range(verb: &'static str, size: usize, offset: u64, len: usize) -> Result<()> {
    let end = offset.checked_add(len as u64);
    match end {
        Some(end) if end <= size as u64 => Ok(()),
        _ => Err(Error::invalid(
            verb,
            format!("bytes {offset}..{offset}+{len} are outside the device memory's {size}"),
        )),
    }
}

/// The `ibv_alloc_dm_attr` of `len` bytes aligned to 2^`log_align`.
pub(crate) fn alloc_attr(len: usize, log_align: u32) -> sys::ibv_alloc_dm_attr {
    sys::ibv_alloc_dm_attr {
        length: len,
        log_align_req: log_align,
        comp_mask: 0,
    }
}

impl fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceMemory")
            .field("device", &self.inner.ctx.name())
            .field("len", &self.len())
            .finish()
    }
}

/// A memory region on device memory ([`DeviceMemory::reg_mr`]): zero-based,
/// so its addresses run from 0 to its length. It keeps the memory and its
/// PD alive; dropping it deregisters it (`ibv_dereg_mr`).
pub struct DmMemoryRegion {
    raw: NonNull<sys::ibv_mr>,
    len: usize,
    _dm: Arc<DmInner>,
    _pd: ProtectionDomain,
}

// SAFETY: the `ibv_mr` is written only by its registration; the region's
// memory is device memory, reached by Rust through copies only.
unsafe impl Send for DmMemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for DmMemoryRegion {}

impl Drop for DmMemoryRegion {
    fn drop(&mut self) {
        // SAFETY: deregistered once, before its memory and PD (held here).
        unsafe { sys::ibv_dereg_mr(self.raw.as_ptr()) };
    }
}

impl DmMemoryRegion {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live region; plain data set at registration.
        unsafe { (*self.raw.as_ptr()).lkey }
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.raw.as_ptr()).rkey }
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is 0 (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What a peer needs to access bytes `offset..offset + len` of the
    /// region (zero-based addresses); a range outside it is refused
    /// (`EINVAL`).
    pub fn remote(&self, offset: u64, len: usize) -> Result<RemoteMemory> {
        check_range("DmMemoryRegion::remote", self.len, offset, len)?;
        Ok(RemoteMemory {
            addr: offset,
            len: len as u64,
            rkey: self.rkey(),
        })
    }

    /// The raw region, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.raw.as_ptr()
    }
}

impl fmt::Debug for DmMemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmMemoryRegion")
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_past_the_end_or_overflowing_are_refused() {
        assert!(check_range("x", 64, 0, 64).is_ok());
        assert!(check_range("x", 64, 60, 4).is_ok());
        assert!(check_range("x", 64, 64, 0).is_ok());
        for (off, len) in [(0, 65), (61, 4), (65, 0), (u64::MAX, 1), (1, usize::MAX)] {
            let e = check_range("ibv_memcpy_to_dm", 64, off, len).unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{off}+{len}");
            assert_eq!(e.verb(), "ibv_memcpy_to_dm");
            assert!(e.hint().unwrap().contains("outside"), "{e}");
        }
    }

    #[test]
    fn alloc_attr_has_no_optional_field() {
        let a = alloc_attr(4096, 6);
        assert_eq!((a.length, a.log_align_req, a.comp_mask), (4096, 6, 0));
    }
}
