//! Blocking on a completion queue: [`CompletionQueue::wait`] and the
//! completion events of its channel.

use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::CompletionQueue;
use crate::sys;
use crate::{CompletionBuf, Error, Result, WorkCompletion};

/// Events are acknowledged in batches of this many (ack takes a lock).
const ACK_BATCH: u32 = 32;

/// Empty polls a [`CompletionQueue::wait`] without a channel spins
/// through, then as many yields, before it sleeps between polls.
const WAIT_SPINS: u32 = 64;
/// The first sleep between the polls of a wait without a channel; each
/// doubles, up to [`WAIT_SLEEP_MAX`].
const WAIT_SLEEP_MIN: Duration = Duration::from_micros(10);
/// The longest sleep between the polls of a wait without a channel: what
/// such a wait may lag behind a completion.
const WAIT_SLEEP_MAX: Duration = Duration::from_millis(1);

impl CompletionQueue {
    /// Blocks until at least `min` completions have been polled into `out`,
    /// or `timeout` has passed; returns the filled part, as
    /// [`poll`](Self::poll) does. What the C API's `rdma_get_send_comp` and
    /// `rdma_get_recv_comp` do, with a timeout.
    ///
    /// A timeout is not an error: the wait returns what completed before
    /// it, fewer than `min` (none, possibly), and the caller compares the
    /// length with `min`. [`wait_one`](Self::wait_one) makes a timeout an
    /// `ETIMEDOUT` error. `Duration::MAX` waits without a limit, `min` 0
    /// or a zero `timeout` polls once. More than `min` may come back (up
    /// to `out.len()`); failed completions count like the others, so check
    /// each one's status. `min` larger than `out` fails with `EINVAL`.
    ///
    /// With a completion channel
    /// ([`CqBuilder::channel`](crate::CqBuilder::channel)) the thread
    /// sleeps in the kernel: poll, arm ([`req_notify`](Self::req_notify)),
    /// poll again (a completion that came before the arm raises no event),
    /// then `poll(2)` on the channel's fd until the deadline, take the
    /// event ([`get_event`](Self::get_event), which acknowledges it) and
    /// start again. The queue may be left armed, and an event may be left
    /// on the channel for a later wait or `get_event` to take. Only one
    /// thread should read the channel meanwhile: on a blocking channel, an
    /// event another reader takes between `poll(2)` and the read makes the
    /// read wait for the next one. With a channel shared by several queues,
    /// an event of another queue is taken (and acknowledged) too.
    ///
    /// Without a channel it polls: a short spin, then yields, then sleeps
    /// growing from 10 µs to 1 ms between polls, so that a long wait costs
    /// little CPU and lags a completion by at most about 1 ms.
    ///
    /// ```no_run
    /// # use rdma::{CompletionQueue, WorkCompletion};
    /// # use std::time::Duration;
    /// # fn f(cq: &CompletionQueue) -> rdma::Result<()> {
    /// let mut wcs = [WorkCompletion::ZERO; 16];
    /// let done = cq.wait(&mut wcs, 2, Duration::from_secs(5))?;
    /// if done.len() < 2 {
    ///     eprintln!("timed out with {} of 2", done.len());
    /// }
    /// for wc in done.iter() {
    ///     assert!(wc.is_success(), "{wc:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait<'a, B: CompletionBuf + ?Sized>(
        &self,
        out: &'a mut B,
        min: usize,
        timeout: Duration,
    ) -> Result<&'a mut [WorkCompletion]> {
        let out = out.as_completions();
        let deadline = Instant::now().checked_add(timeout);
        let n = wait_loop(&mut CqWait(self), out, min, deadline)?;
        Ok(&mut out[..n])
    }

    /// Blocks until one completion arrives (successful or not: check its
    /// status) and returns it, as [`wait`](Self::wait) with `min` 1; fails
    /// with `ETIMEDOUT` ([`Error::is_timeout`]) when none came within
    /// `timeout`.
    pub fn wait_one(&self, timeout: Duration) -> Result<WorkCompletion> {
        let mut wc = [WorkCompletion::ZERO; 1];
        match self.wait(&mut wc, 1, timeout)?.first() {
            Some(wc) => Ok(*wc),
            None => Err(Error::new("CompletionQueue::wait_one", libc::ETIMEDOUT)
                .with_hint(format!("no completion within {timeout:?}"))),
        }
    }

    /// Waits for a completion event on the queue's channel and acknowledges
    /// it (in batches). Returns `Ok(false)` when the channel is non-blocking
    /// and no event is pending. Re-arm with [`req_notify`](Self::req_notify)
    /// and poll afterwards.
    ///
    /// With a channel shared by several queues, an event of another queue is
    /// acknowledged too and reported as `Ok(true)`: poll every queue then.
    pub fn get_event(&self) -> Result<bool> {
        let ch = self.inner.channel.as_ref().ok_or_else(|| {
            Error::invalid("ibv_get_cq_event", "the CQ has no completion channel")
        })?;
        let mut cq = ptr::null_mut();
        let mut cq_ctx = ptr::null_mut();
        // SAFETY: a live channel; the out-parameters are writable.
        let rc = unsafe { sys::ibv_get_cq_event(ch.as_raw(), &mut cq, &mut cq_ctx) };
        if rc != 0 {
            // Checked before an Error is built: EAGAIN is the usual end of a
            // non-blocking drain, not a failure.
            let errno = crate::os::errno();
            if errno == libc::EAGAIN {
                return Ok(false);
            }
            return Err(Error::new("ibv_get_cq_event", errno));
        }
        if cq == self.as_raw() {
            self.count_event();
        } else {
            // SAFETY: the event's CQ cannot be destroyed before its events are
            // acknowledged (ibv_destroy_cq waits), so the pointer is live.
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
        }
        Ok(true)
    }

    fn count_event(&self) {
        let n = self.inner.unacked.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= ACK_BATCH {
            let n = self.inner.unacked.swap(0, Ordering::AcqRel);
            if n > 0 {
                // SAFETY: acknowledges events this CQ received.
                unsafe { sys::ibv_ack_cq_events(self.as_raw(), n) };
            }
        }
    }
}

/// The steps of a [`CompletionQueue::wait`], apart from its loop
/// ([`wait_loop`]), which tests drive with steps of their own.
trait WaitSteps {
    /// Polls into `out`; how many came.
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize>;
    /// Arms the queue for an event: `false` when it has no channel (the
    /// wait then backs off between polls instead).
    fn arm(&mut self) -> Result<bool>;
    /// Sleeps until an event arrives, and takes it (`true`), or until
    /// `deadline` (`false`).
    fn sleep(&mut self, deadline: Option<Instant>) -> Result<bool>;
}

struct CqWait<'a>(&'a CompletionQueue);

impl WaitSteps for CqWait<'_> {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize> {
        Ok(self.0.poll(out)?.len())
    }

    fn arm(&mut self) -> Result<bool> {
        if self.0.channel().is_none() {
            return Ok(false);
        }
        self.0.req_notify(false)?;
        Ok(true)
    }

    fn sleep(&mut self, deadline: Option<Instant>) -> Result<bool> {
        let Some(ch) = self.0.channel() else {
            return Ok(false);
        };
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if !crate::os::wait_readable(ch.as_raw_fd(), left)? {
            return Ok(false);
        }
        // Readable, so a blocking read returns at once (unless another
        // reader took the event meanwhile); a non-blocking one finds it,
        // or says so (`false`), and the loop polls again either way.
        self.0.get_event()?;
        Ok(true)
    }
}

/// Whether `deadline` has passed.
fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// The pause between the polls of a wait without a channel: spins, then
/// yields, then sleeps that double up to [`WAIT_SLEEP_MAX`], never past
/// the deadline.
struct Backoff {
    empty: u32,
    sleep: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            empty: 0,
            sleep: WAIT_SLEEP_MIN,
        }
    }

    fn pause(&mut self, deadline: Option<Instant>) {
        self.empty = self.empty.saturating_add(1);
        if self.empty <= WAIT_SPINS {
            std::hint::spin_loop();
        } else if self.empty <= 2 * WAIT_SPINS {
            std::thread::yield_now();
        } else {
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            std::thread::sleep(self.sleep.min(left));
            self.sleep = (self.sleep * 2).min(WAIT_SLEEP_MAX);
        }
    }
}

/// The loop of [`CompletionQueue::wait`]: fills `out` until `min`
/// completions came or `deadline` passed; how many came.
fn wait_loop(
    steps: &mut impl WaitSteps,
    out: &mut [WorkCompletion],
    min: usize,
    deadline: Option<Instant>,
) -> Result<usize> {
    if min > out.len() {
        return Err(Error::invalid(
            "CompletionQueue::wait",
            format!(
                "min {min} is more than the {} completions `out` holds",
                out.len()
            ),
        ));
    }
    let mut filled = 0;
    let mut backoff = Backoff::new();
    loop {
        filled += steps.poll(&mut out[filled..])?;
        if filled >= min || past(deadline) {
            return Ok(filled);
        }
        if steps.arm()? {
            // A completion that came before the arm raises no event.
            filled += steps.poll(&mut out[filled..])?;
            if filled >= min {
                return Ok(filled);
            }
            if !steps.sleep(deadline)? {
                // Timed out: what came at the last moment still counts.
                filled += steps.poll(&mut out[filled..])?;
                return Ok(filled);
            }
        } else {
            backoff.pause(deadline);
        }
    }
}

#[cfg(test)]
mod wait_tests {
    use super::*;

    /// What a fake wait did, in order.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Step {
        /// A poll, and how many it returned.
        Poll(usize),
        Arm,
        /// A sleep on the channel, and whether an event woke it.
        Sleep(bool),
    }

    /// A queue whose completions come at given times after the start
    /// (`wr_id` numbering them), with or without a channel; a sleep on the
    /// channel ends at the next completion's time or at the deadline.
    struct Fake {
        start: Instant,
        arrivals: Vec<Duration>,
        taken: usize,
        channel: bool,
        armed: bool,
        log: Vec<Step>,
    }

    impl Fake {
        fn new(channel: bool, arrivals: &[u64]) -> Fake {
            Fake {
                start: Instant::now(),
                arrivals: arrivals
                    .iter()
                    .map(|&ms| Duration::from_millis(ms))
                    .collect(),
                taken: 0,
                channel,
                armed: false,
                log: Vec::new(),
            }
        }

        fn arrived(&self) -> usize {
            let now = self.start.elapsed();
            self.arrivals.iter().filter(|&&t| t <= now).count()
        }
    }

    impl WaitSteps for Fake {
        fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize> {
            let n = (self.arrived() - self.taken).min(out.len());
            for wc in &mut out[..n] {
                self.taken += 1;
                wc.0.wr_id = self.taken as u64;
            }
            self.log.push(Step::Poll(n));
            Ok(n)
        }

        fn arm(&mut self) -> Result<bool> {
            if self.channel {
                self.armed = true;
                self.log.push(Step::Arm);
            }
            Ok(self.channel)
        }

        fn sleep(&mut self, deadline: Option<Instant>) -> Result<bool> {
            assert!(self.armed, "slept on a queue that was not armed");
            let next = self.arrivals.get(self.taken).map(|&t| self.start + t);
            let woken = match (next, deadline) {
                (Some(n), Some(d)) => n <= d,
                (Some(_), None) => true,
                (None, _) => false,
            };
            let until = if woken { next } else { deadline };
            let until = until.expect("a sleep with neither an event nor a deadline");
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
            self.armed = !woken;
            self.log.push(Step::Sleep(woken));
            Ok(woken)
        }
    }

    fn deadline(ms: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(ms))
    }

    #[test]
    fn a_wait_with_a_channel_polls_arms_polls_sleeps_and_polls_again() {
        let mut cq = Fake::new(true, &[20, 20, 40]);
        let mut out = [WorkCompletion::ZERO; 8];
        let n = wait_loop(&mut cq, &mut out, 3, deadline(5_000)).unwrap();
        assert_eq!(n, 3);
        let ids: Vec<u64> = out[..n].iter().map(|w| w.wr_id()).collect();
        assert_eq!(ids, [1, 2, 3]);
        use Step::*;
        assert_eq!(
            cq.log,
            [
                Poll(0),
                Arm,
                Poll(0),
                Sleep(true),
                Poll(2),
                Arm,
                Poll(0),
                Sleep(true),
                Poll(1)
            ]
        );
    }

    #[test]
    fn a_completion_before_the_arm_is_found_by_the_poll_after_it() {
        /// A queue whose one completion lands as it is armed: it raises
        /// no event, so a wait that slept now would sleep for ever.
        struct Late(Fake);
        impl WaitSteps for Late {
            fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize> {
                self.0.poll(out)
            }
            fn arm(&mut self) -> Result<bool> {
                self.0.arrivals.push(self.0.start.elapsed());
                self.0.arm()
            }
            fn sleep(&mut self, _: Option<Instant>) -> Result<bool> {
                panic!("slept although a completion was waiting");
            }
        }
        let mut late = Late(Fake::new(true, &[]));
        let mut out = [WorkCompletion::ZERO; 1];
        assert_eq!(wait_loop(&mut late, &mut out, 1, None).unwrap(), 1);
        assert_eq!(late.0.log, [Step::Poll(0), Step::Arm, Step::Poll(1)]);
    }

    #[test]
    fn a_timeout_returns_what_came_before_it_and_does_not_hang() {
        for channel in [true, false] {
            let mut cq = Fake::new(channel, &[10, 5_000]);
            let mut out = [WorkCompletion::ZERO; 4];
            let start = Instant::now();
            let n = wait_loop(&mut cq, &mut out, 2, deadline(100)).unwrap();
            let took = start.elapsed();
            assert_eq!(n, 1, "channel {channel}: {:?}", cq.log);
            assert_eq!(out[0].wr_id(), 1);
            assert!(took >= Duration::from_millis(100), "{took:?}");
            // A hang guard only: the host's load may stretch the 100 ms.
            assert!(
                took < Duration::from_secs(30),
                "channel {channel}: {took:?}"
            );
            if channel {
                assert_eq!(cq.log.last(), Some(&Step::Poll(0)));
                assert!(cq.log.contains(&Step::Sleep(false)));
            } else {
                assert!(!cq
                    .log
                    .iter()
                    .any(|s| matches!(s, Step::Arm | Step::Sleep(_))));
            }
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "counts polls per real time; Miri's clock runs with the instructions executed"
    )]
    fn without_a_channel_the_polls_back_off_to_sleeps() {
        let mut cq = Fake::new(false, &[300]);
        let mut out = [WorkCompletion::ZERO; 1];
        let cpu_before = thread_cpu_time();
        let n = wait_loop(&mut cq, &mut out, 1, None).unwrap();
        let cpu = thread_cpu_time() - cpu_before;
        assert_eq!(n, 1);
        // 300 ms of spinning would be millions of polls; the spins, the
        // yields and then sleeps of at least 10 µs (up to 1 ms) leave at
        // most 2 * WAIT_SPINS + 300 ms / 10 µs polls, and in practice far
        // fewer. A loaded host makes them fewer still (the completion's
        // 300 ms may pass during the spins and yields), never more.
        let polls = cq.log.len();
        assert!(polls >= 2, "{polls} polls");
        assert!(polls < 2 * WAIT_SPINS as usize + 30_000, "{polls} polls");
        // The thread slept for most of the 300 ms: its own CPU time, which
        // the host's load does not stretch, is a small part of them.
        assert!(
            cpu < Duration::from_millis(100),
            "{cpu:?} of CPU in {polls} polls"
        );
    }

    /// The CPU time the calling thread has used.
    fn thread_cpu_time() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call's duration;
        // CLOCK_THREAD_CPUTIME_ID is always available on Linux.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    #[test]
    fn a_zero_timeout_or_min_polls_once() {
        for (min, ms) in [(1, 0), (0, 5_000)] {
            let mut cq = Fake::new(true, &[1_000]);
            let mut out = [WorkCompletion::ZERO; 2];
            assert_eq!(wait_loop(&mut cq, &mut out, min, deadline(ms)).unwrap(), 0);
            assert_eq!(cq.log, [Step::Poll(0)]);
        }
        // More than asked for comes back, up to the room there is.
        let mut cq = Fake::new(false, &[0, 0, 0]);
        let mut out = [WorkCompletion::ZERO; 2];
        assert_eq!(wait_loop(&mut cq, &mut out, 1, deadline(0)).unwrap(), 2);
    }

    #[test]
    fn min_beyond_the_storage_is_einval() {
        let mut cq = Fake::new(false, &[0]);
        let mut out = [WorkCompletion::ZERO; 2];
        let e = wait_loop(&mut cq, &mut out, 3, None).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert_eq!(e.verb(), "CompletionQueue::wait");
        assert!(cq.log.is_empty());
    }
}
