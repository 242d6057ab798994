//! The stream: [`RdmaStream`].

use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::{AccessFlags, MemoryRegion, ProtectionDomain, RemoteMemory};

use super::engine::Mode;
use super::setup::connect;
use super::shared::Shared;
use super::split::Spin;
use super::{OwnedReadHalf, OwnedWriteHalf, StreamConfig};

impl RdmaStream {
    /// The connection's state, shared with its driver.
    pub(super) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.read.shared)
    }

    pub(super) fn from_shared(shared: Arc<Shared>) -> RdmaStream {
        RdmaStream {
            read: OwnedReadHalf {
                shared: Arc::clone(&shared),
                spin: Spin::default(),
            },
            write: OwnedWriteHalf { shared },
        }
    }
}

// ------------------------------------------------------------ stream

/// A connected RDMA byte stream.
///
/// Reads and writes go through registered buffers that the stream's own
/// calls and a driver task (on the runtime that made the stream) post and
/// complete; see the
/// [module docs](crate::stream) for the design and its guarantees.
pub struct RdmaStream {
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
}

impl RdmaStream {
    /// Connects to a listener at `addr`. Must be called inside a tokio
    /// runtime, which then runs the stream's driver task.
    ///
    /// Cancellation-safe: dropping the future at any point destroys
    /// whatever it had made.
    pub async fn connect(addr: SocketAddr) -> io::Result<RdmaStream> {
        RdmaStream::connect_with(addr, &StreamConfig::new()).await
    }

    /// [`connect`](Self::connect) with the buffers and busy-poll time of
    /// `config` (the listener may use others: each side learns the
    /// other's receive buffers at set-up). Fails with `InvalidInput`
    /// carrying a [`StreamConfigError`](super::StreamConfigError) when the
    /// device cannot hold them, and with `InvalidData` carrying one when
    /// the peer's accept is not a stream's.
    pub async fn connect_with(addr: SocketAddr, config: &StreamConfig) -> io::Result<RdmaStream> {
        connect(addr, Mode::Stream, config)
            .await
            .map(RdmaStream::from_shared)
    }

    /// The connection's protection domain, for regions that the peer
    /// reaches with one-sided requests or that [`write_remote`](Self::write_remote)
    /// and [`read_remote`](Self::read_remote) use.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.read.shared.pd
    }

    /// Registers `len` zeroed bytes in the connection's protection domain
    /// with `access` (e.g. `LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ` for
    /// a region the peer writes and reads; send its
    /// [`remote`](MemoryRegion::remote) descriptor to the peer, e.g. in a
    /// message). The region stays valid after the stream is gone.
    pub fn register(&self, len: usize, access: AccessFlags) -> io::Result<Arc<MemoryRegion>> {
        self.read.shared.register(len, access)
    }

    /// RDMA WRITEs `range` of `local` to the peer's `remote` and waits
    /// until the data is placed in the peer's memory (or refused). On
    /// InfiniBand and RoCE (rxe) the WRITE's completion says so (the
    /// peer acknowledged it); on iWARP (siw) a WRITE completes once sent,
    /// so the driver follows it with a zero-length READ, whose response
    /// comes only after the WRITE is placed: one round trip more.
    ///
    /// Checked before anything is posted, each an `InvalidInput` error
    /// that leaves the connection as it was: `range` lies in `local`,
    /// has `remote.len` bytes (take a part of a peer's range with
    /// [`RemoteMemory::slice`], which checks it too), at most 2 GiB, and
    /// `local` is in the connection's protection domain
    /// ([`register`](Self::register)); for a READ, `local` has
    /// `LOCAL_WRITE`.
    ///
    /// What only the peer's device can check (the rkey, the range within
    /// the peer's region, the region's rights) fails on the device. On
    /// InfiniBand and RoCE (rxe) the request completes with the peer's
    /// answer, returned as `PermissionDenied` (remote access error: bad
    /// rkey, out of range, no right) or `InvalidInput` (remote invalid
    /// request) or `ConnectionAborted` (other). On iWARP (siw) the peer
    /// answers with a Terminate message that ends the connection without
    /// telling the requester why: the request fails with
    /// `ConnectionAborted`, as after a disconnect. Either way the QP is
    /// then in the error state, as RC defines: the connection is over for
    /// everything (reads, writes, messages and other one-sided requests
    /// fail with the same error).
    ///
    /// Requests are posted in the order they are made, alongside the data,
    /// up to [`ONE_SIDED_SLOTS`](super::ONE_SIDED_SLOTS) at once; they take
    /// no credit (the peer's CPU is not involved). An RDMA WRITE is not
    /// ordered with the peer's reads of its region: tell the peer
    /// through a message or the stream after this returns.
    ///
    /// Cancellation-safe in the sense that matters for memory: dropping the
    /// future leaves the request to the driver, which holds a clone of
    /// `local` until the request completes, so the region is never freed
    /// under the device; the request may or may not have been done (a
    /// request still queued when its future is dropped is not posted).
    pub async fn write_remote(
        &self,
        local: &Arc<MemoryRegion>,
        range: Range<usize>,
        remote: &RemoteMemory,
    ) -> io::Result<()> {
        self.read
            .shared
            .one_sided(false, local, range, remote)
            .await
    }

    /// RDMA READs the peer's `remote` into `range` of `local` (which needs
    /// `LOCAL_WRITE`) and waits until the data is there. The checks,
    /// errors and cancellation are those of
    /// [`write_remote`](Self::write_remote).
    pub async fn read_remote(
        &self,
        local: &Arc<MemoryRegion>,
        range: Range<usize>,
        remote: &RemoteMemory,
    ) -> io::Result<()> {
        self.read.shared.one_sided(true, local, range, remote).await
    }

    /// Sets how long the connection's driver busy-polls for completions
    /// after each thing it handles (a completion, data written) before it
    /// sleeps on the completion channel, and how long a read that finds
    /// nothing polls the CQ itself before it sleeps (see the
    /// [module docs](crate::stream)).
    ///
    /// The default, [`DEFAULT_BUSY_POLL`](super::DEFAULT_BUSY_POLL), catches
    /// the reply of a fast round trip without the channel's wake-up.
    /// `Duration::ZERO` sleeps at once (the least CPU, the most latency);
    /// `Duration::MAX` never sleeps: the driver (or a waiting read) polls
    /// as long as the connection lives, a CPU's worth of it, for the
    /// lowest latency (as
    /// Linux's `SO_BUSY_POLL` does for a socket, and rsockets' non-blocking
    /// callers that spin). The polling yields to the runtime's other tasks
    /// after each pass of a few polls and looks at the clock every few
    /// passes, so the time is a lower bound; it stops early when the
    /// connection manager has news (the peer disconnected, the device
    /// went) or both halves are dropped.
    /// A new time applies at once, also to a driver polling. Times are kept
    /// in whole microseconds, rounded up. The halves share the setting
    /// ([`OwnedReadHalf::set_busy_poll`]).
    pub fn set_busy_poll(&self, time: Duration) {
        self.read.shared.set_busy_poll(time);
    }

    /// The busy-poll time ([`set_busy_poll`](Self::set_busy_poll)).
    pub fn busy_poll(&self) -> Duration {
        self.read.shared.busy_poll()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.read.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.read.local_addr()
    }

    /// Splits the stream into a read half and a write half that can move
    /// to different tasks. Dropping the write half shuts the write side
    /// down (the peer reads EOF); dropping both closes the stream.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        (self.read, self.write)
    }
}

impl std::fmt::Debug for RdmaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaStream")
            .field("local", &self.read.shared.local)
            .field("peer", &self.read.shared.peer)
            .finish_non_exhaustive()
    }
}

impl AsyncRead for RdmaStream {
    /// As [`OwnedReadHalf`]'s: cancellation-safe.
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl AsyncWrite for RdmaStream {
    /// As [`OwnedWriteHalf`]'s: cancellation-safe.
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.write).poll_write(cx, buf)
    }

    /// As [`OwnedWriteHalf`]'s: cancellation-safe.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.write).poll_flush(cx)
    }

    /// As [`OwnedWriteHalf`]'s: cancellation-safe.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.write).poll_shutdown(cx)
    }
}
