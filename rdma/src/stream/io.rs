//! The tokio side of [`crate::stream`]: the stream, its halves, the listener and
//! the driver task, which the message endpoints ([`super::msg`]) share: one
//! driver and one wire format, in one of two [`Mode`]s.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::cm::{AsyncCm, AsyncCmId, CmEventKind, CmId, ConnParam, Listener};
use crate::os::lock;
use crate::{
    AccessFlags, AsyncCompletionQueue, CompletionChannel, CompletionQueue, MemoryRegion,
    ProtectionDomain, QpCaps, QpType, QueuePair, RecvWr, RemoteMemory, SendWr, WcStatus,
    WorkCompletion,
};

use super::{
    Credits, Header, CONNECT_TIMEOUT, FLUSH_WAIT, HEADER_LEN, LINGER, MAX_PAYLOAD, ONE_SIDED_SLOTS,
    RECV_SLOTS, SEND_SLOTS, SLOT_SIZE,
};

/// Buffers for header-only messages (FIN, credits).
const CTRL_SLOTS: usize = 2;
/// Bytes of each control buffer (a header, rounded up).
const CTRL_SIZE: usize = 64;
/// Completions taken per poll.
const POLL_BATCH: usize = 32;
/// The most bytes of a SEND (header and data) copied into the work
/// request at post time rather than read from the buffer by the device
/// (rsockets' default is 64 bytes of data): small messages then cost the
/// device no read of the region. siw takes up to 80 (five of its SGEs).
const INLINE: usize = HEADER_LEN + 64;

/// The process's default busy-poll time ([`DEFAULT_BUSY_POLL`](super::DEFAULT_BUSY_POLL), or
/// `RDMA_STREAM_SPIN_US` microseconds from the environment, read once; 0
/// turns polling off), in [`Shared::busy_poll`]'s units.
fn default_busy_poll() -> u64 {
    static SPIN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        std::env::var("RDMA_STREAM_SPIN_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(busy_poll_micros(super::DEFAULT_BUSY_POLL), |us| {
                busy_poll_micros(Duration::from_micros(us))
            })
    })
}

/// `d` in whole microseconds, rounded up; [`BUSY_POLL_FOREVER`] for
/// `Duration::MAX` and anything that does not fit.
fn busy_poll_micros(d: Duration) -> u64 {
    if d == Duration::MAX {
        return BUSY_POLL_FOREVER;
    }
    u64::try_from(d.as_nanos().div_ceil(1000)).unwrap_or(BUSY_POLL_FOREVER)
}

/// [`Shared::busy_poll`]'s value for "never sleep".
const BUSY_POLL_FOREVER: u64 = u64::MAX;

/// Passes (of up to [`SPIN_POLLS`] CQ polls each) between two looks at
/// the clock while a driver busy-polls (a clock read is a system call
/// where the clock source is not the TSC).
const CLOCK_EVERY: u32 = 2;

/// CQ polls per pass of a busy-polling driver while nothing comes: a
/// pass is a poll of its task, and a runtime turns its I/O and timer
/// drivers (a system call and a clock read) after every so many polls of
/// tasks (61 by default), so each pass polls the CQ more than once.
const SPIN_POLLS: u32 = 16;

/// Whether a task that a busy-polling driver woke has run by the driver's
/// next pass (see [`Driver::busy_poll`]).
#[derive(Debug, Default)]
struct Handoff(Option<u64>);

impl Handoff {
    /// After a pass, with the halves' `turns` ([`Shared::turns`]) now and
    /// whether the pass woke a task: whether a task woken by the pass
    /// before has not run since (no turn was taken), once per wake.
    fn starved(&mut self, turns: u64, woke: bool) -> bool {
        let starved = self.0.take() == Some(turns);
        if woke {
            self.0 = Some(turns);
        }
        starved
    }
}

/// Yields to the runtime's other tasks once by waking itself: the task
/// goes straight back to the end of the run queue. `tokio::task::yield_now`
/// instead holds the wake until the runtime's next turn of its I/O and
/// timer drivers, a system call and a clock read on every yield.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

// ------------------------------------------------------------ shared state

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
    fn wake_all(&mut self) -> u64 {
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
    read: bool,
    mr: Arc<MemoryRegion>,
    range: Range<usize>,
    remote: RemoteMemory,
    done: oneshot::Sender<io::Result<()>>,
}

/// Why the connection ended, for the halves.
#[derive(Debug, Clone)]
pub(super) enum Ended {
    /// The peer disconnected (or its QP failed) without a FIN for data
    /// still expected.
    PeerGone,
    /// A local failure: the error's kind and text.
    Failed(io::ErrorKind, String),
}

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
    inline_pending: usize,
    /// SENDs posted (data, FIN and credit-only): each takes one of the
    /// peer's receive buffers.
    sent: u64,
    /// The number, counting every SEND from 1, of the last data SEND that
    /// went inline.
    inline_last: u64,
    /// Credits the peer returned in all: each says that it took one more
    /// of our SENDs out of its receive queue (it takes them in order) and
    /// posted that buffer again.
    returned: u64,

    /// One-sided requests not posted yet.
    ops: VecDeque<OneSided>,

    /// The connection is over.
    pub(super) ended: Option<Ended>,

    /// What posts and completes, until the driver takes it at the end.
    core: Option<Box<Core>>,
}

impl State {
    /// Everything written was sent and its SEND completed (a completed
    /// SEND returns its buffer to `free`; one flushed at the end never
    /// does), or, for a SEND that went inline (whose buffer went back when
    /// it was posted), a successful completion of it or of a later data
    /// SEND showed it done, or the peer returned the credit of its message
    /// or of a later one (which it can only once it took that message: a
    /// failed SEND's never comes back): nothing written is lost.
    fn all_sent(&self) -> bool {
        self.queued.is_empty()
            && self.free.len() == SEND_SLOTS
            && (self.inline_pending == 0 || self.returned >= self.inline_last)
    }

    /// Whether something written is in flight: a send buffer neither free
    /// nor queued (its SEND not complete), or more than one SEND whose
    /// credit the peer has not returned (a SEND that went inline freed its
    /// buffer, or used none; the peer returns the credit of the request it
    /// answers with its next message, in a ping-pong).
    fn in_flight(&self) -> bool {
        SEND_SLOTS - self.free.len() - self.queued.len() > 0
            || self.sent.saturating_sub(self.returned) > 1
    }

    fn wake_reader(&mut self) -> u64 {
        self.reader.wake_all()
    }

    fn wake_writer(&mut self) -> u64 {
        self.writer.wake_all()
    }

    /// Fails the one-sided requests not posted, as the connection ended.
    fn fail_queued(&mut self) {
        for op in std::mem::take(&mut self.ops) {
            let why = self.ended.as_ref().unwrap_or(&Ended::PeerGone);
            let _ = op.done.send(Err(ended_error(why, true)));
        }
    }

    fn end(&mut self, why: Ended) {
        if self.ended.is_none() {
            self.ended = Some(why);
        }
        self.wake_reader();
        self.wake_writer();
    }
}

/// What the halves (or the message endpoint) and the driver share.
pub(super) struct Shared {
    /// Dropped first: a core still in it (a driver that never ran) holds
    /// the QP, which goes before the CQ below.
    state: Mutex<State>,
    /// The connection's CQ, polled by whoever drives the core, under the
    /// lock, so that completions are handled in order.
    cq: AsyncCompletionQueue,
    /// Wakes the driver.
    pub(super) notify: Notify,
    /// Receive buffers, then send buffers, then control buffers.
    pub(super) mr: MemoryRegion,
    /// The connection's protection domain: regions for one-sided access.
    pub(super) pd: ProtectionDomain,
    pub(super) mode: Mode,
    pub(super) local: Option<SocketAddr>,
    pub(super) peer: Option<SocketAddr>,
    /// How long the driver busy-polls after each thing it handles before
    /// it sleeps, in microseconds ([`BUSY_POLL_FOREVER`]: never).
    busy_poll: AtomicU64,
    /// Times a half (or the message endpoint) looked at the state, through
    /// [`Shared::lock_half`]: a busy-polling driver that woke a task tells
    /// from it whether the task has run yet.
    turns: AtomicU64,
    /// Tasks the driver woke (readers, writers) or answered (one-sided
    /// requests whose callers still wait).
    wakes: AtomicU64,
    /// The driver busy-polls, and pumps again when the poll ends (before
    /// it sleeps, or leaves the CQ to a polling reader): a half that queued
    /// work (or freed a buffer) under the lock and then reads `true` need
    /// not wake it ([`Shared::nudge`]).
    spinning: AtomicBool,
    /// The driver left the CQ to a polling read and sleeps without arming
    /// it ([`Idle::Standby`]); it pumps when it wakes, within about
    /// [`STANDBY_MAX`]. Set before that sleep, cleared (SeqCst) after it.
    standby: AtomicBool,
    /// A half (or the message endpoint) changed what the driver's
    /// [`pump`](Core::pump) acts on (data queued, buffers freed,
    /// one-sided requests, shutdown, a half gone) since the busy-polling
    /// driver last looked: it skips the pump of a pass that starts with
    /// this unset. Set after the change, which is made under the lock.
    changed: AtomicBool,
    /// What a half that waits and polls the CQ itself ([`Spin`]) told the
    /// driver since it last looked: [`HALF_POLLS`] (the driver leaves the
    /// CQ to it and sleeps without arming the CQ, [`Idle::Standby`]),
    /// [`HALF_DONE`] (its busy-poll time passed with nothing: the driver
    /// arms the CQ and sleeps at once), or nothing (0).
    half_polling: AtomicU8,
    /// The write half waits for the lock ([`Shared::lock_writer`]): a
    /// busy-polling read ends its turn's polls early, so that the lock
    /// goes to the writer.
    writer_waits: AtomicBool,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// [`lock`](Self::lock) for a half's poll, counted in `turns`.
    pub(super) fn lock_half(&self) -> MutexGuard<'_, State> {
        // Not a read-modify-write: the driver only asks whether the count
        // changed, and of two halves that race here one store lands.
        let t = self.turns.load(Ordering::Relaxed);
        self.turns.store(t.wrapping_add(1), Ordering::Relaxed);
        lock(&self.state)
    }

    /// [`lock_half`](Self::lock_half) for the write half, which says that it
    /// waits ([`writer_waits`](Self::writer_waits)). The write half's
    /// calls take it mutably, so one waits at a time.
    pub(super) fn lock_writer(&self) -> MutexGuard<'_, State> {
        self.writer_waits.store(true, Ordering::Relaxed);
        let st = self.lock_half();
        self.writer_waits.store(false, Ordering::Relaxed);
        st
    }

    /// Tells the driver that a half changed the state under the lock (and
    /// released it): wakes it unless it busy-polls. Sound because the
    /// driver clears [`spinning`](Self::spinning) (SeqCst) before its last
    /// pump under the lock: either that pump comes after the half's
    /// change, or the half's load, after the half took the lock that the
    /// pump released, sees `false` and wakes it (a permit, if it is not
    /// asleep yet).
    pub(super) fn nudge(&self) {
        self.changed.store(true, Ordering::Release);
        if !self.spinning.load(Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }

    /// Tells the driver that a half changed the state under the lock (and
    /// released it), and wakes it even while it busy-polls: for a half
    /// gone, which ends the busy poll, after which the driver must look
    /// at the state again where it sleeps (and close once both are gone),
    /// and for a shutdown (rare: the permit left while the driver
    /// busy-polls costs one more pass of its loop later).
    pub(super) fn poke(&self) {
        self.changed.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Whether a half changed the state since the last call (which
    /// clears it): see [`changed`](Self::changed). The driver's pump then
    /// takes the lock the half released, so it sees the change; a change
    /// flagged after the swap stays flagged for the next pass.
    fn take_changed(&self) -> bool {
        self.changed.load(Ordering::Acquire) && self.changed.swap(false, Ordering::AcqRel)
    }

    /// Whether the driver pumps soon without being woken: it busy-polls
    /// (a pass pumps when [`changed`](Self::changed) is set, and it pumps
    /// when the poll ends) or is in standby (it pumps when it wakes,
    /// within about [`STANDBY_MAX`]). Read under the lock, after a change made under
    /// it: the driver clears the flag before the pump that ends that state
    /// and takes the lock for it, so either this read sees the flag cleared
    /// or that pump comes after the change (as in [`nudge`](Self::nudge)).
    fn pumps_soon(&self) -> bool {
        self.spinning.load(Ordering::SeqCst) || self.standby.load(Ordering::SeqCst)
    }

    /// What a half told the driver since the last call (which clears it):
    /// see [`half_polling`](Self::half_polling).
    fn take_half_polls(&self) -> u8 {
        match self.half_polling.load(Ordering::Relaxed) {
            0 => 0,
            _ => self.half_polling.swap(0, Ordering::Relaxed),
        }
    }

    /// A half's own turn at the core, under the lock it holds: takes the
    /// completions there are and posts what they allow (with `poll`), or
    /// posts what can be posted (without), as the driver would on its
    /// next pass, without waiting for it.
    /// An error, or a completion that says the connection ended, stays in
    /// the core for the driver, which is woken to end the connection (and
    /// wakes the halves then). Whether the core was there to drive: not
    /// once the driver has taken it, or has an end to act on.
    pub(super) fn drive(&self, st: &mut State, poll: bool) -> bool {
        self.drive_with(st, |core, st| match poll {
            // A poll that takes completions pumps after them; one that
            // finds none has nothing new to post but the buffers a read
            // left (a half that queued work drove the pump itself, or
            // woke the driver). Receive buffers a read emptied are posted
            // by the first poll that finds nothing.
            true => core.poll_cq(self, st).and_then(|got| match got {
                false if !st.repost.is_empty() => core.pump(self, st),
                _ => Ok(got),
            }),
            false => core.pump(self, st),
        })
        .is_some()
    }

    /// Runs `f` on the core, under the lock `st` is from, as
    /// [`drive`](Self::drive) does: `None` when the core is not there to
    /// drive, else `Some` with what `f` returned, or `Some(None)` when it
    /// failed. Its error, or a completion that says the connection ended,
    /// stays in the core, and the driver is woken to end the connection.
    #[inline]
    fn drive_with<R>(
        &self,
        st: &mut State,
        f: impl FnOnce(&mut Core, &mut State) -> io::Result<R>,
    ) -> Option<Option<R>> {
        let (r, end) = with_core(st, |core, st| {
            if core.gone || core.failed.is_some() {
                return None;
            }
            Some(match f(core, st) {
                Ok(r) => (Some(r), core.gone),
                Err(e) => {
                    core.failed = Some(e);
                    (None, true)
                }
            })
        })??;
        if end {
            self.poke();
        }
        Some(r)
    }

    /// See [`RdmaStream::set_busy_poll`].
    pub(super) fn set_busy_poll(&self, d: Duration) {
        self.busy_poll.store(busy_poll_micros(d), Ordering::Relaxed);
        // A driver asleep takes the new time at once.
        self.notify.notify_one();
    }

    /// See [`RdmaStream::busy_poll`].
    pub(super) fn busy_poll(&self) -> Duration {
        match self.busy_poll.load(Ordering::Relaxed) {
            BUSY_POLL_FOREVER => Duration::MAX,
            us => Duration::from_micros(us),
        }
    }

    /// A region of `len` zeroed bytes in the connection's protection
    /// domain, with `access`.
    pub(super) fn register(
        &self,
        len: usize,
        access: AccessFlags,
    ) -> io::Result<Arc<MemoryRegion>> {
        MemoryRegion::new(&self.pd, len, access)
            .map(Arc::new)
            .map_err(io_err)
    }

    /// Queues an RDMA WRITE of `range` of `local` to `remote` (or a READ of
    /// `remote` into it) and waits until it completes. See
    /// [`RdmaStream::write_remote`] for the checks and the errors.
    pub(super) async fn one_sided(
        &self,
        read: bool,
        local: &Arc<MemoryRegion>,
        range: Range<usize>,
        remote: &RemoteMemory,
    ) -> io::Result<()> {
        let what = if read { "read_remote" } else { "write_remote" };
        let invalid =
            |m: String| io::Error::new(io::ErrorKind::InvalidInput, format!("{what}: {m}"));
        if range.start > range.end || range.end > local.len() {
            return Err(invalid(format!(
                "the local range {range:?} is outside the {}-byte region",
                local.len()
            )));
        }
        let len = range.end - range.start;
        if remote.len != len as u64 {
            return Err(invalid(format!(
                "the local range has {len} bytes, the remote one {} (use RemoteMemory::slice)",
                remote.len
            )));
        }
        if remote.addr.checked_add(remote.len).is_none() {
            return Err(invalid("the remote range wraps around".into()));
        }
        if len > MAX_ONE_SIDED {
            return Err(invalid(format!("{len} bytes, more than {MAX_ONE_SIDED}")));
        }
        if local.pd().as_raw() != self.pd.as_raw() {
            return Err(invalid(
                "the region is not in the connection's protection domain (use register)".into(),
            ));
        }
        if read && !local.access().contains(AccessFlags::LOCAL_WRITE) {
            return Err(invalid(
                "an RDMA READ lands in a region without LOCAL_WRITE".into(),
            ));
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if let Some(why) = &st.ended {
                return Err(ended_error(why, true));
            }
            st.ops.push_back(OneSided {
                read,
                mr: Arc::clone(local),
                range,
                remote: *remote,
                done: tx,
            });
        }
        self.nudge();
        let done = rx.await;
        // The caller's turn: it ran after the driver answered.
        self.turns.fetch_add(1, Ordering::Relaxed);
        match done {
            Ok(r) => r,
            Err(_) => Err(match &self.lock().ended {
                Some(why) => ended_error(why, true),
                None => io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the RDMA connection's driver stopped before the request completed",
                ),
            }),
        }
    }
}

/// The most bytes one RDMA WRITE or READ moves (rxe's and siw's message
/// size limit is 2 GiB).
const MAX_ONE_SIDED: usize = 1 << 31;

pub(super) fn recv_at(slot: usize) -> usize {
    slot * SLOT_SIZE
}

pub(super) fn send_at(slot: usize) -> usize {
    (RECV_SLOTS + slot) * SLOT_SIZE
}

fn ctrl_at(slot: usize) -> usize {
    (RECV_SLOTS + SEND_SLOTS) * SLOT_SIZE + slot * CTRL_SIZE
}

const REGION_LEN: usize = (RECV_SLOTS + SEND_SLOTS) * SLOT_SIZE + CTRL_SLOTS * CTRL_SIZE;

/// Work request ids: the kind in the high half, the slot in the low 16
/// bits, and for a data SEND the unsignalled ones it retires in bits 16
/// to 31 (see [`Core::post_data`]).
const WR_RECV: u64 = 1 << 32;
/// A data SEND from its buffer, which its completion frees.
const WR_SEND: u64 = 2 << 32;
const WR_CTRL: u64 = 3 << 32;
const WR_FIN: u64 = 4 << 32;
const WR_RDMA: u64 = 5 << 32;
/// A signalled data SEND whose data went inline: its buffer was freed at
/// the post.
const WR_SEND_INLINE: u64 = 6 << 32;
/// An unsignalled data SEND (inline): only a failed one (flushed, or in
/// error) completes.
const WR_UNSIGNALLED: u64 = 7 << 32;
const WR_SLOT: u64 = 0xffff;
const WR_RETIRES_SHIFT: u32 = 16;

/// At most this many data SENDs in a row go unsignalled (each inline, so
/// that its buffer is free at once); the next is signalled, and its
/// completion shows theirs. Less than [`SEND_SLOTS`], which bounds the
/// data SENDs in the send queue not known complete: one of them is
/// signalled.
const UNSIGNALLED_RUN: usize = SEND_SLOTS / 2 - 1;

/// Which data SENDs are signalled, and the send queue's room for them
/// (see [`Core::post_data`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Signalling {
    /// Data SENDs posted, signalled or not, that no completion has shown
    /// complete: at most [`SEND_SLOTS`].
    out: usize,
    /// Unsignalled data SENDs posted since the last signalled one.
    run: usize,
}

impl Signalling {
    /// Whether another data SEND may be posted.
    fn room(&self) -> bool {
        self.out < SEND_SLOTS
    }

    /// A data SEND is posted (`inline`: its data goes inline, so it may go
    /// unsignalled): `Some` with the unsignalled SENDs before it that it
    /// retires when it is signalled, `None` when it is not.
    fn post(&mut self, inline: bool) -> Option<usize> {
        debug_assert!(self.room());
        self.out += 1;
        if inline && self.run < UNSIGNALLED_RUN {
            self.run += 1;
            return None;
        }
        Some(std::mem::take(&mut self.run))
    }

    /// A signalled data SEND completed, retiring `retires` unsignalled
    /// ones before it.
    fn completed(&mut self, retires: usize) {
        self.out -= 1 + retires;
    }
}

pub(super) fn io_err(e: crate::Error) -> io::Error {
    let kind = io::Error::from_raw_os_error(e.errno()).kind();
    io::Error::new(kind, e)
}

pub(super) fn ended_error(why: &Ended, writing: bool) -> io::Error {
    match why {
        Ended::PeerGone if writing => io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the RDMA stream's peer disconnected",
        ),
        Ended::PeerGone => io::Error::new(
            io::ErrorKind::ConnectionReset,
            "the RDMA stream's peer disconnected before its end of stream",
        ),
        Ended::Failed(kind, text) => io::Error::new(*kind, text.clone()),
    }
}

// ------------------------------------------------------------ set-up

/// The verbs objects of a stream, made on its CM id before it connects.
pub(super) struct Resources {
    cq: CompletionQueue,
    mr: MemoryRegion,
    pd: ProtectionDomain,
    /// The device is iWARP (siw): an RDMA WRITE completes once sent, not
    /// once placed.
    iwarp: bool,
    /// The most bytes a SEND carries inline on this QP (0: none).
    inline: usize,
}

impl Resources {
    /// Makes the PD, CQ, QP and region on `id`'s device and posts every
    /// receive buffer.
    pub(super) fn new(id: &mut CmId) -> crate::Result<Resources> {
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let channel = CompletionChannel::new(&ctx)?;
        let cq = CompletionQueue::builder(&ctx)
            .cqe((RECV_SLOTS + SEND_SLOTS + CTRL_SLOTS + 2 * ONE_SIDED_SLOTS) as i32)
            .channel(&channel)
            .build()?;
        let caps = QpCaps {
            // A one-sided request takes two on iWARP (a WRITE and its fence).
            max_send_wr: (SEND_SLOTS + CTRL_SLOTS + 2 * ONE_SIDED_SLOTS) as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: INLINE as u32,
        };
        let mr = MemoryRegion::new(&pd, REGION_LEN, AccessFlags::LOCAL_WRITE)?;
        // A device that takes no inline data gets a QP without (the
        // stream then sends every message from its buffer).
        if id.create_qp(&pd, QpType::Rc, &cq, &cq, caps).is_err() {
            let caps = QpCaps {
                max_inline_data: 0,
                ..caps
            };
            id.create_qp(&pd, QpType::Rc, &cq, &cq, caps)?;
        }
        let qp = id
            .qp()
            .ok_or_else(|| crate::Error::invalid("RdmaStream", "the CM id has no QP"))?;
        let inline = (qp.caps().max_inline_data as usize).min(INLINE);
        for slot in 0..RECV_SLOTS {
            post_recv(qp, &mr, slot)?;
        }
        let iwarp = crate::DeviceList::new()
            .ok()
            .and_then(|l| {
                l.find(ctx.name())
                    .map(|d| d.transport_type() == crate::TransportType::Iwarp)
            })
            .unwrap_or(false);
        Ok(Resources {
            cq,
            mr,
            pd,
            iwarp,
            inline,
        })
    }
}

fn post_recv(qp: &QueuePair, mr: &MemoryRegion, slot: usize) -> crate::Result<()> {
    let at = recv_at(slot);
    let sge = [mr.sge(at..at + SLOT_SIZE)?];
    qp.post_recv(&mut [RecvWr::new(WR_RECV | slot as u64, &sge)])
}

/// The parameters both sides connect with: no RNR retries, since credits
/// make them unnecessary (a violation shows as an error).
pub(super) fn conn_param() -> ConnParam {
    let mut p = ConnParam::new();
    p.rnr_retry_count = 0;
    p
}

/// Starts the driver of a connected id and returns what it shares.
pub(super) fn start(id: AsyncCmId, res: Resources, mode: Mode) -> io::Result<Arc<Shared>> {
    let Resources {
        cq,
        mr,
        pd,
        iwarp,
        inline,
    } = res;
    let cq = AsyncCompletionQueue::new(cq).map_err(io_err)?;
    let core = Core {
        id,
        credits: Credits::new(RECV_SLOTS as u32),
        posted_recvs: RECV_SLOTS,
        posted_sends: 0,
        signalling: Signalling::default(),
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
    };
    let local = core.id.id().local_addr();
    let peer = core.id.id().peer_addr();
    let state = State {
        free: (0..SEND_SLOTS).rev().collect(),
        core: Some(Box::new(core)),
        ..State::default()
    };
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        cq,
        notify: Notify::new(),
        mr,
        pd,
        mode,
        local,
        peer,
        busy_poll: AtomicU64::new(default_busy_poll()),
        turns: AtomicU64::new(0),
        wakes: AtomicU64::new(0),
        spinning: AtomicBool::new(false),
        standby: AtomicBool::new(false),
        changed: AtomicBool::new(false),
        half_polling: AtomicU8::new(0),
        writer_waits: AtomicBool::new(false),
    });
    let driver = Driver {
        guard: EndGuard(Arc::clone(&shared)),
    };
    tokio::spawn(driver.run());
    Ok(shared)
}

/// Connects to `addr` and starts the driver.
pub(super) async fn connect(addr: SocketAddr, mode: Mode) -> io::Result<Arc<Shared>> {
    let cm = AsyncCm::new().map_err(io_err)?;
    let (id, _, res) = cm
        .connect(addr, CONNECT_TIMEOUT, &conn_param(), Resources::new)
        .await
        .map_err(io_err)?;
    start(id, res, mode)
}

impl RdmaStream {
    /// The connection's state, shared with its driver.
    pub(super) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.read.shared)
    }

    fn from_shared(shared: Arc<Shared>) -> RdmaStream {
        RdmaStream {
            read: OwnedReadHalf {
                shared: Arc::clone(&shared),
                spin: Spin::default(),
            },
            write: OwnedWriteHalf { shared },
        }
    }
}

// ------------------------------------------------------------ listener

/// Connections a listener sets up ahead of [`RdmaListener::accept`]: its
/// backlog of accepted connections (and of those being accepted).
pub const BACKLOG: usize = 16;

/// A connection made and not handed out yet: dropping it closes it, as
/// dropping a stream does.
pub(super) struct Conn(Option<Arc<Shared>>);

impl Conn {
    pub(super) fn take(mut self) -> Arc<Shared> {
        self.0.take().expect("taken once")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            let mut st = shared.lock();
            st.reader_gone = true;
            st.writer_gone = true;
            st.shutdown = true;
            drop(st);
            shared.poke();
        }
    }
}

/// What the accept task hands to [`RdmaListener::accept`]: a connection
/// and its peer, with the backlog place it holds, or an error.
type Accepted = io::Result<(Conn, SocketAddr, OwnedSemaphorePermit)>;

/// A listening CM id that accepts RDMA streams.
///
/// A task on the runtime that bound it accepts requests in the
/// background, one at a time, up to [`BACKLOG`] ahead of
/// [`accept`](Self::accept) (as a TCP backlog): each is set up (PD, CQ,
/// QP, buffers), accepted and started, and waits in a queue. Further requests wait in the CM's own
/// queue until there is room, and fail at their requester if that takes
/// longer than its connect timeout. Dropping the listener stops the task
/// and closes the connections still queued.
pub struct RdmaListener {
    rx: mpsc::UnboundedReceiver<Accepted>,
    local: Option<SocketAddr>,
    task: tokio::task::AbortHandle,
}

impl RdmaListener {
    /// Binds to `addr` (port 0: the system chooses) and listens. Must be
    /// called inside a tokio runtime, which runs the accept task and the
    /// drivers of the streams accepted.
    pub fn bind(addr: SocketAddr) -> io::Result<RdmaListener> {
        RdmaListener::bind_mode(addr, Mode::Stream)
    }

    /// [`bind`](Self::bind) for connections of `mode`.
    pub(super) fn bind_mode(addr: SocketAddr, mode: Mode) -> io::Result<RdmaListener> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other(
                "RdmaListener::bind must be called inside a tokio runtime",
            ));
        }
        let cm = AsyncCm::new().map_err(io_err)?;
        let listener = cm.listen(addr, 128).map_err(io_err)?;
        let local = listener.local_addr();
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(accept_task(cm, listener, mode, tx)).abort_handle();
        Ok(RdmaListener { rx, local, task })
    }

    /// The bound address, with the port the system chose.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.local.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, "the listener has no address")
        })
    }

    /// Waits for the next connection accepted in the background and
    /// returns the stream and the peer's address.
    ///
    /// An error concerns one request (its set-up failed, or its
    /// requester went away: the listener may be used again) or the
    /// listener (its event router stopped: every later call fails too).
    ///
    /// Cancellation-safe: a connection is taken from the queue only when
    /// this returns it; one accepted while no call waits stays queued.
    pub async fn accept(&mut self) -> io::Result<(RdmaStream, SocketAddr)> {
        let (shared, peer) = self.accept_shared().await?;
        Ok((RdmaStream::from_shared(shared), peer))
    }

    /// The next connection, of the listener's mode.
    pub(super) async fn accept_shared(&mut self) -> io::Result<(Arc<Shared>, SocketAddr)> {
        match self.rx.recv().await {
            Some(Ok((conn, peer, _permit))) => Ok((conn.take(), peer)),
            Some(Err(e)) => Err(e),
            None => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the RDMA listener's accept task stopped",
            )),
        }
    }
}

impl Drop for RdmaListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts requests while the listener lives, one at a time (as
/// [`RdmaListener::accept`] did when it ran them itself), each holding one
/// of [`BACKLOG`] places until it is handed out.
async fn accept_task(
    _cm: AsyncCm,
    mut listener: Listener,
    mode: Mode,
    tx: mpsc::UnboundedSender<Accepted>,
) {
    let places = Arc::new(Semaphore::new(BACKLOG));
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&places).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = tx.closed() => return,
        };
        let req = tokio::select! {
            r = listener.accept() => r,
            _ = tx.closed() => return,
        };
        let mut req = match req {
            Ok(req) => req,
            Err(e) => {
                // The event router stopped: the listener is over.
                let _ = tx.send(Err(io_err(e)));
                return;
            }
        };
        let accepted = async {
            let peer = req.id().peer_addr();
            let res = Resources::new(req.id_mut()).map_err(io_err)?;
            let (id, _) = req
                .accept(&conn_param(), CONNECT_TIMEOUT)
                .await
                .map_err(io_err)?;
            let conn = Conn(Some(start(id, res, mode)?));
            let peer = peer
                .or(conn.0.as_ref().and_then(|s| s.peer))
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::NotConnected, "the request has no address")
                })?;
            Ok((conn, peer, permit))
        };
        let accepted = tokio::select! {
            a = accepted => a,
            _ = tx.closed() => return,
        };
        // A listener gone: the connection closes as it drops.
        if tx.send(accepted).is_err() {
            return;
        }
    }
}

// ------------------------------------------------------------ stream

/// A connected RDMA byte stream.
///
/// Reads and writes go through registered buffers that the stream's own
/// calls and a driver task (on the runtime that made the stream) post and
/// complete; see the
/// [module docs](crate::stream) for the design and its guarantees.
pub struct RdmaStream {
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
}

impl RdmaStream {
    /// Connects to a listener at `addr`. Must be called inside a tokio
    /// runtime, which then runs the stream's driver task.
    ///
    /// Cancellation-safe: dropping the future at any point destroys
    /// whatever it had made.
    pub async fn connect(addr: SocketAddr) -> io::Result<RdmaStream> {
        connect(addr, Mode::Stream)
            .await
            .map(RdmaStream::from_shared)
    }

    /// The connection's protection domain, for regions that the peer
    /// reaches with one-sided requests or that [`write_remote`](Self::write_remote)
    /// and [`read_remote`](Self::read_remote) use.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.read.shared.pd
    }

    /// Registers `len` zeroed bytes in the connection's protection domain
    /// with `access` (e.g. `LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ` for
    /// a region the peer writes and reads; send its
    /// [`remote`](MemoryRegion::remote) descriptor to the peer, e.g. in a
    /// message). The region stays valid after the stream is gone.
    pub fn register(&self, len: usize, access: AccessFlags) -> io::Result<Arc<MemoryRegion>> {
        self.read.shared.register(len, access)
    }

    /// RDMA WRITEs `range` of `local` to the peer's `remote` and waits
    /// until the data is placed in the peer's memory (or refused). On
    /// InfiniBand and RoCE (rxe) the WRITE's completion says so (the
    /// peer acknowledged it); on iWARP (siw) a WRITE completes once sent,
    /// so the driver follows it with a zero-length READ, whose response
    /// comes only after the WRITE is placed: one round trip more.
    ///
    /// Checked before anything is posted, each an `InvalidInput` error
    /// that leaves the connection as it was: `range` lies in `local`,
    /// has `remote.len` bytes (take a part of a peer's range with
    /// [`RemoteMemory::slice`], which checks it too), at most 2 GiB, and
    /// `local` is in the connection's protection domain
    /// ([`register`](Self::register)); for a READ, `local` has
    /// `LOCAL_WRITE`.
    ///
    /// What only the peer's device can check (the rkey, the range within
    /// the peer's region, the region's rights) fails on the device. On
    /// InfiniBand and RoCE (rxe) the request completes with the peer's
    /// answer, returned as `PermissionDenied` (remote access error: bad
    /// rkey, out of range, no right) or `InvalidInput` (remote invalid
    /// request) or `ConnectionAborted` (other). On iWARP (siw) the peer
    /// answers with a Terminate message that ends the connection without
    /// telling the requester why: the request fails with
    /// `ConnectionAborted`, as after a disconnect. Either way the QP is
    /// then in the error state, as RC defines: the connection is over for
    /// everything (reads, writes, messages and other one-sided requests
    /// fail with the same error).
    ///
    /// Requests are posted in the order they are made, alongside the data,
    /// up to [`ONE_SIDED_SLOTS`] at once; they take
    /// no credit (the peer's CPU is not involved). An RDMA WRITE is not
    /// ordered with the peer's reads of its region: tell the peer
    /// through a message or the stream after this returns.
    ///
    /// Cancellation-safe in the sense that matters for memory: dropping the
    /// future leaves the request to the driver, which holds a clone of
    /// `local` until the request completes, so the region is never freed
    /// under the device; the request may or may not have been done (a
    /// request still queued when its future is dropped is not posted).
    pub async fn write_remote(
        &self,
        local: &Arc<MemoryRegion>,
        range: Range<usize>,
        remote: &RemoteMemory,
    ) -> io::Result<()> {
        self.read
            .shared
            .one_sided(false, local, range, remote)
            .await
    }

    /// RDMA READs the peer's `remote` into `range` of `local` (which needs
    /// `LOCAL_WRITE`) and waits until the data is there. The checks,
    /// errors and cancellation are those of
    /// [`write_remote`](Self::write_remote).
    pub async fn read_remote(
        &self,
        local: &Arc<MemoryRegion>,
        range: Range<usize>,
        remote: &RemoteMemory,
    ) -> io::Result<()> {
        self.read.shared.one_sided(true, local, range, remote).await
    }

    /// Sets how long the connection's driver busy-polls for completions
    /// after each thing it handles (a completion, data written) before it
    /// sleeps on the completion channel, and how long a read that finds
    /// nothing polls the CQ itself before it sleeps (see the
    /// [module docs](crate::stream)).
    ///
    /// The default, [`DEFAULT_BUSY_POLL`](super::DEFAULT_BUSY_POLL), catches
    /// the reply of a fast round trip without the channel's wake-up.
    /// `Duration::ZERO` sleeps at once (the least CPU, the most latency);
    /// `Duration::MAX` never sleeps: the driver (or a waiting read) polls
    /// as long as the connection lives, a CPU's worth of it, for the
    /// lowest latency (as
    /// Linux's `SO_BUSY_POLL` does for a socket, and rsockets' non-blocking
    /// callers that spin). The polling yields to the runtime's other tasks
    /// after each pass of a few polls and looks at the clock every few
    /// passes, so the time is a lower bound; it stops early when the
    /// connection manager has news (the peer disconnected, the device
    /// went) or both halves are dropped.
    /// A new time applies at once, also to a driver polling. Times are kept
    /// in whole microseconds, rounded up. The halves share the setting
    /// ([`OwnedReadHalf::set_busy_poll`]).
    pub fn set_busy_poll(&self, time: Duration) {
        self.read.shared.set_busy_poll(time);
    }

    /// The busy-poll time ([`set_busy_poll`](Self::set_busy_poll)).
    pub fn busy_poll(&self) -> Duration {
        self.read.shared.busy_poll()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.read.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.read.local_addr()
    }

    /// Splits the stream into a read half and a write half that can move
    /// to different tasks. Dropping the write half shuts the write side
    /// down (the peer reads EOF); dropping both closes the stream.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        (self.read, self.write)
    }
}

/// The read half of an [`RdmaStream`].
pub struct OwnedReadHalf {
    shared: Arc<Shared>,
    spin: Spin,
}

/// [`Shared::half_polling`]: a half polls the CQ.
const HALF_POLLS: u8 = 1;
/// [`Shared::half_polling`]: a half's busy poll ran out.
const HALF_DONE: u8 = 2;

/// CQ polls of a busy-polling read per poll of its task (see [`Spin`]):
/// some microseconds of empty polls. Each 61 polls of tasks (tokio's
/// default event interval) the runtime turns its I/O and timer drivers:
/// an `epoll_wait` and three or four clock reads, system calls where the
/// clock source is not the TSC (1.2 to 1.8 us each in the TCG guest).
/// With 64 polls per turn a 64-byte ping-pong on rxe made 0.8 to 0.9 of
/// these calls per round trip on each side; with 256, 0.1.
const READ_POLLS: u32 = 256;

/// Polls of a waiting read's task between two looks at the clock (see
/// [`Spin`]).
const HALF_CLOCK_EVERY: u32 = 2;

/// A reader's own busy poll while it waits for data: each poll of its
/// read polls the CQ up to [`READ_POLLS`] times and, while the
/// connection's busy-poll time ([`Shared::busy_poll`]) lasts, wakes its
/// own task to poll again, so a message that arrives is read in the
/// reader's task with no hand-over from the driver's; the driver
/// meanwhile leaves the CQ to it ([`Shared::half_polling`]). When the time
/// passes the reader sleeps and wakes the driver, which arms the CQ.
#[derive(Debug, Default)]
struct Spin {
    /// Polls since the wait began.
    polls: u32,
    /// When the wait's busy poll ends (set at the first look at the clock).
    until: Option<Instant>,
    /// This wait told the driver that a half polls.
    told: bool,
}

impl Spin {
    /// After a poll that found nothing to read: whether the reader polls
    /// again (its task wakes itself) rather than sleep until the driver
    /// wakes it.
    fn again(&mut self, shared: &Shared) -> bool {
        let again = match shared.busy_poll.load(Ordering::Relaxed) {
            0 => false,
            BUSY_POLL_FOREVER => true,
            us => {
                self.polls = self.polls.wrapping_add(1);
                if self.polls % HALF_CLOCK_EVERY != 0 {
                    true
                } else {
                    let now = Instant::now();
                    let until = *self
                        .until
                        .get_or_insert_with(|| now + Duration::from_micros(us));
                    now < until
                }
            }
        };
        if again {
            shared.half_polling.store(HALF_POLLS, Ordering::Relaxed);
            self.told = true;
            return true;
        }
        // A wake-up without data (a credit-only message) starts anew.
        let told = self.told;
        self.reset();
        if told {
            // The driver may have left the CQ to this half: it takes it
            // back now, and arms it at once (the busy-poll time has
            // passed). The waker is registered, under the lock, before
            // this, so a completion the driver takes wakes the reader.
            shared.half_polling.store(HALF_DONE, Ordering::Relaxed);
            shared.poke();
        }
        false
    }

    /// The wait is over (data came, or the end).
    fn reset(&mut self) {
        self.polls = 0;
        self.until = None;
        self.told = false;
    }
}

/// The write half of an [`RdmaStream`].
pub struct OwnedWriteHalf {
    shared: Arc<Shared>,
}

fn addr(a: Option<SocketAddr>) -> io::Result<SocketAddr> {
    a.ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no address"))
}

impl OwnedReadHalf {
    /// Sets the connection's busy-poll time, which both halves share
    /// ([`RdmaStream::set_busy_poll`]).
    pub fn set_busy_poll(&self, time: Duration) {
        self.shared.set_busy_poll(time);
    }

    /// The connection's busy-poll time.
    pub fn busy_poll(&self) -> Duration {
        self.shared.busy_poll()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        addr(self.shared.peer)
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        addr(self.shared.local)
    }
}

impl OwnedWriteHalf {
    /// Sets the connection's busy-poll time, which both halves share
    /// ([`RdmaStream::set_busy_poll`]).
    pub fn set_busy_poll(&self, time: Duration) {
        self.shared.set_busy_poll(time);
    }

    /// The connection's busy-poll time.
    pub fn busy_poll(&self) -> Duration {
        self.shared.busy_poll()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        addr(self.shared.peer)
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        addr(self.shared.local)
    }
}

impl std::fmt::Debug for RdmaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaStream")
            .field("local", &self.read.shared.local)
            .field("peer", &self.read.shared.peer)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for OwnedReadHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedReadHalf")
            .field("peer", &self.shared.peer)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for OwnedWriteHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedWriteHalf")
            .field("peer", &self.shared.peer)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaListener")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl AsyncRead for OwnedReadHalf {
    /// Copies received data into `buf`: `Ready(Ok)` with bytes added, or
    /// with none at the end of the stream (the peer's FIN), or an error
    /// once the data received before the connection ended is read.
    /// Cancellation-safe: `Pending` consumes nothing.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let shared = &*this.shared;
        let mut st = shared.lock_half();
        // This half is the stream's only reader: a waker registered is
        // from its own earlier poll, and a completion taken below must not
        // wake its task again.
        st.reader.clear();
        // This poll took the CQ's completions itself.
        let mut polled = false;
        if st.rx.is_empty() && !st.fin_received && st.ended.is_none() && buf.remaining() > 0 {
            polled = true;
            // Many polls per turn while the read busy-polls: a poll of an
            // empty CQ costs far less than a turn of the runtime (see
            // READ_POLLS). The turn ends early when the write half waits
            // for the lock (on another thread): the mutex is not fair, and
            // the read would take it back first, turn after turn.
            let polls = match shared.busy_poll.load(Ordering::Relaxed) {
                0 => 1,
                _ => READ_POLLS,
            };
            for _ in 0..polls {
                if !shared.drive(&mut st, true)
                    || !st.rx.is_empty()
                    || st.fin_received
                    || shared.writer_waits.load(Ordering::Relaxed)
                {
                    break;
                }
            }
        }
        if !st.rx.is_empty() {
            let polling = polled || this.spin.told;
            this.spin.reset();
            let mut freed = false;
            while buf.remaining() > 0 {
                let Some(seg) = st.rx.front_mut() else { break };
                let n = seg.len.min(buf.remaining());
                let dst = &mut buf.initialize_unfilled_to(n)[..n];
                if let Err(e) = shared.mr.read(seg.at, dst) {
                    return Poll::Ready(Err(io_err(e)));
                }
                buf.advance(n);
                seg.at += n;
                seg.len -= n;
                if seg.len == 0 {
                    let slot = seg.slot;
                    st.rx.pop_front();
                    st.repost.push(slot);
                    freed = true;
                }
            }
            if freed && polling && shared.pumps_soon() {
                // This read polls the CQ (now, or through its wait): the
                // emptied buffers go with the next pump, after the reply a
                // write may post at once: that write's, the next read's
                // polls', or the driver's next pass.
                drop(st);
                shared.changed.store(true, Ordering::Release);
            } else if freed && !shared.drive(&mut st, false) {
                drop(st);
                shared.nudge();
            }
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() == 0 || st.fin_received {
            this.spin.reset();
            return Poll::Ready(Ok(()));
        }
        if let Some(why) = &st.ended {
            this.spin.reset();
            return Poll::Ready(Err(ended_error(why, false)));
        }
        st.reader.register(cx.waker());
        drop(st);
        if this.spin.again(shared) {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl AsyncWrite for OwnedWriteHalf {
    /// Copies as much of `buf` as the free send buffers hold and queues it
    /// for sending (a write of up to 64 bytes with nothing before it is
    /// sent at once, without a buffer); `Pending` while none is free (the
    /// peer has not read).
    /// Cancellation-safe: `Pending` takes nothing.
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let shared = &*self.shared;
        let mut st = shared.lock_writer();
        // This half is the stream's only writer: as in `poll_read`.
        st.writer.clear();
        if let Some(why) = &st.ended {
            return Poll::Ready(Err(ended_error(why, true)));
        }
        if st.shutdown {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "write after shutdown",
            )));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // A small write with nothing before it goes at once, inline,
        // without a send buffer.
        if HEADER_LEN + buf.len() <= INLINE
            && st.queued.is_empty()
            && !st.in_flight()
            && shared.drive_with(&mut st, |core, st| core.send_now(shared, st, buf))
                == Some(Some(true))
        {
            // The receive buffers a read left to the next pump (see
            // `poll_read`) go now, after this SEND.
            if !st.repost.is_empty() {
                shared.drive(&mut st, false);
            }
            return Poll::Ready(Ok(buf.len()));
        }
        // No room: completed SENDs free their buffers.
        if st.free.is_empty() && st.queued.back().is_none_or(|&(_, len)| len == MAX_PAYLOAD) {
            shared.drive(&mut st, true);
        }
        let mut done = 0;
        // First into the buffer queued last, if it has room: it is not
        // posted yet.
        if let Some((slot, len)) = st.queued.back_mut() {
            let n = (MAX_PAYLOAD - *len).min(buf.len());
            if n > 0 {
                if let Err(e) = shared
                    .mr
                    .write(send_at(*slot) + HEADER_LEN + *len, &buf[..n])
                {
                    return Poll::Ready(Err(io_err(e)));
                }
                *len += n;
                done = n;
            }
        }
        while done < buf.len() {
            let Some(slot) = st.free.pop() else { break };
            let n = MAX_PAYLOAD.min(buf.len() - done);
            if let Err(e) = shared
                .mr
                .write(send_at(slot) + HEADER_LEN, &buf[done..done + n])
            {
                st.free.push(slot);
                return Poll::Ready(Err(io_err(e)));
            }
            st.queued.push_back((slot, n));
            done += n;
        }
        if done == 0 {
            st.writer.register(cx.waker());
            drop(st);
            // Someone must take the completions that free a buffer: the
            // driver, unless it busy-polls or a reader polls (the driver
            // may have left the CQ to a reader whose wait has ended).
            shared.nudge();
            return Poll::Pending;
        }
        // Posted now when nothing written is in flight, or when the last
        // buffer is full; else left to the driver's next pass (or the pump
        // after the next completion), so that small writes meanwhile join
        // the last buffer, as Nagle's algorithm holds back a segment while
        // one is unacknowledged, for a shorter time.
        let full = st.queued.back().is_some_and(|&(_, len)| len == MAX_PAYLOAD);
        let posted = (full || !st.in_flight()) && shared.drive(&mut st, false);
        drop(st);
        if !posted {
            shared.nudge();
        }
        Poll::Ready(Ok(done))
    }

    /// Ready at once: written data is in registered send buffers, posted
    /// as credits allow (a shutdown waits until it is
    /// all sent). An error when the connection has ended with data written
    /// and not sent (lost): after a clean close by the peer it succeeds.
    /// Cancellation-safe.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        let st = self.shared.lock_writer();
        match &st.ended {
            Some(why) if !st.fin_done && !st.all_sent() => Poll::Ready(Err(ended_error(why, true))),
            _ => Poll::Ready(Ok(())),
        }
    }

    /// Queues a FIN after the data written and waits until it is sent:
    /// then the peer reads EOF after the data. Reading stays possible.
    /// Cancellation-safe: the FIN, once queued, goes even if the future
    /// is dropped; calling it again waits again.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        let shared = &*self.shared;
        let mut st = shared.lock_writer();
        if st.fin_done {
            return Poll::Ready(Ok(()));
        }
        if let Some(why) = &st.ended {
            // The peer left after everything written had gone: nothing is
            // lost, and there is nothing left to end (as a TCP shutdown
            // after the peer's FIN and close).
            if matches!(why, Ended::PeerGone) && st.all_sent() {
                return Poll::Ready(Ok(()));
            }
            return Poll::Ready(Err(ended_error(why, true)));
        }
        let first = !st.shutdown;
        st.shutdown = true;
        st.writer.register(cx.waker());
        drop(st);
        if first {
            shared.poke();
        } else {
            // As a blocked write does: someone must take the FIN's
            // completion.
            shared.nudge();
        }
        Poll::Pending
    }
}

impl Drop for OwnedReadHalf {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.reader_gone = true;
        st.reader.clear();
        drop(st);
        self.shared.poke();
    }
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.writer_gone = true;
        st.shutdown = true;
        st.writer.clear();
        drop(st);
        self.shared.poke();
    }
}

impl AsyncRead for RdmaStream {
    /// As [`OwnedReadHalf`]'s: cancellation-safe.
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl AsyncWrite for RdmaStream {
    /// As [`OwnedWriteHalf`]'s: cancellation-safe.
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.write).poll_write(cx, buf)
    }

    /// As [`OwnedWriteHalf`]'s: cancellation-safe.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.write).poll_flush(cx)
    }

    /// As [`OwnedWriteHalf`]'s: cancellation-safe.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.write).poll_shutdown(cx)
    }
}

// ------------------------------------------------------------ driver

/// Tells the halves that the driver is gone when it stops without saying
/// why (its runtime shut down, or the task was aborted), and drops the
/// core (the CM id and the QP) if the driver still had it in the state.
struct EndGuard(Arc<Shared>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.end(Ended::Failed(
            io::ErrorKind::BrokenPipe,
            "the RDMA stream's driver task stopped (its runtime shut down)".into(),
        ));
        st.fail_queued();
        let core = st.core.take();
        drop(st);
        drop(core);
    }
}

/// How serving a connection ended.
enum Exit {
    /// Both halves are gone and what they wrote is sent (or the linger
    /// time passed).
    Closed,
    /// The peer disconnected, or the QP failed.
    PeerGone,
}

/// How a busy poll ended without the connection's end.
enum Idle {
    /// Its time passed (or a CM event waits, or both halves are gone):
    /// arm the CQ and sleep.
    Sleep,
    /// A half polls the CQ itself ([`Shared::half_polling`]): sleep without
    /// arming, and look again after a standby ([`STANDBY`] to
    /// [`STANDBY_MAX`]).
    Standby,
}

/// How long a driver that left the CQ to a polling half first sleeps
/// before it looks whether the half still polls (and pumps what a read
/// left). A half whose busy-poll time passes wakes it at once, and so do a
/// write that waits for a buffer, a shutdown, a one-sided
/// request and a half dropped; a read whose wait ended with data, or whose
/// future was dropped mid-poll, does not. Each standby that passes with
/// nothing for the driver to post, and is followed by another, doubles
/// the next, up to [`STANDBY_MAX`]: a reader that keeps polling then
/// costs the runtime a wake-up of the driver (a timer, a turn of the
/// runtime's drivers, a poll of its task) about every 8 ms rather than
/// every millisecond, each of which delays a message that comes meanwhile.
const STANDBY: Duration = Duration::from_millis(1);

/// The longest standby: a read dropped mid-poll leaves the CQ to no one
/// for about this long at most (the timer's tick of a millisecond
/// added); its completions wait, none is lost. The wake-up after a standby
/// that passed checks that a read still polls ([`Driver::busy_poll`]).
const STANDBY_MAX: Duration = Duration::from_millis(8);

/// The length of the driver's standbys (see [`STANDBY`]).
#[derive(Debug)]
struct Backoff {
    /// The last standby's length.
    last: Duration,
    /// It passed, and nothing was posted or woke the driver since.
    passed: bool,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            last: STANDBY,
            passed: false,
        }
    }
}

impl Backoff {
    /// The length of a standby that starts now: twice the last (up to
    /// [`STANDBY_MAX`]) right after one that passed, else [`STANDBY`].
    fn start(&mut self) -> Duration {
        self.last = match self.passed {
            true => (self.last * 2).min(STANDBY_MAX),
            false => STANDBY,
        };
        self.passed = false;
        self.last
    }

    /// A standby passed (its timer fired).
    fn passed(&mut self) {
        self.passed = true;
    }

    /// The driver did something, or was woken, or a standby did not
    /// follow at once.
    fn reset(&mut self) {
        self.passed = false;
    }
}

/// The task that serves a stream: it sleeps on the CQ's completion channel
/// and the CM id's events, busy-polls for a while after each thing it
/// handles, and closes the connection. What posts and completes is the
/// [`Core`], in the shared state, which a waiting half also drives.
struct Driver {
    guard: EndGuard,
}

/// What posts work requests and takes completions: the CM id (and with it
/// the QP) and the bookkeeping of what is posted. It lives in the state,
/// under its lock, so that whoever holds the lock may drive it: the driver
/// task, or a half that waits for data or for a free buffer and polls the
/// CQ itself. The driver takes it out when the connection ends. Fields
/// drop in order: the id (and with it the QP) before the regions of the
/// one-sided requests still posted.
pub(super) struct Core {
    id: AsyncCmId,
    credits: Credits,
    posted_recvs: usize,
    /// Signalled send-queue requests posted and not completed (an
    /// unsignalled one completes only when flushed).
    posted_sends: usize,
    /// Which data SENDs are signalled; the send queue's room for them.
    signalling: Signalling,
    ctrl_free: Vec<usize>,
    fin_posted: bool,
    /// Data (or a message) came after our FIN was posted: the peer learns
    /// that it arrived from the credits we return for it (see
    /// [`last_credits_due`](Self::last_credits_due)).
    data_after_fin: bool,
    /// The last credit-only message of a close went.
    last_credits_sent: bool,
    /// One-sided requests posted, by the low half of their wr id.
    in_flight: Vec<Option<Posted>>,
    /// Fence each RDMA WRITE with a zero-length READ (iWARP).
    iwarp: bool,
    /// The most bytes a SEND carries inline ([`Resources::inline`]).
    inline: usize,
    /// Both halves were gone at the last [`pump`](Self::pump).
    halves_gone: bool,
    /// A completion said the connection ended (a flushed request: the QP
    /// is in ERROR), for the driver to act on.
    gone: bool,
    /// An error a half met while it drove the core, for the driver, which
    /// ends the connection with it.
    failed: Option<io::Error>,
    /// Completions as polled, initialised once.
    wcs: [WorkCompletion; POLL_BATCH],
}

/// Sets one of the driver's flags ([`Shared::spinning`] while it
/// busy-polls, [`Shared::standby`] while it sleeps in standby) for as long
/// as it lives; cleared (SeqCst) when it drops, however the poll or the
/// sleep ends.
struct Raised<'a>(&'a AtomicBool);

impl Raised<'_> {
    fn new(flag: &AtomicBool) -> Raised<'_> {
        flag.store(true, Ordering::SeqCst);
        Raised(flag)
    }
}

impl Drop for Raised<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// A one-sided request posted: its completions still to come (a fenced
/// WRITE has two).
struct Posted {
    op: OneSided,
    pending: u8,
}

/// Runs `f` on the state's core (taken out meanwhile, so that both can be
/// borrowed); `None` once the driver has taken it for good.
fn with_core<R>(st: &mut State, f: impl FnOnce(&mut Core, &mut State) -> R) -> Option<R> {
    let mut core = st.core.take()?;
    let r = f(&mut core, st);
    st.core = Some(core);
    Some(r)
}

impl Driver {
    fn shared(&self) -> &Arc<Shared> {
        &self.guard.0
    }

    /// Runs `f` on the core under the lock; first an error a half met
    /// while driving it.
    fn locked<R>(&self, f: impl FnOnce(&mut Core, &mut State) -> io::Result<R>) -> io::Result<R> {
        let mut st = self.shared().lock();
        with_core(&mut st, |core, st| match &core.failed {
            // Kept: the halves leave the core alone until `run` takes it.
            Some(e) => Err(copy_err(e)),
            None => f(core, st).inspect_err(|e| {
                // The halves leave the core alone until the driver ends
                // the connection with `e`.
                core.failed = Some(copy_err(e));
            }),
        })
        .unwrap_or_else(|| Err(io::Error::other("the RDMA stream's core is gone")))
    }

    async fn run(self) {
        let exit = self.serve().await;
        let core = {
            let mut st = self.shared().lock();
            match &exit {
                Ok(Exit::Closed) => {}
                Ok(Exit::PeerGone) => st.end(Ended::PeerGone),
                Err(e) => st.end(Ended::Failed(e.kind(), e.to_string())),
            }
            st.fail_queued();
            // From here on the halves leave the CQ and the QP alone.
            st.core.take()
        };
        let Some(mut core) = core else { return };
        core.close(self.shared()).await;
        // One-sided requests whose completions were taken by `close`
        // (flushed): failed as the connection ended. Only once nothing is
        // posted any more, so that no region goes while the device may
        // still use it (else they stay, and their callers see the end).
        if core.posted_sends == 0 {
            for p in core.in_flight.iter_mut().filter_map(Option::take) {
                let _ = p.op.done.send(Err(aborted(p.op.read, core.iwarp)));
            }
        }
        let mut st = self.shared().lock();
        st.repost.clear();
        st.wake_writer();
        st.wake_reader();
        drop(st);
        // The id and the QP go here, before the guard.
        drop(core);
    }

    /// Serves the connection until it ends.
    async fn serve(&self) -> io::Result<Exit> {
        let shared = Arc::clone(self.shared());
        let mut linger: Option<Instant> = None;
        // The linger branch's deadline while it is disabled (never used).
        let never = Instant::now();
        let mut backoff = Backoff::default();
        let mut standby_for = STANDBY;
        loop {
            let (closing, gone) = self.locked(|core, st| {
                if core.pump(&shared, st)? {
                    backoff.reset();
                }
                Ok((st.reader_gone && st.writer_gone, core.gone))
            })?;
            if gone {
                return Ok(Exit::PeerGone);
            }
            let mut standby = false;
            if closing {
                let done = self.locked(|core, st| {
                    Ok(st.queued.is_empty() && (st.fin_done || !st.shutdown) && core.settled())
                })?;
                if done {
                    return Ok(Exit::Closed);
                }
                let t = *linger.get_or_insert_with(|| Instant::now() + LINGER);
                if Instant::now() >= t {
                    return Ok(Exit::Closed);
                }
            } else {
                match self.busy_poll(&mut backoff).await? {
                    None => return Ok(Exit::PeerGone),
                    Some(Idle::Standby) => {
                        standby = true;
                        standby_for = backoff.start();
                    }
                    Some(Idle::Sleep) => {}
                }
            }
            // What a half queued without waking the driver (it read
            // `spinning` before busy_poll cleared it): see `nudge`.
            if self.locked(|core, st| core.pump(&shared, st))? {
                backoff.reset();
            }
            if !standby {
                // Arms the CQ and looks again: a completion that came
                // before the arm raises no event.
                let (handled, gone) = self.locked(|core, st| {
                    let mut handled = core.poll_cq(&shared, st)?;
                    if !handled {
                        shared.cq.cq().req_notify(false).map_err(io_err)?;
                        handled = core.poll_cq(&shared, st)?;
                    }
                    Ok((handled, core.gone))
                })?;
                if gone {
                    return Ok(Exit::PeerGone);
                }
                if handled {
                    backoff.reset();
                    continue;
                }
            }
            let event = std::future::poll_fn(|cx| {
                let mut st = shared.lock();
                match st.core.as_mut() {
                    Some(core) => core.id.poll_event(cx),
                    None => Poll::Pending,
                }
            });
            // Cleared when the wait ends, however it ends; the pump at the
            // top of the loop follows.
            let _standby = standby.then(|| Raised::new(&shared.standby));
            backoff.reset();
            let gone = tokio::select! {
                biased;
                r = shared.cq.wait_event(), if !standby => {
                    r.map_err(io_err)?;
                    false
                }
                ev = event => {
                    match ev.map_err(io_err)?.kind {
                        CmEventKind::Disconnected => {
                            // Completions that came before it are data.
                            self.locked(|core, st| core.drain_cq(&shared, st))?;
                            true
                        }
                        CmEventKind::DeviceRemoval => true,
                        _ => false,
                    }
                }
                _ = shared.notify.notified() => false,
                _ = tokio::time::sleep(standby_for), if standby => {
                    backoff.passed();
                    false
                }
                _ = tokio::time::sleep_until(linger.unwrap_or(never)), if linger.is_some() => false,
            };
            if gone {
                return Ok(Exit::PeerGone);
            }
        }
    }

    /// Busy-polls the CQ, without arming it, until the connection's
    /// busy-poll time ([`Shared::busy_poll`]) has passed with nothing to
    /// do (the clock is read every [`CLOCK_EVERY`] passes, so the time
    /// counts from up to that many passes after the last thing done, and a
    /// changed time counts anew), posting what the halves queue meanwhile
    /// and yielding to the runtime's other tasks between passes (so a half
    /// woken by a completion runs, and its reply is posted, while the
    /// driver still polls). A completion that comes within that time is
    /// handled without the completion channel's wake-up (a wait in the
    /// reactor, a read of the channel and a re-arm), which costs more than
    /// a small message's round trip. Returns to the caller's sleep when the
    /// time passes, a CM event is queued (the peer's disconnect ends the
    /// connection there) or both halves go, and to a sleep without the CQ
    /// when a half polls it itself ([`Idle::Standby`]); `None` when a
    /// completion says the connection ended.
    ///
    /// A yield wakes the driver's own task, which puts it at the end of
    /// the run queue, behind a task it woke. But a current-thread
    /// runtime's `block_on` future (a `#[tokio::main(flavor =
    /// "current_thread")]` body) is not in that queue: the runtime polls
    /// it only once the queue is empty or after a run of tasks. So when a
    /// task woken by a completion has not run by the next pass (no half
    /// looked at the state meanwhile: [`Shared::turns`]), the driver
    /// yields through `tokio::task::yield_now`, which lets the runtime
    /// poll that future at once, at the price of a turn of its I/O and
    /// timer drivers (a system call and a clock read); a spawned task
    /// woken on a current-thread runtime runs before that pass, and costs
    /// no such turn. The turns are the connection's, not the woken task's:
    /// a half used by another task meanwhile counts as the woken one
    /// running (a `block_on` reader then waits for the runtime's own turn,
    /// after a run of tasks); a task on another thread (a multi-thread
    /// runtime's worker, a [`blocking`](super::blocking) caller) that has
    /// not run by the next pass costs a turn it did not need.
    ///
    /// After a standby that passed ([`Backoff`]), a `HALF_POLLS` left from
    /// before may be stale (the read's future dropped since): it is
    /// cleared, and the driver yields once, so that a read that still
    /// polls says so again (a task spawned on the same current-thread
    /// runtime woke itself and runs first; a read elsewhere, or a
    /// `block_on` future, says so at a later look). A `HALF_POLLS` seen
    /// after that is fresh: the standby that follows is longer unless a
    /// pass did something meanwhile, which starts the back-off over.
    async fn busy_poll(&self, backoff: &mut Backoff) -> io::Result<Option<Idle>> {
        let shared = Arc::clone(self.shared());
        // Raised before the yield below: a half's change meanwhile is
        // pumped when the busy poll ends, without a wake-up.
        let _spinning = Raised::new(&shared.spinning);
        if backoff.passed {
            let _ = shared.half_polling.compare_exchange(
                HALF_POLLS,
                0,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            YieldOnce(false).await;
        }
        let mut polls: u32 = 0;
        // Set at the first look at the clock after the last thing done (or
        // after the time was changed).
        let mut until: Option<Instant> = None;
        let mut last_budget = None;
        let mut handoff = Handoff::default();
        loop {
            let budget = shared.busy_poll.load(Ordering::Relaxed);
            match shared.take_half_polls() {
                HALF_POLLS if budget != 0 => return Ok(Some(Idle::Standby)),
                HALF_DONE => return Ok(Some(Idle::Sleep)),
                _ if budget == 0 => return Ok(Some(Idle::Sleep)),
                _ => {}
            }
            if last_budget != Some(budget) {
                last_budget = Some(budget);
                until = None;
            }
            let wakes = shared.wakes.load(Ordering::Relaxed);
            // What a woken half queued since the last pass goes before the
            // polls; without a change, the pump would find nothing to do.
            let changed = shared.take_changed();
            let (did, gone, halves_gone) = self.locked(|core, st| {
                let mut did = changed && core.pump(&shared, st)?;
                for _ in 0..SPIN_POLLS {
                    if core.poll_cq(&shared, st)? {
                        did = true;
                        break;
                    }
                }
                Ok((did, core.gone, core.halves_gone))
            })?;
            if gone {
                return Ok(None);
            }
            if did {
                until = None;
                backoff.reset();
            }
            // A CM event (the peer's disconnect, a device removal, the
            // router's end) is handled where the driver sleeps.
            if halves_gone || self.has_pending_event() {
                return Ok(Some(Idle::Sleep));
            }
            if budget != BUSY_POLL_FOREVER {
                polls = polls.wrapping_add(1);
                if polls % CLOCK_EVERY == 0 {
                    let now = Instant::now();
                    match until {
                        None => until = Some(now + Duration::from_micros(budget)),
                        Some(t) if now >= t => return Ok(Some(Idle::Sleep)),
                        Some(_) => {}
                    }
                }
            }
            let woke = shared.wakes.load(Ordering::Relaxed) != wakes;
            if handoff.starved(shared.turns.load(Ordering::Relaxed), woke) {
                tokio::task::yield_now().await;
            } else {
                YieldOnce(false).await;
            }
        }
    }

    fn has_pending_event(&self) -> bool {
        let st = self.shared().lock();
        st.core.as_ref().is_none_or(|c| c.id.has_pending_event())
    }
}

impl Core {
    #[inline]
    fn qp(&self) -> io::Result<&QueuePair> {
        match self.id.id().qp() {
            Some(qp) => Ok(qp),
            None => Err(no_qp()),
        }
    }

    /// Polls the CQ once and handles what it took, then posts what that
    /// made possible; whether it took any. A completion that says the
    /// connection ended sets [`gone`](Self::gone).
    fn poll_cq(&mut self, shared: &Shared, st: &mut State) -> io::Result<bool> {
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
    fn drain_cq(&mut self, shared: &Shared, st: &mut State) -> io::Result<()> {
        while self.poll_cq(shared, st)? {}
        Ok(())
    }

    /// Handles a completion; whether it says the connection ended (a
    /// flushed request: the QP is in ERROR).
    fn complete(
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
    fn complete_one_sided(
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

    /// Posts what can be posted: emptied receive buffers, queued data as
    /// credits allow, the FIN, a credit-only message when one is due;
    /// whether it posted anything.
    #[inline]
    fn pump(&mut self, shared: &Shared, st: &mut State) -> io::Result<bool> {
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
        self.pump_some(shared, st)
    }

    /// [`pump`](Self::pump) with something to post.
    fn pump_some(&mut self, shared: &Shared, st: &mut State) -> io::Result<bool> {
        let before = (self.posted_recvs, self.posted_sends, st.sent);
        let msg = shared.mode == Mode::Message;
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
            self.post_data(shared, st, slot, len, msg)?;
        }
        // Without allocating: the driver pumps on every poll while it
        // busy-polls.
        while let Some(slot) = st.repost.pop() {
            post_recv(self.qp()?, &shared.mr, slot).map_err(io_err)?;
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
            self.post_ctrl(shared, st, true)?;
            self.fin_posted = true;
        }
        let last = self.last_credits_due();
        if (last || self.credits.credit_only_due()) && !self.ctrl_free.is_empty() {
            self.post_ctrl(shared, st, false)?;
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
    fn last_credits_due(&self) -> bool {
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
    fn settled(&self) -> bool {
        !self.last_credits_due() && self.ctrl_free.len() == CTRL_SLOTS
    }

    /// Posts the data SEND of send buffer `slot` holding `len` bytes, with
    /// a header that takes a credit. One whose data goes inline frees its
    /// buffer at once (the provider has copied it), and goes unsignalled
    /// unless [`UNSIGNALLED_RUN`] did before it: a completion less to take
    /// per small message. The signalled one after them says how many it
    /// retires (its completion shows theirs: a send queue completes in
    /// order), so the send queue never holds more than [`SEND_SLOTS`] data
    /// SENDs not known complete. Data that went inline counts as not sent
    /// ([`State::all_sent`]) until a successful completion (its own, or a
    /// later data SEND's) or a credit the peer returned shows it arrived.
    fn post_data(
        &mut self,
        shared: &Shared,
        st: &mut State,
        slot: usize,
        len: usize,
        msg: bool,
    ) -> io::Result<()> {
        let h = self.data_header(msg);
        let at = send_at(slot);
        shared.mr.write_word(at, h.to_word()).map_err(io_err)?;
        let range = at..at + HEADER_LEN + len;
        let inline = range.len() <= self.inline;
        let (wr_id, signalled) = self.data_wr(inline, slot);
        self.post_send(shared, wr_id, range, signalled)?;
        self.data_posted(st, signalled, inline);
        if inline {
            st.free.push(slot);
            let woke = st.wake_writer();
            if woke > 0 {
                shared.wakes.fetch_add(woke, Ordering::Relaxed);
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
    fn send_now(&mut self, shared: &Shared, st: &mut State, data: &[u8]) -> io::Result<bool> {
        let len = HEADER_LEN + data.len();
        if len > self.inline || !self.credits.can_send_data() || !self.signalling.room() {
            return Ok(false);
        }
        let mut bytes = [0u8; INLINE];
        let h = self.data_header(shared.mode == Mode::Message);
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
    fn data_header(&mut self, msg: bool) -> Header {
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
    fn data_wr(&mut self, inline: bool, slot: usize) -> (u64, bool) {
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
    fn data_posted(&mut self, st: &mut State, signalled: bool, inline: bool) {
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
    fn post_send(
        &self,
        shared: &Shared,
        wr_id: u64,
        range: Range<usize>,
        signaled: bool,
    ) -> io::Result<()> {
        let len = range.len();
        let sge = [shared.mr.sge(range).map_err(io_err)?];
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
    fn post_ctrl(&mut self, shared: &Shared, st: &mut State, fin: bool) -> io::Result<()> {
        let slot = self.ctrl_free.pop().expect("checked by the caller");
        let h = Header {
            credits: self.credits.take(),
            fin,
            msg: false,
        };
        let at = ctrl_at(slot);
        shared.mr.write_word(at, h.to_word()).map_err(io_err)?;
        let kind = if fin { WR_FIN } else { WR_CTRL };
        self.post_send(shared, kind | slot as u64, at..at + HEADER_LEN, true)?;
        self.posted_sends += 1;
        st.sent += 1;
        Ok(())
    }

    /// Posts a one-sided request in `slot` of `in_flight` (on iWARP a
    /// WRITE is followed by a zero-length READ, whose response comes only
    /// once the WRITE is placed, or refused); a failure to post goes to
    /// its caller and ends the connection.
    fn post_one_sided(&mut self, slot: usize, op: OneSided) -> io::Result<()> {
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

    /// Disconnects and waits (for up to [`FLUSH_WAIT`]) until every
    /// posted request has completed; the caller then drops the core. The
    /// core is out of the state by then: nothing else polls the CQ.
    async fn close(&mut self, shared: &Shared) {
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

/// [`Core::qp`]'s error (the core is made with a QP, which the id holds
/// until it goes).
#[cold]
#[inline(never)]
fn no_qp() -> io::Error {
    io::Error::other("the CM id has no QP")
}

/// The error of a one-sided request that the connection's end cut short.
fn aborted(read: bool, iwarp: bool) -> io::Error {
    let what = if read { "RDMA READ" } else { "RDMA WRITE" };
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        if iwarp {
            format!(
                "{what}: the connection ended before the request was done (on iWARP a request \
                 the peer refuses, for a bad rkey, a range out of its region or a missing \
                 right, ends the connection this way)"
            )
        } else {
            format!("{what}: the connection ended before the request was done")
        },
    )
}

/// An error of the same kind and text (`io::Error` is not `Clone`).
fn copy_err(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

fn protocol(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("RDMA stream protocol violation by the peer: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    #[test]
    fn busy_poll_times_round_up_to_microseconds_and_saturate_to_forever() {
        assert_eq!(busy_poll_micros(Duration::ZERO), 0);
        assert_eq!(busy_poll_micros(Duration::from_nanos(1)), 1);
        assert_eq!(busy_poll_micros(Duration::from_nanos(1500)), 2);
        assert_eq!(busy_poll_micros(Duration::from_micros(50)), 50);
        assert_eq!(busy_poll_micros(Duration::MAX), BUSY_POLL_FOREVER);
        assert_eq!(
            busy_poll_micros(Duration::from_secs(u64::MAX)),
            BUSY_POLL_FOREVER
        );
        assert_eq!(
            busy_poll_micros(Duration::from_micros(u64::MAX - 1)),
            u64::MAX - 1
        );
    }

    #[test]
    fn signalling_retires_every_send_and_never_fills_the_queue_with_unsignalled_ones() {
        // Posts (inline or not, by a fixed pseudo-random pattern) as the
        // room allows, and completes the signalled SENDs in order, some
        // turns none: the send queue then holds at most SEND_SLOTS data
        // SENDs, one of them signalled when it is full (else nothing would
        // ever complete), and the completions account for every SEND.
        let mut sig = Signalling::default();
        // The send queue: per SEND, the retires of a signalled one.
        let mut queue: VecDeque<Option<usize>> = VecDeque::new();
        let (mut posted, mut retired, mut full, mut x) = (0usize, 0usize, 0usize, 0x2545_f491u32);
        // Pure bookkeeping: under Miri (which finds nothing more here) a tenth
        // of the turns.
        let turns = if cfg!(miri) { 1_000 } else { 10_000 };
        for turn in 0..turns {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            while sig.room() && x % 3 != 0 {
                let inline = x % 5 != 0;
                let s = sig.post(inline);
                assert!(
                    inline || s.is_some(),
                    "a SEND from its buffer went unsignalled"
                );
                queue.push_back(s);
                posted += 1;
                x = x.rotate_left(7);
            }
            assert!(sig.out <= SEND_SLOTS);
            assert!(sig.run <= UNSIGNALLED_RUN);
            assert_eq!(sig.out, queue.len());
            if !sig.room() {
                full += 1;
                assert!(
                    queue.iter().any(Option::is_some),
                    "a full queue with nothing signalled"
                );
            }
            // The device completes the queue up to its first signalled SEND
            // (or nothing, some turns), and the completion is taken.
            // (Unsignalled SENDs that complete after the last signalled
            // one complete unseen.)
            if turn % 4 != 3 {
                if let Some(i) = queue.iter().position(Option::is_some) {
                    let retires = queue[i].unwrap();
                    assert_eq!(
                        retires, i,
                        "a signalled SEND retires the unsignalled ones before it"
                    );
                    queue.drain(..=i);
                    sig.completed(retires);
                    retired += 1 + retires;
                }
                // The signalled SEND retired the unsignalled ones before it.
                assert_eq!(sig.out, queue.len());
            }
        }
        assert_eq!(posted - retired, sig.out);
        assert!(posted > turns, "only {posted} SENDs posted");
        assert!(full > turns / 10, "the queue was full only {full} times");
    }

    #[test]
    fn a_woken_task_without_a_turn_by_the_next_pass_is_starved_once() {
        let mut h = Handoff::default();
        // Nothing woken: never starved, whatever the turns.
        assert!(!h.starved(0, false));
        assert!(!h.starved(0, false));
        // Woken at turn 0, no turn by the next pass: starved, once.
        assert!(!h.starved(0, true));
        assert!(h.starved(0, false));
        assert!(!h.starved(0, false));
        // Woken, and a half took a turn before the next pass.
        assert!(!h.starved(3, true));
        assert!(!h.starved(4, false));
        assert!(!h.starved(4, false));
        // Woken on two passes in a row: each is judged on its own.
        assert!(!h.starved(5, true));
        assert!(h.starved(5, true));
        assert!(!h.starved(6, false));
    }

    #[test]
    fn standbys_double_while_they_pass_and_start_over_otherwise() {
        let mut b = Backoff::default();
        assert_eq!(b.start(), STANDBY);
        let mut seen = vec![];
        for _ in 0..6 {
            b.passed();
            seen.push(b.start().as_millis());
        }
        assert_eq!(seen, [2, 4, 8, 8, 8, 8]);
        // A wake-up or a post in between starts over.
        b.passed();
        b.reset();
        assert_eq!(b.start(), STANDBY);
        // A standby that did not pass (the driver was woken) as well.
        assert_eq!(b.start(), STANDBY);
    }

    #[test]
    fn yield_once_is_pending_once_and_wakes_its_task() {
        use std::sync::atomic::AtomicUsize;
        use std::task::Wake;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = TaskContext::from_waker(&waker);
        let mut y = YieldOnce(false);
        assert!(Pin::new(&mut y).poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(Pin::new(&mut y).poll(&mut cx).is_ready());
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
    }
}
