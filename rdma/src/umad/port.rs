//! An open umad port: the file descriptor of `/dev/infiniband/umadN`, and
//! reading and writing MADs through it.

use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::ca::{ca_cstring, CaPort};
use super::wire::{parse, Received, HDR_SIZE};
use super::{Error, Result};
use crate::mad::Mad;

pub(crate) struct PortInner {
    fd: RawFd,
    ca: String,
    port_num: u32,
    ethernet: bool,
    /// Whether the fd is one of ibsim's umad2sim (an LD_PRELOAD shim whose
    /// fds the kernel does not know): no event loop can wait on it, so an
    /// `AsyncPort` reads it from a thread of its own.
    pub(crate) simulated: bool,
    /// MADs read while waiting for another one, and who reads the fd.
    recv: Mutex<RecvState>,
    /// Signalled when a MAD is queued or the reading thread stops reading.
    queued: Condvar,
    /// Unsolicited MADs dropped because a receive queue was full.
    dropped: AtomicU64,
    /// MADs dropped because they did not decode.
    malformed: AtomicU64,
    /// (agent ID, lower 32 bits of the TID) of requests sent with a timeout
    /// whose response or timeout has not been read yet.
    outstanding: Mutex<HashSet<(u32, u32)>>,
}

struct RecvState {
    pending: Pending,
    /// Whether a thread holds the reader role (waits in poll(2) on the fd
    /// and reads it): the others wait on `queued` for what it reads and
    /// queues for them, and `try_recv` looks only at the queue.
    reading: bool,
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
    unsolicited: usize,
    capacity: usize,
}

impl Pending {
    pub(crate) fn new(capacity: usize) -> Pending {
        Pending {
            mads: VecDeque::new(),
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

    /// Drops the queued response or timeout notice of `agent`'s request
    /// `tid` (lower 32 bits), whose requester stopped waiting for it.
    pub(crate) fn discard_response(&mut self, agent: u32, tid: u32) {
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

use crate::os::{errno, lock};

/// The time left until `deadline` (`None`: forever; zero once it passed).
fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// The errno of a failed read or write that returned `n`: errno for -1,
/// and the negated errno itself for other negative returns, which is how
/// ibsim's umad2sim fails reads (without setting errno).
fn failed_errno(n: isize) -> i32 {
    if n == -1 {
        errno()
    } else {
        n.checked_neg()
            .and_then(|e| i32::try_from(e).ok())
            .unwrap_or(libc::EIO)
    }
}

/// The first fd that ibsim's umad2sim (an LD_PRELOAD shim over
/// libibumad's open, read, write and poll) hands out: its fds are not the
/// kernel's.
const UMAD2SIM_FD_BASE: RawFd = 1024;

/// Whether a failed fcntl on a freshly opened umad fd is umad2sim's: the
/// kernel does not know its fds (EBADF). Such a port stays blocking, which
/// the receive path tolerates because it reads only after poll(2) said
/// there is a MAD, and only in the thread holding the reader role, which no
/// other thread's read can take that MAD from.
fn umad2sim_fcntl_failure(fd: RawFd, errno: i32) -> bool {
    errno == libc::EBADF && fd >= UMAD2SIM_FD_BASE
}

/// The longest wait of one poll(2), in milliseconds: umad2sim's poll
/// multiplies its timeout by 1000 in an `int`, so a longer one would wrap
/// (to a wait of microseconds, or of hours). A receive with more time left
/// polls again.
const MAX_POLL_MS: i32 = i32::MAX / 1000;

/// `left` in whole milliseconds for poll(2), rounded up so that poll does
/// not return just before the deadline, at most [`MAX_POLL_MS`]; -1
/// (forever) for `None`.
fn poll_ms(left: Option<Duration>) -> i32 {
    match left {
        None => -1,
        Some(l) => l.as_nanos().div_ceil(1_000_000).min(MAX_POLL_MS as u128) as i32,
    }
}

/// The largest read buffer an RMPP transfer may ask for.
const MAX_READ: usize = 64 << 20;

/// The buffer length to retry a read with after ENOSPC on `len` bytes, when
/// the header says the MAD needs `need` bytes after it; `None` past
/// [`MAX_READ`]. A length that would not grow the buffer, or is over the
/// cap, is not believed: the buffer doubles instead, so that a bogus one
/// costs a handful of reads rather than one per byte.
fn grown_read_len(len: usize, need: usize) -> Option<usize> {
    if len >= MAX_READ {
        return None;
    }
    let asked = HDR_SIZE.saturating_add(need);
    Some(if asked > len && asked <= MAX_READ {
        asked
    } else {
        len.saturating_mul(2).min(MAX_READ)
    })
}

/// What one poll and read of the fd gave.
pub(crate) enum Read {
    /// A MAD, with whether it answers one of the port's tracked requests.
    Mad(Received, bool),
    /// Nothing within the poll's timeout (or a signal).
    Nothing,
    /// A MAD that did not decode, dropped and counted.
    Malformed,
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

impl Drop for PortInner {
    fn drop(&mut self) {
        // SAFETY: this PortInner owns `fd` (from umad_open_port, or a unit
        // test's socket: umad_close_port only closes it) and closes it once,
        // here; every agent and AsyncFd (which hold this PortInner) is gone.
        unsafe { umad_sys::umad_close_port(self.fd) };
    }
}

/// An open umad port (`umad_open_port`), closed on drop.
///
/// Its fd is non-blocking (except under ibsim's umad2sim, whose fds fcntl
/// cannot change; every read follows a poll(2) that found a MAD);
/// [`Port::recv`] waits in poll(2) with a timeout, and [`AsFd`] lets an
/// event loop wait on it (not under umad2sim: the kernel does not know its
/// fds, only the shim's poll does). All agents registered on the
/// port share its receive queue: a receive that reads a MAD for another
/// agent queues it for that agent, up to
/// [`pending_capacity`](PortView::pending_capacity) unsolicited MADs (see
/// [`PortView`]).
///
/// What does not receive (the name, the attributes, the queue's counters)
/// is on [`PortView`], which a `Port` dereferences to.
pub struct Port {
    view: PortView,
}

/// What can be asked of a umad port without receiving from it: its name and
/// attributes, and the bound and counters of its receive queue.
/// `AsyncPort::port` gives only this, since a
/// blocking receive there would race its reader task for MADs.
///
/// # The receive queue
/// MADs that one receive reads for someone else wait in the port's queue.
/// Unsolicited MADs (requests, sends, traps that peers send unasked) count
/// toward [`pending_capacity`](PortView::pending_capacity)
/// ([`Port::DEFAULT_PENDING_CAPACITY`] unless set); when it is full the
/// newest one is dropped, as a NIC drops what arrives at a full receive
/// queue (the sender's retries recover it), and counted in
/// [`dropped_mads`](PortView::dropped_mads). Responses and timeout notices
/// of the port's own requests are always kept: there is one per request in
/// flight, and a request whose wait ends without its response drops it. A
/// MAD that does not decode is dropped whichever receive reads it, and
/// counted in [`malformed_mads`](PortView::malformed_mads). An
/// `AsyncPort` bounds each server agent's stream of
/// requests the same way.
pub struct PortView {
    pub(crate) inner: Arc<PortInner>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.view.fmt(f)
    }
}

impl std::fmt::Debug for PortView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("ca", &self.inner.ca)
            .field("port", &self.inner.port_num)
            .field("fd", &self.inner.fd)
            .finish()
    }
}

impl std::ops::Deref for Port {
    type Target = PortView;
    fn deref(&self) -> &PortView {
        &self.view
    }
}

impl Port {
    /// How many unsolicited MADs a port queues for its agents unless
    /// [`PortView::set_pending_capacity`] says otherwise.
    pub const DEFAULT_PENDING_CAPACITY: usize = 256;

    /// Opens port `port_num` of the CA `ca` (`rxe0`, 1).
    pub fn open(ca: &str, port_num: u32) -> Result<Port> {
        let info = CaPort::get(ca, port_num)?;
        let cname = ca_cstring(ca)?;
        // SAFETY: `cname` is NUL-terminated; the fd returned is owned by the
        // PortInner built below and closed in its Drop.
        let fd = unsafe { umad_sys::umad_open_port(cname.as_ptr(), port_num as i32) };
        if fd < 0 {
            let e = if fd == -1 { errno() } else { -fd };
            return Err(Error::io("umad_open_port", e));
        }
        let mut inner = PortInner::new(fd, ca.to_string(), port_num, info.is_ethernet());
        // SAFETY: umad_size reads a global that umad_open_port has set.
        if unsafe { umad_sys::umad_size() } != HDR_SIZE {
            return Err(Error::io("IB_USER_MAD_ENABLE_PKEY", libc::EPROTO));
        }
        if let Err(e) = crate::os::set_nonblocking(fd, true) {
            if !umad2sim_fcntl_failure(fd, e.errno()) {
                return Err(Error::io("fcntl(O_NONBLOCK)", e.errno()));
            }
            inner.simulated = true;
        }
        Ok(Port {
            view: PortView {
                inner: Arc::new(inner),
            },
        })
    }

    /// The next MAD for any agent of this port, waiting up to `timeout`
    /// (`None`: forever).
    pub fn recv(&self, timeout: Option<Duration>) -> Result<Received> {
        self.inner.recv_matching(timeout, |_| true)
    }

    /// The next MAD if one is queued, without waiting.
    ///
    /// While another thread waits in [`Port::recv`] (or an agent's receive)
    /// it reads the fd, and this returns only what is already queued.
    pub fn try_recv(&self) -> Result<Option<Received>> {
        self.inner.try_recv()
    }
}

impl PortView {
    /// The CA's name.
    pub fn ca_name(&self) -> &str {
        &self.inner.ca
    }
    /// The port number.
    pub fn port_num(&self) -> u32 {
        self.inner.port_num
    }
    /// Whether the port is Ethernet (RoCE): MADs need a GRH.
    pub fn is_ethernet(&self) -> bool {
        self.inner.ethernet
    }
    /// The port's current attributes.
    pub fn info(&self) -> Result<CaPort> {
        CaPort::get(&self.inner.ca, self.inner.port_num)
    }

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
}

impl AsFd for Port {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open as long as `self.inner` lives, which
        // outlives the borrow of `self`.
        unsafe { BorrowedFd::borrow_raw(self.inner.fd) }
    }
}

impl AsRawFd for Port {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd
    }
}

impl PortInner {
    /// The state around an open umad fd, which it closes on drop.
    pub(crate) fn new(fd: RawFd, ca: String, port_num: u32, ethernet: bool) -> PortInner {
        PortInner {
            fd,
            ca,
            port_num,
            ethernet,
            simulated: false,
            recv: Mutex::new(RecvState {
                pending: Pending::new(Port::DEFAULT_PENDING_CAPACITY),
                reading: false,
            }),
            queued: Condvar::new(),
            dropped: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            outstanding: Mutex::default(),
        }
    }
    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }
    pub(crate) fn is_ethernet(&self) -> bool {
        self.ethernet
    }
    pub(crate) fn count_dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits up to `ms` (poll(2); -1: forever) for the fd to be readable,
    /// then reads one MAD.
    ///
    /// Polling before reading means a read is only tried on a readable fd,
    /// and a negative return of read other than -1 is taken as the negated
    /// errno itself. Only the holder of the reader role calls it: under
    /// umad2sim the fd blocks, so a MAD that poll announced must still be
    /// there when this thread reads.
    fn read_one(&self, ms: i32) -> Result<Read> {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd, for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            return match errno() {
                libc::EINTR => Ok(Read::Nothing),
                e => Err(Error::io("poll", e)),
            };
        }
        if rc == 0 || pfd.revents == 0 {
            return Ok(Read::Nothing);
        }
        let broken = pfd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
        let mut buf = vec![0u8; HDR_SIZE + Mad::SIZE];
        loop {
            // SAFETY: `buf` is writable for its whole length.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            // A umad fd never reads 0 bytes; an fd at its end would read 0
            // forever, so it is an error rather than a MAD to drop.
            if n == 0 {
                return Err(Error::io("read", libc::EIO));
            }
            if n > 0 {
                let Ok(r) = parse(&buf[..(n as usize).min(buf.len())]) else {
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
                    let need = u32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]) as usize;
                    let Some(want) = grown_read_len(buf.len(), need) else {
                        return Err(Error::io("read", libc::EMSGSIZE));
                    };
                    buf.resize(want, 0);
                }
                e => return Err(Error::io("read", e)),
            }
        }
    }

    /// Forgets an outstanding request once its response or timeout is read;
    /// whether `r` was one.
    fn settle(&self, r: &Received) -> bool {
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
            match self.read_one(0)? {
                Read::Mad(r, _) => return Ok(Some(r)),
                Read::Nothing => return Ok(None),
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

    /// Waits for a MAD that `want` accepts; others are queued for later.
    ///
    /// One receiving thread at a time waits in poll(2) on the fd, for as
    /// long as its own timeout has left, and queues what is not its own; the
    /// others wait on the condition variable for what it queues, or to take
    /// over the fd when it returns. No thread wakes up unless a MAD came or
    /// its time is up.
    pub(crate) fn recv_matching(
        &self,
        timeout: Option<Duration>,
        want: impl Fn(&Received) -> bool,
    ) -> Result<Received> {
        // A timeout too long for an Instant waits forever.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let timed_out = || Error::RecvTimeout(timeout.unwrap_or_default());
        let mut st = lock(&self.recv);
        while st.reading {
            if let Some(r) = st.pending.take(&want) {
                return Ok(r);
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
        // The reader now: only it queues, so nothing for it can appear in
        // the queue while it reads.
        st.reading = true;
        drop(st);
        let _reading = Reading(self);
        loop {
            let left = remaining(deadline);
            match self.read_one(poll_ms(left))? {
                Read::Mad(r, _) if want(&r) => return Ok(r),
                Read::Mad(r, solicited) => self.queue(r, solicited),
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
        let low = tid as u32;
        self.recv_matching(Some(limit), |r| {
            r.agent_id == agent
                && r.tid() as u32 == low
                && (r.status != 0 || r.mad.method().is_response())
        })
        .map_err(|e| {
            self.abandon(agent, tid);
            match e {
                Error::RecvTimeout(_) => Error::Timeout { tid },
                e => e,
            }
        })
    }

    /// Writes one MAD with its header.
    pub(crate) fn write(&self, hdr: &[u8; HDR_SIZE], mad: &[u8]) -> std::result::Result<(), i32> {
        let mut buf = Vec::with_capacity(HDR_SIZE + mad.len());
        buf.extend_from_slice(hdr);
        buf.extend_from_slice(mad);
        loop {
            // SAFETY: `buf` is readable for its whole length.
            let n = unsafe { libc::write(self.fd, buf.as_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(());
            }
            match failed_errno(n) {
                libc::EINTR => continue,
                e => return Err(e),
            }
        }
    }
}

#[cfg(all(test, feature = "tokio"))]
impl Port {
    /// A port over a unit test's fake fd.
    pub(crate) fn from_inner(inner: Arc<PortInner>) -> Port {
        Port {
            view: PortView { inner },
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::mad::{MadHeader, Method};
    use crate::umad::addr::Address;
    use crate::umad::wire::send_header;
    use std::os::fd::{FromRawFd, OwnedFd};

    const CLIENT: u32 = 1;
    const SERVER: u32 = 2;

    /// A PortInner over one end of a SOCK_SEQPACKET socket pair (one read,
    /// one message, as on a umad fd), and the other end to write MADs into.
    pub(crate) fn fake_port() -> (Arc<PortInner>, OwnedFd) {
        fake_port_blocking(false)
    }

    /// A fake port whose fd stays blocking when `blocking`, as umad2sim's
    /// fds do.
    fn fake_port_blocking(blocking: bool) -> (Arc<PortInner>, OwnedFd) {
        let mut sv = [0; 2];
        // SAFETY: `sv` has room for the two fds.
        let rc =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, sv.as_mut_ptr()) };
        assert_eq!(rc, 0, "socketpair: {}", std::io::Error::last_os_error());
        // SAFETY: both fds were just created and are owned once: sv[0] by
        // the PortInner (closed in its Drop), sv[1] by the OwnedFd.
        unsafe {
            if !blocking {
                let fl = libc::fcntl(sv[0], libc::F_GETFL);
                libc::fcntl(sv[0], libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
            (
                Arc::new(PortInner::new(sv[0], "fake0".into(), 1, false)),
                OwnedFd::from_raw_fd(sv[1]),
            )
        }
    }

    /// Writes what the kernel would hand `agent`: a MAD of `method` with
    /// `tid`, with `seq` in its first data byte.
    pub(crate) fn deliver(w: &OwnedFd, agent: u32, method: Method, tid: u64, seq: u8) {
        let mut mad = Mad::new(&MadHeader::request(0x32, 1, method, tid, 0));
        mad.data_mut()[0] = seq;
        let mut b = send_header(agent, 0, 0, Mad::SIZE, &Address::gsi_lid(1)).to_vec();
        b.extend_from_slice(mad.as_bytes());
        use std::os::fd::AsRawFd;
        // SAFETY: `b` is readable for its length; the fd is open.
        let n = unsafe { libc::write(w.as_raw_fd(), b.as_ptr().cast(), b.len()) };
        assert_eq!(n, b.len() as isize, "{}", std::io::Error::last_os_error());
    }

    /// Writes what the kernel would hand `agent` as a MAD that does not
    /// decode (base version 2).
    fn deliver_malformed(w: &OwnedFd, agent: u32) {
        let mut mad = Mad::new(&MadHeader::request(0x32, 1, Method::GET, 1, 0))
            .as_bytes()
            .to_vec();
        mad[0] = 2;
        let mut b = send_header(agent, 0, 0, mad.len(), &Address::gsi_lid(1)).to_vec();
        b.extend_from_slice(&mad);
        use std::os::fd::AsRawFd;
        // SAFETY: `b` is readable for its length; the fd is open.
        let n = unsafe { libc::write(w.as_raw_fd(), b.as_ptr().cast(), b.len()) };
        assert_eq!(n, b.len() as isize, "{}", std::io::Error::last_os_error());
    }

    fn for_agent(agent: u32) -> impl Fn(&Received) -> bool {
        move |r| r.agent_id == agent
    }

    /// Voluntary context switches of the calling thread so far.
    fn voluntary_switches() -> i64 {
        // SAFETY: rusage is plain data, written by getrusage.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is writable; RUSAGE_THREAD is the calling thread.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
        u.ru_nvcsw
    }

    pub(crate) fn received(agent: u32, status: i32, method: Method, tid: u64) -> Received {
        Received {
            agent_id: agent,
            status,
            addr: Address::gsi_lid(1),
            len: Mad::SIZE,
            mad: Mad::new(&MadHeader::request(0x32, 1, method, tid, 0)),
        }
    }

    #[test]
    fn pending_drops_the_newest_unsolicited_mad_past_its_capacity() {
        let mut q = Pending::new(2);
        assert!(q.push(received(SERVER, 0, Method::GET, 1), false));
        assert!(q.push(received(SERVER, 0, Method::GET, 2), false));
        assert!(!q.push(received(SERVER, 0, Method::GET, 3), false));
        // A response to a tracked request is kept past the bound.
        assert!(q.push(received(CLIENT, 0, Method::GET_RESP, 9), true));
        assert_eq!(q.len(), 3);
        assert_eq!(q.take(for_agent(SERVER)).map(|r| r.tid()), Some(1));
        assert!(q.push(received(SERVER, 0, Method::GET, 4), false));
        assert!(!q.push(received(SERVER, 0, Method::GET, 5), false));
        q.purge(SERVER);
        assert_eq!(q.len(), 1);
        assert!(q.push(received(SERVER, 0, Method::GET, 6), false));
        assert!(q.push(received(SERVER, 0, Method::GET, 7), false));
        assert_eq!(q.take(for_agent(CLIENT)).map(|r| r.tid()), Some(9));
        let mut none = Pending::new(0);
        assert!(!none.push(received(SERVER, 0, Method::GET, 1), false));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn a_flood_of_unsolicited_mads_is_bounded_and_the_response_still_arrives() {
        let (port, w) = fake_port();
        lock(&port.recv).pending.capacity = 4;
        for seq in 0..20 {
            deliver(&w, SERVER, Method::GET, 0x100 + u64::from(seq), seq);
        }
        assert!(port.add_outstanding(CLIENT, 0x42));
        deliver(&w, CLIENT, Method::GET_RESP, 0x42, 0);
        let r = port
            .recv_matching(Some(Duration::from_secs(5)), for_agent(CLIENT))
            .unwrap();
        assert_eq!((r.agent_id, r.tid()), (CLIENT, 0x42));
        assert_eq!(lock(&port.recv).pending.len(), 4);
        assert_eq!(port.dropped.load(Ordering::Relaxed), 16);
        // The oldest were kept, in order.
        for seq in 0..4 {
            let r = port
                .recv_matching(Some(Duration::ZERO), for_agent(SERVER))
                .unwrap();
            assert_eq!(r.mad.data()[0], seq);
        }
        assert!(matches!(
            port.recv_matching(Some(Duration::ZERO), for_agent(SERVER)),
            Err(Error::RecvTimeout(_))
        ));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn responses_of_tracked_requests_are_kept_when_the_queue_is_full() {
        let (port, w) = fake_port();
        lock(&port.recv).pending.capacity = 1;
        assert!(port.add_outstanding(CLIENT, 7));
        deliver(&w, SERVER, Method::GET, 1, 0);
        deliver(&w, SERVER, Method::GET, 2, 1);
        deliver(&w, CLIENT, Method::GET_RESP, 7, 0);
        deliver(&w, SERVER, Method::GET, 3, 2);
        // The server's receive reads the client's response and queues it.
        let mut seen = Vec::new();
        while let Ok(r) = port.recv_matching(Some(Duration::from_millis(50)), for_agent(SERVER)) {
            seen.push(r.tid());
        }
        assert_eq!(seen, [1, 2, 3]);
        let r = port
            .recv_matching(Some(Duration::ZERO), for_agent(CLIENT))
            .unwrap();
        assert_eq!(r.tid(), 7);
        // Reading the response settled the request.
        assert!(port.add_outstanding(CLIENT, 7));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair, poll(2) and getrusage(2)
    fn recv_sleeps_in_poll_until_its_timeout() {
        let (port, _w) = fake_port();
        let before = voluntary_switches();
        let start = Instant::now();
        let r = port.recv_matching(Some(Duration::from_millis(600)), |_| true);
        let took = start.elapsed();
        let switches = voluntary_switches() - before;
        assert!(matches!(r, Err(Error::RecvTimeout(_))), "{r:?}");
        assert!(
            took >= Duration::from_millis(600) && took < Duration::from_secs(3),
            "returned after {took:?}"
        );
        // Waking every 20 ms would be some 30 switches.
        assert!(switches <= 5, "{switches} wake-ups while waiting");
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair, poll(2) and getrusage(2)
    fn a_mad_read_by_another_thread_reaches_its_receiver_at_once() {
        let (port, w) = fake_port();
        std::thread::scope(|s| {
            let client = s.spawn(|| {
                let r = port.recv_matching(Some(Duration::from_secs(10)), for_agent(CLIENT));
                (r.map(|r| r.tid()), Instant::now())
            });
            let server = s.spawn(|| {
                let before = voluntary_switches();
                let r = port.recv_matching(Some(Duration::from_secs(10)), for_agent(SERVER));
                (
                    r.map(|r| r.tid()),
                    Instant::now(),
                    voluntary_switches() - before,
                )
            });
            std::thread::sleep(Duration::from_millis(700));
            let sent = Instant::now();
            deliver(&w, SERVER, Method::GET, 2, 0);
            let (got, at, switches) = server.join().unwrap();
            assert_eq!(got.unwrap(), 2);
            assert!(at - sent < Duration::from_secs(2), "after {:?}", at - sent);
            // Whichever thread read the fd, the server slept while waiting.
            assert!(switches <= 8, "{switches} wake-ups while waiting");
            std::thread::sleep(Duration::from_millis(100));
            let sent = Instant::now();
            deliver(&w, CLIENT, Method::GET, 1, 0);
            let (got, at) = client.join().unwrap();
            assert_eq!(got.unwrap(), 1);
            assert!(at - sent < Duration::from_secs(2), "after {:?}", at - sent);
        });
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn a_waiting_receiver_times_out_on_its_own_deadline() {
        let (port, w) = fake_port();
        std::thread::scope(|s| {
            let reader =
                s.spawn(|| port.recv_matching(Some(Duration::from_secs(10)), for_agent(CLIENT)));
            std::thread::sleep(Duration::from_millis(100));
            let start = Instant::now();
            let r = port.recv_matching(Some(Duration::from_millis(300)), for_agent(SERVER));
            let took = start.elapsed();
            assert!(matches!(r, Err(Error::RecvTimeout(_))), "{r:?}");
            assert!(
                took >= Duration::from_millis(300) && took < Duration::from_secs(3),
                "after {took:?}"
            );
            deliver(&w, CLIENT, Method::GET, 1, 0);
            assert_eq!(reader.join().unwrap().unwrap().tid(), 1);
        });
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn a_timeout_too_long_for_an_instant_waits_for_the_mad() {
        let (port, w) = fake_port();
        deliver(&w, CLIENT, Method::GET, 5, 0);
        let r = port.recv_matching(Some(Duration::MAX), for_agent(CLIENT));
        assert_eq!(r.unwrap().tid(), 5);
    }

    #[test]
    fn negative_returns_other_than_minus_one_are_the_errno() {
        assert_eq!(failed_errno(-(libc::EWOULDBLOCK as isize)), libc::EAGAIN);
        assert_eq!(failed_errno(-(libc::EINTR as isize)), libc::EINTR);
        assert_eq!(failed_errno(isize::MIN), libc::EIO);
        // SAFETY: writing errno of the calling thread.
        unsafe { *libc::__errno_location() = libc::ENOSPC };
        assert_eq!(failed_errno(-1), libc::ENOSPC);
    }

    #[test]
    fn only_umad2sim_fds_may_stay_blocking() {
        assert!(umad2sim_fcntl_failure(1024, libc::EBADF));
        assert!(!umad2sim_fcntl_failure(7, libc::EBADF));
        assert!(!umad2sim_fcntl_failure(1024, libc::EINVAL));
    }

    #[test]
    fn poll_timeouts_round_up_and_saturate() {
        assert_eq!(poll_ms(None), -1);
        assert_eq!(poll_ms(Some(Duration::ZERO)), 0);
        assert_eq!(poll_ms(Some(Duration::from_micros(1))), 1);
        assert_eq!(poll_ms(Some(Duration::from_micros(1500))), 2);
        assert_eq!(poll_ms(Some(Duration::MAX)), MAX_POLL_MS);
        // What umad2sim makes of it (microseconds in an int) does not wrap.
        assert!(MAX_POLL_MS.checked_mul(1000).is_some());
        assert_eq!(
            poll_ms(Some(Duration::from_millis(MAX_POLL_MS as u64 + 1))),
            MAX_POLL_MS
        );
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn try_recv_leaves_the_fd_to_the_thread_holding_the_reader_role() {
        // Blocking, as under umad2sim: a MAD the reader's poll announced
        // must still be there for its read.
        let (port, w) = fake_port_blocking(true);
        deliver(&w, SERVER, Method::GET, 1, 0);
        lock(&port.recv).reading = true;
        assert!(port.try_recv().unwrap().is_none());
        // The MAD is still in the fd for the reader.
        assert_eq!(
            port.read_one(0).ok().map(|r| matches!(r, Read::Mad(..))),
            Some(true)
        );
        deliver(&w, SERVER, Method::GET, 2, 0);
        lock(&port.recv).reading = false;
        // With no reader, try_recv takes the role for its read, and gives it
        // back.
        assert_eq!(port.try_recv().unwrap().map(|r| r.tid()), Some(2));
        assert!(!lock(&port.recv).reading);
        assert!(port.try_recv().unwrap().is_none());
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn a_receive_returns_at_its_deadline_while_mads_for_others_keep_coming() {
        let (port, w) = fake_port();
        // More MADs for the server than the client's receive can read
        // before its deadline (5 ms each): the fd is never empty.
        for seq in 0..60 {
            deliver(&w, SERVER, Method::GET, 0x100 + u64::from(seq), seq);
        }
        deliver(&w, CLIENT, Method::GET, 0x42, 0);
        let start = Instant::now();
        let r = port.recv_matching(Some(Duration::from_millis(50)), |r| {
            std::thread::sleep(Duration::from_millis(5));
            r.agent_id == CLIENT
        });
        let took = start.elapsed();
        assert!(matches!(r, Err(Error::RecvTimeout(_))), "{r:?}");
        assert!(took < Duration::from_millis(250), "returned after {took:?}");
        // What it read is queued, and the rest is still there to read.
        assert!(lock(&port.recv).pending.len() > 0);
        let r = port.recv_matching(Some(Duration::from_secs(5)), for_agent(CLIENT));
        assert_eq!(r.unwrap().tid(), 0x42);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn a_timed_out_request_forgets_its_late_response() {
        let (port, w) = fake_port();
        lock(&port.recv).pending.capacity = 0;
        assert!(port.add_outstanding(CLIENT, 0x42));
        let r = port.await_response(CLIENT, 0x42, Duration::from_millis(50));
        assert!(matches!(r, Err(Error::Timeout { tid: 0x42 })), "{r:?}");
        // The request is forgotten: its TID may be tracked again...
        assert!(port.add_outstanding(CLIENT, 0x42));
        port.remove_outstanding(CLIENT, 0x42);
        // ...and its late response, read by another receive, is unsolicited:
        // under the bound (0 here), not kept for no one.
        deliver(&w, CLIENT, Method::GET_RESP, 0x42, 0);
        deliver(&w, SERVER, Method::GET, 1, 0);
        let r = port.recv_matching(Some(Duration::from_secs(5)), for_agent(SERVER));
        assert_eq!(r.unwrap().tid(), 1);
        assert_eq!(lock(&port.recv).pending.len(), 0);
        assert_eq!(port.dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn abandoning_a_request_drops_its_response_already_queued() {
        let (port, w) = fake_port();
        assert!(port.add_outstanding(CLIENT, 0x42));
        deliver(&w, CLIENT, Method::GET_RESP, 0x42, 0);
        deliver(&w, CLIENT, Method::GET, 0x42, 1);
        deliver(&w, SERVER, Method::GET, 1, 0);
        // Another receive queues the response (solicited) and a request.
        let r = port.recv_matching(Some(Duration::from_secs(5)), for_agent(SERVER));
        assert_eq!(r.unwrap().tid(), 1);
        assert_eq!(lock(&port.recv).pending.len(), 2);
        // The requester gave up just as it was queued.
        port.abandon(CLIENT, 0x42);
        let mut q = lock(&port.recv);
        assert_eq!(q.pending.len(), 1);
        let left = q.pending.take(|_| true).unwrap();
        assert_eq!((left.mad.method(), left.mad.data()[0]), (Method::GET, 1));
        assert_eq!(q.pending.unsolicited, 0);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn a_malformed_mad_is_dropped_and_counted_not_failed_on_its_reader() {
        let (port, w) = fake_port();
        assert!(port.add_outstanding(CLIENT, 0x42));
        deliver_malformed(&w, SERVER);
        deliver(&w, CLIENT, Method::GET_RESP, 0x42, 0);
        let r = port.await_response(CLIENT, 0x42, Duration::from_secs(5));
        assert_eq!(r.unwrap().tid(), 0x42);
        assert_eq!(port.malformed.load(Ordering::Relaxed), 1);
        // The response settled the request.
        assert!(port.add_outstanding(CLIENT, 0x42));
        // try_recv skips one too.
        deliver_malformed(&w, CLIENT);
        deliver(&w, SERVER, Method::GET, 7, 0);
        assert_eq!(port.try_recv().unwrap().map(|r| r.tid()), Some(7));
        assert_eq!(port.malformed.load(Ordering::Relaxed), 2);
        let view = PortView { inner: port };
        assert_eq!(view.malformed_mads(), 2);
        assert_eq!(view.dropped_mads(), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and poll(2)
    fn an_fd_at_its_end_is_an_error_not_a_stream_of_malformed_mads() {
        let (port, w) = fake_port();
        drop(w);
        let r = port.try_recv();
        assert_eq!(
            r.as_ref().err().and_then(Error::errno),
            Some(libc::EIO),
            "{r:?}"
        );
        assert_eq!(port.malformed.load(Ordering::Relaxed), 0);
        assert!(!lock(&port.recv).reading);
    }

    #[test]
    fn enospc_with_a_bogus_length_grows_the_buffer_geometrically() {
        let start = HDR_SIZE + Mad::SIZE;
        // A sane length is taken as is.
        assert_eq!(grown_read_len(start, 4096), Some(HDR_SIZE + 4096));
        // A length that would not grow the buffer, or is past the cap,
        // doubles it: the cap is reached in a few reads, then refused.
        for need in [0, Mad::SIZE, usize::MAX, MAX_READ] {
            let (mut len, mut reads) = (start, 0);
            while let Some(next) = grown_read_len(len, need) {
                assert!(next > len && next <= MAX_READ);
                len = next;
                reads += 1;
            }
            assert_eq!(len, MAX_READ);
            assert!(reads <= 20, "{reads} reads to reach the cap with {need}");
        }
    }
}
