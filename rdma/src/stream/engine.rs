//! The protocol engine's core: what takes completions (and what it
//! holds: the CM id, the credits, what is posted).

use std::io;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use crate::cm::AsyncCmId;
use crate::{QueuePair, WcStatus, WorkCompletion};

use super::credits::Credits;
use super::error::{aborted, io_err, no_qp, protocol};
use super::layout::{
    recv_at, WR_FIN, WR_RDMA, WR_RECV, WR_RETIRES_SHIFT, WR_SEND, WR_SEND_INLINE, WR_SLOT,
    WR_UNSIGNALLED,
};
use super::shared::{Mode, OneSided, Segment, Shared, State};
use super::signalling::Signalling;
use super::wire::Header;
use super::{FLUSH_WAIT, HEADER_LEN};

/// Completions taken per poll.
pub(super) const POLL_BATCH: usize = 32;

/// What posts work requests and takes completions: the CM id (and with it
/// the QP) and the bookkeeping of what is posted. It lives in the state,
/// under its lock, so that whoever holds the lock may drive it: the driver
/// task, or a half that waits for data or for a free buffer and polls the
/// CQ itself. The driver takes it out when the connection ends. Fields
/// drop in order: the id (and with it the QP) before the regions of the
/// one-sided requests still posted.
pub(super) struct Core {
    pub(super) id: AsyncCmId,
    pub(super) credits: Credits,
    pub(super) posted_recvs: usize,
    /// Signalled send-queue requests posted and not completed (an
    /// unsignalled one completes only when flushed).
    pub(super) posted_sends: usize,
    /// Which data SENDs are signalled; the send queue's room for them.
    pub(super) signalling: Signalling,
    pub(super) ctrl_free: Vec<usize>,
    pub(super) fin_posted: bool,
    /// Data (or a message) came after our FIN was posted: the peer learns
    /// that it arrived from the credits we return for it (see
    /// [`last_credits_due`](Self::last_credits_due)).
    pub(super) data_after_fin: bool,
    /// The last credit-only message of a close went.
    pub(super) last_credits_sent: bool,
    /// One-sided requests posted, by the low half of their wr id.
    pub(super) in_flight: Vec<Option<Posted>>,
    /// Fence each RDMA WRITE with a zero-length READ (iWARP).
    pub(super) iwarp: bool,
    /// The most bytes a SEND carries inline ([`Resources::inline`](super::setup::Resources::inline)).
    pub(super) inline: usize,
    /// Both halves were gone at the last [`pump`](Self::pump).
    pub(super) halves_gone: bool,
    /// A completion said the connection ended (a flushed request: the QP
    /// is in ERROR), for the driver to act on.
    pub(super) gone: bool,
    /// An error a half met while it drove the core, for the driver, which
    /// ends the connection with it.
    pub(super) failed: Option<io::Error>,
    /// Completions as polled, initialised once.
    pub(super) wcs: [WorkCompletion; POLL_BATCH],
}

/// A one-sided request posted: its completions still to come (a fenced
/// WRITE has two).
pub(super) struct Posted {
    pub(super) op: OneSided,
    pub(super) pending: u8,
}

/// Runs `f` on the state's core (taken out meanwhile, so that both can be
/// borrowed); `None` once the driver has taken it for good.
pub(super) fn with_core<R>(
    st: &mut State,
    f: impl FnOnce(&mut Core, &mut State) -> R,
) -> Option<R> {
    let mut core = st.core.take()?;
    let r = f(&mut core, st);
    st.core = Some(core);
    Some(r)
}

impl Core {
    #[inline]
    pub(super) fn qp(&self) -> io::Result<&QueuePair> {
        match self.id.id().qp() {
            Some(qp) => Ok(qp),
            None => Err(no_qp()),
        }
    }

    /// Polls the CQ once and handles what it took, then posts what that
    /// made possible; whether it took any. A completion that says the
    /// connection ended sets [`gone`](Self::gone).
    pub(super) fn poll_cq(&mut self, shared: &Shared, st: &mut State) -> io::Result<bool> {
        let n = shared.cq.cq().poll(&mut self.wcs).map_err(io_err)?.len();
        if n == 0 {
            return Ok(false);
        }
        for i in 0..n {
            let wc = self.wcs[i];
            if self.complete(shared, st, &wc)? {
                self.gone = true;
            }
        }
        // The QP is in ERROR once a request was flushed: nothing more goes.
        if !self.gone {
            self.pump(shared, st)?;
        }
        Ok(true)
    }

    /// Takes the completions there are without waiting.
    pub(super) fn drain_cq(&mut self, shared: &Shared, st: &mut State) -> io::Result<()> {
        while self.poll_cq(shared, st)? {}
        Ok(())
    }

    /// Handles a completion; whether it says the connection ended (a
    /// flushed request: the QP is in ERROR).
    pub(super) fn complete(
        &mut self,
        shared: &Shared,
        st: &mut State,
        wc: &WorkCompletion,
    ) -> io::Result<bool> {
        let kind = wc.wr_id() & !0xffff_ffff;
        let slot = (wc.wr_id() & WR_SLOT) as usize;
        match kind {
            WR_RECV => self.posted_recvs -= 1,
            WR_UNSIGNALLED => {}
            _ => self.posted_sends -= 1,
        }
        if kind == WR_RDMA {
            return self.complete_one_sided(shared, slot, wc);
        }
        if wc.status() == WcStatus::WorkRequestFlushed {
            return Ok(true);
        }
        if !wc.is_success() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!(
                    "RDMA stream: a work request failed: {:?} (vendor error {:#x})",
                    wc.status(),
                    wc.vendor_err()
                ),
            ));
        }
        let mut woke = 0;
        match kind {
            WR_RECV => {
                let len = wc.byte_len() as usize;
                if len < HEADER_LEN {
                    return Err(protocol("a message shorter than its header"));
                }
                let h = shared.mr.read_word(recv_at(slot)).map_err(io_err)?;
                let h = Header::from_word(h).map_err(|e| protocol(&e))?;
                let message = shared.mode == Mode::Message;
                if h.msg != message && (h.msg || len > HEADER_LEN) {
                    return Err(protocol(if message {
                        "stream data on a message connection"
                    } else {
                        "a message on a stream connection"
                    }));
                }
                self.credits
                    .returned(h.credits)
                    .map_err(|()| protocol("more credits returned than owed"))?;
                st.returned += u64::from(h.credits);
                let data = len - HEADER_LEN;
                if (data > 0 || h.msg) && self.fin_posted {
                    self.data_after_fin = true;
                }
                if st.fin_received && (data > 0 || h.fin || h.msg) {
                    return Err(protocol("data after FIN"));
                }
                // A message may be empty; stream data never is.
                if (data > 0 || h.msg) && !st.reader_gone {
                    st.rx.push_back(Segment {
                        slot,
                        at: recv_at(slot) + HEADER_LEN,
                        len: data,
                    });
                } else {
                    st.repost.push(slot);
                }
                if h.fin {
                    st.fin_received = true;
                }
                woke = st.wake_reader();
            }
            WR_SEND | WR_SEND_INLINE => {
                // This SEND and the unsignalled ones before it are done.
                let retires = ((wc.wr_id() & 0xffff_ffff) >> WR_RETIRES_SHIFT) as usize;
                self.signalling.completed(retires);
                st.inline_pending -= retires + usize::from(kind == WR_SEND_INLINE);
                if kind == WR_SEND {
                    st.free.push(slot);
                    woke = st.wake_writer();
                }
            }
            WR_FIN => {
                self.ctrl_free.push(slot);
                st.fin_done = true;
                woke = st.wake_writer();
            }
            // Never a success (the QP signals only what asks for it).
            WR_UNSIGNALLED => {}
            _ => self.ctrl_free.push(slot),
        }
        if woke > 0 {
            shared.wakes.fetch_add(woke, Ordering::Relaxed);
        }
        Ok(false)
    }

    /// Counts a one-sided request's completion and hands the result to its
    /// caller (if it still waits) once it is known, freeing the slot; a
    /// failed request ends the connection.
    pub(super) fn complete_one_sided(
        &mut self,
        shared: &Shared,
        slot: usize,
        wc: &WorkCompletion,
    ) -> io::Result<bool> {
        let flushed = wc.status() == WcStatus::WorkRequestFlushed;
        // The fence of a request already answered (after an error).
        let Some(p) = self.in_flight.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(flushed);
        };
        p.pending = p.pending.saturating_sub(1);
        if wc.is_success() && p.pending > 0 {
            return Ok(false);
        }
        let Some(Posted { op, .. }) = self.in_flight[slot].take() else {
            return Ok(flushed);
        };
        let what = if op.read { "RDMA READ" } else { "RDMA WRITE" };
        let (result, end) = match wc.status() {
            WcStatus::Success => (Ok(()), Ok(false)),
            WcStatus::WorkRequestFlushed => (Err(aborted(op.read, self.iwarp)), Ok(true)),
            status => {
                let kind = match status {
                    WcStatus::RemoteAccessError => io::ErrorKind::PermissionDenied,
                    WcStatus::RemoteInvalidRequest => io::ErrorKind::InvalidInput,
                    _ => io::ErrorKind::ConnectionAborted,
                };
                let text = format!(
                    "{what} of {} bytes to {:#x} (rkey {:#x}) failed: {status:?} (vendor error {:#x}); \
                     the connection is over",
                    op.remote.len,
                    op.remote.addr,
                    op.remote.rkey,
                    wc.vendor_err()
                );
                (
                    Err(io::Error::new(kind, text.clone())),
                    Err(io::Error::new(kind, text)),
                )
            }
        };
        if op.done.send(result).is_ok() {
            shared.wakes.fetch_add(1, Ordering::Relaxed);
        }
        // `op.mr` drops here: the device is done with it.
        end
    }

    /// Disconnects and waits (for up to [`FLUSH_WAIT`]) until every
    /// posted request has completed; the caller then drops the core. The
    /// core is out of the state by then: nothing else polls the CQ.
    pub(super) async fn close(&mut self, shared: &Shared) {
        // Moves the QP to ERROR: what is posted completes, flushed.
        let _ = self.id.id().disconnect();
        let deadline = Instant::now() + FLUSH_WAIT;
        while self.posted_recvs + self.posted_sends > 0 {
            let polled = tokio::time::timeout_at(deadline, shared.cq.poll(&mut self.wcs)).await;
            let Ok(Ok(got)) = polled else { break };
            for wc in got.iter() {
                match wc.wr_id() & !0xffff_ffff {
                    WR_RECV => self.posted_recvs -= 1,
                    WR_UNSIGNALLED => {}
                    _ => self.posted_sends -= 1,
                }
            }
        }
    }
}
