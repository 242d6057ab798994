//! Blocking twins of [`RdmaListener`](super::RdmaListener) and
//! [`RdmaStream`](super::RdmaStream), with `std::io::Read` and `Write`,
//! for plain threads: they mirror `std::net::TcpListener` and `TcpStream`.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use rdma::stream::blocking::{RdmaListener, RdmaStream};
//!
//! # fn demo() -> std::io::Result<()> {
//! let listener = RdmaListener::bind("192.168.1.10:7471".parse().unwrap())?;
//! let server = std::thread::spawn(move || -> std::io::Result<()> {
//!     let (mut s, _peer) = listener.accept()?;
//!     let mut buf = [0; 5];
//!     s.read_exact(&mut buf)?;
//!     s.write_all(&buf)
//! });
//! let mut s = RdmaStream::connect("192.168.1.10:7471".parse().unwrap())?;
//! s.write_all(b"hello")?;
//! let mut echo = [0; 5];
//! s.read_exact(&mut echo)?;
//! # server.join().unwrap()?;
//! # Ok(())
//! # }
//! ```
//!
//! # How
//! The first use starts one process-wide tokio runtime (current-thread,
//! on a thread of its own named `rdma-stream-rt`) that runs every
//! blocking stream's driver task; each operation is the async one, run to
//! completion on the caller's thread with
//! [`Handle::block_on`](tokio::runtime::Handle::block_on). The runtime
//! lives as long as the process.
//!
//! # Inside a runtime
//! Blocking inside a tokio runtime would stall its worker (and
//! `block_on` there panics), so every function of this module called from
//! a thread that is in a tokio runtime context (a task, or `spawn_blocking`'s
//! threads, or under `Runtime::enter`) fails with
//! [`ErrorKind::Unsupported`](io::ErrorKind::Unsupported) instead, and
//! never panics: use the async [`rdma::stream`](super) types there.
//!
//! # Timeouts
//! [`set_read_timeout`](RdmaStream::set_read_timeout) and
//! [`set_write_timeout`](RdmaStream::set_write_timeout) behave as
//! `TcpStream`'s on Linux: a read or write that waited that long fails
//! with `WouldBlock`, having consumed or sent nothing (the async reads
//! and writes are cancellation-safe), and a zero duration is refused
//! with `InvalidInput`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Handle;

use crate::os::lock;

use super::shared::Shared;
use super::{OwnedReadHalf, OwnedWriteHalf};

/// The process-wide runtime's handle, started on first use.
fn runtime() -> io::Result<&'static Handle> {
    static RT: OnceLock<Handle> = OnceLock::new();
    if Handle::try_current().is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "rdma::stream::blocking called inside a tokio runtime: use the async rdma::stream",
        ));
    }
    if let Some(h) = RT.get() {
        return Ok(h);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = rt.handle().clone();
    // Two threads racing here: the loser's runtime is dropped unused.
    if RT.set(handle).is_ok() {
        std::thread::Builder::new()
            .name("rdma-stream-rt".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))?;
    }
    RT.get()
        .ok_or_else(|| io::Error::other("the rdma::stream runtime did not start"))
}

/// Runs `f` to completion on the caller's thread, within `timeout`.
fn block_on<T>(
    timeout: Option<Duration>,
    f: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    let rt = runtime()?;
    rt.block_on(async {
        match timeout {
            None => f.await,
            Some(d) => tokio::time::timeout(d, f).await.unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "the RDMA stream operation timed out",
                ))
            }),
        }
    })
}

fn check_timeout(t: Option<Duration>) -> io::Result<Option<Duration>> {
    if t == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        ));
    }
    Ok(t)
}

/// A blocking [`RdmaListener`](super::RdmaListener).
#[derive(Debug)]
pub struct RdmaListener {
    inner: Mutex<super::RdmaListener>,
}

impl RdmaListener {
    /// Binds to `addr` (port 0: the system chooses) and listens.
    pub fn bind(addr: SocketAddr) -> io::Result<RdmaListener> {
        RdmaListener::bind_with(addr, super::StreamConfig::new())
    }

    /// [`bind`](Self::bind) with `config` for every stream it accepts, as
    /// [`RdmaListener::bind_with`](super::RdmaListener::bind_with).
    pub fn bind_with(addr: SocketAddr, config: super::StreamConfig) -> io::Result<RdmaListener> {
        let rt = runtime()?;
        let _in = rt.enter();
        let inner = super::RdmaListener::bind_with(addr, config)?;
        Ok(RdmaListener {
            inner: Mutex::new(inner),
        })
    }

    /// The bound address, with the port the system chose.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        lock(&self.inner).local_addr()
    }

    /// Blocks until a connection is accepted, as
    /// [`RdmaListener::accept`](super::RdmaListener::accept); calls from
    /// several threads take turns.
    pub fn accept(&self) -> io::Result<(RdmaStream, SocketAddr)> {
        // Checked before the lock: a refused call does not wait for it.
        runtime()?;
        let mut l = lock(&self.inner);
        let (s, peer) = block_on(None, l.accept())?;
        Ok((RdmaStream::new(s), peer))
    }
}

/// A blocking [`RdmaStream`](super::RdmaStream): `std::io::Read` and
/// `Write`, also on `&RdmaStream`, so that one thread may read while
/// another writes (share it with an `Arc`).
///
/// Dropping it closes the connection as dropping the async stream does
/// (the driver sends what was written, then a FIN).
pub struct RdmaStream {
    read: Mutex<OwnedReadHalf>,
    write: Mutex<OwnedWriteHalf>,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
    read_shut: Mutex<bool>,
    /// The connection (for settings, while a read or write holds its
    /// half).
    shared: Arc<Shared>,
}

impl RdmaStream {
    fn new(s: super::RdmaStream) -> RdmaStream {
        let shared = s.shared();
        let (read, write) = s.into_split();
        RdmaStream {
            shared,
            read: Mutex::new(read),
            write: Mutex::new(write),
            read_timeout: Mutex::new(None),
            write_timeout: Mutex::new(None),
            read_shut: Mutex::new(false),
        }
    }

    /// Connects to a listener at `addr`, blocking until connected.
    pub fn connect(addr: SocketAddr) -> io::Result<RdmaStream> {
        block_on(None, super::RdmaStream::connect(addr)).map(RdmaStream::new)
    }

    /// [`connect`](Self::connect) with `config`, as
    /// [`RdmaStream::connect_with`](super::RdmaStream::connect_with).
    pub fn connect_with(addr: SocketAddr, config: &super::StreamConfig) -> io::Result<RdmaStream> {
        block_on(None, super::RdmaStream::connect_with(addr, config)).map(RdmaStream::new)
    }

    /// [`connect`](Self::connect), failing with `TimedOut` after
    /// `timeout` (each step of the set-up also has its own limit,
    /// [`CONNECT_TIMEOUT`](super::CONNECT_TIMEOUT)).
    pub fn connect_timeout(addr: SocketAddr, timeout: Duration) -> io::Result<RdmaStream> {
        check_timeout(Some(timeout))?;
        block_on(Some(timeout), super::RdmaStream::connect(addr))
            .map_err(|e| match e.kind() {
                io::ErrorKind::WouldBlock => {
                    io::Error::new(io::ErrorKind::TimedOut, "the RDMA connection timed out")
                }
                _ => e,
            })
            .map(RdmaStream::new)
    }

    /// Sets how long the connection's driver busy-polls after each thing
    /// it handles before it sleeps, and a read that waits polls on the
    /// caller's thread ([`RdmaStream::set_busy_poll`](super::RdmaStream::set_busy_poll)):
    /// `Duration::MAX` for the lowest latency, at a CPU's cost.
    pub fn set_busy_poll(&self, time: Duration) {
        self.shared.set_busy_poll(time);
    }

    /// The busy-poll time.
    pub fn busy_poll(&self) -> Duration {
        self.shared.busy_poll()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        lock(&self.read).peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        lock(&self.read).local_addr()
    }

    /// Shuts down the write side (`Write`, `Both`: a FIN after the data,
    /// waiting until it is sent, within the write timeout) and/or the
    /// read side (`Read`, `Both`: later reads return `Ok(0)`; data the
    /// peer sends is still received and dropped with the stream).
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        runtime()?;
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            *lock(&self.read_shut) = true;
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            let t = *lock(&self.write_timeout);
            let mut w = lock(&self.write);
            block_on(t, w.shutdown())?;
        }
        Ok(())
    }

    /// Sets how long a read waits (`None`: forever); afterwards it fails
    /// with `WouldBlock`. A zero duration fails with `InvalidInput`.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        *lock(&self.read_timeout) = check_timeout(timeout)?;
        Ok(())
    }

    /// Sets how long a write (or a write shutdown) waits for room (`None`:
    /// forever); afterwards it fails with `WouldBlock`. A zero duration
    /// fails with `InvalidInput`.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        *lock(&self.write_timeout) = check_timeout(timeout)?;
        Ok(())
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(*lock(&self.read_timeout))
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(*lock(&self.write_timeout))
    }
}

impl Read for &RdmaStream {
    /// Blocks until data arrives: the bytes read, `Ok(0)` at the end of
    /// the stream (or after a read shutdown), `WouldBlock` after the read
    /// timeout, `Unsupported` inside a tokio runtime.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        runtime()?;
        if *lock(&self.read_shut) {
            return Ok(0);
        }
        let t = *lock(&self.read_timeout);
        let mut r = lock(&self.read);
        block_on(t, r.read(buf))
    }
}

impl Write for &RdmaStream {
    /// Blocks until some of `buf` is in a send buffer (or, for a small
    /// write with nothing before it, sent at once); `WouldBlock` after
    /// the write timeout, `Unsupported` inside a tokio runtime.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        runtime()?;
        let t = *lock(&self.write_timeout);
        let mut w = lock(&self.write);
        block_on(t, w.write(buf))
    }

    /// Written data is in registered buffers already: an error only when
    /// the connection has ended.
    fn flush(&mut self) -> io::Result<()> {
        runtime()?;
        let mut w = lock(&self.write);
        block_on(None, w.flush())
    }
}

impl Read for RdmaStream {
    /// As `&RdmaStream`'s.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for RdmaStream {
    /// As `&RdmaStream`'s.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    /// As `&RdmaStream`'s.
    fn flush(&mut self) -> io::Result<()> {
        (&*self).flush()
    }
}

impl std::fmt::Debug for RdmaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaStream")
            .field("local", &self.local_addr().ok())
            .field("peer", &self.peer_addr().ok())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:7471".parse().unwrap()
    }

    #[test]
    fn stream_blocking_calls_inside_a_runtime_are_refused_not_panics() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (c, l) = rt.block_on(async {
            let c = tokio::spawn(async { RdmaStream::connect(addr()).map(|_| ()) })
                .await
                .unwrap();
            (c, RdmaListener::bind(addr()).map(|_| ()))
        });
        for r in [c, l] {
            assert_eq!(r.unwrap_err().kind(), io::ErrorKind::Unsupported);
        }
        // Under `enter`, too (no task, but a runtime context).
        let _in = rt.enter();
        let e = RdmaStream::connect_timeout(addr(), Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }

    #[test]
    fn stream_blocking_zero_timeouts_are_refused() {
        assert!(check_timeout(Some(Duration::ZERO)).is_err());
        assert_eq!(check_timeout(None).unwrap(), None);
        let d = Duration::from_millis(5);
        assert_eq!(check_timeout(Some(d)).unwrap(), Some(d));
        let e = RdmaStream::connect_timeout(addr(), Duration::ZERO).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
