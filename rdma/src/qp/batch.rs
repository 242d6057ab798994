//! Batches of extended work requests (`ibv_wr_*`).

use std::marker::PhantomData;
use std::ptr::NonNull;

use super::QueuePair;
use crate::sys;
use crate::{Error, Result};

impl QueuePair {
    /// Starts a batch of extended work requests (`ibv_wr_start`); fails with
    /// `EOPNOTSUPP` on a classic QP.
    pub fn wr_batch(&self) -> Result<WrBatch<'_>> {
        let ex = self.ex.ok_or_else(|| {
            Error::new("ibv_wr_start", libc::EOPNOTSUPP).with_hint("the QP is not extended")
        })?;
        // SAFETY: a live extended QP, not inside a batch: a WrBatch borrows
        // the QP and ends the batch when completed or dropped.
        unsafe { sys::ibv_wr_start(ex.as_ptr()) };
        Ok(WrBatch {
            qp: ex,
            done: false,
            _qp: PhantomData,
        })
    }
}

/// A batch of extended work requests (`ibv_wr_start` .. `ibv_wr_complete`).
///
/// Each operation starts a new request; the `set_*` calls after it describe
/// its data. Dropping the batch without [`complete`](Self::complete) aborts
/// it. Not `Send`: the provider holds the QP's lock for the batch.
pub struct WrBatch<'qp> {
    qp: NonNull<sys::ibv_qp_ex>,
    done: bool,
    _qp: PhantomData<(&'qp QueuePair, *const ())>,
}

impl<'qp> WrBatch<'qp> {
    fn raw(&self) -> *mut sys::ibv_qp_ex {
        self.qp.as_ptr()
    }

    fn begin(&mut self, wr_id: u64, flags: crate::SendFlags) {
        // SAFETY: inside a batch on a live extended QP; plain fields.
        unsafe {
            (*self.raw()).wr_id = wr_id;
            (*self.raw()).wr_flags = flags.bits();
        }
    }

    /// Adds a SEND of `sge`.
    #[inline]
    pub fn send(&mut self, wr_id: u64, flags: crate::SendFlags, sge: &crate::Sge<'_>) -> &mut Self {
        self.begin(wr_id, flags);
        // SAFETY: inside a batch; SEND was requested at creation or the
        // provider reports an error at complete; the SGE is registered memory.
        unsafe {
            sys::ibv_wr_send(self.raw());
            sys::ibv_wr_set_sge(self.raw(), sge.lkey(), sge.addr(), sge.len());
        }
        self
    }

    /// Adds an RDMA WRITE of `sge` to `remote`.
    #[inline]
    pub fn rdma_write(
        &mut self,
        wr_id: u64,
        flags: crate::SendFlags,
        sge: &crate::Sge<'_>,
        remote: crate::RemoteMemory,
    ) -> &mut Self {
        self.begin(wr_id, flags);
        // SAFETY: as in `send`.
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
        flags: crate::SendFlags,
        sge: &crate::Sge<'_>,
        remote: crate::RemoteMemory,
    ) -> &mut Self {
        self.begin(wr_id, flags);
        // SAFETY: as in `send`.
        unsafe {
            sys::ibv_wr_rdma_read(self.raw(), remote.rkey, remote.addr);
            sys::ibv_wr_set_sge(self.raw(), sge.lkey(), sge.addr(), sge.len());
        }
        self
    }

    /// Posts the batch.
    pub fn complete(mut self) -> Result<()> {
        self.done = true;
        // SAFETY: ends the batch begun in `wr_batch`.
        let rc = unsafe { sys::ibv_wr_complete(self.raw()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::from_rc("ibv_wr_complete", rc))
        }
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
