//! Message endpoints: the stream's connection, driver and credits, with
//! message boundaries kept (see the [module docs](crate::stream#messages)).

use std::io;
use std::net::SocketAddr;
use std::ops::{Deref, Range};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::{AccessFlags, MemoryRegion, ProtectionDomain, RemoteMemory};

use super::engine::Mode;
use super::error::{ended_error, io_err};
use super::setup::connect;
use super::shared::Shared;
use super::RdmaListener;
use super::{StreamConfig, HEADER_LEN};

/// A listener that accepts [`MessageEndpoint`]s.
///
/// Only message endpoints may connect to it: a
/// [`RdmaStream`](super::RdmaStream) that does fails its connection at
/// the first data either side sends (a protocol error,
/// `InvalidData`), and so does a message endpoint that connects to an
/// [`RdmaListener`].
#[derive(Debug)]
pub struct MessageListener {
    inner: RdmaListener,
}

impl MessageListener {
    /// Binds to `addr` (port 0: the system chooses) and listens. Must be
    /// called inside a tokio runtime, which then runs the drivers of the
    /// endpoints it accepts.
    pub fn bind(addr: SocketAddr) -> io::Result<MessageListener> {
        MessageListener::bind_with(addr, StreamConfig::new())
    }

    /// [`bind`](Self::bind) with the buffers and busy-poll time of
    /// `config` for every connection it accepts.
    pub fn bind_with(addr: SocketAddr, config: StreamConfig) -> io::Result<MessageListener> {
        RdmaListener::bind_mode(addr, Mode::Message, config).map(|inner| MessageListener { inner })
    }

    /// The bound address, with the port the system chose.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Waits for the next connection, sets it up and accepts it; returns
    /// the endpoint and the peer's address. Errors and cancellation are
    /// those of [`RdmaListener::accept`].
    pub async fn accept(&mut self) -> io::Result<(MessageEndpoint, SocketAddr)> {
        let (shared, peer) = self.inner.accept_shared().await?;
        Ok((MessageEndpoint { shared }, peer))
    }
}

/// A connected RDMA endpoint that sends and receives whole messages of up
/// to [`max_message`](MessageEndpoint::max_message) bytes
/// ([`MAX_MESSAGE`](super::MAX_MESSAGE) by default; empty ones included),
/// in order, with no loss, over RC.
///
/// ```no_run
/// use rdma::stream::{MessageEndpoint, MessageListener};
/// use rdma::{AccessFlags, RemoteMemory};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let at = "192.168.1.10:7472".parse().unwrap();
/// let mut listener = MessageListener::bind(at)?;
/// tokio::spawn(async move {
///     let (ep, _peer) = listener.accept().await?;
///     // A region the peer may write, advertised in a message.
///     let mr = ep.register(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
///     ep.send(&mr.remote(..)?.to_bytes()).await?;
///     while let Some(msg) = ep.recv().await? {
///         println!("{} bytes; the region starts {:?}", msg.len(), mr.to_vec(..4)?);
///     }
///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
/// });
///
/// let ep = MessageEndpoint::connect(at).await?;
/// let remote = RemoteMemory::from_bytes(&ep.recv().await?.ok_or("no descriptor")?)?;
/// let local = ep.register(4096, AccessFlags::empty())?;
/// local.write(0, b"written by the peer")?;
/// ep.write_remote(&local, 0..4096, &remote).await?;
/// ep.send(b"look").await?;
/// ep.shutdown().await?;
/// # Ok(())
/// # }
/// ```
///
/// Every method takes `&self`: one task may send while others receive
/// (share the endpoint with an `Arc`). Dropping the endpoint sends what
/// was sent and not yet posted, then a FIN, then closes the connection,
/// as a dropped [`RdmaStream`](super::RdmaStream) does.
pub struct MessageEndpoint {
    shared: Arc<Shared>,
}

impl MessageEndpoint {
    /// Connects to a [`MessageListener`] at `addr`. Must be called inside a
    /// tokio runtime, which then runs the endpoint's driver task.
    ///
    /// Cancellation-safe: dropping the future destroys whatever it had made.
    pub async fn connect(addr: SocketAddr) -> io::Result<MessageEndpoint> {
        MessageEndpoint::connect_with(addr, &StreamConfig::new()).await
    }

    /// [`connect`](Self::connect) with the buffers and busy-poll time of
    /// `config`. Fails with `InvalidInput` carrying a
    /// [`StreamConfigError`](super::StreamConfigError) when the device
    /// cannot hold them, `InvalidData` with one when the peer's accept is
    /// not a stream's.
    pub async fn connect_with(
        addr: SocketAddr,
        config: &StreamConfig,
    ) -> io::Result<MessageEndpoint> {
        let shared = connect(addr, Mode::Message, config).await?;
        Ok(MessageEndpoint { shared })
    }

    /// The largest message this endpoint sends: the smaller of its own
    /// send buffers and the peer's receive buffers, less the header
    /// ([`MAX_MESSAGE`](super::MAX_MESSAGE) with the default
    /// configuration on both sides).
    pub fn max_message(&self) -> usize {
        self.shared.link.layout.payload
    }

    /// Sets how long the connection's driver busy-polls after each thing
    /// it handles before it sleeps ([`RdmaStream::set_busy_poll`](super::RdmaStream::set_busy_poll)).
    pub fn set_busy_poll(&self, time: Duration) {
        self.shared.set_busy_poll(time);
    }

    /// The busy-poll time.
    pub fn busy_poll(&self) -> Duration {
        self.shared.busy_poll()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        addr(self.shared.peer)
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        addr(self.shared.local)
    }

    /// Sends `msg` as one message: the peer's [`recv`](Self::recv) returns
    /// exactly these bytes, after every message sent before.
    ///
    /// Returns once the message is copied into a registered send buffer
    /// (the driver posts it as the peer's credits allow); waits while all
    /// send buffers are taken, that is while the peer does not receive
    /// (back-pressure).
    ///
    /// A message longer than [`max_message`](Self::max_message) fails with `InvalidInput`
    /// before anything is sent: the connection stays usable. After
    /// [`shutdown`](Self::shutdown) it fails with `BrokenPipe`, and once
    /// the connection has ended with the error that ended it.
    ///
    /// Cancellation-safe: a message is sent entirely if this returns
    /// `Ok`, and not at all if the future is dropped before.
    pub async fn send(&self, msg: &[u8]) -> io::Result<()> {
        let max = self.max_message();
        if msg.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a message of {} bytes; the most is {max}", msg.len()),
            ));
        }
        let shared = &*self.shared;
        std::future::poll_fn(|cx| {
            let mut st = shared.lock_half();
            if let Some(why) = &st.ended {
                return Poll::Ready(Err(ended_error(why, true)));
            }
            if st.shutdown {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "send after shutdown",
                )));
            }
            let Some(slot) = st.free.pop() else {
                st.writer.register(cx.waker());
                return Poll::Pending;
            };
            if let Err(e) = shared
                .link
                .mr
                .write(shared.link.layout.send_at(slot) + HEADER_LEN, msg)
            {
                st.free.push(slot);
                return Poll::Ready(Err(io_err(e)));
            }
            st.queued.push_back((slot, msg.len()));
            drop(st);
            shared.nudge();
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Waits for the next message: `Some` with it, or `None` after the
    /// last one once the peer has shut down (its FIN), or an error once
    /// the messages received before the connection ended are taken.
    ///
    /// The message is copied out of its receive buffer into a pooled
    /// buffer; the receive buffer, and with it the peer's credit, stays
    /// taken until the [`Message`] is dropped. Holding messages therefore
    /// holds the sender back once all receive buffers are held, and holding one
    /// blocks nothing else.
    ///
    /// Cancellation-safe: a message is taken only when this returns it.
    pub async fn recv(&self) -> io::Result<Option<Message>> {
        let shared = &self.shared;
        std::future::poll_fn(|cx| {
            let mut st = shared.lock_half();
            if let Some(seg) = st.rx.pop_front() {
                let mut data = st.pool.pop().unwrap_or_default();
                data.resize(seg.len, 0);
                if let Err(e) = shared.link.mr.read(seg.at, &mut data) {
                    st.rx.push_front(seg);
                    return Poll::Ready(Err(io_err(e)));
                }
                debug_assert_eq!(seg.at, shared.link.layout.recv_at(seg.slot) + HEADER_LEN);
                return Poll::Ready(Ok(Some(Message {
                    data,
                    slot: seg.slot,
                    shared: Arc::clone(shared),
                })));
            }
            if st.fin_received {
                return Poll::Ready(Ok(None));
            }
            if let Some(why) = &st.ended {
                return Poll::Ready(Err(ended_error(why, false)));
            }
            st.reader.register(cx.waker());
            Poll::Pending
        })
        .await
    }

    /// Sends a FIN after the messages sent and waits until it is sent:
    /// the peer's [`recv`](Self::recv) then returns `None` after them.
    /// Receiving stays possible. Cancellation-safe: the FIN, once queued,
    /// goes even if the future is dropped.
    pub async fn shutdown(&self) -> io::Result<()> {
        let shared = &*self.shared;
        let mut first = true;
        std::future::poll_fn(|cx| {
            let mut st = shared.lock_half();
            if st.fin_done {
                return Poll::Ready(Ok(()));
            }
            if let Some(why) = &st.ended {
                return Poll::Ready(Err(ended_error(why, true)));
            }
            let queue = !st.shutdown;
            st.shutdown = true;
            st.writer.register(cx.waker());
            drop(st);
            if queue || first {
                shared.poke();
            }
            first = false;
            Poll::Pending
        })
        .await
    }

    /// The connection's protection domain: see [`RdmaStream::pd`](super::RdmaStream::pd).
    pub fn pd(&self) -> &ProtectionDomain {
        &self.shared.pd
    }

    /// Registers `len` zeroed bytes in the connection's protection domain:
    /// see [`RdmaStream::register`](super::RdmaStream::register).
    pub fn register(&self, len: usize, access: AccessFlags) -> io::Result<Arc<MemoryRegion>> {
        self.shared.register(len, access)
    }

    /// RDMA WRITEs `range` of `local` to the peer's `remote`: the checks,
    /// the errors (and what a device error does to the connection) and
    /// the cancellation of [`RdmaStream::write_remote`](super::RdmaStream::write_remote).
    pub async fn write_remote(
        &self,
        local: &Arc<MemoryRegion>,
        range: Range<usize>,
        remote: &RemoteMemory,
    ) -> io::Result<()> {
        self.shared.one_sided(false, local, range, remote).await
    }

    /// RDMA READs the peer's `remote` into `range` of `local`: as
    /// [`RdmaStream::read_remote`](super::RdmaStream::read_remote).
    pub async fn read_remote(
        &self,
        local: &Arc<MemoryRegion>,
        range: Range<usize>,
        remote: &RemoteMemory,
    ) -> io::Result<()> {
        self.shared.one_sided(true, local, range, remote).await
    }
}

fn addr(a: Option<SocketAddr>) -> io::Result<SocketAddr> {
    a.ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no address"))
}

impl Drop for MessageEndpoint {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.reader_gone = true;
        st.writer_gone = true;
        st.shutdown = true;
        st.reader.clear();
        st.writer.clear();
        drop(st);
        self.shared.poke();
    }
}

impl std::fmt::Debug for MessageEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageEndpoint")
            .field("local", &self.shared.local)
            .field("peer", &self.shared.peer)
            .finish_non_exhaustive()
    }
}

/// A received message: derefs to its bytes. Dropping it posts its receive
/// buffer again (returning the sender's credit) and keeps its buffer for
/// a later message. It may outlive its endpoint.
pub struct Message {
    data: Vec<u8>,
    slot: usize,
    shared: Arc<Shared>,
}

impl Deref for Message {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl AsRef<[u8]> for Message {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.repost.push(self.slot);
        if st.pool.len() < self.shared.link.layout.recv_slots {
            let mut data = std::mem::take(&mut self.data);
            data.clear();
            st.pool.push(data);
        }
        drop(st);
        self.shared.nudge();
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("len", &self.data.len())
            .finish_non_exhaustive()
    }
}
