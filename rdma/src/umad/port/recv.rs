//! The receive queue of a umad port, which its agents share: one thread
//! at a time reads the fd (the reader role) and queues what is for others,
//! within a bound; the requests in flight whose responses are always kept.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use super::super::wire::Received;
use super::super::{Error, Result};
use super::{PortInner, PortView, Read};
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
    pub(super) unsolicited: usize,
    pub(super) capacity: usize,
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
            match self.read_one(Some(Duration::ZERO))? {
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
            match self.read_one(left)? {
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
}
