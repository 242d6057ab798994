//! The connection's registered region (its receive, send and control
//! buffers) and the work request ids that name them.
//!
//! The region holds [`RECV_SLOTS`](super::RECV_SLOTS) receive buffers and
//! [`SEND_SLOTS`](super::SEND_SLOTS) send buffers of
//! [`SLOT_SIZE`](super::SLOT_SIZE) bytes each (2 MiB in all), then two
//! small control buffers (FIN, credit-only messages), in that order.

use super::{HEADER_LEN, RECV_SLOTS, SEND_SLOTS, SLOT_SIZE};

/// Buffers for header-only messages (FIN, credits).
pub(super) const CTRL_SLOTS: usize = 2;
/// Bytes of each control buffer (a header, rounded up).
pub(super) const CTRL_SIZE: usize = 64;

/// The most bytes of a SEND (header and data) copied into the work
/// request at post time rather than read from the buffer by the device
/// (rsockets' default is 64 bytes of data): small messages then cost the
/// device no read of the region. siw takes up to 80 (five of its SGEs).
pub(super) const INLINE: usize = HEADER_LEN + 64;

pub(super) fn recv_at(slot: usize) -> usize {
    slot * SLOT_SIZE
}

pub(super) fn send_at(slot: usize) -> usize {
    (RECV_SLOTS + slot) * SLOT_SIZE
}

pub(super) fn ctrl_at(slot: usize) -> usize {
    (RECV_SLOTS + SEND_SLOTS) * SLOT_SIZE + slot * CTRL_SIZE
}

pub(super) const REGION_LEN: usize = (RECV_SLOTS + SEND_SLOTS) * SLOT_SIZE + CTRL_SLOTS * CTRL_SIZE;

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
