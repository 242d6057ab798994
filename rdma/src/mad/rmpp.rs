//! The RMPP header (IBA 13.6.2): bytes 24-35 of the MADs of classes that may
//! use the reliable multi-packet protocol (SA, vendor range 2).

use super::wire::{In, Out};
use super::Result;

bitflags::bitflags! {
    /// RMPPFlags (bits 2-0 of byte 2 of the RMPP header).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct RmppFlags: u8 {
        /// This MAD is part of an RMPP transfer.
        const ACTIVE = 1;
        /// The first segment.
        const FIRST = 2;
        /// The last segment.
        const LAST = 4;
    }
}

/// RMPPType (IBA 13.6.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RmppType {
    /// 0: not an RMPP packet.
    None,
    /// 1: DATA.
    Data,
    /// 2: ACK.
    Ack,
    /// 3: STOP.
    Stop,
    /// 4: ABORT.
    Abort,
    /// Any other (reserved) value.
    Other(u8),
}

impl RmppType {
    /// The type of a wire value.
    pub fn from_u8(v: u8) -> RmppType {
        match v {
            0 => RmppType::None,
            1 => RmppType::Data,
            2 => RmppType::Ack,
            3 => RmppType::Stop,
            4 => RmppType::Abort,
            v => RmppType::Other(v),
        }
    }
    /// The wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            RmppType::None => 0,
            RmppType::Data => 1,
            RmppType::Ack => 2,
            RmppType::Stop => 3,
            RmppType::Abort => 4,
            RmppType::Other(v) => v,
        }
    }
}

/// The RMPP header (12 bytes).
///
/// | byte | field |
/// |---|---|
/// | 0 | RMPPVersion |
/// | 1 | RMPPType |
/// | 2 | RRespTime (bits 7-3), RMPPFlags (bits 2-0) |
/// | 3 | RMPPStatus |
/// | 4-7 | Data1: SegmentNumber (DATA, ACK) |
/// | 8-11 | Data2: PayloadLength (DATA), NewWindowLast (ACK) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RmppHeader {
    /// RMPPVersion: 0 when RMPP is not used, 1 for IBA RMPP.
    pub version: u8,
    /// RMPPType.
    pub rmpp_type: RmppType,
    /// RRespTime (5 bits): the response time value, 0x1f for none.
    pub resp_time: u8,
    /// RMPPFlags (3 bits; unknown bits are dropped).
    pub flags: RmppFlags,
    /// RMPPStatus.
    pub status: u8,
    /// Data1: the segment number.
    pub data1: u32,
    /// Data2: the payload length of the first and last DATA segments, or the
    /// new window last of an ACK.
    pub data2: u32,
}

impl Default for RmppHeader {
    fn default() -> RmppHeader {
        RmppHeader {
            version: 0,
            rmpp_type: RmppType::None,
            resp_time: 0,
            flags: RmppFlags::empty(),
            status: 0,
            data1: 0,
            data2: 0,
        }
    }
}

impl RmppHeader {
    /// The size of the header.
    pub const SIZE: usize = 12;
    /// The header's offset in a MAD.
    pub const OFFSET: usize = 24;

    /// Decodes the 12 bytes at the start of `b`.
    pub fn decode(b: &[u8]) -> Result<RmppHeader> {
        let r = In::new(b, "RMPP header", Self::SIZE)?;
        let tf = r.u8(2)?;
        Ok(RmppHeader {
            version: r.u8(0)?,
            rmpp_type: RmppType::from_u8(r.u8(1)?),
            resp_time: tf >> 3,
            flags: RmppFlags::from_bits_truncate(tf & 7),
            status: r.u8(3)?,
            data1: r.u32(4)?,
            data2: r.u32(8)?,
        })
    }

    /// Encodes into the first 12 bytes of `out`.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, "RMPP header", Self::SIZE)?;
        let rt = super::wire::fit("RRespTime", 5, self.resp_time.into())? as u8;
        w.u8(0, self.version)?;
        w.u8(1, self.rmpp_type.to_u8())?;
        w.u8(2, rt << 3 | self.flags.bits())?;
        w.u8(3, self.status)?;
        w.u32(4, self.data1)?;
        w.u32(8, self.data2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmpp_header_matches_the_spec_layout() {
        // First DATA segment of a 2000-byte payload, RRespTime 0x1f.
        let bytes = [
            0x01, // RMPPVersion
            0x01, // RMPPType: DATA
            0xfb, // RRespTime 0x1f << 3 | Flags ACTIVE|FIRST (0b011)
            0x00, // RMPPStatus
            0x00, 0x00, 0x00, 0x01, // SegmentNumber 1
            0x00, 0x00, 0x07, 0xd0, // PayloadLength 2000
        ];
        let h = RmppHeader {
            version: 1,
            rmpp_type: RmppType::Data,
            resp_time: 0x1f,
            flags: RmppFlags::ACTIVE | RmppFlags::FIRST,
            status: 0,
            data1: 1,
            data2: 2000,
        };
        let mut out = [0u8; 12];
        h.encode_into(&mut out).unwrap();
        assert_eq!(out, bytes);
        assert_eq!(RmppHeader::decode(&bytes).unwrap(), h);
    }

    #[test]
    fn rmpp_types_round_trip_and_bad_values_are_errors() {
        for v in 0..=255u8 {
            assert_eq!(RmppType::from_u8(v).to_u8(), v);
        }
        let h = RmppHeader {
            resp_time: 0x20,
            ..RmppHeader::default()
        };
        assert!(h.encode_into(&mut [0u8; 12]).is_err());
        assert!(RmppHeader::decode(&[0u8; 11]).is_err());
    }
}
