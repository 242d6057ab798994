//! Batches of extended work requests (`ibv_wr_*`).

use std::marker::PhantomData;
use std::ptr::NonNull;

use super::{QpType, QueuePair, SendOps};
use crate::sys;
use crate::{AddressHandle, Error, RemoteMemory, Result, SendFlags, Sge};

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
        Ok(WrBatch {
            qp: ex,
            ops: self.send_ops,
            ctx: self.raw_context(),
            ud: self.qp_type == QpType::Ud,
            count: 0,
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
/// [`send_ud`](Self::send_ud)'s address) or a `send_ud` on a connected QP
/// never reaches the provider: the batch is then aborted by
/// [`complete`](Self::complete), which names the refused request.
///
/// [`QpBuilder::send_ops`]: super::QpBuilder::send_ops
pub struct WrBatch<'qp> {
    qp: NonNull<sys::ibv_qp_ex>,
    /// The QP's operations: the provider filled only these ops.
    ops: SendOps,
    /// The QP's context, which an address handle must share.
    ctx: *mut sys::ibv_context,
    ud: bool,
    /// Requests begun so far.
    count: usize,
    /// The first refused request (its index and why); nothing after it
    /// reaches the provider.
    refused: Option<(usize, Refusal)>,
    done: bool,
    _qp: PhantomData<(&'qp mut QueuePair, *const ())>,
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
        if !self.admit(why) {
            return self;
        }
        self.begin(wr_id, flags);
        // SAFETY: inside a batch; the QP was created with SEND (checked
        // above), so the provider filled `wr_send`; the SGE is registered
        // memory.
        unsafe {
            sys::ibv_wr_send(self.raw());
            sys::ibv_wr_set_sge(self.raw(), sge.lkey(), sge.addr(), sge.len());
        }
        self
    }

    /// Adds a UD SEND of `sge` to QP `remote_qpn` through `ah`, with
    /// `remote_qkey` (UD QPs only; `ah` of the QP's context).
    #[inline]
    pub fn send_ud(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        sge: &Sge<'_>,
        ah: &AddressHandle,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> &mut Self {
        let why = if !self.ud {
            Some(Refusal::NotUd)
        } else if ah.raw_context() != self.ctx {
            Some(Refusal::OtherContext)
        } else {
            self.needs(SendOps::SEND, "ibv_wr_send")
        };
        if !self.admit(why) {
            return self;
        }
        self.begin(wr_id, flags);
        // SAFETY: inside a batch on a UD QP created with SEND (checked
        // above): the provider filled `wr_send` and `wr_set_ud_addr`; the AH
        // is live and of the QP's context (checked above), and the provider
        // copies its address at this call; the SGE is registered memory.
        unsafe {
            sys::ibv_wr_send(self.raw());
            sys::ibv_wr_set_ud_addr(self.raw(), ah.as_raw(), remote_qpn, remote_qkey);
            sys::ibv_wr_set_sge(self.raw(), sge.lkey(), sge.addr(), sge.len());
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
        if !self.admit(why) {
            return self;
        }
        self.begin(wr_id, flags);
        // SAFETY: as in `send`, with RDMA_WRITE.
        unsafe {
            sys::ibv_wr_rdma_write(self.raw(), remote.rkey, remote.addr);
            sys::ibv_wr_set_sge(self.raw(), sge.lkey(), sge.addr(), sge.len());
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
        if !self.admit(why) {
            return self;
        }
        self.begin(wr_id, flags);
        // SAFETY: as in `send`, with RDMA_READ.
        unsafe {
            sys::ibv_wr_rdma_read(self.raw(), remote.rkey, remote.addr);
            sys::ibv_wr_set_sge(self.raw(), sge.lkey(), sge.addr(), sge.len());
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
        // SAFETY: ends the batch begun in `wr_batch`.
        let rc = unsafe { sys::ibv_wr_complete(self.raw()) };
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
