//! [`MrBuilder`]: a [`MemoryRegion`] of its own memory, with its options.

use crate::{AccessFlags, Error, MemoryRegion, ProtectionDomain, Result};

use super::page_size;

/// The options of a new [`MemoryRegion`]: its length, access rights and the
/// IOVA at which the device knows it. Made by [`MemoryRegion::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build`"]
pub struct MrBuilder<'pd> {
    pd: &'pd ProtectionDomain,
    len: usize,
    access: AccessFlags,
    iova: Option<u64>,
}

impl<'pd> MrBuilder<'pd> {
    pub(super) fn new(pd: &'pd ProtectionDomain, len: usize) -> Self {
        MrBuilder {
            pd,
            len,
            access: AccessFlags::empty(),
            iova: None,
        }
    }

    /// The access rights (none by default: local reads only).
    pub fn access(mut self, access: AccessFlags) -> Self {
        self.access = access;
        self
    }

    /// Registers the region at `iova` (`ibv_reg_mr_iova2`): work requests
    /// ([`MemoryRegion::sge`]) and peers ([`MemoryRegion::remote`]) name
    /// its first byte `iova` instead of its process address.
    ///
    /// The region's own memory starts on a page, so `iova` must be a
    /// multiple of the page size (the device maps the IOVA's pages onto the
    /// memory's), and `iova + len` must fit 64 bits; otherwise
    /// [`build`](Self::build) fails with `EINVAL` before any call. An IOVA
    /// of 0 makes the region zero-based.
    ///
    /// siw takes the registration but ignores the IOVA (the kernel's
    /// `siw_reg_user_mr` leaves it unused and checks every access against
    /// the process address, kernels 6.1 to 7.2): there a peer's access by
    /// the IOVA is refused (a READ fails; a WRITE completes at the sender,
    /// as iWARP WRITEs do, but is not placed) and never reaches memory
    /// outside the region.
    pub fn iova(mut self, iova: u64) -> Self {
        self.iova = Some(iova);
        self
    }

    /// Allocates the memory (whole pages, zeroed) and registers it.
    pub fn build(self) -> Result<MemoryRegion> {
        if let Some(iova) = self.iova {
            check_iova(iova, self.len, page_size())?;
        }
        MemoryRegion::own(self.pd, self.len, self.access, self.iova)
    }
}

/// Refuses an IOVA the device cannot map onto page-aligned memory of `len`
/// bytes: not on a page boundary, or `iova + len` past 64 bits.
pub(super) fn check_iova(iova: u64, len: usize, page: usize) -> Result<()> {
    if iova % page as u64 != 0 {
        return Err(Error::invalid(
            "ibv_reg_mr_iova",
            format!(
                "IOVA {iova:#x} is not a multiple of the {page}-byte page: a region's own memory starts on a page, and the IOVA must have the same offset in its page"
            ),
        ));
    }
    if iova.checked_add(len as u64).is_none() {
        return Err(Error::invalid(
            "ibv_reg_mr_iova",
            format!("IOVA {iova:#x} + {len} bytes overflows 64 bits"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_iova_off_a_page_or_past_64_bits_is_refused() {
        for page in [4096usize, 65536] {
            check_iova(0, 1, page).unwrap();
            check_iova(page as u64 * 7, 3 * page, page).unwrap();
            check_iova(u64::MAX - (page as u64 - 1), page - 1, page).unwrap();
            for bad in [1, page as u64 / 2, page as u64 + 8] {
                let e = check_iova(bad, 8, page).unwrap_err();
                assert_eq!((e.errno(), e.verb()), (libc::EINVAL, "ibv_reg_mr_iova"));
                assert!(e.hint().unwrap().contains("multiple of"), "{e}");
            }
            let top = u64::MAX - (page as u64 - 1);
            let e = check_iova(top, page, page).unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL);
            assert!(e.hint().unwrap().contains("overflows"), "{e}");
        }
    }
}
