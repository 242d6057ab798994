//! What the core posts: receive buffers again, data as credits allow,
//! the FIN, credit-only messages and one-sided requests.
//!
//! A message of up to 64 bytes of data goes inline, where the QP takes
//! that much inline data (rxe and siw do): the provider copies it into the
//! work request at post time, which spares the device a read of the
//! buffer (as rsockets sends small messages), and frees the buffer at
//! once. Such a SEND goes unsignalled, up to seven in a row, the eighth
//! signalled: its completion shows theirs (a send queue completes in
//! order), so a small message's round trip takes one completion on each
//! side, not two ([`super::signalling`]). Data that went inline is known
//! delivered once a successful completion (its own, or a later data
//! SEND's) or a credit the peer returned for its message or a later one
//! shows it; until then a flush or shutdown after the connection ended
//! reports it lost. At the close a side that got data after its FIN went
//! (a half-close) returns the credits it still owes in one last
//! credit-only message, and waits for it (up to
//! [`LINGER`](super::LINGER)) before it disconnects, so that the peer
//! learns its data arrived.
//!
//! Small writes are coalesced into the send buffer not posted yet while
//! others are in flight, so a run of small writes costs fewer SENDs.

use std::io;
use std::ops::Range;
use std::sync::atomic::Ordering;

use crate::{MemoryRegion, QueuePair, RecvWr, RemoteMemory, SendWr};

use super::engine::{Core, Link, Mode, OneSided, Posted, State};
use super::error::{copy_err, io_err};
use super::layout::{
    Layout, CTRL_SLOTS, INLINE, WR_CTRL, WR_FIN, WR_RDMA, WR_RECV, WR_RETIRES_SHIFT, WR_SEND,
    WR_SEND_INLINE, WR_UNSIGNALLED,
};
use super::wire::Header;
use super::{HEADER_LEN, ONE_SIDED_SLOTS};

impl Core {
    /// Posts what can be posted: emptied receive buffers, queued data as
    /// credits allow, the FIN, a credit-only message when one is due;
    /// whether it posted anything.
    #[inline]
    pub(super) fn pump(&mut self, link: &Link, st: &mut State) -> io::Result<bool> {
        // Nothing to post, as after completions that only freed a send
        // buffer or brought data (a write half gone has shut down, so both
        // halves are there): decided inline, without a call.
        if st.repost.is_empty()
            && st.queued.is_empty()
            && st.ops.is_empty()
            && !st.shutdown
            && !st.reader_gone
            && !self.credits.credit_only_due()
        {
            self.halves_gone = false;
            return Ok(false);
        }
        self.pump_some(link, st)
    }

    /// [`pump`](Self::pump) with something to post.
    pub(super) fn pump_some(&mut self, link: &Link, st: &mut State) -> io::Result<bool> {
        let before = (self.posted_recvs, self.posted_sends, st.sent);
        let msg = link.mode == Mode::Message;
        self.halves_gone = st.reader_gone && st.writer_gone;
        if st.reader_gone {
            while let Some(seg) = st.rx.pop_front() {
                st.repost.push(seg.slot);
            }
        }
        // Data first: a reply goes out before the receive buffers its
        // request freed are posted again (their credits go with the next
        // message).
        while self.credits.can_send_data() && self.signalling.room() {
            let Some((slot, len)) = st.queued.pop_front() else {
                break;
            };
            self.post_data(link, st, slot, len, msg)?;
        }
        // Without allocating: the driver pumps on every poll while it
        // busy-polls.
        while let Some(slot) = st.repost.pop() {
            post_recv(self.qp()?, &link.mr, &link.layout, slot).map_err(io_err)?;
            self.posted_recvs += 1;
            self.credits.reposted();
        }
        // One-sided requests, as many as there are free slots. Checked
        // first: even an empty queue's loop costs, on every pump of a busy
        // poll.
        if !st.ops.is_empty() {
            for slot in (0..ONE_SIDED_SLOTS).rev() {
                if self.in_flight[slot].is_some() {
                    continue;
                }
                // Requests whose callers went away before they were posted
                // are dropped.
                let op = loop {
                    match st.ops.pop_front() {
                        Some(op) if op.done.is_closed() => continue,
                        op => break op,
                    }
                };
                let Some(op) = op else { break };
                self.post_one_sided(slot, op)?;
            }
        }
        let fin_due = st.shutdown && st.queued.is_empty() && !self.fin_posted;
        if fin_due && self.credits.can_send_data() && !self.ctrl_free.is_empty() {
            self.post_ctrl(link, st, true)?;
            self.fin_posted = true;
        }
        let last = self.last_credits_due();
        if (last || self.credits.credit_only_due()) && !self.ctrl_free.is_empty() {
            self.post_ctrl(link, st, false)?;
            self.last_credits_sent |= last;
        }
        Ok((self.posted_recvs, self.posted_sends, st.sent) != before)
    }

    /// Whether the close's last credit-only message is due: both halves
    /// are gone, data came after our FIN (a half-close, or a peer that
    /// still sends), and credits are owed. Those credits are how the
    /// peer learns that data it sent inline arrived ([`State::all_sent`]):
    /// the FIN returned what was owed before it. Once per connection, so
    /// that two closing sides do not answer each other's credits, and a
    /// peer that keeps sending is not kept going.
    pub(super) fn last_credits_due(&self) -> bool {
        self.halves_gone
            && self.fin_posted
            && self.data_after_fin
            && !self.last_credits_sent
            && self.credits.owes_any()
    }

    /// Whether a closing core has nothing left to tell the peer: the
    /// close's last credit-only message is not due, and no control
    /// message (FIN, credits) is in flight, which the disconnect would
    /// flush.
    pub(super) fn settled(&self) -> bool {
        !self.last_credits_due() && self.ctrl_free.len() == CTRL_SLOTS
    }

    /// Posts the data SEND of send buffer `slot` holding `len` bytes, with
    /// a header that takes a credit. One whose data goes inline frees its
    /// buffer at once (the provider has copied it), and goes unsignalled
    /// unless [`unsignalled_run`](super::signalling::unsignalled_run) did
    /// before it: a completion less to take per small message. The
    /// signalled one after them says how many it retires (its completion
    /// shows theirs: a send queue completes in order), so the send queue
    /// never holds more data SENDs not known complete than there are send
    /// buffers. Data that went inline counts as not sent
    /// ([`State::all_sent`]) until a successful completion (its own, or a
    /// later data SEND's) or a credit the peer returned shows it arrived.
    pub(super) fn post_data(
        &mut self,
        link: &Link,
        st: &mut State,
        slot: usize,
        len: usize,
        msg: bool,
    ) -> io::Result<()> {
        let h = self.data_header(msg);
        let at = link.layout.send_at(slot);
        link.mr.write_word(at, h.to_word()).map_err(io_err)?;
        let range = at..at + HEADER_LEN + len;
        let inline = range.len() <= self.inline;
        let (wr_id, signalled) = self.data_wr(inline, slot);
        self.post_send(link, wr_id, range, signalled)?;
        self.data_posted(st, signalled, inline);
        if inline {
            st.free.push(slot);
            let woke = st.wake_writer();
            if woke > 0 {
                link.wakes.fetch_add(woke, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Sends `data` at once in a data SEND whose bytes (the header, then
    /// `data`) go inline from the stack, when nothing stops it going now:
    /// it fits inline, and credits and the send queue allow it. What
    /// [`pump`](Self::pump) would post after a copy of `data` into a send
    /// buffer, without the buffer; the caller checks that nothing written
    /// waits before it. Whether it was sent (else the caller queues it).
    pub(super) fn send_now(
        &mut self,
        link: &Link,
        st: &mut State,
        data: &[u8],
    ) -> io::Result<bool> {
        let len = HEADER_LEN + data.len();
        if len > self.inline || !self.credits.can_send_data() || !self.signalling.room() {
            return Ok(false);
        }
        let mut bytes = [0u8; INLINE];
        let h = self.data_header(link.mode == Mode::Message);
        bytes[..HEADER_LEN].copy_from_slice(&h.to_bytes());
        bytes[HEADER_LEN..len].copy_from_slice(data);
        // No buffer to name: an inline SEND's completion frees none.
        let (wr_id, signalled) = self.data_wr(true, 0);
        let mut wr = SendWr::send_inline(wr_id, &bytes[..len]);
        if signalled {
            wr = wr.signaled();
        }
        self.qp()?.post_send(&mut [wr]).map_err(io_err)?;
        self.data_posted(st, signalled, true);
        Ok(true)
    }

    /// The header of the next data SEND, which takes a credit and returns
    /// those owed.
    pub(super) fn data_header(&mut self, msg: bool) -> Header {
        Header {
            credits: self.credits.take(),
            fin: false,
            msg,
        }
    }

    /// The work request id of the next data SEND, from send buffer `slot`
    /// (`inline`: its data goes inline), and whether it is signalled (see
    /// [`post_data`](Self::post_data)). Counted before the post: a failed
    /// post ends the connection.
    pub(super) fn data_wr(&mut self, inline: bool, slot: usize) -> (u64, bool) {
        let signalled = self.signalling.post(inline);
        let wr_id = match signalled {
            None => WR_UNSIGNALLED,
            Some(retires) => {
                let kind = if inline { WR_SEND_INLINE } else { WR_SEND };
                kind | (retires as u64) << WR_RETIRES_SHIFT
            }
        } | slot as u64;
        (wr_id, signalled.is_some())
    }

    /// Counts a data SEND posted.
    pub(super) fn data_posted(&mut self, st: &mut State, signalled: bool, inline: bool) {
        st.sent += 1;
        if signalled {
            self.posted_sends += 1;
        }
        if inline {
            st.inline_pending += 1;
            st.inline_last = st.sent;
        }
    }

    /// Posts a SEND of `range` of the connection's region, signalled or
    /// not, inline when it fits ([`inline`](Self::inline)).
    pub(super) fn post_send(
        &self,
        link: &Link,
        wr_id: u64,
        range: Range<usize>,
        signaled: bool,
    ) -> io::Result<()> {
        let len = range.len();
        let sge = [link.mr.sge(range).map_err(io_err)?];
        let mut wr = SendWr::send(wr_id, &sge);
        if signaled {
            wr = wr.signaled();
        }
        if len <= self.inline {
            wr = wr.inline();
        }
        self.qp()?.post_send(&mut [wr]).map_err(io_err)
    }

    /// Posts a header-only message: a FIN, or credits only.
    pub(super) fn post_ctrl(&mut self, link: &Link, st: &mut State, fin: bool) -> io::Result<()> {
        let slot = self.ctrl_free.pop().expect("checked by the caller");
        let h = Header {
            credits: self.credits.take(),
            fin,
            msg: false,
        };
        let at = link.layout.ctrl_at(slot);
        link.mr.write_word(at, h.to_word()).map_err(io_err)?;
        let kind = if fin { WR_FIN } else { WR_CTRL };
        self.post_send(link, kind | slot as u64, at..at + HEADER_LEN, true)?;
        self.posted_sends += 1;
        st.sent += 1;
        Ok(())
    }

    /// Posts a one-sided request in `slot` of `in_flight` (on iWARP a
    /// WRITE is followed by a zero-length READ, whose response comes only
    /// once the WRITE is placed, or refused); a failure to post goes to
    /// its caller and ends the connection.
    pub(super) fn post_one_sided(&mut self, slot: usize, op: OneSided) -> io::Result<()> {
        let fence = self.iwarp && !op.read;
        let posted = (|| {
            let sge = [op.mr.sge(op.range.clone()).map_err(io_err)?];
            let id = WR_RDMA | slot as u64;
            let qp = self.qp()?;
            if op.read {
                qp.post_send(&mut [SendWr::rdma_read(id, &sge, op.remote).signaled()])
            } else if fence {
                let at_start = RemoteMemory {
                    len: 0,
                    ..op.remote
                };
                qp.post_send(&mut [
                    SendWr::rdma_write(id, &sge, op.remote).signaled(),
                    SendWr::rdma_read(id, &[], at_start).signaled(),
                ])
            } else {
                qp.post_send(&mut [SendWr::rdma_write(id, &sge, op.remote).signaled()])
            }
            .map_err(io_err)
        })();
        match posted {
            Ok(()) => {
                let pending = if fence { 2 } else { 1 };
                self.posted_sends += usize::from(pending);
                self.in_flight[slot] = Some(Posted { op, pending });
                Ok(())
            }
            Err(e) => {
                let _ = op.done.send(Err(copy_err(&e)));
                Err(e)
            }
        }
    }
}

/// Posts receive buffer `slot` of `mr` (laid out as `layout`) on `qp`.
pub(super) fn post_recv(
    qp: &QueuePair,
    mr: &MemoryRegion,
    layout: &Layout,
    slot: usize,
) -> crate::Result<()> {
    let at = layout.recv_at(slot);
    let sge = [mr.sge(at..at + layout.slot_size)?];
    qp.post_recv(&mut [RecvWr::new(WR_RECV | slot as u64, &sge)])
}
