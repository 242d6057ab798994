//! The few operating-system helpers every module uses: errno, a file
//! descriptor's blocking mode, and locks that outlive a panic.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Mutex, MutexGuard};

use crate::{Error, Result};

/// The calling thread's errno (`EIO` when there is none).
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

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
