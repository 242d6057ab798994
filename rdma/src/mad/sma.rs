//! Subnet management agent attributes (IBA 14.2.5) of a node, beyond
//! NodeInfo and PortInfo: NodeDescription, SwitchInfo and SMInfo. The
//! tables (forwarding tables, GUIDInfo, P_KeyTable, SLtoVLMappingTable,
//! VLArbitrationTable) are in [`tables`](super::tables), Notice (the
//! attribute of traps) in [`notice`](super::notice).

use std::fmt;

use super::attr::{bit, id, Attribute};
use super::wire::{fit, nibbles, In, Out};
use super::{class, Error, Result};

/// Whether `c` is a subnet management class (LID-routed or directed).
pub(super) fn smi(c: u8) -> bool {
    class::is_smi(c)
}

/// NodeDescription (IBA 14.2.5.2, 64 bytes): the node's name, UTF-8 padded
/// with NULs (not necessarily NUL-terminated when all 64 bytes are used).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeDescription(pub [u8; 64]);

impl NodeDescription {
    /// A description from text of at most 64 bytes.
    pub fn new(text: &str) -> Result<NodeDescription> {
        let b = text.as_bytes();
        if b.len() > 64 {
            return Err(Error::FieldOverflow {
                field: "NodeString",
                bits: 512,
                value: b.len() as u64,
            });
        }
        let mut d = [0u8; 64];
        d[..b.len()].copy_from_slice(b);
        Ok(NodeDescription(d))
    }

    /// The text up to the first NUL (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(64);
        String::from_utf8_lossy(&self.0[..end]).into_owned()
    }
}

impl Default for NodeDescription {
    fn default() -> NodeDescription {
        NodeDescription([0; 64])
    }
}

impl fmt::Debug for NodeDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("NodeDescription")
            .field(&self.text())
            .finish()
    }
}

impl Attribute for NodeDescription {
    const ID: u16 = id::NODE_DESCRIPTION;
    const NAME: &'static str = "NodeDescription";
    const SIZE: usize = 64;

    fn in_class(c: u8) -> bool {
        smi(c)
    }
    fn decode(b: &[u8]) -> Result<Self> {
        Ok(NodeDescription(
            In::new(b, Self::NAME, Self::SIZE)?.bytes(0)?,
        ))
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        Out::new(out, Self::NAME, Self::SIZE)?.bytes(0, &self.0)
    }
}

/// SwitchInfo (IBA 14.2.5.4, 20 bytes).
///
/// | byte | field |
/// |---|---|
/// | 0-1 | LinearFDBCap |
/// | 2-3 | RandomFDBCap |
/// | 4-5 | MulticastFDBCap |
/// | 6-7 | LinearFDBTop |
/// | 8 | DefaultPort |
/// | 9 | DefaultMulticastPrimaryPort |
/// | 10 | DefaultMulticastNotPrimaryPort |
/// | 11 | LifeTimeValue (5), PortStateChange (1), OptimizedSLtoVLMappingProgramming (2) |
/// | 12-13 | LIDsPerPort |
/// | 14-15 | PartitionEnforcementCap |
/// | 16 | InboundEnforcementCap, OutboundEnforcementCap, FilterRawInboundCap, FilterRawOutboundCap, EnhancedPort0 (1 each), reserved (3) |
/// | 17 | reserved |
/// | 18-19 | MulticastFDBTop |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct SwitchInfo {
    pub linear_fdb_cap: u16,
    pub random_fdb_cap: u16,
    pub multicast_fdb_cap: u16,
    pub linear_fdb_top: u16,
    pub default_port: u8,
    pub default_multicast_primary_port: u8,
    pub default_multicast_not_primary_port: u8,
    /// 5 bits.
    pub life_time_value: u8,
    pub port_state_change: bool,
    /// 2 bits.
    pub optimized_sl_to_vl_mapping_programming: u8,
    pub lids_per_port: u16,
    pub partition_enforcement_cap: u16,
    pub inbound_enforcement_cap: bool,
    pub outbound_enforcement_cap: bool,
    pub filter_raw_inbound_cap: bool,
    pub filter_raw_outbound_cap: bool,
    pub enhanced_port0: bool,
    pub multicast_fdb_top: u16,
}

impl Attribute for SwitchInfo {
    const ID: u16 = id::SWITCH_INFO;
    const NAME: &'static str = "SwitchInfo";
    const SIZE: usize = 20;

    fn in_class(c: u8) -> bool {
        smi(c)
    }
    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let (b11, b16) = (r.u8(11)?, r.u8(16)?);
        Ok(SwitchInfo {
            linear_fdb_cap: r.u16(0)?,
            random_fdb_cap: r.u16(2)?,
            multicast_fdb_cap: r.u16(4)?,
            linear_fdb_top: r.u16(6)?,
            default_port: r.u8(8)?,
            default_multicast_primary_port: r.u8(9)?,
            default_multicast_not_primary_port: r.u8(10)?,
            life_time_value: b11 >> 3,
            port_state_change: bit(b11, 2),
            optimized_sl_to_vl_mapping_programming: b11 & 3,
            lids_per_port: r.u16(12)?,
            partition_enforcement_cap: r.u16(14)?,
            inbound_enforcement_cap: bit(b16, 7),
            outbound_enforcement_cap: bit(b16, 6),
            filter_raw_inbound_cap: bit(b16, 5),
            filter_raw_outbound_cap: bit(b16, 4),
            enhanced_port0: bit(b16, 3),
            multicast_fdb_top: r.u16(18)?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let lt = fit("LifeTimeValue", 5, self.life_time_value.into())? as u8;
        let opt = fit(
            "OptimizedSLtoVLMappingProgramming",
            2,
            self.optimized_sl_to_vl_mapping_programming.into(),
        )? as u8;
        w.u16(0, self.linear_fdb_cap)?;
        w.u16(2, self.random_fdb_cap)?;
        w.u16(4, self.multicast_fdb_cap)?;
        w.u16(6, self.linear_fdb_top)?;
        w.u8(8, self.default_port)?;
        w.u8(9, self.default_multicast_primary_port)?;
        w.u8(10, self.default_multicast_not_primary_port)?;
        w.u8(11, lt << 3 | u8::from(self.port_state_change) << 2 | opt)?;
        w.u16(12, self.lids_per_port)?;
        w.u16(14, self.partition_enforcement_cap)?;
        w.u8(
            16,
            u8::from(self.inbound_enforcement_cap) << 7
                | u8::from(self.outbound_enforcement_cap) << 6
                | u8::from(self.filter_raw_inbound_cap) << 5
                | u8::from(self.filter_raw_outbound_cap) << 4
                | u8::from(self.enhanced_port0) << 3,
        )?;
        w.u8(17, 0)?;
        w.u16(18, self.multicast_fdb_top)
    }
}

/// SMInfo (IBA 14.2.5.13, 24 bytes): a subnet manager's GUID, key,
/// activity count, priority and state.
///
/// | byte | field |
/// |---|---|
/// | 0-7 | GUID |
/// | 8-15 | SM_Key |
/// | 16-19 | ActCount |
/// | 20 | Priority (4), SMState (4) |
/// | 21-23 | reserved |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct SmInfo {
    pub guid: u64,
    pub sm_key: u64,
    pub act_count: u32,
    /// 4 bits.
    pub priority: u8,
    /// 4 bits: 0 not active, 1 discovering, 2 standby, 3 master.
    pub sm_state: u8,
}

impl SmInfo {
    /// SMState: not active.
    pub const NOT_ACTIVE: u8 = 0;
    /// SMState: discovering.
    pub const DISCOVERING: u8 = 1;
    /// SMState: standby.
    pub const STANDBY: u8 = 2;
    /// SMState: master.
    pub const MASTER: u8 = 3;
}

impl Attribute for SmInfo {
    const ID: u16 = id::SM_INFO;
    const NAME: &'static str = "SMInfo";
    const SIZE: usize = 24;

    fn in_class(c: u8) -> bool {
        smi(c)
    }
    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let b20 = r.u8(20)?;
        Ok(SmInfo {
            guid: r.u64(0)?,
            sm_key: r.u64(8)?,
            act_count: r.u32(16)?,
            priority: b20 >> 4,
            sm_state: b20 & 0xf,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        w.u64(0, self.guid)?;
        w.u64(8, self.sm_key)?;
        w.u32(16, self.act_count)?;
        w.u8(
            20,
            nibbles("Priority", self.priority, "SMState", self.sm_state)?,
        )?;
        w.bytes(21, &[0; 3])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::{
        GuidInfo, LinearForwardingTable, MulticastForwardingTable, Notice, PKeyTable,
        SlToVlMappingTable, VlArbitrationTable,
    };

    #[test]
    fn node_description_is_text_padded_with_nuls() {
        let d = NodeDescription::new("ibsim0 HCA-1").unwrap();
        let b = d.to_bytes().unwrap();
        assert_eq!(&b[..12], b"ibsim0 HCA-1");
        assert!(b[12..].iter().all(|&c| c == 0));
        assert_eq!(NodeDescription::decode(&b).unwrap().text(), "ibsim0 HCA-1");
        assert!(NodeDescription::new(&"x".repeat(65)).is_err());
        let full = NodeDescription::new(&"y".repeat(64)).unwrap();
        assert_eq!(full.text().len(), 64);
        assert!(NodeDescription::decode(&b[..63]).is_err());
    }

    #[test]
    fn switch_info_matches_the_spec_layout() {
        let si = SwitchInfo {
            linear_fdb_cap: 0xc000,
            random_fdb_cap: 0,
            multicast_fdb_cap: 0x400,
            linear_fdb_top: 0x12,
            default_port: 1,
            default_multicast_primary_port: 2,
            default_multicast_not_primary_port: 3,
            life_time_value: 18,
            port_state_change: true,
            optimized_sl_to_vl_mapping_programming: 2,
            lids_per_port: 0,
            partition_enforcement_cap: 32,
            inbound_enforcement_cap: true,
            outbound_enforcement_cap: false,
            filter_raw_inbound_cap: true,
            filter_raw_outbound_cap: false,
            enhanced_port0: true,
            multicast_fdb_top: 0xc010,
        };
        let want = [
            0xc0, 0x00, 0, 0, 0x04, 0x00, 0x00, 0x12, // FDB caps, top
            1, 2, 3,    // default ports
            0x96, // LifeTimeValue 18, PortStateChange 1, OptimizedSLtoVL 2
            0, 0, 0, 32,   // LIDsPerPort, PartitionEnforcementCap
            0xa8, // IEC 1, OEC 0, FRIC 1, FROC 0, EnhancedPort0 1
            0, 0xc0, 0x10, // reserved, MulticastFDBTop
        ];
        assert_eq!(si.to_bytes().unwrap(), want);
        assert_eq!(SwitchInfo::decode(&want).unwrap(), si);
        let bad = SwitchInfo {
            life_time_value: 32,
            ..si
        };
        assert!(matches!(bad.to_bytes(), Err(Error::FieldOverflow { .. })));
    }

    #[test]
    fn sm_info_matches_the_spec_layout() {
        let sm = SmInfo {
            guid: 0x0002_c903_0000_0001,
            sm_key: 0,
            act_count: 0x100,
            priority: 15,
            sm_state: SmInfo::MASTER,
        };
        let b = sm.to_bytes().unwrap();
        assert_eq!(&b[..8], &0x0002_c903_0000_0001u64.to_be_bytes());
        assert_eq!(&b[16..21], &[0, 0, 1, 0, 0xf3]);
        assert_eq!(SmInfo::decode(&b).unwrap(), sm);
        assert!(SmInfo { priority: 16, ..sm }.to_bytes().is_err());
    }

    #[test]
    fn sma_attributes_refuse_short_input() {
        assert!(SwitchInfo::decode(&[0; 19]).is_err());
        assert!(LinearForwardingTable::decode(&[0; 63]).is_err());
        assert!(MulticastForwardingTable::decode(&[0; 63]).is_err());
        assert!(GuidInfo::decode(&[0; 63]).is_err());
        assert!(PKeyTable::decode(&[0; 63]).is_err());
        assert!(SlToVlMappingTable::decode(&[0; 7]).is_err());
        assert!(VlArbitrationTable::decode(&[0; 63]).is_err());
        assert!(SmInfo::decode(&[0; 23]).is_err());
        assert!(Notice::decode(&[0; 63]).is_err());
        assert!(GuidInfo::default().encode_into(&mut [0; 63]).is_err());
    }
}
