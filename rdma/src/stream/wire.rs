//! The wire format: the header of every message.
//!
//! Every message is a SEND of an 8-byte header and up to
//! [`MAX_PAYLOAD`](super::MAX_PAYLOAD) bytes of data. The header is one
//! little-endian `u64`: the low 16 bits are the credits it returns, bits
//! 24 to 29 the wire format's version (1), bit 31 is FIN (the sender's
//! last message), bit 30 is MSG (a message of a
//! [`MessageEndpoint`](super::MessageEndpoint), so that an empty message
//! differs from a credit-only one), the other bits are zero; a header of
//! another version ends the connection with an error rather than being
//! misread. Eight bytes keep the data on whole 8-byte words of the
//! buffers, which the copies into and out of them move a word at a time.
//! (A SEND with immediate data would carry the low 32 bits, but iWARP, and
//! so siw, has no immediate data.)

use super::HEADER_LEN;

/// Bit 31 of the header: the sender's last message.
pub(super) const FIN_BIT: u32 = 1 << 31;
/// Bit 30 of the header: one message of a message connection (its data,
/// possibly none, is the message).
pub(super) const MSG_BIT: u32 = 1 << 30;
/// The header bits that carry returned credits.
pub(super) const CREDIT_MASK: u32 = 0xffff;
/// The lowest header bit of the wire format's version.
pub(super) const VERSION_SHIFT: u32 = 24;
/// The header bits that carry the wire format's version.
pub(super) const VERSION_MASK: u32 = 0x3f << VERSION_SHIFT;
/// The wire format's version, in bits 24 to 29 of every header: 1, the
/// 8-byte header. (Before it a 4-byte header had these bits zero, and
/// refused a header with any of them set: the two formats refuse each
/// other's messages rather than misread them.)
pub(super) const WIRE_VERSION: u32 = 1;

/// The header of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    /// Receives the sender posted again since its last message.
    pub(super) credits: u16,
    /// The sender's last message: EOF follows its data.
    pub(super) fin: bool,
    /// A message of a message connection (set on every data SEND there,
    /// never on a stream).
    pub(super) msg: bool,
}

impl Header {
    pub(super) fn encode(self) -> u32 {
        u32::from(self.credits)
            | WIRE_VERSION << VERSION_SHIFT
            | if self.fin { FIN_BIT } else { 0 }
            | if self.msg { MSG_BIT } else { 0 }
    }

    /// The header of `word`; an error when it has another version or a
    /// reserved bit set.
    pub(super) fn decode(word: u32) -> Result<Header, String> {
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

    pub(super) fn to_bytes(self) -> [u8; HEADER_LEN] {
        u64::from(self.encode()).to_le_bytes()
    }

    /// The header's 8 wire bytes as the word a native-endian load of them
    /// gives (what `MemoryRegion::write_word` stores back as those bytes).
    pub(super) fn to_word(self) -> u64 {
        u64::from_ne_bytes(self.to_bytes())
    }

    /// The header of `word`, a native-endian load of its 8 wire bytes: as
    /// [`from_bytes`](Self::from_bytes).
    #[inline]
    pub(super) fn from_word(word: u64) -> Result<Header, String> {
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
    pub(super) fn from_bad_word(word: u64) -> Result<Header, String> {
        Header::from_bytes(word.to_ne_bytes())
    }

    /// The header of `b`; an error as [`decode`](Self::decode)'s (of the
    /// low 32 bits, which hold the version), or when a bit of the high 32
    /// (reserved) is set.
    pub(super) fn from_bytes(b: [u8; HEADER_LEN]) -> Result<Header, String> {
        let word = u64::from_le_bytes(b);
        let h = Header::decode(word as u32)?;
        if word >> 32 != 0 {
            return Err(format!("a header with reserved bits set ({word:#018x})"));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
