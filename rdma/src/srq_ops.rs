//! Tag operations on a tag-matching SRQ (`ibv_post_srq_ops`): adding a
//! tagged receive buffer to the device's matching list, removing it, and
//! syncing the software's count of unexpected messages.

use std::marker::PhantomData;
use std::ptr;
use std::sync::PoisonError;

use crate::srq_tag_table::TOKEN_BIT;
use crate::sys;
use crate::wr::Link;
use crate::{Error, Result, Sge, SharedReceiveQueue};

/// One tag operation (`ibv_ops_wr`) for
/// [`SharedReceiveQueue::post_srq_ops`].
///
/// Layout-identical to `ibv_ops_wr`, so a slice of them is linked and
/// passed to the provider as is. An added tag's buffer is given by SGEs
/// that borrow their regions, as a receive's are
/// ([`RecvWr`](crate::RecvWr)): the device writes a matching message there
/// later, through the registration (see [`crate::mr`] for why that stays
/// sound).
#[repr(transparent)]
pub struct SrqOp<'a> {
    raw: sys::ibv_ops_wr,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> SrqOp<'a> {
    fn new(wr_id: u64, opcode: sys::ibv_ops_wr_opcode) -> SrqOp<'a> {
        // SAFETY: plain data (integers and a NULL `next`/`sg_list`).
        let mut raw: sys::ibv_ops_wr = unsafe { std::mem::zeroed() };
        raw.wr_id = wr_id;
        raw.opcode = opcode;
        SrqOp {
            raw,
            _borrows: PhantomData,
        }
    }

    /// Adds a tagged buffer (`IBV_WR_TAG_ADD`): a message whose tag equals
    /// `tag` in the bits of `mask` lands in `sges`, and its completion
    /// carries `recv_wr_id`. The provider returns the entry's handle
    /// ([`handle`](Self::handle)), which [`remove_tag`](Self::remove_tag)
    /// names.
    pub fn add_tag(
        wr_id: u64,
        recv_wr_id: u64,
        sges: &'a [Sge<'a>],
        tag: u64,
        mask: u64,
    ) -> SrqOp<'a> {
        let mut op = SrqOp::new(wr_id, sys::IBV_WR_TAG_ADD);
        op.raw.tm.add.recv_wr_id = recv_wr_id;
        op.raw.tm.add.sg_list = sges.as_ptr() as *mut sys::ibv_sge;
        op.raw.tm.add.num_sge = sges.len().min(i32::MAX as usize) as i32;
        op.raw.tm.add.tag = tag;
        op.raw.tm.add.mask = mask;
        op
    }

    /// Removes the tag entry `handle` (`IBV_WR_TAG_DEL`), as
    /// [`add_tag`](Self::add_tag) returned it.
    pub fn remove_tag(wr_id: u64, handle: u32) -> SrqOp<'a> {
        let mut op = SrqOp::new(wr_id, sys::IBV_WR_TAG_DEL);
        op.raw.tm.handle = handle;
        op
    }

    /// Tells the device how many unexpected messages the software has
    /// handled (`IBV_WR_TAG_SYNC` with `IBV_OPS_TM_SYNC`), so that it
    /// resumes matching in hardware.
    pub fn sync(wr_id: u64, unexpected_cnt: u32) -> SrqOp<'a> {
        let mut op = SrqOp::new(wr_id, sys::IBV_WR_TAG_SYNC);
        op.raw.tm.unexpected_cnt = unexpected_cnt;
        op.raw.flags |= sys::IBV_OPS_TM_SYNC as i32;
        op
    }

    /// Also syncs the unexpected count with an add or a remove
    /// (`IBV_OPS_TM_SYNC`).
    pub fn with_sync(mut self, unexpected_cnt: u32) -> Self {
        self.raw.tm.unexpected_cnt = unexpected_cnt;
        self.raw.flags |= sys::IBV_OPS_TM_SYNC as i32;
        self
    }

    /// Asks for a completion of the operation itself (`IBV_OPS_SIGNALED`).
    pub fn signaled(mut self) -> Self {
        self.raw.flags |= sys::IBV_OPS_SIGNALED as i32;
        self
    }

    /// The work request ID.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// The tag entry's handle: after an [`add_tag`](Self::add_tag) was
    /// posted, the one the provider gave; otherwise what the operation
    /// was made with.
    pub fn handle(&self) -> u32 {
        self.raw.tm.handle
    }

    /// The raw operation.
    pub fn as_raw(&self) -> &sys::ibv_ops_wr {
        &self.raw
    }
}

impl std::fmt::Debug for SrqOp<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrqOp")
            .field("wr_id", &self.raw.wr_id)
            .field("opcode", &self.raw.opcode)
            .field("flags", &self.raw.flags)
            .field("handle", &self.raw.tm.handle)
            .finish()
    }
}

impl<'a> Link for SrqOp<'a> {
    type Raw = sys::ibv_ops_wr;

    #[inline]
    unsafe fn link_raw(wr: *mut Self, next: *mut sys::ibv_ops_wr) {
        // SAFETY: per the contract; a place expression, no reference.
        unsafe { (*wr).raw.next = next };
    }

    #[inline]
    unsafe fn raw_of(wr: *mut Self) -> *mut sys::ibv_ops_wr {
        // SAFETY: per the contract; a place expression, no reference.
        unsafe { ptr::addr_of_mut!((*wr).raw) }
    }
}

impl SharedReceiveQueue {
    /// Posts tag operations (`ibv_post_srq_ops`) with one call to the
    /// provider: adds and removes of tagged buffers, and syncs. After the
    /// call each posted [`SrqOp::add_tag`] holds its entry's handle.
    /// [`TagMatchingSrq`](crate::TagMatchingSrq) is the safe way to the
    /// same operations.
    ///
    /// Only a tag-matching SRQ
    /// ([`SrqBuilder::tag_matching`](crate::SrqBuilder::tag_matching))
    /// takes them: any other is refused with `EINVAL` before the provider
    /// is called. So are, before the provider, operations whose `wr_id`
    /// or `recv_wr_id` has bit 63 set (the IDs of the safe API's tags, by
    /// which it knows their completions), and removals of a handle that
    /// the safe API holds. On failure the error says which operation was
    /// refused; it and the ones after it were not posted, the ones before
    /// it were. An empty slice posts nothing.
    ///
    /// # Safety
    /// The provider trusts what the operations name, beyond what this call
    /// can check (mlx5, the one provider with tag matching, indexes its tag
    /// table by the handle without a bound, and writes a small matched
    /// message into the added buffer with the CPU when its completion is
    /// polled). The caller guarantees that:
    /// - every [`SrqOp::remove_tag`] names a handle that a posted
    ///   [`SrqOp::add_tag`] of this SRQ, through this function, returned
    ///   and that was not removed since, nor released by its message's
    ///   completion;
    /// - the buffers of every added tag are registered at their process
    ///   address (no [`MrBuilder::iova`](crate::MrBuilder::iova)) and stay
    ///   registered and allocated until the tag's message completed or the
    ///   tag was removed, and an added tag names one SGE.
    pub unsafe fn post_srq_ops(&self, ops: &mut [SrqOp<'_>]) -> Result<()> {
        const VERB: &str = "ibv_post_srq_ops";
        let tags = self.tags(VERB)?;
        if ops.is_empty() {
            return Ok(());
        }
        let mut table = tags.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, op) in ops.iter().enumerate() {
            let r = &op.raw;
            let add = r.opcode == sys::IBV_WR_TAG_ADD;
            if r.wr_id & TOKEN_BIT != 0 || (add && r.tm.add.recv_wr_id & TOKEN_BIT != 0) {
                return Err(Error::invalid(
                    VERB,
                    format!("operation {i}: IDs with bit 63 set are the safe tag API's (TagMatchingSrq)"),
                ));
            }
            if r.opcode == sys::IBV_WR_TAG_DEL && table.holds_handle(r.tm.handle) {
                return Err(Error::invalid(
                    VERB,
                    format!(
                        "operation {i}: tag handle {} is held by TagMatchingSrq::add_tag",
                        r.tm.handle
                    ),
                ));
            }
        }
        // SAFETY: the handles and buffers the operations name are the
        // caller's (this function's contract); the table's lock is held,
        // so no safe add, removal or poll runs beside the post.
        let r = unsafe { self.post_ops(ops) };
        let posted = match &r {
            Ok(()) => ops.len(),
            // Unknown: treat every add as posted (detaching a tag of the
            // table needlessly only makes it unremovable).
            Err((_, index)) => index.unwrap_or(ops.len()),
        };
        // A handle the provider gave to one of these adds is no longer a
        // tag of the table's (the provider released that tag).
        for op in ops[..posted]
            .iter()
            .filter(|o| o.raw.opcode == sys::IBV_WR_TAG_ADD)
        {
            table.given_elsewhere(op.raw.tm.handle);
        }
        r.map_err(|(e, _)| e)
    }

    /// Links `ops` and posts them (`ibv_post_srq_ops`); on failure, the
    /// error and the index of the operation refused, when the provider
    /// named one of the list.
    ///
    /// # Safety
    /// As [`post_srq_ops`](Self::post_srq_ops): the removed handles and the
    /// added buffers are sound for the provider; the SRQ's tag table is
    /// locked by the caller.
    pub(crate) unsafe fn post_ops(
        &self,
        ops: &mut [SrqOp<'_>],
    ) -> std::result::Result<(), (Error, Option<usize>)> {
        const VERB: &str = "ibv_post_srq_ops";
        let head = crate::wr::link_list(ops);
        if head.is_null() {
            return Ok(());
        }
        let mut bad = ptr::null_mut();
        // SAFETY: a live SRQ; `link_list` linked the operations of `ops`
        // into a NULL-terminated list at `head`, borrowed mutably for the
        // call (the provider writes the handles into it); added buffers are
        // SGEs of registered memory; the handles and the buffers' lifetimes
        // past the call are the caller's (this function's contract).
        let rc = unsafe { sys::ibv_post_srq_ops(self.as_raw(), head, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        // Addresses only: `bad` is never read.
        let size = std::mem::size_of::<SrqOp<'_>>();
        let off = (bad as usize).wrapping_sub(head as usize);
        let index = (off % size == 0 && off / size < ops.len()).then_some(off / size);
        let e = crate::wr::post_error(VERB, rc, index)
            .unsupported_on(self.context().name(), "tag matching");
        Err((e, index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_add_names_its_buffer_tag_and_mask() {
        let op = SrqOp::add_tag(1, 2, &[], 0xabcd, 0xff00).signaled();
        let r = op.as_raw();
        assert_eq!((r.wr_id, r.opcode), (1, sys::IBV_WR_TAG_ADD));
        assert_eq!(r.flags, sys::IBV_OPS_SIGNALED as i32);
        let add = r.tm.add;
        assert_eq!(
            (add.recv_wr_id, add.tag, add.mask, add.num_sge),
            (2, 0xabcd, 0xff00, 0)
        );
        assert!(r.next.is_null());
    }

    #[test]
    fn a_remove_and_a_sync_carry_handle_and_count() {
        let del = SrqOp::remove_tag(3, 77).with_sync(5);
        assert_eq!(del.as_raw().opcode, sys::IBV_WR_TAG_DEL);
        assert_eq!(del.handle(), 77);
        assert_eq!(del.as_raw().tm.unexpected_cnt, 5);
        assert_eq!(del.as_raw().flags, sys::IBV_OPS_TM_SYNC as i32);
        let sync = SrqOp::sync(4, 9);
        assert_eq!(sync.as_raw().opcode, sys::IBV_WR_TAG_SYNC);
        assert_eq!(sync.as_raw().tm.unexpected_cnt, 9);
        assert_eq!(sync.as_raw().flags, sys::IBV_OPS_TM_SYNC as i32);
    }

    #[test]
    fn ops_link_in_order() {
        let mut ops = [
            SrqOp::sync(1, 0),
            SrqOp::remove_tag(2, 1),
            SrqOp::sync(3, 0),
        ];
        let head = crate::wr::link_list(&mut ops);
        assert_eq!(head as *const sys::ibv_ops_wr, ops[0].as_raw() as *const _);
        assert_eq!(ops[0].raw.next as *const _, ops[1].as_raw() as *const _);
        assert_eq!(ops[1].raw.next as *const _, ops[2].as_raw() as *const _);
        assert!(ops[2].raw.next.is_null());
    }
}
