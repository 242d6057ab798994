//! [`MemoryRegion::advise`] (`ibv_advise_mr`): paging hints for ranges of
//! an on-demand paging region.

use std::ops::{Range, RangeBounds};

use bitflags::bitflags;

use crate::{sys, Error, MemoryRegion, Result};

/// What `ibv_advise_mr` is asked to do with the ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Advice {
    /// Fault the pages in for reading (`IBV_ADVISE_MR_ADVICE_PREFETCH`).
    Prefetch,
    /// Fault the pages in for writing (`IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`).
    PrefetchWrite,
    /// Map the pages already present, without faulting any in
    /// (`IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`).
    PrefetchNoFault,
}

impl Advice {
    /// The C value.
    pub fn to_raw(self) -> sys::ib_uverbs_advise_mr_advice {
        match self {
            Advice::Prefetch => sys::IBV_ADVISE_MR_ADVICE_PREFETCH,
            Advice::PrefetchWrite => sys::IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
            Advice::PrefetchNoFault => sys::IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
        }
    }
}

bitflags! {
    /// Flags of [`MemoryRegion::advise`] (`IBV_ADVISE_MR_FLAG_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AdviseFlags: u32 {
        /// Return only when the advice has been carried out (synchronous).
        const FLUSH = sys::IBV_ADVISE_MR_FLAG_FLUSH;
    }
}

impl MemoryRegion {
    /// Advises the device about `range` of the region (`ibv_advise_mr`):
    /// prefetch the pages of an [`ON_DEMAND`](crate::AccessFlags::ON_DEMAND)
    /// region so that the first access does not fault. With
    /// [`AdviseFlags::FLUSH`] the call returns once the pages are mapped.
    ///
    /// The range is checked against the region (`EINVAL`, verb
    /// `MemoryRegion::advise`, before any call), as is an empty range.
    /// A region not registered `ON_DEMAND` is refused the same way: rxe
    /// (kernels with its ODP, 7.2 for one) treats every region it is
    /// advised about as on-demand, reading a pinned region's kernel state
    /// as another type's, so the call is never made for one. A device or
    /// kernel without on-demand paging answers `EOPNOTSUPP` (siw, and rxe
    /// where the provider or kernel has no `advise_mr`).
    pub fn advise(
        &self,
        advice: Advice,
        flags: AdviseFlags,
        range: impl RangeBounds<usize>,
    ) -> Result<()> {
        let (off, n) = self.bounds(range, "MemoryRegion::advise")?;
        let mut sge = [advice_sge(self, off..off + n)?];
        self.advise_raw(advice, flags, &mut sge)
    }

    /// [`advise`](Self::advise) for several ranges in one call; an empty
    /// list is refused (`EINVAL`).
    pub fn advise_ranges(
        &self,
        advice: Advice,
        flags: AdviseFlags,
        ranges: &[Range<usize>],
    ) -> Result<()> {
        let mut sges = advice_list(self, ranges)?;
        self.advise_raw(advice, flags, &mut sges)
    }

    fn advise_raw(
        &self,
        advice: Advice,
        flags: AdviseFlags,
        sges: &mut [sys::ibv_sge],
    ) -> Result<()> {
        if !self.access().contains(crate::AccessFlags::ON_DEMAND) {
            return Err(Error::invalid(
                "MemoryRegion::advise",
                "the region is pinned: advice is for regions registered ON_DEMAND",
            ));
        }
        // SAFETY: `sges` is `sges.len()` entries, each a range of this live
        // registration under its lkey; the call only reads them. The PD is
        // the region's own.
        let rc = unsafe {
            sys::ibv_advise_mr(
                self.pd().as_raw(),
                advice.to_raw(),
                flags.bits(),
                sges.as_mut_ptr(),
                sges.len() as u32,
            )
        };
        if rc != 0 {
            let e = Error::from_rc("ibv_advise_mr", rc);
            return Err(match e.errno() {
                libc::EOPNOTSUPP | libc::ENOSYS => e.with_hint(
                    "the provider or kernel has no on-demand paging (advise_mr): see DeviceAttr::odp_caps",
                ),
                _ => e,
            });
        }
        Ok(())
    }
}

/// The entries `ibv_advise_mr` is given for `ranges` of `mr`, each checked.
fn advice_list(mr: &MemoryRegion, ranges: &[Range<usize>]) -> Result<Vec<sys::ibv_sge>> {
    if ranges.is_empty() || u32::try_from(ranges.len()).is_err() {
        return Err(Error::invalid(
            "MemoryRegion::advise",
            format!("{} ranges: advise takes at least one", ranges.len()),
        ));
    }
    ranges.iter().map(|r| advice_sge(mr, r.clone())).collect()
}

/// The entry of one range of `mr`, checked: not empty, inside the region.
fn advice_sge(mr: &MemoryRegion, r: Range<usize>) -> Result<sys::ibv_sge> {
    if r.is_empty() {
        return Err(Error::invalid(
            "MemoryRegion::advise",
            format!("the range {r:?} is empty"),
        ));
    }
    let (off, n) = mr.bounds(r, "MemoryRegion::advise")?;
    let sge = super::Sge::of(mr.iova(), off, n, mr.lkey(), "MemoryRegion::advise")?;
    Ok(*sge.as_raw())
}
