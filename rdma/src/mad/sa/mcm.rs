//! MCMemberRecord (IBA 15.2.5.17): multicast groups and their members, the
//! record of a join (Set) and a leave (Delete).

use super::path::{pack_selector, split_selector, Selector};
use super::{attr_id, Component as C, SaRecord};
use crate::mad::wire::{fit, nibbles, In, Out};
use crate::mad::{class, Attribute, Result};
use crate::Gid;

bitflags::bitflags! {
    /// JoinState (4 bits): the kinds of membership a port holds, or asks
    /// for (a join) or gives up (a leave).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct JoinState: u8 {
        /// Full member: sends and receives.
        const FULL_MEMBER = 1;
        /// Non member: receives only.
        const NON_MEMBER = 2;
        /// Send-only non member.
        const SEND_ONLY_NON_MEMBER = 4;
        /// Send-only full member.
        const SEND_ONLY_FULL_MEMBER = 8;
    }
}

bitflags::bitflags! {
    /// The ComponentMask bits of an MCMemberRecord query, join or leave.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct McMemberRecordMask: u64 {
        /// MGID.
        const MGID = 1 << 0;
        /// PortGID.
        const PORT_GID = 1 << 1;
        /// Q_Key.
        const QKEY = 1 << 2;
        /// MLID.
        const MLID = 1 << 3;
        /// MTUSelector.
        const MTU_SELECTOR = 1 << 4;
        /// MTU.
        const MTU = 1 << 5;
        /// TClass.
        const TCLASS = 1 << 6;
        /// P_Key.
        const PKEY = 1 << 7;
        /// RateSelector.
        const RATE_SELECTOR = 1 << 8;
        /// Rate.
        const RATE = 1 << 9;
        /// PacketLifeTimeSelector.
        const PACKET_LIFE_TIME_SELECTOR = 1 << 10;
        /// PacketLifeTime.
        const PACKET_LIFE_TIME = 1 << 11;
        /// SL.
        const SL = 1 << 12;
        /// FlowLabel.
        const FLOW_LABEL = 1 << 13;
        /// HopLimit.
        const HOP_LIMIT = 1 << 14;
        /// Scope.
        const SCOPE = 1 << 15;
        /// JoinState.
        const JOIN_STATE = 1 << 16;
        /// ProxyJoin.
        const PROXY_JOIN = 1 << 17;
    }
}

/// MCMemberRecord (IBA 15.2.5.17, 52 bytes; 56 in a table): a multicast
/// group (MGID, MLID and the path parameters of its members) and one
/// member's port and join state.
///
/// | byte | field |
/// |---|---|
/// | 0-15 | MGID |
/// | 16-31 | PortGID |
/// | 32-35 | Q_Key |
/// | 36-37 | MLID |
/// | 38 | MTUSelector (2), MTU (6) |
/// | 39 | TClass |
/// | 40-41 | P_Key |
/// | 42 | RateSelector (2), Rate (6) |
/// | 43 | PacketLifeTimeSelector (2), PacketLifeTime (6) |
/// | 44-47 | SL (4), FlowLabel (20), HopLimit (8) |
/// | 48 | Scope (4), JoinState (4) |
/// | 49 | ProxyJoin (1), reserved (7) |
/// | 50-51 | reserved |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct McMemberRecord {
    /// The group's GID (zero in a join: the SA assigns one).
    pub mgid: Gid,
    /// The member port's GID.
    pub port_gid: Gid,
    pub qkey: u32,
    pub mlid: u16,
    pub mtu_selector: Selector,
    /// 6 bits.
    pub mtu: u8,
    pub tclass: u8,
    pub pkey: u16,
    pub rate_selector: Selector,
    /// 6 bits.
    pub rate: u8,
    pub packet_life_time_selector: Selector,
    /// 6 bits.
    pub packet_life_time: u8,
    /// 4 bits.
    pub sl: u8,
    /// 20 bits.
    pub flow_label: u32,
    pub hop_limit: u8,
    /// 4 bits: 2 link-local, 5 site-local, 8 organization-local, 14 global.
    pub scope: u8,
    pub join_state: JoinState,
    /// The request joins for PortGID, a port other than the requester's.
    pub proxy_join: bool,
}

impl Attribute for McMemberRecord {
    const ID: u16 = attr_id::MC_MEMBER_RECORD;
    const NAME: &'static str = "MCMemberRecord";
    const SIZE: usize = 52;

    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let (mtu_selector, mtu) = split_selector(r.u8(38)?);
        let (rate_selector, rate) = split_selector(r.u8(42)?);
        let (packet_life_time_selector, packet_life_time) = split_selector(r.u8(43)?);
        let w44 = r.u32(44)?;
        let b48 = r.u8(48)?;
        Ok(McMemberRecord {
            mgid: Gid(r.bytes(0)?),
            port_gid: Gid(r.bytes(16)?),
            qkey: r.u32(32)?,
            mlid: r.u16(36)?,
            mtu_selector,
            mtu,
            tclass: r.u8(39)?,
            pkey: r.u16(40)?,
            rate_selector,
            rate,
            packet_life_time_selector,
            packet_life_time,
            sl: (w44 >> 28) as u8,
            flow_label: (w44 >> 8) & 0xf_ffff,
            hop_limit: w44 as u8,
            scope: b48 >> 4,
            join_state: JoinState::from_bits_retain(b48 & 0xf),
            proxy_join: r.u8(49)? >> 7 != 0,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let sl = fit("SL", 4, self.sl.into())? as u32;
        let fl = fit("FlowLabel", 20, self.flow_label.into())? as u32;
        w.bytes(0, &self.mgid.0)?;
        w.bytes(16, &self.port_gid.0)?;
        w.u32(32, self.qkey)?;
        w.u16(36, self.mlid)?;
        w.u8(38, pack_selector("MTU", self.mtu_selector, self.mtu)?)?;
        w.u8(39, self.tclass)?;
        w.u16(40, self.pkey)?;
        w.u8(42, pack_selector("Rate", self.rate_selector, self.rate)?)?;
        w.u8(
            43,
            pack_selector(
                "PacketLifeTime",
                self.packet_life_time_selector,
                self.packet_life_time,
            )?,
        )?;
        w.u32(44, sl << 28 | fl << 8 | u32::from(self.hop_limit))?;
        w.u8(
            48,
            nibbles("Scope", self.scope, "JoinState", self.join_state.bits())?,
        )?;
        w.u8(49, u8::from(self.proxy_join) << 7)?;
        w.u16(50, 0)
    }
}

impl SaRecord for McMemberRecord {
    type Mask = McMemberRecordMask;
    /// The 23 reserved bits after ProxyJoin have no mask bit.
    const COMPONENTS: &'static [C] = &[
        C::new("MGID", 0, 128),
        C::new("PortGID", 128, 128),
        C::new("Q_Key", 256, 32),
        C::new("MLID", 288, 16),
        C::new("MTUSelector", 304, 2),
        C::new("MTU", 306, 6),
        C::new("TClass", 312, 8),
        C::new("P_Key", 320, 16),
        C::new("RateSelector", 336, 2),
        C::new("Rate", 338, 6),
        C::new("PacketLifeTimeSelector", 344, 2),
        C::new("PacketLifeTime", 346, 6),
        C::new("SL", 352, 4),
        C::new("FlowLabel", 356, 20),
        C::new("HopLimit", 376, 8),
        C::new("Scope", 384, 4),
        C::new("JoinState", 388, 4),
        C::new("ProxyJoin", 392, 1),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::Error;

    fn sample() -> McMemberRecord {
        McMemberRecord {
            // IPoIB's IPv4 broadcast group of P_Key 0xffff.
            mgid: Gid([
                0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
            ]),
            port_gid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1]),
            qkey: 0x0000_000b,
            mlid: 0xc001,
            mtu_selector: Selector::Exactly,
            mtu: 4,
            tclass: 0x21,
            pkey: 0xffff,
            rate_selector: Selector::Exactly,
            rate: 3,
            packet_life_time_selector: Selector::Best,
            packet_life_time: 0x13,
            sl: 0xa,
            flow_label: 0x1_2345,
            hop_limit: 0xfe,
            scope: 2,
            join_state: JoinState::FULL_MEMBER | JoinState::SEND_ONLY_FULL_MEMBER,
            proxy_join: true,
        }
    }

    #[test]
    fn mc_member_record_matches_the_spec_layout() {
        let m = sample();
        let mut want = [0u8; 52];
        want[0..16].copy_from_slice(&m.mgid.0);
        want[16..32].copy_from_slice(&m.port_gid.0);
        want[32..36].copy_from_slice(&[0, 0, 0, 0x0b]);
        want[36..38].copy_from_slice(&[0xc0, 0x01]);
        want[38] = 0x84; // MTUSelector 2, MTU 4
        want[39] = 0x21;
        want[40..42].copy_from_slice(&[0xff, 0xff]);
        want[42] = 0x83; // RateSelector 2, Rate 3
        want[43] = 0xd3; // PacketLifeTimeSelector 3, 0x13
        want[44..48].copy_from_slice(&[0xa1, 0x23, 0x45, 0xfe]); // SL a, FL 12345, HL fe
        want[48] = 0x29; // Scope 2, JoinState 0b1001
        want[49] = 0x80; // ProxyJoin
        assert_eq!(m.to_bytes().unwrap(), want);
        assert_eq!(McMemberRecord::decode(&want).unwrap(), m);
        assert!(McMemberRecord::decode(&want[..51]).is_err());
        let mut dirty = [0xffu8; 52];
        McMemberRecord::default().encode_into(&mut dirty).unwrap();
        assert!(dirty.iter().all(|&b| b == 0));
        assert_eq!(McMemberRecordMask::PROXY_JOIN.bits(), 1 << 17);
    }

    #[test]
    fn mc_member_record_fields_that_overflow_do_not_encode() {
        let m = sample();
        for bad in [
            McMemberRecord { sl: 16, ..m },
            McMemberRecord {
                flow_label: 1 << 20,
                ..m
            },
            McMemberRecord { scope: 16, ..m },
            McMemberRecord { mtu: 64, ..m },
            McMemberRecord {
                join_state: JoinState::from_bits_retain(0x10),
                ..m
            },
        ] {
            assert!(
                matches!(bad.to_bytes(), Err(Error::FieldOverflow { .. })),
                "{bad:?}"
            );
        }
    }
}
