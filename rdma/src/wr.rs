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
use crate::{AddressHandle, Error, RemoteMemory, Sge};

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
///
/// `repr(C)` with the C struct first: a pointer to a request is a pointer to
/// its `ibv_send_wr`, so a linked list starts at the slice's own address.
#[repr(C)]
pub struct SendWr<'a> {
    raw: sys::ibv_send_wr,
    /// The SGE of an inline request built by [`SendWr::send_inline`].
    inline_sge: sys::ibv_sge,
    /// Whether `raw.sg_list` must point at `inline_sge`: set by
    /// `send_inline`. The request may move between posts (a `Vec` grows, a
    /// list is moved), so every post points `sg_list` at the SGE's current
    /// place rather than keeping the address of the first.
    owns_sge: bool,
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
            owns_sge: false,
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

    /// A SEND that also invalidates `rkey` at the receiver (a type 2
    /// window's key, or a region's where the device has memory
    /// extensions): once it arrives, RDMA through that key fails. The
    /// receive's completion names the key
    /// ([`WorkCompletion::invalidated_rkey`](crate::WorkCompletion::invalidated_rkey)).
    /// Connected QPs only; providers without memory windows (siw) refuse
    /// it.
    pub fn send_with_invalidate(wr_id: u64, sges: &'a [Sge<'a>], rkey: u32) -> SendWr<'a> {
        let mut wr = Self::with_opcode(wr_id, sys::IBV_WR_SEND_WITH_INV, sges);
        wr.raw.__bindgen_anon_1.invalidate_rkey = rkey;
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
            owns_sge: false,
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
    ///
    /// The window's [`rkey`](crate::MemoryWindow::rkey) is not updated by
    /// a posted request (the post cannot borrow the window mutably), and
    /// rxe takes the window's current key from it for the next bind: to
    /// bind a type 2 window more than once, use
    /// [`WrBatch::bind_mw`](crate::WrBatch::bind_mw), which updates it;
    /// here a second bind fails with a `MemoryWindowBindError` completion.
    ///
    /// A window and a region of different contexts are refused (`EINVAL`).
    /// The QP it is posted on is not compared: providers read only the
    /// generic `ibv_mw`/`ibv_mr` fields (keys) of a posted bind, and a key
    /// of another context fails in the device, as a completion error.
    pub fn bind_mw(
        wr_id: u64,
        mw: &'a crate::MemoryWindow,
        rkey: u32,
        mr: &'a crate::MemoryRegion,
        range: impl std::ops::RangeBounds<usize>,
        access: crate::AccessFlags,
    ) -> crate::Result<(SendWr<'a>, RemoteMemory)> {
        crate::pd::same_context(
            "SendWr::bind_mw",
            "memory window",
            mw.context(),
            "memory region",
            mr.pd().context(),
        )?;
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
        // (`inline_sge`), so the request is self-contained; `sg_list` gets
        // its address when the request is linked for a post.
        self.raw.sg_list = ptr::null_mut();
        self.raw.num_sge = 1;
        self.owns_sge = true;
        self.inline_sge = sys::ibv_sge {
            addr: data.as_ptr() as u64,
            length: data.len().min(u32::MAX as usize) as u32,
            lkey: 0,
        };
    }

    /// Adds `flags` (`SIGNALED`, `SOLICITED`, `FENCE`, `INLINE`).
    ///
    /// `INLINE` is kept only on a SEND or an RDMA WRITE (of any kind): on
    /// a READ or an atomic, whose SGEs the device writes, rxe would read
    /// the SGEs from the inline copy of the local data.
    pub fn flags(mut self, flags: SendFlags) -> Self {
        let mut bits = flags.bits();
        if !matches!(
            self.raw.opcode,
            sys::IBV_WR_SEND
                | sys::IBV_WR_SEND_WITH_IMM
                | sys::IBV_WR_SEND_WITH_INV
                | sys::IBV_WR_RDMA_WRITE
                | sys::IBV_WR_RDMA_WRITE_WITH_IMM
        ) {
            bits &= !sys::IBV_SEND_INLINE;
        }
        self.raw.send_flags |= bits;
        self
    }

    /// Asks for a completion of this request.
    pub fn signaled(self) -> Self {
        self.flags(SendFlags::SIGNALED)
    }

    /// Copies the SGEs' bytes into the request at post time (the total must
    /// not exceed the QP's `max_inline_data`).
    ///
    /// The provider copies them with plain CPU reads inside the post call,
    /// where without `INLINE` the device reads them later: do not write
    /// those bytes from another thread while the post runs. That copy
    /// would race with the write: it makes none of the atomic accesses
    /// that [`MemoryRegion::write`](crate::MemoryRegion::write) makes.
    pub fn inline(self) -> Self {
        self.flags(SendFlags::INLINE)
    }

    /// Sends a UD datagram to QP `remote_qpn` through `ah`, with `remote_qkey`.
    ///
    /// `ah` must be of the UD QP's protection domain (else the post is
    /// refused). It may be dropped as soon as the post returned: its PD
    /// keeps it until no send queue can still name it (see
    /// [`AddressHandle`]).
    pub fn ud(mut self, ah: &'a AddressHandle, remote_qpn: u32, remote_qkey: u32) -> Self {
        ah.mark_used();
        self.raw.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: ah.as_raw(),
            remote_qpn,
            remote_qkey,
        };
        self
    }

    /// The opcode.
    pub fn opcode(&self) -> crate::WrOpcode {
        crate::WrOpcode::from_raw(self.raw.opcode)
    }

    /// The work request ID.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// What keeps this request off a UD QP of protection domain `pd`, if
    /// anything.
    ///
    /// UD providers read `wr.ud.ah` for every request (rxe's
    /// `init_send_wqe`, mlx5's datagram segment): only a SEND or a SEND with
    /// immediate that carries an address handle (set by [`ud`](Self::ud)) of
    /// the QP's own PD may be posted there. For any other opcode that union
    /// member holds a remote address or nothing. A handle of another PD
    /// fails the request on rxe (its kernel compares the PDs when it sends),
    /// and the PD keeps a dropped handle only for its own QPs (see
    /// `crate::retire`): it is refused here.
    #[inline]
    pub(crate) fn ud_fault(&self, pd: *mut sys::ibv_pd) -> Option<UdFault> {
        if !matches!(
            self.raw.opcode,
            sys::IBV_WR_SEND | sys::IBV_WR_SEND_WITH_IMM
        ) {
            return Some(UdFault::NotASend);
        }
        // SAFETY: reading the pointer of the zeroed or `ud()`-written union
        // member is reading plain data.
        let ah = unsafe { self.raw.wr.ud.ah };
        if ah.is_null() {
            return Some(UdFault::NoAddress);
        }
        // SAFETY: a non-NULL `ah` was set by `ud()` from an `&'a
        // AddressHandle` (or by `as_raw_mut`, whose contract keeps it
        // valid), so it points to a live `ibv_ah` for as long as `self`.
        if unsafe { (*ah).pd } != pd {
            // Told from another context's handle only on the error path
            // (`UdFault::of_other_pd`), so that this check makes no call.
            return Some(UdFault::OtherPd);
        }
        None
    }

    /// The address handle of a request, for error messages.
    pub(crate) fn ud_ah(&self) -> *mut sys::ibv_ah {
        // SAFETY: reading the pointer of the zeroed or `ud()`-written union
        // member is reading plain data.
        unsafe { self.raw.wr.ud.ah }
    }

    /// The opcode, for messages.
    pub(crate) fn opcode_name(&self) -> &'static str {
        match self.raw.opcode {
            sys::IBV_WR_SEND => "a SEND",
            sys::IBV_WR_SEND_WITH_IMM => "a SEND with immediate",
            sys::IBV_WR_RDMA_WRITE => "an RDMA WRITE",
            sys::IBV_WR_RDMA_WRITE_WITH_IMM => "an RDMA WRITE with immediate",
            sys::IBV_WR_RDMA_READ => "an RDMA READ",
            sys::IBV_WR_ATOMIC_CMP_AND_SWP => "an atomic compare-and-swap",
            sys::IBV_WR_ATOMIC_FETCH_AND_ADD => "an atomic fetch-and-add",
            sys::IBV_WR_LOCAL_INV => "a local invalidate",
            sys::IBV_WR_BIND_MW => "a memory-window bind",
            sys::IBV_WR_SEND_WITH_INV => "a SEND with invalidate",
            _ => "a request of another opcode",
        }
    }

    /// The raw request, for what this type does not cover.
    ///
    /// A request built by [`send_inline`](Self::send_inline) has its
    /// `sg_list` pointed at its own SGE by every post, whatever it was set to.
    ///
    /// # Safety
    /// Changes must keep every pointer in the request valid for `'a`. An
    /// address handle set here (rather than by [`ud`](Self::ud)) is not
    /// kept past its drop by its PD: it must stay alive until the requests
    /// posted through it have completed.
    pub unsafe fn as_raw_mut(&mut self) -> &mut sys::ibv_send_wr {
        &mut self.raw
    }

    pub(crate) fn as_raw_ptr(&self) -> *const sys::ibv_send_wr {
        &self.raw
    }

    /// Prepares the request for posting: links it to `next`, and points an
    /// inline request at its own SGE.
    #[inline]
    pub(crate) fn link(&mut self, next: *mut sys::ibv_send_wr) -> *mut sys::ibv_send_wr {
        let wr: *mut SendWr<'a> = self;
        // SAFETY: `wr` comes from `&mut self`, so it is valid and unaliased.
        unsafe { <Self as Link>::link_raw(wr, next) };
        &mut self.raw
    }
}

/// Why a send request cannot go on a UD QP (see [`SendWr::ud_fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UdFault {
    /// Not a SEND or a SEND with immediate.
    NotASend,
    /// A send without an address handle.
    NoAddress,
    /// A send through an address handle of another context.
    OtherContext,
    /// A send through an address handle of another PD of the QP's context.
    OtherPd,
}

impl UdFault {
    /// `OtherPd` of a request whose handle `ah` is of another context than
    /// `pd` is `OtherContext`.
    #[cold]
    pub(crate) fn of_other_pd(self, ah: *mut sys::ibv_ah, pd: *mut sys::ibv_pd) -> UdFault {
        if self != UdFault::OtherPd {
            return self;
        }
        // SAFETY: `ah` is live (a request with `OtherPd` has one, see
        // `ud_fault`) and `pd` is the live PD of the QP that asks; `context`
        // of each is set at creation.
        if unsafe { (*ah).context != (*pd).context } {
            UdFault::OtherContext
        } else {
            UdFault::OtherPd
        }
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

    #[inline]
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

/// A work request that is linked into the provider's list: [`SendWr`] and
/// [`RecvWr`].
pub(crate) trait Link {
    /// The request the provider reads (`ibv_send_wr`, `ibv_recv_wr`).
    type Raw;

    /// Prepares `wr` for posting and links it to `next`, through the raw
    /// pointer: no reference to the request is created, so pointers to it
    /// stored earlier (the `next` of the request before it) stay valid.
    ///
    /// # Safety
    /// `wr` must point to a live request that nothing else accesses during
    /// the call.
    unsafe fn link_raw(wr: *mut Self, next: *mut Self::Raw);

    /// The provider's request inside `wr`, without creating a reference.
    ///
    /// # Safety
    /// `wr` must point to a live request.
    unsafe fn raw_of(wr: *mut Self) -> *mut Self::Raw;
}

impl<'a> Link for SendWr<'a> {
    type Raw = sys::ibv_send_wr;

    /// Also points an inline request at its own SGE, where it is now: the
    /// request may have moved since it was last linked. (One flag test, as
    /// cheap as the NULL test it replaces.)
    #[inline]
    unsafe fn link_raw(wr: *mut Self, next: *mut sys::ibv_send_wr) {
        // SAFETY: per the contract; only place expressions through `wr`.
        // `sg_list` then points into the request itself, which the post that
        // links it borrows for the provider call.
        unsafe {
            if (*wr).owns_sge {
                (*wr).raw.sg_list = ptr::addr_of_mut!((*wr).inline_sge);
            }
            (*wr).raw.next = next;
        }
    }

    #[inline]
    unsafe fn raw_of(wr: *mut Self) -> *mut sys::ibv_send_wr {
        // SAFETY: per the contract; a place expression, no reference.
        unsafe { ptr::addr_of_mut!((*wr).raw) }
    }
}

impl<'a> Link for RecvWr<'a> {
    type Raw = sys::ibv_recv_wr;

    #[inline]
    unsafe fn link_raw(wr: *mut Self, next: *mut sys::ibv_recv_wr) {
        // SAFETY: per the contract; a place expression, no reference.
        unsafe { (*wr).raw.next = next };
    }

    #[inline]
    unsafe fn raw_of(wr: *mut Self) -> *mut sys::ibv_recv_wr {
        // SAFETY: per the contract; a place expression, no reference.
        unsafe { ptr::addr_of_mut!((*wr).raw) }
    }
}

/// Links `wrs` into one NULL-terminated list, in order; NULL when empty.
///
/// Forward, by pointer over the slice: no element count is computed, so
/// there is no division by the request's size. (The posts link a single
/// request with [`SendWr::link`] or [`RecvWr::link`] and come here for
/// longer lists.)
#[inline]
pub(crate) fn link_list<W: Link>(wrs: &mut [W]) -> *mut W::Raw {
    let std::ops::Range { start, end } = wrs.as_mut_ptr_range();
    if start == end {
        return ptr::null_mut();
    }
    let mut wr = start;
    // SAFETY: `wr` and `next` stay within `start..end`, the elements of
    // `wrs`, which is borrowed mutably for the call. Every access goes
    // through pointers derived from `start` and creates no reference, so the
    // `next` pointers stored along the way stay valid for the provider.
    unsafe {
        loop {
            let next = wr.add(1);
            if next == end {
                W::link_raw(wr, ptr::null_mut());
                break;
            }
            W::link_raw(wr, W::raw_of(next));
            wr = next;
        }
        W::raw_of(start)
    }
}

/// The error of a refused post, naming the refused request when known.
#[cold]
#[inline(never)]
pub(crate) fn post_error(verb: &'static str, rc: i32, index: Option<usize>) -> Error {
    let e = Error::from_rc(verb, rc);
    match index {
        Some(i) => {
            let cause = e.hint().unwrap_or_default().to_owned();
            e.with_hint(format!(
                "work request {i} and the ones after it were not posted; {cause}"
            ))
        }
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_list_links_forward_and_points_inline_requests_at_their_sge() {
        assert!(link_list::<SendWr<'_>>(&mut []).is_null());
        let data = *b"inline";
        let mut wrs = [
            SendWr::send(1, &[]),
            SendWr::send_inline(2, &data),
            SendWr::send(3, &[]).signaled(),
        ];
        let head = link_list::<SendWr<'_>>(&mut wrs);
        // Walk the list as a provider does, before anything else touches it.
        let mut walked = Vec::new();
        let mut p = head;
        while !p.is_null() {
            // SAFETY: a list just linked over `wrs`, which is not otherwise
            // accessed meanwhile.
            unsafe {
                let sge = (*p).sg_list;
                walked.push((
                    (*p).wr_id,
                    (*p).num_sge,
                    (*p).num_sge > 0 && (*sge).length > 0,
                ));
                p = (*p).next;
            }
        }
        assert_eq!(walked, [(1, 0, false), (2, 1, true), (3, 0, false)]);
        let raws: Vec<*const sys::ibv_send_wr> = wrs.iter().map(|w| w.as_raw_ptr()).collect();
        assert_eq!(head as *const _, raws[0]);
        assert_eq!(wrs[0].raw.next as *const _, raws[1]);
        assert_eq!(wrs[1].raw.next as *const _, raws[2]);
        assert!(wrs[2].raw.next.is_null());
        assert_eq!(
            wrs[1].raw.sg_list as *const _,
            &wrs[1].inline_sge as *const _
        );
        assert_eq!(wrs[1].inline_sge.addr, data.as_ptr() as u64);
        assert_eq!(wrs[1].inline_sge.length, data.len() as u32);
        assert_ne!(
            wrs[0].raw.sg_list as *const _,
            &wrs[0].inline_sge as *const _
        );

        // Posted again alone, a request ends the list.
        let one = wrs[0].link(ptr::null_mut());
        assert_eq!(one as *const _, raws[0]);
        assert!(wrs[0].raw.next.is_null());
    }

    #[test]
    fn inline_request_moved_after_a_post_points_at_its_sge_again() {
        let data = *b"moved";
        let decoy = *b"stale";
        let mut v = Vec::with_capacity(1);
        v.push(SendWr::send_inline(1, &data));
        let first = v[0].link(ptr::null_mut());
        // SAFETY: just linked; `v` is not otherwise accessed meanwhile.
        assert_eq!(unsafe { (*(*first).sg_list).addr }, data.as_ptr() as u64);
        // Move the request out (as a growing Vec or a moved list does) and
        // put another request where it was.
        let mut moved = vec![v.pop().unwrap()];
        v.push(SendWr::send_inline(2, &decoy));
        let head = moved[0].link(ptr::null_mut());
        assert_eq!(
            moved[0].raw.sg_list as *const _,
            &moved[0].inline_sge as *const _
        );
        // SAFETY: as above.
        let sge = unsafe { *(*head).sg_list };
        assert_eq!((sge.addr, sge.length), (data.as_ptr() as u64, 5));
        // Linked as part of a list, too.
        // (A Vec of one, which the second push reallocates.)
        let mut grown = vec![moved.pop().unwrap()];
        grown.push(SendWr::send(3, &[]));
        link_list::<SendWr<'_>>(&mut grown);
        assert_eq!(
            grown[0].raw.sg_list as *const _,
            &grown[0].inline_sge as *const _
        );
        // A request with SGEs of its own keeps them.
        assert_ne!(
            grown[1].raw.sg_list as *const _,
            &grown[1].inline_sge as *const _
        );
    }

    #[test]
    fn recv_list_links_forward() {
        assert!(link_list::<RecvWr<'_>>(&mut []).is_null());
        let mut wrs = [RecvWr::new(1, &[]), RecvWr::new(2, &[])];
        let head = link_list::<RecvWr<'_>>(&mut wrs);
        // SAFETY: as above, a list just linked.
        let ids = unsafe { [(*head).wr_id, (*(*head).next).wr_id] };
        assert_eq!(ids, [1, 2]);
        assert_eq!(head as *const _, wrs[0].as_raw_ptr());
        assert_eq!(wrs[0].raw.next as *const _, wrs[1].as_raw_ptr());
        assert!(wrs[1].raw.next.is_null());
        let mut one = [RecvWr::new(3, &[])];
        assert_eq!(
            link_list::<RecvWr<'_>>(&mut one) as *const _,
            one[0].as_raw_ptr()
        );
        assert!(one[0].raw.next.is_null());
    }
}
