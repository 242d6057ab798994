//! The host side of a tag-matching SRQ's tags: which provider handles this
//! crate's safe API holds, the buffer each tag owns, and the completions
//! that give a buffer back. Plain data, no verbs: [`TagMatchingSrq`]
//! calls it around `ibv_post_srq_ops` and its poll, under one lock.
//!
//! The rules follow mlx5, the one provider with tag matching
//! (`providers/mlx5/qp.c` `mlx5_post_srq_ops`, `cq.c`
//! `handle_tag_matching` and `mlx5_cq_read_wc_flags`):
//! - its tag table has `max_num_tags + 1` entries, and it indexes it by a
//!   removed handle without a bound; a removal of an entry that is free
//!   corrupts its free list. So a handle is removed only while this table
//!   holds it as added: its range is checked, a handle of another SRQ or
//!   one removed already is refused;
//! - it releases an entry (which a later add may then be given) in the
//!   poll that parses the entry's last completion: a matched message whose
//!   data is in place (`IBV_WC_TM_DATA_VALID` with status success,
//!   rendezvous-incomplete or local-length error, the completion carrying
//!   the tag's `recv_wr_id`), or the completion of a successful signaled
//!   removal (`IBV_WC_TM_DEL`, success, the removal's `wr_id`). In that
//!   poll it copies a small message into the buffer with the CPU. Those
//!   completions, and only they, give the buffer back here.
//!
//! [`TagMatchingSrq`]: crate::TagMatchingSrq

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys;
use crate::{Error, Result};

/// The bit that every work request ID of the safe API's tag operations
/// has set, and that every other way to a tag-matching SRQ refuses in the
/// IDs it is given ([`SharedReceiveQueue::post_srq_ops`] in its operations',
/// [`TagMatchingSrq::post_recv`] in its receives'; the SRQ of a
/// [`TagMatchingSrq`] is not handed out): so a completion of the SRQ's CQ
/// carrying such an ID is one of the safe API's.
///
/// [`SharedReceiveQueue::post_srq_ops`]: crate::SharedReceiveQueue::post_srq_ops
/// [`TagMatchingSrq::post_recv`]: crate::TagMatchingSrq::post_recv
/// [`TagMatchingSrq`]: crate::TagMatchingSrq
pub(crate) const TOKEN_BIT: u64 = 1 << 63;
/// Set, beside [`TOKEN_BIT`], in the ID of a sync operation.
const SYNC_BIT: u64 = 1 << 62;

/// The next tag token, unique in the process: a token names one added tag
/// of one SRQ, never another, so a completion or handle of another SRQ (or
/// of an earlier tag at the same handle) finds nothing here.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A new tag token: [`TOKEN_BIT`] set, [`SYNC_BIT`] clear.
fn next_token() -> u64 {
    TOKEN_BIT | (NEXT_TOKEN.fetch_add(1, Ordering::Relaxed) & (SYNC_BIT - 1))
}

/// A tag added through the safe API, as [`TagMatchingSrq::add_tag`]
/// returns it: the provider's handle and which add it was.
///
/// [`TagMatchingSrq::add_tag`]: crate::TagMatchingSrq::add_tag
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TagHandle {
    pub(crate) srq: u64,
    pub(crate) token: u64,
    pub(crate) handle: u32,
}

impl TagHandle {
    /// The provider's handle of the tag (`ibv_ops_wr.tm.handle`).
    pub fn raw(&self) -> u32 {
        self.handle
    }
    /// The work request ID of the tag's add and removal, and of its
    /// matched message's completion (`recv_wr_id`).
    pub fn wr_id(&self) -> u64 {
        self.token
    }
}

/// Where a held tag is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Added, not removed: removable.
    Added,
    /// A signaled removal was posted; its completion says whether it took.
    Removing,
    /// Its handle is no longer its own (the provider gave it to a later
    /// add): never removed by handle again; its buffer comes back with its
    /// message, or when the SRQ is destroyed.
    Detached,
    /// Its buffer was given back (the provider released the tag), but the
    /// completion of its add has not been polled yet: kept, without a
    /// buffer, only to report that completion as [`TagEvent::Added`].
    Released,
}

#[derive(Debug)]
struct Entry<B> {
    user_id: u64,
    handle: u32,
    state: State,
    /// Whether the add's own completion (`IBV_WC_TM_ADD`) is still to
    /// come: it may be polled after the tag's last one.
    add_pending: bool,
    /// `None` once given back ([`State::Released`]).
    buffer: Option<B>,
}

/// What a tag-matching completion meant for the tags of the table.
#[derive(Debug, PartialEq, Eq)]
pub enum TagEvent<B> {
    /// The device took an add (`IBV_WC_TM_ADD`) of the tag added with
    /// `user_id`; `ok` says whether it succeeded.
    Added {
        /// The ID given to the add.
        user_id: u64,
        /// Whether the add succeeded.
        ok: bool,
    },
    /// A message matched the tag (`IBV_WC_TM_MATCH` without data yet): its
    /// data follows in a later completion; the buffer stays with the SRQ.
    /// A rendezvous the software finishes is matched so too (mlx5's
    /// `TM_CONSUMED_SW_RDNV`, status `TagMatchingRndvIncomplete`).
    Matched {
        /// The ID given to the add.
        user_id: u64,
    },
    /// The tag's message is complete: its data is in `buffer`, which the
    /// device no longer writes and is given back. `status` is success, a
    /// rendezvous the software finishes (`TagMatchingRndvIncomplete`), or
    /// a message longer than the buffer (`LocalLengthError`, nothing
    /// copied).
    Received {
        /// The ID given to the add.
        user_id: u64,
        /// The completion's status.
        status: crate::WcStatus,
        /// The bytes the message carried, as the completion says.
        byte_len: u32,
        /// The buffer, given back.
        buffer: B,
    },
    /// The tag was removed (`IBV_WC_TM_DEL`, success): no message reached
    /// it, and `buffer` is given back.
    Removed {
        /// The ID given to the add.
        user_id: u64,
        /// The buffer, given back.
        buffer: B,
    },
    /// A removal did not take (`IBV_WC_TM_DEL` with an error status,
    /// `TagMatchingError` when a message had consumed the tag first): the
    /// buffer comes back with that message's completion.
    RemoveFailed {
        /// The ID given to the add.
        user_id: u64,
        /// The completion's status.
        status: crate::WcStatus,
    },
    /// A sync took effect (`IBV_WC_TM_SYNC`).
    Synced {
        /// Whether it succeeded.
        ok: bool,
    },
}

/// The fields of a completion that decide what it means here.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TmFields {
    pub wr_id: u64,
    pub status: crate::WcStatus,
    pub opcode: sys::ibv_wc_opcode,
    pub wc_flags: u32,
    pub byte_len: u32,
}

/// The tags an SRQ's safe API holds.
#[derive(Debug)]
pub(crate) struct TagTable<B> {
    /// Names the SRQ in its handles.
    srq: u64,
    /// Provider handle -> the token of the tag held at it; `max_num_tags +
    /// 1` slots, as many as mlx5's table has entries.
    slots: Vec<Option<u64>>,
    entries: HashMap<u64, Entry<B>>,
}

impl<B> TagTable<B> {
    /// The table of an SRQ made with room for `max_num_tags` tags.
    pub fn new(max_num_tags: u32) -> TagTable<B> {
        TagTable {
            srq: next_token(),
            slots: vec![None; max_num_tags as usize + 1],
            entries: HashMap::new(),
        }
    }

    /// A token for a new tag's add.
    pub fn token(&self) -> u64 {
        next_token()
    }

    /// The work request ID of this SRQ's syncs.
    pub fn sync_token(&self) -> u64 {
        TOKEN_BIT | SYNC_BIT | (self.srq & (SYNC_BIT - 1))
    }

    /// The tags held (added, or removal pending, or detached), whose
    /// buffers the table owns.
    pub fn len(&self) -> usize {
        self.entries.values().filter(|e| e.buffer.is_some()).count()
    }

    /// Makes room for one more tag, so that [`added`](Self::added) after
    /// the add's post allocates nothing (and so cannot fail or panic while
    /// the device owns the buffer): `ENOMEM` when there is none.
    pub fn reserve_one(&mut self) -> Result<()> {
        self.entries.try_reserve(1).map_err(|e| {
            Error::new("ibv_post_srq_ops", libc::ENOMEM)
                .with_hint(format!("no room for one more tag: {e}"))
        })
    }

    /// Whether the table holds the handle as one of its tags': a handle
    /// the `unsafe` operations must not remove.
    pub fn holds_handle(&self, handle: u32) -> bool {
        matches!(self.slots.get(handle as usize), Some(Some(_)))
    }

    /// Records that the provider gave `handle` to an add that is not the
    /// table's (an `unsafe` one): a tag the table held there was released
    /// by the provider, and is removable no more.
    pub fn given_elsewhere(&mut self, handle: u32) {
        if let Some(slot) = self.slots.get_mut(handle as usize) {
            if let Some(old) = slot.take() {
                if let Some(e) = self.entries.get_mut(&old) {
                    e.state = State::Detached;
                }
            }
        }
    }

    /// Records the tag `token` that the provider took at `handle`, owning
    /// `buffer`. A handle outside the table (a provider that numbers
    /// otherwise) still keeps the buffer, detached, and is an error.
    /// Allocates nothing after [`reserve_one`](Self::reserve_one) but the
    /// error's text.
    pub fn added(&mut self, token: u64, handle: u32, user_id: u64, buffer: B) -> Result<TagHandle> {
        self.given_elsewhere(handle);
        let in_range = (handle as usize) < self.slots.len();
        let state = if in_range {
            self.slots[handle as usize] = Some(token);
            State::Added
        } else {
            State::Detached
        };
        self.entries.insert(
            token,
            Entry {
                user_id,
                handle,
                state,
                add_pending: true,
                buffer: Some(buffer),
            },
        );
        if !in_range {
            return Err(Error::new("ibv_post_srq_ops", libc::ERANGE).with_hint(format!(
                "the provider gave tag handle {handle}, outside the SRQ's table of {}; the tag stays posted and its buffer held until its message or the SRQ's end",
                self.slots.len()
            )));
        }
        Ok(TagHandle {
            srq: self.srq,
            token,
            handle,
        })
    }

    /// Checks that `h` names a tag of this table that is added and not
    /// removed: of this SRQ, inside the table, still at its handle.
    pub fn check_remove(&self, h: &TagHandle) -> Result<()> {
        const VERB: &str = "ibv_post_srq_ops";
        if h.srq != self.srq {
            return Err(Error::invalid(VERB, "the tag handle is of another SRQ"));
        }
        if h.handle as usize >= self.slots.len() {
            return Err(Error::invalid(
                VERB,
                format!(
                    "tag handle {} is outside the SRQ's table of {}",
                    h.handle,
                    self.slots.len()
                ),
            ));
        }
        let held = self.slots[h.handle as usize] == Some(h.token)
            && self
                .entries
                .get(&h.token)
                .is_some_and(|e| e.state == State::Added);
        if !held {
            return Err(Error::invalid(
                VERB,
                "the tag was removed already, or its message has completed",
            ));
        }
        Ok(())
    }

    /// Records that a signaled removal of `h` (checked) was posted.
    pub fn removing(&mut self, h: &TagHandle) {
        if let Some(e) = self.entries.get_mut(&h.token) {
            e.state = State::Removing;
        }
    }

    /// Gives back the buffer of the tag `token`, which the provider
    /// released; the entry stays (buffer-less) while its add's completion
    /// is to come. `None` if it was given back already.
    fn release(&mut self, token: u64) -> Option<B> {
        let e = self.entries.get_mut(&token)?;
        let buffer = e.buffer.take()?;
        e.state = State::Released;
        let (handle, add_pending) = (e.handle, e.add_pending);
        if !add_pending {
            self.entries.remove(&token);
        }
        if let Some(slot) = self.slots.get_mut(handle as usize) {
            if *slot == Some(token) {
                *slot = None;
            }
        }
        Some(buffer)
    }

    /// Records the completion of the add of `token`; forgets the tag if its
    /// buffer was given back already.
    fn add_completed(&mut self, token: u64) {
        if let Some(e) = self.entries.get_mut(&token) {
            e.add_pending = false;
            if e.buffer.is_none() {
                self.entries.remove(&token);
            }
        }
    }

    /// What the completion `wc`, polled from the SRQ's CQ, means for the
    /// table; `None` when it is no tag completion of the table's (an
    /// unexpected message or one without a tag, which a receive of the
    /// SRQ took; a completion in error; a completion of a tag released
    /// already).
    pub fn complete(&mut self, wc: TmFields) -> Option<TagEvent<B>> {
        use crate::WcStatus;
        let status = wc.status;
        if wc.wr_id & TOKEN_BIT == 0 {
            return None;
        }
        if wc.wr_id == self.sync_token() {
            return (wc.opcode == sys::IBV_WC_TM_SYNC).then_some(TagEvent::Synced {
                ok: status == WcStatus::Success,
            });
        }
        let data_valid = wc.wc_flags & sys::IBV_WC_TM_DATA_VALID != 0;
        let matched = wc.wc_flags & sys::IBV_WC_TM_MATCH != 0;
        let entry = self.entries.get(&wc.wr_id)?;
        let user_id = entry.user_id;
        let final_status = matches!(
            status,
            WcStatus::Success | WcStatus::TagMatchingRndvIncomplete | WcStatus::LocalLengthError
        );
        // A matched message's data: mlx5 released the tag in this poll
        // (its opcode is TM_RECV, or RECV for a cancelled rendezvous, so
        // the flags decide, not the opcode).
        if data_valid && final_status && wc.opcode != sys::IBV_WC_TM_DEL {
            let buffer = self.release(wc.wr_id)?;
            return Some(TagEvent::Received {
                user_id,
                status,
                byte_len: wc.byte_len,
                buffer,
            });
        }
        match wc.opcode {
            // Before or after the tag's last completion (its entry is kept
            // for it).
            sys::IBV_WC_TM_ADD if entry.add_pending => {
                self.add_completed(wc.wr_id);
                Some(TagEvent::Added {
                    user_id,
                    ok: status == WcStatus::Success,
                })
            }
            sys::IBV_WC_TM_ADD => None,
            sys::IBV_WC_TM_DEL if entry.state != State::Removing => None,
            sys::IBV_WC_TM_DEL if status == WcStatus::Success => {
                let buffer = self.release(wc.wr_id)?;
                Some(TagEvent::Removed { user_id, buffer })
            }
            sys::IBV_WC_TM_DEL => {
                // The entry stays until the message that consumed it
                // completes; its handle is not removable again.
                if let Some(e) = self.entries.get_mut(&wc.wr_id) {
                    e.state = State::Detached;
                }
                Some(TagEvent::RemoveFailed { user_id, status })
            }
            // The first of two completions: mlx5's TM_CONSUMED (success)
            // or TM_CONSUMED_SW_RDNV (rendezvous-incomplete), match flag
            // only.
            sys::IBV_WC_TM_RECV
                if matched
                    && !data_valid
                    && entry.buffer.is_some()
                    && matches!(
                        status,
                        WcStatus::Success | WcStatus::TagMatchingRndvIncomplete
                    ) =>
            {
                Some(TagEvent::Matched { user_id })
            }
            _ => None,
        }
    }

    /// Gives up every buffer without dropping it: what the table holds
    /// when the SRQ could not be destroyed (the device may still write).
    pub fn leak(&mut self) {
        for (_, e) in self.entries.drain() {
            if let Some(b) = e.buffer {
                std::mem::forget(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WcStatus;

    /// A buffer that counts its drops.
    #[derive(Debug, PartialEq, Eq)]
    struct Buf(u32);

    fn wc(wr_id: u64, opcode: u32, status: u32, flags: u32) -> TmFields {
        TmFields {
            wr_id,
            status: WcStatus::from_raw(status),
            opcode,
            wc_flags: flags,
            byte_len: 7,
        }
    }

    const OK: u32 = sys::IBV_WC_SUCCESS;
    const DATA: u32 = sys::IBV_WC_TM_DATA_VALID;
    const MATCH: u32 = sys::IBV_WC_TM_MATCH;

    fn table_with_one() -> (TagTable<Buf>, TagHandle) {
        let mut t = TagTable::new(4);
        let tok = t.token();
        let h = t.added(tok, 2, 100, Buf(1)).unwrap();
        (t, h)
    }

    #[test]
    fn tokens_have_the_bit_the_unsafe_path_refuses_and_never_repeat() {
        let t: TagTable<Buf> = TagTable::new(1);
        let (a, b) = (t.token(), t.token());
        assert_ne!(a, b);
        assert!(a & TOKEN_BIT != 0 && b & TOKEN_BIT != 0);
        assert_eq!(a & SYNC_BIT, 0);
        assert_ne!(t.sync_token(), a);
        assert!(t.sync_token() & SYNC_BIT != 0);
    }

    #[test]
    fn a_removed_handle_is_refused_the_second_time() {
        let (mut t, h) = table_with_one();
        t.check_remove(&h).unwrap();
        t.removing(&h);
        let e = t.check_remove(&h).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        // Its successful removal gives the buffer back, once.
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_DEL, OK, 0));
        assert_eq!(
            ev,
            Some(TagEvent::Removed {
                user_id: 100,
                buffer: Buf(1)
            })
        );
        assert_eq!(t.len(), 0);
        assert!(t.check_remove(&h).is_err());
        assert_eq!(t.complete(wc(h.token, sys::IBV_WC_TM_DEL, OK, 0)), None);
    }

    #[test]
    fn a_handle_of_another_srq_is_refused_even_at_the_same_index() {
        let (t, _) = table_with_one();
        let (mut other, oh) = table_with_one();
        assert_eq!(oh.raw(), 2);
        let e = t.check_remove(&oh).unwrap_err();
        assert!(e.to_string().contains("another SRQ"), "{e}");
        // And another table's completion gives nothing back here.
        let mut t = t;
        assert_eq!(
            t.complete(wc(oh.token, sys::IBV_WC_TM_RECV, OK, DATA)),
            None
        );
        assert_eq!(t.len(), 1);
        assert!(other
            .complete(wc(oh.token, sys::IBV_WC_TM_RECV, OK, DATA))
            .is_some());
    }

    #[test]
    fn a_forged_handle_outside_the_table_is_refused() {
        let (t, h) = table_with_one();
        let forged = TagHandle {
            handle: 5, // the table has 4 + 1 slots
            ..h
        };
        assert!(t
            .check_remove(&forged)
            .unwrap_err()
            .to_string()
            .contains("outside"));
        let moved = TagHandle { handle: 3, ..h };
        assert!(t.check_remove(&moved).is_err());
    }

    #[test]
    fn a_provider_handle_outside_the_table_keeps_the_buffer_detached() {
        let mut t = TagTable::new(1);
        let tok = t.token();
        let e = t.added(tok, 9, 5, Buf(3)).unwrap_err();
        assert_eq!(e.errno(), libc::ERANGE);
        assert_eq!(t.len(), 1);
        // Its message still gives the buffer back.
        let ev = t.complete(wc(tok, sys::IBV_WC_TM_RECV, OK, DATA | MATCH));
        assert!(matches!(
            ev,
            Some(TagEvent::Received { buffer: Buf(3), .. })
        ));
    }

    #[test]
    fn only_the_final_completion_of_a_message_gives_the_buffer_back() {
        let (mut t, h) = table_with_one();
        // First of two completions: matched, data to come.
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_RECV, OK, MATCH));
        assert_eq!(ev, Some(TagEvent::Matched { user_id: 100 }));
        assert_eq!(t.len(), 1);
        // An unexpected message (a receive's wr_id, no flags) and one
        // without a tag: not ours even if the ID collides.
        assert_eq!(t.complete(wc(h.token, sys::IBV_WC_TM_RECV, OK, 0)), None);
        assert_eq!(t.complete(wc(h.token, sys::IBV_WC_TM_NO_TAG, OK, 0)), None);
        // A completion in error whose wr_id is stale (mlx5's "index not
        // added" leaves the previous ID): nothing released.
        let gen = sys::IBV_WC_GENERAL_ERR;
        assert_eq!(
            t.complete(wc(h.token, sys::IBV_WC_TM_RECV, gen, DATA)),
            None
        );
        assert_eq!(t.len(), 1);
        // The data: released, and the handle is free for a removal no more.
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_RECV, OK, DATA));
        assert_eq!(
            ev,
            Some(TagEvent::Received {
                user_id: 100,
                status: WcStatus::Success,
                byte_len: 7,
                buffer: Buf(1)
            })
        );
        assert!(t.check_remove(&h).is_err());
        assert!(!t.holds_handle(2));
    }

    #[test]
    fn a_cancelled_rendezvous_releases_though_its_opcode_is_recv() {
        let (mut t, h) = table_with_one();
        let rndv = sys::IBV_WC_TM_RNDV_INCOMPLETE;
        let ev = t.complete(wc(h.token, sys::IBV_WC_RECV, rndv, DATA | MATCH));
        assert!(matches!(
            ev,
            Some(TagEvent::Received { buffer: Buf(1), .. })
        ));
    }

    #[test]
    fn a_software_rendezvous_is_matched_then_received() {
        let (mut t, h) = table_with_one();
        let rndv = sys::IBV_WC_TM_RNDV_INCOMPLETE;
        // mlx5's TM_CONSUMED_SW_RDNV: the match flag only, rendezvous
        // incomplete: the first of two completions.
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_RECV, rndv, MATCH));
        assert_eq!(ev, Some(TagEvent::Matched { user_id: 100 }));
        assert_eq!(t.len(), 1);
        // A first completion in error is no match.
        let gen = sys::IBV_WC_GENERAL_ERR;
        assert_eq!(
            t.complete(wc(h.token, sys::IBV_WC_TM_RECV, gen, MATCH)),
            None
        );
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_RECV, rndv, DATA));
        assert!(matches!(
            ev,
            Some(TagEvent::Received {
                buffer: Buf(1),
                status: WcStatus::TagMatchingRndvIncomplete,
                ..
            })
        ));
        // Nothing matches a tag given back.
        assert_eq!(
            t.complete(wc(h.token, sys::IBV_WC_TM_RECV, OK, MATCH)),
            None
        );
    }

    #[test]
    fn an_add_completion_polled_after_the_message_is_still_added() {
        let (mut t, h) = table_with_one();
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_RECV, OK, DATA | MATCH));
        assert!(matches!(
            ev,
            Some(TagEvent::Received { buffer: Buf(1), .. })
        ));
        assert_eq!(t.len(), 0);
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_ADD, OK, 0));
        assert_eq!(
            ev,
            Some(TagEvent::Added {
                user_id: 100,
                ok: true
            })
        );
        // Reported once, and then the tag is forgotten.
        assert_eq!(t.complete(wc(h.token, sys::IBV_WC_TM_ADD, OK, 0)), None);
        assert!(t.entries.is_empty());
        // In the usual order the add comes first, and the message's
        // completion forgets the tag.
        let tok = t.token();
        t.added(tok, 1, 7, Buf(2)).unwrap();
        let ev = t.complete(wc(tok, sys::IBV_WC_TM_ADD, OK, 0));
        assert_eq!(
            ev,
            Some(TagEvent::Added {
                user_id: 7,
                ok: true
            })
        );
        let ev = t.complete(wc(tok, sys::IBV_WC_TM_RECV, OK, DATA));
        assert!(matches!(
            ev,
            Some(TagEvent::Received { buffer: Buf(2), .. })
        ));
        assert!(t.entries.is_empty());
        assert_eq!(t.complete(wc(tok, sys::IBV_WC_TM_ADD, OK, 0)), None);
    }

    #[test]
    fn a_tag_recorded_after_a_reserve_allocates_nothing() {
        let mut t: TagTable<Buf> = TagTable::new(64);
        for i in 0..40u32 {
            t.reserve_one().unwrap();
            let cap = t.entries.capacity();
            assert!(cap > t.entries.len());
            let tok = t.token();
            t.added(tok, i, 0, Buf(i)).unwrap();
            assert_eq!(t.entries.capacity(), cap, "tag {i} grew the map");
        }
    }

    #[test]
    fn a_failed_removal_waits_for_the_message_that_won() {
        let (mut t, h) = table_with_one();
        t.removing(&h);
        let err = sys::IBV_WC_TM_ERR;
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_DEL, err, 0));
        assert_eq!(
            ev,
            Some(TagEvent::RemoveFailed {
                user_id: 100,
                status: WcStatus::TagMatchingError
            })
        );
        assert_eq!(t.len(), 1);
        assert!(t.check_remove(&h).is_err());
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_RECV, OK, DATA));
        assert!(matches!(
            ev,
            Some(TagEvent::Received { buffer: Buf(1), .. })
        ));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_removal_completion_for_a_tag_never_removed_releases_nothing() {
        let (mut t, h) = table_with_one();
        assert_eq!(t.complete(wc(h.token, sys::IBV_WC_TM_DEL, OK, 0)), None);
        assert_eq!(t.len(), 1);
        t.check_remove(&h).unwrap();
    }

    #[test]
    fn a_handle_given_again_detaches_the_tag_it_named() {
        let (mut t, h) = table_with_one();
        // The provider released handle 2 (its message completed, not yet
        // reported) and gave it to a later add.
        let tok = t.token();
        let h2 = t.added(tok, 2, 200, Buf(2)).unwrap();
        assert!(t.check_remove(&h).is_err());
        t.check_remove(&h2).unwrap();
        // The earlier tag's message still gives its own buffer back.
        let ev = t.complete(wc(h.token, sys::IBV_WC_TM_RECV, OK, DATA));
        assert!(matches!(
            ev,
            Some(TagEvent::Received { buffer: Buf(1), .. })
        ));
        assert!(t.holds_handle(2));
        t.check_remove(&h2).unwrap();
        // An add of the unsafe path given handle 2 detaches the second.
        t.given_elsewhere(2);
        assert!(!t.holds_handle(2));
        assert!(t.check_remove(&h2).is_err());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn syncs_are_told_by_their_id_and_opcode() {
        let (mut t, _) = table_with_one();
        let s = t.sync_token();
        assert_eq!(
            t.complete(wc(s, sys::IBV_WC_TM_SYNC, OK, 0)),
            Some(TagEvent::Synced { ok: true })
        );
        assert_eq!(t.complete(wc(s, sys::IBV_WC_TM_RECV, OK, DATA)), None);
        let other: TagTable<Buf> = TagTable::new(1);
        assert_eq!(
            t.complete(wc(other.sync_token(), sys::IBV_WC_TM_SYNC, OK, 0)),
            None
        );
    }

    #[test]
    fn leaking_keeps_every_buffer_undropped() {
        use std::sync::Arc;
        let mut t = TagTable::new(2);
        let b = Arc::new(());
        for (i, h) in [0u32, 1].into_iter().enumerate() {
            let tok = t.token();
            t.added(tok, h, i as u64, b.clone()).unwrap();
        }
        t.leak();
        drop(t);
        assert_eq!(Arc::strong_count(&b), 3);
        // The test's own clean-up (Miri checks for leaks): give back the two
        // references `leak` forgot.
        for _ in 0..2 {
            // SAFETY: `leak` forgot the table's two clones of `b` (the
            // count of 3 above is `b` and those two): each decrement
            // releases one of them, and `b` keeps the allocation alive.
            unsafe { Arc::decrement_strong_count(Arc::as_ptr(&b)) };
        }
        assert_eq!(Arc::strong_count(&b), 1);
    }

    #[test]
    fn dropping_the_table_drops_every_held_buffer() {
        use std::sync::Arc;
        let b = Arc::new(());
        let mut t = TagTable::new(2);
        let tok = t.token();
        let h = t.added(tok, 0, 0, b.clone()).unwrap();
        t.removing(&h);
        drop(t);
        assert_eq!(Arc::strong_count(&b), 1);
    }

    #[test]
    fn two_threads_removing_one_handle_post_one_removal() {
        use std::sync::{Arc, Barrier, Mutex};
        let (t, h) = table_with_one();
        let t = Arc::new(Mutex::new(t));
        let go = Arc::new(Barrier::new(2));
        let posted: Vec<bool> = (0..2)
            .map(|_| {
                let (t, go) = (t.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    // What remove_tag does under the SRQ's lock.
                    let mut t = t.lock().unwrap();
                    let ok = t.check_remove(&h).is_ok();
                    if ok {
                        t.removing(&h);
                    }
                    ok
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|j| j.join().unwrap())
            .collect();
        assert_eq!(posted.iter().filter(|p| **p).count(), 1, "{posted:?}");
    }
}
