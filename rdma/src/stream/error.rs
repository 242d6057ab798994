//! The `io::Error`s of the stream, and why a connection ended ([`Ended`]).

use std::io;

/// Why the connection ended, for the halves.
#[derive(Debug, Clone)]
pub(super) enum Ended {
    /// The peer disconnected (or its QP failed) without a FIN for data
    /// still expected.
    PeerGone,
    /// A local failure: the error's kind and text.
    Failed(io::ErrorKind, String),
}

pub(super) fn io_err(e: crate::Error) -> io::Error {
    let kind = io::Error::from_raw_os_error(e.errno()).kind();
    io::Error::new(kind, e)
}

pub(super) fn ended_error(why: &Ended, writing: bool) -> io::Error {
    match why {
        Ended::PeerGone if writing => io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the RDMA stream's peer disconnected",
        ),
        Ended::PeerGone => io::Error::new(
            io::ErrorKind::ConnectionReset,
            "the RDMA stream's peer disconnected before its end of stream",
        ),
        Ended::Failed(kind, text) => io::Error::new(*kind, text.clone()),
    }
}

/// [`Core::qp`](super::engine::Core::qp)'s error (the core is made with a QP, which the id holds
/// until it goes).
#[cold]
#[inline(never)]
pub(super) fn no_qp() -> io::Error {
    io::Error::other("the CM id has no QP")
}

/// The error of a one-sided request that the connection's end cut short.
pub(super) fn aborted(read: bool, iwarp: bool) -> io::Error {
    let what = if read { "RDMA READ" } else { "RDMA WRITE" };
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        if iwarp {
            format!(
                "{what}: the connection ended before the request was done (on iWARP a request \
                 the peer refuses, for a bad rkey, a range out of its region or a missing \
                 right, ends the connection this way)"
            )
        } else {
            format!("{what}: the connection ended before the request was done")
        },
    )
}

/// An error of the same kind and text (`io::Error` is not `Clone`).
pub(super) fn copy_err(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

pub(super) fn protocol(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("RDMA stream protocol violation by the peer: {what}"),
    )
}
