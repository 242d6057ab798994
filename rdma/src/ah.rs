//! Address handles and the paths they address: where a UD datagram (or a
//! connected QP's traffic) goes.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys;
use crate::{Error, Gid, ProtectionDomain, Result, WcOpcode, WorkCompletion};

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
/// It may be dropped as soon as the posts that name it returned, before
/// their requests complete: a handle given to a UD send
/// ([`SendWr::ud`](crate::SendWr::ud),
/// [`WrBatch::send_ud`](crate::WrBatch::send_ud)) is then kept by its
/// protection domain, and destroyed once no UD QP of the PD can still hold
/// a request that names it: each such QP was destroyed, or took as many
/// further requests as its send queue holds
/// ([`QueuePair::caps`](crate::QueuePair::caps)`.max_send_wr`), or at the
/// latest when the PD goes. A handle never given to a send, or dropped
/// when its PD has no UD QP, is destroyed at once.
///
/// This matters where the provider finds a request's handle when it sends
/// the datagram, after the post returned: by its number (rxe, and hardware
/// that posts an AH index), or by the address of the handle's memory
/// (mthca). A handle destroyed by then fails the request and errors the
/// QP, a number given to a newer handle would send the datagram to that
/// handle's address, and freed memory would be read by the device. The rule and its proof are in the
/// crate's source, `retire.rs`. Posts that do not go through `SendWr::ud`
/// or `send_ud` (an address set through
/// [`SendWr::as_raw_mut`](crate::SendWr::as_raw_mut), or
/// [`QueuePair::post_send_raw`](crate::QueuePair::post_send_raw)) must
/// keep their handle alive themselves until the request completes.
///
/// A UD send is refused (`EINVAL`, before the provider) through a handle
/// of another PD than the QP's.
pub struct AddressHandle {
    raw: NonNull<sys::ibv_ah>,
    pd: ProtectionDomain,
    /// Whether a UD send was given this handle: only then may a request
    /// name it after its drop.
    used: AtomicBool,
}

// SAFETY: an AH is immutable after creation and usable from any thread;
// `used` is atomic.
unsafe impl Send for AddressHandle {}
// SAFETY: as above.
unsafe impl Sync for AddressHandle {}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // A queued request may name the handle (by number, or by the
        // address of its memory): a handle a UD send was given goes to its
        // PD, which destroys it once no queued request names it.
        if *self.used.get_mut() {
            // SAFETY: a live handle of this PD, destroyed by nothing else
            // (this value owned it); `used` is set by every safe way to
            // name it in a send, and each such post borrowed this value,
            // so it returned before this drop.
            unsafe { self.pd.inner.ud.retire(self.raw) };
        } else {
            // SAFETY: destroyed once; no send was given it.
            unsafe { sys::ibv_destroy_ah(self.raw.as_ptr()) };
        }
    }
}

/// The 40 bytes of a GRH as an `ibv_grh`. The bytes may sit at any offset
/// of a receive buffer; libibverbs reads them as an `ibv_grh` (u32 fields),
/// which must be aligned.
fn aligned_grh(grh: &[u8; 40]) -> sys::ibv_grh {
    const _: () = assert!(std::mem::size_of::<sys::ibv_grh>() == 40);
    let mut aligned = std::mem::MaybeUninit::<sys::ibv_grh>::uninit();
    // SAFETY: 40 bytes from `grh` into `aligned`, which is 40 bytes
    // (asserted above); ibv_grh is plain integers, valid for any bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(grh.as_ptr(), aligned.as_mut_ptr().cast::<u8>(), 40);
        aligned.assume_init()
    }
}

impl Path {
    /// The path back to the sender of a UD receive (`ibv_init_ah_from_wc`):
    /// `wc` is the receive's completion and `grh` the 40 bytes at the start
    /// of its buffer (RoCE always has one); `port` is the port of the QP
    /// that received. The local GID to reply from is the one the datagram
    /// was addressed to, looked up in the port's GID table. What
    /// [`AddressHandle::from_wc`] creates a handle for, as a value a
    /// program may keep, change or hand to [`AddressHandle::new`].
    ///
    /// Refused before the call (`EINVAL`): a completion that is not a
    /// successful receive. Fails as libibverbs does when the GRH's
    /// destination GID is not in the port's table (the GRH bytes are not
    /// this receive's).
    pub fn from_wc(
        ctx: &crate::Context,
        port: u8,
        wc: &WorkCompletion,
        grh: &[u8; 40],
    ) -> Result<Path> {
        // libibverbs reads any completion: a send's, or a failed one, gives
        // a path of zeros (no GID), which addresses nobody.
        if !wc.is_success() || !matches!(wc.opcode(), WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
            return Err(Error::invalid(
                "ibv_init_ah_from_wc",
                format!(
                    "the path back comes from a successful receive, not a {:?} of status {:?}",
                    wc.opcode(),
                    wc.status()
                ),
            ));
        }
        let mut raw_wc = *wc.as_raw();
        let mut aligned = aligned_grh(grh);
        // SAFETY: plain data.
        let mut attr: sys::ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context (`ctx`); `raw_wc` and `aligned` are
        // initialised, aligned locals that the call only reads, despite its
        // non-const parameters; `attr` is a local it fills.
        let rc = unsafe {
            sys::ibv_init_ah_from_wc(ctx.as_raw(), port, &mut raw_wc, &mut aligned, &mut attr)
        };
        if rc != 0 {
            return Err(Error::from_rc("ibv_init_ah_from_wc", rc));
        }
        Ok(Path::from_raw(&attr))
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
            pd: pd.clone(),
            used: AtomicBool::new(false),
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
        let mut aligned = aligned_grh(grh);
        // SAFETY: a live PD; `raw_wc` and `aligned` are initialised, aligned
        // locals that the call only reads, despite its non-const parameters.
        let raw =
            unsafe { sys::ibv_create_ah_from_wc(pd.as_raw(), &mut raw_wc, &mut aligned, port) };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("ibv_create_ah_from_wc"))?;
        Ok(AddressHandle {
            raw,
            pd: pd.clone(),
            used: AtomicBool::new(false),
        })
    }

    /// The AH's `ibv_pd`, as the provider set it.
    #[inline]
    pub(crate) fn raw_pd(&self) -> *mut sys::ibv_pd {
        // SAFETY: a live AH; `pd` is set at creation and never changes.
        unsafe { (*self.raw.as_ptr()).pd }
    }

    /// The AH's `ibv_context`, as the provider set it.
    pub(crate) fn raw_context(&self) -> *mut sys::ibv_context {
        // SAFETY: a live AH; `context` is set at creation and never changes.
        unsafe { (*self.raw.as_ptr()).context }
    }

    /// Records that a UD send was given this handle, so that its drop
    /// leaves it to its PD (see the type's docs).
    #[inline]
    pub(crate) fn mark_used(&self) {
        self.used.store(true, Ordering::Relaxed);
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
