//! [`NullMemoryRegion`] (`ibv_alloc_null_mr`): a key that discards what is
//! written through it and reads as zeros.

use std::fmt;
use std::ptr::NonNull;

use crate::{sys, Error, ProtectionDomain, Result};

use super::raw::RawMr;
use super::Sge;

/// A null memory region (`ibv_alloc_null_mr`): data the device writes
/// through its lkey is dropped, data it reads is zeros. It has no memory
/// and no rkey; its [`sge`](Self::sge)s serve a receive whose payload is
/// not wanted, or a send of zeros, without a buffer.
///
/// Providers that have none (rxe, siw) fail with `EOPNOTSUPP`.
pub struct NullMemoryRegion {
    raw: RawMr,
    pd: ProtectionDomain,
}

// SAFETY: the key has no memory; `ibv_dereg_mr` (in `Drop`) may run on any
// thread, and `&self` only reads the lkey, written once at allocation.
unsafe impl Send for NullMemoryRegion {}
// SAFETY: as for `Send`: shared access reads fields written once.
unsafe impl Sync for NullMemoryRegion {}

impl NullMemoryRegion {
    /// Allocates a null region of `pd`.
    pub fn new(pd: &ProtectionDomain) -> Result<NullMemoryRegion> {
        // SAFETY: `pd` is live (it holds its context). The static inline
        // sets EOPNOTSUPP where the provider has no alloc_null_mr.
        let raw = unsafe { sys::ibv_alloc_null_mr(pd.as_raw()) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            let e = Error::last("ibv_alloc_null_mr");
            match e.errno() {
                libc::EOPNOTSUPP | libc::ENOSYS => {
                    e.with_hint("the provider has no null memory region")
                }
                _ => e,
            }
        })?;
        Ok(NullMemoryRegion {
            // SAFETY: live until `Drop` deallocates it; its lkey is written
            // once, at allocation.
            raw: unsafe { RawMr::new(raw) },
            pd: pd.clone(),
        })
    }

    /// The protection domain of the region.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey()
    }

    /// An entry of `len` bytes through the null key (its address is 0: the
    /// region has no memory).
    pub fn sge(&self, len: u32) -> Sge<'_> {
        Sge {
            raw: sys::ibv_sge {
                addr: 0,
                length: len,
                lkey: self.lkey(),
            },
            _mr: std::marker::PhantomData,
        }
    }

    /// The raw region, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.raw.as_ptr()
    }
}

impl Drop for NullMemoryRegion {
    fn drop(&mut self) {
        // SAFETY: released once; no memory to fence.
        unsafe { sys::ibv_dereg_mr(self.raw.as_ptr()) };
    }
}

impl fmt::Debug for NullMemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NullMemoryRegion")
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .finish()
    }
}
