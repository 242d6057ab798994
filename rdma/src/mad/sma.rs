//! Subnet management agent attributes (IBA 14.2.5), beyond NodeInfo and
//! PortInfo: NodeDescription, SwitchInfo, the forwarding tables, GUIDInfo,
//! P_KeyTable, SLtoVLMappingTable, VLArbitrationTable, SMInfo, and Notice
//! (the attribute of traps, IBA 13.4.8.2).
//!
//! Tables come in blocks that fill an SMP's 64 data bytes; the attribute
//! modifier names the block (and, on a switch, the port), built by each
//! table's `attr_mod`.

use std::fmt;

use super::attr::{bit, id, Attribute};
use super::wire::{fit, nibbles, In, Out};
use super::{class, Error, Result};
use crate::Gid;

fn smi(c: u8) -> bool {
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

/// LinearForwardingTable (IBA 14.2.5.10, 64 bytes): the output ports of 64
/// consecutive unicast LIDs; block `n` (the attribute modifier) holds LIDs
/// `64n` to `64n + 63`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinearForwardingTable {
    /// `ports[i]`: the port for LID `64 * block + i` (255: no route).
    pub ports: [u8; 64],
}

impl LinearForwardingTable {
    /// LIDs per block.
    pub const ENTRIES: usize = 64;
    /// The port of a LID that has no route.
    pub const NO_ROUTE: u8 = 255;

    /// The block (the attribute modifier) and the index in it of `lid`.
    pub fn block_of(lid: u16) -> (u32, usize) {
        (u32::from(lid) / 64, usize::from(lid) % 64)
    }
    /// The attribute modifier of block `block`.
    pub fn attr_mod(block: u32) -> u32 {
        block
    }
}

impl Default for LinearForwardingTable {
    fn default() -> LinearForwardingTable {
        LinearForwardingTable { ports: [0; 64] }
    }
}

impl Attribute for LinearForwardingTable {
    const ID: u16 = id::LINEAR_FORWARDING_TABLE;
    const NAME: &'static str = "LinearForwardingTable";
    const SIZE: usize = 64;

    fn in_class(c: u8) -> bool {
        smi(c)
    }
    fn decode(b: &[u8]) -> Result<Self> {
        Ok(LinearForwardingTable {
            ports: In::new(b, Self::NAME, Self::SIZE)?.bytes(0)?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        Out::new(out, Self::NAME, Self::SIZE)?.bytes(0, &self.ports)
    }
}

/// MulticastForwardingTable (IBA 14.2.5.12, 64 bytes): for 32 consecutive
/// multicast LIDs, a 16-bit mask of the ports they are forwarded to. The
/// attribute modifier picks the 32 MLIDs (block `n`: MLIDs `0xc000 + 32n`
/// to `0xc000 + 32n + 31`) and which 16 ports the masks cover (position
/// `p`: ports `16p` to `16p + 15`, bit `i` of a mask for port `16p + i`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MulticastForwardingTable {
    /// `port_masks[i]`: the ports of MLID `0xc000 + 32 * block + i`.
    pub port_masks: [u16; 32],
}

impl MulticastForwardingTable {
    /// MLIDs per block.
    pub const ENTRIES: usize = 32;
    /// The first multicast LID.
    pub const MLID_BASE: u16 = 0xc000;

    /// The block and index of multicast LID `mlid`; `None` below 0xc000.
    pub fn block_of(mlid: u16) -> Option<(u16, usize)> {
        let off = mlid.checked_sub(Self::MLID_BASE)?;
        Some((off / 32, usize::from(off % 32)))
    }
    /// The attribute modifier: PortMask position (4 bits, bits 31-28) and
    /// block number (9 bits, bits 8-0).
    pub fn attr_mod(block: u16, position: u8) -> Result<u32> {
        let block = fit("MFT block", 9, block.into())? as u32;
        let pos = fit("MFT PortMask position", 4, position.into())? as u32;
        Ok(pos << 28 | block)
    }
}

impl Attribute for MulticastForwardingTable {
    const ID: u16 = id::MULTICAST_FORWARDING_TABLE;
    const NAME: &'static str = "MulticastForwardingTable";
    const SIZE: usize = 64;

    fn in_class(c: u8) -> bool {
        smi(c)
    }
    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let mut t = MulticastForwardingTable::default();
        for (i, m) in t.port_masks.iter_mut().enumerate() {
            *m = r.u16(2 * i)?;
        }
        Ok(t)
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        for (i, m) in self.port_masks.iter().enumerate() {
            w.u16(2 * i, *m)?;
        }
        Ok(())
    }
}

/// GUIDInfo (IBA 14.2.5.5, 64 bytes): 8 of a port's GUIDs; block `n` (the
/// attribute modifier) holds GUIDs `8n` to `8n + 7` (GUID 0 is the port
/// GUID).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GuidInfo {
    /// The GUIDs of the block.
    pub guids: [u64; 8],
}

impl GuidInfo {
    /// GUIDs per block.
    pub const ENTRIES: usize = 8;
    /// The attribute modifier of block `block`.
    pub fn attr_mod(block: u32) -> u32 {
        block
    }
}

impl Attribute for GuidInfo {
    const ID: u16 = id::GUID_INFO;
    const NAME: &'static str = "GUIDInfo";
    const SIZE: usize = 64;

    fn in_class(c: u8) -> bool {
        smi(c)
    }
    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let mut g = GuidInfo::default();
        for (i, v) in g.guids.iter_mut().enumerate() {
            *v = r.u64(8 * i)?;
        }
        Ok(g)
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        for (i, v) in self.guids.iter().enumerate() {
            w.u64(8 * i, *v)?;
        }
        Ok(())
    }
}

/// P_KeyTable (IBA 14.2.5.7, 64 bytes): 32 P_Keys of a port; the attribute
/// modifier is the block number (bits 15-0: P_Keys `32n` to `32n + 31`)
/// and, for a switch's external port, the port (bits 31-16).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PKeyTable {
    /// The P_Keys of the block (bit 15: full membership).
    pub pkeys: [u16; 32],
}

impl PKeyTable {
    /// P_Keys per block.
    pub const ENTRIES: usize = 32;
    /// The membership bit of a P_Key (set: full member).
    pub const FULL_MEMBER: u16 = 0x8000;

    /// The attribute modifier of block `block` of port `port` (0 for a
    /// channel adapter or a switch's port 0).
    pub fn attr_mod(block: u16, port: u8) -> u32 {
        u32::from(port) << 16 | u32::from(block)
    }
}

impl Attribute for PKeyTable {
    const ID: u16 = id::P_KEY_TABLE;
    const NAME: &'static str = "P_KeyTable";
    const SIZE: usize = 64;

    fn in_class(c: u8) -> bool {
        smi(c)
    }
    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let mut t = PKeyTable::default();
        for (i, v) in t.pkeys.iter_mut().enumerate() {
            *v = r.u16(2 * i)?;
        }
        Ok(t)
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        for (i, v) in self.pkeys.iter().enumerate() {
            w.u16(2 * i, *v)?;
        }
        Ok(())
    }
}

/// SLtoVLMappingTable (IBA 14.2.5.8, 8 bytes): the VL of each of the 16
/// SLs, 4 bits each, SL 0 in the high nibble of byte 0. On a switch the
/// attribute modifier names the input (bits 15-8) and output (bits 7-0)
/// ports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlToVlMappingTable {
    /// `vl[sl]` (4 bits each).
    pub vl: [u8; 16],
}

impl SlToVlMappingTable {
    /// The attribute modifier of the table from `input` to `output` port.
    pub fn attr_mod(input: u8, output: u8) -> u32 {
        u32::from(input) << 8 | u32::from(output)
    }
}

impl Attribute for SlToVlMappingTable {
    const ID: u16 = id::SL_TO_VL_MAPPING_TABLE;
    const NAME: &'static str = "SLtoVLMappingTable";
    const SIZE: usize = 8;

    fn in_class(c: u8) -> bool {
        smi(c)
    }
    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let mut t = SlToVlMappingTable::default();
        for i in 0..8 {
            let v = r.u8(i)?;
            t.vl[2 * i] = v >> 4;
            t.vl[2 * i + 1] = v & 0xf;
        }
        Ok(t)
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        for (i, p) in self.vl.chunks_exact(2).enumerate() {
            w.u8(i, nibbles("SLtoVL VL", p[0], "SLtoVL VL", p[1])?)?;
        }
        Ok(())
    }
}

/// One entry of a VL arbitration table: a VL and its weight (in units of
/// 64 bytes; 0: skip the entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VlArbEntry {
    /// 4 bits.
    pub vl: u8,
    /// The weight.
    pub weight: u8,
}

/// VLArbitrationTable (IBA 14.2.5.9, 64 bytes): 32 entries of 2 bytes,
/// each reserved (4 bits), VL (4 bits), Weight (8 bits). The attribute
/// modifier names the block (bits 31-16, [`Self::LOW_0_31`] to
/// [`Self::HIGH_32_63`]) and, on a switch, the output port (bits 15-0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VlArbitrationTable {
    /// The entries of the block.
    pub entries: [VlArbEntry; 32],
}

impl VlArbitrationTable {
    /// Block 1: the low-priority entries 0-31.
    pub const LOW_0_31: u16 = 1;
    /// Block 2: the low-priority entries 32-63.
    pub const LOW_32_63: u16 = 2;
    /// Block 3: the high-priority entries 0-31.
    pub const HIGH_0_31: u16 = 3;
    /// Block 4: the high-priority entries 32-63.
    pub const HIGH_32_63: u16 = 4;

    /// The attribute modifier of block `block` (1-4) of port `port`.
    pub fn attr_mod(block: u16, port: u8) -> u32 {
        u32::from(block) << 16 | u32::from(port)
    }
}

impl Attribute for VlArbitrationTable {
    const ID: u16 = id::VL_ARBITRATION_TABLE;
    const NAME: &'static str = "VLArbitrationTable";
    const SIZE: usize = 64;

    fn in_class(c: u8) -> bool {
        smi(c)
    }
    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let mut t = VlArbitrationTable::default();
        for (i, e) in t.entries.iter_mut().enumerate() {
            *e = VlArbEntry {
                vl: r.u8(2 * i)? & 0xf,
                weight: r.u8(2 * i + 1)?,
            };
        }
        Ok(t)
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        for (i, e) in self.entries.iter().enumerate() {
            w.u8(2 * i, fit("VLArbitration VL", 4, e.vl.into())? as u8)?;
            w.u8(2 * i + 1, e.weight)?;
        }
        Ok(())
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

/// Notice (IBA 13.4.8.2): a trap (method Trap) or an event report (SA
/// Report). These are its first 64 bytes, all that an SMP carries; a
/// GSI notice adds the IssuerGID at bytes 64-79 ([`Notice::issuer_gid`]).
///
/// | byte | field |
/// |---|---|
/// | 0 | IsGeneric (1), Type (7) |
/// | 1-3 | ProducerType (generic) or VendorID (vendor) |
/// | 4-5 | TrapNumber (generic) or DeviceID (vendor) |
/// | 6-7 | IssuerLID |
/// | 8-9 | NoticeToggle (1), NoticeCount (15) |
/// | 10-63 | DataDetails |
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Notice {
    /// Generic (a trap number the specification defines) or vendor.
    pub is_generic: bool,
    /// 7 bits: 0 fatal, 1 urgent, 2 security, 3 subnet management, 4 info.
    pub notice_type: u8,
    /// 24 bits: the producer's node type (generic) or the vendor's ID.
    pub producer_type_or_vendor_id: u32,
    /// The trap number (generic) or the vendor's device ID.
    pub trap_number_or_device_id: u16,
    /// The LID of the port that issued the notice.
    pub issuer_lid: u16,
    /// Alternates between successive notices (traps).
    pub notice_toggle: bool,
    /// 15 bits.
    pub notice_count: u16,
    /// The trap's details (their layout depends on the trap number).
    pub data_details: [u8; 54],
}

impl Default for Notice {
    fn default() -> Notice {
        Notice {
            is_generic: false,
            notice_type: 0,
            producer_type_or_vendor_id: 0,
            trap_number_or_device_id: 0,
            issuer_lid: 0,
            notice_toggle: false,
            notice_count: 0,
            data_details: [0; 54],
        }
    }
}

/// The typed details of the common generic traps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Trap {
    /// 64: a GID came into service (GIDADDR at details bytes 6-21).
    GidInService(Gid),
    /// 65: a GID went out of service.
    GidOutOfService(Gid),
    /// 66: a multicast group was created (its MGID).
    McGroupCreated(Gid),
    /// 67: a multicast group was deleted.
    McGroupDeleted(Gid),
    /// 128: a link state changed on the switch with this LID (LIDADDR at
    /// details bytes 0-1).
    LinkStateChange {
        /// The switch's LID.
        lid: u16,
    },
    /// 144: a port's CapabilityMask (or other local state) changed
    /// (LIDADDR at details bytes 2-3, CapabilityMask at bytes 6-9).
    CapabilityMaskChange {
        /// The port's LID.
        lid: u16,
        /// Its new CapabilityMask.
        capability_mask: u32,
    },
}

impl Trap {
    /// The trap number.
    pub fn number(&self) -> u16 {
        match self {
            Trap::GidInService(_) => 64,
            Trap::GidOutOfService(_) => 65,
            Trap::McGroupCreated(_) => 66,
            Trap::McGroupDeleted(_) => 67,
            Trap::LinkStateChange { .. } => 128,
            Trap::CapabilityMaskChange { .. } => 144,
        }
    }

    /// The 54 bytes of DataDetails.
    pub fn data_details(&self) -> [u8; 54] {
        let mut d = [0u8; 54];
        match *self {
            Trap::GidInService(g)
            | Trap::GidOutOfService(g)
            | Trap::McGroupCreated(g)
            | Trap::McGroupDeleted(g) => d[6..22].copy_from_slice(&g.0),
            Trap::LinkStateChange { lid } => d[0..2].copy_from_slice(&lid.to_be_bytes()),
            Trap::CapabilityMaskChange {
                lid,
                capability_mask,
            } => {
                d[2..4].copy_from_slice(&lid.to_be_bytes());
                d[6..10].copy_from_slice(&capability_mask.to_be_bytes());
            }
        }
        d
    }
}

impl Notice {
    /// The node types of a generic notice's ProducerType.
    pub const PRODUCER_CA: u32 = 1;
    /// A switch.
    pub const PRODUCER_SWITCH: u32 = 2;
    /// A router.
    pub const PRODUCER_ROUTER: u32 = 3;
    /// The subnet manager (class manager).
    pub const PRODUCER_SM: u32 = 4;

    /// A generic notice of `trap`, of type `notice_type`, from a producer
    /// of type `producer` issued by `issuer_lid`.
    pub fn generic(notice_type: u8, producer: u32, issuer_lid: u16, trap: &Trap) -> Notice {
        Notice {
            is_generic: true,
            notice_type,
            producer_type_or_vendor_id: producer,
            trap_number_or_device_id: trap.number(),
            issuer_lid,
            data_details: trap.data_details(),
            ..Notice::default()
        }
    }

    /// The trap number of a generic notice.
    pub fn trap_number(&self) -> Option<u16> {
        self.is_generic.then_some(self.trap_number_or_device_id)
    }

    /// The typed details of a generic notice of trap 64-67, 128 or 144;
    /// `None` for a vendor notice or another trap (read `data_details`).
    pub fn trap(&self) -> Option<Trap> {
        let d = &self.data_details;
        let gid = || {
            let mut g = [0u8; 16];
            g.copy_from_slice(&d[6..22]);
            Gid(g)
        };
        let u16_at = |o: usize| u16::from_be_bytes([d[o], d[o + 1]]);
        Some(match self.trap_number()? {
            64 => Trap::GidInService(gid()),
            65 => Trap::GidOutOfService(gid()),
            66 => Trap::McGroupCreated(gid()),
            67 => Trap::McGroupDeleted(gid()),
            128 => Trap::LinkStateChange { lid: u16_at(0) },
            144 => Trap::CapabilityMaskChange {
                lid: u16_at(2),
                capability_mask: u32::from_be_bytes([d[6], d[7], d[8], d[9]]),
            },
            _ => return None,
        })
    }

    /// The IssuerGID of a notice in a GSI MAD (bytes 64-79 of the
    /// attribute; an SMP has no room for it).
    pub fn issuer_gid(b: &[u8]) -> Result<Gid> {
        Ok(Gid(In::new(b, "Notice IssuerGID", 80)?.bytes(64)?))
    }
}

impl Attribute for Notice {
    const ID: u16 = id::NOTICE;
    const NAME: &'static str = "Notice";
    const SIZE: usize = 64;

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let (b0, w8) = (r.u8(0)?, r.u16(8)?);
        Ok(Notice {
            is_generic: bit(b0, 7),
            notice_type: b0 & 0x7f,
            producer_type_or_vendor_id: r.u24_low(0)?,
            trap_number_or_device_id: r.u16(4)?,
            issuer_lid: r.u16(6)?,
            notice_toggle: w8 >> 15 != 0,
            notice_count: w8 & 0x7fff,
            data_details: r.bytes(10)?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let ty = fit("Type", 7, self.notice_type.into())? as u32;
        let prod = fit(
            "ProducerType/VendorID",
            24,
            self.producer_type_or_vendor_id.into(),
        )? as u32;
        let count = fit("NoticeCount", 15, self.notice_count.into())? as u16;
        w.u32(0, u32::from(self.is_generic) << 31 | ty << 24 | prod)?;
        w.u16(4, self.trap_number_or_device_id)?;
        w.u16(6, self.issuer_lid)?;
        w.u16(8, u16::from(self.notice_toggle) << 15 | count)?;
        w.bytes(10, &self.data_details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn table_blocks_and_their_modifiers() {
        assert_eq!(LinearForwardingTable::block_of(130), (2, 2));
        assert_eq!(MulticastForwardingTable::block_of(0xc021), Some((1, 1)));
        assert_eq!(MulticastForwardingTable::block_of(0xbfff), None);
        assert_eq!(
            MulticastForwardingTable::attr_mod(3, 1).unwrap(),
            0x1000_0003
        );
        assert!(MulticastForwardingTable::attr_mod(512, 0).is_err());
        assert!(MulticastForwardingTable::attr_mod(0, 16).is_err());
        assert_eq!(PKeyTable::attr_mod(1, 5), 0x0005_0001);
        assert_eq!(SlToVlMappingTable::attr_mod(1, 2), 0x0102);
        assert_eq!(
            VlArbitrationTable::attr_mod(VlArbitrationTable::HIGH_0_31, 4),
            0x0003_0004
        );

        let mut mft = MulticastForwardingTable::default();
        mft.port_masks[0] = 0x8001;
        mft.port_masks[31] = 0x0102;
        let b = mft.to_bytes().unwrap();
        assert_eq!((&b[..2], &b[62..]), (&[0x80, 1][..], &[1, 2][..]));
        assert_eq!(MulticastForwardingTable::decode(&b).unwrap(), mft);

        let mut sl = SlToVlMappingTable::default();
        sl.vl[0] = 1;
        sl.vl[1] = 2;
        sl.vl[15] = 15;
        assert_eq!(sl.to_bytes().unwrap(), [0x12, 0, 0, 0, 0, 0, 0, 0x0f]);
        sl.vl[3] = 16;
        assert!(sl.to_bytes().is_err());

        let mut va = VlArbitrationTable::default();
        va.entries[1] = VlArbEntry { vl: 3, weight: 255 };
        let b = va.to_bytes().unwrap();
        assert_eq!(&b[..4], &[0, 0, 3, 255]);
        let mut junk = b.clone();
        junk[2] = 0xf3; // reserved bits are dropped
        assert_eq!(VlArbitrationTable::decode(&junk).unwrap(), va);
        va.entries[0].vl = 16;
        assert!(va.to_bytes().is_err());
    }

    #[test]
    fn block_tables_match_the_spec_layout() {
        let mut pk = PKeyTable::default();
        pk.pkeys[0] = 0xffff;
        pk.pkeys[1] = 0x7fff;
        pk.pkeys[31] = 0x8001;
        let b = pk.to_bytes().unwrap();
        assert_eq!(&b[..4], &[0xff, 0xff, 0x7f, 0xff]);
        assert_eq!(&b[62..], &[0x80, 0x01]);
        assert_eq!(PKeyTable::decode(&b).unwrap(), pk);
        assert_eq!(pk.pkeys[1] & PKeyTable::FULL_MEMBER, 0);

        let mut gi = GuidInfo::default();
        gi.guids[0] = 0x0002_c903_00a1_b2c3;
        gi.guids[7] = 1;
        let b = gi.to_bytes().unwrap();
        assert_eq!(&b[..8], &[0, 2, 0xc9, 3, 0, 0xa1, 0xb2, 0xc3]);
        assert_eq!(&b[56..], &[0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(GuidInfo::decode(&b).unwrap(), gi);

        let mut lft = LinearForwardingTable::default();
        let (block, i) = LinearForwardingTable::block_of(0x41);
        lft.ports[i] = 3;
        lft.ports[63] = LinearForwardingTable::NO_ROUTE;
        let b = lft.to_bytes().unwrap();
        assert_eq!(
            (LinearForwardingTable::attr_mod(block), b[1], b[63]),
            (1, 3, 255)
        );
        assert_eq!(LinearForwardingTable::decode(&b).unwrap(), lft);
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
    fn notices_carry_typed_traps() {
        let gid = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 7]);
        let n = Notice::generic(4, Notice::PRODUCER_SM, 1, &Trap::GidInService(gid));
        let b = n.to_bytes().unwrap();
        assert_eq!(&b[..8], &[0x84, 0, 0, 4, 0, 64, 0, 1]);
        assert_eq!(&b[16..32], &gid.0);
        let back = Notice::decode(&b).unwrap();
        assert_eq!(back, n);
        assert_eq!(back.trap(), Some(Trap::GidInService(gid)));

        for t in [
            Trap::GidOutOfService(gid),
            Trap::McGroupCreated(gid),
            Trap::McGroupDeleted(gid),
            Trap::LinkStateChange { lid: 0x12 },
            Trap::CapabilityMaskChange {
                lid: 3,
                capability_mask: 0x0251_0a68,
            },
        ] {
            let n = Notice::generic(1, Notice::PRODUCER_CA, 3, &t);
            let back = Notice::decode(&n.to_bytes().unwrap()).unwrap();
            assert_eq!(back.trap(), Some(t));
        }
        let lsc = Notice::generic(1, 2, 3, &Trap::LinkStateChange { lid: 0x12 });
        assert_eq!(&lsc.to_bytes().unwrap()[10..12], &[0, 0x12]);
        let cap = Notice::generic(
            1,
            1,
            3,
            &Trap::CapabilityMaskChange {
                lid: 3,
                capability_mask: 0x0251_0a68,
            },
        );
        let cb = cap.to_bytes().unwrap();
        assert_eq!(&cb[12..14], &[0, 3]);
        assert_eq!(&cb[16..20], &[0x02, 0x51, 0x0a, 0x68]);

        let vendor = Notice {
            is_generic: false,
            trap_number_or_device_id: 64,
            ..n
        };
        assert_eq!(vendor.trap_number(), None);
        assert_eq!(vendor.trap(), None);
        let other = Notice {
            trap_number_or_device_id: 256,
            ..n
        };
        assert_eq!(other.trap(), None);

        let count = Notice {
            notice_count: 0x8000,
            ..n
        };
        assert!(matches!(count.to_bytes(), Err(Error::FieldOverflow { .. })));
        let mut gsi = b.clone();
        gsi.extend_from_slice(&gid.0);
        assert_eq!(Notice::issuer_gid(&gsi).unwrap(), gid);
        assert!(Notice::issuer_gid(&b).is_err());
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
