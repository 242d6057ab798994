//! The verbs' error type, and the crate's convention for errors.
//!
//! One type per kind of failure a caller handles differently; each that is
//! not [`Error`] says why it is its own:
//!
//! | type | what it reports | why it is its own |
//! |---|---|---|
//! | [`Error`] | a verbs or CM call failed, or this crate refused its arguments: the verb, the errno, a hint | the data path's: one pointer wide, so `post` and `poll` return `Ok` in registers |
//! | [`umad::Error`](crate::umad::Error) | a MAD exchange failed, the SA client's requests included | outcomes with data of their own that callers match on (the TID that timed out, the class the kernel refused, the SA's status) |
//! | [`mad::Error`](crate::mad::Error) | bytes that do not decode, a value that does not encode | pure data (`Clone`, `Eq`), no call and no errno: the codec runs without a device (fuzzers, an SM's tables) |
//! | [`mad::sa::SaError`](crate::mad::sa::SaError) | an SA response that says no (its status) or does not hold its records | a protocol answer, pure data like the codec it belongs to; [`umad::Error::Sa`](crate::umad::Error::Sa) carries it |
//! | `std::io::Error` (`rdma::stream`) | a stream's read, write or connect failed | what `AsyncRead`, `AsyncWrite` and `std::io` demand; the [`Error`] behind one is its inner error |
//!
//! The types with an errno give it as `errno() -> i32`: the OS's
//! for a failed call, and for a failure of no call the errno that names its
//! kind (`EINVAL` for refused arguments, `ETIMEDOUT` for no answer), so
//! `std::io::Error::from_raw_os_error(e.errno())` reads right. Their fields
//! are read through methods ([`Error::verb`], [`Error::hint`],
//! [`Error::io_error`]) or by matching the enum, never through `Deref`.

use std::borrow::Cow;
use std::fmt;
use std::io;

/// An rdma-core call failed, or a request was refused before reaching it:
/// which verb ([`verb`](Error::verb)), with which errno
/// ([`errno`](Error::errno), [`io_error`](Error::io_error), also the
/// [`source`](std::error::Error::source)), and the likely cause where one
/// is known ([`hint`](Error::hint)).
///
/// The details are boxed, so that an `Error` is one pointer wide and
/// `Result<()>` (and a `Result` of a slice or an integer) comes back in
/// registers: the data path (`post_send`, `poll`) returns its `Ok` without
/// touching memory.
#[derive(thiserror::Error)]
#[error(transparent)]
pub struct Error(Box<Details>);

/// What an [`Error`] says: the verb, the errno and the likely cause.
#[derive(Debug, thiserror::Error)]
#[error("{verb} failed: {source}{}", hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default())]
struct Details {
    verb: &'static str,
    #[source]
    source: io::Error,
    hint: Option<Cow<'static, str>>,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `{:?}` reads as the [`Display`](fmt::Display) line (`ibv_reg_mr
/// failed: Cannot allocate memory (os error 12) (the locked-memory limit
/// ...)`), so that `fn main() -> Result<(), rdma::Error>` and `unwrap`
/// print the clear message; `{:#?}` gives the fields (`Error { verb,
/// source, hint }`).
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            f.debug_struct("Error")
                .field("verb", &self.0.verb)
                .field("source", &self.0.source)
                .field("hint", &self.0.hint)
                .finish()
        } else {
            fmt::Display::fmt(&*self.0, f)
        }
    }
}

impl Error {
    /// An error of `verb` with `errno`.
    #[cold]
    pub fn new(verb: &'static str, errno: i32) -> Error {
        Error(Box::new(Details {
            verb,
            source: io::Error::from_raw_os_error(errno),
            hint: hint(verb, errno).map(Cow::Borrowed),
        }))
    }

    /// An error of `verb` with the calling thread's errno.
    #[cold]
    pub fn last(verb: &'static str) -> Error {
        Error::new(verb, errno())
    }

    /// An error of `verb` from a C return code: an errno value, or -1 with
    /// errno set (libibverbs uses both conventions).
    #[cold]
    pub fn from_rc(verb: &'static str, rc: i32) -> Error {
        if rc == -1 {
            Error::last(verb)
        } else {
            Error::new(verb, rc.abs())
        }
    }

    /// Arguments refused by this crate before any call: `EINVAL` with `why`.
    #[cold]
    pub fn invalid(verb: &'static str, why: impl Into<Cow<'static, str>>) -> Error {
        Error(Box::new(Details {
            verb,
            source: io::Error::from_raw_os_error(libc::EINVAL),
            hint: Some(why.into()),
        }))
    }

    /// The same error with `hint` as its explanation.
    pub fn with_hint(mut self, hint: impl Into<Cow<'static, str>>) -> Error {
        self.0.hint = Some(hint.into());
        self
    }

    /// The C function that failed (`ibv_open_device`), or the method that
    /// refused its arguments (`MemoryRegion::sge`).
    pub fn verb(&self) -> &'static str {
        self.0.verb
    }

    /// The usual cause of this errno for this verb, or what was wrong.
    pub fn hint(&self) -> Option<&str> {
        self.0.hint.as_deref()
    }

    /// The OS error (`EINVAL` for arguments refused by this crate); also
    /// the error's [`source`](std::error::Error::source).
    pub fn io_error(&self) -> &io::Error {
        &self.0.source
    }

    /// The errno: the OS's for a failed call, `EINVAL` for arguments this
    /// crate refused, as the kernel would have. Every error type of the
    /// crate with an errno gives it so, as an `i32`.
    pub fn errno(&self) -> i32 {
        self.0.source.raw_os_error().unwrap_or(libc::EIO)
    }

    /// Whether this is a timeout (`ETIMEDOUT`): of a wait of this crate
    /// ([`CompletionQueue::wait_one`](crate::CompletionQueue::wait_one), a
    /// CM event that did not come in time) or of the fabric (a CM request
    /// that got no answer).
    pub fn is_timeout(&self) -> bool {
        self.errno() == libc::ETIMEDOUT
    }

    /// Whether the peer refused the connection (`ECONNREFUSED`): nothing
    /// listens at the address and port, or the listener rejected the
    /// request. One shape on every transport: the IB CM's reject reasons
    /// (InfiniBand, RoCE) and iWARP's refused TCP connection or MPA reject
    /// all give it, with a hint that says which.
    pub fn is_refused(&self) -> bool {
        self.errno() == libc::ECONNREFUSED
    }

    /// Whether the device or its provider does not offer the operation
    /// (`EOPNOTSUPP`, or `ENOSYS` from the kernel's uverbs where the driver
    /// has no handler for the command): the same call on another device
    /// may work, and nothing was created.
    pub fn is_unsupported(&self) -> bool {
        matches!(self.errno(), libc::EOPNOTSUPP | libc::ENOSYS)
    }

    /// An error of `verb` that says, where it is a "not supported" error
    /// ([`is_unsupported`](Self::is_unsupported)), which device lacks
    /// `what`; any other error as it is.
    #[cold]
    pub(crate) fn unsupported_on(self, device: &str, what: &str) -> Error {
        if !self.is_unsupported() {
            return self;
        }
        let errno = match self.errno() {
            libc::ENOSYS => "ENOSYS",
            _ => "EOPNOTSUPP",
        };
        let hint = format!("not supported by {device}: it offers no {what} ({errno})");
        self.with_hint(hint)
    }
}

/// The calling thread's errno (`EIO` when there is none).
pub(crate) fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn hint(verb: &str, errno: i32) -> Option<&'static str> {
    match (verb, errno) {
        (_, libc::EPERM) | (_, libc::EACCES) => {
            Some("RDMA devices need access to /dev/infiniband: run as root or join the rdma group")
        }
        ("ibv_reg_mr", libc::ENOMEM) | ("ibv_reg_mr", libc::EAGAIN) => {
            Some("the locked-memory limit is probably too low: raise it with `ulimit -l` or in limits.conf")
        }
        ("ibv_query_port", libc::EINVAL) => Some("the port number is 0 or past the device's last port"),
        ("ibv_query_gid" | "ibv_query_gid_ex", libc::EINVAL | libc::ENODATA) => {
            Some("no GID at that index of the port's GID table")
        }
        ("ibv_post_send" | "ibv_post_recv" | "ibv_post_srq_recv", libc::ENOMEM) => {
            Some("the queue is full: poll completions before posting more")
        }
        ("ibv_post_send" | "ibv_post_recv", libc::EINVAL) => Some(
            "a work request is invalid for this queue pair: its state, its type, or too many SGEs",
        ),
        ("ibv_create_qp" | "ibv_create_qp_ex", libc::EINVAL) => {
            Some("the requested capabilities exceed the device's limits, or a CQ is missing")
        }
        ("ibv_create_ah", libc::EINVAL) => Some("the GID index or port does not exist"),
        (_, libc::EOPNOTSUPP) => Some("the provider does not support this operation"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_of_the_data_path_fit_in_registers() {
        use std::mem::size_of;
        assert_eq!(size_of::<Error>(), size_of::<usize>());
        assert_eq!(size_of::<Result<()>>(), size_of::<usize>());
        assert_eq!(
            size_of::<Result<&mut [crate::WorkCompletion]>>(),
            2 * size_of::<usize>()
        );
    }

    #[test]
    fn fields_read_through_the_box() {
        let e = Error::new("ibv_post_send", libc::ENOMEM);
        assert_eq!(e.verb(), "ibv_post_send");
        assert_eq!(e.io_error().raw_os_error(), Some(libc::ENOMEM));
        assert!(e.hint().unwrap().contains("queue is full"));
        let e = e.with_hint("another");
        assert_eq!(e.hint(), Some("another"));
        assert!(e.to_string().ends_with(" (another)"), "{e}");
        let e = Error::invalid("x", "why");
        let dbg = format!("{e:#?}");
        assert!(dbg.starts_with("Error {") && dbg.contains("why"), "{dbg}");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn debug_reads_as_the_message_and_alternate_debug_gives_the_fields() {
        let e = Error::new("ibv_reg_mr", libc::ENOMEM);
        // What `fn main() -> Result<(), rdma::Error>` prints after "Error: ".
        assert_eq!(format!("{e:?}"), e.to_string());
        assert!(format!("{e:?}").starts_with("ibv_reg_mr failed: "));
        assert!(format!("{:?}", Err::<(), _>(&e)).contains("ulimit -l"));
        let fields = format!("{e:#?}");
        for want in ["Error {", "verb: \"ibv_reg_mr\"", "source: ", "hint: Some("] {
            assert!(fields.contains(want), "{want:?} missing in {fields}");
        }
        assert_ne!(fields, e.to_string());
        let e = Error::invalid("MemoryRegion::sge", "range 0..9 is outside");
        assert_eq!(format!("{e:?}"), e.to_string());
        assert!(format!("{e:#?}").contains("hint: Some("));
    }

    #[test]
    fn message_names_verb_errno_and_cause() {
        let e = Error::new("ibv_reg_mr", libc::ENOMEM);
        let s = e.to_string();
        assert!(s.starts_with("ibv_reg_mr failed: "), "{s}");
        assert!(s.contains("ulimit -l"), "{s}");
        assert_eq!(e.errno(), libc::ENOMEM);

        let e = Error::invalid("MemoryRegion::sge", "range 0..9 is outside");
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(e.to_string().contains("range 0..9 is outside"));

        assert_eq!(Error::from_rc("x", 22).errno(), libc::EINVAL);
        assert!(Error::new("x", libc::ETIMEDOUT).is_timeout());
        assert!(!Error::new("x", libc::EAGAIN).is_timeout());
        assert_eq!(Error::from_rc("x", -22).errno(), libc::EINVAL);
    }
}
