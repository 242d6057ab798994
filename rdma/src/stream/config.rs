//! The stream's sizes and times.

use std::time::Duration;

/// Receive buffers each side posts by default: the credits a peer starts
/// with (see [`StreamConfig::recv_buffers`](super::StreamConfig::recv_buffers)).
pub const RECV_SLOTS: usize = 16;
/// Send buffers of a stream by default: what a writer may fill ahead of
/// its credits.
pub const SEND_SLOTS: usize = 16;
/// Bytes of each receive and send buffer by default (a header and the
/// data).
pub const SLOT_SIZE: usize = 64 * 1024;
/// Bytes of the header of each message (a word: the data after it stays
/// 8-byte aligned).
pub const HEADER_LEN: usize = 8;
/// The most data one message carries with the default buffers on both
/// sides.
pub const MAX_PAYLOAD: usize = SLOT_SIZE - HEADER_LEN;
/// One-sided requests (RDMA WRITE, READ) a connection has posted at once;
/// more wait in order.
pub const ONE_SIDED_SLOTS: usize = 16;
/// The largest message of a [`MessageEndpoint`](super::MessageEndpoint): one receive buffer less
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
/// [`RdmaStream::set_busy_poll`](super::RdmaStream::set_busy_poll). `RDMA_STREAM_SPIN_US` (microseconds,
/// read once per process; 0 none) sets another default. Waking from the
/// channel costs a reactor wait, a read and a re-arm, more than a small
/// message's round trip on hardware; the polling yields to the runtime's
/// other tasks.
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(50);
