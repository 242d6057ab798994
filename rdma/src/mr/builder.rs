//! [`MrBuilder`]: a [`MemoryRegion`] of its own memory, with its options.
//!
//! A region with an option only the extended registration has (a DMA
//! handle, rdma-core v65 and newer) is registered with `ibv_reg_mr_ex`;
//! every other one with `ibv_reg_mr` / `ibv_reg_mr_iova2`.

#[cfg(has_ibv_reg_mr_ex)]
use std::mem::ManuallyDrop;
#[cfg(has_ibv_reg_mr_ex)]
use std::ptr::NonNull;

#[cfg(has_ibv_reg_mr_ex)]
use crate::sys;
#[cfg(has_ibv_alloc_dmah)]
use crate::DmaHandle;
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
    #[cfg(has_ibv_alloc_dmah)]
    dmah: Option<DmaHandle>,
}

impl<'pd> MrBuilder<'pd> {
    pub(super) fn new(pd: &'pd ProtectionDomain, len: usize) -> Self {
        MrBuilder {
            pd,
            len,
            access: AccessFlags::empty(),
            iova: None,
            #[cfg(has_ibv_alloc_dmah)]
            dmah: None,
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

    /// Registers the region with the DMA handle `dmah`
    /// (`ibv_reg_mr_ex` with `IBV_REG_MR_MASK_DMAH`, rdma-core v65 and
    /// newer): the device steers its DMA to the memory by the handle's
    /// hints. The handle must be of the PD's context (else `EINVAL`, before
    /// any call); a provider without DMA handles in its registration (rxe,
    /// siw: libibverbs' fallback to `ibv_reg_mr` cannot carry one) answers
    /// `EOPNOTSUPP` ([`Error::is_unsupported`]). Drop the region before the
    /// handle (see [`DmaHandle`]).
    #[cfg(has_ibv_alloc_dmah)]
    pub fn dma_handle(mut self, dmah: &DmaHandle) -> Self {
        self.dmah = Some(dmah.clone());
        self
    }

    /// Allocates the memory (whole pages, zeroed) and registers it.
    pub fn build(self) -> Result<MemoryRegion> {
        if let Some(iova) = self.iova {
            check_iova(iova, self.len, page_size())?;
        }
        // Headers with DMA handles but without the registration that takes
        // one: the handle is refused, not dropped silently.
        #[cfg(all(has_ibv_alloc_dmah, not(has_ibv_reg_mr_ex)))]
        if self.dmah.is_some() {
            return Err(Error::new("ibv_reg_mr_ex", libc::EOPNOTSUPP).with_hint(
                "the rdma-core headers of this build have DMA handles but no ibv_reg_mr_ex",
            ));
        }
        #[cfg(all(has_ibv_alloc_dmah, has_ibv_reg_mr_ex))]
        if let Some(dmah) = &self.dmah {
            crate::pd::same_context(
                "ibv_reg_mr_ex",
                "PD",
                self.pd.context(),
                "DMA handle",
                dmah.context(),
            )?;
            let attr = ExAttr {
                len: self.len,
                access: self.access,
                iova: self.iova,
                dmah: dmah.as_raw(),
            };
            return own_ex(self.pd, &attr);
        }
        MemoryRegion::own(self.pd, self.len, self.access, self.iova)
    }
}

/// What `ibv_reg_mr_ex` gets besides the memory's address.
#[cfg(has_ibv_reg_mr_ex)]
struct ExAttr {
    len: usize,
    access: AccessFlags,
    iova: Option<u64>,
    dmah: *mut sys::ibv_dmah,
}

#[cfg(has_ibv_reg_mr_ex)]
impl ExAttr {
    /// The C attribute for memory at `addr`: the address, the IOVA where
    /// one is set, and the DMA handle where one is set, each with its mask
    /// bit.
    fn raw(&self, addr: *mut u8) -> sys::ibv_mr_init_attr {
        let mut mask = u64::from(sys::IBV_REG_MR_MASK_ADDR);
        if self.iova.is_some() {
            mask |= u64::from(sys::IBV_REG_MR_MASK_IOVA);
        }
        if !self.dmah.is_null() {
            mask |= u64::from(sys::IBV_REG_MR_MASK_DMAH);
        }
        sys::ibv_mr_init_attr {
            length: self.len,
            access: self.access.bits() as i32,
            comp_mask: mask,
            iova: self.iova.unwrap_or(0),
            addr: addr.cast(),
            fd: -1,
            fd_offset: 0,
            dmah: self.dmah,
            buf: std::ptr::null_mut(),
        }
    }
}

/// Registers `attr.len` bytes of new pages of its own with
/// `ibv_reg_mr_ex`.
#[cfg(has_ibv_reg_mr_ex)]
fn own_ex(pd: &ProtectionDomain, attr: &ExAttr) -> Result<MemoryRegion> {
    const VERB: &str = "ibv_reg_mr_ex";
    let pages = super::Pages::new(attr.len, page_size())?;
    let mut raw_attr = attr.raw(pages.ptr().as_ptr());
    // SAFETY: `pd` is live; the attribute names `len` valid bytes (whole
    // pages) that the region will own and unmap only after deregistration,
    // and a live DMA handle of the PD's context (checked by the caller)
    // or none; libibverbs reads the attribute during the call only.
    let raw = unsafe { sys::ibv_reg_mr_ex(pd.as_raw(), &mut raw_attr) };
    let raw = NonNull::new(raw).ok_or_else(|| {
        let e = super::registration_error(Error::last(VERB), attr.len, attr.access);
        e.unsupported_on(
            pd.context().name(),
            "DMA handles in its memory registration",
        )
    })?;
    Ok(MemoryRegion::assemble(
        raw,
        super::Memory::Owned(ManuallyDrop::new(pages)),
        attr.access,
        attr.iova,
        pd,
    ))
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

    #[cfg(has_ibv_reg_mr_ex)]
    #[test]
    fn the_extended_attribute_masks_what_is_set() {
        let addr = 0x7000_0000usize as *mut u8;
        let mut a = ExAttr {
            len: 8192,
            access: AccessFlags::LOCAL_WRITE,
            iova: None,
            dmah: std::ptr::null_mut(),
        };
        let r = a.raw(addr);
        assert_eq!(r.comp_mask, u64::from(sys::IBV_REG_MR_MASK_ADDR));
        assert_eq!((r.length, r.addr, r.fd), (8192, addr.cast(), -1));
        assert_eq!(r.access, sys::IBV_ACCESS_LOCAL_WRITE as i32);
        assert!(r.buf.is_null() && r.dmah.is_null());
        a.iova = Some(0x1_0000_0000);
        a.dmah = std::ptr::NonNull::dangling().as_ptr();
        let r = a.raw(addr);
        let want =
            sys::IBV_REG_MR_MASK_ADDR | sys::IBV_REG_MR_MASK_IOVA | sys::IBV_REG_MR_MASK_DMAH;
        assert_eq!(r.comp_mask, u64::from(want));
        assert_eq!((r.iova, r.dmah), (0x1_0000_0000, a.dmah));
    }
}
