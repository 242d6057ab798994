//! The receive queue of a umad port, which its agents share: one thread
//! at a time reads the fd (the reader role) and queues what is for others,
//! within a bound; the requests in flight whose responses are always kept.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use super::super::wire::{parse, Received, HDR_SIZE};
use super::super::{Error, Result};
use super::{failed_errno, grown_read_len, PortInner, PortView, Read, MAX_READ};
use crate::mad::Mad;
use crate::os::lock;

pub(super) struct RecvState {
    pub(super) pending: Pending,
    /// Whether a thread holds the reader role (waits in poll(2) on the fd
    /// and reads it): the others wait on `queued` for what it reads and
    /// queues for them, and `try_recv` looks only at the queue.
    pub(super) reading: bool,
}

impl RecvState {
    /// An empty queue of `capacity` unsolicited MADs, with no reader.
    pub(super) fn new(capacity: usize) -> RecvState {
        RecvState {
            pending: Pending::new(capacity),
            reading: false,
        }
    }
}

/// The MADs read from the fd for someone other than the reader, bounded.
///
/// Unsolicited MADs (requests, sends, traps: what peers send unasked) count
/// toward the capacity; when it is reached the newest one is dropped, as a
/// NIC drops what arrives at a full receive queue (the sender's retries
/// recover it). Responses and timeout notices of this port's tracked
/// requests are always queued: there is one per request in flight, so what
/// this process sends bounds them.
pub(crate) struct Pending {
    /// Oldest first; the flag says whether the MAD counts toward `capacity`.
    mads: VecDeque<(Received, bool)>,
    /// Responses of tracked requests that were too long to keep, read by a
    /// thread other than the one waiting for them: the first segment's
    /// headers and the transfer's length, for the waiting receive to get
    /// [`Error::MadTooLong`] instead of its timeout. One per request in
    /// flight at most, as for the queued responses.
    too_long: Vec<(Received, usize)>,
    pub(super) unsolicited: usize,
    pub(super) capacity: usize,
}

impl Pending {
    pub(crate) fn new(capacity: usize) -> Pending {
        Pending {
            mads: VecDeque::new(),
            too_long: Vec::new(),
            unsolicited: 0,
            capacity,
        }
    }

    /// Queues `r`; `false` when it was dropped (an unsolicited MAD over the
    /// capacity).
    pub(crate) fn push(&mut self, r: Received, solicited: bool) -> bool {
        if !solicited {
            if self.unsolicited >= self.capacity {
                return false;
            }
            self.unsolicited += 1;
        }
        self.mads.push_back((r, !solicited));
        true
    }

    /// Keeps the headers of a response too long to keep (`first`, of a
    /// transfer of `len` bytes) for the receive waiting for it.
    pub(crate) fn push_too_long(&mut self, first: Received, len: usize) {
        self.too_long.push((first, len));
    }

    /// The error of the oldest too-long response that `want` accepts, taken
    /// from the queue.
    pub(crate) fn take_too_long(&mut self, want: impl Fn(&Received) -> bool) -> Option<Error> {
        let i = self.too_long.iter().position(|(r, _)| want(r))?;
        let (_, len) = self.too_long.remove(i);
        Some(too_long_error(len))
    }

    /// Drops the queued response or timeout notice of `agent`'s request
    /// `tid` (lower 32 bits), whose requester stopped waiting for it.
    pub(crate) fn discard_response(&mut self, agent: u32, tid: u32) {
        self.too_long
            .retain(|(r, _)| !(r.agent_id == agent && r.tid() as u32 == tid));
        let mut unsolicited = 0;
        self.mads.retain(|(r, counted)| {
            let keep = !(r.agent_id == agent
                && r.tid() as u32 == tid
                && (r.status != 0 || r.mad.method().is_response()));
            unsolicited += usize::from(keep && *counted);
            keep
        });
        self.unsolicited = unsolicited;
    }

    /// Takes the oldest MAD that `want` accepts.
    pub(crate) fn take(&mut self, want: impl Fn(&Received) -> bool) -> Option<Received> {
        let i = self.mads.iter().position(|(r, _)| want(r))?;
        let (r, counted) = self.mads.remove(i)?;
        if counted {
            self.unsolicited -= 1;
        }
        Some(r)
    }

    /// Forgets the MADs of `agent` (unregistered: no one will take them).
    pub(crate) fn purge(&mut self, agent: u32) {
        self.too_long.retain(|(r, _)| r.agent_id != agent);
        let mut unsolicited = 0;
        self.mads.retain(|(r, counted)| {
            let keep = r.agent_id != agent;
            unsolicited += usize::from(keep && *counted);
            keep
        });
        self.unsolicited = unsolicited;
    }

    pub(crate) fn len(&self) -> usize {
        self.mads.len()
    }
}

/// The time left until `deadline` (`None`: forever; zero once it passed).
fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// Gives up the reader role on every way out of a read (return or error),
/// waking a waiter to take it over.
struct Reading<'a>(&'a PortInner);
impl Drop for Reading<'_> {
    fn drop(&mut self) {
        lock(&self.0.recv).reading = false;
        self.0.queued.notify_all();
    }
}

impl PortView {
    /// How many unsolicited MADs the receive queue holds before it drops
    /// the newest.
    pub fn pending_capacity(&self) -> usize {
        lock(&self.inner.recv).pending.capacity
    }
    /// Sets the bound of the receive queue (0: keep no unsolicited MAD for
    /// an agent other than the one receiving). MADs already queued stay;
    /// new ones are dropped until the queue is below the bound. An
    /// `AsyncPort` reads it when an agent registers.
    pub fn set_pending_capacity(&self, capacity: usize) {
        lock(&self.inner.recv).pending.capacity = capacity;
    }
    /// How many MADs wait in the receive queue now.
    pub fn pending_len(&self) -> usize {
        lock(&self.inner.recv).pending.len()
    }
    /// How many unsolicited MADs were dropped because a receive queue was
    /// full, since the port was opened.
    pub fn dropped_mads(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }
    /// How many MADs were dropped because they did not decode (a short MAD,
    /// an unknown base version), since the port was opened. A receive skips
    /// them, whichever agent they were for.
    pub fn malformed_mads(&self) -> u64 {
        self.inner.malformed.load(Ordering::Relaxed)
    }
    /// How many MADs were dropped because they were longer than the
    /// largest read a port makes (64 MiB, the umad header included: an
    /// RMPP transfer that the kernel reassembled), since the port was
    /// opened. The kernel has acknowledged every segment of such a
    /// transfer, so its sender sees it delivered; a receive whose match
    /// accepts its first segment gets [`Error::MadTooLong`], every other
    /// receive skips it.
    pub fn too_long_mads(&self) -> u64 {
        self.inner.too_long.load(Ordering::Relaxed)
    }
}

impl PortInner {
    /// Forgets an outstanding request once its response or timeout is read;
    /// whether `r` was one.
    pub(super) fn settle(&self, r: &Received) -> bool {
        (r.status != 0 || r.mad.method().is_response())
            && lock(&self.outstanding).remove(&(r.agent_id, r.tid() as u32))
    }

    /// Records a tracked request before it is written (so that a response
    /// read by another thread at once is known); `false` when one with this
    /// TID is already outstanding.
    pub(crate) fn add_outstanding(&self, agent: u32, tid: u64) -> bool {
        lock(&self.outstanding).insert((agent, tid as u32))
    }
    pub(crate) fn remove_outstanding(&self, agent: u32, tid: u64) {
        lock(&self.outstanding).remove(&(agent, tid as u32));
    }
    /// Forgets a tracked request whose requester stopped waiting (its wait
    /// timed out or failed): a late response is then unsolicited, under the
    /// queue's bound, and one already queued is dropped, since no one will
    /// ask for it.
    pub(crate) fn abandon(&self, agent: u32, tid: u64) {
        self.remove_outstanding(agent, tid);
        lock(&self.recv).pending.discard_response(agent, tid as u32);
    }

    /// The next MAD if one is queued or readable now, without waiting.
    ///
    /// While another thread holds the reader role this looks only at the
    /// queue: that thread's poll may have announced the next MAD, and on a
    /// blocking fd (umad2sim) its read would sleep if this one took it.
    pub(crate) fn try_recv(&self) -> Result<Option<Received>> {
        self.try_recv_with(|timeout| self.read_one(timeout))
    }
    /// [`PortInner::try_recv`] with `read` for `read_one`.
    fn try_recv_with(
        &self,
        mut read: impl FnMut(Option<Duration>) -> Result<Read>,
    ) -> Result<Option<Received>> {
        let mut st = lock(&self.recv);
        if let Some(r) = st.pending.take(|_| true) {
            return Ok(Some(r));
        }
        if st.reading {
            return Ok(None);
        }
        st.reading = true;
        drop(st);
        let _reading = Reading(self);
        loop {
            match read(Some(Duration::ZERO))? {
                Read::Mad(r, _) => return Ok(Some(r)),
                Read::Nothing => return Ok(None),
                Read::TooLong(t) => self.queue_too_long(t),
                // Dropped and counted, whichever agent it was for.
                Read::Malformed => {}
            }
        }
    }
    /// Forgets everything of an agent that unregistered: the kernel cancels
    /// its requests, and no one will receive its queued MADs.
    pub(crate) fn forget_agent(&self, agent: u32) {
        lock(&self.outstanding).retain(|&(a, _)| a != agent);
        lock(&self.recv).pending.purge(agent);
    }

    /// Queues `r` for another receiver (or drops it when the queue is full)
    /// and wakes the waiting receivers.
    fn queue(&self, r: Received, solicited: bool) {
        let kept = lock(&self.recv).pending.push(r, solicited);
        if !kept {
            self.count_dropped();
        }
        self.queued.notify_all();
    }

    /// Keeps the headers of a too-long response for the receive that waits
    /// for it (waking it); drops the rest of a too-long MAD, and all of an
    /// unsolicited one: no one waits for that.
    fn queue_too_long(&self, t: TooLong) {
        if let (Some(first), true) = (t.first, t.solicited) {
            lock(&self.recv).pending.push_too_long(first, t.len);
            self.queued.notify_all();
        }
    }

    /// Waits for a MAD that `want` accepts; others are queued for later.
    ///
    /// One receiving thread at a time waits in poll(2) on the fd, for as
    /// long as its own timeout has left, and queues what is not its own; the
    /// others wait on the condition variable for what it queues, or to take
    /// over the fd when it returns. No thread wakes up unless a MAD came or
    /// its time is up.
    ///
    /// A MAD longer than the largest read is dropped (and counted); when
    /// `want` accepts its first segment (the header of the response this
    /// receive waits for), the receive returns [`Error::MadTooLong`]. One
    /// that answers a tracked request of another receive leaves its headers
    /// queued, so that that receive gets the error too, whichever thread
    /// read it.
    pub(crate) fn recv_matching(
        &self,
        timeout: Option<Duration>,
        want: impl Fn(&Received) -> bool,
    ) -> Result<Received> {
        self.recv_matching_with(timeout, want, |left| self.read_one(left))
    }
    /// [`PortInner::recv_matching`] with `read` for `read_one`.
    fn recv_matching_with(
        &self,
        timeout: Option<Duration>,
        want: impl Fn(&Received) -> bool,
        mut read: impl FnMut(Option<Duration>) -> Result<Read>,
    ) -> Result<Received> {
        // A timeout too long for an Instant waits forever.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let timed_out = || Error::RecvTimeout(timeout.unwrap_or_default());
        let mut st = lock(&self.recv);
        while st.reading {
            if let Some(r) = st.pending.take(&want) {
                return Ok(r);
            }
            if let Some(e) = st.pending.take_too_long(&want) {
                return Err(e);
            }
            let left = remaining(deadline);
            if left.is_some_and(|l| l.is_zero()) {
                return Err(timed_out());
            }
            st = match left {
                None => self.queued.wait(st).unwrap_or_else(PoisonError::into_inner),
                Some(l) => {
                    self.queued
                        .wait_timeout(st, l)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        if let Some(r) = st.pending.take(&want) {
            return Ok(r);
        }
        if let Some(e) = st.pending.take_too_long(&want) {
            return Err(e);
        }
        // The reader now: only it queues, so nothing for it can appear in
        // the queue while it reads.
        st.reading = true;
        drop(st);
        let _reading = Reading(self);
        loop {
            let left = remaining(deadline);
            match read(left)? {
                Read::Mad(r, _) if want(&r) => return Ok(r),
                Read::Mad(r, solicited) => self.queue(r, solicited),
                Read::TooLong(t) if t.first.as_ref().is_some_and(&want) => return Err(t.error()),
                Read::TooLong(t) => self.queue_too_long(t),
                Read::Nothing | Read::Malformed => {}
            }
            // Checked after every read, not only after an empty poll: a
            // steady stream of MADs for others would otherwise keep this
            // thread reading past its deadline.
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timed_out());
            }
        }
    }

    /// Waits up to `limit` for the response or timeout notice of `agent`'s
    /// tracked request `tid` (matched on its lower 32 bits); a wait that
    /// ends without it ([`Error::Timeout`] or another error) abandons the
    /// request, so that its response, if it still comes, is not kept for
    /// no one outside the queue's bound.
    pub(crate) fn await_response(&self, agent: u32, tid: u64, limit: Duration) -> Result<Received> {
        self.await_response_with(agent, tid, limit, |left| self.read_one(left))
    }
    /// [`PortInner::await_response`] with `read` for `read_one`.
    fn await_response_with(
        &self,
        agent: u32,
        tid: u64,
        limit: Duration,
        read: impl FnMut(Option<Duration>) -> Result<Read>,
    ) -> Result<Received> {
        let low = tid as u32;
        self.recv_matching_with(
            Some(limit),
            |r| {
                r.agent_id == agent
                    && r.tid() as u32 == low
                    && (r.status != 0 || r.mad.method().is_response())
            },
            read,
        )
        .map_err(|e| {
            self.abandon(agent, tid);
            match e {
                Error::RecvTimeout(_) => Error::Timeout { tid },
                e => e,
            }
        })
    }
}

/// The largest read a dropped MAD is read with: the umad header and the
/// longest MAD ib_umad can hand over. Its length is a C `int` there (the
/// reassembled transfer's `mad_len`, which grows only by segments that
/// arrived in order within its 40 s, each held in kernel memory until it
/// is read), so the length word it reports is at most this.
const DISCARD_MAX: usize = HDR_SIZE + i32::MAX as usize;

/// What the next read is after ENOSPC on a buffer of `len` bytes, when the
/// kernel's length word (the header included) is `need`.
#[derive(Debug, PartialEq)]
enum Retry {
    /// Into a buffer of this length.
    Grow(usize),
    /// Into a scratch mapping of this length, only to drop the MAD.
    Discard(usize),
    /// None: a length no umad read needs, or one that would not grow the
    /// buffer past [`MAX_READ`].
    Refuse,
}

fn retry_after_enospc(len: usize, need: usize) -> Retry {
    if need > MAX_READ {
        if need <= DISCARD_MAX {
            Retry::Discard(need)
        } else {
            Retry::Refuse
        }
    } else {
        grown_read_len(len, need).map_or(Retry::Refuse, Retry::Grow)
    }
}

/// A MAD longer than [`MAX_READ`], read once into a scratch mapping and
/// dropped.
pub(crate) struct TooLong {
    /// The MAD's length (what the read delivered after the umad header).
    pub(super) len: usize,
    /// The umad header and the transfer's first segment (its MAD and RMPP
    /// headers: agent, TID, class, method), if they decode.
    pub(super) first: Option<Received>,
    /// Whether it answers one of the port's tracked requests.
    pub(super) solicited: bool,
}

impl TooLong {
    pub(super) fn error(&self) -> Error {
        too_long_error(self.len)
    }
}

/// The error of a receive whose MAD, `len` bytes long, was too long to keep.
fn too_long_error(len: usize) -> Error {
    Error::MadTooLong {
        len,
        reason: "an RMPP transfer longer than a receive reads (64 MiB) is dropped",
    }
}

/// An anonymous private mapping that reserves no swap and is never touched
/// but by a read's copy, unmapped on drop: what a MAD too long to keep is
/// read into, so that the kernel dequeues it. Its pages exist only while
/// the copy fills them, and go with the mapping.
struct Scratch {
    ptr: *mut u8,
    len: usize,
}

impl Scratch {
    fn new(len: usize) -> Result<Scratch> {
        // SAFETY: a new anonymous mapping, placed by the kernel: no memory
        // of this process is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::io("mmap", crate::error::errno()));
        }
        Ok(Scratch {
            ptr: ptr.cast(),
            len,
        })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is readable and writable for `len` bytes
        // (at most DISCARD_MAX, under isize::MAX), zero-filled (so
        // initialized) and mapped while `self` lives; the borrow of `self`
        // makes this the only reference to it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are the mapping made in `new`, which no
        // reference outlives (`as_mut_slice` borrows `self`).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A read buffer: on the heap up to [`MAX_READ`], a scratch mapping past it.
enum Buf {
    Heap(Vec<u8>),
    Scratch(Scratch),
}

impl Buf {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Buf::Heap(v) => v,
            Buf::Scratch(s) => s.as_mut_slice(),
        }
    }
}

impl PortInner {
    /// Reads one MAD with `read` (the read(2) of the fd, on a buffer) once
    /// poll(2) said the fd is readable (`broken`: with an error).
    ///
    /// A read whose buffer is too short for an RMPP transfer fails with
    /// ENOSPC, and the kernel writes the umad header (whose length word is
    /// what the read needs) and the first segment, and keeps the MAD at the
    /// head of its queue: every later read would fail the same way. So a
    /// MAD that fits [`MAX_READ`] is read again into a buffer of its length,
    /// and a longer one into a [`Scratch`] mapping, which dequeues it; it is
    /// then dropped, counted in `too_long`, and returned as
    /// [`Read::TooLong`] for the receive to match. The kernel has already
    /// acknowledged every segment, so nothing can tell the sender (an RMPP
    /// ABORT needs a transfer in progress). A length word no umad read
    /// reports (over [`DISCARD_MAX`]) is refused (EMSGSIZE), as is one that
    /// would not grow a buffer already at [`MAX_READ`].
    pub(super) fn read_mad(
        &self,
        broken: bool,
        mut read: impl FnMut(&mut [u8]) -> isize,
    ) -> Result<Read> {
        let mut buf = Buf::Heap(vec![0u8; HDR_SIZE + Mad::SIZE]);
        loop {
            let scratch = matches!(buf, Buf::Scratch(_));
            let b = buf.as_mut_slice();
            let n = read(b);
            // A umad fd never reads 0 bytes; an fd at its end would read 0
            // forever, so it is an error rather than a MAD to drop.
            if n == 0 {
                return Err(Error::io("read", libc::EIO));
            }
            if n > 0 {
                let got = &b[..(n as usize).min(b.len())];
                if scratch {
                    return Ok(Read::TooLong(self.drop_too_long(got)));
                }
                let Ok(r) = parse(got) else {
                    // Not this reader's failure: the MAD may be for any
                    // agent, and the next one may decode.
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                    return Ok(Read::Malformed);
                };
                let solicited = self.settle(&r);
                return Ok(Read::Mad(r, solicited));
            }
            match failed_errno(n) {
                // The fd reports an error with nothing to read, which a
                // retry would only spin on.
                libc::EAGAIN if broken => return Err(Error::io("poll", libc::EIO)),
                libc::EAGAIN => return Ok(Read::Nothing),
                libc::EINTR => continue,
                libc::ENOSPC => {
                    // An RMPP transfer larger than the buffer: the kernel
                    // wrote the header with the length it needs and kept it.
                    let need = u32::from_ne_bytes([b[16], b[17], b[18], b[19]]) as usize;
                    buf = match retry_after_enospc(b.len(), need) {
                        Retry::Grow(len) => Buf::Heap(vec![0u8; len]),
                        Retry::Discard(len) => Buf::Scratch(Scratch::new(len)?),
                        Retry::Refuse => return Err(Error::io("read", libc::EMSGSIZE)),
                    };
                }
                e => return Err(Error::io("read", e)),
            }
        }
    }

    /// Counts a MAD too long to keep, of which `got` is what its read
    /// delivered, and keeps its first segment's headers for the receive to
    /// match (settling the request it answers, if any).
    fn drop_too_long(&self, got: &[u8]) -> TooLong {
        self.too_long.fetch_add(1, Ordering::Relaxed);
        let first = parse(&got[..got.len().min(HDR_SIZE + Mad::SIZE)]).ok();
        let solicited = first.as_ref().is_some_and(|r| self.settle(r));
        TooLong {
            len: got.len().saturating_sub(HDR_SIZE),
            first,
            solicited,
        }
    }
}

#[cfg(test)]
mod tests;
