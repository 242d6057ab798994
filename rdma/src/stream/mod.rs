#![cfg_attr(not(feature = "stream"), allow(rustdoc::broken_intra_doc_links))]
#![cfg_attr(not(feature = "stream"), allow(dead_code))]
//! Byte streams over RDMA RC connections, with tokio's
//! [`AsyncRead`](tokio::io::AsyncRead) and
//! [`AsyncWrite`](tokio::io::AsyncWrite) (feature `stream`): [`RdmaListener`] and
//! [`RdmaStream`] mirror `tokio::net::TcpListener` and `TcpStream`, so code
//! written against those traits (`tokio::io::copy`, codecs, ...) runs over
//! RDMA unchanged.
//!
//! ```no_run
//! # #[cfg(feature = "stream")]
//! # mod demo {
//! use rdma::stream::{RdmaListener, RdmaStream};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # async fn demo() -> std::io::Result<()> {
//! // The server: echoes every byte back, one task per connection.
//! let mut listener = RdmaListener::bind("192.168.1.10:7471".parse().unwrap())?;
//! tokio::spawn(async move {
//!     loop {
//!         let Ok((stream, _peer)) = listener.accept().await else { break };
//!         tokio::spawn(async move {
//!             let (mut rd, mut wr) = stream.into_split();
//!             tokio::io::copy(&mut rd, &mut wr).await?;
//!             wr.shutdown().await
//!         });
//!     }
//! });
//!
//! // The client: sends a message, closes its side, reads the echo to EOF.
//! let mut stream = RdmaStream::connect("192.168.1.10:7471".parse().unwrap()).await?;
//! stream.write_all(b"hello over RDMA").await?;
//! stream.shutdown().await?;
//! let mut echo = Vec::new();
//! stream.read_to_end(&mut echo).await?;
//! assert_eq!(echo, b"hello over RDMA");
//! # Ok(())
//! # }
//! # }
//! ```
//!
//! # Design
//! Each stream has its own protection domain, completion queue and RC
//! queue pair, connected through the connection manager
//! ([`AsyncCm`](crate::cm::AsyncCm)), and one registered region holding
//! receive buffers and send buffers, by default [`RECV_SLOTS`] and
//! [`SEND_SLOTS`] of [`SLOT_SIZE`] bytes each (2 MiB in all); a
//! [`StreamConfig`] sets other numbers and sizes for one side. A *driver task*, spawned on
//! the current runtime when the stream is made, takes completions, posts
//! what was written, handles the connection manager's events and closes
//! the connection; a read or write that waits may take completions
//! itself, in its own task.
//!
//! Copies: a write copies the caller's bytes into a free send buffer (one
//! copy), the device SENDs them into one of the peer's receive buffers
//! (DMA, no CPU copy), and a read copies them out into the caller's buffer
//! (one copy). A message of up to 64 bytes of data goes inline where the
//! device takes inline data (rxe and siw do), as rsockets sends small
//! messages; small writes made while earlier data is in flight are
//! coalesced into one SEND.
//!
//! Busy polling: after each thing it handles the driver polls the
//! completion queue for a while before it sleeps on the completion
//! channel, and a read that finds nothing polls it itself for that time
//! before it sleeps, so that a reply that comes soon is taken without a
//! wake-up. The time is [`DEFAULT_BUSY_POLL`] by default, set per
//! connection with [`RdmaStream::set_busy_poll`]. `Duration::MAX` never
//! sleeps, for the lowest latency at a CPU's cost, as rsockets' spinning
//! callers do. The polling yields to the runtime's other tasks.
//!
//! # Set-up
//! Each side tells the other its receive buffers (how many, how large) in
//! the private data of its connect or accept (16 bytes: the mark `RDMS`,
//! the format's version, the two numbers; the CM allows 56 bytes in a
//! request on InfiniBand and RoCE, 196 in an accept, more on iWARP). The
//! two sides may choose differently: a side's credits start at the
//! peer's receive buffers, and a message carries at most the smaller of
//! the two sides' buffers less the header. Private data that is not a
//! stream's (another program, another version, values out of range) ends
//! the set-up with `InvalidData` carrying a [`StreamConfigError`]: the
//! listener rejects the request and [`RdmaListener::accept`] returns the
//! error; [`RdmaStream::connect`] returns it.
//!
//! # Wire format and flow control
//! Every message is a SEND of an 8-byte header (the credits it returns,
//! the end of the stream, the wire format's version) and up to
//! [`MAX_PAYLOAD`] bytes of data; a peer of another wire format version is
//! refused with an error rather than misread. Credits make sure that a
//! SEND never meets an empty receive queue, so no receiver-not-ready retry
//! is ever needed (iWARP, and so siw, has none).
//!
//! Back-pressure follows: a writer whose peer does not read fills the
//! peer's ring and then its own send buffers, and then
//! [`poll_write`](tokio::io::AsyncWrite::poll_write) returns `Pending` until the
//! peer reads. At most `SEND_SLOTS + RECV_SLOTS - 1` buffers of data are
//! ever in flight.
//!
//! # Closing
//! [`poll_shutdown`](tokio::io::AsyncWrite::poll_shutdown) (and dropping the write
//! half) queues a FIN after the data; the peer reads EOF (`Ok(0)`) once it
//! has read everything before it. Reading stays possible (a half-close).
//! When the stream, or both of its halves, is dropped, the driver sends
//! what was written and the FIN (and, if data came after an earlier FIN,
//! the credits for it: see above) (for up to [`LINGER`]), then disconnects
//! (`rdma_disconnect`), waits (for up to [`FLUSH_WAIT`]) until every
//! posted request has completed (flushed, usually) and destroys the QP,
//! the CM id and the CQ; the region goes with the last handle.
//!
//! When the peer disconnects or goes away (its process dies), the CM
//! reports `Disconnected`, and on siw the posted receives complete as
//! flushed first: either ends the connection. A read then returns the
//! data already received, then EOF if the peer's FIN came, or
//! `ConnectionReset` if it did not; a write fails with `BrokenPipe`. A
//! peer whose host vanishes without a word is noticed only when a SEND
//! exhausts its transport retries.
//!
//! # Cancellation
//! [`RdmaStream::connect`] is cancellation-safe: dropping the future
//! destroys whatever it had made. So is [`RdmaListener::accept`]: a task
//! of the listener accepts requests in the background, up to [`BACKLOG`]
//! ahead, and `accept` only takes the next one from that queue. The
//! `poll_*` functions keep no state between calls: what they return is
//! done, `Pending` changes nothing, so futures built on them (tokio's
//! `read`, `write`) are cancellation-safe as tokio documents them.
//!
//! # Messages
//! [`MessageListener`] and [`MessageEndpoint`] carry whole messages of
//! 0 to [`MAX_MESSAGE`] bytes over the same connection, driver, buffers
//! and credits as a stream: each message is one SEND into one of the
//! peer's receive buffers, with bit 30 (MSG) of the header set, so an
//! empty message differs from a credit-only one. Messages arrive whole,
//! in order, and none is lost; a sender waits while its send buffers are
//! full (back-pressure). [`recv`](MessageEndpoint::recv) returns a
//! [`Message`], which holds its receive buffer (and so the sender's
//! credit) until it is dropped. A stream and a message endpoint do not
//! talk to each other: the first data either sends ends the connection
//! with a protocol error.
//!
//! # One-sided requests
//! [`RdmaStream::write_remote`] and [`read_remote`](RdmaStream::read_remote)
//! (and the same on [`MessageEndpoint`]) RDMA WRITE and READ a peer's
//! [`RemoteMemory`](crate::RemoteMemory), which the peer registered in its
//! connection's protection domain ([`RdmaStream::register`]) and sent
//! over (its [`to_bytes`](crate::RemoteMemory::to_bytes) form, 20 bytes,
//! in a message or on the stream). They take no credit; the driver posts
//! them in order, up to [`ONE_SIDED_SLOTS`] at once, and holds the local
//! region until each completes. Local mistakes are refused before
//! posting; what the peer's device refuses (bad rkey, out of its region,
//! no right) ends the RC connection, as RC does: see
//! [`RdmaStream::write_remote`]. On rxe and siw alike the connection
//! grants remote READ and WRITE to the peer's requests on regions that
//! allow them (the connection is made with one responder resource, so
//! one READ from each side is served at a time).
//!
//! # Blocking use
//! [`blocking::RdmaListener`] and [`blocking::RdmaStream`] are the same
//! streams with `std::io::Read` and `Write` for threads without a
//! runtime; see [`blocking`].

#[cfg(feature = "stream")]
pub mod blocking;
#[cfg(feature = "stream")]
mod busy_poll;
mod config;
mod credits;
#[cfg(feature = "stream")]
mod driver;
#[cfg(feature = "stream")]
mod engine;
#[cfg(all(test, feature = "stream"))]
mod engine_tests;
#[cfg(feature = "stream")]
mod error;
#[cfg(feature = "stream")]
mod handshake;
#[cfg(feature = "stream")]
mod layout;
#[cfg(feature = "stream")]
mod listener;
#[cfg(feature = "stream")]
mod msg;
#[cfg(feature = "stream")]
mod pump;
#[cfg(feature = "stream")]
mod rdma_stream;
#[cfg(feature = "stream")]
mod setup;
#[cfg(feature = "stream")]
mod shared;
#[cfg(feature = "stream")]
mod signalling;
#[cfg(feature = "stream")]
mod split;
#[cfg(feature = "stream")]
mod stream_config;
mod wire;

pub use config::{
    CONNECT_TIMEOUT, DEFAULT_BUSY_POLL, FLUSH_WAIT, HEADER_LEN, LINGER, MAX_MESSAGE, MAX_PAYLOAD,
    ONE_SIDED_SLOTS, RECV_SLOTS, SEND_SLOTS, SLOT_SIZE,
};
#[cfg(feature = "stream")]
pub use listener::{RdmaListener, BACKLOG};
#[cfg(feature = "stream")]
pub use msg::{Message, MessageEndpoint, MessageListener};
#[cfg(feature = "stream")]
pub use rdma_stream::RdmaStream;
#[cfg(feature = "stream")]
pub use split::{OwnedReadHalf, OwnedWriteHalf};
#[cfg(feature = "stream")]
pub use stream_config::{
    StreamConfig, StreamConfigError, MAX_BUFFERS, MAX_BUFFER_SIZE, MIN_BUFFER_SIZE,
    MIN_RECV_BUFFERS,
};
