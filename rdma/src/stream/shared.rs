//! What the halves (or the message endpoint) and the driver share
//! ([`Shared`]): the engine's [`State`] (with the [`Core`] in it) under one
//! mutex, the engine's [`Link`] (the CQ, the region, the mode, the count of
//! tasks woken), the protection domain, and the flags they tell each other
//! through. It sits above the engine ([`super::engine`]), which it drives
//! under the lock and hands the link.
//!
//! Whoever holds the lock may drive the core: a half that waits
//! ([`Shared::drive`]), or the driver task ([`super::driver`]), which does
//! so when nobody else does, handles the CM's events and closes the
//! connection; it owns the core once the connection ends.
//!
//! A half that queued work wakes the driver through a
//! [`Notify`] (not while it busy-polls: it looks at the state on its next
//! pass, [`Shared::nudge`]); the driver wakes a half through its waker.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};

use crate::os::lock;
use crate::{AccessFlags, MemoryRegion, ProtectionDomain, RemoteMemory};

use super::busy_poll::{busy_poll_micros, BUSY_POLL_FOREVER};
use super::engine::{with_core, Core, Link, OneSided, State};
use super::error::{ended_error, io_err};

/// What the halves (or the message endpoint) and the driver share.
pub(super) struct Shared {
    /// Dropped first: a core still in it (a driver that never ran) holds
    /// the QP, which goes before the link's CQ below.
    pub(super) state: Mutex<State>,
    /// What the engine runs on besides the state (the CQ, then the
    /// region, drop in that order, before the protection domain).
    pub(super) link: Link,
    /// Wakes the driver.
    pub(super) notify: Notify,
    /// The connection's protection domain: regions for one-sided access.
    pub(super) pd: ProtectionDomain,
    pub(super) local: Option<SocketAddr>,
    pub(super) peer: Option<SocketAddr>,
    /// How long the driver busy-polls after each thing it handles before
    /// it sleeps, in microseconds ([`BUSY_POLL_FOREVER`]: never).
    pub(super) busy_poll: AtomicU64,
    /// Times a half (or the message endpoint) looked at the state, through
    /// [`Shared::lock_half`]: a busy-polling driver that woke a task tells
    /// from it whether the task has run yet.
    pub(super) turns: AtomicU64,
    /// The driver busy-polls, and pumps again when the poll ends (before
    /// it sleeps, or leaves the CQ to a polling reader): a half that queued
    /// work (or freed a buffer) under the lock and then reads `true` need
    /// not wake it ([`Shared::nudge`]).
    pub(super) spinning: AtomicBool,
    /// The driver left the CQ to a polling read and sleeps without arming
    /// it ([`Idle::Standby`](super::driver::Idle::Standby)); it pumps when it wakes, within about
    /// [`STANDBY_MAX`](super::driver::STANDBY_MAX). Set before that sleep, cleared (SeqCst) after it.
    pub(super) standby: AtomicBool,
    /// A half (or the message endpoint) changed what the driver's
    /// [`pump`](Core::pump) acts on (data queued, buffers freed,
    /// one-sided requests, shutdown, a half gone) since the busy-polling
    /// driver last looked: it skips the pump of a pass that starts with
    /// this unset. Set after the change, which is made under the lock.
    pub(super) changed: AtomicBool,
    /// What a half that waits and polls the CQ itself ([`Spin`](super::split::Spin)) told the
    /// driver since it last looked: [`HALF_POLLS`](super::busy_poll::HALF_POLLS) (the driver leaves the
    /// CQ to it and sleeps without arming the CQ, [`Idle::Standby`](super::driver::Idle::Standby)),
    /// [`HALF_DONE`](super::busy_poll::HALF_DONE) (its busy-poll time passed with nothing: the driver
    /// arms the CQ and sleeps at once), or nothing (0).
    pub(super) half_polling: AtomicU8,
    /// The write half waits for the lock ([`Shared::lock_writer`]): a
    /// busy-polling read ends its turn's polls early, so that the lock
    /// goes to the writer.
    pub(super) writer_waits: AtomicBool,
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
    pub(super) fn take_changed(&self) -> bool {
        self.changed.load(Ordering::Acquire) && self.changed.swap(false, Ordering::AcqRel)
    }

    /// Whether the driver pumps soon without being woken: it busy-polls
    /// (a pass pumps when [`changed`](Self::changed) is set, and it pumps
    /// when the poll ends) or is in standby (it pumps when it wakes,
    /// within about [`STANDBY_MAX`](super::driver::STANDBY_MAX)). Read under the lock, after a change made under
    /// it: the driver clears the flag before the pump that ends that state
    /// and takes the lock for it, so either this read sees the flag cleared
    /// or that pump comes after the change (as in [`nudge`](Self::nudge)).
    pub(super) fn pumps_soon(&self) -> bool {
        self.spinning.load(Ordering::SeqCst) || self.standby.load(Ordering::SeqCst)
    }

    /// What a half told the driver since the last call (which clears it):
    /// see [`half_polling`](Self::half_polling).
    pub(super) fn take_half_polls(&self) -> u8 {
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
            true => core.poll_cq(&self.link, st).and_then(|got| match got {
                false if !st.repost.is_empty() => core.pump(&self.link, st),
                _ => Ok(got),
            }),
            false => core.pump(&self.link, st),
        })
        .is_some()
    }

    /// Runs `f` on the core, under the lock `st` is from, as
    /// [`drive`](Self::drive) does: `None` when the core is not there to
    /// drive, else `Some` with what `f` returned, or `Some(None)` when it
    /// failed. Its error, or a completion that says the connection ended,
    /// stays in the core, and the driver is woken to end the connection.
    #[inline]
    pub(super) fn drive_with<R>(
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

    /// See [`RdmaStream::set_busy_poll`](super::RdmaStream::set_busy_poll).
    pub(super) fn set_busy_poll(&self, d: Duration) {
        self.busy_poll.store(busy_poll_micros(d), Ordering::Relaxed);
        // A driver asleep takes the new time at once.
        self.notify.notify_one();
    }

    /// See [`RdmaStream::busy_poll`](super::RdmaStream::busy_poll).
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
    /// [`RdmaStream::write_remote`](super::RdmaStream::write_remote) for the checks and the errors.
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
pub(super) const MAX_ONE_SIDED: usize = 1 << 31;
