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
//! the layout, the count of tasks woken), which the `Shared` of the halves
//! and the driver holds, with the mutex, beside its own flags. What a
//! completion means is decided by [`Core::complete`], which takes the
//! completion as plain values ([`Done`]) and the header's word through a
//! closure, and returns what to wake ([`Wake`]) rather than waking anyone:
//! the unit tests (`engine_tests`) drive it with made-up completions,
//! without a device.

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
    Layout, CTRL_SLOTS, WR_CTRL, WR_FIN, WR_RDMA, WR_RECV, WR_RETIRES_SHIFT, WR_SEND,
    WR_SEND_INLINE, WR_SLOT, WR_UNSIGNALLED,
};
use super::signalling::Signalling;
use super::wire::Header;
use super::{FLUSH_WAIT, HEADER_LEN, ONE_SIDED_SLOTS};

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
    /// Where the buffers are, and what the peer's take.
    pub(super) layout: Layout,
    /// Tasks the driver woke (readers, writers) or answered (one-sided
    /// requests whose callers still wait).
    pub(super) wakes: AtomicU64,
}

// ------------------------------------------------------------ the state

/// What a handled completion asks its driver to wake: a small set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Wake(u8);

impl Wake {
    /// Nothing to wake.
    pub(super) const NONE: Wake = Wake(0);
    /// The tasks waiting to read (data, a FIN arrived).
    pub(super) const READER: Wake = Wake(1);
    /// The tasks waiting to write (a send buffer freed, the FIN sent).
    pub(super) const WRITER: Wake = Wake(2);
    /// A one-sided request's caller was answered (through its channel).
    pub(super) const ANSWERED: Wake = Wake(4);

    pub(super) fn contains(self, other: Wake) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Wake {
    type Output = Wake;
    fn bitor(self, o: Wake) -> Wake {
        Wake(self.0 | o.0)
    }
}

impl std::ops::BitOrAssign for Wake {
    fn bitor_assign(&mut self, o: Wake) {
        self.0 |= o.0;
    }
}

/// A completion as the engine reads it (the fields of a
/// [`WorkCompletion`] it uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Done {
    pub(super) wr_id: u64,
    pub(super) status: WcStatus,
    pub(super) byte_len: u32,
    pub(super) vendor_err: u32,
}

impl Done {
    #[inline]
    pub(super) fn of(wc: &WorkCompletion) -> Done {
        Done {
            wr_id: wc.wr_id(),
            status: wc.status(),
            byte_len: wc.byte_len(),
            vendor_err: wc.vendor_err(),
        }
    }
}

/// What [`Core::complete`] made of a completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Step {
    /// The completion says the connection ended (a flushed request: the
    /// QP is in ERROR).
    pub(super) ended: bool,
    /// Whom to wake.
    pub(super) wake: Wake,
}

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
    /// Send buffers of the connection (all of them are in `free` when
    /// nothing is written).
    pub(super) send_slots: usize,

    /// The connection is over.
    pub(super) ended: Option<Ended>,

    /// What posts and completes, until the driver takes it at the end.
    pub(super) core: Option<Box<Core>>,
}

impl State {
    /// The state of a new connection laid out as `layout`: every send
    /// buffer free, no core yet.
    pub(super) fn new(layout: &Layout) -> State {
        State {
            free: (0..layout.send_slots).rev().collect(),
            send_slots: layout.send_slots,
            ..State::default()
        }
    }

    /// Everything written was sent and its SEND completed (a completed
    /// SEND returns its buffer to `free`; one flushed at the end never
    /// does), or, for a SEND that went inline (whose buffer went back when
    /// it was posted), a successful completion of it or of a later data
    /// SEND showed it done, or the peer returned the credit of its message
    /// or of a later one (which it can only once it took that message: a
    /// failed SEND's never comes back): nothing written is lost.
    pub(super) fn all_sent(&self) -> bool {
        self.queued.is_empty()
            && self.free.len() == self.send_slots
            && (self.inline_pending == 0 || self.returned >= self.inline_last)
    }

    /// Whether something written is in flight: a send buffer neither free
    /// nor queued (its SEND not complete), or more than one SEND whose
    /// credit the peer has not returned (a SEND that went inline freed its
    /// buffer, or used none; the peer returns the credit of the request it
    /// answers with its next message, in a ping-pong).
    pub(super) fn in_flight(&self) -> bool {
        self.send_slots - self.free.len() - self.queued.len() > 0
            || self.sent.saturating_sub(self.returned) > 1
    }

    pub(super) fn wake_reader(&mut self) -> u64 {
        self.reader.wake_all()
    }

    pub(super) fn wake_writer(&mut self) -> u64 {
        self.writer.wake_all()
    }

    /// Wakes the tasks `wake` names; how many (an answered one-sided
    /// request's caller counts one).
    pub(super) fn wake(&mut self, wake: Wake) -> u64 {
        let mut n = u64::from(wake.contains(Wake::ANSWERED));
        if wake.contains(Wake::READER) {
            n += self.wake_reader();
        }
        if wake.contains(Wake::WRITER) {
            n += self.wake_writer();
        }
        n
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
    /// The CM id, with the QP; `None` only in the engine's unit tests,
    /// which drive it without a device (posting then fails).
    pub(super) id: Option<AsyncCmId>,
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
    /// The core of a connection on `id` (with its QP, every receive buffer
    /// posted) laid out as `layout`; `iwarp` and `inline` as the fields.
    pub(super) fn new(id: Option<AsyncCmId>, layout: &Layout, iwarp: bool, inline: usize) -> Core {
        Core {
            id,
            credits: Credits::new(layout.peer_recv_slots as u32, layout.recv_slots as u32),
            posted_recvs: layout.recv_slots,
            posted_sends: 0,
            signalling: Signalling::new(layout.send_slots),
            ctrl_free: (0..CTRL_SLOTS).collect(),
            fin_posted: false,
            data_after_fin: false,
            last_credits_sent: false,
            in_flight: (0..ONE_SIDED_SLOTS).map(|_| None).collect(),
            iwarp,
            inline,
            halves_gone: false,
            gone: false,
            failed: None,
            wcs: [WorkCompletion::ZERO; POLL_BATCH],
        }
    }

    #[inline]
    pub(super) fn qp(&self) -> io::Result<&QueuePair> {
        match self.id.as_ref().and_then(|id| id.id().qp()) {
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
        let mut wake = Wake::NONE;
        let read_header = |slot| link.mr.read_word(link.layout.recv_at(slot)).map_err(io_err);
        for i in 0..n {
            let wc = Done::of(&self.wcs[i]);
            let step = match self.complete(st, link.mode, &link.layout, &wc, read_header) {
                Ok(step) => step,
                Err(e) => {
                    Self::woke(link, st, wake);
                    return Err(e);
                }
            };
            self.gone |= step.ended;
            wake |= step.wake;
        }
        Self::woke(link, st, wake);
        // The QP is in ERROR once a request was flushed: nothing more goes.
        if !self.gone {
            self.pump(link, st)?;
        }
        Ok(true)
    }

    /// Wakes what `wake` names and counts it in the link.
    #[inline]
    fn woke(link: &Link, st: &mut State, wake: Wake) {
        if wake != Wake::NONE {
            let n = st.wake(wake);
            if n > 0 {
                link.wakes.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Takes the completions there are without waiting.
    pub(super) fn drain_cq(&mut self, link: &Link, st: &mut State) -> io::Result<()> {
        while self.poll_cq(link, st)? {}
        Ok(())
    }

    /// Handles a completion of a connection in `mode` laid out as
    /// `layout`, reading the header of a received message with
    /// `read_header` (of its receive buffer's number): whether it says the
    /// connection ended (a flushed request: the QP is in ERROR), and whom
    /// to wake. What no device would complete (a request not posted, a
    /// buffer out of range, a message longer than the buffer) and what no
    /// well-behaved peer sends (a bad header, more credits than it owes,
    /// data after its FIN) is an error, never a panic.
    pub(super) fn complete(
        &mut self,
        st: &mut State,
        mode: Mode,
        layout: &Layout,
        wc: &Done,
        read_header: impl FnOnce(usize) -> io::Result<u64>,
    ) -> io::Result<Step> {
        let kind = wc.wr_id & !0xffff_ffff;
        let slot = (wc.wr_id & WR_SLOT) as usize;
        match kind {
            WR_RECV => {
                self.posted_recvs = self.posted_recvs.checked_sub(1).ok_or_else(not_posted)?
            }
            WR_UNSIGNALLED => {}
            _ => self.posted_sends = self.posted_sends.checked_sub(1).ok_or_else(not_posted)?,
        }
        if kind == WR_RDMA {
            return self.complete_one_sided(slot, wc);
        }
        if wc.status == WcStatus::WorkRequestFlushed {
            return Ok(Step {
                ended: true,
                wake: Wake::NONE,
            });
        }
        if kind == WR_RECV && wc.status == WcStatus::LocalLengthError {
            return Err(protocol(&format!(
                "a message longer than this side's receive buffers ({} bytes)",
                layout.slot_size
            )));
        }
        if wc.status != WcStatus::Success {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!(
                    "RDMA stream: a work request failed: {:?} (vendor error {:#x})",
                    wc.status, wc.vendor_err
                ),
            ));
        }
        let wake = match kind {
            WR_RECV => {
                let len = wc.byte_len as usize;
                if slot >= layout.recv_slots || len > layout.slot_size {
                    return Err(not_posted());
                }
                if len < HEADER_LEN {
                    return Err(protocol("a message shorter than its header"));
                }
                let h = Header::from_word(read_header(slot)?).map_err(|e| protocol(&e))?;
                let message = mode == Mode::Message;
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
                        at: layout.recv_at(slot) + HEADER_LEN,
                        len: data,
                    });
                } else {
                    st.repost.push(slot);
                }
                if h.fin {
                    st.fin_received = true;
                }
                Wake::READER
            }
            WR_SEND | WR_SEND_INLINE => {
                // This SEND and the unsignalled ones before it are done.
                let retires = ((wc.wr_id & 0xffff_ffff) >> WR_RETIRES_SHIFT) as usize;
                let inline = retires + usize::from(kind == WR_SEND_INLINE);
                if retires >= self.signalling.out
                    || inline > st.inline_pending
                    || (kind == WR_SEND && slot >= layout.send_slots)
                {
                    return Err(not_posted());
                }
                self.signalling.completed(retires);
                st.inline_pending -= inline;
                if kind == WR_SEND {
                    st.free.push(slot);
                    Wake::WRITER
                } else {
                    Wake::NONE
                }
            }
            WR_FIN | WR_CTRL if slot >= CTRL_SLOTS || self.ctrl_free.contains(&slot) => {
                return Err(not_posted());
            }
            WR_FIN => {
                self.ctrl_free.push(slot);
                st.fin_done = true;
                Wake::WRITER
            }
            // Never a success (the QP signals only what asks for it).
            WR_UNSIGNALLED => Wake::NONE,
            _ => {
                self.ctrl_free.push(slot);
                Wake::NONE
            }
        };
        Ok(Step { ended: false, wake })
    }

    /// Counts a one-sided request's completion and hands the result to its
    /// caller (if it still waits) once it is known, freeing the slot; a
    /// failed request ends the connection.
    pub(super) fn complete_one_sided(&mut self, slot: usize, wc: &Done) -> io::Result<Step> {
        let flushed = wc.status == WcStatus::WorkRequestFlushed;
        let ended = |ended| Step {
            ended,
            wake: Wake::NONE,
        };
        // The fence of a request already answered (after an error).
        let Some(p) = self.in_flight.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(ended(flushed));
        };
        p.pending = p.pending.saturating_sub(1);
        if wc.status == WcStatus::Success && p.pending > 0 {
            return Ok(ended(false));
        }
        let Some(Posted { op, .. }) = self.in_flight[slot].take() else {
            return Ok(ended(flushed));
        };
        let what = if op.read { "RDMA READ" } else { "RDMA WRITE" };
        let (result, end) = match wc.status {
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
                    wc.vendor_err
                );
                (
                    Err(io::Error::new(kind, text.clone())),
                    Err(io::Error::new(kind, text)),
                )
            }
        };
        let wake = match op.done.send(result) {
            Ok(()) => Wake::ANSWERED,
            Err(_) => Wake::NONE,
        };
        // `op.mr` drops here: the device is done with it.
        end.map(|ended| Step { ended, wake })
    }

    /// Disconnects and waits (for up to [`FLUSH_WAIT`]) until every
    /// posted request has completed; the caller then drops the core. The
    /// core is out of the state by then: nothing else polls the CQ.
    pub(super) async fn close(&mut self, link: &Link) {
        // Moves the QP to ERROR: what is posted completes, flushed.
        if let Some(id) = &self.id {
            let _ = id.id().disconnect();
        }
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

/// The error of a completion for a request that was not posted (or of a
/// buffer out of range): what no device completes.
#[cold]
fn not_posted() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "RDMA stream: a completion for a request that was not posted",
    )
}
