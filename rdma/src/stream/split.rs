//! The halves of a stream: [`OwnedReadHalf`] (with its own busy poll,
//! [`Spin`]) and [`OwnedWriteHalf`].
//!
//! A write posts its data at once when nothing written is in flight (or
//! it filled a buffer); else the driver's next pass (or the pump after
//! the next completion) posts it, so that small writes meanwhile join the
//! buffer. In flight: a send buffer whose SEND has not completed, or more
//! than one message whose credit the peer has not returned. A write of up
//! to 64 bytes with nothing written before it still waiting or in flight
//! takes no buffer at all: the write posts it itself, inline from a copy
//! on its stack, in the call (as rsockets' `rsend` does).
//!
//! A read that finds nothing polls the CQ itself, and while the
//! connection's busy-poll time lasts it polls again (its task wakes
//! itself) rather than sleep: a message that arrives is read in the
//! reader's own task, with no hand-over from the driver's, as an rsockets
//! caller polls its own CQ. Meanwhile the driver leaves the CQ to the
//! reader and sleeps in standby (see [`super::driver::STANDBY`]). When the
//! time passes the reader sleeps, and the driver takes over.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::busy_poll::{BUSY_POLL_FOREVER, HALF_CLOCK_EVERY, HALF_DONE, HALF_POLLS, READ_POLLS};
use super::error::Ended;
use super::error::{ended_error, io_err};
use super::layout::INLINE;
use super::shared::Shared;
use super::HEADER_LEN;

/// The read half of an [`RdmaStream`](super::RdmaStream).
pub struct OwnedReadHalf {
    pub(super) shared: Arc<Shared>,
    pub(super) spin: Spin,
}

/// A reader's own busy poll while it waits for data: each poll of its
/// read polls the CQ up to [`READ_POLLS`] times and, while the
/// connection's busy-poll time ([`Shared::busy_poll`]) lasts, wakes its
/// own task to poll again, so a message that arrives is read in the
/// reader's task with no hand-over from the driver's; the driver
/// meanwhile leaves the CQ to it ([`Shared::half_polling`]). When the time
/// passes the reader sleeps and wakes the driver, which arms the CQ.
#[derive(Debug, Default)]
pub(super) struct Spin {
    /// Polls since the wait began.
    pub(super) polls: u32,
    /// When the wait's busy poll ends (set at the first look at the clock).
    pub(super) until: Option<Instant>,
    /// This wait told the driver that a half polls.
    pub(super) told: bool,
    /// The wait's last look at the clock.
    pub(super) looked: Option<Instant>,
}

/// A gap between two looks at the clock of one wait longer than this
/// shows that the read that waited was dropped or cancelled (a read that
/// keeps waiting looks every [`HALF_CLOCK_EVERY`] polls of its task,
/// microseconds apart) and that this poll is of a new read: its wait
/// starts anew, with the whole busy-poll time, rather than end at once
/// at the deadline of the read that went.
pub(super) const STALE_WAIT: Duration = Duration::from_millis(1);

impl Spin {
    /// After a poll that found nothing to read: whether the reader polls
    /// again (its task wakes itself) rather than sleep until the driver
    /// wakes it.
    pub(super) fn again(&mut self, shared: &Shared) -> bool {
        let again = self.keeps_polling(shared.busy_poll.load(Ordering::Relaxed), Instant::now);
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
    pub(super) fn reset(&mut self) {
        self.polls = 0;
        self.until = None;
        self.told = false;
        self.looked = None;
    }

    /// [`again`](Self::again)'s decision, with the connection's busy-poll
    /// time `budget` ([`Shared::busy_poll`]'s units) and the clock `now`,
    /// read every [`HALF_CLOCK_EVERY`] polls.
    pub(super) fn keeps_polling(&mut self, budget: u64, now: impl FnOnce() -> Instant) -> bool {
        match budget {
            0 => false,
            BUSY_POLL_FOREVER => true,
            us => {
                self.polls = self.polls.wrapping_add(1);
                if self.polls % HALF_CLOCK_EVERY != 0 {
                    return true;
                }
                let now = now();
                // A wait left by a read dropped or cancelled: see
                // STALE_WAIT.
                if self
                    .looked
                    .is_some_and(|t| now.saturating_duration_since(t) > STALE_WAIT)
                {
                    self.until = None;
                }
                self.looked = Some(now);
                let until = *self
                    .until
                    .get_or_insert_with(|| now + Duration::from_micros(us));
                now < until
            }
        }
    }
}

/// The write half of an [`RdmaStream`](super::RdmaStream).
pub struct OwnedWriteHalf {
    pub(super) shared: Arc<Shared>,
}

pub(super) fn addr(a: Option<SocketAddr>) -> io::Result<SocketAddr> {
    a.ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no address"))
}

impl OwnedReadHalf {
    /// Sets the connection's busy-poll time, which both halves share
    /// ([`RdmaStream::set_busy_poll`](super::RdmaStream::set_busy_poll)).
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
    /// ([`RdmaStream::set_busy_poll`](super::RdmaStream::set_busy_poll)).
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
                if let Err(e) = shared.link.mr.read(seg.at, dst) {
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
            && shared.drive_with(&mut st, |core, st| core.send_now(&shared.link, st, buf))
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
        let (layout, payload) = (&shared.link.layout, shared.link.layout.payload);
        if st.free.is_empty() && st.queued.back().is_none_or(|&(_, len)| len == payload) {
            shared.drive(&mut st, true);
        }
        let mut done = 0;
        // First into the buffer queued last, if it has room: it is not
        // posted yet.
        if let Some((slot, len)) = st.queued.back_mut() {
            let n = (payload - *len).min(buf.len());
            if n > 0 {
                if let Err(e) = shared
                    .link
                    .mr
                    .write(layout.send_at(*slot) + HEADER_LEN + *len, &buf[..n])
                {
                    return Poll::Ready(Err(io_err(e)));
                }
                *len += n;
                done = n;
            }
        }
        while done < buf.len() {
            let Some(slot) = st.free.pop() else { break };
            let n = payload.min(buf.len() - done);
            if let Err(e) = shared
                .link
                .mr
                .write(layout.send_at(slot) + HEADER_LEN, &buf[done..done + n])
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
        let full = st.queued.back().is_some_and(|&(_, len)| len == payload);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock at `us` microseconds after `t0`.
    fn at(t0: Instant, us: u64) -> impl FnOnce() -> Instant {
        move || t0 + Duration::from_micros(us)
    }

    #[test]
    fn a_waiting_read_polls_until_its_busy_poll_time_passes() {
        let t0 = Instant::now();
        let mut s = Spin::default();
        // The clock is read every HALF_CLOCK_EVERY polls: the first look
        // sets the deadline, 50 us on.
        assert!(s.keeps_polling(50, at(t0, 0)));
        assert!(s.keeps_polling(50, at(t0, 0)));
        assert_eq!(s.until, Some(t0 + Duration::from_micros(50)));
        assert!(s.keeps_polling(50, at(t0, 40)));
        assert!(s.keeps_polling(50, at(t0, 40)));
        assert!(s.keeps_polling(50, at(t0, 60)));
        assert!(!s.keeps_polling(50, at(t0, 60)));
        // No busy poll: sleep at once; forever: never look at the clock.
        assert!(!Spin::default().keeps_polling(0, || unreachable!()));
        let mut s = Spin::default();
        for _ in 0..10 {
            assert!(s.keeps_polling(BUSY_POLL_FOREVER, || unreachable!()));
        }
    }

    /// A read dropped or cancelled mid-wait leaves its Spin behind (no
    /// code of the half runs when tokio's read future is dropped): the
    /// next read's wait is a new one, with the whole busy-poll time, not
    /// one cut short at the deadline of the read that went.
    #[test]
    fn a_wait_left_by_a_dropped_read_does_not_cut_the_next_reads_short() {
        let t0 = Instant::now();
        let mut s = Spin::default();
        assert!(s.keeps_polling(50, at(t0, 0)));
        assert!(s.keeps_polling(50, at(t0, 0)));
        s.told = true;
        // The read's future is dropped here; a new read waits 5 ms later.
        let later = 5_000;
        assert!(s.keeps_polling(50, at(t0, later)));
        assert!(
            s.keeps_polling(50, at(t0, later)),
            "the new read's wait ended at the old read's deadline"
        );
        assert_eq!(s.until, Some(t0 + Duration::from_micros(later + 50)));
        // Its own deadline holds: looks microseconds apart.
        assert!(s.keeps_polling(50, at(t0, later + 60)));
        assert!(!s.keeps_polling(50, at(t0, later + 60)));
        // A gap of up to STALE_WAIT is the same wait.
        let mut s = Spin::default();
        assert!(s.keeps_polling(2_000, at(t0, 0)));
        assert!(s.keeps_polling(2_000, at(t0, 0)));
        assert!(s.keeps_polling(2_000, at(t0, 1_000)));
        assert!(s.keeps_polling(2_000, at(t0, 1_000)));
        assert!(s.keeps_polling(2_000, at(t0, 2_000)));
        assert!(!s.keeps_polling(2_000, at(t0, 2_000)));
        // A reset (data came, or the wait ended) forgets everything.
        s.told = true;
        s.reset();
        assert_eq!((s.polls, s.until, s.told, s.looked), (0, None, false, None));
    }
}
