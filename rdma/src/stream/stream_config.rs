//! [`StreamConfig`]: the buffers and the busy-poll time of a connection,
//! chosen by each side, and its errors ([`StreamConfigError`]).

use std::fmt;
use std::time::Duration;

use super::{HEADER_LEN, RECV_SLOTS, SEND_SLOTS, SLOT_SIZE};

/// The version of the set-up format (the private data of connect and
/// accept: `handshake`).
pub(super) const VERSION: u8 = 1;
/// Buffers of a connection's region for header-only messages (FIN,
/// credits), beside the configured ones.
pub(super) const CTRL_SLOTS: usize = 2;
/// Bytes of each control buffer (a header, rounded up).
pub(super) const CTRL_SIZE: usize = 64;

/// The fewest receive buffers a side may post: data takes a credit only
/// while two are left (the last is kept for a credit-only message), so a
/// ring of one would carry no data.
pub const MIN_RECV_BUFFERS: usize = 2;
/// The most receive or send buffers of a side: a buffer's number is 16
/// bits of a work request id, and every buffer takes a completion queue
/// entry.
pub const MAX_BUFFERS: usize = 4096;
/// The smallest buffer: a header and some data.
pub const MIN_BUFFER_SIZE: usize = 64;
/// The largest buffer (a completion counts a message's bytes in 32 bits;
/// the device may allow less: see [`StreamConfig`]).
pub const MAX_BUFFER_SIZE: usize = 1 << 30;

/// The buffers and the busy-poll time of one side of a stream or message
/// connection ([`RdmaStream::connect_with`](super::RdmaStream::connect_with),
/// [`RdmaListener::bind_with`](super::RdmaListener::bind_with), the same on
/// [`MessageEndpoint`](super::MessageEndpoint) and
/// [`MessageListener`](super::MessageListener)).
///
/// The two sides may choose differently: each tells the other its receive
/// buffers (how many, how large) in the private data of the connection
/// request and of its accept, and a side sends at most as many messages
/// ahead as the peer posted receive buffers, each at most as large as the
/// smaller of its own send buffers and the peer's receive buffers.
///
/// The setters check each value ([`StreamConfigError`]); what depends on
/// the device (the region's size against `max_mr_size`, a message against
/// the port's `max_msg_sz`, the queues against `max_qp_wr` and
/// `max_cqe`) is checked when the connection is set up, which then fails
/// with `InvalidInput` carrying the [`StreamConfigError`].
///
/// ```
/// # #[cfg(feature = "stream")] {
/// use rdma::stream::StreamConfig;
/// use std::time::Duration;
///
/// let config = StreamConfig::new()
///     .with_recv_buffers(4)?
///     .with_send_buffers(4)?
///     .with_buffer_size(4096)?
///     .with_busy_poll(Duration::ZERO);
/// assert_eq!(config.region_len(), 8 * 4096 + 128);
/// assert!(StreamConfig::new().with_recv_buffers(0).is_err());
/// # }
/// # Ok::<(), rdma::stream::StreamConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    pub(super) recv_buffers: usize,
    pub(super) send_buffers: usize,
    pub(super) buffer_size: usize,
    pub(super) busy_poll: Option<Duration>,
}

impl Default for StreamConfig {
    fn default() -> StreamConfig {
        StreamConfig::new()
    }
}

impl StreamConfig {
    /// The defaults: [`RECV_SLOTS`] receive and [`SEND_SLOTS`] send buffers
    /// of [`SLOT_SIZE`] bytes, the process's default busy-poll time.
    pub const fn new() -> StreamConfig {
        StreamConfig {
            recv_buffers: RECV_SLOTS,
            send_buffers: SEND_SLOTS,
            buffer_size: SLOT_SIZE,
            busy_poll: None,
        }
    }

    /// Receive buffers this side posts: the messages the peer may send
    /// ahead of this side's reads. [`MIN_RECV_BUFFERS`] to [`MAX_BUFFERS`].
    pub fn with_recv_buffers(mut self, n: usize) -> Result<StreamConfig, StreamConfigError> {
        if n < MIN_RECV_BUFFERS {
            return Err(StreamConfigError::TooFewBuffers {
                what: "receive",
                n,
                min: MIN_RECV_BUFFERS,
            });
        }
        if n > MAX_BUFFERS {
            return Err(StreamConfigError::TooManyBuffers {
                what: "receive",
                n,
                max: MAX_BUFFERS,
            });
        }
        self.recv_buffers = n;
        Ok(self)
    }

    /// Send buffers: what a writer may fill ahead of its credits. 1 to
    /// [`MAX_BUFFERS`].
    pub fn with_send_buffers(mut self, n: usize) -> Result<StreamConfig, StreamConfigError> {
        if n == 0 {
            return Err(StreamConfigError::TooFewBuffers {
                what: "send",
                n,
                min: 1,
            });
        }
        if n > MAX_BUFFERS {
            return Err(StreamConfigError::TooManyBuffers {
                what: "send",
                n,
                max: MAX_BUFFERS,
            });
        }
        self.send_buffers = n;
        Ok(self)
    }

    /// Bytes of each receive and send buffer, its header
    /// ([`HEADER_LEN`]) included: a multiple of 8 (the data stays on whole
    /// words) from [`MIN_BUFFER_SIZE`] to [`MAX_BUFFER_SIZE`].
    pub fn with_buffer_size(mut self, size: usize) -> Result<StreamConfig, StreamConfigError> {
        if !(MIN_BUFFER_SIZE..=MAX_BUFFER_SIZE).contains(&size) || size % 8 != 0 {
            return Err(StreamConfigError::BufferSize {
                size,
                min: MIN_BUFFER_SIZE,
                max: MAX_BUFFER_SIZE,
            });
        }
        self.buffer_size = size;
        Ok(self)
    }

    /// The connection's busy-poll time at the start (see
    /// [`RdmaStream::set_busy_poll`](super::RdmaStream::set_busy_poll),
    /// which changes it later); by default the process's
    /// ([`DEFAULT_BUSY_POLL`](super::DEFAULT_BUSY_POLL), or
    /// `RDMA_STREAM_SPIN_US`).
    pub fn with_busy_poll(mut self, d: Duration) -> StreamConfig {
        self.busy_poll = Some(d);
        self
    }

    /// Receive buffers this side posts.
    pub fn recv_buffers(&self) -> usize {
        self.recv_buffers
    }

    /// Send buffers of this side.
    pub fn send_buffers(&self) -> usize {
        self.send_buffers
    }

    /// Bytes of each buffer, the header included.
    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    /// The busy-poll time set, if any.
    pub fn busy_poll(&self) -> Option<Duration> {
        self.busy_poll
    }

    /// The most data one message of this side carries, before the peer's
    /// receive buffers are known (the connection's own is the smaller of
    /// this and the peer's).
    pub fn max_payload(&self) -> usize {
        self.buffer_size - HEADER_LEN
    }

    /// Bytes of the connection's registered region: the buffers and two
    /// small control buffers.
    pub fn region_len(&self) -> usize {
        // Cannot overflow: at most 2 * 4096 buffers of 1 GiB (2^43 bytes).
        (self.recv_buffers + self.send_buffers) * self.buffer_size + CTRL_SLOTS * CTRL_SIZE
    }

    /// Checks the configuration against the limits of a device: the
    /// region's size, a message's size, the queues' depths.
    pub(super) fn check_device(
        &self,
        max_mr_size: u64,
        max_msg_sz: u32,
        max_qp_wr: i32,
        max_cqe: i32,
        extra_send_wr: usize,
        extra_cqe: usize,
    ) -> Result<(), StreamConfigError> {
        let over = |what: &'static str, need: u64, max: u64| {
            if need > max {
                Err(StreamConfigError::DeviceLimit { what, need, max })
            } else {
                Ok(())
            }
        };
        over("max_mr_size", self.region_len() as u64, max_mr_size)?;
        over("max_msg_sz", self.buffer_size as u64, u64::from(max_msg_sz))?;
        let wr = self.recv_buffers.max(self.send_buffers + extra_send_wr);
        over(
            "max_qp_wr",
            wr as u64,
            u64::try_from(max_qp_wr).unwrap_or(0),
        )?;
        let cqe = self.recv_buffers + self.send_buffers + extra_cqe;
        over("max_cqe", cqe as u64, u64::try_from(max_cqe).unwrap_or(0))
    }
}

/// A [`StreamConfig`] value refused, or the peer's parameters refused at
/// connection set-up. Connection set-up returns it inside an `io::Error`
/// (`InvalidInput` for this side's, `InvalidData` for the peer's); get it
/// back with `err.get_ref().and_then(|e| e.downcast_ref::<StreamConfigError>())`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamConfigError {
    /// Fewer buffers than the stream needs.
    TooFewBuffers {
        /// "receive" or "send".
        what: &'static str,
        /// The number asked for.
        n: usize,
        /// The fewest allowed.
        min: usize,
    },
    /// More buffers than the stream allows.
    TooManyBuffers {
        /// "receive" or "send".
        what: &'static str,
        /// The number asked for.
        n: usize,
        /// The most allowed.
        max: usize,
    },
    /// A buffer size out of range or not a multiple of 8.
    BufferSize {
        /// The size asked for.
        size: usize,
        /// The smallest allowed.
        min: usize,
        /// The largest allowed.
        max: usize,
    },
    /// The configuration needs more than the device allows.
    DeviceLimit {
        /// The device's attribute (`max_mr_size`, `max_msg_sz`, `max_qp_wr`,
        /// `max_cqe`).
        what: &'static str,
        /// What the configuration needs.
        need: u64,
        /// What the device allows.
        max: u64,
    },
    /// The peer's private data is too short to hold the stream's
    /// parameters (a peer that is not an `rdma::stream`).
    PeerTooShort {
        /// Bytes of private data received.
        len: usize,
    },
    /// The peer's private data does not start with the stream's mark (a
    /// peer that is not an `rdma::stream`).
    PeerNotStream,
    /// The peer speaks another version of the set-up format.
    PeerVersion {
        /// The peer's version.
        version: u8,
    },
    /// The peer's parameters are out of range.
    PeerParams {
        /// The peer's receive buffers.
        recv_buffers: u32,
        /// The peer's buffer size.
        buffer_size: u32,
    },
}

impl fmt::Display for StreamConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamConfigError::TooFewBuffers { what, n, min } => {
                write!(f, "{n} {what} buffers: the stream needs at least {min}")
            }
            StreamConfigError::TooManyBuffers { what, n, max } => {
                write!(f, "{n} {what} buffers: the most is {max}")
            }
            StreamConfigError::BufferSize { size, min, max } => write!(
                f,
                "a buffer of {size} bytes: a multiple of 8 from {min} to {max} is needed"
            ),
            StreamConfigError::DeviceLimit { what, need, max } => write!(
                f,
                "the stream's configuration needs {need} where the device's {what} is {max}"
            ),
            StreamConfigError::PeerTooShort { len } => write!(
                f,
                "the peer's connection private data has {len} bytes, fewer than a stream's \
                 parameters (the peer is not an rdma::stream)"
            ),
            StreamConfigError::PeerNotStream => f.write_str(
                "the peer's connection private data is not a stream's (the peer is not an \
                 rdma::stream)",
            ),
            StreamConfigError::PeerVersion { version } => write!(
                f,
                "the peer's connection private data is of set-up format version {version}, \
                 not {} (the peer runs another version of rdma::stream)",
                VERSION
            ),
            StreamConfigError::PeerParams {
                recv_buffers,
                buffer_size,
            } => write!(
                f,
                "the peer announced {recv_buffers} receive buffers of {buffer_size} bytes, \
                 out of range"
            ),
        }
    }
}

impl std::error::Error for StreamConfigError {}

impl StreamConfigError {
    /// As an `io::Error`: `InvalidData` for the peer's parameters,
    /// `InvalidInput` for this side's.
    pub(super) fn into_io(self) -> std::io::Error {
        let kind = match self {
            StreamConfigError::PeerTooShort { .. }
            | StreamConfigError::PeerNotStream
            | StreamConfigError::PeerVersion { .. }
            | StreamConfigError::PeerParams { .. } => std::io::ErrorKind::InvalidData,
            _ => std::io::ErrorKind::InvalidInput,
        };
        std::io::Error::new(kind, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_config_setters_refuse_values_out_of_range() {
        let c = StreamConfig::new();
        assert_eq!(c.recv_buffers(), RECV_SLOTS);
        assert_eq!(c.region_len(), (RECV_SLOTS + SEND_SLOTS) * SLOT_SIZE + 128);
        assert_eq!(
            c.with_recv_buffers(0),
            Err(StreamConfigError::TooFewBuffers {
                what: "receive",
                n: 0,
                min: 2
            })
        );
        assert!(matches!(
            c.with_recv_buffers(1),
            Err(StreamConfigError::TooFewBuffers { n: 1, .. })
        ));
        assert!(matches!(
            c.with_send_buffers(0),
            Err(StreamConfigError::TooFewBuffers { what: "send", .. })
        ));
        assert!(matches!(
            c.with_recv_buffers(MAX_BUFFERS + 1),
            Err(StreamConfigError::TooManyBuffers { .. })
        ));
        assert!(matches!(
            c.with_send_buffers(usize::MAX),
            Err(StreamConfigError::TooManyBuffers { .. })
        ));
        for size in [0, 8, 63, 65, 100, MAX_BUFFER_SIZE + 8, usize::MAX] {
            assert!(
                matches!(
                    c.with_buffer_size(size),
                    Err(StreamConfigError::BufferSize { .. })
                ),
                "{size}"
            );
        }
        let c = c
            .with_recv_buffers(2)
            .unwrap()
            .with_send_buffers(1)
            .unwrap()
            .with_buffer_size(64)
            .unwrap();
        assert_eq!(
            (c.recv_buffers(), c.send_buffers(), c.buffer_size()),
            (2, 1, 64)
        );
        assert_eq!(c.max_payload(), 56);
        // The largest configuration's region fits in a usize.
        let big = c
            .with_recv_buffers(MAX_BUFFERS)
            .unwrap()
            .with_send_buffers(MAX_BUFFERS)
            .unwrap()
            .with_buffer_size(MAX_BUFFER_SIZE)
            .unwrap();
        assert_eq!(big.region_len(), (1usize << 43) + 128);
        // A refused value leaves the configuration it was given unchanged
        // (the setter consumes a copy).
        assert!(c.with_buffer_size(7).is_err());
        assert_eq!(c.buffer_size(), 64);
    }

    #[test]
    fn stream_config_is_checked_against_the_device_limits() {
        let c = StreamConfig::new();
        let ok = c.check_device(u64::MAX, u32::MAX, 1 << 14, 1 << 16, 34, 34);
        assert_eq!(ok, Ok(()));
        let e = c.check_device(1 << 20, u32::MAX, 1 << 14, 1 << 16, 34, 34);
        assert_eq!(
            e,
            Err(StreamConfigError::DeviceLimit {
                what: "max_mr_size",
                need: c.region_len() as u64,
                max: 1 << 20
            })
        );
        let e = c.check_device(u64::MAX, 4096, 1 << 14, 1 << 16, 34, 34);
        assert!(matches!(
            e,
            Err(StreamConfigError::DeviceLimit {
                what: "max_msg_sz",
                ..
            })
        ));
        let e = c.check_device(u64::MAX, u32::MAX, 49, 1 << 16, 34, 34);
        assert!(matches!(
            e,
            Err(StreamConfigError::DeviceLimit {
                what: "max_qp_wr",
                need: 50,
                ..
            })
        ));
        let e = c.check_device(u64::MAX, u32::MAX, 1 << 14, 65, 34, 34);
        assert!(matches!(
            e,
            Err(StreamConfigError::DeviceLimit {
                what: "max_cqe",
                need: 66,
                ..
            })
        ));
        // A negative limit (a broken provider) refuses, never wraps.
        assert!(c
            .check_device(u64::MAX, u32::MAX, -1, 1 << 16, 34, 34)
            .is_err());
    }
}
