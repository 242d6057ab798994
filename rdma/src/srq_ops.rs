//! Tag operations on a tag-matching SRQ (`ibv_post_srq_ops`): adding a
//! tagged receive buffer to the device's matching list, removing it, and
//! syncing the software's count of unexpected messages.

use std::marker::PhantomData;
use std::ptr;
use std::sync::PoisonError;

use crate::srq_tag_table::{TagTable, TOKEN_BIT};
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
    /// The handle an add holds after a post that did not reach it (the
    /// provider writes an add's handle when it takes it).
    pub const NOT_POSTED: u32 = u32::MAX;

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
    /// names. `sges` must be one entry of at least one byte:
    /// [`SharedReceiveQueue::post_srq_ops`] refuses any other add.
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
    /// posted, the one the provider gave ([`NOT_POSTED`](Self::NOT_POSTED)
    /// if a failed post did not reach it); otherwise what the operation
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
    /// which it knows their completions), removals of a handle that the
    /// safe API holds, and adds that do not name exactly one SGE of at
    /// least one byte. On failure the error says which operation was
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
    /// - the buffer of every added tag (its one SGE, of at least one byte:
    ///   mlx5 keeps an empty add's address and size from the entry's
    ///   previous tag, which this call therefore refuses) is registered at
    ///   its process address (no [`MrBuilder::iova`](crate::MrBuilder::iova))
    ///   and stays registered and allocated until the tag's message
    ///   completed or the tag was removed.
    pub unsafe fn post_srq_ops(&self, ops: &mut [SrqOp<'_>]) -> Result<()> {
        const VERB: &str = "ibv_post_srq_ops";
        let tags = self.tags(VERB)?;
        if ops.is_empty() {
            return Ok(());
        }
        let mut table = tags.lock().unwrap_or_else(PoisonError::into_inner);
        check_ops(ops, &table)?;
        mark_not_posted(ops);
        // SAFETY: the handles and buffers the operations name are the
        // caller's (this function's contract); the table's lock is held,
        // so no safe add, removal or poll runs beside the post.
        let r = unsafe { self.post_ops(ops) };
        let posted = match &r {
            Ok(()) => ops.len(),
            // Unknown: treat every add as posted (detaching a tag of the
            // table needlessly only makes it unremovable); the adds the
            // provider did not reach hold NOT_POSTED.
            Err((_, index)) => index.unwrap_or(ops.len()),
        };
        given_elsewhere(&mut table, &ops[..posted]);
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

/// Refuses, before the provider, what [`SharedReceiveQueue::post_srq_ops`]
/// does not pass: the safe API's IDs and handles, and adds without exactly
/// one SGE of at least one byte.
fn check_ops<B>(ops: &[SrqOp<'_>], table: &TagTable<B>) -> Result<()> {
    const VERB: &str = "ibv_post_srq_ops";
    for (i, op) in ops.iter().enumerate() {
        let r = &op.raw;
        let add = r.opcode == sys::IBV_WR_TAG_ADD;
        if r.wr_id & TOKEN_BIT != 0 || (add && r.tm.add.recv_wr_id & TOKEN_BIT != 0) {
            return Err(Error::invalid(
                VERB,
                format!(
                    "operation {i}: IDs with bit 63 set are the safe tag API's (TagMatchingSrq)"
                ),
            ));
        }
        if add && r.tm.add.num_sge != 1 {
            return Err(Error::invalid(
                VERB,
                format!(
                    "operation {i}: an added tag names exactly one SGE, not {}",
                    r.tm.add.num_sge
                ),
            ));
        }
        // SAFETY: `SrqOp::add_tag` set `sg_list` to the start of the SGE
        // slice the operation borrows for its lifetime, and `num_sge` to
        // that slice's length, 1 here (checked just above); nothing else
        // writes them.
        if add && unsafe { (*r.tm.add.sg_list).length } == 0 {
            return Err(Error::invalid(
                VERB,
                format!("operation {i}: an added tag's SGE is empty (mlx5 would keep the buffer of the entry's previous tag)"),
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
    Ok(())
}

/// Sets every add's handle to [`SrqOp::NOT_POSTED`], which the provider
/// overwrites in the adds it takes.
fn mark_not_posted(ops: &mut [SrqOp<'_>]) {
    for op in ops {
        if op.raw.opcode == sys::IBV_WR_TAG_ADD {
            op.raw.tm.handle = SrqOp::NOT_POSTED;
        }
    }
}

/// Tells the table which handles the provider gave to the posted adds of
/// `posted`: a tag it held at one was released by the provider. Adds the
/// provider did not reach hold [`SrqOp::NOT_POSTED`] and are skipped.
fn given_elsewhere<B>(table: &mut TagTable<B>, posted: &[SrqOp<'_>]) {
    for op in posted {
        if op.raw.opcode == sys::IBV_WR_TAG_ADD && op.raw.tm.handle != SrqOp::NOT_POSTED {
            table.given_elsewhere(op.raw.tm.handle);
        }
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

    fn sge(len: usize) -> Sge<'static> {
        Sge::of(0x1000, 0, len, 7, "test").unwrap()
    }

    #[test]
    fn an_add_without_exactly_one_nonempty_sge_is_refused() {
        let table: TagTable<()> = TagTable::new(4);
        let (empty, one) = ([sge(0)], [sge(64)]);
        let two = [sge(64), sge(64)];
        let refused = |ops: &[SrqOp<'_>], why: &str| {
            let e = check_ops(ops, &table).unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL);
            assert!(e.to_string().contains(why), "{e}");
        };
        refused(&[SrqOp::add_tag(1, 2, &[], 3, 4)], "exactly one SGE, not 0");
        refused(
            &[SrqOp::add_tag(1, 2, &two, 3, 4)],
            "exactly one SGE, not 2",
        );
        refused(
            &[SrqOp::add_tag(1, 2, &empty, 3, 4)],
            "operation 0: an added tag's SGE is empty",
        );
        // Named by its index, after a good one.
        refused(
            &[
                SrqOp::add_tag(1, 2, &one, 3, 4),
                SrqOp::add_tag(1, 2, &empty, 3, 4),
            ],
            "operation 1",
        );
        check_ops(
            &[SrqOp::add_tag(1, 2, &one, 3, 4), SrqOp::sync(5, 0)],
            &table,
        )
        .unwrap();
        // Removals and syncs name no SGE.
        check_ops(&[SrqOp::remove_tag(1, 3)], &table).unwrap();
    }

    #[test]
    fn the_safe_apis_ids_and_handles_are_refused() {
        let mut table: TagTable<()> = TagTable::new(4);
        let tok = table.token();
        table.added(tok, 2, 0, ()).unwrap();
        let one = [sge(64)];
        for ops in [
            [SrqOp::sync(TOKEN_BIT, 0)],
            [SrqOp::add_tag(1, TOKEN_BIT | 5, &one, 3, 4)],
            [SrqOp::remove_tag(1, 2)],
        ] {
            assert_eq!(check_ops(&ops, &table).unwrap_err().errno(), libc::EINVAL);
        }
    }

    #[test]
    fn an_add_the_provider_never_reached_detaches_no_tag() {
        let mut table: TagTable<()> = TagTable::new(4);
        let tok = table.token();
        table.added(tok, 0, 0, ()).unwrap();
        let one = [sge(64)];
        let mut ops = [SrqOp::sync(1, 0), SrqOp::add_tag(1, 2, &one, 3, 4)];
        // A failed post with no failing index: every add counts as posted,
        // but this one kept the mark (the provider wrote no handle 0).
        mark_not_posted(&mut ops);
        assert_eq!(ops[1].handle(), SrqOp::NOT_POSTED);
        assert_eq!(ops[0].handle(), 0);
        given_elsewhere(&mut table, &ops);
        assert!(table.holds_handle(0));
        // One the provider took at handle 0 does.
        ops[1].raw.tm.handle = 0;
        given_elsewhere(&mut table, &ops);
        assert!(!table.holds_handle(0));
    }
}
