//! The listener: [`RdmaListener`] and the task that accepts in the
//! background.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::cm::{AsyncCm, Listener};

use super::engine::Mode;
use super::error::io_err;
use super::handshake::Announce;
use super::setup::{conn_param, start, Resources};
use super::shared::Shared;
use super::{RdmaStream, StreamConfig, StreamConfigError, CONNECT_TIMEOUT};

// ------------------------------------------------------------ listener

/// Connections a listener sets up ahead of [`RdmaListener::accept`]: its
/// backlog of accepted connections (and of those being accepted).
pub const BACKLOG: usize = 16;

/// A connection made and not handed out yet: dropping it closes it, as
/// dropping a stream does.
pub(super) struct Conn(Option<Arc<Shared>>);

impl Conn {
    pub(super) fn take(mut self) -> Arc<Shared> {
        self.0.take().expect("taken once")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            let mut st = shared.lock();
            st.reader_gone = true;
            st.writer_gone = true;
            st.shutdown = true;
            drop(st);
            shared.poke();
        }
    }
}

/// What the accept task hands to [`RdmaListener::accept`]: a connection
/// and its peer, with the backlog place it holds, or an error.
pub(super) type Accepted = io::Result<(Conn, SocketAddr, OwnedSemaphorePermit)>;

/// A listening CM id that accepts RDMA streams.
///
/// A task on the runtime that bound it accepts requests in the
/// background, one at a time, up to [`BACKLOG`] ahead of
/// [`accept`](Self::accept) (as a TCP backlog): each is set up (PD, CQ,
/// QP, buffers), accepted and started, and waits in a queue. Further requests wait in the CM's own
/// queue until there is room, and fail at their requester if that takes
/// longer than its connect timeout. Dropping the listener stops the task
/// and closes the connections still queued.
pub struct RdmaListener {
    rx: mpsc::UnboundedReceiver<Accepted>,
    local: Option<SocketAddr>,
    task: tokio::task::AbortHandle,
}

impl RdmaListener {
    /// Binds to `addr` (port 0: the system chooses) and listens. Must be
    /// called inside a tokio runtime, which runs the accept task and the
    /// drivers of the streams accepted.
    pub fn bind(addr: SocketAddr) -> io::Result<RdmaListener> {
        RdmaListener::bind_mode(addr, Mode::Stream, StreamConfig::new())
    }

    /// [`bind`](Self::bind) with the buffers and busy-poll time of
    /// `config` for every stream it accepts (each requester may use
    /// others: each side learns the other's receive buffers at set-up).
    /// A request the device cannot serve with `config`, or whose private
    /// data is not a stream's (another program, another version), is
    /// rejected, and [`accept`](Self::accept) returns its error
    /// (`InvalidInput` or `InvalidData`, carrying a
    /// [`StreamConfigError`](super::StreamConfigError)); the listener
    /// goes on.
    pub fn bind_with(addr: SocketAddr, config: StreamConfig) -> io::Result<RdmaListener> {
        RdmaListener::bind_mode(addr, Mode::Stream, config)
    }

    /// [`bind`](Self::bind) for connections of `mode`.
    pub(super) fn bind_mode(
        addr: SocketAddr,
        mode: Mode,
        config: StreamConfig,
    ) -> io::Result<RdmaListener> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other(
                "RdmaListener::bind must be called inside a tokio runtime",
            ));
        }
        let cm = AsyncCm::new().map_err(io_err)?;
        let listener = cm.listen(addr, 128).map_err(io_err)?;
        let local = listener.local_addr();
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(accept_task(cm, listener, mode, config, tx)).abort_handle();
        Ok(RdmaListener { rx, local, task })
    }

    /// The bound address, with the port the system chose.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.local.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, "the listener has no address")
        })
    }

    /// Waits for the next connection accepted in the background and
    /// returns the stream and the peer's address.
    ///
    /// An error concerns one request (its set-up failed, or its
    /// requester went away: the listener may be used again) or the
    /// listener (its event router stopped: every later call fails too).
    ///
    /// Cancellation-safe: a connection is taken from the queue only when
    /// this returns it; one accepted while no call waits stays queued.
    pub async fn accept(&mut self) -> io::Result<(RdmaStream, SocketAddr)> {
        let (shared, peer) = self.accept_shared().await?;
        Ok((RdmaStream::from_shared(shared), peer))
    }

    /// The next connection, of the listener's mode.
    pub(super) async fn accept_shared(&mut self) -> io::Result<(Arc<Shared>, SocketAddr)> {
        match self.rx.recv().await {
            Some(Ok((conn, peer, _permit))) => Ok((conn.take(), peer)),
            Some(Err(e)) => Err(e),
            None => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the RDMA listener's accept task stopped",
            )),
        }
    }
}

impl Drop for RdmaListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts requests while the listener lives, one at a time (as
/// [`RdmaListener::accept`] did when it ran them itself), each holding one
/// of [`BACKLOG`] places until it is handed out.
pub(super) async fn accept_task(
    _cm: AsyncCm,
    mut listener: Listener,
    mode: Mode,
    config: StreamConfig,
    tx: mpsc::UnboundedSender<Accepted>,
) {
    let places = Arc::new(Semaphore::new(BACKLOG));
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&places).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = tx.closed() => return,
        };
        let req = tokio::select! {
            r = listener.accept() => r,
            _ = tx.closed() => return,
        };
        let mut req = match req {
            Ok(req) => req,
            Err(e) => {
                // The event router stopped: the listener is over.
                let _ = tx.send(Err(io_err(e)));
                return;
            }
        };
        let accepted = async {
            let peer = req.id().peer_addr();
            // A request that is not a stream's, or that this side cannot
            // serve, is refused at once: the requester learns it.
            let setup = Announce::from_bytes(&req.private_data)
                .map_err(StreamConfigError::into_io)
                .and_then(|a| Ok((a, Resources::new(req.id_mut(), &config)?)));
            let (announced, res) = match setup {
                Ok(setup) => setup,
                Err(e) => {
                    let _ = req.reject(&[]);
                    return Err(e);
                }
            };
            let (id, _) = req
                .accept(&conn_param(&config), CONNECT_TIMEOUT)
                .await
                .map_err(io_err)?;
            let conn = Conn(Some(start(id, res, mode, &config, announced)?));
            let peer = peer
                .or(conn.0.as_ref().and_then(|s| s.peer))
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::NotConnected, "the request has no address")
                })?;
            Ok((conn, peer, permit))
        };
        let accepted = tokio::select! {
            a = accepted => a,
            _ = tx.closed() => return,
        };
        // A listener gone: the connection closes as it drops.
        if tx.send(accepted).is_err() {
            return;
        }
    }
}

impl std::fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaListener")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}
