//! InformInfo (IBA 13.4.8.3), the subscription to traps and notices that a
//! client sets at the SA, and InformInfoRecord (IBA 15.2.5.12), the SA's
//! record of one subscription.

use super::{attr_id, Component as C, SaRecord};
use crate::mad::wire::{fit, In, Out};
use crate::mad::{class, Attribute, Result};
use crate::Gid;

/// InformInfo (IBA 13.4.8.3, 36 bytes): subscribe to (or unsubscribe from)
/// the traps of a type, number and LID range. Set to the SA with method Set;
/// its ComponentMask is not used.
///
/// | byte | field |
/// |---|---|
/// | 0-15 | GID |
/// | 16-17 | LIDRangeBegin |
/// | 18-19 | LIDRangeEnd |
/// | 20-21 | reserved |
/// | 22 | IsGeneric |
/// | 23 | Subscribe |
/// | 24-25 | Type |
/// | 26-27 | TrapNumber (generic) or DeviceID (vendor) |
/// | 28-31 | QPN (24), reserved (3), RespTimeValue (5) |
/// | 32 | reserved |
/// | 33-35 | ProducerType (generic) or VendorID (vendor) |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InformInfo {
    /// The GID of the port whose traps are wanted; zero for a LID range.
    pub gid: Gid,
    /// LIDRangeBegin (0xFFFF: all LIDs).
    pub lid_range_begin: u16,
    /// LIDRangeEnd.
    pub lid_range_end: u16,
    /// IsGeneric: generic traps (true) or vendor traps (false).
    pub is_generic: bool,
    /// Subscribe (true) or unsubscribe (false).
    pub subscribe: bool,
    /// Type: 0 fatal, 1 urgent, 2 security, 3 subnet management, 4 info,
    /// 0xFFFF all.
    pub trap_type: u16,
    /// TrapNumber (generic; 0xFFFF all) or DeviceID (vendor).
    pub trap_number: u16,
    /// QPN (24 bits): where reports go (ignored by the SA, which reports to
    /// the requester's QP1).
    pub qpn: u32,
    /// RespTimeValue (5 bits).
    pub resp_time_value: u8,
    /// ProducerType (generic: 1 CA, 2 switch, 3 router, 4 class manager,
    /// 0xFFFFFF all) or VendorID (vendor), 24 bits.
    pub producer_type: u32,
}

impl Attribute for InformInfo {
    const ID: u16 = attr_id::INFORM_INFO;
    const NAME: &'static str = "InformInfo";
    const SIZE: usize = 36;

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let w28 = r.u32(28)?;
        Ok(InformInfo {
            gid: Gid(r.bytes(0)?),
            lid_range_begin: r.u16(16)?,
            lid_range_end: r.u16(18)?,
            is_generic: r.u8(22)? != 0,
            subscribe: r.u8(23)? != 0,
            trap_type: r.u16(24)?,
            trap_number: r.u16(26)?,
            qpn: w28 >> 8,
            resp_time_value: (w28 & 0x1f) as u8,
            producer_type: r.u24_low(32)?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let qpn = fit("QPN", 24, self.qpn.into())? as u32;
        let rt = fit("RespTimeValue", 5, self.resp_time_value.into())? as u32;
        let pt = fit("ProducerType", 24, self.producer_type.into())? as u32;
        w.bytes(0, &self.gid.0)?;
        w.u16(16, self.lid_range_begin)?;
        w.u16(18, self.lid_range_end)?;
        w.u16(20, 0)?;
        w.u8(22, self.is_generic.into())?;
        w.u8(23, self.subscribe.into())?;
        w.u16(24, self.trap_type)?;
        w.u16(26, self.trap_number)?;
        w.u32(28, qpn << 8 | rt)?;
        w.u32(32, pt)
    }
}

bitflags::bitflags! {
    /// The ComponentMask bits of an InformInfoRecord query: SubscriberGID,
    /// Enum, then InformInfo's fields one by one (reserved ones included).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct InformInfoRecordMask: u64 {
        /// SubscriberGID.
        const SUBSCRIBER_GID = 1 << 0;
        /// Enum.
        const ENUM = 1 << 1;
        /// The reserved 48 bits after Enum.
        const RESERVED0 = 1 << 2;
        /// InformInfo.GID.
        const GID = 1 << 3;
        /// InformInfo.LIDRangeBegin.
        const LID_RANGE_BEGIN = 1 << 4;
        /// InformInfo.LIDRangeEnd.
        const LID_RANGE_END = 1 << 5;
        /// InformInfo's reserved bytes 20-21.
        const RESERVED1 = 1 << 6;
        /// InformInfo.IsGeneric.
        const IS_GENERIC = 1 << 7;
        /// InformInfo.Subscribe.
        const SUBSCRIBE = 1 << 8;
        /// InformInfo.Type.
        const TYPE = 1 << 9;
        /// InformInfo.TrapNumber or DeviceID.
        const TRAP_NUMBER = 1 << 10;
        /// InformInfo.QPN.
        const QPN = 1 << 11;
        /// InformInfo's reserved 3 bits before RespTimeValue.
        const RESERVED2 = 1 << 12;
        /// InformInfo.RespTimeValue.
        const RESP_TIME_VALUE = 1 << 13;
        /// InformInfo's reserved byte 32.
        const RESERVED3 = 1 << 14;
        /// InformInfo.ProducerType or VendorID.
        const PRODUCER_TYPE = 1 << 15;
    }
}

/// InformInfoRecord (IBA 15.2.5.12, 60 bytes; 64 in a table): one
/// subscription the SA holds.
///
/// | byte | field |
/// |---|---|
/// | 0-15 | SubscriberGID |
/// | 16-17 | Enum |
/// | 18-23 | reserved |
/// | 24-59 | InformInfo ([`InformInfo`], 36 bytes) |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InformInfoRecord {
    /// SubscriberGID: the port that subscribed.
    pub subscriber_gid: Gid,
    /// Enum: tells apart the subscriptions of one subscriber.
    pub enumeration: u16,
    /// The subscription.
    pub inform_info: InformInfo,
}

impl Attribute for InformInfoRecord {
    const ID: u16 = attr_id::INFORM_INFO_RECORD;
    const NAME: &'static str = "InformInfoRecord";
    const SIZE: usize = 60;

    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        Ok(InformInfoRecord {
            subscriber_gid: Gid(r.bytes(0)?),
            enumeration: r.u16(16)?,
            inform_info: InformInfo::decode(b.get(24..).unwrap_or(&[]))?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        w.bytes(0, &self.subscriber_gid.0)?;
        w.u16(16, self.enumeration)?;
        w.bytes(18, &[0; 6])?;
        self.inform_info
            .encode_into(out.get_mut(24..).unwrap_or(&mut []))
    }
}

impl SaRecord for InformInfoRecord {
    type Mask = InformInfoRecordMask;
    /// SubscriberGID, Enum, reserved, then InformInfo's fields at their
    /// InformInfo offsets + 192.
    const COMPONENTS: &'static [C] = &[
        C::new("SubscriberGID", 0, 128),
        C::new("Enum", 128, 16),
        C::new("Reserved", 144, 48),
        C::new("GID", 192, 128),
        C::new("LIDRangeBegin", 320, 16),
        C::new("LIDRangeEnd", 336, 16),
        C::new("Reserved", 352, 16),
        C::new("IsGeneric", 368, 8),
        C::new("Subscribe", 376, 8),
        C::new("Type", 384, 16),
        C::new("TrapNumber/DeviceID", 400, 16),
        C::new("QPN", 416, 24),
        C::new("Reserved", 440, 3),
        C::new("RespTimeValue", 443, 5),
        C::new("Reserved", 448, 8),
        C::new("ProducerType/VendorID", 456, 24),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::Error;

    fn sample() -> InformInfo {
        InformInfo {
            gid: Gid::default(),
            lid_range_begin: 0xffff,
            lid_range_end: 0x0102,
            is_generic: true,
            subscribe: true,
            trap_type: 0xffff,
            trap_number: 64, // GID in service
            qpn: 0x00ab_cdef,
            resp_time_value: 0x13,
            producer_type: 0x00ff_fffe,
        }
    }

    #[test]
    fn inform_info_matches_the_spec_layout() {
        let ii = sample();
        let mut want = [0u8; 36];
        want[16..20].copy_from_slice(&[0xff, 0xff, 0x01, 0x02]);
        want[22] = 1; // IsGeneric
        want[23] = 1; // Subscribe
        want[24..28].copy_from_slice(&[0xff, 0xff, 0x00, 0x40]); // Type, TrapNumber
        want[28..32].copy_from_slice(&[0xab, 0xcd, 0xef, 0x13]); // QPN, RespTimeValue
        want[33..36].copy_from_slice(&[0xff, 0xff, 0xfe]); // ProducerType
        assert_eq!(ii.to_bytes().unwrap(), want);
        assert_eq!(InformInfo::decode(&want).unwrap(), ii);
        assert!(InformInfo::decode(&want[..35]).is_err());
        // Reserved bits are not read: byte 32 and the 3 bits above
        // RespTimeValue.
        let mut noisy = want;
        noisy[32] = 0xff;
        noisy[31] |= 0xe0;
        noisy[20] = 0xff;
        assert_eq!(InformInfo::decode(&noisy).unwrap(), ii);
        for bad in [
            InformInfo { qpn: 1 << 24, ..ii },
            InformInfo {
                resp_time_value: 32,
                ..ii
            },
            InformInfo {
                producer_type: 1 << 24,
                ..ii
            },
        ] {
            assert!(matches!(bad.to_bytes(), Err(Error::FieldOverflow { .. })));
        }
    }

    #[test]
    fn inform_info_record_matches_the_spec_layout() {
        let rec = InformInfoRecord {
            subscriber_gid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1]),
            enumeration: 0x0102,
            inform_info: sample(),
        };
        let b = rec.to_bytes().unwrap();
        assert_eq!(b.len(), 60);
        assert_eq!(&b[0..16], &rec.subscriber_gid.0);
        assert_eq!(&b[16..24], &[0x01, 0x02, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[24..], &sample().to_bytes().unwrap()[..]);
        assert_eq!(InformInfoRecord::decode(&b).unwrap(), rec);
        assert!(InformInfoRecord::decode(&b[..59]).is_err());
        assert_eq!(InformInfoRecordMask::PRODUCER_TYPE.bits(), 1 << 15);
    }
}
