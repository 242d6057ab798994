//! Address handles and the paths they address: where a UD datagram (or a
//! connected QP's traffic) goes.

use std::fmt;
use std::ptr::NonNull;

use crate::sys;
use crate::{Error, Gid, ProtectionDomain, Result, WorkCompletion};

/// Where a connected QP sends, or what an address handle addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// The destination GID, for a global route (required on RoCE).
    pub dgid: Option<Gid>,
    /// The index of the local GID to send from (with `dgid`).
    pub sgid_index: u8,
    /// The hop limit (with `dgid`).
    pub hop_limit: u8,
    /// The traffic class (with `dgid`).
    pub traffic_class: u8,
    /// The flow label (with `dgid`).
    pub flow_label: u32,
    /// The destination LID (InfiniBand).
    pub dlid: u16,
    /// The service level.
    pub sl: u8,
    /// The local port (from 1).
    pub port: u8,
}

impl Path {
    /// A global route to `dgid` from local GID `sgid_index` on `port`.
    pub fn to_gid(dgid: Gid, sgid_index: u8, port: u8) -> Path {
        Path {
            dgid: Some(dgid),
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            dlid: 0,
            sl: 0,
            port,
        }
    }

    pub(crate) fn raw(&self) -> sys::ibv_ah_attr {
        // SAFETY: plain data.
        let mut ah: sys::ibv_ah_attr = unsafe { std::mem::zeroed() };
        ah.dlid = self.dlid;
        ah.sl = self.sl;
        ah.port_num = self.port;
        if let Some(dgid) = self.dgid {
            ah.is_global = 1;
            ah.grh.dgid = dgid.into();
            ah.grh.sgid_index = self.sgid_index;
            ah.grh.hop_limit = self.hop_limit;
            ah.grh.traffic_class = self.traffic_class;
            ah.grh.flow_label = self.flow_label;
        }
        ah
    }

    /// The path of an address vector (the GRH fields only when it is
    /// global): what [`raw`](Self::raw) made, read back.
    pub(crate) fn from_raw(ah: &sys::ibv_ah_attr) -> Path {
        let global = ah.is_global != 0;
        Path {
            dgid: global.then(|| Gid::from(ah.grh.dgid)),
            sgid_index: if global { ah.grh.sgid_index } else { 0 },
            hop_limit: if global { ah.grh.hop_limit } else { 0 },
            traffic_class: if global { ah.grh.traffic_class } else { 0 },
            flow_label: if global { ah.grh.flow_label } else { 0 },
            dlid: ah.dlid,
            sl: ah.sl,
            port: ah.port_num,
        }
    }
}

/// An address handle (`ibv_ah`).
///
/// Keep it until the UD sends posted through it have completed: rxe's
/// kernel finds a request's address handle by number when it sends the
/// datagram, so a handle dropped while a request is still queued fails
/// that request (an error completion), and a number reused by a newer
/// handle of the same PD would send it there. The memory of a dropped
/// handle is never read: providers copy the address vector at post time.
pub struct AddressHandle {
    raw: NonNull<sys::ibv_ah>,
    _pd: ProtectionDomain,
}

// SAFETY: an AH is immutable after creation and usable from any thread.
unsafe impl Send for AddressHandle {}
// SAFETY: as above.
unsafe impl Sync for AddressHandle {}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: destroyed once. No posted work request points to the
        // `ibv_ah` memory: providers copy the address vector into the
        // request at post time (rxe also copies the kernel's AH number,
        // which its kernel looks up when it sends: a request still queued
        // then fails with an error completion, see the type's docs).
        unsafe { sys::ibv_destroy_ah(self.raw.as_ptr()) };
    }
}

impl AddressHandle {
    /// An address handle for `path`.
    pub fn new(pd: &ProtectionDomain, path: &Path) -> Result<AddressHandle> {
        let mut attr = path.raw();
        // SAFETY: a live PD; `attr` is complete.
        let raw = unsafe { sys::ibv_create_ah(pd.as_raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            let e = Error::last("ibv_create_ah");
            if e.errno() == libc::EINVAL && path.dgid.is_none() {
                e.with_hint(
                    "no destination GID: RoCE routes every packet by its GRH (Path::to_gid)",
                )
            } else {
                e
            }
        })?;
        Ok(AddressHandle {
            raw,
            _pd: pd.clone(),
        })
    }

    /// An address handle back to the sender of a UD receive: `grh` is the
    /// 40-byte GRH at the start of the receive buffer (RoCE always has one).
    pub fn from_wc(
        pd: &ProtectionDomain,
        port: u8,
        wc: &WorkCompletion,
        grh: &[u8; 40],
    ) -> Result<AddressHandle> {
        let mut raw_wc = *wc.as_raw();
        // The bytes may sit at any offset of a receive buffer; libibverbs
        // reads them as an ibv_grh (u32 fields), which must be aligned.
        const _: () = assert!(std::mem::size_of::<sys::ibv_grh>() == 40);
        let mut aligned = std::mem::MaybeUninit::<sys::ibv_grh>::uninit();
        // SAFETY: 40 bytes from `grh` into `aligned`, which is 40 bytes
        // (asserted above); ibv_grh is plain integers, valid for any bytes.
        let mut aligned = unsafe {
            std::ptr::copy_nonoverlapping(grh.as_ptr(), aligned.as_mut_ptr().cast::<u8>(), 40);
            aligned.assume_init()
        };
        // SAFETY: a live PD; `raw_wc` and `aligned` are initialised, aligned
        // locals that the call only reads, despite its non-const parameters.
        let raw =
            unsafe { sys::ibv_create_ah_from_wc(pd.as_raw(), &mut raw_wc, &mut aligned, port) };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("ibv_create_ah_from_wc"))?;
        Ok(AddressHandle {
            raw,
            _pd: pd.clone(),
        })
    }

    /// The AH's `ibv_context`, as the provider set it.
    pub(crate) fn raw_context(&self) -> *mut sys::ibv_context {
        // SAFETY: a live AH; `context` is set at creation and never changes.
        unsafe { (*self.raw.as_ptr()).context }
    }

    /// The raw AH, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_ah {
        self.raw.as_ptr()
    }
}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AddressHandle")
            .field("raw", &self.raw)
            .finish()
    }
}
