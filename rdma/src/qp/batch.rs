//! Batches of extended work requests (`ibv_wr_*`).

mod ext;

#[cfg(has_ibv_wr_flush)]
pub use ext::{FlushLevel, FlushType};

use std::marker::PhantomData;
use std::ptr::NonNull;

use super::{QpType, QueuePair, SendOps};
use crate::retire::UdSendCount;
use crate::sys;
use std::ops::RangeBounds;

use crate::{
    AccessFlags, AddressHandle, Error, MemoryRegion, MemoryWindow, RemoteMemory, Result, SendFlags,
    Sge,
};

impl QueuePair {
    /// Starts a batch of extended work requests (`ibv_wr_start`); fails with
    /// `EOPNOTSUPP` on a classic QP.
    ///
    /// The batch borrows the QP mutably: while it is open no other batch,
    /// post or bind can start on the QP, from this thread or another. The
    /// provider holds the send queue's lock from `ibv_wr_start` to
    /// `ibv_wr_complete`/`ibv_wr_abort` (rxe and mlx5 take its spinlock), so
    /// any of those on the same thread would spin on it forever.
    pub fn wr_batch(&mut self) -> Result<WrBatch<'_>> {
        let ex = self.ex.ok_or_else(|| {
            Error::new("ibv_wr_start", libc::EOPNOTSUPP).with_hint("the QP is not extended")
        })?;
        // SAFETY: a live extended QP, not inside a batch: a batch borrows
        // the QP mutably, so none other is open (nor any post or bind under
        // way), and it ends the batch when completed or dropped.
        unsafe { sys::ibv_wr_start(ex.as_ptr()) };
        let pd = self.raw_pd();
        let this: &'_ QueuePair = self;
        Ok(WrBatch {
            qp: ex,
            ops: this.send_ops,
            ctx: this.raw_context(),
            pd,
            ud_count: this.ud_count.as_deref(),
            ud: this.qp_type == QpType::Ud,
            xrc: this.qp_type == QpType::XrcSend,
            count: 0,
            pending: None,
            sge_list_lengths_equal: this.sge_list_lengths_equal,
            inline_list_copied: this.inline_list_copied,
            max_inline: this.caps.max_inline_data,
            max_tso_header: this.max_tso_header,
            refused: None,
            done: false,
            _qp: PhantomData,
        })
    }
}

/// A batch of extended work requests (`ibv_wr_start` .. `ibv_wr_complete`).
///
/// Each operation starts a new request; the `set_*` calls after it describe
/// its data. Dropping the batch without [`complete`](Self::complete) aborts
/// it. Not `Send`: the provider holds the QP's lock for the batch; and it
/// borrows the QP mutably, so nothing else reaches the QP meanwhile.
///
/// An operation the QP was not created with ([`QpBuilder::send_ops`]),
/// a [`send`](Self::send) on a UD QP (which needs
/// [`send_ud`](Self::send_ud)'s address), a `send_ud` on a connected QP,
/// inline buffers longer in sum than the QP's `max_inline_data`
/// ([`send_inline_list`](Self::send_inline_list)) or a TSO header longer
/// than its `max_tso_header` ([`send_tso`](Self::send_tso))
/// never reaches the provider: the batch is then aborted by
/// [`complete`](Self::complete), which names the refused request.
///
/// [`QpBuilder::send_ops`]: super::QpBuilder::send_ops
pub struct WrBatch<'qp> {
    qp: NonNull<sys::ibv_qp_ex>,
    /// The QP's operations: the provider filled only these ops.
    ops: SendOps,
    /// The QP's context, which a bind's window and region must share.
    ctx: *mut sys::ibv_context,
    /// The QP's PD, which an address handle must share.
    pd: *mut sys::ibv_pd,
    /// A UD QP's send counts (`crate::retire`).
    ud_count: Option<&'qp UdSendCount>,
    ud: bool,
    /// An XRC send QP: the provider filled `wr_set_xrc_srqn`.
    xrc: bool,
    /// Requests begun so far.
    count: usize,
    /// The SGE of the current request, set on the provider (`ibv_wr_set_sge`)
    /// when the next request starts or the batch completes, unless
    /// [`WrBatch::set_sge_list`] replaces it: a request takes one data
    /// setter (ibv_wr_post(3)).
    pending: Option<sys::ibv_sge>,
    /// See `QueuePair::sge_list_lengths_equal`.
    sge_list_lengths_equal: bool,
    /// See `QueuePair::inline_list_copied`.
    inline_list_copied: bool,
    /// The QP's `max_inline_data`, which bounds an inline list's sum.
    max_inline: u32,
    /// The QP's `max_tso_header`.
    max_tso_header: u16,
    /// The first refused request (its index and why); nothing after it
    /// reaches the provider.
    refused: Option<(usize, Refusal)>,
    done: bool,
    _qp: PhantomData<(&'qp mut QueuePair, *const ())>,
}

/// Which refusal an address handle of another PD than `pd` is.
#[cold]
#[inline(never)]
fn other_pd(ah: &AddressHandle, pd: *mut sys::ibv_pd) -> Refusal {
    // SAFETY: `pd` is the live PD of the batch's QP, borrowed by the batch;
    // its `context` is set at creation.
    if unsafe { (*pd).context } != ah.raw_context() {
        Refusal::OtherContext
    } else {
        Refusal::OtherPd
    }
}

/// An SGE as the provider takes it.
fn raw_sge(sge: &Sge<'_>) -> sys::ibv_sge {
    sys::ibv_sge {
        addr: sge.addr(),
        length: sge.len(),
        lkey: sge.lkey(),
    }
}

/// Why a batch's request was kept from the provider.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// The op (its verb) is not in the QP's `send_ops`.
    NotInSendOps(&'static str),
    /// A send without an address on a UD QP.
    UdNeedsAddress,
    /// `send_ud` on a connected QP.
    NotUd,
    /// An address handle of another context.
    OtherContext,
    /// An address handle of another PD of the QP's context.
    OtherPd,
    /// A `set_*` call (its verb) with no request that takes SGEs.
    NoData(&'static str),
    /// An SGE list of different lengths where the provider miscounts it.
    UnequalSgeList,
    /// A bind's window and region of different contexts, or a range
    /// outside the region.
    BadBind,
    /// `set_xrc_srqn` on a QP that is not XRC send, or with no request.
    NotXrc,
    /// Inline buffers longer in sum (the first) than the QP's
    /// `max_inline_data` (the second).
    InlineTooLong(usize, u32),
    /// A TSO header longer (the first) than the QP's `max_tso_header`
    /// (the second).
    TsoHeaderTooLong(usize, u16),
}

impl<'qp> WrBatch<'qp> {
    fn raw(&self) -> *mut sys::ibv_qp_ex {
        self.qp.as_ptr()
    }

    /// Whether request `count` may reach the provider: the batch refused
    /// nothing yet and `why` (if any) is no reason to refuse it. Counts it.
    #[inline]
    fn admit(&mut self, why: Option<Refusal>) -> bool {
        let index = self.count;
        self.count += 1;
        if self.refused.is_some() {
            return false;
        }
        match why {
            None => true,
            Some(why) => {
                self.refused = Some((index, why));
                false
            }
        }
    }

    /// `Refusal::NotInSendOps(verb)` unless the QP was created with `op`.
    #[inline]
    fn needs(&self, op: SendOps, verb: &'static str) -> Option<Refusal> {
        (!self.ops.contains(op)).then_some(Refusal::NotInSendOps(verb))
    }

    /// Starts request `wr_id` if `why` admits it; whether it was started.
    /// The previous request's SGE goes to the provider first.
    ///
    /// `INLINE` is dropped from `flags`: only [`send_inline`] and
    /// [`rdma_write_inline`] set it, because rxe reads a request flagged
    /// inline from its inline buffer, which for any other request holds the
    /// SGEs themselves.
    ///
    /// [`send_inline`]: Self::send_inline
    /// [`rdma_write_inline`]: Self::rdma_write_inline
    #[inline]
    fn start(&mut self, why: Option<Refusal>, wr_id: u64, flags: SendFlags) -> bool {
        self.start_as(why, wr_id, flags - SendFlags::INLINE)
    }

    /// `start` of an inline request: flagged `INLINE`.
    #[inline]
    fn start_inline(&mut self, why: Option<Refusal>, wr_id: u64, flags: SendFlags) -> bool {
        self.start_as(why, wr_id, flags | SendFlags::INLINE)
    }

    #[inline]
    fn start_as(&mut self, why: Option<Refusal>, wr_id: u64, flags: SendFlags) -> bool {
        self.flush_sge();
        if !self.admit(why) {
            return false;
        }
        self.begin(wr_id, flags);
        true
    }

    /// Sets the current request's pending SGE on the provider.
    #[inline]
    fn flush_sge(&mut self) {
        if let Some(sge) = self.pending.take() {
            // SAFETY: inside a batch, right after the admitted request that
            // left this SGE pending (no other setter ran for it), whose
            // operation takes SGEs; the SGE names registered memory.
            unsafe { sys::ibv_wr_set_sge(self.raw(), sge.lkey, sge.addr, sge.length) };
        }
    }

    fn begin(&mut self, wr_id: u64, flags: SendFlags) {
        // SAFETY: inside a batch on a live extended QP; plain fields.
        unsafe {
            (*self.raw()).wr_id = wr_id;
            (*self.raw()).wr_flags = flags.bits();
        }
    }

    /// Adds a SEND of `sge` (connected QPs; on UD use
    /// [`send_ud`](Self::send_ud)).
    #[inline]
    pub fn send(&mut self, wr_id: u64, flags: SendFlags, sge: &Sge<'_>) -> &mut Self {
        let why = if self.ud {
            Some(Refusal::UdNeedsAddress)
        } else {
            self.needs(SendOps::SEND, "ibv_wr_send")
        };
        if !self.start(why, wr_id, flags) {
            return self;
        }
        // SAFETY: inside a batch; the QP was created with SEND (checked
        // above), so the provider filled `wr_send`; the SGE is registered
        // memory.
        unsafe {
            sys::ibv_wr_send(self.raw());
            self.pending = Some(raw_sge(sge));
        }
        self
    }

    /// Adds a UD SEND of `sge` to QP `remote_qpn` through `ah`, with
    /// `remote_qkey` (UD QPs only; `ah` of the QP's PD).
    ///
    /// `ah` stays borrowed until the batch ends: the request is queued at
    /// [`complete`](Self::complete), and the handle may be dropped after
    /// that, before the request completes (see [`AddressHandle`]).
    #[inline]
    pub fn send_ud(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        sge: &Sge<'_>,
        ah: &'qp AddressHandle,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> &mut Self {
        let why = if !self.ud {
            Some(Refusal::NotUd)
        } else if ah.raw_pd() != self.pd {
            Some(other_pd(ah, self.pd))
        } else {
            self.needs(SendOps::SEND, "ibv_wr_send")
        };
        if !self.start(why, wr_id, flags) {
            return self;
        }
        // The PD keeps the handle past its drop while a request may name it.
        ah.mark_used();
        // SAFETY: inside a batch on a UD QP created with SEND (checked
        // above): the provider filled `wr_send` and `wr_set_ud_addr`; the AH
        // is live and of the QP's PD (checked above), and the provider
        // copies its address (or number) at this call; the SGE is
        // registered memory.
        unsafe {
            sys::ibv_wr_send(self.raw());
            sys::ibv_wr_set_ud_addr(self.raw(), ah.as_raw(), remote_qpn, remote_qkey);
            self.pending = Some(raw_sge(sge));
        }
        self
    }

    /// Adds an RDMA WRITE of `sge` to `remote`.
    #[inline]
    pub fn rdma_write(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        sge: &Sge<'_>,
        remote: RemoteMemory,
    ) -> &mut Self {
        let why = self.needs(SendOps::RDMA_WRITE, "ibv_wr_rdma_write");
        if !self.start(why, wr_id, flags) {
            return self;
        }
        // SAFETY: as in `send`, with RDMA_WRITE.
        unsafe {
            sys::ibv_wr_rdma_write(self.raw(), remote.rkey, remote.addr);
            self.pending = Some(raw_sge(sge));
        }
        self
    }

    /// Adds an RDMA READ from `remote` into `sge`.
    #[inline]
    pub fn rdma_read(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        sge: &Sge<'_>,
        remote: RemoteMemory,
    ) -> &mut Self {
        let why = self.needs(SendOps::RDMA_READ, "ibv_wr_rdma_read");
        if !self.start(why, wr_id, flags) {
            return self;
        }
        // SAFETY: as in `send`, with RDMA_READ.
        unsafe {
            sys::ibv_wr_rdma_read(self.raw(), remote.rkey, remote.addr);
            self.pending = Some(raw_sge(sge));
        }
        self
    }

    /// Adds a SEND with immediate data `imm` (host byte order) of `sge`.
    #[inline]
    pub fn send_imm(&mut self, wr_id: u64, flags: SendFlags, sge: &Sge<'_>, imm: u32) -> &mut Self {
        let why = if self.ud {
            Some(Refusal::UdNeedsAddress)
        } else {
            self.needs(SendOps::SEND_WITH_IMM, "ibv_wr_send_imm")
        };
        if self.start(why, wr_id, flags) {
            // SAFETY: as in `send`, with SEND_WITH_IMM.
            unsafe {
                sys::ibv_wr_send_imm(self.raw(), imm.to_be());
                self.pending = Some(raw_sge(sge));
            }
        }
        self
    }

    /// Adds a SEND of `sge` that invalidates `rkey` at the receiver (see
    /// [`SendWr::send_with_invalidate`](crate::SendWr::send_with_invalidate)).
    #[inline]
    pub fn send_inv(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        sge: &Sge<'_>,
        rkey: u32,
    ) -> &mut Self {
        let why = if self.ud {
            Some(Refusal::UdNeedsAddress)
        } else {
            self.needs(SendOps::SEND_WITH_INV, "ibv_wr_send_inv")
        };
        if self.start(why, wr_id, flags) {
            // SAFETY: as in `send`, with SEND_WITH_INV.
            unsafe {
                sys::ibv_wr_send_inv(self.raw(), rkey);
                self.pending = Some(raw_sge(sge));
            }
        }
        self
    }

    /// Adds an RDMA WRITE of `sge` to `remote` with immediate data `imm`
    /// (host byte order), which consumes a receive at the peer.
    #[inline]
    pub fn rdma_write_imm(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        sge: &Sge<'_>,
        remote: RemoteMemory,
        imm: u32,
    ) -> &mut Self {
        let why = self.needs(SendOps::RDMA_WRITE_WITH_IMM, "ibv_wr_rdma_write_imm");
        if self.start(why, wr_id, flags) {
            // SAFETY: as in `send`, with RDMA_WRITE_WITH_IMM.
            unsafe {
                sys::ibv_wr_rdma_write_imm(self.raw(), remote.rkey, remote.addr, imm.to_be());
                self.pending = Some(raw_sge(sge));
            }
        }
        self
    }

    /// Adds an atomic compare-and-swap of the 8 bytes at `remote`; the old
    /// value lands in `result` (an 8-byte SGE).
    #[inline]
    pub fn atomic_cmp_swp(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        result: &Sge<'_>,
        remote: RemoteMemory,
        compare: u64,
        swap: u64,
    ) -> &mut Self {
        let why = self.needs(SendOps::ATOMIC_CMP_AND_SWP, "ibv_wr_atomic_cmp_swp");
        if self.start(why, wr_id, flags) {
            // SAFETY: as in `send`, with ATOMIC_CMP_AND_SWP; the device
            // writes the old value into registered memory.
            unsafe {
                sys::ibv_wr_atomic_cmp_swp(self.raw(), remote.rkey, remote.addr, compare, swap);
                self.pending = Some(raw_sge(result));
            }
        }
        self
    }

    /// Adds an atomic fetch-and-add of `add` to the 8 bytes at `remote`;
    /// the old value lands in `result` (an 8-byte SGE).
    #[inline]
    pub fn atomic_fetch_add(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        result: &Sge<'_>,
        remote: RemoteMemory,
        add: u64,
    ) -> &mut Self {
        let why = self.needs(SendOps::ATOMIC_FETCH_AND_ADD, "ibv_wr_atomic_fetch_add");
        if self.start(why, wr_id, flags) {
            // SAFETY: as in `atomic_cmp_swp`, with ATOMIC_FETCH_AND_ADD.
            unsafe {
                sys::ibv_wr_atomic_fetch_add(self.raw(), remote.rkey, remote.addr, add);
                self.pending = Some(raw_sge(result));
            }
        }
        self
    }

    /// Adds a local invalidate of `rkey` (a type 2 window's key).
    #[inline]
    pub fn local_inv(&mut self, wr_id: u64, flags: SendFlags, rkey: u32) -> &mut Self {
        let why = self.needs(SendOps::LOCAL_INV, "ibv_wr_local_inv");
        if self.start(why, wr_id, flags) {
            // SAFETY: inside a batch; the QP was created with LOCAL_INV
            // (checked above), so the provider filled `wr_local_inv`.
            unsafe { sys::ibv_wr_local_inv(self.raw(), rkey) };
        }
        self
    }

    /// Adds a bind of type 2 window `mw` to `range` of `mr` with remote
    /// `access` and the new key `rkey` (usually
    /// [`inc_rkey`](crate::inc_rkey) of the window's current one); a peer
    /// reaches it as `RemoteMemory { rkey, ..mr.remote(range)? }`.
    ///
    /// The window's [`rkey`](MemoryWindow::rkey) becomes `rkey` at once:
    /// providers take the window's current key from it for the next bind
    /// (rxe's kernel refuses a bind that names another key). If the batch
    /// is then aborted, that next bind fails (a `MemoryWindowBindError`
    /// completion).
    ///
    /// A type 1 window (bound by [`MemoryWindow::bind`]), a window or
    /// region of another context, or a range outside the region, are
    /// refused (the batch is aborted by [`complete`](Self::complete)).
    #[inline]
    #[allow(clippy::too_many_arguments)] // ibv_wr_bind_mw's, with the region's range
    pub fn bind_mw(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        mw: &mut MemoryWindow,
        rkey: u32,
        mr: &MemoryRegion,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
    ) -> &mut Self {
        let remote = mr.remote(range).ok();
        let why = match remote {
            Some(_)
                if mw.is_type2()
                    && mw.context().as_raw() == self.ctx
                    && mr.pd().context().as_raw() == self.ctx =>
            {
                self.needs(SendOps::BIND_MW, "ibv_wr_bind_mw")
            }
            _ => Some(Refusal::BadBind),
        };
        if let (true, Some(remote)) = (self.start(why, wr_id, flags), remote) {
            let info = sys::ibv_mw_bind_info {
                mr: mr.as_raw(),
                addr: remote.addr,
                length: remote.len,
                mw_access_flags: access.bits(),
            };
            // SAFETY: inside a batch; the QP was created with BIND_MW
            // (checked above), so the provider filled `wr_bind_mw`; a type 2
            // window and a region, live and of the QP's context (checked
            // above), the range inside the region; the provider reads the
            // window, the region and `info` during the call only (rxe,
            // mlx5). What the device may do with the region afterwards is
            // bounded by its deregistration: a region's memory is unmapped
            // only after a successful one (see `crate::mr`, "What
            // deregistration fences").
            unsafe { sys::ibv_wr_bind_mw(self.raw(), mw.as_raw(), rkey, &info) };
            mw.set_rkey(rkey);
        }
        self
    }

    /// Sets the data of the current request to the list `sges` instead of
    /// the SGE its operation was given (`ibv_wr_set_sge_list`); at most the
    /// QP's `max_send_sge` (else [`complete`](Self::complete) fails). Once
    /// per request; a request without SGEs (a local invalidate, a bind, an
    /// inline request) or none at all refuses it.
    ///
    /// rxe before rdma-core v64 computes the request's length as the
    /// number of SGEs times the first one's: there a list of SGEs of
    /// different lengths is refused (`EOPNOTSUPP`), one of equal lengths is
    /// sent right.
    #[inline]
    pub fn set_sge_list(&mut self, sges: &[Sge<'_>]) -> &mut Self {
        const VERB: &str = "ibv_wr_set_sge_list";
        if self.refused.is_some() {
            return self;
        }
        let index = self.count.saturating_sub(1);
        if self.pending.take().is_none() {
            self.refused = Some((index, Refusal::NoData(VERB)));
            return self;
        }
        if self.sge_list_lengths_equal && sges.windows(2).any(|w| w[0].len() != w[1].len()) {
            self.refused = Some((index, Refusal::UnequalSgeList));
            return self;
        }
        // SAFETY: inside a batch, right after an admitted request that takes
        // SGEs and has had no data setter (its pending SGE was taken above);
        // `Sge` is `repr(transparent)` over `ibv_sge`, and the provider copies
        // the list during the call; the SGEs name registered memory.
        unsafe { sys::ibv_wr_set_sge_list(self.raw(), sges.len(), sges.as_ptr().cast()) };
        self
    }

    /// Names the XRC SRQ of the remote domain that receives the current
    /// request (`ibv_wr_set_xrc_srqn`; its number is the remote
    /// [`SharedReceiveQueue::srq_num`](crate::SharedReceiveQueue::srq_num)).
    /// Every request of an XRC send QP takes one; on another QP, or with
    /// no request begun, the batch refuses it (the provider has no such
    /// setter there).
    #[inline]
    pub fn set_xrc_srqn(&mut self, remote_srqn: u32) -> &mut Self {
        if self.refused.is_some() {
            return self;
        }
        if !self.xrc || self.count == 0 {
            self.refused = Some((self.count.saturating_sub(1), Refusal::NotXrc));
            return self;
        }
        // SAFETY: inside a batch on an XRC send QP, whose provider filled
        // `wr_set_xrc_srqn`, right after an admitted request (nothing was
        // refused, and one was begun); plain data.
        unsafe { sys::ibv_wr_set_xrc_srqn(self.raw(), remote_srqn) };
        self
    }

    /// Adds a SEND of a copy of `data`, taken now: `data` may be any
    /// memory (`ibv_wr_send` with `IBV_SEND_INLINE` and
    /// `ibv_wr_set_inline_data`). At most the QP's `max_inline_data` bytes
    /// (else [`complete`](Self::complete) fails). Connected QPs only.
    #[inline]
    pub fn send_inline(&mut self, wr_id: u64, flags: SendFlags, data: &[u8]) -> &mut Self {
        let why = if self.ud {
            Some(Refusal::UdNeedsAddress)
        } else {
            self.needs(SendOps::SEND, "ibv_wr_send")
        };
        if self.start_inline(why, wr_id, flags) {
            // SAFETY: as in `send`; the provider copies the bytes during
            // the call ("inline setters copy the send data during the
            // setter", ibv_wr_post(3)) and only reads them.
            unsafe {
                sys::ibv_wr_send(self.raw());
                sys::ibv_wr_set_inline_data(self.raw(), data.as_ptr() as *mut _, data.len());
            }
        }
        self
    }

    /// Adds an RDMA WRITE to `remote` of a copy of `data`, taken now (as
    /// [`send_inline`](Self::send_inline)).
    #[inline]
    pub fn rdma_write_inline(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        data: &[u8],
        remote: RemoteMemory,
    ) -> &mut Self {
        let why = self.needs(SendOps::RDMA_WRITE, "ibv_wr_rdma_write");
        if self.start_inline(why, wr_id, flags) {
            // SAFETY: as in `send_inline`, with RDMA_WRITE.
            unsafe {
                sys::ibv_wr_rdma_write(self.raw(), remote.rkey, remote.addr);
                sys::ibv_wr_set_inline_data(self.raw(), data.as_ptr() as *mut _, data.len());
            }
        }
        self
    }

    /// Posts the batch.
    ///
    /// If a request was refused (see [`WrBatch`]) nothing is posted: the
    /// batch is aborted and the error names the request, `EOPNOTSUPP` for an
    /// operation the QP was not created with, `EINVAL` otherwise.
    pub fn complete(mut self) -> Result<()> {
        self.done = true;
        if let Some((index, why)) = self.refused {
            // SAFETY: ends the batch begun in `wr_batch` without posting it.
            unsafe { sys::ibv_wr_abort(self.raw()) };
            return Err(batch_refusal(index, why));
        }
        self.flush_sge();
        // Counted for the PD's address handles (`crate::retire`), inside
        // the provider's critical section, before `ibv_wr_complete` ends it.
        if let Some(c) = self.ud_count {
            c.start(self.count);
        }
        // SAFETY: ends the batch begun in `wr_batch`.
        let rc = unsafe { sys::ibv_wr_complete(self.raw()) };
        if let Some(c) = self.ud_count {
            if rc == 0 {
                c.posted(self.count);
            } else {
                c.refused(self.count);
            }
        }
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::from_rc("ibv_wr_complete", rc))
        }
    }
}

#[cold]
#[inline(never)]
fn batch_refusal(index: usize, why: Refusal) -> Error {
    let tail = "the batch was aborted: nothing in it was posted";
    match why {
        Refusal::NotInSendOps(verb) => Error::new(verb, libc::EOPNOTSUPP).with_hint(format!(
            "request {index} of the batch: the QP was not created with this operation in its send_ops; {tail}"
        )),
        Refusal::UdNeedsAddress => Error::invalid(
            "ibv_wr_send",
            format!("request {index} of the batch: a UD send needs its address handle: use WrBatch::send_ud; {tail}"),
        ),
        Refusal::NotUd => Error::invalid(
            "ibv_wr_set_ud_addr",
            format!("request {index} of the batch: send_ud on a connected QP; {tail}"),
        ),
        Refusal::OtherContext => Error::invalid(
            "ibv_wr_set_ud_addr",
            format!("request {index} of the batch: the address handle belongs to a different context than the QP; {tail}"),
        ),
        Refusal::OtherPd => Error::invalid(
            "ibv_wr_set_ud_addr",
            format!("request {index} of the batch: the address handle belongs to a different protection domain than the QP; {tail}"),
        ),
        Refusal::NoData(verb) => Error::invalid(
            verb,
            format!("request {index} of the batch takes no SGEs (a local invalidate, a bind, an inline request, or none yet); {tail}"),
        ),
        Refusal::UnequalSgeList => Error::new("ibv_wr_set_sge_list", libc::EOPNOTSUPP).with_hint(format!(
            "request {index} of the batch: rxe before rdma-core v64 counts an SGE list's length as the SGE count times the first SGE's length; give SGEs of one length, or post the list with post_send; {tail}"
        )),
        Refusal::BadBind => Error::invalid(
            "ibv_wr_bind_mw",
            format!("request {index} of the batch: a batch binds type 2 windows; the window, the region and the QP must share a context, and the range must lie in the region; {tail}"),
        ),
        Refusal::NotXrc => Error::invalid(
            "ibv_wr_set_xrc_srqn",
            format!("request {index} of the batch: an XRC SRQ number is set on a request of an XRC send QP only, after its operation; {tail}"),
        ),
        Refusal::InlineTooLong(len, max) => Error::new("ibv_wr_set_inline_data_list", libc::ENOSPC).with_hint(format!(
            "request {index} of the batch: {len} bytes of inline data, the QP's max_inline_data is {max}; {tail}"
        )),
        Refusal::TsoHeaderTooLong(len, max) => Error::invalid(
            "ibv_wr_send_tso",
            format!("request {index} of the batch: a {len}-byte header, the QP's max_tso_header is {max}; {tail}"),
        ),
    }
}

impl Drop for WrBatch<'_> {
    fn drop(&mut self) {
        if !self.done {
            // SAFETY: ends the batch begun in `wr_batch` without posting it.
            unsafe { sys::ibv_wr_abort(self.raw()) };
        }
    }
}
