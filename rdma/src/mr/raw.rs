//! The `ibv_mr` of a registration and the checked ranges of it: what every
//! region type ([`MemoryRegion`](super::MemoryRegion),
//! [`DmaBufRegion`](super::DmaBufRegion),
//! [`NullMemoryRegion`](super::NullMemoryRegion),
//! [`ImportedMr`](crate::ImportedMr)) reads the same way.

use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;

use crate::sys;
use crate::Result;

/// A registration's `ibv_mr`, read through `&self`.
///
/// The owner (a region type) holds it for as long as the registration
/// lives and releases the registration itself; this value never frees it.
pub(crate) struct RawMr(NonNull<sys::ibv_mr>);

impl RawMr {
    /// # Safety
    /// `raw` must be a live `ibv_mr` that stays live while this value does
    /// (its owner deregisters it only after dropping or no longer reading
    /// it), and whose fields are written only under `&mut` of the owner
    /// (`ibv_rereg_mr`), never while a `&self` read runs.
    #[inline]
    pub(crate) unsafe fn new(raw: NonNull<sys::ibv_mr>) -> RawMr {
        RawMr(raw)
    }

    /// The fields, valid while `self` is borrowed.
    #[inline]
    pub(crate) fn get(&self) -> &sys::ibv_mr {
        // SAFETY: live and not written while borrowed: the contract of `new`.
        unsafe { self.0.as_ref() }
    }

    /// The raw pointer, for the verbs that take one.
    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_mr {
        self.0.as_ptr()
    }

    /// The start address of the registered memory (`addr`).
    #[inline]
    pub(crate) fn addr(&self) -> *mut u8 {
        self.get().addr.cast()
    }

    /// The registered length in bytes (`length`).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.get().length
    }

    /// The local key (`lkey`).
    #[inline]
    pub(crate) fn lkey(&self) -> u32 {
        self.get().lkey
    }

    /// The remote key (`rkey`).
    #[inline]
    pub(crate) fn rkey(&self) -> u32 {
        self.get().rkey
    }
}

/// `range` of a `len`-byte region as (offset, length), checked: an
/// error naming `verb` when it does not lie within `0..len`.
#[inline]
pub(crate) fn bounds(
    range: impl RangeBounds<usize>,
    len: usize,
    verb: &'static str,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(super::outside(verb, start, end, len));
    }
    Ok((start, end - start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        assert_eq!(bounds(.., 10, "v").unwrap(), (0, 10));
        assert_eq!(bounds(2..=4, 10, "v").unwrap(), (2, 3));
        assert_eq!(bounds(10.., 10, "v").unwrap(), (10, 0));
        assert_eq!(
            bounds((Bound::Excluded(1), Bound::Unbounded), 10, "v").unwrap(),
            (2, 8)
        );
        for e in [
            bounds(5..11, 10, "v").unwrap_err(),
            bounds(usize::MAX.., 10, "v").unwrap_err(),
            bounds(..=usize::MAX, 10, "v").unwrap_err(),
            #[allow(clippy::reversed_empty_ranges)]
            bounds(4..3, 10, "v").unwrap_err(),
        ] {
            assert_eq!((e.errno(), e.verb()), (libc::EINVAL, "v"));
        }
    }
}
