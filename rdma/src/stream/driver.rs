//! The driver task: it sleeps on the CQ's completion channel and the CM
//! id's events, busy-polls for a while after each thing it handles,
//! leaves the CQ to a read that polls it, and closes the connection.
//!
//! After each thing it handles (a completion, data to post) the driver
//! busy-polls the CQ for the connection's busy-poll time, yielding to the
//! runtime's other tasks after each pass of a few polls, and only then
//! arms the CQ and sleeps on the completion channel. While a read polls
//! the CQ itself ([`super::split::Spin`]) the driver leaves the CQ to it
//! and sleeps without arming it, in standby ([`STANDBY`]).
//!
//! At the close the driver sends what was written and the FIN (and, if
//! data came after an earlier FIN, the credits for it: see
//! [`Core::last_credits_due`]) for up to [`LINGER`], then disconnects,
//! waits for up to [`FLUSH_WAIT`](super::FLUSH_WAIT) until every posted
//! request has completed (flushed, usually) and destroys the QP, the CM id
//! and the CQ.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::cm::CmEventKind;

use super::busy_poll::{BUSY_POLL_FOREVER, CLOCK_EVERY, HALF_DONE, HALF_POLLS, SPIN_POLLS};
use super::engine::{with_core, Core, State};
use super::error::{aborted, copy_err, io_err, Ended};
use super::shared::Shared;
use super::LINGER;

/// Whether a task that a busy-polling driver woke has run by the driver's
/// next pass (see [`Driver::busy_poll`]).
#[derive(Debug, Default)]
pub(super) struct Handoff(Option<u64>);

impl Handoff {
    /// After a pass, with the halves' `turns` ([`Shared::turns`]) now and
    /// whether the pass woke a task: whether a task woken by the pass
    /// before has not run since (no turn was taken), once per wake.
    pub(super) fn starved(&mut self, turns: u64, woke: bool) -> bool {
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
pub(super) struct YieldOnce(bool);

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

// ------------------------------------------------------------ driver

/// Tells the halves that the driver is gone when it stops without saying
/// why (its runtime shut down, or the task was aborted), and drops the
/// core (the CM id and the QP) if the driver still had it in the state.
pub(super) struct EndGuard(pub(super) Arc<Shared>);

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
pub(super) enum Exit {
    /// Both halves are gone and what they wrote is sent (or the linger
    /// time passed).
    Closed,
    /// The peer disconnected, or the QP failed.
    PeerGone,
}

/// How a busy poll ended without the connection's end.
pub(super) enum Idle {
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
pub(super) const STANDBY: Duration = Duration::from_millis(1);

/// The longest standby: a read dropped mid-poll leaves the CQ to no one
/// for about this long at most (the timer's tick of a millisecond
/// added) while nothing else uses the connection; its completions wait,
/// none is lost. Sooner when it is used: a new read polls the CQ itself
/// (and starts a wait of its own, [`super::split::STALE_WAIT`]), and
/// anything that wakes the driver from a standby (a write that waits, a
/// shutdown, a one-sided request, a half dropped, a new busy-poll time)
/// makes it check at once that a read still polls, as the wake-up after
/// a standby that passed does ([`Driver::busy_poll`]).
pub(super) const STANDBY_MAX: Duration = Duration::from_millis(8);

/// The length of the driver's standbys (see [`STANDBY`]).
#[derive(Debug)]
pub(super) struct Backoff {
    /// The last standby's length.
    pub(super) last: Duration,
    /// It passed, and nothing was posted or woke the driver since.
    pub(super) passed: bool,
    /// A standby ended (it passed, or the driver was woken) and the busy
    /// poll after it has not checked yet that a half still polls.
    pub(super) recheck: bool,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            last: STANDBY,
            passed: false,
            recheck: false,
        }
    }
}

impl Backoff {
    /// The length of a standby that starts now: twice the last (up to
    /// [`STANDBY_MAX`]) right after one that passed, else [`STANDBY`].
    pub(super) fn start(&mut self) -> Duration {
        self.last = match self.passed {
            true => (self.last * 2).min(STANDBY_MAX),
            false => STANDBY,
        };
        self.passed = false;
        self.last
    }

    /// A standby ended, however it ended: the next busy poll checks
    /// that the half that asked for it still polls.
    pub(super) fn ended(&mut self) {
        self.recheck = true;
    }

    /// A standby passed (its timer fired).
    pub(super) fn passed(&mut self) {
        self.passed = true;
    }

    /// The driver did something, or was woken, or a standby did not
    /// follow at once.
    pub(super) fn reset(&mut self) {
        self.passed = false;
    }
}

/// The task that serves a stream: it sleeps on the CQ's completion channel
/// and the CM id's events, busy-polls for a while after each thing it
/// handles, and closes the connection. What posts and completes is the
/// [`Core`], in the shared state, which a waiting half also drives.
pub(super) struct Driver {
    pub(super) guard: EndGuard,
}

/// Sets one of the driver's flags ([`Shared::spinning`] while it
/// busy-polls, [`Shared::standby`] while it sleeps in standby) for as long
/// as it lives; cleared (SeqCst) when it drops, however the poll or the
/// sleep ends.
pub(super) struct Raised<'a>(&'a AtomicBool);

impl Raised<'_> {
    pub(super) fn new(flag: &AtomicBool) -> Raised<'_> {
        flag.store(true, Ordering::SeqCst);
        Raised(flag)
    }
}

impl Drop for Raised<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Driver {
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.guard.0
    }

    /// Runs `f` on the core under the lock; first an error a half met
    /// while driving it.
    pub(super) fn locked<R>(
        &self,
        f: impl FnOnce(&mut Core, &mut State) -> io::Result<R>,
    ) -> io::Result<R> {
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

    pub(super) async fn run(self) {
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
        core.close(&self.shared().link).await;
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
    pub(super) async fn serve(&self) -> io::Result<Exit> {
        let shared = Arc::clone(self.shared());
        let mut linger: Option<Instant> = None;
        // The linger branch's deadline while it is disabled (never used).
        let never = Instant::now();
        let mut backoff = Backoff::default();
        let mut standby_for = STANDBY;
        loop {
            let (closing, gone) = self.locked(|core, st| {
                if core.pump(&shared.link, st)? {
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
            if self.locked(|core, st| core.pump(&shared.link, st))? {
                backoff.reset();
            }
            if !standby {
                // Arms the CQ and looks again: a completion that came
                // before the arm raises no event.
                let (handled, gone) = self.locked(|core, st| {
                    let mut handled = core.poll_cq(&shared.link, st)?;
                    if !handled {
                        shared.link.cq.cq().req_notify(false).map_err(io_err)?;
                        handled = core.poll_cq(&shared.link, st)?;
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
                match st.core.as_mut().and_then(|c| c.id.as_mut()) {
                    Some(id) => id.poll_event(cx),
                    None => Poll::Pending,
                }
            });
            // Cleared when the wait ends, however it ends; the pump at the
            // top of the loop follows.
            let _standby = standby.then(|| Raised::new(&shared.standby));
            backoff.reset();
            let gone = tokio::select! {
                biased;
                r = shared.link.cq.wait_event(), if !standby => {
                    r.map_err(io_err)?;
                    false
                }
                ev = event => {
                    match ev.map_err(io_err)?.kind {
                        CmEventKind::Disconnected => {
                            // Completions that came before it are data.
                            self.locked(|core, st| core.drain_cq(&shared.link, st))?;
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
            if standby {
                backoff.ended();
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
    /// After a standby, whether it passed ([`Backoff`]) or something woke
    /// the driver from it, a `HALF_POLLS` left from
    /// before may be stale (the read's future dropped since): it is
    /// cleared, and the driver yields once, so that a read that still
    /// polls says so again (a task spawned on the same current-thread
    /// runtime woke itself and runs first; a read elsewhere, or a
    /// `block_on` future, says so at a later look). A `HALF_POLLS` seen
    /// after that is fresh: the standby that follows is longer unless a
    /// pass did something meanwhile, which starts the back-off over.
    pub(super) async fn busy_poll(&self, backoff: &mut Backoff) -> io::Result<Option<Idle>> {
        let shared = Arc::clone(self.shared());
        // Raised before the yield below: a half's change meanwhile is
        // pumped when the busy poll ends, without a wake-up.
        let _spinning = Raised::new(&shared.spinning);
        if std::mem::take(&mut backoff.recheck) {
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
            let wakes = shared.link.wakes.load(Ordering::Relaxed);
            // What a woken half queued since the last pass goes before the
            // polls; without a change, the pump would find nothing to do.
            let changed = shared.take_changed();
            let (did, gone, halves_gone) = self.locked(|core, st| {
                let mut did = changed && core.pump(&shared.link, st)?;
                for _ in 0..SPIN_POLLS {
                    if core.poll_cq(&shared.link, st)? {
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
            let woke = shared.link.wakes.load(Ordering::Relaxed) != wakes;
            if handoff.starved(shared.turns.load(Ordering::Relaxed), woke) {
                tokio::task::yield_now().await;
            } else {
                YieldOnce(false).await;
            }
        }
    }

    pub(super) fn has_pending_event(&self) -> bool {
        let st = self.shared().lock();
        st.core
            .as_ref()
            .is_none_or(|c| c.id.as_ref().is_none_or(|id| id.has_pending_event()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::Waker;

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
        // Every standby, passed or woken from, has the next busy poll
        // check that a half still polls, once.
        assert!(!b.recheck);
        b.ended();
        assert!(std::mem::take(&mut b.recheck));
        assert!(!b.recheck);
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
