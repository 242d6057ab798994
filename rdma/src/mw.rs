//! Memory windows: remote access to part of a memory region, granted and
//! revoked without re-registering it.

use std::fmt;
use std::ptr::NonNull;

use crate::sys;
use crate::{Error, ProtectionDomain, Result};

/// The type of a memory window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound with [`MemoryWindow::bind`] (`ibv_bind_mw`); its rkey changes on
    /// every bind.
    Type1,
    /// Bound by a work request ([`SendWr::bind_mw`](crate::SendWr::bind_mw))
    /// with an rkey the application chooses.
    Type2,
}

/// A memory window (`ibv_mw`).
pub struct MemoryWindow {
    raw: NonNull<sys::ibv_mw>,
    _pd: ProtectionDomain,
}

// SAFETY: a memory window is a kernel object usable from any thread; its
// rkey field is updated only by binds, which need `&mut self` or a posted
// work request the provider serialises.
unsafe impl Send for MemoryWindow {}
// SAFETY: as above.
unsafe impl Sync for MemoryWindow {}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // SAFETY: deallocated once; a window still bound is invalidated by it.
        unsafe { sys::ibv_dealloc_mw(self.raw.as_ptr()) };
    }
}

impl MemoryWindow {
    /// Allocates a window of `mw_type` in `pd`.
    pub fn new(pd: &ProtectionDomain, mw_type: MwType) -> Result<MemoryWindow> {
        let t = match mw_type {
            MwType::Type1 => sys::IBV_MW_TYPE_1,
            MwType::Type2 => sys::IBV_MW_TYPE_2,
        };
        // SAFETY: a live PD. ibv_alloc_mw is verbs.h's static inline (through
        // the C shim), which reports EOPNOTSUPP where the provider has none.
        let raw = unsafe { sys::ibv_alloc_mw(pd.as_raw(), t) };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("ibv_alloc_mw"))?;
        Ok(MemoryWindow {
            raw,
            _pd: pd.clone(),
        })
    }

    /// The current rkey.
    pub fn rkey(&self) -> u32 {
        // SAFETY: a live window; rkey is plain data.
        unsafe { (*self.raw.as_ptr()).rkey }
    }

    /// Whether the window is of type 2 (bound by work requests).
    pub(crate) fn is_type2(&self) -> bool {
        // SAFETY: a live window; its type is plain data set at allocation.
        unsafe { (*self.as_raw()).type_ == sys::IBV_MW_TYPE_2 }
    }

    /// Records `rkey` as the window's key after a bind posted with it.
    pub(crate) fn set_rkey(&mut self, rkey: u32) {
        // SAFETY: a live window, borrowed mutably, so no Rust reader of the
        // field runs; providers read it only inside calls made with the
        // window (binds), none of which runs now.
        unsafe { (*self.as_raw()).rkey = rkey };
    }

    /// The context the window belongs to.
    pub(crate) fn context(&self) -> &crate::Context {
        self._pd.context()
    }

    /// The raw window, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mw {
        self.raw.as_ptr()
    }
}

impl fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

/// The next rkey of a type 2 memory window: the same key with its low byte
/// (the tag) incremented, as `ibv_inc_rkey`.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}
