//! Tag matching, safe: a tag-matching SRQ that polls its own CQ
//! ([`TagMatchingSrq`]), tags that own their buffers ([`TagBuffer`]) until
//! a completion proves the device done with them, and handles
//! ([`TagHandle`]) that remove only the tag they name.

use std::fmt;
use std::ops::{Range, RangeBounds};
use std::sync::{Arc, MutexGuard, PoisonError};

use crate::srq_tag_table::{TagTable, TmFields, TOKEN_BIT};
use crate::sys;
use crate::{
    AccessFlags, CompletionQueue, Error, MemoryRegion, RecvWr, Result, SharedReceiveQueue,
    SrqBuilder, SrqOp, TmCap, WcFlags,
};

pub use crate::srq_tag_table::{TagEvent, TagHandle};

/// A range of a [`MemoryRegion`] that a tag's matching message lands in.
/// The tag owns it from [`TagMatchingSrq::add_tag`] until its completion
/// gives it back.
pub struct TagBuffer {
    mr: MemoryRegion,
    range: Range<usize>,
}

impl TagBuffer {
    /// The bytes `range` of `mr`: checked against the region, at most
    /// 4 GiB - 1 (an SGE's length), and not empty (`EINVAL`): mlx5 keeps
    /// an empty tag's buffer address and size from the entry's previous
    /// tag, and would copy a small message there.
    pub fn new(mr: MemoryRegion, range: impl RangeBounds<usize>) -> Result<TagBuffer> {
        let sge = mr.sge(range)?;
        if sge.is_empty() {
            return Err(Error::invalid(
                "ibv_post_srq_ops",
                "a tag buffer cannot be empty",
            ));
        }
        let start = (sge.addr() - mr.iova()) as usize;
        let range = start..start + sge.len() as usize;
        Ok(TagBuffer { mr, range })
    }

    /// The whole of `mr`.
    pub fn whole(mr: MemoryRegion) -> Result<TagBuffer> {
        TagBuffer::new(mr, ..)
    }

    /// The region.
    pub fn region(&self) -> &MemoryRegion {
        &self.mr
    }

    /// The range of the region a message lands in.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// The region back.
    pub fn into_region(self) -> MemoryRegion {
        self.mr
    }
}

impl fmt::Debug for TagBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TagBuffer")
            .field("lkey", &self.mr.lkey())
            .field("range", &self.range)
            .finish()
    }
}

/// An [`add_tag`](TagMatchingSrq::add_tag) refused: why, and the buffer
/// back.
pub struct AddTagError {
    error: Error,
    buffer: Option<Box<TagBuffer>>,
}

impl AddTagError {
    fn new(error: Error, buffer: TagBuffer) -> AddTagError {
        AddTagError {
            error,
            buffer: Some(Box::new(buffer)),
        }
    }
    /// Why.
    pub fn error(&self) -> &Error {
        &self.error
    }
    /// The buffer, not posted; `None` when the add reached the provider
    /// though it failed (the provider gave a handle outside the SRQ's
    /// table: `ERANGE`), and the SRQ keeps the buffer until the tag's
    /// message or the SRQ's end.
    pub fn into_buffer(self) -> Option<TagBuffer> {
        self.buffer.map(|b| *b)
    }
}

impl fmt::Debug for AddTagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AddTagError")
            .field("error", &self.error)
            .field("buffer", &self.buffer)
            .finish()
    }
}

impl fmt::Display for AddTagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for AddTagError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<AddTagError> for Error {
    fn from(e: AddTagError) -> Error {
        e.error
    }
}

/// A completion of a tag-matching SRQ, as [`TagMatchingSrq::poll`] hands
/// it out.
#[derive(Debug)]
pub enum TmCompletion {
    /// A completion of one of the SRQ's tags or syncs.
    Tag(TagEvent<TagBuffer>),
    /// Any other: a message that matched no tag, in a receive posted to the
    /// SRQ (`IBV_WC_TM_NO_TAG`, or `IBV_WC_TM_RECV` of an unexpected
    /// message), or a completion in error.
    Other {
        /// The work request ID (a receive's, for a message).
        wr_id: u64,
        /// The status.
        status: crate::WcStatus,
        /// The opcode; meaningful for successful completions.
        opcode: crate::WcOpcode,
        /// The bytes received.
        byte_len: u32,
        /// The `IBV_WC_*` flags (`IBV_WC_TM_SYNC_REQ`: the device asks for
        /// a [`sync`](TagMatchingSrq::sync)).
        wc_flags: u32,
        /// The tag and private value of the message's header
        /// (`ibv_wc_read_tm_info`), where the CQ carries them.
        tm_info: Option<(u64, u32)>,
    },
}

/// A tag-matching SRQ with a safe tag API.
///
/// # Why this is sound
/// mlx5, the one provider with tag matching, trusts two things an
/// `ibv_post_srq_ops` caller gives it (see `srq_tag_table` for where in its
/// source): a removed handle indexes its tag table unchecked (a removal of
/// a free entry corrupts its free list), and an added buffer is written,
/// by the device and by the provider's own `memcpy` of small messages in
/// the poll that reports them, until the tag's last completion is polled.
/// So:
/// - the SRQ's CQ is the SRQ's alone: [`SrqBuilder::build_tag_matching`]
///   takes it by value and refuses it while any other handle to it lives,
///   and only [`TagMatchingSrq::poll`] polls it. All of a tag-matching
///   SRQ's completions (its tag operations' and its messages') arrive there
///   (rdma-core's `Documentation/tag_matching.md`: "Receive completions
///   are reported to the TM-SRQ's CQ", as its tag operations' are);
/// - `poll` holds the SRQ's tag table locked from before the provider
///   parses a completion until the table has taken it in, and so do
///   [`add_tag`](TagMatchingSrq::add_tag) and
///   [`remove_tag`](TagMatchingSrq::remove_tag) around their post: the
///   table knows every tag the provider released before any removal is
///   posted, and a removal names only a tag it holds as added;
/// - a tag's buffer is owned by the table (in the SRQ, dropped only after
///   `ibv_destroy_srq` succeeded, leaked if it failed) until the
///   completion that released the tag, which gives it back
///   ([`TagEvent::Received`], [`TagEvent::Removed`]). A tag whose message
///   never completes (the QP failed, a completion in error) keeps its
///   buffer until the SRQ is destroyed: memory held, never freed early;
/// - buffers are checked before the provider: one range of a
///   [`MemoryRegion`] of the SRQ's PD, registered at its process address
///   (the provider copies to the SGE's address), writable by the device;
/// - a completion is the table's only if its ID has bit 63 set, which
///   every ID of this API's tag operations has and no other ID posted to
///   the SRQ has: the SRQ itself is not handed out (QPs take it through
///   [`QpBuilder::tag_matching_srq`](crate::QpBuilder::tag_matching_srq)),
///   and its receives are posted by [`post_recv`](Self::post_recv), which
///   refuses such IDs.
///
/// The `unsafe` [`SharedReceiveQueue::post_srq_ops`] stays, on an SRQ
/// made by [`SrqBuilder::tag_matching`], for what this does not offer
/// (several operations in one post, unsignaled ones); it refuses the IDs
/// with bit 63 set.
///
/// Made by [`SrqBuilder::build_tag_matching`]; QPs receive through it with
/// [`QpBuilder::tag_matching_srq`](crate::QpBuilder::tag_matching_srq)
/// (each keeps the SRQ, its CQ and its tags' buffers alive after this value
/// is gone).
pub struct TagMatchingSrq {
    srq: SharedReceiveQueue,
    /// The SRQ's CQ, of which no other handle exists but the SRQ's own
    /// (never polled): polled only by [`poll`](Self::poll).
    cq: CompletionQueue,
}

impl fmt::Debug for TagMatchingSrq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TagMatchingSrq")
            .field("srq", &self.srq)
            .finish()
    }
}

impl<'a> SrqBuilder<'a> {
    /// Creates a tag-matching SRQ of `cap` with the safe tag API
    /// ([`TagMatchingSrq`]). `cq` receives all its completions and becomes
    /// the SRQ's alone. Refused with `EINVAL` before the provider: a CQ
    /// with another handle (a clone, a QP using it), of another context,
    /// not extended, or without [`WcFlags::BYTE_LEN`] and
    /// [`WcFlags::TM_INFO`] ([`CqBuilder::wc_flags`](crate::CqBuilder::wc_flags):
    /// the bytes and the tag of a message). rxe and siw have no tag
    /// matching: "not supported", `EOPNOTSUPP` (rxe refuses such a CQ so;
    /// siw makes a classic one).
    pub fn build_tag_matching(self, cq: CompletionQueue, cap: TmCap) -> Result<TagMatchingSrq> {
        const VERB: &str = "ibv_create_srq_ex";
        if Arc::strong_count(&cq.inner) != 1 || Arc::weak_count(&cq.inner) != 0 {
            return Err(Error::invalid(
                VERB,
                "the CQ of a TagMatchingSrq must be its alone: no clone of it, no QP using it",
            ));
        }
        crate::pd::same_context(VERB, "PD", self.pd().context(), "CQ", cq.context())?;
        if let Some(why) = cq_fault(cq.wc_flags()) {
            return Err(Error::invalid(VERB, why));
        }
        let srq = self.with_tag_matching(&cq, cap).build()?;
        Ok(TagMatchingSrq { srq, cq })
    }
}

impl TagMatchingSrq {
    /// The SRQ, for a QP to receive through
    /// ([`QpBuilder::tag_matching_srq`](crate::QpBuilder::tag_matching_srq)).
    pub(crate) fn srq(&self) -> &SharedReceiveQueue {
        &self.srq
    }

    /// Posts receives to the SRQ, for the messages that match no tag
    /// (unexpected ones, and those without a tag), as
    /// [`SharedReceiveQueue::post_recv`] does. A `wr_id` with bit 63 set
    /// is refused (`EINVAL`, before the provider, nothing posted): such IDs
    /// are the tags', by which [`poll`](Self::poll) knows their
    /// completions.
    pub fn post_recv(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        check_recv_ids(wrs)?;
        self.srq.post_recv(wrs)
    }

    /// The number of receives the SRQ holds
    /// ([`SharedReceiveQueue::max_wr`]).
    pub fn max_wr(&self) -> u32 {
        self.srq.max_wr()
    }

    /// The SRQ's size, SGEs per receive and limit
    /// ([`SharedReceiveQueue::query`]).
    pub fn query(&self) -> Result<crate::SrqAttr> {
        self.srq.query()
    }

    /// Arms the SRQ's limit event ([`SharedReceiveQueue::set_limit`]).
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        self.srq.set_limit(limit)
    }

    /// The raw SRQ, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_srq {
        self.srq.as_raw()
    }

    fn table(&self, verb: &'static str) -> Result<MutexGuard<'_, TagTable<TagBuffer>>> {
        Ok(self
            .srq
            .tags(verb)?
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }

    /// The tags held: added and not yet given back (their buffers owned by
    /// the SRQ).
    pub fn tags_held(&self) -> usize {
        self.table("ibv_post_srq_ops").map_or(0, |t| t.len())
    }

    /// Adds `buffer` to the device's matching list under `tag` in the bits
    /// of `mask` (`IBV_WR_TAG_ADD`, signaled): a message so tagged lands in
    /// it. `user_id` comes back in the tag's [`TagEvent`]s. The SRQ owns
    /// the buffer until a completion gives it back.
    ///
    /// Refused with `EINVAL`, before the provider, the buffer given back: a
    /// region of another context or PD, registered at an IOVA that is not
    /// its address, or without [`AccessFlags::LOCAL_WRITE`]. The provider
    /// refuses a full table (mlx5: `ENOMEM`).
    pub fn add_tag(
        &self,
        tag: u64,
        mask: u64,
        buffer: TagBuffer,
        user_id: u64,
    ) -> std::result::Result<TagHandle, AddTagError> {
        let mut table = match self.check_buffer(&buffer) {
            Ok(t) => t,
            Err(error) => return Err(AddTagError::new(error, buffer)),
        };
        // The table's room for the tag, taken before the post: after it,
        // nothing may fail or panic while the device owns the buffer.
        if let Err(error) = table.reserve_one() {
            return Err(AddTagError::new(error, buffer));
        }
        let token = table.token();
        let sge = match buffer.mr.sge(buffer.range()) {
            Ok(s) => [s],
            Err(error) => return Err(AddTagError::new(error, buffer)),
        };
        let mut op = [SrqOp::add_tag(token, token, &sge, tag, mask).signaled()];
        // SAFETY: an add removes no handle. Its one SGE is a non-empty
        // range of `buffer`'s region (bounds checked by `sge`, emptiness
        // by `TagBuffer::new`, so mlx5 records this address and size), of
        // this SRQ's PD, registered at its process address and writable
        // (`check_buffer`), so the provider's copy to the SGE address stays
        // in the region. The table owns the buffer from this post until
        // the completion that releases the tag (taken in by `poll`) or the
        // SRQ's destruction (SrqInner's drop), and its lock is held; the
        // room to record it was reserved, so `added` below cannot fail but
        // by returning the buffer-less ERANGE. The IDs have TOKEN_BIT set:
        // no other ID posted to this SRQ does (post_srq_ops and
        // `post_recv` refuse them; the SRQ is not handed out).
        let r = unsafe { self.srq.post_ops(&mut op) };
        let handle = op[0].handle();
        match r {
            // Posted with a handle outside the table: the table keeps the
            // buffer until its message.
            Ok(()) => table
                .added(token, handle, user_id, buffer)
                .map_err(|error| AddTagError {
                    error,
                    buffer: None,
                }),
            Err((error, _)) => Err(AddTagError::new(error, buffer)),
        }
    }

    /// The table, locked, if `buffer` may be added to this SRQ.
    fn check_buffer(&self, buffer: &TagBuffer) -> Result<MutexGuard<'_, TagTable<TagBuffer>>> {
        const VERB: &str = "ibv_post_srq_ops";
        let mr = &buffer.mr;
        crate::pd::same_context(
            VERB,
            "SRQ",
            self.srq.context(),
            "tag buffer",
            mr.pd().context(),
        )?;
        let fault = buffer_fault(
            self.srq.pd().as_raw() == mr.pd().as_raw(),
            mr.iova(),
            mr.addr() as u64,
            mr.access(),
        );
        if let Some(why) = fault {
            return Err(Error::invalid(VERB, why));
        }
        self.table(VERB)
    }

    /// Removes the tag `handle` names (`IBV_WR_TAG_DEL`, signaled): its
    /// completion gives the buffer back ([`TagEvent::Removed`]), or says
    /// that a message consumed the tag first ([`TagEvent::RemoveFailed`];
    /// the buffer comes with [`TagEvent::Received`]).
    ///
    /// Refused with `EINVAL` before the provider: a handle of another SRQ,
    /// one removed already, one whose message has completed.
    pub fn remove_tag(&self, handle: TagHandle) -> Result<()> {
        let mut table = self.table("ibv_post_srq_ops")?;
        table.check_remove(&handle)?;
        let mut op = [SrqOp::remove_tag(handle.token, handle.handle).signaled()];
        // SAFETY: the handle names a tag the table holds as added (checked
        // just now, under the lock held since): the provider gave it to
        // this SRQ's add of that tag, no removal was posted for it, and
        // the provider has not released it: it releases a tag only in a
        // poll of the SRQ's CQ (which `poll` alone runs, taking each
        // completion into the table under this lock) or in an unsignaled
        // removal (this API posts none; `post_srq_ops` refuses the table's
        // handles). The ID has TOKEN_BIT set, as every ID of the table's
        // and no other posted to this SRQ.
        unsafe { self.srq.post_ops(&mut op) }.map_err(|(e, _)| e)?;
        table.removing(&handle);
        Ok(())
    }

    /// Tells the device how many unexpected messages the software has
    /// handled (`IBV_WR_TAG_SYNC`, signaled, with `IBV_OPS_TM_SYNC`), the
    /// phase count it resumes matching from; answered by
    /// [`TagEvent::Synced`]. Completions with `IBV_WC_TM_SYNC_REQ` ask for
    /// it.
    pub fn sync(&self, unexpected_cnt: u32) -> Result<()> {
        let table = self.table("ibv_post_srq_ops")?;
        let mut op = [SrqOp::sync(table.sync_token(), unexpected_cnt).signaled()];
        // SAFETY: a sync names no handle and no buffer; the table is
        // locked; its ID has TOKEN_BIT set.
        unsafe { self.srq.post_ops(&mut op) }.map_err(|(e, _)| e)
    }

    /// Asks for a completion event on the CQ's channel at its next
    /// completion ([`CompletionQueue::req_notify`]); wait for it with
    /// [`get_event`](Self::get_event) or on the channel's fd, then
    /// [`poll`](Self::poll). Arming polls nothing.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.cq.req_notify(solicited_only)
    }

    /// Waits for (or, non-blocking, checks for) a completion event of the
    /// CQ ([`CompletionQueue::get_event`]); consumes no completion.
    pub fn get_event(&self) -> Result<bool> {
        self.cq.get_event()
    }

    /// The CQ's completion channel, if it was made with one: its fd is
    /// what an event loop waits on. (The CQ itself is not handed out: only
    /// [`poll`](Self::poll) may poll it.)
    pub fn channel(&self) -> Option<&crate::CompletionChannel> {
        self.cq.channel()
    }

    /// Polls the SRQ's CQ (an extended poll) for up to `max` completions,
    /// appending them to `out`; returns how many. Tag completions go
    /// through the SRQ's table first, which gives back the buffers the
    /// device is done with.
    pub fn poll(&self, out: &mut Vec<TmCompletion>, max: usize) -> Result<usize> {
        let mut table = self.table("ibv_start_poll")?;
        if max == 0 {
            // A poll started is a completion parsed (and, if a tag's,
            // released by the provider) and consumed when the poll ends:
            // start none that would not reach the table.
            return Ok(0);
        }
        let Some(mut poll) = self.cq.start_poll()? else {
            return Ok(0);
        };
        let mut n = 0;
        // Every completion the poll parses is yielded by `next` and taken
        // into the table: `next` is called only while one more fits, and
        // the poll ends (consuming what was yielded, no more) right after.
        while n < max {
            let Some(wc) = poll.next() else { break };
            let fields = TmFields {
                wr_id: wc.wr_id(),
                status: wc.status(),
                opcode: raw_opcode(wc.opcode()),
                wc_flags: wc.wc_flags(),
                byte_len: wc.byte_len(),
            };
            out.push(match table.complete(fields) {
                Some(ev) => TmCompletion::Tag(ev),
                None => TmCompletion::Other {
                    wr_id: fields.wr_id,
                    status: fields.status,
                    opcode: wc.opcode(),
                    byte_len: fields.byte_len,
                    wc_flags: fields.wc_flags,
                    tm_info: wc.tm_info(),
                },
            });
            n += 1;
        }
        // The poll ends (ibv_end_poll) before the lock is released.
        drop(poll);
        drop(table);
        Ok(n)
    }
}

/// The C opcode of a tag-matching completion (which [`crate::WcOpcode`]
/// keeps as `Other`) or of a receive; `IBV_WC_SEND` for the rest, which
/// mean nothing to the tag table.
fn raw_opcode(op: crate::WcOpcode) -> sys::ibv_wc_opcode {
    match op {
        crate::WcOpcode::Other(raw) => raw,
        crate::WcOpcode::Recv => sys::IBV_WC_RECV,
        _ => sys::IBV_WC_SEND,
    }
}

/// Refuses receives of which one has a `wr_id` with bit 63 set: the IDs
/// of a [`TagMatchingSrq`]'s tags.
fn check_recv_ids(wrs: &[RecvWr<'_>]) -> Result<()> {
    match wrs.iter().position(|wr| wr.wr_id() & TOKEN_BIT != 0) {
        Some(i) => Err(Error::invalid(
            "ibv_post_srq_recv",
            format!("work request {i}: a wr_id with bit 63 set is reserved for the SRQ's tags (TagHandle::wr_id); nothing was posted"),
        )),
        None => Ok(()),
    }
}

/// Why a CQ (of `wc_flags`, `None` if classic) cannot be a
/// [`TagMatchingSrq`]'s: the table reads a completion's bytes, and a
/// message's tag is what a user needs of it.
fn cq_fault(wc_flags: Option<WcFlags>) -> Option<&'static str> {
    match wc_flags {
        None => Some("the CQ of a TagMatchingSrq must be extended (CqBuilder::wc_flags)"),
        Some(f) if !f.contains(WcFlags::BYTE_LEN | WcFlags::TM_INFO) => Some(
            "the CQ of a TagMatchingSrq needs WcFlags::BYTE_LEN and WcFlags::TM_INFO (CqBuilder::wc_flags)",
        ),
        Some(_) => None,
    }
}

/// Why a region (of the SRQ's context) may not hold a tag's message: of
/// another PD, registered at an IOVA other than its address (mlx5 copies
/// small messages to the SGE's address with the CPU), or not writable by
/// the device.
fn buffer_fault(same_pd: bool, iova: u64, addr: u64, access: AccessFlags) -> Option<&'static str> {
    if !same_pd {
        Some("the tag buffer is of another PD than the SRQ")
    } else if iova != addr {
        Some("a tag buffer must be registered at its process address (no MrBuilder::iova): the provider copies small messages to the SGE's address")
    } else if !access.contains(AccessFlags::LOCAL_WRITE) {
        Some("a tag buffer needs LOCAL_WRITE: the device writes the message there")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_of_another_pd_at_an_iova_or_read_only_is_refused() {
        let rw = AccessFlags::LOCAL_WRITE;
        assert_eq!(buffer_fault(true, 0x1000, 0x1000, rw), None);
        let other_pd = buffer_fault(false, 0x1000, 0x1000, rw).unwrap();
        assert!(other_pd.contains("another PD"));
        let iova = buffer_fault(true, 0x2000, 0x1000, rw).unwrap();
        assert!(iova.contains("process address"));
        let ro = buffer_fault(true, 0x1000, 0x1000, AccessFlags::REMOTE_READ).unwrap();
        assert!(ro.contains("LOCAL_WRITE"));
    }

    #[test]
    fn a_cq_without_byte_len_and_tm_info_or_classic_is_refused() {
        let need = WcFlags::BYTE_LEN | WcFlags::TM_INFO;
        assert_eq!(cq_fault(Some(need)), None);
        assert_eq!(cq_fault(Some(WcFlags::STANDARD | WcFlags::TM_INFO)), None);
        assert!(cq_fault(None).unwrap().contains("extended"));
        for f in [WcFlags::STANDARD, WcFlags::TM_INFO, WcFlags::BYTE_LEN] {
            assert!(cq_fault(Some(f)).unwrap().contains("TM_INFO"), "{f:?}");
        }
    }

    #[test]
    fn a_receive_with_a_tag_id_is_refused_and_nothing_is_posted() {
        let ok = [RecvWr::new(1, &[]), RecvWr::new(u64::MAX >> 1, &[])];
        check_recv_ids(&ok).unwrap();
        check_recv_ids(&[]).unwrap();
        let tag_id = TagTable::<()>::new(1).token();
        let bad = [RecvWr::new(1, &[]), RecvWr::new(tag_id, &[])];
        let e = check_recv_ids(&bad).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(e.to_string().contains("work request 1"), "{e}");
        assert!(e.to_string().contains("bit 63"), "{e}");
        let e = check_recv_ids(&[RecvWr::new(1 << 63, &[])]).unwrap_err();
        assert!(e.to_string().contains("work request 0"), "{e}");
    }

    #[test]
    fn a_tag_matching_srq_and_its_completions_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<TagMatchingSrq>();
        send_sync::<TagBuffer>();
        send_sync::<TagHandle>();
        send_sync::<TmCompletion>();
        send_sync::<AddTagError>();
    }

    #[test]
    fn only_tag_and_receive_opcodes_reach_the_table() {
        use crate::WcOpcode;
        assert_eq!(
            raw_opcode(WcOpcode::from_raw(sys::IBV_WC_TM_DEL)),
            sys::IBV_WC_TM_DEL
        );
        assert_eq!(raw_opcode(WcOpcode::Recv), sys::IBV_WC_RECV);
        assert_eq!(raw_opcode(WcOpcode::RdmaWrite), sys::IBV_WC_SEND);
    }
}
