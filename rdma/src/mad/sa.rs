//! The subnet administration class header (IBA 15.2.1.1): bytes 24-55 of an
//! SA MAD, then 200 bytes of SA data.

use super::rmpp::RmppHeader;
use super::wire::{In, Out};
use super::Result;

/// The SA header.
///
/// | byte | field |
/// |---|---|
/// | 24-35 | RMPP header |
/// | 36-43 | SM_Key |
/// | 44-45 | AttributeOffset (in 8-byte words) |
/// | 46-47 | reserved |
/// | 48-55 | ComponentMask |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SaHeader {
    /// The RMPP header.
    pub rmpp: RmppHeader,
    /// SM_Key.
    pub sm_key: u64,
    /// AttributeOffset: the size of one record in 8-byte words (GetTable
    /// responses).
    pub attr_offset: u16,
    /// The reserved bytes 46-47 (kept so that decoding is lossless).
    pub reserved: u16,
    /// ComponentMask: which fields of the record are query terms.
    pub comp_mask: u64,
}

impl SaHeader {
    /// The header's offset in a MAD.
    pub const OFFSET: usize = 24;
    /// The header's size.
    pub const SIZE: usize = 32;
    /// Where the SA data begins in a MAD.
    pub const DATA_OFFSET: usize = 56;

    /// Decodes the 32 bytes at the start of `b` (a MAD's bytes 24-55).
    pub fn decode(b: &[u8]) -> Result<SaHeader> {
        let r = In::new(b, "SA header", Self::SIZE)?;
        Ok(SaHeader {
            rmpp: RmppHeader::decode(b)?,
            sm_key: r.u64(12)?,
            attr_offset: r.u16(20)?,
            reserved: r.u16(22)?,
            comp_mask: r.u64(24)?,
        })
    }

    /// Encodes into the first 32 bytes of `out`.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        self.rmpp.encode_into(out)?;
        let mut w = Out::new(out, "SA header", Self::SIZE)?;
        w.u64(12, self.sm_key)?;
        w.u16(20, self.attr_offset)?;
        w.u16(22, self.reserved)?;
        w.u64(24, self.comp_mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::rmpp::{RmppFlags, RmppType};

    #[test]
    fn sa_header_matches_the_spec_layout() {
        let h = SaHeader {
            rmpp: RmppHeader {
                version: 1,
                rmpp_type: RmppType::Data,
                resp_time: 0,
                flags: RmppFlags::ACTIVE | RmppFlags::FIRST | RmppFlags::LAST,
                status: 0,
                data1: 1,
                data2: 0x40,
            },
            sm_key: 0x0102_0304_0506_0708,
            attr_offset: 8,
            reserved: 0,
            comp_mask: 0x8000_0000_0000_0011,
        };
        let bytes = [
            0x01, 0x01, 0x07, 0x00, 0, 0, 0, 1, 0, 0, 0, 0x40, // RMPP
            1, 2, 3, 4, 5, 6, 7, 8, // SM_Key
            0x00, 0x08, // AttributeOffset
            0x00, 0x00, // reserved
            0x80, 0, 0, 0, 0, 0, 0, 0x11, // ComponentMask
        ];
        let mut out = [0u8; 32];
        h.encode_into(&mut out).unwrap();
        assert_eq!(out, bytes);
        assert_eq!(SaHeader::decode(&bytes).unwrap(), h);
        assert!(SaHeader::decode(&bytes[..31]).is_err());
    }
}
