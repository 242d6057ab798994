//! uMAD with tokio (feature `tokio`): a reader task drains the port's fd
//! when it is readable and hands each MAD to whoever waits for it: the
//! request with its TID, or the server agent's stream of requests.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, oneshot};

use super::addr::Address;
use super::agent::{check_status, wait_limit, Agent, AgentView, Registration};
use super::port::{Port, PortView};
use super::wire::Received;
use super::{Error, Result};
use crate::mad::Mad;

type Key = (u32, u32);

struct Shared {
    port: Port,
    waiters: Mutex<Waiters>,
    /// Server agents' streams of unsolicited MADs, each bounded by the
    /// port's pending capacity when the agent registered.
    servers: Mutex<HashMap<u32, mpsc::Sender<Received>>>,
    /// Responder agents: each one's handler, called by the reader for every
    /// unsolicited MAD of the agent.
    responders: Mutex<HashMap<u32, Handler>>,
}

/// A responder's handler, with its agent (dropped with the last clone).
type Handler = Arc<dyn Fn(Received) + Send + Sync>;

/// Requests waiting for their response, and whether the reader task ended.
#[derive(Default)]
struct Waiters {
    /// By (agent ID, lower 32 bits of TID): the generation of the request
    /// that waits, and where its response (or the reader's error) goes.
    map: HashMap<Key, (u64, oneshot::Sender<Result<Received>>)>,
    /// The generation of the next request: a key's entry is the request's
    /// own only while its generation matches.
    next_gen: u64,
    /// The errno that ended the reader task; no response comes after it.
    failed: Option<i32>,
}

fn reader_failed(errno: i32) -> Error {
    Error::io("umad reader task", errno)
}

use crate::os::lock;

impl Shared {
    /// Records a request with `key` as waiting for its response; the
    /// returned guard withdraws it unless the response was handed over.
    fn wait(&self, key: Key, tid: u64) -> Result<(Waiting<'_>, WaitRx)> {
        let mut w = lock(&self.waiters);
        if let Some(e) = w.failed {
            return Err(reader_failed(e));
        }
        if w.map.contains_key(&key) {
            return Err(Error::DuplicateTid { tid });
        }
        let gen = w.next_gen;
        w.next_gen += 1;
        let (tx, rx) = oneshot::channel();
        w.map.insert(key, (gen, tx));
        let waiting = Waiting {
            shared: self,
            key,
            gen,
        };
        Ok((waiting, rx))
    }

    /// Ends every wait with the reader's error `errno`, and every server's
    /// stream, once the reader task stops reading.
    fn fail(&self, errno: i32) {
        let mut w = lock(&self.waiters);
        w.failed = Some(errno);
        for (_, (_, tx)) in w.map.drain() {
            let _ = tx.send(Err(reader_failed(errno)));
        }
        drop(w);
        lock(&self.servers).clear();
        let gone = std::mem::take(&mut *lock(&self.responders));
        drop(gone);
    }

    fn dispatch(&self, r: Received) {
        let is_response = r.status != 0 || r.mad.method().is_response();
        // Taken out of the map (the lock released) before the call.
        let responder = if is_response {
            None
        } else {
            lock(&self.responders).get(&r.agent_id).cloned()
        };
        if is_response {
            let key = (r.agent_id, r.tid() as u32);
            if let Some((_, tx)) = lock(&self.waiters).map.remove(&key) {
                let _ = tx.send(Ok(r));
            }
        } else if let Some(h) = responder {
            // Called with the map unlocked: the handler may drop its own
            // responder. One that panics is removed (its agent with it),
            // and the reader goes on for the others.
            let id = r.agent_id;
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(r))).is_err() {
                let gone = lock(&self.responders).remove(&id);
                drop(gone);
            }
        } else if let Some(tx) = lock(&self.servers).get(&r.agent_id) {
            // A full stream drops the newest request, as a full receive
            // queue does; its sender's retries recover it.
            if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(r) {
                self.port.view().inner.count_dropped();
            }
        }
    }
}

/// The fd as the reactor sees it; the port keeps it open.
struct Fd(RawFd);
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Dropping the last handle (port or agent) stops the reader task.
struct Stop {
    /// Dropped to stop the reader.
    tx: Option<oneshot::Sender<()>>,
    /// The reader thread of a umad2sim port, joined once told to stop: the
    /// port is closed when the last handle is gone, not some time later
    /// (and before a process's exit tears the shim down under it).
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Stop {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            // Within one poll of the thread (SIM_POLL); a panic there has
            // been reported already.
            let _ = t.join();
        }
    }
}

/// A umad [`Port`] driven by tokio. Create it inside a runtime: it spawns the
/// task that reads the port.
///
/// ```no_run
/// # async fn f() -> rdma::umad::Result<()> {
/// use rdma::mad::Oui;
/// use rdma::umad::{AsyncPort, Port, Registration};
/// let port = AsyncPort::new(Port::open("rxe0", 1)?)?;
/// let server = port.register(&Registration::new(0x32, 1).oui(Oui::OPENIB).method(rdma::mad::Method::GET))?;
/// while let Some(req) = server.next_request().await {
///     server.respond(&req, &req.mad.response())?;
/// }
/// # Ok(()) }
/// ```
pub struct AsyncPort {
    shared: Arc<Shared>,
    stop: Arc<Stop>,
}

impl AsyncPort {
    /// Takes over `port` and spawns its reader on the current runtime (for
    /// a port under ibsim's umad2sim, whose fd no event loop can wait on, a
    /// thread that waits in the shim's poll instead).
    ///
    /// A port with agents still registered is refused (`EBUSY`): their
    /// blocking receives would race the reader task for MADs. Register the
    /// agents through [`AsyncPort::register`] instead.
    pub fn new(port: Port) -> Result<AsyncPort> {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::io("AsyncPort::new outside a tokio runtime", libc::EINVAL))?;
        // Each agent holds the port's state; only the port itself may.
        if Arc::strong_count(&port.view().inner) != 1 {
            return Err(Error::io(
                "AsyncPort::new on a port with registered agents",
                libc::EBUSY,
            ));
        }
        let fd = port.as_raw_fd();
        let simulated = port.view().inner.simulated;
        let shared = Arc::new(Shared {
            port,
            waiters: Mutex::default(),
            servers: Mutex::default(),
            responders: Mutex::default(),
        });
        let (stop_tx, stop_rx) = oneshot::channel();
        if simulated {
            // umad2sim's fd is not the kernel's: epoll cannot wait on it.
            let s = shared.clone();
            let thread = std::thread::Builder::new()
                .name("umad2sim reader".into())
                .spawn(move || sim_reader(s, stop_rx))
                .map_err(|e| Error::Io {
                    op: "spawn (the reader thread of a umad2sim port)",
                    source: e,
                })?;
            return Ok(AsyncPort {
                shared,
                stop: Arc::new(Stop {
                    tx: Some(stop_tx),
                    thread: Some(thread),
                }),
            });
        }
        let afd = {
            let _enter = rt.enter();
            // SAFETY: the fd stays open for the AsyncFd's whole life: the
            // reader task holds both in a `Reader`, whose fields drop in
            // order (the AsyncFd first, then its `Arc<Shared>`), and the
            // Port in `Shared` closes the fd only when the last `Arc<Shared>`
            // is gone. If registering fails, nothing was registered.
            unsafe { AsyncFd::register_with_interest(Fd(fd), READY) }.map_err(|e| Error::Io {
                op: "AsyncFd::register",
                source: e.into(),
            })?
        };
        rt.spawn(reader(
            Reader {
                afd,
                shared: shared.clone(),
            },
            stop_rx,
        ));
        Ok(AsyncPort {
            shared,
            stop: Arc::new(Stop {
                tx: Some(stop_tx),
                thread: None,
            }),
        })
    }

    /// The port, without its receives (the reader task does them): its
    /// name, attributes and receive queue counters.
    pub fn port(&self) -> &PortView {
        self.shared.port.view()
    }

    /// Registers an agent; a registration with methods gets a stream of
    /// the unsolicited MADs of those methods ([`AsyncAgent::next_request`]),
    /// which holds up to the port's
    /// [`pending_capacity`](PortView::pending_capacity) (at least 1) and
    /// drops the newest past it, counted in
    /// [`dropped_mads`](PortView::dropped_mads).
    pub fn register(&self, reg: &Registration) -> Result<AsyncAgent> {
        let agent = self.shared.port.register(reg)?;
        let (tx, rx) = mpsc::channel(self.shared.port.pending_capacity().max(1));
        lock(&self.shared.servers).insert(agent.id(), tx);
        // Checked after the insert: `fail` sets `failed` before it clears
        // the streams, so a stream it missed is refused here.
        if let Some(e) = lock(&self.shared.waiters).failed {
            lock(&self.shared.servers).remove(&agent.id());
            return Err(reader_failed(e));
        }
        Ok(AsyncAgent {
            agent,
            shared: self.shared.clone(),
            requests: tokio::sync::Mutex::new(rx),
            _stop: self.stop.clone(),
        })
    }
}

impl AsyncPort {
    /// Registers a server agent whose requests are answered where they are
    /// read: the port's reader calls `handler` with the agent and each
    /// unsolicited MAD of the registration's methods, in order, and the
    /// handler sends what it answers (`agent.respond`). There is no queue to
    /// overflow and no hand-over to a task: an SA or SMA answering from
    /// state it can lock briefly serves each request at the cost of the
    /// answer alone.
    ///
    /// The handler runs on the reader (the port's reader task, or the
    /// reader thread of a umad2sim port): while it runs no MAD of the port
    /// is read, so it must not block or wait on this port's responses. It
    /// is dropped, and the agent unregistered, when the returned
    /// [`AsyncResponder`] is (once a call in progress returns), when it
    /// panics (the reader goes on), or when the reader stops. A handler that holds the port itself (an
    /// [`AsyncPort`] or [`AsyncAgent`] of it) keeps the reader alive.
    pub fn register_responder<F>(&self, reg: &Registration, handler: F) -> Result<AsyncResponder>
    where
        F: Fn(&AgentView, Received) + Send + Sync + 'static,
    {
        let agent = self.shared.port.register(reg)?;
        let id = agent.id();
        let h: Handler = Arc::new(move |r| handler(agent.view(), r));
        lock(&self.shared.responders).insert(id, h);
        // As in `register`: a reader that failed before the insert is not
        // answering any more.
        if let Some(e) = lock(&self.shared.waiters).failed {
            let gone = lock(&self.shared.responders).remove(&id);
            drop(gone);
            return Err(reader_failed(e));
        }
        Ok(AsyncResponder {
            id,
            shared: self.shared.clone(),
            _stop: self.stop.clone(),
        })
    }
}

/// A server agent answered on the port's reader
/// ([`AsyncPort::register_responder`]); dropping it unregisters the agent.
pub struct AsyncResponder {
    id: u32,
    shared: Arc<Shared>,
    _stop: Arc<Stop>,
}

impl AsyncResponder {
    /// The agent's ID.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for AsyncResponder {
    fn drop(&mut self) {
        // The handler (and its agent) goes outside the lock: a call in
        // progress holds its own clone until it returns.
        let gone = lock(&self.shared.responders).remove(&self.id);
        drop(gone);
    }
}

/// What wakes the reader: a MAD, or an error. Once its device is gone a
/// umad fd polls as POLLERR alone, which readability does not include.
const READY: Interest = Interest::READABLE.add(Interest::ERROR);

/// What the reader task owns. Fields drop in order: the registration of the
/// fd before the port that closes it.
struct Reader {
    afd: AsyncFd<Fd>,
    shared: Arc<Shared>,
}

/// Reads the port whenever it is readable, until every handle is gone or
/// the fd fails.
///
/// A read error (EIO once the device is gone) ends the task, and with it
/// every wait: retrying would spin on an fd that stays readable. MADs that
/// do not decode are dropped by `try_recv` and counted in
/// [`PortView::malformed_mads`], and MADs too long to read in
/// [`PortView::too_long_mads`]; the reader goes on with the next.
async fn reader(r: Reader, mut stop: oneshot::Receiver<()>) {
    let Reader { afd, shared } = &r;
    loop {
        let mut guard = tokio::select! {
            _ = &mut stop => return,
            g = afd.ready(READY) => match g {
                Ok(g) => g,
                Err(e) => {
                    shared.fail(e.raw_os_error().unwrap_or(libc::EIO));
                    return;
                }
            },
        };
        loop {
            match shared.port.try_recv() {
                Ok(Some(r)) => shared.dispatch(r),
                Ok(None) => {
                    guard.clear_ready();
                    break;
                }
                Err(e) => {
                    shared.fail(e.errno());
                    return;
                }
            }
        }
    }
}

/// How long the reader thread of a umad2sim port waits in one poll: at most
/// how long it outlives the last handle (and keeps the port open).
const SIM_POLL: Duration = Duration::from_millis(100);

/// The reader of a port under ibsim's umad2sim, on a thread of its own: its
/// fd is the shim's, which only the shim's poll(2) understands (an event
/// loop's epoll refuses it), so the thread waits in poll, a bounded time at
/// once, and hands each MAD over as the reader task does. It stops when
/// every handle is gone (the stop channel closed) or the fd fails.
fn sim_reader(shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    loop {
        if !matches!(stop.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
            return;
        }
        match shared
            .port
            .view()
            .inner
            .recv_matching(Some(SIM_POLL), |_| true)
        {
            Ok(r) => shared.dispatch(r),
            // A MAD too long to read is dropped (and counted), as
            // `try_recv` drops it for the reader task.
            Err(Error::RecvTimeout(_) | Error::MadTooLong { .. }) => {}
            Err(e) => {
                shared.fail(e.errno());
                return;
            }
        }
    }
}

/// An [`Agent`] driven by tokio: requests resolve to their responses, and a
/// server receives its requests as a stream.
pub struct AsyncAgent {
    agent: Agent,
    shared: Arc<Shared>,
    requests: tokio::sync::Mutex<mpsc::Receiver<Received>>,
    _stop: Arc<Stop>,
}

type WaitRx = oneshot::Receiver<Result<Received>>;

/// Removes a waiter whose request future was dropped or failed.
struct Waiting<'a> {
    shared: &'a Shared,
    key: Key,
    /// Which request this is: once its response was handed over, a new
    /// request may wait under the same key, and its entry is not ours.
    gen: u64,
}
impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut w = lock(&self.shared.waiters);
        if w.map.get(&self.key).is_some_and(|(g, _)| *g == self.gen) {
            w.map.remove(&self.key);
            drop(w);
            // No response was read: the port forgets the request too.
            let (agent, tid) = self.key;
            self.shared.port.view().inner.abandon(agent, u64::from(tid));
        }
    }
}

impl AsyncAgent {
    /// The agent underneath without its receives (the port's reader task
    /// does them): its ID, its TIDs, unsolicited sends.
    pub fn agent(&self) -> &AgentView {
        self.agent.view()
    }

    /// Sends a request and resolves to its response, matched by TID (lower
    /// 32 bits). Many requests may be outstanding at once, from many tasks;
    /// each needs its own TID ([`AgentView::next_tid`]). No response after the
    /// retries: [`Error::Timeout`] with the TID.
    pub async fn request(
        &self,
        mad: &Mad,
        addr: &Address,
        timeout: Duration,
        retries: u32,
    ) -> Result<Received> {
        let key = (self.agent.id(), mad.tid() as u32);
        let (_waiting, rx) = self.shared.wait(key, mad.tid())?;
        self.agent.send_request(mad, addr, timeout, retries)?;
        match tokio::time::timeout(wait_limit(timeout, retries), rx).await {
            Ok(Ok(Ok(r))) => check_status(r),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(reader_failed(libc::ECANCELED)),
            Err(_) => Err(Error::Timeout { tid: mad.tid() }),
        }
    }

    /// The next unsolicited MAD for this agent (a request to a server);
    /// `None` when the reader has stopped (the port's fd failed).
    pub async fn next_request(&self) -> Option<Received> {
        self.requests.lock().await.recv().await
    }

    /// Answers a request (see [`AgentView::respond`]).
    pub fn respond(&self, req: &Received, resp: &Mad) -> Result<()> {
        self.agent.respond(req, resp)
    }

    /// Sends an untracked MAD (see [`AgentView::send`]).
    pub fn send(&self, mad: &Mad, addr: &Address) -> Result<()> {
        self.agent.send(mad, addr)
    }
}

impl Drop for AsyncAgent {
    fn drop(&mut self) {
        lock(&self.shared.servers).remove(&self.agent.id());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::Method;
    use crate::umad::port::tests::{fake_port, received};

    const AGENT: u32 = 1;

    fn shared() -> (Shared, std::os::fd::OwnedFd) {
        let (inner, w) = fake_port();
        let shared = Shared {
            port: Port::from_inner(inner),
            waiters: Mutex::default(),
            servers: Mutex::default(),
            responders: Mutex::default(),
        };
        (shared, w)
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair
    fn a_finished_request_leaves_a_new_waiter_with_its_tid_alone() {
        let (shared, _w) = shared();
        let key = (AGENT, 0x42);
        let (first, mut first_rx) = shared.wait(key, 0x42).unwrap();
        shared.dispatch(received(AGENT, 0, Method::GET_RESP, 0x42));
        assert!(matches!(first_rx.try_recv(), Ok(Ok(_))));
        // The TID is free again before the first request's guard drops.
        let (second, mut second_rx) = shared.wait(key, 0x42).unwrap();
        drop(first);
        shared.dispatch(received(AGENT, 0, Method::GET_RESP, 0x42));
        assert!(matches!(second_rx.try_recv(), Ok(Ok(_))));
        drop(second);
        assert!(lock(&shared.waiters).map.is_empty());
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair
    fn a_responder_gets_its_agents_requests_and_no_responses() {
        let (shared, _w) = shared();
        let shared = Arc::new(shared);
        // A handler may remove itself (as dropping its AsyncResponder
        // does) while it runs: the map is not locked during the call.
        let weak = Arc::downgrade(&shared);
        let own: Handler = Arc::new(move |_| {
            if let Some(s) = weak.upgrade() {
                let me = lock(&s.responders).remove(&(AGENT + 3));
                drop(me);
            }
        });
        lock(&shared.responders).insert(AGENT + 3, own);
        shared.dispatch(received(AGENT + 3, 0, Method::GET, 0x50));
        assert!(!lock(&shared.responders).contains_key(&(AGENT + 3)));
        let (tx, rx) = std::sync::mpsc::channel();
        let h: Handler = Arc::new(move |r: Received| tx.send((r.agent_id, r.tid())).unwrap());
        lock(&shared.responders).insert(AGENT, h);
        // A request of the agent: to the handler, in order.
        shared.dispatch(received(AGENT, 0, Method::GET, 0x51));
        shared.dispatch(received(AGENT, 0, Method::SET, 0x52));
        // Another agent's request, and a response of the agent: not to it.
        shared.dispatch(received(AGENT + 1, 0, Method::GET, 0x53));
        shared.dispatch(received(AGENT, 0, Method::GET_RESP, 0x54));
        let got: Vec<_> = rx.try_iter().collect();
        assert_eq!(got, [(AGENT, 0x51), (AGENT, 0x52)]);
        // A handler that panics is removed; the others stay.
        let p: Handler = Arc::new(|_| panic!("a responder's handler panics"));
        lock(&shared.responders).insert(AGENT + 2, p);
        shared.dispatch(received(AGENT + 2, 0, Method::GET, 0x55));
        assert!(!lock(&shared.responders).contains_key(&(AGENT + 2)));
        shared.dispatch(received(AGENT, 0, Method::GET, 0x56));
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [(AGENT, 0x56)]);
        // A failed reader drops the handlers (and their agents).
        shared.fail(libc::EIO);
        assert!(lock(&shared.responders).is_empty());
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair
    fn a_request_given_up_is_forgotten_by_the_port() {
        let (shared, _w) = shared();
        assert!(shared.port.view().inner.add_outstanding(AGENT, 0x43));
        let (waiting, _rx) = shared.wait((AGENT, 0x43), 0x43).unwrap();
        drop(waiting);
        assert!(lock(&shared.waiters).map.is_empty());
        // No response was read: the TID is no longer tracked.
        assert!(shared.port.view().inner.add_outstanding(AGENT, 0x43));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair and tokio's reactor
    fn a_failing_fd_ends_the_reader_and_fails_its_waiters() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (inner, w) = fake_port();
            let port = AsyncPort::new(Port::from_inner(inner)).unwrap();
            let (_waiting, rx) = port.shared.wait((AGENT, 0x44), 0x44).unwrap();
            // The fd now reads its end, as a umad fd fails once its device
            // is gone.
            drop(w);
            let r = tokio::time::timeout(Duration::from_secs(5), rx).await;
            let Ok(Ok(Err(e))) = r else {
                panic!("the waiter got {r:?}");
            };
            assert_eq!(e.errno(), libc::EIO, "{e}");
            // New requests are refused at once rather than left to time out.
            let again = port.shared.wait((AGENT, 0x45), 0x45).err();
            assert_eq!(again.map(|e| e.errno()), Some(libc::EIO));
            assert_eq!(port.port().malformed_mads(), 0);
        });
    }
}
