//! [`MemoryRegion::rereg`] (`ibv_rereg_mr`): a region's access rights,
//! protection domain or memory changed in place.

use std::mem::ManuallyDrop;

use crate::{sys, AccessFlags, Error, MemoryRegion, ProtectionDomain, Result};

use super::pages::Pages;
use super::{page_size, Memory, SharedBytes};

/// What [`MemoryRegion::rereg`] changes: any of the access rights, the
/// protection domain and the memory (new zeroed pages of a new length).
#[derive(Debug, Clone, Copy, Default)]
#[must_use = "a change does nothing until given to `rereg`"]
pub struct Rereg<'pd> {
    access: Option<AccessFlags>,
    pd: Option<&'pd ProtectionDomain>,
    len: Option<usize>,
}

impl<'pd> Rereg<'pd> {
    /// No change yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// New access rights (`IBV_REREG_MR_CHANGE_ACCESS`).
    pub fn access(self, access: AccessFlags) -> Self {
        Rereg {
            access: Some(access),
            ..self
        }
    }

    /// Another protection domain, of the same context
    /// (`IBV_REREG_MR_CHANGE_PD`).
    pub fn pd(self, pd: &'pd ProtectionDomain) -> Self {
        Rereg {
            pd: Some(pd),
            ..self
        }
    }

    /// New memory of `len` zeroed bytes for the region
    /// (`IBV_REREG_MR_CHANGE_TRANSLATION`); the old memory is unmapped.
    pub fn memory(self, len: usize) -> Self {
        Rereg {
            len: Some(len),
            ..self
        }
    }

    fn flags(&self) -> u32 {
        let mut f = 0;
        if self.access.is_some() {
            f |= sys::IBV_REREG_MR_CHANGE_ACCESS;
        }
        if self.pd.is_some() {
            f |= sys::IBV_REREG_MR_CHANGE_PD;
        }
        if self.len.is_some() {
            f |= sys::IBV_REREG_MR_CHANGE_TRANSLATION;
        }
        f
    }
}

impl MemoryRegion {
    /// Changes the registration in place (`ibv_rereg_mr`).
    ///
    /// It takes the region by `&mut`, so no [`Sge`](crate::Sge) of it is
    /// alive. The keys may change: [`lkey`](Self::lkey),
    /// [`rkey`](Self::rkey) and new [`remote`](Self::remote) descriptors
    /// give the new ones; a peer holding an old descriptor, or a work
    /// request posted before and still outstanding, fails as after a
    /// deregistration. With new memory ([`Rereg::memory`]) the region's
    /// IOVA becomes the new memory's process address, its bytes are zero,
    /// and the old pages are unmapped as [`Drop`] unmaps them (the module's
    /// model: nothing the device still writes reaches the process).
    ///
    /// Refused with `EINVAL` before any call: no change, adding or
    /// removing [`ON_DEMAND`](AccessFlags::ON_DEMAND), a protection
    /// domain of another context, new memory for a region of
    /// [`from_raw_parts`](Self::from_raw_parts) (its memory is the
    /// caller's), an empty or unmappable new length. A provider without
    /// re-registration fails with `EOPNOTSUPP` (rxe and siw); when the
    /// kernel refuses, the region is unchanged and still usable; new memory
    /// the call was given stays mapped until the region is dropped.
    pub fn rereg(&mut self, change: Rereg<'_>) -> Result<()> {
        let verb = "MemoryRegion::rereg";
        let flags = change.flags();
        if flags == 0 {
            return Err(Error::invalid(verb, "nothing to change"));
        }
        if let Some(a) = change.access {
            if (a ^ self.access).contains(AccessFlags::ON_DEMAND) {
                return Err(Error::invalid(
                    verb,
                    "ON_DEMAND is how the memory is registered: it cannot be changed in place",
                ));
            }
        }
        if let Some(pd) = change.pd {
            crate::pd::same_context(
                verb,
                "region",
                self.pd.context(),
                "protection domain",
                pd.context(),
            )?;
        }
        let pages = match change.len {
            None => None,
            Some(_) if matches!(self.memory, Memory::Borrowed | Memory::Kept(_)) => return Err(Error::invalid(
                verb,
                "the memory of a region of from_raw_parts is the caller's: it cannot be replaced",
            )),
            Some(0) => return Err(Error::invalid(verb, "a memory region cannot be empty")),
            Some(len) => Some((Pages::new(len, page_size())?, len)),
        };
        let (addr, len) = match &pages {
            Some((p, len)) => (p.ptr().as_ptr(), *len),
            None => (std::ptr::null_mut(), 0),
        };
        let pd_raw = change.pd.map_or(std::ptr::null_mut(), |pd| pd.as_raw());
        // libibverbs refuses access bits without CHANGE_ACCESS.
        let access = change.access.unwrap_or(self.access);
        let access_arg = change.access.map_or(0, |a| a.bits() as i32);
        // SAFETY: the registration is live and no reference into it is
        // (`&mut self`). New memory is `len` valid bytes of pages this
        // region keeps until after deregistration (below: as its memory on
        // success, among `retired` on failure); `pd_raw` is null or a live
        // PD of the region's context, checked above.
        let rc = unsafe {
            sys::ibv_rereg_mr(
                self.raw.as_ptr(),
                flags as i32,
                pd_raw,
                addr.cast(),
                len,
                access_arg,
            )
        };
        // DO_FORK_OLD: the registration changed; only marking the old
        // range copyable on fork failed, and that range is unmapped below.
        let changed = rc == 0 || rc == sys::IBV_REREG_MR_ERR_DO_FORK_OLD;
        if !changed {
            let e = rereg_error(rc, access, len);
            if let Some((p, _)) = pages {
                // The device may map them after a failed command: they go
                // with the region.
                self.retired.push(p);
            }
            return Err(e);
        }
        if let Some(pd) = change.pd {
            self.pd = pd.clone();
        }
        self.access = access;
        if let Some((p, _)) = pages {
            if let Memory::Owned(old) = &mut self.memory {
                // SAFETY: the registration no longer maps the old pages (the
                // translation changed), so they are unmapped as `Drop`
                // unmaps them after deregistration; the field is given new
                // pages at once.
                drop(unsafe { ManuallyDrop::take(old) });
                *old = ManuallyDrop::new(p);
            }
            let mr = self.raw.get();
            // SAFETY: as in `assemble`: the new memory is the registered
            // memory (libibverbs wrote `addr` and `length`), owned by the
            // region until after deregistration, reached only through the
            // copies with these bounds or the `&mut self` views.
            self.bytes = unsafe { SharedBytes::new(mr.addr.cast(), mr.length) };
            self.iova = mr.addr as u64;
        }
        Ok(())
    }
}

/// The error of a failed `ibv_rereg_mr`, by its return code.
#[cold]
fn rereg_error(rc: i32, access: AccessFlags, len: usize) -> Error {
    let e = Error::last("ibv_rereg_mr");
    match rc {
        _ if matches!(e.errno(), libc::EOPNOTSUPP | libc::ENOSYS) => {
            e.with_hint("the provider has no re-registration (rereg_mr)")
        }
        sys::IBV_REREG_MR_ERR_INPUT => e.with_hint("libibverbs refused the flags or arguments"),
        sys::IBV_REREG_MR_ERR_DONT_FORK_NEW => {
            e.with_hint("the new memory could not be marked not to be copied on fork")
        }
        _ => super::registration_error(e, len.max(1), access),
    }
}
