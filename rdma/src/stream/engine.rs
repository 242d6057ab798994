//! The protocol engine: the connection's state under its lock ([`State`],
//! with the [`Core`] in it, and what it holds: [`Segment`], [`Wakers`],
//! [`OneSided`]), the [`Link`] it runs on, and what takes completions;
//! [`super::pump`] continues the core with what it posts.
//!
//! The CM id (and with it the QP), with the bookkeeping of what is
//! posted (credits, buffers in flight), forms the connection's *core*
//! ([`Core`]), which lives in a small state ([`State`]) under one mutex
//! with the received segments not read yet, the free send buffers, the
//! filled ones not posted yet, and a waker for each side; the CQ is polled
//! only under that lock, so completions are handled in order. Whoever
//! holds the lock may drive the core: take completions, post what can be
//! posted.
//!
//! The engine knows nothing of who drives it or how they wake each other:
//! it is handed the state and the [`Link`] (the CQ, the region, the mode,
//! the count of tasks woken), which the `Shared` of the halves and the
//! driver holds, with the mutex, beside its own flags.

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Waker;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::cm::AsyncCmId;
use crate::{
    AsyncCompletionQueue, MemoryRegion, QueuePair, RemoteMemory, WcStatus, WorkCompletion,
};

use super::credits::Credits;
use super::error::{aborted, ended_error, io_err, no_qp, protocol, Ended};
use super::layout::{
    recv_at, WR_FIN, WR_RDMA, WR_RECV, WR_RETIRES_SHIFT, WR_SEND, WR_SEND_INLINE, WR_SLOT,
    WR_UNSIGNALLED,
};
use super::signalling::Signalling;
use super::wire::Header;
use super::{FLUSH_WAIT, HEADER_LEN, SEND_SLOTS};

/// What the engine uses of the connection besides its state, handed to
/// the [`Core`]'s methods by whoever drives it (the `Shared` of the
/// halves and the driver holds it).
pub(super) struct Link {
    /// The connection's CQ, polled by whoever drives the core, under the
    /// lock, so that completions are handled in order.
    pub(super) cq: AsyncCompletionQueue,
    /// Receive buffers, then send buffers, then control buffers.
    pub(super) mr: MemoryRegion,
    pub(super) mode: Mode,
    /// Tasks the driver woke (readers, writers) or answered (one-sided
    /// requests whose callers still wait).
    pub(super) wakes: AtomicU64,
}

// ------------------------------------------------------------ the state

/// What a connection carries: the two share the driver and the wire
/// format, and differ in what a data message means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Bytes: a reader sees no message boundaries, writes are coalesced.
    Stream,
    /// Messages: each SEND is one message (its header has the MSG bit),
    /// possibly empty, read whole.
    Message,
}

/// Received data not read yet: `len` bytes of receive buffer `slot` at
/// offset `at` of the region.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) slot: usize,
    pub(super) at: usize,
    pub(super) len: usize,
}

/// The tasks waiting for one side of the state (a stream has one at a
/// time; a message endpoint's `&self` methods may have several).
#[derive(Debug, Default)]
pub(super) struct Wakers(Vec<Waker>);

impl Wakers {
    /// Adds `w` unless a waker that wakes the same task is there.
    pub(super) fn register(&mut self, w: &Waker) {
        if !self.0.iter().any(|x| x.will_wake(w)) {
            self.0.push(w.clone());
        }
    }

    /// Wakes the tasks and forgets them; how many there were.
    pub(super) fn wake_all(&mut self) -> u64 {
        let mut n = 0;
        // Popped rather than drained: cheaper for the one waker a stream
        // has, and the order of the wake-ups means nothing.
        while let Some(w) = self.0.pop() {
            w.wake();
            n += 1;
        }
        n
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// An RDMA WRITE or READ waiting for the driver, then in flight: the
/// driver owns `mr` (a clone of the caller's) until the request completes,
/// so a dropped future never frees memory under the device.
pub(super) struct OneSided {
    /// A READ (else a WRITE).
    pub(super) read: bool,
    pub(super) mr: Arc<MemoryRegion>,
    pub(super) range: Range<usize>,
    pub(super) remote: RemoteMemory,
    pub(super) done: oneshot::Sender<io::Result<()>>,
}

/// The connection's state, under the lock of the `Shared` of the halves
/// and the driver: what was received and not read, the send buffers, the
/// one-sided requests not posted, how the connection ended, and the core.
#[derive(Default)]
pub(super) struct State {
    /// Received segments (messages, in [`Mode::Message`]), in order.
    pub(super) rx: VecDeque<Segment>,
    /// The peer's FIN arrived (after every segment in `rx`).
    pub(super) fin_received: bool,
    /// Receive buffers the reader has emptied, to be posted again.
    pub(super) repost: Vec<usize>,
    /// Buffers of received messages, kept for the next ones.
    pub(super) pool: Vec<Vec<u8>>,
    /// The tasks waiting to read.
    pub(super) reader: Wakers,
    /// The read half is gone: received data is dropped.
    pub(super) reader_gone: bool,

    /// Send buffers free for the writer.
    pub(super) free: Vec<usize>,
    /// Filled send buffers not posted yet: (slot, data bytes).
    pub(super) queued: VecDeque<(usize, usize)>,
    /// The write side is shut down: a FIN follows the data.
    pub(super) shutdown: bool,
    /// The FIN's SEND completed.
    pub(super) fin_done: bool,
    /// The tasks waiting to write, flush or shut down.
    pub(super) writer: Wakers,
    /// The write half is gone.
    pub(super) writer_gone: bool,
    /// Data SENDs that went inline (see [`Core::post_data`]), signalled
    /// or not, that no successful completion has shown complete.
    pub(super) inline_pending: usize,
    /// SENDs posted (data, FIN and credit-only): each takes one of the
    /// peer's receive buffers.
    pub(super) sent: u64,
    /// The number, counting every SEND from 1, of the last data SEND that
    /// went inline.
    pub(super) inline_last: u64,
    /// Credits the peer returned in all: each says that it took one more
    /// of our SENDs out of its receive queue (it takes them in order) and
    /// posted that buffer again.
    pub(super) returned: u64,

    /// One-sided requests not posted yet.
    pub(super) ops: VecDeque<OneSided>,

    /// The connection is over.
    pub(super) ended: Option<Ended>,

    /// What posts and completes, until the driver takes it at the end.
    pub(super) core: Option<Box<Core>>,
}

impl State {
    /// Everything written was sent and its SEND completed (a completed
    /// SEND returns its buffer to `free`; one flushed at the end never
    /// does), or, for a SEND that went inline (whose buffer went back when
    /// it was posted), a successful completion of it or of a later data
    /// SEND showed it done, or the peer returned the credit of its message
    /// or of a later one (which it can only once it took that message: a
    /// failed SEND's never comes back): nothing written is lost.
    pub(super) fn all_sent(&self) -> bool {
        self.queued.is_empty()
            && self.free.len() == SEND_SLOTS
            && (self.inline_pending == 0 || self.returned >= self.inline_last)
    }

    /// Whether something written is in flight: a send buffer neither free
    /// nor queued (its SEND not complete), or more than one SEND whose
    /// credit the peer has not returned (a SEND that went inline freed its
    /// buffer, or used none; the peer returns the credit of the request it
    /// answers with its next message, in a ping-pong).
    pub(super) fn in_flight(&self) -> bool {
        SEND_SLOTS - self.free.len() - self.queued.len() > 0
            || self.sent.saturating_sub(self.returned) > 1
    }

    pub(super) fn wake_reader(&mut self) -> u64 {
        self.reader.wake_all()
    }

    pub(super) fn wake_writer(&mut self) -> u64 {
        self.writer.wake_all()
    }

    /// Fails the one-sided requests not posted, as the connection ended.
    pub(super) fn fail_queued(&mut self) {
        for op in std::mem::take(&mut self.ops) {
            let why = self.ended.as_ref().unwrap_or(&Ended::PeerGone);
            let _ = op.done.send(Err(ended_error(why, true)));
        }
    }

    pub(super) fn end(&mut self, why: Ended) {
        if self.ended.is_none() {
            self.ended = Some(why);
        }
        self.wake_reader();
        self.wake_writer();
    }
}

// ------------------------------------------------------------ the core

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
    pub(super) fn poll_cq(&mut self, link: &Link, st: &mut State) -> io::Result<bool> {
        let n = link.cq.cq().poll(&mut self.wcs).map_err(io_err)?.len();
        if n == 0 {
            return Ok(false);
        }
        for i in 0..n {
            let wc = self.wcs[i];
            if self.complete(link, st, &wc)? {
                self.gone = true;
            }
        }
        // The QP is in ERROR once a request was flushed: nothing more goes.
        if !self.gone {
            self.pump(link, st)?;
        }
        Ok(true)
    }

    /// Takes the completions there are without waiting.
    pub(super) fn drain_cq(&mut self, link: &Link, st: &mut State) -> io::Result<()> {
        while self.poll_cq(link, st)? {}
        Ok(())
    }

    /// Handles a completion; whether it says the connection ended (a
    /// flushed request: the QP is in ERROR).
    pub(super) fn complete(
        &mut self,
        link: &Link,
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
            return self.complete_one_sided(link, slot, wc);
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
                let h = link.mr.read_word(recv_at(slot)).map_err(io_err)?;
                let h = Header::from_word(h).map_err(|e| protocol(&e))?;
                let message = link.mode == Mode::Message;
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
            link.wakes.fetch_add(woke, Ordering::Relaxed);
        }
        Ok(false)
    }

    /// Counts a one-sided request's completion and hands the result to its
    /// caller (if it still waits) once it is known, freeing the slot; a
    /// failed request ends the connection.
    pub(super) fn complete_one_sided(
        &mut self,
        link: &Link,
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
            link.wakes.fetch_add(1, Ordering::Relaxed);
        }
        // `op.mr` drops here: the device is done with it.
        end
    }

    /// Disconnects and waits (for up to [`FLUSH_WAIT`]) until every
    /// posted request has completed; the caller then drops the core. The
    /// core is out of the state by then: nothing else polls the CQ.
    pub(super) async fn close(&mut self, link: &Link) {
        // Moves the QP to ERROR: what is posted completes, flushed.
        let _ = self.id.id().disconnect();
        let deadline = Instant::now() + FLUSH_WAIT;
        while self.posted_recvs + self.posted_sends > 0 {
            let polled = tokio::time::timeout_at(deadline, link.cq.wait(&mut self.wcs)).await;
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
