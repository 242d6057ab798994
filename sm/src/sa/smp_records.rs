//! The SA records that carry an SMP attribute of one node or port (IBA
//! 15.2.5.2-15.2.5.12, as OpenSM's `ib_types.h` lays them out): a header
//! naming whose attribute it is (LID, port, block) and the attribute as the
//! SMP carries it. Each is an [`SaRecord`] with one ComponentMask bit per
//! field, header and attribute alike, so that [`Matcher`] selects on them.
//!
//! | record | ID | bytes | header |
//! |---|---|---|---|
//! | SL2VLTableRecord | 0x13 | 16 | LID, InputPortNum, OutputPortNum, reserved (32) |
//! | SwitchInfoRecord | 0x14 | 24 | LID, reserved (16) |
//! | LinearForwardingTableRecord | 0x15 | 72 | LID, BlockNum (16), reserved (32) |
//! | MulticastForwardingTableRecord | 0x17 | 72 | LID, Position (4), reserved (3), BlockNum (9), reserved (32) |
//! | SMInfoRecord | 0x18 | 28 | LID, reserved (16) |
//! | GUIDInfoRecord | 0x30 | 72 | LID, BlockNum (8), reserved (8), reserved (32) |
//! | VLArbitrationTableRecord | 0x36 | 72 | LID, OutputPortNum, BlockNum (8), reserved (32) |
//!
//! [`Matcher`]: rdma::mad::sa::Matcher

use rdma::mad::sa::{Component as C, SaRecord};
use rdma::mad::{
    class, Attribute, Error, GuidInfo, LinearForwardingTable, MulticastForwardingTable,
    Result as MadResult, SlToVlMappingTable, SmInfo, SwitchInfo, VlArbitrationTable,
};

/// The attribute IDs of these records (IBA 15.2.5, table 186).
pub mod id {
    /// SLtoVLMappingTableRecord.
    pub const SL2VL_TABLE_RECORD: u16 = 0x0013;
    /// SwitchInfoRecord.
    pub const SWITCH_INFO_RECORD: u16 = 0x0014;
    /// LinearForwardingTableRecord.
    pub const LFT_RECORD: u16 = 0x0015;
    /// MulticastForwardingTableRecord.
    pub const MFT_RECORD: u16 = 0x0017;
    /// SMInfoRecord.
    pub const SM_INFO_RECORD: u16 = 0x0018;
    /// GUIDInfoRecord.
    pub const GUID_INFO_RECORD: u16 = 0x0030;
    /// VLArbitrationTableRecord.
    pub const VL_ARB_TABLE_RECORD: u16 = 0x0036;
}

/// `b` if it holds `need` bytes, else the error of a record cut short.
fn whole<'a>(b: &'a [u8], what: &'static str, need: usize) -> MadResult<&'a [u8]> {
    if b.len() < need {
        return Err(Error::Truncated {
            what,
            need,
            have: b.len(),
        });
    }
    Ok(&b[..need])
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// `out`'s first `size` bytes, zeroed (reserved fields stay 0), or the
/// error of a buffer too short.
fn zeroed<'a>(out: &'a mut [u8], what: &'static str, size: usize) -> MadResult<&'a mut [u8]> {
    let have = out.len();
    let o = out.get_mut(..size).ok_or(Error::Truncated {
        what,
        need: size,
        have,
    })?;
    o.fill(0);
    Ok(o)
}

/// A mask type of one bit per component: what the records' `SaRecord::Mask`
/// needs, and no more (each record names its components in `COMPONENTS`).
macro_rules! mask {
    ($name:ident, $($bit:ident = $n:expr),* $(,)?) => {
        bitflags::bitflags! {
            /// The ComponentMask bits of the record, one per component.
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub struct $name: u64 {
                $(
                    #[allow(missing_docs)]
                    const $bit = 1 << $n;
                )*
            }
        }
    };
}

mask!(
    SmInfoRecordMask,
    LID = 0,
    GUID = 2,
    SM_KEY = 3,
    ACT_COUNT = 4,
    PRIORITY = 5,
    SM_STATE = 6
);
mask!(SwitchInfoRecordMask, LID = 0);
mask!(LftRecordMask, LID = 0, BLOCK_NUM = 1);
mask!(MftRecordMask, LID = 0, POSITION = 1, BLOCK_NUM = 3);
mask!(GuidInfoRecordMask, LID = 0, BLOCK_NUM = 1);
mask!(
    Sl2VlTableRecordMask,
    LID = 0,
    INPUT_PORT = 1,
    OUTPUT_PORT = 2
);
mask!(
    VlArbTableRecordMask,
    LID = 0,
    OUTPUT_PORT = 1,
    BLOCK_NUM = 2
);

/// SMInfoRecord: an SM's SMInfo and the LID of its port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SmInfoRecord {
    /// The SM's port's LID.
    pub lid: u16,
    /// Its SMInfo (SM_Key 0 to requests that are not trusted).
    pub sm_info: SmInfo,
}

impl Attribute for SmInfoRecord {
    const ID: u16 = id::SM_INFO_RECORD;
    const NAME: &'static str = "SMInfoRecord";
    const SIZE: usize = 28;
    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }
    fn decode(b: &[u8]) -> MadResult<Self> {
        let b = whole(b, Self::NAME, Self::SIZE)?;
        Ok(SmInfoRecord {
            lid: u16_at(b, 0),
            sm_info: SmInfo::decode(&b[4..])?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let o = zeroed(out, Self::NAME, Self::SIZE)?;
        o[..2].copy_from_slice(&self.lid.to_be_bytes());
        self.sm_info.encode_into(&mut o[4..])
    }
}

impl SaRecord for SmInfoRecord {
    type Mask = SmInfoRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("Reserved", 16, 16),
        C::new("GUID", 32, 64),
        C::new("SM_Key", 96, 64),
        C::new("ActCount", 160, 32),
        C::new("Priority", 192, 4),
        C::new("SMState", 196, 4),
    ];
}

/// SwitchInfoRecord: a switch's SwitchInfo and its LID.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SwitchInfoRecord {
    /// The switch's LID (its port 0's).
    pub lid: u16,
    /// Its SwitchInfo.
    pub switch_info: SwitchInfo,
}

impl Attribute for SwitchInfoRecord {
    const ID: u16 = id::SWITCH_INFO_RECORD;
    const NAME: &'static str = "SwitchInfoRecord";
    const SIZE: usize = 24;
    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }
    fn decode(b: &[u8]) -> MadResult<Self> {
        let b = whole(b, Self::NAME, Self::SIZE)?;
        Ok(SwitchInfoRecord {
            lid: u16_at(b, 0),
            switch_info: SwitchInfo::decode(&b[4..])?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let o = zeroed(out, Self::NAME, Self::SIZE)?;
        o[..2].copy_from_slice(&self.lid.to_be_bytes());
        self.switch_info.encode_into(&mut o[4..])
    }
}

impl SaRecord for SwitchInfoRecord {
    type Mask = SwitchInfoRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("Reserved", 16, 16),
        C::new("LinearFDBCap", 32, 16),
        C::new("RandomFDBCap", 48, 16),
        C::new("MulticastFDBCap", 64, 16),
        C::new("LinearFDBTop", 80, 16),
        C::new("DefaultPort", 96, 8),
        C::new("DefaultMulticastPrimaryPort", 104, 8),
        C::new("DefaultMulticastNotPrimaryPort", 112, 8),
        C::new("LifeTimeValue", 120, 5),
        C::new("PortStateChange", 125, 1),
        C::new("OptimizedSLtoVLMappingProgramming", 126, 2),
        C::new("LIDsPerPort", 128, 16),
        C::new("PartitionEnforcementCap", 144, 16),
        C::new("InboundEnforcementCap", 160, 1),
        C::new("OutboundEnforcementCap", 161, 1),
        C::new("FilterRawInboundCap", 162, 1),
        C::new("FilterRawOutboundCap", 163, 1),
        C::new("EnhancedPort0", 164, 1),
        C::new("Reserved", 165, 11),
        C::new("MulticastFDBTop", 176, 16),
    ];
}

/// LinearForwardingTableRecord: one block of a switch's LFT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LftRecord {
    /// The switch's LID.
    pub lid: u16,
    /// The block (LIDs `64 * block_num` on).
    pub block_num: u16,
    /// The block's ports.
    pub lft: LinearForwardingTable,
}

impl Attribute for LftRecord {
    const ID: u16 = id::LFT_RECORD;
    const NAME: &'static str = "LinearForwardingTableRecord";
    const SIZE: usize = 72;
    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }
    fn decode(b: &[u8]) -> MadResult<Self> {
        let b = whole(b, Self::NAME, Self::SIZE)?;
        Ok(LftRecord {
            lid: u16_at(b, 0),
            block_num: u16_at(b, 2),
            lft: LinearForwardingTable::decode(&b[8..])?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let o = zeroed(out, Self::NAME, Self::SIZE)?;
        o[..2].copy_from_slice(&self.lid.to_be_bytes());
        o[2..4].copy_from_slice(&self.block_num.to_be_bytes());
        self.lft.encode_into(&mut o[8..])
    }
}

impl SaRecord for LftRecord {
    type Mask = LftRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("BlockNum", 16, 16),
        C::new("Reserved", 32, 32),
        C::new("LinearForwardingTable", 64, 512),
    ];
}

/// MulticastForwardingTableRecord: one block of a switch's MFT, for the
/// 16 ports of one position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MftRecord {
    /// The switch's LID.
    pub lid: u16,
    /// The ports of the masks: `16 * position` on (4 bits).
    pub position: u8,
    /// The block (MLIDs `0xC000 + 32 * block_num` on; 9 bits).
    pub block_num: u16,
    /// The block's port masks.
    pub mft: MulticastForwardingTable,
}

impl Attribute for MftRecord {
    const ID: u16 = id::MFT_RECORD;
    const NAME: &'static str = "MulticastForwardingTableRecord";
    const SIZE: usize = 72;
    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }
    fn decode(b: &[u8]) -> MadResult<Self> {
        let b = whole(b, Self::NAME, Self::SIZE)?;
        let pb = u16_at(b, 2);
        Ok(MftRecord {
            lid: u16_at(b, 0),
            position: (pb >> 12) as u8,
            block_num: pb & 0x1ff,
            mft: MulticastForwardingTable::decode(&b[8..])?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        for (field, bits, value) in [
            ("Position", 4, u64::from(self.position)),
            ("BlockNum", 9, u64::from(self.block_num)),
        ] {
            if value >> bits != 0 {
                return Err(Error::FieldOverflow { field, bits, value });
            }
        }
        let o = zeroed(out, Self::NAME, Self::SIZE)?;
        o[..2].copy_from_slice(&self.lid.to_be_bytes());
        let pb = u16::from(self.position) << 12 | self.block_num;
        o[2..4].copy_from_slice(&pb.to_be_bytes());
        self.mft.encode_into(&mut o[8..])
    }
}

impl SaRecord for MftRecord {
    type Mask = MftRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("Position", 16, 4),
        C::new("Reserved", 20, 3),
        C::new("BlockNum", 23, 9),
        C::new("Reserved", 32, 32),
        C::new("MulticastForwardingTable", 64, 512),
    ];
}

/// GUIDInfoRecord: one block of a port's GUIDs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GuidInfoRecord {
    /// The port's LID (a switch's: its port 0's).
    pub lid: u16,
    /// The block (GUIDs `8 * block_num` on).
    pub block_num: u8,
    /// The block's GUIDs.
    pub guid_info: GuidInfo,
}

impl Attribute for GuidInfoRecord {
    const ID: u16 = id::GUID_INFO_RECORD;
    const NAME: &'static str = "GUIDInfoRecord";
    const SIZE: usize = 72;
    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }
    fn decode(b: &[u8]) -> MadResult<Self> {
        let b = whole(b, Self::NAME, Self::SIZE)?;
        Ok(GuidInfoRecord {
            lid: u16_at(b, 0),
            block_num: b[2],
            guid_info: GuidInfo::decode(&b[8..])?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let o = zeroed(out, Self::NAME, Self::SIZE)?;
        o[..2].copy_from_slice(&self.lid.to_be_bytes());
        o[2] = self.block_num;
        self.guid_info.encode_into(&mut o[8..])
    }
}

impl SaRecord for GuidInfoRecord {
    type Mask = GuidInfoRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("BlockNum", 16, 8),
        C::new("Reserved", 24, 8),
        C::new("Reserved", 32, 32),
        C::new("GUID0", 64, 64),
        C::new("GUID1", 128, 64),
        C::new("GUID2", 192, 64),
        C::new("GUID3", 256, 64),
        C::new("GUID4", 320, 64),
        C::new("GUID5", 384, 64),
        C::new("GUID6", 448, 64),
        C::new("GUID7", 512, 64),
    ];
}

/// SLtoVLMappingTableRecord: a port's SL-to-VL table (on a switch, from
/// an input port to an output port).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sl2VlTableRecord {
    /// The port's LID (a switch's: its port 0's).
    pub lid: u16,
    /// The input port (0 on a CA).
    pub input_port: u8,
    /// The output port (a CA's own port).
    pub output_port: u8,
    /// The table.
    pub table: SlToVlMappingTable,
}

impl Attribute for Sl2VlTableRecord {
    const ID: u16 = id::SL2VL_TABLE_RECORD;
    const NAME: &'static str = "SLtoVLMappingTableRecord";
    const SIZE: usize = 16;
    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }
    fn decode(b: &[u8]) -> MadResult<Self> {
        let b = whole(b, Self::NAME, Self::SIZE)?;
        Ok(Sl2VlTableRecord {
            lid: u16_at(b, 0),
            input_port: b[2],
            output_port: b[3],
            table: SlToVlMappingTable::decode(&b[8..])?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let o = zeroed(out, Self::NAME, Self::SIZE)?;
        o[..2].copy_from_slice(&self.lid.to_be_bytes());
        o[2] = self.input_port;
        o[3] = self.output_port;
        self.table.encode_into(&mut o[8..])
    }
}

impl SaRecord for Sl2VlTableRecord {
    type Mask = Sl2VlTableRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("InputPortNum", 16, 8),
        C::new("OutputPortNum", 24, 8),
        C::new("Reserved", 32, 32),
        C::new("SLtoVLMappingTable", 64, 64),
    ];
}

/// VLArbitrationTableRecord: one block of a port's VL arbitration table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VlArbTableRecord {
    /// The port's LID (a switch's: its port 0's).
    pub lid: u16,
    /// The output port.
    pub output_port: u8,
    /// The block: 1 and 2 the low-priority entries, 3 and 4 the high.
    pub block_num: u8,
    /// The block's entries.
    pub table: VlArbitrationTable,
}

impl Attribute for VlArbTableRecord {
    const ID: u16 = id::VL_ARB_TABLE_RECORD;
    const NAME: &'static str = "VLArbitrationTableRecord";
    const SIZE: usize = 72;
    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }
    fn decode(b: &[u8]) -> MadResult<Self> {
        let b = whole(b, Self::NAME, Self::SIZE)?;
        Ok(VlArbTableRecord {
            lid: u16_at(b, 0),
            output_port: b[2],
            block_num: b[3],
            table: VlArbitrationTable::decode(&b[8..])?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let o = zeroed(out, Self::NAME, Self::SIZE)?;
        o[..2].copy_from_slice(&self.lid.to_be_bytes());
        o[2] = self.output_port;
        o[3] = self.block_num;
        self.table.encode_into(&mut o[8..])
    }
}

impl SaRecord for VlArbTableRecord {
    type Mask = VlArbTableRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("OutputPortNum", 16, 8),
        C::new("BlockNum", 24, 8),
        C::new("Reserved", 32, 32),
        C::new("VLArbitrationTable", 64, 512),
    ];
}
