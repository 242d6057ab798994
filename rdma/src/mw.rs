//! Memory windows: remote access to part of a memory region, granted and
//! revoked without re-registering it.

use std::fmt;
use std::ops::RangeBounds;
use std::ptr::NonNull;

use crate::sys;
use crate::{AccessFlags, Error, MemoryRegion, ProtectionDomain, QueuePair, RemoteMemory, Result};

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

    /// Binds a type 1 window to `range` of `mr` with remote `access`, by a
    /// work request posted on `qp` (`ibv_bind_mw`; its completion carries
    /// `wr_id` when signaled). The window's rkey changes; the returned
    /// [`RemoteMemory`] carries the new one.
    ///
    /// The window, `qp` and `mr` must belong to one context (else `EINVAL`):
    /// `ibv_bind_mw` runs the window's provider on the QP.
    pub fn bind(
        &mut self,
        qp: &QueuePair,
        wr_id: u64,
        signaled: bool,
        mr: &MemoryRegion,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
    ) -> Result<RemoteMemory> {
        // ibv_bind_mw calls the window's provider, which takes the QP (and
        // the region) for its own structures: they must be of its context.
        let ctx = self.context();
        crate::pd::same_context(
            "ibv_bind_mw",
            "memory window",
            ctx,
            "queue pair",
            qp.context(),
        )?;
        crate::pd::same_context(
            "ibv_bind_mw",
            "memory window",
            ctx,
            "memory region",
            mr.pd().context(),
        )?;
        let remote = mr.remote(range)?;
        let mut bind = sys::ibv_mw_bind {
            wr_id,
            send_flags: if signaled { sys::IBV_SEND_SIGNALED } else { 0 },
            bind_info: sys::ibv_mw_bind_info {
                mr: mr.as_raw(),
                addr: remote.addr,
                length: remote.len,
                mw_access_flags: access.bits(),
            },
        };
        // SAFETY: a live QP, window and region, of one context (checked
        // above), so the window's provider gets its own objects; of one PD,
        // or the provider refuses the bind (EPERM/EINVAL); the bind
        // describes a range inside the region.
        let rc = unsafe { sys::ibv_bind_mw(qp.as_raw(), self.as_raw(), &mut bind) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_bind_mw", rc));
        }
        Ok(RemoteMemory {
            rkey: self.rkey(),
            ..remote
        })
    }

    /// Unbinds a type 1 window (`ibv_bind_mw` of length 0), by a work
    /// request posted on `qp`: once it completes, RDMA through any key the
    /// window had fails. The window's rkey changes, as on every bind.
    ///
    /// `mr` is any region of the window's PD (the one it was bound to,
    /// say): verbs allows an unbind without one, but rxe's library reads the
    /// region's key even for an unbind and crashes on none. The kernel
    /// ignores it for a length of 0.
    ///
    /// `qp` and `mr` must belong to the window's context (else `EINVAL`);
    /// a type 2 window is unbound by a [`SendWr::local_invalidate`] or a
    /// peer's [`SendWr::send_with_invalidate`] instead (`EINVAL` here).
    ///
    /// [`SendWr::local_invalidate`]: crate::SendWr::local_invalidate
    /// [`SendWr::send_with_invalidate`]: crate::SendWr::send_with_invalidate
    pub fn unbind(
        &mut self,
        qp: &QueuePair,
        wr_id: u64,
        signaled: bool,
        mr: &MemoryRegion,
    ) -> Result<()> {
        if self.is_type2() {
            return Err(Error::invalid(
                "ibv_bind_mw",
                "only a type 1 window is unbound by ibv_bind_mw; a type 2 window by an invalidate",
            ));
        }
        self.bind(qp, wr_id, signaled, mr, 0..0, AccessFlags::empty())
            .map(|_| ())
    }
}

impl fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}
