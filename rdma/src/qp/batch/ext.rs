//! The batch operations beyond the classic work requests: inline data
//! lists, TSO sends, atomic writes and flushes.

use std::io::IoSlice;

use super::{Refusal, WrBatch};
use crate::qp::SendOps;
use crate::{sys, RemoteMemory, SendFlags, Sge};

/// Where a [`WrBatch::flush`] makes the data visible (`IBV_FLUSH_*`
/// placement type).
#[cfg(has_ibv_wr_flush)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushType {
    /// Global visibility: later reads of any agent see the data
    /// (`IBV_FLUSH_GLOBAL`; the region needs
    /// [`AccessFlags::FLUSH_GLOBAL`](crate::AccessFlags::FLUSH_GLOBAL)).
    Global,
    /// Persistence: the data survives a power loss (`IBV_FLUSH_PERSISTENT`;
    /// the region needs
    /// [`AccessFlags::FLUSH_PERSISTENT`](crate::AccessFlags::FLUSH_PERSISTENT),
    /// which persistent memory only takes).
    Persistent,
}

#[cfg(has_ibv_wr_flush)]
impl FlushType {
    /// The C value.
    pub fn raw(self) -> u8 {
        (match self {
            FlushType::Global => sys::IBV_FLUSH_GLOBAL,
            FlushType::Persistent => sys::IBV_FLUSH_PERSISTENT,
        }) as u8
    }
}

/// What a [`WrBatch::flush`] flushes (`IBV_FLUSH_*` selectivity level).
#[cfg(has_ibv_wr_flush)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushLevel {
    /// The range named (`IBV_FLUSH_RANGE`).
    Range,
    /// The whole region the key names; the range is ignored
    /// (`IBV_FLUSH_MR`).
    Region,
}

#[cfg(has_ibv_wr_flush)]
impl FlushLevel {
    /// The C value.
    pub fn raw(self) -> u8 {
        (match self {
            FlushLevel::Range => sys::IBV_FLUSH_RANGE,
            FlushLevel::Region => sys::IBV_FLUSH_MR,
        }) as u8
    }
}

// `IoSlice` is ABI-compatible with `iovec` on Unix (its documentation), and
// `iovec` has the layout of `ibv_data_buf` (`void *addr; size_t length`):
// the sizes are checked here, the offsets by tests/tests/verbs_layout.rs.
const _: () = assert!(
    std::mem::size_of::<IoSlice<'_>>() == std::mem::size_of::<sys::ibv_data_buf>()
        && std::mem::align_of::<IoSlice<'_>>() == std::mem::align_of::<sys::ibv_data_buf>()
);

impl WrBatch<'_> {
    /// `Refusal::InlineTooLong` unless the sum of `data` fits the QP's
    /// `max_inline_data`.
    fn inline_fits(&self, data: &[IoSlice<'_>]) -> Option<Refusal> {
        let len = data.iter().fold(0usize, |n, b| n.saturating_add(b.len()));
        (len > self.max_inline as usize).then_some(Refusal::InlineTooLong(len, self.max_inline))
    }

    /// Sets the current request's data to a copy of `data`, taken now.
    ///
    /// # Safety
    /// Inside a batch, right after an admitted inline request (flagged
    /// `INLINE`) that has had no data setter, whose buffers fit the QP's
    /// `max_inline_data` in sum (`inline_fits`).
    unsafe fn set_inline_list(&mut self, data: &[IoSlice<'_>]) {
        if self.inline_list_copied {
            // The provider sends none of a list's bytes: one buffer of the
            // list's bytes instead, of at most `max_inline_data`.
            let bytes: Vec<u8> = data.iter().flat_map(|b| b.iter().copied()).collect();
            // SAFETY: the caller's contract; the provider copies the bytes
            // during the call and only reads them.
            unsafe {
                sys::ibv_wr_set_inline_data(self.raw(), bytes.as_ptr() as *mut _, bytes.len())
            };
        } else {
            // SAFETY: the caller's contract; `IoSlice` has the layout of
            // `ibv_data_buf` (checked above), each names `len` readable
            // bytes borrowed for the call, and the provider copies them
            // during the call (ibv_wr_post(3): inline setters copy the
            // data during the setter); their sum fits the inline size, so
            // that no provider copies past its queue entry (rxe before
            // v64 bounds each buffer alone).
            unsafe {
                sys::ibv_wr_set_inline_data_list(self.raw(), data.len(), data.as_ptr().cast())
            };
        }
    }

    /// Adds a SEND of a copy of the buffers `data`, one after the other,
    /// taken now (`ibv_wr_send` with `IBV_SEND_INLINE` and
    /// `ibv_wr_set_inline_data_list`). Any number of buffers, empty ones
    /// and none included (a zero-byte SEND); their sum at most the QP's
    /// `max_inline_data`, else [`complete`](Self::complete) fails with
    /// `ENOSPC`. Connected QPs only.
    #[inline]
    pub fn send_inline_list(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        data: &[IoSlice<'_>],
    ) -> &mut Self {
        let why = if self.ud {
            Some(Refusal::UdNeedsAddress)
        } else {
            self.needs(SendOps::SEND, "ibv_wr_send")
        }
        .or_else(|| self.inline_fits(data));
        if self.start_inline(why, wr_id, flags) {
            // SAFETY: inside a batch; the QP was created with SEND (checked
            // above), so the provider filled `wr_send`; the request is
            // inline, has no data yet and the list fits (checked above).
            unsafe {
                sys::ibv_wr_send(self.raw());
                self.set_inline_list(data);
            }
        }
        self
    }

    /// Adds an RDMA WRITE to `remote` of a copy of the buffers `data`,
    /// taken now (as [`send_inline_list`](Self::send_inline_list)).
    #[inline]
    pub fn rdma_write_inline_list(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        data: &[IoSlice<'_>],
        remote: RemoteMemory,
    ) -> &mut Self {
        let why = self
            .needs(SendOps::RDMA_WRITE, "ibv_wr_rdma_write")
            .or_else(|| self.inline_fits(data));
        if self.start_inline(why, wr_id, flags) {
            // SAFETY: as in `send_inline_list`, with RDMA_WRITE.
            unsafe {
                sys::ibv_wr_rdma_write(self.raw(), remote.rkey, remote.addr);
                self.set_inline_list(data);
            }
        }
        self
    }

    /// Adds a TCP segmentation offload SEND (`ibv_wr_send_tso`): the
    /// device cuts the payload `sge` into segments of `mss` bytes, each
    /// behind a copy of the packet header `hdr` (copied now). QPs created
    /// with [`SendOps::TSO`] only, whose
    /// [`max_tso_header`](crate::QpBuilder::max_tso_header) `hdr` fits; else
    /// [`complete`](Self::complete) fails (`EOPNOTSUPP`, `EINVAL`).
    #[inline]
    pub fn send_tso(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        hdr: &[u8],
        mss: u16,
        sge: &Sge<'_>,
    ) -> &mut Self {
        // On UD the send would need an address, which this call cannot
        // take (a provider that grants TSO on UD is refused here).
        let why = if self.ud {
            Some(Refusal::UdNeedsAddress)
        } else {
            self.needs(SendOps::TSO, "ibv_wr_send_tso")
        }
        .or_else(|| {
            (hdr.len() > self.max_tso_header as usize)
                .then_some(Refusal::TsoHeaderTooLong(hdr.len(), self.max_tso_header))
        });
        if self.start(why, wr_id, flags) {
            // SAFETY: inside a batch; the QP was created with TSO (checked
            // above), so the provider filled `wr_send_tso`; `hdr` fits the
            // QP's `max_tso_header` (checked above, so its length fits
            // u16), is read only and copied into the queue entry during
            // the call (mlx5); the SGE is registered memory.
            unsafe {
                sys::ibv_wr_send_tso(self.raw(), hdr.as_ptr() as *mut _, hdr.len() as u16, mss);
                self.pending = Some(super::raw_sge(sge));
            }
        }
        self
    }

    /// Adds an atomic write of the 8 bytes `value` to the 8 bytes at
    /// `remote` (`ibv_wr_atomic_write`): the responder writes them at
    /// once, never torn. QPs created with [`SendOps::ATOMIC_WRITE`] only;
    /// the remote region needs remote write access.
    #[inline]
    pub fn atomic_write(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote: RemoteMemory,
        value: &[u8; 8],
    ) -> &mut Self {
        let why = self.needs(SendOps::ATOMIC_WRITE, "ibv_wr_atomic_write");
        if self.start(why, wr_id, flags) {
            // SAFETY: inside a batch; the QP was created with ATOMIC_WRITE
            // (checked above), so the provider filled `wr_atomic_write`;
            // it reads the 8 bytes of `value` during the call into the
            // queue entry (rxe).
            unsafe {
                sys::ibv_wr_atomic_write(
                    self.raw(),
                    remote.rkey,
                    remote.addr,
                    value.as_ptr().cast(),
                )
            };
        }
        self
    }

    /// Adds a FLUSH of `remote` (its `len` bytes at `addr`; with
    /// [`FlushLevel::Region`] the whole region of its key) to placement
    /// type `placement` (`ibv_wr_flush`): its completion tells that the
    /// RDMA WRITEs before it that reached the range are visible there (or
    /// persistent). QPs created with `SendOps::FLUSH` only; the remote
    /// region needs the matching `AccessFlags::FLUSH_*`.
    #[cfg(has_ibv_wr_flush)]
    #[inline]
    pub fn flush(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote: RemoteMemory,
        placement: FlushType,
        level: FlushLevel,
    ) -> &mut Self {
        let why = self.needs(SendOps::FLUSH, "ibv_wr_flush");
        if self.start(why, wr_id, flags) {
            let len = usize::try_from(remote.len).unwrap_or(usize::MAX);
            // SAFETY: inside a batch; the QP was created with FLUSH
            // (checked above), so the provider filled `wr_flush`; plain
            // values (the responder checks the range against its region).
            unsafe {
                sys::ibv_wr_flush(
                    self.raw(),
                    remote.rkey,
                    remote.addr,
                    len,
                    placement.raw(),
                    level.raw(),
                )
            };
        }
        self
    }
}
