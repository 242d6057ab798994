//! The few operating-system helpers every module uses: a file
//! descriptor's blocking mode, the one wait for a readable fd, and locks
//! that outlive a panic. Built on [`crate::error`], which imports nothing
//! from here.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) use crate::error::errno;
use crate::error::{Error, Result};

/// Sets or clears `O_NONBLOCK` on `fd`; the error carries fcntl's errno.
pub(crate) fn set_nonblocking(fd: RawFd, nonblocking: bool) -> Result<()> {
    // SAFETY: F_GETFL and F_SETFL read and change only the flags of the
    // descriptor; an fd that is not open fails with EBADF, nothing else.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(Error::last("fcntl"));
    }
    let flags = if nonblocking {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(Error::last("fcntl"));
    }
    Ok(())
}

/// The longest wait of one poll(2), in milliseconds: ibsim's umad2sim (an
/// LD_PRELOAD shim over poll) multiplies the timeout by 1000 in an `int`,
/// so a longer one would wrap (to a wait of microseconds, or of hours). A
/// wait with more time left polls again; some 24 days apart, that costs
/// nothing anywhere else.
const MAX_POLL_MS: i32 = i32::MAX / 1000;

/// `left` in whole milliseconds for poll(2), rounded up (a wait rounded
/// down would wake before the deadline and poll again with 0: a spin), at
/// most [`MAX_POLL_MS`]; -1 (forever) for `None`.
fn poll_ms(left: Option<Duration>) -> i32 {
    match left {
        None => -1,
        Some(l) => l.as_nanos().div_ceil(1_000_000).min(MAX_POLL_MS as u128) as i32,
    }
}

/// Waits until `fd` is ready to read or `timeout` has passed (`None`, or a
/// timeout too long for an [`Instant`]: forever); whether it is ready.
///
/// The one poll(2) wait of the crate. Each poll waits for the time left
/// until a deadline taken on the monotonic clock at the call, rounded up
/// to whole milliseconds, so that it never returns before the timeout and
/// never spins on a wait shorter than a millisecond. A poll interrupted by
/// a signal (`EINTR`) is resumed with the time that remains, as is one
/// that returned early. `Some(Duration::ZERO)` polls once without waiting.
/// "Ready" is what poll(2) says: `POLLIN`, or an error or hang-up, on
/// which a read does not block either.
pub(crate) fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> Result<bool> {
    Ok(poll_readable(fd, timeout)? != 0)
}

/// As [`wait_readable`], with the events poll(2) reported (`revents`:
/// `POLLIN`, `POLLERR`, `POLLHUP`, `POLLNVAL`); 0 when the timeout passed.
pub(crate) fn poll_readable(fd: RawFd, timeout: Option<Duration>) -> Result<libc::c_short> {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    poll_until(fd, deadline, |pfd, ms| {
        // SAFETY: one valid pollfd, writable for the call.
        unsafe { libc::poll(pfd, 1, ms) }
    })
}

/// The loop of [`poll_readable`] until `deadline`, over `poll` (poll(2) of
/// one pollfd with a timeout in milliseconds; a unit test's stand-in).
fn poll_until(
    fd: RawFd,
    deadline: Option<Instant>,
    mut poll: impl FnMut(&mut libc::pollfd, i32) -> i32,
) -> Result<libc::c_short> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        let ms = poll_ms(deadline.map(|d| d.saturating_duration_since(Instant::now())));
        let n = poll(&mut pfd, ms);
        if n > 0 {
            return Ok(pfd.revents);
        }
        if n < 0 {
            let e = errno();
            if e != libc::EINTR {
                return Err(Error::new("poll", e));
            }
        } else if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(0);
        }
        // Interrupted, or woken before the deadline (a wait capped at
        // MAX_POLL_MS): again, with the time that remains.
    }
}

/// Locks `m`, taking the data as it is when a holder panicked: every
/// lock of this crate guards state that each step leaves consistent.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An `io::Error` from tokio or std as this crate's error of `verb`.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) fn io_error(verb: &'static str, e: std::io::Error) -> Error {
    Error::new(verb, e.raw_os_error().unwrap_or(libc::EIO))
}

/// An owner of an fd, seen as that fd, for `tokio::io::unix::AsyncFd`,
/// which needs an `AsRawFd` value: keeping the owner inside keeps the fd
/// open for as long as the registration lives.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) struct FdOwner<T>(pub(crate) T);

impl<T: AsRawFd> AsRawFd for FdOwner<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The static string a C library's `*_str` helper returned (rdma-core's
/// return a string constant for every value, "unknown" and the like for
/// values they do not know).
///
/// # Safety
///
/// `p` is NULL or points to a NUL-terminated string that lives for the
/// whole process (a string constant of the library).
pub(crate) unsafe fn static_c_str(p: *const std::ffi::c_char) -> &'static str {
    if p.is_null() {
        return "unknown";
    }
    // SAFETY: per the caller, a NUL-terminated string that lives forever.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_str()
        .unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonblocking_is_set_and_cleared() {
        let mut sv = [0; 2];
        // SAFETY: socketpair writes two fds into `sv`.
        assert_eq!(
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) },
            0
        );
        // SAFETY: F_GETFL on the fd just made.
        let fl = || unsafe { libc::fcntl(sv[0], libc::F_GETFL) } & libc::O_NONBLOCK;
        set_nonblocking(sv[0], true).unwrap();
        assert_ne!(fl(), 0);
        set_nonblocking(sv[0], false).unwrap();
        assert_eq!(fl(), 0);
        // SAFETY: both fds are ours and closed once.
        unsafe {
            libc::close(sv[0]);
            libc::close(sv[1]);
        }
        // -1 is never an open fd (a closed number may be reused by another
        // test meanwhile).
        assert_eq!(set_nonblocking(-1, true).unwrap_err().errno(), libc::EBADF);
    }

    /// A pipe: (read end, write end), closed on drop.
    struct Pipe([RawFd; 2]);

    impl Pipe {
        fn new() -> Pipe {
            let mut fds = [0; 2];
            // SAFETY: `fds` is two writable ints.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            Pipe(fds)
        }

        fn write_byte(&self) {
            // SAFETY: writes one byte from a live buffer into the pipe.
            assert_eq!(
                unsafe { libc::write(self.0[1], [1u8].as_ptr().cast(), 1) },
                1
            );
        }
    }

    impl Drop for Pipe {
        fn drop(&mut self) {
            for fd in self.0 {
                // SAFETY: the pipe's own fds, closed once.
                unsafe { libc::close(fd) };
            }
        }
    }

    /// Sets the calling thread's errno.
    fn set_errno(e: i32) {
        // SAFETY: writing errno of the calling thread.
        unsafe { *libc::__errno_location() = e };
    }

    #[test]
    fn poll_timeouts_round_up_and_saturate() {
        assert_eq!(poll_ms(None), -1);
        assert_eq!(poll_ms(Some(Duration::ZERO)), 0);
        assert_eq!(poll_ms(Some(Duration::from_nanos(1))), 1);
        assert_eq!(poll_ms(Some(Duration::from_micros(1))), 1);
        assert_eq!(poll_ms(Some(Duration::from_millis(1))), 1);
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
    #[cfg_attr(miri, ignore = "calls poll(2)")]
    fn a_readable_fd_is_ready_at_once() {
        let p = Pipe::new();
        p.write_byte();
        assert!(wait_readable(p.0[0], Some(Duration::ZERO)).unwrap());
        assert!(wait_readable(p.0[0], None).unwrap());
        // A wait of an hour returns as soon as it polls.
        assert!(wait_readable(p.0[0], Some(Duration::from_secs(3600))).unwrap());
        assert!(wait_readable(p.0[0], Some(Duration::MAX)).unwrap());
        assert_eq!(
            poll_readable(p.0[0], Some(Duration::ZERO)).unwrap() & libc::POLLIN,
            libc::POLLIN
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls poll(2)")]
    fn a_wait_returns_no_sooner_than_its_timeout() {
        let p = Pipe::new();
        for t in [
            Duration::ZERO,
            Duration::from_micros(300),
            Duration::from_millis(1),
            Duration::from_micros(2500),
            Duration::from_millis(30),
        ] {
            let start = Instant::now();
            assert!(!wait_readable(p.0[0], Some(t)).unwrap());
            let took = start.elapsed();
            assert!(took >= t, "woke after {took:?} of {t:?}");
        }
    }

    #[test]
    fn a_wait_under_a_millisecond_polls_once_for_a_whole_millisecond() {
        let mut calls = Vec::new();
        let deadline = Instant::now() + Duration::from_micros(300);
        let r = poll_until(0, Some(deadline), |_, ms| {
            calls.push(ms);
            std::thread::sleep(Duration::from_millis(ms as u64));
            0
        });
        assert_eq!(r.unwrap(), 0);
        // Rounded down it would have been 0, again and again until the
        // deadline: a spin. Rounded up it is one poll of 1 ms, or, where
        // the 300 us were already gone when the loop looked (a loaded
        // host, Miri's clock), one poll of 0 past the deadline.
        assert!(
            calls == [1] || calls == [0],
            "polls of {calls:?} ms for a wait of 300 us"
        );
    }

    #[test]
    fn an_interrupted_poll_resumes_with_the_time_that_remains() {
        let mut calls = Vec::new();
        let start = Instant::now();
        let timeout = Duration::from_millis(100);
        let r = poll_until(0, Some(start + timeout), |_, ms| {
            calls.push(ms);
            if calls.len() == 1 {
                // A signal 20 ms into the wait.
                std::thread::sleep(Duration::from_millis(20));
                set_errno(libc::EINTR);
                return -1;
            }
            std::thread::sleep(Duration::from_millis(ms as u64));
            0
        });
        assert_eq!(r.unwrap(), 0);
        assert!(start.elapsed() >= timeout);
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0], 100);
        // The rest of the wait, not the whole of it again.
        assert!(calls[1] > 0 && calls[1] <= 80, "{calls:?}");

        // Interrupted past the deadline: one more poll, without waiting,
        // and no error.
        let mut calls = Vec::new();
        let r = poll_until(0, Some(Instant::now()), |_, ms| {
            calls.push(ms);
            if calls.len() == 1 {
                set_errno(libc::EINTR);
                return -1;
            }
            0
        });
        assert_eq!((r.unwrap(), &calls[..]), (0, &[0, 0][..]));

        // Interrupted while waiting forever: waits on, forever.
        let mut calls = Vec::new();
        let r = poll_until(0, None, |pfd, ms| {
            calls.push(ms);
            if calls.len() < 3 {
                set_errno(libc::EINTR);
                return -1;
            }
            pfd.revents = libc::POLLIN;
            1
        });
        assert_eq!((r.unwrap(), &calls[..]), (libc::POLLIN, &[-1, -1, -1][..]));

        // Any other failure is the caller's.
        let r = poll_until(0, None, |_, _| {
            set_errno(libc::ENOMEM);
            -1
        });
        assert_eq!(r.unwrap_err().errno(), libc::ENOMEM);
    }

    /// How many SIGUSR1 the handler of the test below took.
    static SIGNALS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    extern "C" fn count_signal(_: libc::c_int) {
        SIGNALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    #[test]
    #[cfg_attr(miri, ignore = "signals and poll(2)")]
    fn signals_during_a_wait_neither_end_it_nor_restart_it() {
        // SAFETY: sigaction is plain data; the handler only counts, which is
        // async-signal-safe; no flags, so poll(2) fails with EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = count_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
        }
        let p = Pipe::new();
        // SAFETY: the calling thread's own id.
        let me = unsafe { libc::pthread_self() };
        let timeout = Duration::from_millis(200);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let before = SIGNALS.load(std::sync::atomic::Ordering::Relaxed);
        let (ready, took) = std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..10 {
                    std::thread::sleep(Duration::from_millis(10));
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    // SAFETY: `me` is the test's thread, which lives until
                    // this scope ends, and has a handler for SIGUSR1.
                    assert_eq!(unsafe { libc::pthread_kill(me, libc::SIGUSR1) }, 0);
                }
            });
            let start = Instant::now();
            let ready = wait_readable(p.0[0], Some(timeout));
            let took = start.elapsed();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            (ready, took)
        });
        let signals = SIGNALS.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(signals > 0, "no signal arrived");
        assert!(!ready.unwrap(), "{signals} signals");
        assert!(
            took >= timeout,
            "returned after {took:?} with {signals} signals"
        );
    }

    #[test]
    fn a_lock_survives_a_panicking_holder() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("holder panics");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
