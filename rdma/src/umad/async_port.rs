//! uMAD with tokio (feature `tokio`): a reader task drains the port's fd
//! when it is readable and hands each MAD to whoever waits for it: the
//! request with its TID, or the server agent's stream of requests.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
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
    /// Requests waiting for their response: (agent ID, lower 32 bits of TID).
    waiters: Mutex<HashMap<Key, oneshot::Sender<Received>>>,
    /// Server agents' streams of unsolicited MADs, each bounded by the
    /// port's pending capacity when the agent registered.
    servers: Mutex<HashMap<u32, mpsc::Sender<Received>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn dispatch(&self, r: Received) {
        if r.status != 0 || r.mad.method().is_response() {
            let key = (r.agent_id, r.tid() as u32);
            if let Some(tx) = lock(&self.waiters).remove(&key) {
                let _ = tx.send(r);
            }
        } else if let Some(tx) = lock(&self.servers).get(&r.agent_id) {
            // A full stream drops the newest request, as a full receive
            // queue does; its sender's retries recover it.
            if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(r) {
                self.port.inner.count_dropped();
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
struct Stop(#[allow(dead_code)] oneshot::Sender<()>);

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
    /// Takes over `port` and spawns its reader on the current runtime.
    ///
    /// A port with agents still registered is refused (`EBUSY`): their
    /// blocking receives would race the reader task for MADs. Register the
    /// agents through [`AsyncPort::register`] instead.
    pub fn new(port: Port) -> Result<AsyncPort> {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::io("AsyncPort::new outside a tokio runtime", libc::EINVAL))?;
        // Each agent holds the port's state; only the port itself may.
        if Arc::strong_count(&port.inner) != 1 {
            return Err(Error::io(
                "AsyncPort::new on a port with registered agents",
                libc::EBUSY,
            ));
        }
        let fd = port.as_raw_fd();
        let shared = Arc::new(Shared {
            port,
            waiters: Mutex::default(),
            servers: Mutex::default(),
        });
        let afd = {
            let _enter = rt.enter();
            // SAFETY: the fd stays open for the AsyncFd's whole life: the
            // reader task holds both in a `Reader`, whose fields drop in
            // order (the AsyncFd first, then its `Arc<Shared>`), and the
            // Port in `Shared` closes the fd only when the last `Arc<Shared>`
            // is gone. If registering fails, nothing was registered.
            unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) }.map_err(|e| {
                Error::Io {
                    op: "AsyncFd::register",
                    source: e.into(),
                }
            })?
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        rt.spawn(reader(
            Reader {
                afd,
                shared: shared.clone(),
            },
            stop_rx,
        ));
        Ok(AsyncPort {
            shared,
            stop: Arc::new(Stop(stop_tx)),
        })
    }

    /// The port, without its receives (the reader task does them): its
    /// name, attributes and receive queue counters.
    pub fn port(&self) -> &PortView {
        &self.shared.port
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
        Ok(AsyncAgent {
            agent,
            shared: self.shared.clone(),
            requests: tokio::sync::Mutex::new(rx),
            _stop: self.stop.clone(),
        })
    }
}

/// What the reader task owns. Fields drop in order: the registration of the
/// fd before the port that closes it.
struct Reader {
    afd: AsyncFd<Fd>,
    shared: Arc<Shared>,
}

/// Reads the port whenever it is readable, until every handle is gone.
async fn reader(r: Reader, mut stop: oneshot::Receiver<()>) {
    let Reader { afd, shared } = &r;
    loop {
        let mut guard = tokio::select! {
            _ = &mut stop => return,
            g = afd.readable() => match g {
                Ok(g) => g,
                Err(_) => return,
            },
        };
        loop {
            match shared.port.try_recv() {
                Ok(Some(r)) => shared.dispatch(r),
                Ok(None) => {
                    guard.clear_ready();
                    break;
                }
                // A MAD that does not decode is dropped; the next may.
                Err(Error::Mad(_)) => continue,
                Err(_) => {
                    guard.clear_ready();
                    break;
                }
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

/// Removes a waiter whose request future was dropped or failed.
struct Waiting<'a> {
    shared: &'a Shared,
    key: Key,
}
impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(&self.shared.waiters).remove(&self.key);
    }
}

impl AsyncAgent {
    /// The agent underneath without its receives (the port's reader task
    /// does them): its ID, its TIDs, unsolicited sends.
    pub fn agent(&self) -> &AgentView {
        &self.agent
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
        let (tx, rx) = oneshot::channel();
        {
            let mut w = lock(&self.shared.waiters);
            if w.contains_key(&key) {
                return Err(Error::DuplicateTid { tid: mad.tid() });
            }
            w.insert(key, tx);
        }
        let _waiting = Waiting {
            shared: &self.shared,
            key,
        };
        self.agent.send_request(mad, addr, timeout, retries)?;
        match tokio::time::timeout(wait_limit(timeout, retries), rx).await {
            Ok(Ok(r)) => check_status(r),
            Ok(Err(_)) => Err(Error::io("umad reader task", libc::ECANCELED)),
            Err(_) => Err(Error::Timeout { tid: mad.tid() }),
        }
    }

    /// The next unsolicited MAD for this agent (a request to a server);
    /// `None` when the reader has stopped.
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
