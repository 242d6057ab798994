//! What each side tells the other at connection set-up, in the private
//! data of the connection request and of its accept: its receive buffers
//! (how many: the credits the peer starts with; how large: the most the
//! peer's message may hold).
//!
//! The format, 16 bytes (the CM's limits are far above: 56 bytes for a
//! request on InfiniBand and RoCE, 196 for an accept, 512 less the MPA
//! header on iWARP):
//!
//! | bytes  | what |
//! |--------|------|
//! | 0..4   | `RDMS`, the mark of an `rdma::stream` |
//! | 4      | the format's version ([`VERSION`]) |
//! | 5..8   | zero (reserved) |
//! | 8..12  | receive buffers, little-endian `u32` |
//! | 12..16 | bytes of each receive buffer, little-endian `u32` |
//!
//! Bytes after these are ignored: on InfiniBand and RoCE the CM delivers
//! a request's private data padded with zeros to its full size.

pub(super) use super::stream_config::VERSION;
use super::stream_config::{
    StreamConfig, StreamConfigError, MAX_BUFFERS, MAX_BUFFER_SIZE, MIN_BUFFER_SIZE,
    MIN_RECV_BUFFERS,
};

/// The mark at the start of a stream's private data.
pub(super) const MAGIC: [u8; 4] = *b"RDMS";
/// Bytes of a stream's private data.
pub(super) const LEN: usize = 16;

/// One side's receive buffers, as told to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Announce {
    /// Receive buffers posted: the credits the peer starts with.
    pub(super) recv_buffers: usize,
    /// Bytes of each, the header included.
    pub(super) buffer_size: usize,
}

impl Announce {
    /// What a side of configuration `config` tells the peer at set-up: its
    /// receive buffers.
    pub(super) fn of(config: &StreamConfig) -> Announce {
        Announce {
            recv_buffers: config.recv_buffers(),
            buffer_size: config.buffer_size(),
        }
    }

    pub(super) fn to_bytes(self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        // The configuration's setters bound both far below u32::MAX.
        b[8..12].copy_from_slice(&(self.recv_buffers as u32).to_le_bytes());
        b[12..16].copy_from_slice(&(self.buffer_size as u32).to_le_bytes());
        b
    }

    /// The peer's announcement in `data`; an error for anything else.
    pub(super) fn from_bytes(data: &[u8]) -> Result<Announce, StreamConfigError> {
        if data.len() < LEN {
            return Err(StreamConfigError::PeerTooShort { len: data.len() });
        }
        if data[..4] != MAGIC {
            return Err(StreamConfigError::PeerNotStream);
        }
        if data[4] != VERSION {
            return Err(StreamConfigError::PeerVersion { version: data[4] });
        }
        let word =
            |at: usize| u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        let (recv_buffers, buffer_size) = (word(8), word(12));
        let n = recv_buffers as usize;
        let size = buffer_size as usize;
        if data[5..8] != [0; 3]
            || !(MIN_RECV_BUFFERS..=MAX_BUFFERS).contains(&n)
            || !(MIN_BUFFER_SIZE..=MAX_BUFFER_SIZE).contains(&size)
            || size % 8 != 0
        {
            return Err(StreamConfigError::PeerParams {
                recv_buffers,
                buffer_size,
            });
        }
        Ok(Announce {
            recv_buffers: n,
            buffer_size: size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_handshake_round_trips_and_ignores_padding() {
        let a = Announce {
            recv_buffers: 16,
            buffer_size: 65536,
        };
        let b = a.to_bytes();
        assert_eq!(&b[..8], b"RDMS\x01\0\0\0");
        assert_eq!(&b[8..], &[16, 0, 0, 0, 0, 0, 1, 0]);
        assert_eq!(Announce::from_bytes(&b), Ok(a));
        // IB pads a request's private data to 56 bytes, an accept's to 196.
        for pad in [56, 196] {
            let mut v = b.to_vec();
            v.resize(pad, 0);
            assert_eq!(Announce::from_bytes(&v), Ok(a));
        }
        for (n, size) in [(2, 64), (MAX_BUFFERS, MAX_BUFFER_SIZE), (3, 1000)] {
            let a = Announce {
                recv_buffers: n,
                buffer_size: size,
            };
            assert_eq!(Announce::from_bytes(&a.to_bytes()), Ok(a));
        }
    }

    #[test]
    fn stream_handshake_refuses_foreign_and_malformed_private_data() {
        let good = Announce {
            recv_buffers: 4,
            buffer_size: 4096,
        }
        .to_bytes();
        // Every length short of the format, empty included.
        for len in 0..LEN {
            assert_eq!(
                Announce::from_bytes(&good[..len]),
                Err(StreamConfigError::PeerTooShort { len })
            );
        }
        // Another program's private data (rping's, 56 zero bytes of IB padding).
        assert_eq!(
            Announce::from_bytes(&[0u8; 56]),
            Err(StreamConfigError::PeerNotStream)
        );
        let mut junk = [0xa5u8; 40];
        assert_eq!(
            Announce::from_bytes(&junk),
            Err(StreamConfigError::PeerNotStream)
        );
        junk[..4].copy_from_slice(b"RDMS");
        assert_eq!(
            Announce::from_bytes(&junk),
            Err(StreamConfigError::PeerVersion { version: 0xa5 })
        );
        for version in [0u8, 2, 255] {
            let mut b = good;
            b[4] = version;
            assert_eq!(
                Announce::from_bytes(&b),
                Err(StreamConfigError::PeerVersion { version })
            );
        }
        // Reserved bytes, and values out of range.
        let params = |f: &dyn Fn(&mut [u8; LEN])| {
            let mut b = good;
            f(&mut b);
            Announce::from_bytes(&b)
        };
        assert!(matches!(
            params(&|b| b[6] = 1),
            Err(StreamConfigError::PeerParams { .. })
        ));
        for n in [0u32, 1, MAX_BUFFERS as u32 + 1, u32::MAX] {
            assert_eq!(
                params(&|b| b[8..12].copy_from_slice(&n.to_le_bytes())),
                Err(StreamConfigError::PeerParams {
                    recv_buffers: n,
                    buffer_size: 4096
                })
            );
        }
        for size in [0u32, 8, 63, 4097, MAX_BUFFER_SIZE as u32 + 8, u32::MAX] {
            assert_eq!(
                params(&|b| b[12..16].copy_from_slice(&size.to_le_bytes())),
                Err(StreamConfigError::PeerParams {
                    recv_buffers: 4,
                    buffer_size: size
                })
            );
        }
        // Every single-byte change of the fixed part is refused, or read
        // as exactly what it says: what is accepted encodes back to the
        // same bytes (nothing is dropped or read loosely).
        let mut accepted = 0;
        for at in 0..LEN {
            for v in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut b = good;
                b[at] = v;
                if let Ok(a) = Announce::from_bytes(&b) {
                    assert_eq!(a.to_bytes(), b, "byte {at} = {v:#x}");
                    accepted += 1;
                }
            }
        }
        // Only changes of the two counts can be accepted.
        assert!(accepted > 0 && accepted <= 8 * 5, "{accepted}");
    }
}
