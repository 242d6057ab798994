//! The one error type of the crate.

use std::io;

/// An rdma-core call failed: which verb, with which errno, and a hint at the
/// usual cause where one is known.
#[derive(Debug, thiserror::Error)]
#[error("{verb} failed: {source}{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
pub struct Error {
    /// The C function that failed (`ibv_open_device`).
    pub verb: &'static str,
    /// The OS error it reported.
    #[source]
    pub source: io::Error,
    /// The usual cause of this errno for this verb, when known.
    pub hint: Option<&'static str>,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `verb` with `errno`.
    pub fn new(verb: &'static str, errno: i32) -> Error {
        Error {
            verb,
            source: io::Error::from_raw_os_error(errno),
            hint: hint(verb, errno),
        }
    }

    /// An error of `verb` with the calling thread's errno.
    pub fn last(verb: &'static str) -> Error {
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        Error::new(verb, errno)
    }

    /// An error of `verb` from a C return code: an errno value, or -1 with
    /// errno set (libibverbs uses both conventions).
    pub fn from_rc(verb: &'static str, rc: i32) -> Error {
        if rc == -1 {
            Error::last(verb)
        } else {
            Error::new(verb, rc.abs())
        }
    }

    /// The errno value.
    pub fn errno(&self) -> i32 {
        self.source.raw_os_error().unwrap_or(0)
    }
}

fn hint(verb: &str, errno: i32) -> Option<&'static str> {
    match (verb, errno) {
        (_, libc::EPERM) | (_, libc::EACCES) => {
            Some("RDMA devices need access to /dev/infiniband: run as root or join the rdma group")
        }
        ("ibv_reg_mr", libc::ENOMEM) => {
            Some("the locked-memory limit is too low: raise it with `ulimit -l` or in limits.conf")
        }
        ("ibv_query_port", libc::EINVAL) => {
            Some("the port number is 0 or past the device's last port")
        }
        ("ibv_query_gid" | "ibv_query_gid_ex", libc::EINVAL | libc::ENODATA) => {
            Some("no GID at that index of the port's GID table")
        }
        (_, libc::EOPNOTSUPP) => Some("the provider does not support this operation"),
        _ => None,
    }
}
