//! The connection manager on tokio: many ids on one event channel, each
//! event routed to its own id, `connect(addr).await` and a listener.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

use super::id::event_error;
use super::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use crate::{Error, Result};

/// An event routed to an id; a connect request brings the new id and its route.
struct Routed {
    event: CmEvent,
    new: Option<(CmId, UnboundedReceiver<Routed>)>,
}

type Routes = Mutex<HashMap<usize, UnboundedSender<Routed>>>;

struct Shared {
    channel: EventChannel,
    routes: Routes,
}

/// Aborts the router task when the last handle goes.
struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An event channel served by a router task: the entry point of async CM use.
///
/// Cloning shares it; every id created from it keeps the router running.
#[derive(Clone)]
pub struct AsyncCm {
    shared: Arc<Shared>,
    _task: Arc<Task>,
}

struct ChannelFd(EventChannel);

impl AsRawFd for ChannelFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

fn lock(routes: &Routes) -> std::sync::MutexGuard<'_, HashMap<usize, UnboundedSender<Routed>>> {
    // A poisoned map is still a valid map: routing goes on.
    routes.lock().unwrap_or_else(|p| p.into_inner())
}

impl AsyncCm {
    /// Creates the channel and starts its router. Must be called inside a
    /// tokio runtime.
    pub fn new() -> Result<AsyncCm> {
        let channel = EventChannel::new()?;
        channel.set_nonblocking(true)?;
        // SAFETY: the channel's fd stays open, and the same, as long as the
        // ChannelFd (which holds a handle to the channel) lives.
        let fd = unsafe {
            AsyncFd::register_with_interest(ChannelFd(channel.clone()), Interest::READABLE)
        }
        .map_err(|e| {
            Error::new(
                "AsyncFd::register",
                std::io::Error::from(e).raw_os_error().unwrap_or(libc::EIO),
            )
        })?;
        let shared = Arc::new(Shared {
            channel,
            routes: Mutex::new(HashMap::new()),
        });
        let task = tokio::spawn(route_events(fd, Arc::clone(&shared)));
        Ok(AsyncCm {
            shared,
            _task: Arc::new(Task(task)),
        })
    }

    /// A new id on the channel, with its own event queue.
    pub fn create_id(&self, port_space: PortSpace) -> Result<AsyncCmId> {
        let id = CmId::new(&self.shared.channel, port_space)?;
        let rx = self.register(&id);
        Ok(AsyncCmId {
            id: Some(id),
            rx,
            cm: self.clone(),
        })
    }

    fn register(&self, id: &CmId) -> UnboundedReceiver<Routed> {
        let (tx, rx) = unbounded_channel();
        lock(&self.shared.routes).insert(id.as_raw() as usize, tx);
        rx
    }

    /// Resolves `dst`, lets `setup` create the id's QP (on `id.context()`),
    /// connects with `param` and waits until the connection is established.
    /// Each CM step may take up to `timeout`.
    ///
    /// Dropping the future at any point destroys the id and leaks nothing;
    /// the channel stays usable.
    pub async fn connect(
        &self,
        dst: SocketAddr,
        timeout: Duration,
        param: &ConnParam,
        setup: impl FnOnce(&mut CmId) -> Result<()>,
    ) -> Result<(AsyncCmId, CmEvent)> {
        let mut id = self.create_id(PortSpace::Tcp)?;
        id.id().resolve_addr(None, dst, timeout)?;
        id.expect(CmEventKind::AddrResolved, timeout).await?;
        id.id().resolve_route(timeout)?;
        id.expect(CmEventKind::RouteResolved, timeout).await?;
        setup(id.id_mut())?;
        id.id().connect(param)?;
        let est = id.expect(CmEventKind::Established, timeout).await?;
        Ok((id, est))
    }

    /// Binds to `addr` and listens.
    pub fn listen(&self, addr: SocketAddr, backlog: i32) -> Result<Listener> {
        let id = self.create_id(PortSpace::Tcp)?;
        id.id().bind(addr)?;
        id.id().listen(backlog)?;
        Ok(Listener { id })
    }
}

async fn route_events(fd: AsyncFd<ChannelFd>, shared: Arc<Shared>) {
    loop {
        let Ok(mut guard) = fd.readable().await else {
            return;
        };
        loop {
            match shared.channel.get_event() {
                Ok(Some(mut event)) => {
                    let target = if event.kind == CmEventKind::ConnectRequest {
                        event.raw_listen_id()
                    } else {
                        event.raw_id()
                    };
                    let new = event.take_new_id().map(|id| {
                        // Route the new id's events from the start.
                        let (tx, rx) = unbounded_channel();
                        lock(&shared.routes).insert(id.as_raw() as usize, tx);
                        (id, rx)
                    });
                    let tx = lock(&shared.routes).get(&(target as usize)).cloned();
                    if let Some(tx) = tx {
                        // A closed receiver means the id is being dropped.
                        let _ = tx.send(Routed { event, new });
                    }
                }
                Ok(None) => {
                    guard.clear_ready();
                    break;
                }
                // A read error leaves the channel as it was: wait again.
                Err(_) => {
                    guard.clear_ready();
                    break;
                }
            }
        }
    }
}

/// A CM id whose events arrive through its [`AsyncCm`]'s router.
pub struct AsyncCmId {
    id: Option<CmId>,
    rx: UnboundedReceiver<Routed>,
    cm: AsyncCm,
}

impl AsyncCmId {
    /// The id, for the synchronous calls (bind, create_qp, qp, ...).
    pub fn id(&self) -> &CmId {
        self.id.as_ref().expect("present until drop")
    }

    /// The id, mutably (to create its QP).
    pub fn id_mut(&mut self) -> &mut CmId {
        self.id.as_mut().expect("present until drop")
    }

    async fn next_routed(&mut self) -> Result<Routed> {
        self.rx.recv().await.ok_or_else(|| {
            Error::new("rdma_get_cm_event", libc::EPIPE).with_hint("the event router stopped")
        })
    }

    /// The next event of this id.
    pub async fn next_event(&mut self) -> Result<CmEvent> {
        Ok(self.next_routed().await?.event)
    }

    /// Waits up to `timeout` for an event of `kind`; another event is an
    /// error that names it.
    pub async fn expect(&mut self, kind: CmEventKind, timeout: Duration) -> Result<CmEvent> {
        let ev = tokio::time::timeout(timeout, self.next_event())
            .await
            .map_err(|_| {
                Error::new("rdma_get_cm_event", libc::ETIMEDOUT)
                    .with_hint(format!("no {kind:?} within {timeout:?}"))
            })??;
        if ev.kind == kind {
            Ok(ev)
        } else {
            Err(event_error("rdma_get_cm_event", &ev, kind))
        }
    }

    /// Disconnects and waits (up to `timeout`) for the `Disconnected` event.
    pub async fn disconnect(&mut self, timeout: Duration) -> Result<()> {
        self.id().disconnect()?;
        self.expect(CmEventKind::Disconnected, timeout)
            .await
            .map(|_| ())
    }
}

impl Drop for AsyncCmId {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            lock(&self.cm.shared.routes).remove(&(id.as_raw() as usize));
            // New ids of connect requests still queued are dropped (and so
            // destroyed) with the receiver.
            self.rx.close();
            drop(id);
        }
    }
}

/// A listening id; its incoming connect requests arrive in order.
pub struct Listener {
    id: AsyncCmId,
}

impl Listener {
    /// The bound address (with the port the system chose for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.id().local_addr()
    }

    /// The next connect request.
    pub async fn accept(&mut self) -> Result<ConnectRequest> {
        loop {
            let routed = self.id.next_routed().await?;
            if let Some((id, rx)) = routed.new {
                let private_data = routed.event.private_data().to_vec();
                let param = routed.event.conn.clone().unwrap_or_default();
                return Ok(ConnectRequest {
                    id: AsyncCmId {
                        id: Some(id),
                        rx,
                        cm: self.id.cm.clone(),
                    },
                    private_data,
                    param,
                });
            }
            // Other events of a listener (device removal, ...) are skipped.
        }
    }
}

/// An incoming connection request: create the QP on [`id_mut`](Self::id_mut),
/// then accept or reject.
pub struct ConnectRequest {
    id: AsyncCmId,
    /// The private data of the request.
    pub private_data: Vec<u8>,
    /// The requester's parameters.
    pub param: ConnParam,
}

impl ConnectRequest {
    /// The new id (to create its QP with `create_qp`).
    pub fn id_mut(&mut self) -> &mut CmId {
        self.id.id_mut()
    }

    /// Accepts and waits (up to `timeout`) until the connection is established.
    pub async fn accept(mut self, param: &ConnParam, timeout: Duration) -> Result<AsyncCmId> {
        self.id.id().accept(param)?;
        self.id.expect(CmEventKind::Established, timeout).await?;
        Ok(self.id)
    }

    /// Rejects with private data.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        self.id.id().reject(private_data)
    }
}
