//! Work requests: what is posted to send and receive queues.
//!
//! Each wraps its C struct, which posting links into a list and hands to the
//! provider as is. Their lifetime parameter ties them to the
//! [`Sge`]s (and so the memory regions), inline data and address handle they
//! name, for as long as the request exists; the device copies what it needs
//! during the post call or reaches memory only through registrations (see
//! the memory model in [`crate::mr`]).

use std::fmt;
use std::marker::PhantomData;
use std::ptr;

use crate::sys;
use crate::{AddressHandle, RemoteMemory, Sge};

bitflags::bitflags! {
    /// Flags of a send work request (`IBV_SEND_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs and atomics before executing.
        const FENCE = sys::IBV_SEND_FENCE;
        /// Generate a completion (when the QP does not signal all).
        const SIGNALED = sys::IBV_SEND_SIGNALED;
        /// Solicit an event at the receiver.
        const SOLICITED = sys::IBV_SEND_SOLICITED;
        /// The data is copied into the work request at post time.
        const INLINE = sys::IBV_SEND_INLINE;
        /// Compute the IP checksum (raw packet QPs).
        const IP_CSUM = sys::IBV_SEND_IP_CSUM;
    }
}

/// A send work request (`ibv_send_wr`).
pub struct SendWr<'a> {
    raw: sys::ibv_send_wr,
    /// The SGE of an inline request built by [`SendWr::send_inline`].
    inline_sge: sys::ibv_sge,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> SendWr<'a> {
    fn with_opcode(wr_id: u64, opcode: sys::ibv_wr_opcode, sges: &'a [Sge<'a>]) -> SendWr<'a> {
        // SAFETY: plain data; zero is valid for every field.
        let mut raw: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        raw.wr_id = wr_id;
        raw.opcode = opcode;
        // The provider only reads the list; the C field is not const.
        raw.sg_list = sges.as_ptr() as *mut sys::ibv_sge;
        raw.num_sge = sges.len().min(i32::MAX as usize) as i32;
        SendWr {
            raw,
            inline_sge: sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            },
            _borrows: PhantomData,
        }
    }

    /// A SEND of the bytes the SGEs name.
    pub fn send(wr_id: u64, sges: &'a [Sge<'a>]) -> SendWr<'a> {
        Self::with_opcode(wr_id, sys::IBV_WR_SEND, sges)
    }

    /// A SEND with 32-bit immediate data (host byte order).
    pub fn send_with_imm(wr_id: u64, sges: &'a [Sge<'a>], imm: u32) -> SendWr<'a> {
        let mut wr = Self::with_opcode(wr_id, sys::IBV_WR_SEND_WITH_IMM, sges);
        wr.raw.__bindgen_anon_1.imm_data = imm.to_be();
        wr
    }

    /// A SEND whose data is copied at post time, from any memory: no memory
    /// region needed. The length must not exceed the QP's `max_inline_data`.
    pub fn send_inline(wr_id: u64, data: &'a [u8]) -> SendWr<'a> {
        // SAFETY: plain data.
        let mut raw: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        raw.wr_id = wr_id;
        raw.opcode = sys::IBV_WR_SEND;
        raw.send_flags = sys::IBV_SEND_INLINE;
        let mut wr = SendWr {
            raw,
            inline_sge: sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            },
            _borrows: PhantomData,
        };
        wr.set_inline(data);
        wr
    }

    /// An RDMA WRITE of the SGEs' bytes to `remote`.
    pub fn rdma_write(wr_id: u64, sges: &'a [Sge<'a>], remote: RemoteMemory) -> SendWr<'a> {
        let mut wr = Self::with_opcode(wr_id, sys::IBV_WR_RDMA_WRITE, sges);
        wr.set_rdma(remote);
        wr
    }

    /// An RDMA WRITE with immediate data, which consumes a receive at the peer.
    pub fn rdma_write_with_imm(
        wr_id: u64,
        sges: &'a [Sge<'a>],
        remote: RemoteMemory,
        imm: u32,
    ) -> SendWr<'a> {
        let mut wr = Self::with_opcode(wr_id, sys::IBV_WR_RDMA_WRITE_WITH_IMM, sges);
        wr.set_rdma(remote);
        wr.raw.__bindgen_anon_1.imm_data = imm.to_be();
        wr
    }

    /// An RDMA READ from `remote` into the SGEs.
    pub fn rdma_read(wr_id: u64, sges: &'a [Sge<'a>], remote: RemoteMemory) -> SendWr<'a> {
        let mut wr = Self::with_opcode(wr_id, sys::IBV_WR_RDMA_READ, sges);
        wr.set_rdma(remote);
        wr
    }

    /// An atomic compare-and-swap of the 8 bytes at `remote`; the old value
    /// lands in `result` (an 8-byte SGE).
    pub fn atomic_cmp_swp(
        wr_id: u64,
        result: &'a [Sge<'a>],
        remote: RemoteMemory,
        compare: u64,
        swap: u64,
    ) -> SendWr<'a> {
        let mut wr = Self::with_opcode(wr_id, sys::IBV_WR_ATOMIC_CMP_AND_SWP, result);
        wr.raw.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr: remote.addr,
            compare_add: compare,
            swap,
            rkey: remote.rkey,
        };
        wr
    }

    /// An atomic fetch-and-add on the 8 bytes at `remote`; the old value lands
    /// in `result` (an 8-byte SGE).
    pub fn atomic_fetch_add(
        wr_id: u64,
        result: &'a [Sge<'a>],
        remote: RemoteMemory,
        add: u64,
    ) -> SendWr<'a> {
        let mut wr = Self::with_opcode(wr_id, sys::IBV_WR_ATOMIC_FETCH_AND_ADD, result);
        wr.raw.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr: remote.addr,
            compare_add: add,
            swap: 0,
            rkey: remote.rkey,
        };
        wr
    }

    /// Binds type 2 window `mw` to `range` of `mr` with remote `access` and
    /// the new key `rkey` (usually [`inc_rkey`](crate::inc_rkey) of the
    /// window's current one). Returns the request and what a peer needs.
    pub fn bind_mw(
        wr_id: u64,
        mw: &'a crate::MemoryWindow,
        rkey: u32,
        mr: &'a crate::MemoryRegion,
        range: impl std::ops::RangeBounds<usize>,
        access: crate::AccessFlags,
    ) -> crate::Result<(SendWr<'a>, RemoteMemory)> {
        let remote = mr.remote(range)?;
        let mut wr = Self::with_opcode(wr_id, sys::IBV_WR_BIND_MW, &[]);
        wr.raw.__bindgen_anon_2.bind_mw = sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
            mw: mw.as_raw(),
            rkey,
            bind_info: sys::ibv_mw_bind_info {
                mr: mr.as_raw(),
                addr: remote.addr,
                length: remote.len,
                mw_access_flags: access.bits(),
            },
        };
        Ok((wr, RemoteMemory { rkey, ..remote }))
    }

    /// A local invalidate of `rkey` (a type 2 window's key).
    pub fn local_invalidate(wr_id: u64, rkey: u32) -> SendWr<'a> {
        let mut wr = Self::with_opcode(wr_id, sys::IBV_WR_LOCAL_INV, &[]);
        wr.raw.__bindgen_anon_1.invalidate_rkey = rkey;
        wr
    }

    fn set_rdma(&mut self, remote: RemoteMemory) {
        self.raw.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        };
    }

    fn set_inline(&mut self, data: &'a [u8]) {
        // An inline SGE may name any memory: the provider copies it at post
        // time and ignores the lkey. It is stored in the request itself
        // (`inline_sge`), so the request is self-contained.
        self.raw.sg_list = ptr::null_mut();
        self.raw.num_sge = 1;
        self.inline_sge = sys::ibv_sge {
            addr: data.as_ptr() as u64,
            length: data.len().min(u32::MAX as usize) as u32,
            lkey: 0,
        };
    }

    /// Adds `flags` (`SIGNALED`, `SOLICITED`, `FENCE`, `INLINE`).
    pub fn flags(mut self, flags: SendFlags) -> Self {
        self.raw.send_flags |= flags.bits();
        self
    }

    /// Asks for a completion of this request.
    pub fn signaled(self) -> Self {
        self.flags(SendFlags::SIGNALED)
    }

    /// Copies the SGEs' bytes into the request at post time (the total must
    /// not exceed the QP's `max_inline_data`).
    pub fn inline(self) -> Self {
        self.flags(SendFlags::INLINE)
    }

    /// Sends a UD datagram to QP `remote_qpn` through `ah`, with `remote_qkey`.
    pub fn ud(mut self, ah: &'a AddressHandle, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.raw.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: ah.as_raw(),
            remote_qpn,
            remote_qkey,
        };
        self
    }

    /// The work request ID.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// Whether a UD address (set by [`ud`](Self::ud)) is present; only a send
    /// needs one (a bind or invalidate does not).
    pub(crate) fn has_ud_address(&self) -> bool {
        let sends = matches!(
            self.raw.opcode,
            sys::IBV_WR_SEND | sys::IBV_WR_SEND_WITH_IMM
        );
        // SAFETY: `ud` is the union member `ud()` writes; reading the pointer
        // of a zeroed or set union is reading plain data.
        !sends || !unsafe { self.raw.wr.ud.ah }.is_null()
    }

    /// The raw request, for what this type does not cover.
    ///
    /// # Safety
    /// Changes must keep every pointer in the request valid for `'a`.
    pub unsafe fn as_raw_mut(&mut self) -> &mut sys::ibv_send_wr {
        &mut self.raw
    }

    pub(crate) fn as_raw_ptr(&self) -> *const sys::ibv_send_wr {
        &self.raw
    }

    /// Prepares the request for posting: links it to `next`, and points an
    /// inline request at its own SGE.
    pub(crate) fn link(&mut self, next: *mut sys::ibv_send_wr) -> *mut sys::ibv_send_wr {
        if self.raw.sg_list.is_null() && self.raw.num_sge == 1 {
            self.raw.sg_list = &mut self.inline_sge;
        }
        self.raw.next = next;
        &mut self.raw
    }
}

impl fmt::Debug for SendWr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendWr")
            .field("wr_id", &self.raw.wr_id)
            .field("opcode", &self.raw.opcode)
            .field("num_sge", &self.raw.num_sge)
            .field(
                "send_flags",
                &SendFlags::from_bits_retain(self.raw.send_flags),
            )
            .finish()
    }
}

/// A receive work request (`ibv_recv_wr`): where the next incoming SEND (or
/// WRITE with immediate) lands.
#[repr(transparent)]
pub struct RecvWr<'a> {
    raw: sys::ibv_recv_wr,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> RecvWr<'a> {
    /// A receive into the SGEs (none for a WRITE with immediate only).
    pub fn new(wr_id: u64, sges: &'a [Sge<'a>]) -> RecvWr<'a> {
        RecvWr {
            raw: sys::ibv_recv_wr {
                wr_id,
                next: ptr::null_mut(),
                sg_list: sges.as_ptr() as *mut sys::ibv_sge,
                num_sge: sges.len().min(i32::MAX as usize) as i32,
            },
            _borrows: PhantomData,
        }
    }

    /// The work request ID.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    pub(crate) fn as_raw_ptr(&self) -> *const sys::ibv_recv_wr {
        &self.raw
    }

    pub(crate) fn link(&mut self, next: *mut sys::ibv_recv_wr) -> *mut sys::ibv_recv_wr {
        self.raw.next = next;
        &mut self.raw
    }
}

impl fmt::Debug for RecvWr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvWr")
            .field("wr_id", &self.raw.wr_id)
            .field("num_sge", &self.raw.num_sge)
            .finish()
    }
}

/// Links `wrs` into one NULL-terminated list, in order; NULL when empty.
pub(crate) fn link_send_list(wrs: &mut [SendWr<'_>]) -> *mut sys::ibv_send_wr {
    wrs.iter_mut()
        .rev()
        .fold(ptr::null_mut(), |next, wr| wr.link(next))
}

/// Links `wrs` into one NULL-terminated list, in order; NULL when empty.
pub(crate) fn link_recv_list(wrs: &mut [RecvWr<'_>]) -> *mut sys::ibv_recv_wr {
    wrs.iter_mut()
        .rev()
        .fold(ptr::null_mut(), |next, wr| wr.link(next))
}
