//! [`DmaBufRegion`] (`ibv_reg_dmabuf_mr`): a region over a DMA-BUF, memory
//! of another device (a GPU, a dma-buf heap) the process reaches only
//! through its file descriptor.

use std::fmt;
use std::ops::RangeBounds;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::{sys, AccessFlags, Error, ProtectionDomain, RemoteMemory, Result};

use super::raw::{bounds, RawMr};
use super::{registration_error, Sge};

/// Where in a DMA-BUF a [`DmaBufRegion`] lies and how it is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DmaBuf {
    /// The first byte's offset in the DMA-BUF.
    pub offset: u64,
    /// The length in bytes.
    pub len: usize,
    /// The address work requests and peers name the first byte by.
    pub iova: u64,
    /// The access rights.
    pub access: AccessFlags,
}

impl DmaBuf {
    /// `len` bytes at `offset` of the buffer, at IOVA 0 (zero-based), with
    /// no access rights beyond local reads.
    pub fn new(offset: u64, len: usize) -> DmaBuf {
        DmaBuf {
            offset,
            len,
            iova: 0,
            access: AccessFlags::empty(),
        }
    }

    /// The same with `iova`.
    pub fn iova(self, iova: u64) -> DmaBuf {
        DmaBuf { iova, ..self }
    }

    /// The same with `access`.
    pub fn access(self, access: AccessFlags) -> DmaBuf {
        DmaBuf { access, ..self }
    }

    /// Refuses an empty range and one whose end (in the buffer or the IOVA
    /// space) passes 64 bits.
    fn check(&self) -> Result<()> {
        let verb = "ibv_reg_dmabuf_mr";
        let len = self.len as u64;
        if self.len == 0 {
            return Err(Error::invalid(verb, "a memory region cannot be empty"));
        }
        if self.offset.checked_add(len).is_none() {
            return Err(Error::invalid(
                verb,
                format!("offset {:#x} + {len} bytes overflows 64 bits", self.offset),
            ));
        }
        if self.iova.checked_add(len).is_none() {
            return Err(Error::invalid(
                verb,
                format!("IOVA {:#x} + {len} bytes overflows 64 bits", self.iova),
            ));
        }
        Ok(())
    }
}

/// A memory region over a DMA-BUF (`ibv_reg_dmabuf_mr`).
///
/// It borrows the buffer's file descriptor for its life and never closes
/// it. The memory is not the process's: the region has no copies in or
/// out, only [`sge`](Self::sge)s and [`remote`](Self::remote) descriptors,
/// both at its IOVA. The exporter keeps the memory alive while the
/// registration holds it (the kernel takes a reference on the buffer), so
/// dropping the region after the descriptor is safe, and the reverse is
/// made impossible by the borrow.
///
/// rxe and siw import no DMA-BUF: registration fails with `EOPNOTSUPP`.
pub struct DmaBufRegion<'fd> {
    raw: RawMr,
    buf: DmaBuf,
    pd: ProtectionDomain,
    _fd: BorrowedFd<'fd>,
}

// SAFETY: the region has no process memory to race on; `ibv_dereg_mr` (in
// `Drop`) may run on any thread; a borrowed descriptor is a plain integer
// valid for 'fd on every thread.
unsafe impl Send for DmaBufRegion<'_> {}
// SAFETY: `&self` reads only fields written once at registration.
unsafe impl Sync for DmaBufRegion<'_> {}

impl<'fd> DmaBufRegion<'fd> {
    /// Registers `buf` of the DMA-BUF `fd` with `pd`.
    ///
    /// An empty range and ranges whose end passes 64 bits fail with
    /// `EINVAL` before any call. The descriptor is neither closed nor
    /// duplicated, on success or failure.
    pub fn new(pd: &ProtectionDomain, fd: BorrowedFd<'fd>, buf: DmaBuf) -> Result<Self> {
        buf.check()?;
        // SAFETY: `pd` is live; `fd` is an open descriptor for 'fd, which
        // the call only reads (the kernel takes its own reference on the
        // buffer); no process memory is named.
        let raw = unsafe {
            sys::ibv_reg_dmabuf_mr(
                pd.as_raw(),
                buf.offset,
                buf.len,
                buf.iova,
                fd.as_raw_fd(),
                buf.access.bits() as i32,
            )
        };
        let raw = NonNull::new(raw).ok_or_else(|| {
            let e = Error::last("ibv_reg_dmabuf_mr");
            match e.errno() {
                libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT => {
                    e.with_hint("the provider or kernel does not import DMA-BUFs")
                }
                libc::EBADF => e.with_hint("the descriptor is not a DMA-BUF"),
                _ => registration_error(e, buf.len, buf.access),
            }
        })?;
        Ok(DmaBufRegion {
            // SAFETY: live until `Drop` deregisters it; its fields are
            // written once, by the registration.
            raw: unsafe { RawMr::new(raw) },
            buf,
            pd: pd.clone(),
            _fd: fd,
        })
    }

    /// The protection domain of the region.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// Where in the buffer the region lies, its IOVA and access rights.
    pub fn dmabuf(&self) -> DmaBuf {
        self.buf
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len
    }

    /// Whether the region is empty (never: registration refuses it).
    pub fn is_empty(&self) -> bool {
        self.buf.len == 0
    }

    /// The address of the first byte in work requests and for peers.
    pub fn iova(&self) -> u64 {
        self.buf.iova
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey()
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.raw.rkey()
    }

    /// A scatter/gather entry for `range` of the region.
    pub fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge<'_>> {
        let (off, n) = bounds(range, self.buf.len, "DmaBufRegion::sge")?;
        Sge::of(self.buf.iova, off, n, self.lkey(), "DmaBufRegion::sge")
    }

    /// What a peer needs to access `range` of the region remotely.
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteMemory> {
        let (off, n) = bounds(range, self.buf.len, "DmaBufRegion::remote")?;
        Ok(RemoteMemory::of(self.buf.iova, off, n, self.rkey()))
    }

    /// The raw region, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.raw.as_ptr()
    }
}

impl Drop for DmaBufRegion<'_> {
    fn drop(&mut self) {
        // SAFETY: deregistered once. The buffer's memory is the exporter's,
        // kept alive by the kernel's reference until the registration goes.
        unsafe { sys::ibv_dereg_mr(self.raw.as_ptr()) };
    }
}

impl fmt::Debug for DmaBufRegion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaBufRegion")
            .field("fd", &self._fd.as_raw_fd())
            .field("offset", &self.buf.offset)
            .field("len", &self.buf.len)
            .field("iova", &format_args!("{:#x}", self.buf.iova))
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dmabuf_ranges_that_are_empty_or_pass_64_bits_are_refused() {
        DmaBuf::new(0, 1).check().unwrap();
        DmaBuf::new(u64::MAX - 8, 8)
            .iova(u64::MAX - 8)
            .check()
            .unwrap();
        for (b, why) in [
            (DmaBuf::new(0, 0), "empty"),
            (DmaBuf::new(u64::MAX - 7, 8), "offset"),
            (DmaBuf::new(0, 8).iova(u64::MAX - 7), "IOVA"),
        ] {
            let e = b.check().unwrap_err();
            assert_eq!((e.errno(), e.verb()), (libc::EINVAL, "ibv_reg_dmabuf_mr"));
            assert!(e.hint().unwrap().contains(why), "{e}");
        }
    }
}
