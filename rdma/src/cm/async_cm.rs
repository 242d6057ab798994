//! The connection manager on tokio: many ids on one event channel, each
//! event routed to its own id, `connect(addr).await` and a listener.
//!
//! The router task reads the channel whenever it is readable and puts each
//! event in the queue of its id, waking whoever waits there. A queue is one
//! small allocation with room for two events, made with its id; the map
//! from ids to queues is locked to create, route to and drop an id, and a
//! wait locks only its own queue.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::task::JoinHandle;

use super::event::event_error;
use super::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use crate::os::{io_error, lock, FdOwner};
use crate::{Error, Result};

/// The events of one id that have arrived (a connect request holds its new
/// id), and who waits for them.
struct Queue {
    events: VecDeque<CmEvent>,
    waker: Option<Waker>,
    /// The router has stopped: no event will come any more.
    stopped: bool,
    /// The id is being dropped: the router routes nothing here any more.
    gone: bool,
}

/// The queue of one id, shared by the id and the router.
struct Slot(Mutex<Queue>);

impl Slot {
    fn new() -> Arc<Slot> {
        Arc::new(Slot(Mutex::new(Queue {
            // Room for the events an id usually has queued: one, and one
            // that follows it (ESTABLISHED, then DISCONNECTED).
            events: VecDeque::with_capacity(2),
            waker: None,
            stopped: false,
            gone: false,
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        lock(&self.0)
    }
}

/// The queues of the ids of a channel, by raw id.
type Routes = HashMap<usize, Arc<Slot>>;

fn key(id: &CmId) -> usize {
    id.as_raw() as usize
}

struct Shared {
    channel: EventChannel,
    routes: Mutex<Routes>,
}

impl Shared {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        lock(&self.routes)
    }

    /// Makes the queue of a new id.
    fn add(&self, id: &CmId) -> Arc<Slot> {
        let slot = Slot::new();
        self.routes().insert(key(id), Arc::clone(&slot));
        slot
    }

    /// Removes the queue of `id` and takes its events, with the queues of
    /// the new ids of its connect requests: what the caller drops (and so
    /// destroys) with no lock held.
    fn remove(&self, id: usize, slot: &Slot) -> VecDeque<CmEvent> {
        let mut routes = self.routes();
        routes.remove(&id);
        let events = {
            let mut q = slot.lock();
            q.gone = true;
            std::mem::take(&mut q.events)
        };
        for new in events.iter().filter_map(|e| e.new_id.as_ref()) {
            routes.remove(&key(new));
        }
        events
    }
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

/// The event channel as the reactor's fd owner: it keeps the fd open.
type ChannelFd = FdOwner<EventChannel>;

impl AsyncCm {
    /// Creates the channel and starts its router. Must be called inside a
    /// tokio runtime.
    pub fn new() -> Result<AsyncCm> {
        let channel = EventChannel::new()?;
        channel.set_nonblocking(true)?;
        // SAFETY: the channel's fd stays open, and the same, as long as the
        // ChannelFd (which holds a handle to the channel) lives.
        let fd = unsafe {
            AsyncFd::register_with_interest(FdOwner(channel.clone()), Interest::READABLE)
        }
        .map_err(|e| io_error("AsyncFd::register", e.into()))?;
        let shared = Arc::new(Shared {
            channel,
            routes: Mutex::default(),
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
        let slot = self.shared.add(&id);
        Ok(AsyncCmId {
            id: Some(id),
            slot,
            cm: self.clone(),
            disconnected: false,
        })
    }

    /// Resolves `dst`, lets `setup` create the id's QP (on `id.context()`,
    /// which is set once the route is resolved) and whatever else the
    /// connection needs, connects with `param` and waits until the
    /// connection is established. Each CM step may take up to `timeout`.
    ///
    /// Returns the id, the `Established` event (with the private data of
    /// the peer's accept) and what `setup` returned. `setup`'s error type
    /// is the caller's own, as long as an [`Error`] converts into it; its
    /// error ends the connect and is returned as it is.
    ///
    /// The QP made in `setup` is in INIT when `setup` returns, and the CM
    /// takes it to RTR and RTS on the way to `Established`: receives may be
    /// posted in `setup`, sends once this returns.
    ///
    /// Dropping the future at any point destroys the id (and whatever
    /// `setup` made, when it had run) and leaks nothing; the channel stays
    /// usable.
    ///
    /// ```no_run
    /// # use rdma::cm::{AsyncCm, ConnParam};
    /// # use rdma::{CompletionQueue, ProtectionDomain, QpCaps, QpType};
    /// # use std::time::Duration;
    /// # async fn demo(cm: AsyncCm) -> Result<(), Box<dyn std::error::Error>> {
    /// let addr = "192.0.2.1:7471".parse()?;
    /// let (id, est, (pd, cq)) = cm
    ///     .connect(addr, Duration::from_secs(2), &ConnParam::new(), |id| {
    ///         let ctx = id.context()?;
    ///         let pd = ProtectionDomain::new(&ctx)?;
    ///         let cq = CompletionQueue::new(&ctx, 16)?;
    ///         id.create_qp(&pd, QpType::Rc, &cq, &cq, QpCaps::default())?;
    ///         Ok::<_, rdma::Error>((pd, cq))
    ///     })
    ///     .await?;
    /// println!("the server said {:?}", est.private_data());
    /// # drop((id, pd, cq)); Ok(()) }
    /// ```
    pub async fn connect<T, E: From<Error>>(
        &self,
        dst: SocketAddr,
        timeout: Duration,
        param: &ConnParam,
        setup: impl FnOnce(&mut CmId) -> std::result::Result<T, E>,
    ) -> std::result::Result<(AsyncCmId, CmEvent, T), E> {
        self.connect_from(None, dst, timeout, param, setup).await
    }

    /// [`connect`](Self::connect) from the source address `src` (which
    /// picks the local device and port; port 0 lets the system choose):
    /// `rdma_resolve_addr` with a source address.
    pub async fn connect_from<T, E: From<Error>>(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
        param: &ConnParam,
        setup: impl FnOnce(&mut CmId) -> std::result::Result<T, E>,
    ) -> std::result::Result<(AsyncCmId, CmEvent, T), E> {
        let mut id = self.create_id(PortSpace::Tcp)?;
        id.id().resolve_addr(src, dst, timeout)?;
        id.expect(CmEventKind::AddrResolved, timeout).await?;
        id.id().resolve_route(timeout)?;
        id.expect(CmEventKind::RouteResolved, timeout).await?;
        let made = setup(id.id_mut())?;
        id.id().connect(param)?;
        let est = id.expect(CmEventKind::Established, timeout).await?;
        Ok((id, est, made))
    }

    /// Binds to `addr` and listens.
    pub fn listen(&self, addr: SocketAddr, backlog: i32) -> Result<Listener> {
        let id = self.create_id(PortSpace::Tcp)?;
        id.id().bind(addr)?;
        id.id().listen(backlog)?;
        Ok(Listener { id, ended: false })
    }
}

/// Marks every queue stopped, and wakes whoever waits there, when the
/// router ends (its channel failed, or the task was aborted or its runtime
/// shut down): their waits end with an error instead of never.
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let slots: Vec<Arc<Slot>> = self.0.routes().values().cloned().collect();
        for slot in slots {
            let waker = {
                let mut q = slot.lock();
                q.stopped = true;
                q.waker.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

/// Read errors in a row after which the router gives up (a channel that
/// fails every read would otherwise keep it busy for ever).
const MAX_READ_ERRORS: u32 = 16;

/// What the router does after draining the channel.
#[derive(Debug, PartialEq, Eq)]
enum Drained {
    /// The channel is empty (EAGAIN): wait for the next edge.
    Empty,
    /// A read failed: the channel may still hold events, and no new edge
    /// may come for them; read again (after a yield).
    Failed,
}

/// Reads events until the channel is empty or a read fails, handing each
/// to `done` once acknowledged.
fn drain<T>(mut read: impl FnMut() -> Result<Option<T>>, mut done: impl FnMut(T)) -> Drained {
    loop {
        match read() {
            Ok(Some(left)) => done(left),
            Ok(None) => return Drained::Empty,
            Err(_) => return Drained::Failed,
        }
    }
}

async fn route_events(fd: AsyncFd<ChannelFd>, shared: Arc<Shared>) {
    let _stop = StopGuard(Arc::clone(&shared));
    let mut errors = 0;
    loop {
        let Ok(mut guard) = fd.readable().await else {
            return;
        };
        // Every event that is there, then wait again. Each is routed before
        // it is acknowledged, so its id cannot be destroyed (and its address
        // reused by a new id) between the read and the routing. What is
        // left of an id that is gone goes once the event is acknowledged (a
        // new id in it is destroyed).
        let read = || shared.channel.get_event_with(|e| route(&shared, e));
        match drain(read, drop) {
            // Readiness is cleared only when a read said EAGAIN: an event
            // left behind by a failed read would otherwise wait for the
            // next event's edge.
            Drained::Empty => {
                errors = 0;
                guard.clear_ready();
            }
            Drained::Failed => {
                errors += 1;
                if errors >= MAX_READ_ERRORS {
                    return;
                }
                drop(guard);
                tokio::task::yield_now().await;
            }
        }
    }
}

/// What routing leaves to drop once the event is acknowledged: dropping a
/// new id (in an event, or in the last handle of a queue) before that would
/// wait for the acknowledgement forever.
#[derive(Default)]
struct Unrouted {
    /// The event, when its id is gone.
    event: Option<CmEvent>,
    slots: [Option<Arc<Slot>>; 3],
}

/// Puts `event` in the queue of its id (a connect request: of its listener,
/// after making the queue of the new id) and wakes whoever waits there.
fn route(shared: &Shared, event: CmEvent) -> Unrouted {
    let target = if event.kind == CmEventKind::ConnectRequest {
        event.raw_listen_id()
    } else {
        event.raw_id()
    } as usize;
    let mut left = Unrouted::default();
    let slot = {
        let mut routes = shared.routes();
        let slot = routes.get(&target).cloned();
        if let (Some(new), Some(_)) = (&event.new_id, &slot) {
            // Route the new id's events from the start.
            left.slots[0] = routes.insert(key(new), Slot::new());
        }
        slot
    };
    let Some(slot) = slot else {
        left.event = Some(event);
        return left;
    };
    let pushed = {
        let mut q = slot.lock();
        if q.gone {
            Err(event)
        } else {
            q.events.push_back(event);
            Ok(q.waker.take())
        }
    };
    match pushed {
        Ok(waker) => {
            if let Some(w) = waker {
                w.wake();
            }
        }
        // The id went meanwhile, and so does the new id's queue.
        Err(event) => {
            if let Some(new) = &event.new_id {
                left.slots[1] = shared.routes().remove(&key(new));
            }
            left.event = Some(event);
        }
    }
    // When the id has gone, this may be the queue's last handle.
    left.slots[2] = Some(slot);
    left
}

fn router_stopped() -> Error {
    Error::new("rdma_get_cm_event", libc::EPIPE).with_hint("the event router stopped")
}

/// A CM id whose events arrive through its [`AsyncCm`]'s router.
pub struct AsyncCmId {
    id: Option<CmId>,
    slot: Arc<Slot>,
    cm: AsyncCm,
    /// A `Disconnected` event of this id was taken from its queue (by
    /// whoever waited for events): none will come any more.
    disconnected: bool,
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

    /// The next queued event, with its new id (of a connect request).
    fn poll_queued(&mut self, cx: &mut Context<'_>) -> Poll<Result<CmEvent>> {
        let mut q = self.slot.lock();
        if let Some(ev) = q.events.pop_front() {
            if ev.kind == CmEventKind::Disconnected {
                self.disconnected = true;
            }
            return Poll::Ready(Ok(ev));
        }
        if q.stopped {
            return Poll::Ready(Err(router_stopped()));
        }
        match &mut q.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            w => *w = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Drops the new id of a connect request (only a listener gets them)
    /// that nobody takes, with its queue.
    fn forget_new_id(&self, ev: &mut CmEvent) {
        if let Some(new) = ev.take_new_id() {
            self.cm.shared.routes().remove(&key(&new));
        }
    }

    /// The next event of this id.
    ///
    /// Cancellation-safe (a `tokio::select!` branch may drop it): an event
    /// is taken from the id's queue and returned in one step, so a dropped
    /// future has taken none.
    pub async fn next_event(&mut self) -> Result<CmEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// Polls for the next event of this id: `Pending` (and `cx` woken when
    /// one arrives) or the event. With it one task can wait on many ids at
    /// once, in a `std::future::poll_fn` that polls each id still waiting,
    /// instead of a task (or a timer) per id.
    pub fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Result<CmEvent>> {
        self.poll_queued(cx).map_ok(|mut ev| {
            self.forget_new_id(&mut ev);
            ev
        })
    }

    /// Waits up to `timeout` for an event of `kind`; another event is an
    /// error that names it (and is consumed). Cancellation-safe as
    /// [`next_event`](Self::next_event) is.
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

    /// Whether the connection is known to be gone: a `Disconnected` event
    /// of this id was taken (by [`next_event`](Self::next_event),
    /// [`poll_event`](Self::poll_event), [`expect`](Self::expect) or
    /// [`disconnect`](Self::disconnect)) or is queued.
    pub fn is_disconnected(&self) -> bool {
        self.disconnected
            || self
                .slot
                .lock()
                .events
                .iter()
                .any(|e| e.kind == CmEventKind::Disconnected)
    }

    /// Whether [`next_event`](Self::next_event) would return at once: an
    /// event of this id is queued, or the router has stopped (an error).
    /// Lets a task that polls something else in a loop see that the id
    /// needs it without awaiting the event.
    pub fn has_pending_event(&self) -> bool {
        let q = self.slot.lock();
        !q.events.is_empty() || q.stopped
    }

    /// Takes a queued `Disconnected` event (leaving the others in order);
    /// whether there was one.
    fn take_queued_disconnect(&mut self) -> bool {
        let mut q = self.slot.lock();
        let Some(at) = q
            .events
            .iter()
            .position(|e| e.kind == CmEventKind::Disconnected)
        else {
            return false;
        };
        let ev = q.events.remove(at);
        drop(q);
        drop(ev);
        self.disconnected = true;
        true
    }

    /// Disconnects (`rdma_disconnect`, which moves the QP to ERROR) and
    /// waits up to `timeout` for the `Disconnected` event, the only one a
    /// connection gets.
    ///
    /// When the peer disconnected first, so that the event is queued or
    /// was taken already (by [`next_event`](Self::next_event) in a
    /// `select!` loop, say), it returns at once: the local disconnect then
    /// only answers the peer's (and an error of it is ignored, the
    /// connection being gone either way). Another event that comes while
    /// it waits is an error that names it.
    ///
    /// What the receives posted on the QP see when the peer disconnects
    /// differs by transport. On siw (iWARP) the peer's disconnect moves
    /// this side's QP to ERROR: every posted receive completes with
    /// [`WcStatus::WorkRequestFlushed`](crate::WcStatus::WorkRequestFlushed)
    /// before the `Disconnected` event arrives. On rxe (the IB CM) they
    /// are flushed when this side disconnects, after the event. Either
    /// way those flushed completions are the end of the connection, not
    /// a failure of the data.
    pub async fn disconnect(&mut self, timeout: Duration) -> Result<()> {
        if self.disconnected || self.take_queued_disconnect() {
            let _ = self.id().disconnect();
            return Ok(());
        }
        self.id().disconnect()?;
        self.expect(CmEventKind::Disconnected, timeout)
            .await
            .map(|_| ())
    }
}

impl Drop for AsyncCmId {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            // Events still queued go (new ids of connect requests with them,
            // destroyed) once the lock is released; then the id.
            let events = self.cm.shared.remove(key(&id), &self.slot);
            drop(events);
            drop(id);
        }
    }
}

/// A listening id; its incoming connect requests arrive in order.
pub struct Listener {
    id: AsyncCmId,
    /// The stream has ended (after the router stopped).
    ended: bool,
}

impl Listener {
    /// The bound address (with the port the system chose for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.id().local_addr()
    }

    /// The next connect request.
    ///
    /// Cancellation-safe: a request is taken from the listener's queue and
    /// returned in one step, so a dropped future has taken none (and a
    /// later call gets it).
    pub async fn accept(&mut self) -> Result<ConnectRequest> {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls for the next connect request: `Pending` (and `cx` woken when
    /// one arrives) or the request. An error (the event router stopped)
    /// comes again on every later poll.
    pub fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<Result<ConnectRequest>> {
        loop {
            let mut event = match self.id.poll_queued(cx) {
                Poll::Ready(Ok(event)) => event,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            if let Some(id) = event.take_new_id() {
                // The router made its queue.
                let slot = self.id.cm.shared.routes().get(&key(&id)).cloned();
                let slot = slot.unwrap_or_else(|| self.id.cm.shared.add(&id));
                return Poll::Ready(Ok(ConnectRequest {
                    id: AsyncCmId {
                        id: Some(id),
                        slot,
                        cm: self.id.cm.clone(),
                        disconnected: false,
                    },
                    private_data: event.private_data().to_vec(),
                    param: event.conn.take().unwrap_or_default(),
                }));
            }
            // Other events of a listener (device removal, ...) are skipped.
        }
    }
}

/// The incoming connect requests, in order. The stream ends after the
/// error that says the event router stopped (no request can come then).
impl futures_core::Stream for Listener {
    type Item = Result<ConnectRequest>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let r = self.poll_accept(cx);
        if matches!(r, Poll::Ready(Err(_))) {
            self.ended = true;
        }
        r.map(Some)
    }
}

impl futures_core::FusedStream for Listener {
    fn is_terminated(&self) -> bool {
        self.ended
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
    /// The new id: its device ([`CmId::context`]), the requester's address
    /// ([`CmId::peer_addr`]), the port it came in on.
    pub fn id(&self) -> &CmId {
        self.id.id()
    }

    /// The new id (to create its QP with `create_qp`).
    pub fn id_mut(&mut self) -> &mut CmId {
        self.id.id_mut()
    }

    /// Accepts and waits (up to `timeout`) until the connection is
    /// established; returns the id and the `Established` event, as
    /// [`AsyncCm::connect`] does. The CM takes the id's QP (created on
    /// [`id_mut`](Self::id_mut), in INIT) to RTR and RTS: post receives
    /// before accepting, sends once this returns.
    ///
    /// Dropping the future before it returns destroys the id: the
    /// requester's connect fails.
    pub async fn accept(
        mut self,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<(AsyncCmId, CmEvent)> {
        self.id.id().accept(param)?;
        let est = self.id.expect(CmEventKind::Established, timeout).await?;
        Ok((self.id, est))
    }

    /// Rejects with private data.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        self.id.id().reject(private_data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_router_clears_readiness_only_when_the_channel_is_empty() {
        let mut reads = vec![Ok(Some(1)), Ok(Some(2)), Ok(None)].into_iter();
        let mut got = Vec::new();
        let d = drain(|| reads.next().unwrap(), |e| got.push(e));
        assert_eq!((d, got), (Drained::Empty, vec![1, 2]));

        // A failed read after an event: not empty, so readiness stays set
        // and the router reads again.
        let mut reads = vec![
            Ok(Some(1)),
            Err(Error::new("rdma_get_cm_event", libc::ENOMEM)),
        ]
        .into_iter();
        let mut got = Vec::new();
        let d = drain(|| reads.next().unwrap(), |e| got.push(e));
        assert_eq!((d, got), (Drained::Failed, vec![1]));
    }
}
