//! The connection's registered region (its receive, send and control
//! buffers) and the work request ids that name them.
//!
//! The region holds the receive buffers and the send buffers of the
//! connection's [`StreamConfig`] (by default [`RECV_SLOTS`](super::RECV_SLOTS)
//! and [`SEND_SLOTS`](super::SEND_SLOTS) of [`SLOT_SIZE`](super::SLOT_SIZE)
//! bytes each, 2 MiB in all), then two small control buffers (FIN,
//! credit-only messages), in that order ([`Layout`]).

use super::handshake::Announce;
use super::stream_config::StreamConfig;
pub(super) use super::stream_config::{CTRL_SIZE, CTRL_SLOTS};
use super::HEADER_LEN;

/// The most bytes of a SEND (header and data) copied into the work
/// request at post time rather than read from the buffer by the device
/// (rsockets' default is 64 bytes of data): small messages then cost the
/// device no read of the region. siw takes up to 80 (five of its SGEs).
pub(super) const INLINE: usize = HEADER_LEN + 64;

/// Where a connection's buffers are, and what the peer's take: this
/// side's configuration and the peer's announcement, fixed at set-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    /// This side's receive buffers.
    pub(super) recv_slots: usize,
    /// This side's send buffers.
    pub(super) send_slots: usize,
    /// Bytes of each of this side's buffers.
    pub(super) slot_size: usize,
    /// The peer's receive buffers: the credits this side starts with.
    pub(super) peer_recv_slots: usize,
    /// The most data one message carries: the smaller of this side's send
    /// buffers and the peer's receive buffers, less the header.
    pub(super) payload: usize,
}

impl Layout {
    pub(super) fn new(own: &StreamConfig, peer: Announce) -> Layout {
        Layout {
            recv_slots: own.recv_buffers,
            send_slots: own.send_buffers,
            slot_size: own.buffer_size,
            peer_recv_slots: peer.recv_buffers,
            payload: own.buffer_size.min(peer.buffer_size) - HEADER_LEN,
        }
    }

    #[inline]
    pub(super) fn recv_at(&self, slot: usize) -> usize {
        slot * self.slot_size
    }

    #[inline]
    pub(super) fn send_at(&self, slot: usize) -> usize {
        (self.recv_slots + slot) * self.slot_size
    }

    pub(super) fn ctrl_at(&self, slot: usize) -> usize {
        (self.recv_slots + self.send_slots) * self.slot_size + slot * CTRL_SIZE
    }
}

/// Work request ids: the kind in the high half, the slot in the low 16
/// bits, and for a data SEND the unsignalled ones it retires in bits 16
/// to 31 (see [`Core::post_data`](super::engine::Core::post_data)).
pub(super) const WR_RECV: u64 = 1 << 32;
/// A data SEND from its buffer, which its completion frees.
pub(super) const WR_SEND: u64 = 2 << 32;
pub(super) const WR_CTRL: u64 = 3 << 32;
pub(super) const WR_FIN: u64 = 4 << 32;
pub(super) const WR_RDMA: u64 = 5 << 32;
/// A signalled data SEND whose data went inline: its buffer was freed at
/// the post.
pub(super) const WR_SEND_INLINE: u64 = 6 << 32;
/// An unsignalled data SEND (inline): only a failed one (flushed, or in
/// error) completes.
pub(super) const WR_UNSIGNALLED: u64 = 7 << 32;
pub(super) const WR_SLOT: u64 = 0xffff;
pub(super) const WR_RETIRES_SHIFT: u32 = 16;
