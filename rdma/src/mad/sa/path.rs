//! PathRecord (IBA 15.2.5.16) and the selectors it shares with
//! MCMemberRecord.

use super::{attr_id, Component as C, SaRecord};
use crate::mad::wire::{fit, In, Out};
use crate::mad::{class, Attribute, Result};
use crate::Gid;

/// How a query compares a 6-bit MTU, rate or packet lifetime: the 2-bit
/// selector above the value (IBA 15.2.5.16, table 210).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Selector {
    /// 0: greater than the value.
    #[default]
    GreaterThan,
    /// 1: less than the value.
    LessThan,
    /// 2: exactly the value.
    Exactly,
    /// 3: the best available: the largest MTU or rate, the smallest packet
    /// lifetime.
    Best,
}

impl Selector {
    /// The selector of the 2 low bits of `v`.
    pub fn from_bits(v: u8) -> Selector {
        match v & 3 {
            0 => Selector::GreaterThan,
            1 => Selector::LessThan,
            2 => Selector::Exactly,
            _ => Selector::Best,
        }
    }
    /// The 2-bit code.
    pub fn bits(self) -> u8 {
        match self {
            Selector::GreaterThan => 0,
            Selector::LessThan => 1,
            Selector::Exactly => 2,
            Selector::Best => 3,
        }
    }
}

/// Splits a `selector (2) | value (6)` byte.
pub(super) fn split_selector(b: u8) -> (Selector, u8) {
    (Selector::from_bits(b >> 6), b & 0x3f)
}

/// Packs a `selector (2) | value (6)` byte, checking the value fits.
pub(super) fn pack_selector(name: &'static str, sel: Selector, v: u8) -> Result<u8> {
    Ok(sel.bits() << 6 | fit(name, 6, v.into())? as u8)
}

bitflags::bitflags! {
    /// The ComponentMask bits of a PathRecord query, one per field in the
    /// order of the record (ServiceID counts twice: its two 32-bit halves,
    /// once reserved fields, keep their bits).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct PathRecordMask: u64 {
        /// The upper 32 bits of ServiceID.
        const SERVICE_ID_MSB = 1 << 0;
        /// The lower 32 bits of ServiceID.
        const SERVICE_ID_LSB = 1 << 1;
        /// ServiceID (both halves).
        const SERVICE_ID = 0b11;
        /// DGID.
        const DGID = 1 << 2;
        /// SGID.
        const SGID = 1 << 3;
        /// DLID.
        const DLID = 1 << 4;
        /// SLID.
        const SLID = 1 << 5;
        /// RawTraffic.
        const RAW_TRAFFIC = 1 << 6;
        /// The reserved bits after RawTraffic.
        const RESERVED0 = 1 << 7;
        /// FlowLabel.
        const FLOW_LABEL = 1 << 8;
        /// HopLimit.
        const HOP_LIMIT = 1 << 9;
        /// TClass.
        const TCLASS = 1 << 10;
        /// Reversible.
        const REVERSIBLE = 1 << 11;
        /// NumbPath.
        const NUMB_PATH = 1 << 12;
        /// P_Key.
        const PKEY = 1 << 13;
        /// QoSClass.
        const QOS_CLASS = 1 << 14;
        /// SL.
        const SL = 1 << 15;
        /// MtuSelector.
        const MTU_SELECTOR = 1 << 16;
        /// MTU.
        const MTU = 1 << 17;
        /// RateSelector.
        const RATE_SELECTOR = 1 << 18;
        /// Rate.
        const RATE = 1 << 19;
        /// PacketLifeTimeSelector.
        const PACKET_LIFE_TIME_SELECTOR = 1 << 20;
        /// PacketLifeTime.
        const PACKET_LIFE_TIME = 1 << 21;
        /// Preference.
        const PREFERENCE = 1 << 22;
    }
}

/// PathRecord (IBA 15.2.5.16, 64 bytes): a path between two ports, with
/// what a connection over it needs (LIDs, SL, MTU, rate, P_Key...).
///
/// | byte | field |
/// |---|---|
/// | 0-7 | ServiceID |
/// | 8-23 | DGID |
/// | 24-39 | SGID |
/// | 40-41 | DLID |
/// | 42-43 | SLID |
/// | 44-47 | RawTraffic (1), reserved (3), FlowLabel (20), HopLimit (8) |
/// | 48 | TClass |
/// | 49 | Reversible (1), NumbPath (7) |
/// | 50-51 | P_Key |
/// | 52-53 | QoSClass (12), SL (4) |
/// | 54 | MtuSelector (2), MTU (6) |
/// | 55 | RateSelector (2), Rate (6) |
/// | 56 | PacketLifeTimeSelector (2), PacketLifeTime (6) |
/// | 57 | Preference |
/// | 58-63 | reserved |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct PathRecord {
    pub service_id: u64,
    pub dgid: Gid,
    pub sgid: Gid,
    pub dlid: u16,
    pub slid: u16,
    /// The path is for raw packets (no GRH, no BTH).
    pub raw_traffic: bool,
    /// 20 bits.
    pub flow_label: u32,
    pub hop_limit: u8,
    pub tclass: u8,
    /// The reverse path is also valid (a request: only reversible paths).
    pub reversible: bool,
    /// 7 bits: in a request, the most paths to return.
    pub numb_path: u8,
    pub pkey: u16,
    /// 12 bits.
    pub qos_class: u16,
    /// 4 bits.
    pub sl: u8,
    pub mtu_selector: Selector,
    /// 6 bits: 1 256, 2 512, 3 1024, 4 2048, 5 4096.
    pub mtu: u8,
    pub rate_selector: Selector,
    /// 6 bits: 2 2.5 Gb/s, 3 10, 6 20, 7 40, ...
    pub rate: u8,
    pub packet_life_time_selector: Selector,
    /// 6 bits: 4.096 us * 2^PacketLifeTime.
    pub packet_life_time: u8,
    /// Lower is better, among the paths of one answer.
    pub preference: u8,
}

impl Attribute for PathRecord {
    const ID: u16 = attr_id::PATH_RECORD;
    const NAME: &'static str = "PathRecord";
    const SIZE: usize = 64;

    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let w44 = r.u32(44)?;
        let b49 = r.u8(49)?;
        let qs = r.u16(52)?;
        let (mtu_selector, mtu) = split_selector(r.u8(54)?);
        let (rate_selector, rate) = split_selector(r.u8(55)?);
        let (packet_life_time_selector, packet_life_time) = split_selector(r.u8(56)?);
        Ok(PathRecord {
            service_id: r.u64(0)?,
            dgid: Gid(r.bytes(8)?),
            sgid: Gid(r.bytes(24)?),
            dlid: r.u16(40)?,
            slid: r.u16(42)?,
            raw_traffic: w44 >> 31 != 0,
            flow_label: (w44 >> 8) & 0xf_ffff,
            hop_limit: w44 as u8,
            tclass: r.u8(48)?,
            reversible: b49 >> 7 != 0,
            numb_path: b49 & 0x7f,
            pkey: r.u16(50)?,
            qos_class: qs >> 4,
            sl: (qs & 0xf) as u8,
            mtu_selector,
            mtu,
            rate_selector,
            rate,
            packet_life_time_selector,
            packet_life_time,
            preference: r.u8(57)?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let fl = fit("FlowLabel", 20, self.flow_label.into())? as u32;
        let np = fit("NumbPath", 7, self.numb_path.into())? as u8;
        let qos = fit("QoSClass", 12, self.qos_class.into())? as u16;
        let sl = fit("SL", 4, self.sl.into())? as u16;
        w.u64(0, self.service_id)?;
        w.bytes(8, &self.dgid.0)?;
        w.bytes(24, &self.sgid.0)?;
        w.u16(40, self.dlid)?;
        w.u16(42, self.slid)?;
        w.u32(
            44,
            u32::from(self.raw_traffic) << 31 | fl << 8 | u32::from(self.hop_limit),
        )?;
        w.u8(48, self.tclass)?;
        w.u8(49, u8::from(self.reversible) << 7 | np)?;
        w.u16(50, self.pkey)?;
        w.u16(52, qos << 4 | sl)?;
        w.u8(54, pack_selector("MTU", self.mtu_selector, self.mtu)?)?;
        w.u8(55, pack_selector("Rate", self.rate_selector, self.rate)?)?;
        w.u8(
            56,
            pack_selector(
                "PacketLifeTime",
                self.packet_life_time_selector,
                self.packet_life_time,
            )?,
        )?;
        w.u8(57, self.preference)?;
        w.bytes(58, &[0; 6])
    }
}

impl SaRecord for PathRecord {
    type Mask = PathRecordMask;
    /// The 48 reserved bits at the end have no mask bit.
    const COMPONENTS: &'static [C] = &[
        C::new("ServiceID (upper 32 bits)", 0, 32),
        C::new("ServiceID (lower 32 bits)", 32, 32),
        C::new("DGID", 64, 128),
        C::new("SGID", 192, 128),
        C::new("DLID", 320, 16),
        C::new("SLID", 336, 16),
        C::new("RawTraffic", 352, 1),
        C::new("Reserved", 353, 3),
        C::new("FlowLabel", 356, 20),
        C::new("HopLimit", 376, 8),
        C::new("TClass", 384, 8),
        C::new("Reversible", 392, 1),
        C::new("NumbPath", 393, 7),
        C::new("P_Key", 400, 16),
        C::new("QoSClass", 416, 12),
        C::new("SL", 428, 4),
        C::new("MtuSelector", 432, 2),
        C::new("MTU", 434, 6),
        C::new("RateSelector", 440, 2),
        C::new("Rate", 442, 6),
        C::new("PacketLifeTimeSelector", 448, 2),
        C::new("PacketLifeTime", 450, 6),
        C::new("Preference", 456, 8),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::Error;

    pub(crate) fn sample() -> PathRecord {
        PathRecord {
            service_id: 0x1000_0000_0000_2345,
            dgid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 2]),
            sgid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1]),
            dlid: 0x0002,
            slid: 0x0001,
            raw_traffic: true,
            flow_label: 0xa_bcde,
            hop_limit: 0x40,
            tclass: 0x12,
            reversible: true,
            numb_path: 0x7f,
            pkey: 0xffff,
            qos_class: 0xabc,
            sl: 5,
            mtu_selector: Selector::Exactly,
            mtu: 4,
            rate_selector: Selector::Best,
            rate: 7,
            packet_life_time_selector: Selector::LessThan,
            packet_life_time: 0x12,
            preference: 9,
        }
    }

    #[test]
    fn path_record_matches_the_spec_layout() {
        let p = sample();
        let mut want = [0u8; 64];
        want[0..8].copy_from_slice(&[0x10, 0, 0, 0, 0, 0, 0x23, 0x45]);
        want[8..24].copy_from_slice(&p.dgid.0);
        want[24..40].copy_from_slice(&p.sgid.0);
        want[40..44].copy_from_slice(&[0, 2, 0, 1]); // DLID, SLID
        want[44..48].copy_from_slice(&[0x80 | 0x0a, 0xbc, 0xde, 0x40]); // Raw 1, FL, HopLimit
        want[48] = 0x12; // TClass
        want[49] = 0xff; // Reversible 1, NumbPath 127
        want[50..52].copy_from_slice(&[0xff, 0xff]); // P_Key
        want[52..54].copy_from_slice(&[0xab, 0xc5]); // QoSClass 0xabc, SL 5
        want[54] = 0x80 | 4; // MtuSelector 2, MTU 4
        want[55] = 0xc0 | 7; // RateSelector 3, Rate 7
        want[56] = 0x40 | 0x12; // PacketLifeTimeSelector 1, 0x12
        want[57] = 9;
        assert_eq!(p.to_bytes().unwrap(), want);
        assert_eq!(PathRecord::decode(&want).unwrap(), p);
        assert!(PathRecord::decode(&want[..63]).is_err());
        let mut dirty = [0xffu8; 64];
        PathRecord::default().encode_into(&mut dirty).unwrap();
        assert!(dirty.iter().all(|&b| b == 0));
    }

    #[test]
    fn path_record_fields_that_overflow_do_not_encode() {
        let p = sample();
        for bad in [
            PathRecord {
                flow_label: 1 << 20,
                ..p
            },
            PathRecord {
                numb_path: 0x80,
                ..p
            },
            PathRecord {
                qos_class: 0x1000,
                ..p
            },
            PathRecord { sl: 16, ..p },
            PathRecord { mtu: 64, ..p },
            PathRecord { rate: 0x40, ..p },
            PathRecord {
                packet_life_time: 0xff,
                ..p
            },
        ] {
            assert!(
                matches!(bad.to_bytes(), Err(Error::FieldOverflow { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn selectors_round_trip_and_the_mask_follows_the_record() {
        for v in 0..4 {
            assert_eq!(Selector::from_bits(v).bits(), v);
        }
        assert_eq!(PathRecordMask::SERVICE_ID.bits(), 3);
        assert_eq!(PathRecordMask::PREFERENCE.bits(), 1 << 22);
        assert_eq!(
            (PathRecordMask::DGID | PathRecordMask::SGID | PathRecordMask::NUMB_PATH).bits(),
            0x100c
        );
    }
}
