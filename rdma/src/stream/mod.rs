#![cfg_attr(not(feature = "tokio"), allow(rustdoc::broken_intra_doc_links))]
#![cfg_attr(not(feature = "tokio"), allow(dead_code))]
//! Byte streams over RDMA RC connections, with tokio's
//! [`AsyncRead`](tokio::io::AsyncRead) and
//! [`AsyncWrite`](tokio::io::AsyncWrite) (feature `tokio`): [`RdmaListener`] and
//! [`RdmaStream`] mirror `tokio::net::TcpListener` and `TcpStream`, so code
//! written against those traits (`tokio::io::copy`, codecs, ...) runs over
//! RDMA unchanged.
//!
//! ```no_run
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
//! ```
//!
//! # Design
//! Each stream has its own protection domain, completion queue (with its
//! completion channel) and RC queue pair, connected through the connection
//! manager ([`AsyncCm`](crate::cm::AsyncCm)), and one registered region holding
//! [`RECV_SLOTS`] receive buffers and [`SEND_SLOTS`] send buffers of
//! [`SLOT_SIZE`] bytes each (2 MiB in all), plus two small control
//! buffers.
//!
//! The CM id (and with it the QP), with the bookkeeping of what is
//! posted (credits, buffers in flight), forms the connection's *core*,
//! which lives in a small state shared under one mutex with the received
//! segments not read yet, the free send buffers, the filled ones not
//! posted yet, and a waker for each side; the CQ is polled only under
//! that lock, so completions are handled in order. Whoever holds the lock
//! may drive the core: take completions, post what can be posted. A
//! *driver task*, spawned on the current runtime when the stream is made,
//! does so when nobody else does, handles the CM's events and closes the
//! connection; it owns the core once the connection ends.
//!
//! A write posts its data at once when nothing written is in flight (or
//! it filled a buffer); else the driver's next pass (or the pump after
//! the next completion) posts it, so that small writes meanwhile join the
//! buffer. In flight: a send buffer whose SEND has not completed, or more
//! than one message whose credit the peer has not returned. A read that
//! finds nothing polls the CQ itself, and while the connection's
//! busy-poll time lasts it polls again (its task wakes itself) rather
//! than sleep: a message that arrives is read in the reader's own task,
//! with no hand-over from the driver's, as an rsockets caller polls its
//! own CQ. Meanwhile the driver leaves the CQ to the reader and sleeps
//! (it looks again after 1 ms, then after 2, 4 and 8 ms while the read
//! still polls, in case the read was cancelled: a read dropped mid-poll
//! leaves completions waiting for up to about 8 ms). When the time passes
//! the reader sleeps, and the driver takes over.
//!
//! The driver, in turn, after each thing it handles (a completion, data
//! to post) busy-polls the CQ for that time, yielding to the runtime's
//! other tasks after each pass of a few polls, and only then arms the CQ
//! and sleeps on the completion channel. A half that queued work wakes it
//! through a [`tokio::sync::Notify`] (not while it busy-polls: it looks
//! at the state on its next pass); it wakes a half through its waker.
//! The time is [`DEFAULT_BUSY_POLL`] by default, set per connection with
//! [`RdmaStream::set_busy_poll`]. `Duration::MAX` never sleeps, for the
//! lowest latency at a CPU's cost, as rsockets' spinning callers do.
//!
//! Copies: a write copies the caller's bytes into a free send buffer (one
//! copy), the device SENDs them from there into one of the peer's posted
//! receive buffers (DMA, no CPU copy), and a read copies them out into the
//! caller's buffer (one copy). A message of up to 64 bytes of data goes
//! inline instead, where the QP takes that much inline data (rxe and siw
//! do): the provider copies it into the work request at post
//! time, which spares the device a read of the buffer (as rsockets sends
//! small messages), and frees the buffer at once. A write of up to 64
//! bytes with nothing written before it still waiting or in flight takes
//! no buffer at all: the write posts it itself, inline from a copy on its
//! stack, in the call (as rsockets' `rsend` does). Such a SEND goes
//! unsignalled, up to seven in a row, the eighth signalled: its
//! completion shows theirs (a send queue completes in order), so a small
//! message's round trip takes one completion on each side, not two. Data
//! that went inline is known delivered once a successful completion (its
//! own, or a later data SEND's) or a credit the peer returned for its
//! message or a later one shows it; until then a flush or shutdown after
//! the connection ended reports it lost. At the close a side that got
//! data after its FIN went (a half-close) returns the credits it still
//! owes in one last credit-only message, and waits for it (up to
//! [`LINGER`]) before it disconnects, so that the peer learns its data
//! arrived.
//! Small writes are
//! coalesced into the send buffer not posted yet while others are in
//! flight, so a run of small writes costs fewer SENDs.
//!
//! # Wire format and flow control
//! Every message is a SEND of an 8-byte header and up to
//! [`MAX_PAYLOAD`] bytes of data. The header is one little-endian `u64`:
//! the low 16 bits are the credits it returns, bits 24 to 29 the wire
//! format's version (1), bit 31 is FIN (the sender's last message), bit 30
//! is MSG (below), the other bits are zero; a header of another version
//! ends the connection with an error rather than being misread.
//! Eight bytes keep the data on whole 8-byte words of the buffers, which
//! the copies into and out of them move a word at a time. (A SEND with
//! immediate data would carry the low 32 bits, but iWARP, and so siw, has
//! no immediate data.)
//!
//! Credits make sure that a SEND never meets an empty receive queue, so
//! no receiver-not-ready retry is ever needed (iWARP has none, and the
//! connection is made with an RNR retry count of 0, so a violation would
//! show as an error on rxe too):
//! - each side knows how many receives the peer has posted that its own
//!   SENDs have not used (its credits; [`RECV_SLOTS`] at the start, since
//!   both sides post their whole ring before connecting);
//! - data and FIN take a credit only while at least two are left: the last
//!   one is kept for a credit-only message, so that two sides that both
//!   ran out cannot wait for each other;
//! - a receiver returns a credit per receive it posts again (once the
//!   reader has copied out the whole buffer): on the next data message, or
//!   in a credit-only message as soon as half the ring is due back.
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

use std::time::Duration;

#[cfg(feature = "tokio")]
pub mod blocking;
#[cfg(feature = "tokio")]
mod io;
#[cfg(feature = "tokio")]
mod msg;
#[cfg(feature = "tokio")]
pub use io::{OwnedReadHalf, OwnedWriteHalf, RdmaListener, RdmaStream, BACKLOG};
#[cfg(feature = "tokio")]
pub use msg::{Message, MessageEndpoint, MessageListener};

/// Receive buffers each side posts: the credits a peer starts with.
pub const RECV_SLOTS: usize = 16;
/// Send buffers of a stream: what a writer may fill ahead of its credits.
pub const SEND_SLOTS: usize = 16;
/// Bytes of each receive and send buffer (a header and the data).
pub const SLOT_SIZE: usize = 64 * 1024;
/// Bytes of the header of each message (a word: the data after it stays
/// 8-byte aligned).
pub const HEADER_LEN: usize = 8;
/// The most data one message carries.
pub const MAX_PAYLOAD: usize = SLOT_SIZE - HEADER_LEN;
/// One-sided requests (RDMA WRITE, READ) a connection has posted at once;
/// more wait in order.
pub const ONE_SIDED_SLOTS: usize = 16;
/// The largest message of a [`MessageEndpoint`]: one receive buffer less
/// the header.
pub const MAX_MESSAGE: usize = MAX_PAYLOAD;
/// How long a dropped stream keeps sending what was written before it
/// disconnects anyway.
pub const LINGER: Duration = Duration::from_secs(2);
/// How long a closing stream waits for its posted requests to complete
/// before it destroys the QP regardless.
pub const FLUSH_WAIT: Duration = Duration::from_secs(2);
/// How long each step of connection set-up may take. The listener sets
/// requests up one at a time, so under a burst of connects a requester's
/// last step waits for those ahead of it: the limit is generous, as a TCP
/// connect's is.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection's driver busy-polls its completion queue after
/// each thing it handles (a completion, data to post) before it sleeps on
/// the completion channel, and a waiting read polls it before it sleeps,
/// by default: see
/// [`RdmaStream::set_busy_poll`]. `RDMA_STREAM_SPIN_US` (microseconds,
/// read once per process; 0 none) sets another default. Waking from the
/// channel costs a reactor wait, a read and a re-arm, more than a small
/// message's round trip on hardware; the polling yields to the runtime's
/// other tasks.
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(50);

// ------------------------------------------------------------ wire format

/// Bit 31 of the header: the sender's last message.
const FIN_BIT: u32 = 1 << 31;
/// Bit 30 of the header: one message of a message connection (its data,
/// possibly none, is the message).
const MSG_BIT: u32 = 1 << 30;
/// The header bits that carry returned credits.
const CREDIT_MASK: u32 = 0xffff;
/// The lowest header bit of the wire format's version.
const VERSION_SHIFT: u32 = 24;
/// The header bits that carry the wire format's version.
const VERSION_MASK: u32 = 0x3f << VERSION_SHIFT;
/// The wire format's version, in bits 24 to 29 of every header: 1, the
/// 8-byte header. (Before it a 4-byte header had these bits zero, and
/// refused a header with any of them set: the two formats refuse each
/// other's messages rather than misread them.)
const WIRE_VERSION: u32 = 1;

/// The header of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    /// Receives the sender posted again since its last message.
    credits: u16,
    /// The sender's last message: EOF follows its data.
    fin: bool,
    /// A message of a message connection (set on every data SEND there,
    /// never on a stream).
    msg: bool,
}

impl Header {
    fn encode(self) -> u32 {
        u32::from(self.credits)
            | WIRE_VERSION << VERSION_SHIFT
            | if self.fin { FIN_BIT } else { 0 }
            | if self.msg { MSG_BIT } else { 0 }
    }

    /// The header of `word`; an error when it has another version or a
    /// reserved bit set.
    fn decode(word: u32) -> Result<Header, String> {
        let version = (word & VERSION_MASK) >> VERSION_SHIFT;
        if version != WIRE_VERSION {
            return Err(format!(
                "a header of wire format version {version}, not {WIRE_VERSION} \
                 (the peer runs another version of rdma::stream)"
            ));
        }
        if word & !(FIN_BIT | MSG_BIT | VERSION_MASK | CREDIT_MASK) != 0 {
            return Err(format!("a header with reserved bits set ({word:#010x})"));
        }
        Ok(Header {
            credits: (word & CREDIT_MASK) as u16,
            fin: word & FIN_BIT != 0,
            msg: word & MSG_BIT != 0,
        })
    }

    fn to_bytes(self) -> [u8; HEADER_LEN] {
        u64::from(self.encode()).to_le_bytes()
    }

    /// The header's 8 wire bytes as the word a native-endian load of them
    /// gives (what `MemoryRegion::write_word` stores back as those bytes).
    fn to_word(self) -> u64 {
        u64::from_ne_bytes(self.to_bytes())
    }

    /// The header of `word`, a native-endian load of its 8 wire bytes: as
    /// [`from_bytes`](Self::from_bytes).
    #[inline]
    fn from_word(word: u64) -> Result<Header, String> {
        let le = u64::from_le(word);
        // The valid form, decided inline: the version, no reserved bit.
        if le & !u64::from(FIN_BIT | MSG_BIT | CREDIT_MASK)
            == u64::from(WIRE_VERSION << VERSION_SHIFT)
        {
            let w = le as u32;
            return Ok(Header {
                credits: (w & CREDIT_MASK) as u16,
                fin: w & FIN_BIT != 0,
                msg: w & MSG_BIT != 0,
            });
        }
        Header::from_bad_word(word)
    }

    /// [`from_word`](Self::from_word)'s error.
    #[cold]
    #[inline(never)]
    fn from_bad_word(word: u64) -> Result<Header, String> {
        Header::from_bytes(word.to_ne_bytes())
    }

    /// The header of `b`; an error as [`decode`](Self::decode)'s (of the
    /// low 32 bits, which hold the version), or when a bit of the high 32
    /// (reserved) is set.
    fn from_bytes(b: [u8; HEADER_LEN]) -> Result<Header, String> {
        let word = u64::from_le_bytes(b);
        let h = Header::decode(word as u32)?;
        if word >> 32 != 0 {
            return Err(format!("a header with reserved bits set ({word:#018x})"));
        }
        Ok(h)
    }
}

// ------------------------------------------------------------ credits

/// The credit accounting of one side.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Credits {
    /// Receives the peer has posted that our SENDs have not used.
    send: u32,
    /// Receives we posted again that the peer does not know of yet.
    owed: u32,
    /// Receives each side posts (the ring).
    ring: u32,
    /// Credits owed that make a credit-only message due: half the ring,
    /// and at least one.
    due: u32,
}

impl Credits {
    fn new(ring: u32) -> Credits {
        Credits {
            send: ring,
            owed: 0,
            ring,
            due: ring.div_ceil(2).max(1),
        }
    }

    /// Whether a data message (or a FIN) may go: it must leave the last
    /// credit for a credit-only message.
    fn can_send_data(&self) -> bool {
        self.send >= 2
    }

    /// Whether a credit-only message is due: half the ring is owed, and a
    /// credit (the last one, possibly) is there to carry it.
    fn credit_only_due(&self) -> bool {
        self.owed >= self.due && self.send >= 1
    }

    /// Whether credits are owed and a credit is there to carry them.
    fn owes_any(&self) -> bool {
        self.owed > 0 && self.send >= 1
    }

    /// Takes a credit for a message and the credits it returns.
    fn take(&mut self) -> u16 {
        debug_assert!(self.send >= 1);
        self.send -= 1;
        let n = self.owed.min(u32::from(u16::MAX));
        self.owed -= n;
        n as u16
    }

    /// A receive was posted again.
    fn reposted(&mut self) {
        self.owed += 1;
    }

    /// The peer returned `n` credits; an error when it returns more than
    /// it can owe (a broken peer).
    fn returned(&mut self, n: u16) -> Result<(), ()> {
        let send = self.send + u32::from(n);
        if send > self.ring {
            return Err(());
        }
        self.send = send;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn stream_header_round_trips_and_rejects_reserved_bits() {
        for credits in [0u16, 1, 8, 16, 0x7fff, u16::MAX] {
            for fin in [false, true] {
                for msg in [false, true] {
                    let h = Header { credits, fin, msg };
                    assert_eq!(Header::decode(h.encode()), Ok(h));
                    assert_eq!(Header::from_bytes(h.to_bytes()), Ok(h));
                    assert_eq!(Header::from_word(h.to_word()), Ok(h));
                    assert_eq!(h.to_word().to_ne_bytes(), h.to_bytes());
                }
            }
        }
        assert_eq!(
            Header {
                credits: 3,
                fin: true,
                msg: false
            }
            .to_bytes(),
            [3, 0, 0, 0x81, 0, 0, 0, 0]
        );
        assert_eq!(
            Header {
                credits: 1,
                fin: false,
                msg: true
            }
            .to_bytes(),
            [1, 0, 0, 0x41, 0, 0, 0, 0]
        );
        let v = WIRE_VERSION << VERSION_SHIFT;
        assert!(Header::decode(v | 1 << 16).is_err());
        assert!(Header::decode(v | 1 << 23 | 5).is_err());
        for bit in 32..64 {
            let b = ((1u64 << bit) | u64::from(v) | 5).to_le_bytes();
            let e = Header::from_bytes(b).unwrap_err();
            assert!(e.contains("reserved"), "bit {bit}: {e}");
        }
        // The 4-byte header's words (version bits zero: data, FIN, a
        // message), and other versions, are refused by version.
        for word in [3, 3 | FIN_BIT, 1 | MSG_BIT, 2 << 24 | 3, VERSION_MASK] {
            let e = Header::decode(word).unwrap_err();
            assert!(e.contains("wire format version"), "{word:#x}: {e}");
            let e = Header::from_bytes(u64::from(word).to_le_bytes()).unwrap_err();
            assert!(e.contains("wire format version"), "{word:#x}: {e}");
        }
        // `from_word`'s inline check agrees with `from_bytes` on every
        // header with one bit changed: each reserved or version bit is
        // refused, with the same error.
        for credits in [0u16, 5, u16::MAX] {
            for fin in [false, true] {
                let h = Header {
                    credits,
                    fin,
                    msg: !fin,
                };
                let w = u64::from_le_bytes(h.to_bytes());
                for bit in 0..64 {
                    let b = (w ^ 1 << bit).to_le_bytes();
                    let (word, bytes) = (
                        Header::from_word(u64::from_ne_bytes(b)),
                        Header::from_bytes(b),
                    );
                    assert_eq!(word, bytes, "bit {bit} of {w:#x}");
                    let reserved = !(FIN_BIT | MSG_BIT | CREDIT_MASK);
                    assert_eq!(
                        word.is_err(),
                        bit >= 32 || reserved & 1 << bit != 0,
                        "bit {bit}"
                    );
                }
            }
        }
    }

    #[test]
    fn stream_credits_keep_the_last_one_for_a_credit_message() {
        let mut c = Credits::new(4);
        assert!(c.can_send_data());
        assert_eq!(c.take(), 0);
        c.take();
        c.take();
        // One left: no data, and no credit-only message while nothing is owed.
        assert_eq!(c.send, 1);
        assert!(!c.can_send_data());
        assert!(!c.credit_only_due());
        c.reposted();
        assert!(!c.credit_only_due());
        c.reposted();
        // Half the ring owed: a credit-only message may use the last credit.
        assert!(c.credit_only_due());
        assert_eq!(c.take(), 2);
        assert_eq!((c.send, c.owed), (0, 0));
        assert!(!c.credit_only_due());
        assert_eq!(c.returned(3), Ok(()));
        assert!(c.can_send_data());
        // More than the ring: a broken peer.
        assert_eq!(c.returned(2), Err(()));
        assert_eq!(c.send, 3);
    }

    /// One side of the model below.
    struct Side {
        credits: Credits,
        /// Receives posted (what the peer's SENDs may use).
        posted: u32,
        /// Received messages not read yet.
        unread: u32,
        /// Data messages still to send.
        to_send: u32,
        received: u32,
    }

    /// Two sides sending through the credit rules with bursts of reading
    /// and writing in a pseudo-random order: no message ever meets an
    /// empty receive queue, and everything arrives (no deadlock).
    #[test]
    fn stream_credit_model_never_overruns_and_never_deadlocks() {
        const RING: u32 = 4;
        // Fewer under Miri, where each step is slow.
        const N: u32 = if cfg!(miri) { 40 } else { 500 };
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut s = [0, 1].map(|_| Side {
            credits: Credits::new(RING),
            posted: RING,
            unread: 0,
            to_send: N,
            received: 0,
        });
        // In-flight messages towards side i: credits carried.
        let mut wire: [VecDeque<(u16, bool)>; 2] = [VecDeque::new(), VecDeque::new()];
        for _step in 0..200_000 {
            if s.iter().all(|x| x.to_send == 0) && s.iter().all(|x| x.received == N) {
                return;
            }
            let i = (rnd() % 2) as usize;
            let j = 1 - i;
            match rnd() % 4 {
                // Read (and repost) some of what arrived.
                0 => {
                    let n = (rnd() % 3) as u32;
                    for _ in 0..n.min(s[i].unread) {
                        s[i].unread -= 1;
                        s[i].posted += 1;
                        s[i].credits.reposted();
                    }
                }
                // Deliver a message in flight to i.
                1 => {
                    if let Some((credits, data)) = wire[i].pop_front() {
                        assert!(s[i].posted > 0, "a SEND met an empty receive queue");
                        s[i].posted -= 1;
                        s[i].credits.returned(credits).unwrap();
                        if data {
                            s[i].unread += 1;
                            s[i].received += 1;
                        } else {
                            // Control messages are reposted at once.
                            s[i].posted += 1;
                            s[i].credits.reposted();
                        }
                    }
                }
                // Send what the rules allow (the driver's pump).
                _ => {
                    while s[i].to_send > 0 && s[i].credits.can_send_data() {
                        s[i].to_send -= 1;
                        let c = s[i].credits.take();
                        wire[j].push_back((c, true));
                    }
                    if s[i].credits.credit_only_due() {
                        let c = s[i].credits.take();
                        wire[j].push_back((c, false));
                    }
                }
            }
        }
        panic!(
            "stalled: sent {:?}, received {:?}",
            s.iter().map(|x| N - x.to_send).collect::<Vec<_>>(),
            s.iter().map(|x| x.received).collect::<Vec<_>>()
        );
    }
}
