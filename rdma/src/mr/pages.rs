//! The memory a [`MemoryRegion`](super::MemoryRegion) owns: an anonymous
//! mapping of whole pages, made for the region alone and unmapped when the
//! region goes.
//!
//! Why a mapping of its own rather than the heap: registration pins the
//! pages, and a provider that does not wait at deregistration for a
//! placement already under way (siw) keeps them pinned, and writes them,
//! until that placement ends. `munmap` takes the pages out of the process
//! at once, while the pin keeps them alive in the kernel: a late write
//! lands in pages no part of the process can reach any more. A later
//! mapping at the same address gets fresh pages (an anonymous mapping
//! starts zero-filled). Heap memory handed back with `free` would instead
//! stay mapped and could be given to the next allocation while the device
//! still writes it.

use std::ptr::NonNull;

use crate::{Error, Result};

/// Whole pages of an anonymous private mapping, unmapped on drop.
pub(super) struct Pages {
    ptr: NonNull<u8>,
    size: usize,
}

impl Pages {
    /// A fresh, zero-filled mapping of the whole pages (at least one) that
    /// hold `len` bytes.
    pub(super) fn new(len: usize, page: usize) -> Result<Pages> {
        let size = whole_pages(len, page).ok_or_else(|| {
            Error::invalid(
                "ibv_reg_mr",
                format!("a memory region of {len} bytes cannot be allocated"),
            )
        })?;
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choice touches no existing memory; `size` is non-zero.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last("mmap").with_hint(format!(
                "the {size} bytes of a memory region could not be mapped"
            )));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| Error::new("mmap", libc::ENOMEM))?;
        Ok(Pages { ptr, size })
    }

    /// The first byte.
    pub(super) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The mapping's length: whole pages.
    #[cfg(test)]
    pub(super) fn size(&self) -> usize {
        self.size
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once. Nothing of the
        // process refers to it after this: its owner (a region) drops it
        // only after deregistration, and no Rust reference into it
        // outlives the region.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.size) };
    }
}

/// The size of the whole pages that hold `len` bytes (at least one page);
/// `None` when it does not fit a `Layout` (larger than `isize::MAX`).
pub(super) fn whole_pages(len: usize, page: usize) -> Option<usize> {
    let size = len.max(1).checked_next_multiple_of(page)?;
    (size <= isize::MAX as usize).then_some(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::page_size;

    /// Whether the page at `addr` is mapped in this process (`mincore`
    /// fails with ENOMEM on an unmapped range).
    fn mapped(addr: *mut u8, page: usize) -> bool {
        let mut v = 0u8;
        // SAFETY: `addr` is page-aligned and `v` holds the one page's byte;
        // mincore reads no memory of the range, it only looks it up.
        let rc = unsafe { libc::mincore(addr.cast(), page, &mut v) };
        if rc == 0 {
            return true;
        }
        let e = std::io::Error::last_os_error().raw_os_error();
        assert_eq!(e, Some(libc::ENOMEM), "mincore: {e:?}");
        false
    }

    #[test]
    fn owned_memory_is_whole_pages() {
        for page in [4096, 16384, 65536] {
            for len in [0, 1, 13, page - 1, page, page + 1, 7 * page + 5] {
                let size = whole_pages(len, page).unwrap();
                assert_eq!(size % page, 0, "{len} bytes, {page}-byte pages");
                assert!(size >= len.max(1) && size - len.max(1) < page);
            }
            assert!(whole_pages(usize::MAX - 3, page).is_none());
            assert!(whole_pages(isize::MAX as usize, page).is_none());
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore and the heap's placement")]
    fn pages_are_zeroed_aligned_and_share_nothing_with_the_heap() {
        let page = page_size();
        let p = Pages::new(100, page).unwrap();
        let at = p.ptr().as_ptr() as usize;
        assert_eq!(at % page, 0);
        assert_eq!(p.size(), page);
        // SAFETY: the mapping's `size` bytes, readable, and no other
        // reference to them exists.
        let bytes = unsafe { std::slice::from_raw_parts(p.ptr().as_ptr(), p.size()) };
        assert!(bytes.iter().all(|&b| b == 0), "not zero-filled");
        let range = at..at + p.size();
        let others: Vec<Box<[u8; 24]>> = (0..64).map(|_| Box::new([0; 24])).collect();
        for b in &others {
            let o = b.as_ptr() as usize;
            assert!(!range.contains(&o), "a heap object at {o:#x} in {range:x?}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore")]
    fn dropped_pages_leave_the_process() {
        let page = page_size();
        for len in [1, page, 3 * page + 1] {
            // Another test's thread may map something into the hole between
            // the drop and the look: a drop counts as seen once its pages
            // were all found unmapped (heap memory freed with `free` never
            // is).
            let seen = (0..20).any(|_| {
                let p = Pages::new(len, page).unwrap();
                let (addr, size) = (p.ptr().as_ptr(), p.size());
                for off in (0..size).step_by(page) {
                    // SAFETY: within the mapping.
                    assert!(mapped(unsafe { addr.add(off) }, page));
                }
                drop(p);
                // SAFETY: only the addresses are formed; mincore reads nothing.
                (0..size)
                    .step_by(page)
                    .all(|off| !mapped(unsafe { addr.add(off) }, page))
            });
            assert!(
                seen,
                "the pages of a {len}-byte mapping stayed mapped after every drop"
            );
        }
    }

    #[test]
    fn a_region_too_large_to_map_is_refused() {
        let e = Pages::new(usize::MAX - 3, page_size()).err().unwrap();
        assert_eq!(e.errno(), libc::EINVAL);
    }
}
