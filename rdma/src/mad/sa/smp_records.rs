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
//! | P_KeyTableRecord | 0x33 | 72 | LID, BlockNum (16), PortNum, reserved (24) |
//! | VLArbitrationTableRecord | 0x36 | 72 | LID, OutputPortNum, BlockNum (8), reserved (32) |
//!
//! [`Matcher`]: super::Matcher

use super::attr_id as id;
use super::{Component as C, SaRecord};
use crate::mad::wire::{fit, In, Out};
use crate::mad::{
    class, Attribute, Error, GuidInfo, LinearForwardingTable, MulticastForwardingTable, PKeyTable,
    Result as MadResult, SlToVlMappingTable, SmInfo, SwitchInfo, VlArbitrationTable,
};

/// A record of `size` bytes in `b`: a reader for its header, and its
/// attribute, which starts at byte `at`.
fn read<'a, A: Attribute>(
    b: &'a [u8],
    what: &'static str,
    size: usize,
    at: usize,
) -> MadResult<(In<'a>, A)> {
    let head = In::new(b, what, size)?;
    let attr = b.get(at..size).ok_or(Error::Truncated {
        what,
        need: size,
        have: b.len(),
    })?;
    Ok((head, A::decode(attr)?))
}

/// `out`'s first `size` bytes zeroed (reserved fields stay 0) with `attr`
/// encoded from byte `at`: a writer for the header.
fn write<'a, A: Attribute>(
    out: &'a mut [u8],
    what: &'static str,
    size: usize,
    at: usize,
    attr: &A,
) -> MadResult<Out<'a>> {
    let have = out.len();
    let o = out.get_mut(..size).ok_or(Error::Truncated {
        what,
        need: size,
        have,
    })?;
    o.fill(0);
    attr.encode_into(o.get_mut(at..).unwrap_or_default())?;
    Out::new(o, what, size)
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
mask!(PKeyTableRecordMask, LID = 0, BLOCK_NUM = 1, PORT_NUM = 2);
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
        let (h, sm_info) = read(b, Self::NAME, Self::SIZE, 4)?;
        Ok(SmInfoRecord {
            lid: h.u16(0)?,
            sm_info,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        write(out, Self::NAME, Self::SIZE, 4, &self.sm_info)?.u16(0, self.lid)
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
        let (h, switch_info) = read(b, Self::NAME, Self::SIZE, 4)?;
        Ok(SwitchInfoRecord {
            lid: h.u16(0)?,
            switch_info,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        write(out, Self::NAME, Self::SIZE, 4, &self.switch_info)?.u16(0, self.lid)
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
        let (h, lft) = read(b, Self::NAME, Self::SIZE, 8)?;
        Ok(LftRecord {
            lid: h.u16(0)?,
            block_num: h.u16(2)?,
            lft,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let mut o = write(out, Self::NAME, Self::SIZE, 8, &self.lft)?;
        o.u16(0, self.lid)?;
        o.u16(2, self.block_num)
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
        let (h, mft) = read(b, Self::NAME, Self::SIZE, 8)?;
        let pb = h.u16(2)?;
        Ok(MftRecord {
            lid: h.u16(0)?,
            position: (pb >> 12) as u8,
            block_num: pb & 0x1ff,
            mft,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        fit("Position", 4, self.position.into())?;
        fit("BlockNum", 9, self.block_num.into())?;
        let mut o = write(out, Self::NAME, Self::SIZE, 8, &self.mft)?;
        o.u16(0, self.lid)?;
        o.u16(2, u16::from(self.position) << 12 | self.block_num)
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
        let (h, guid_info) = read(b, Self::NAME, Self::SIZE, 8)?;
        Ok(GuidInfoRecord {
            lid: h.u16(0)?,
            block_num: h.u8(2)?,
            guid_info,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let mut o = write(out, Self::NAME, Self::SIZE, 8, &self.guid_info)?;
        o.u16(0, self.lid)?;
        o.u8(2, self.block_num)
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

/// P_KeyTableRecord: one block of 32 entries of a port's P_Key table (a
/// switch's ports under its port 0's LID).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PKeyTableRecord {
    /// The port's LID (a switch's: its port 0's).
    pub lid: u16,
    /// The block (P_Keys `32 * block_num` on).
    pub block_num: u16,
    /// The port (a switch's; 0 for a CA's).
    pub port_num: u8,
    /// The block's P_Keys.
    pub table: PKeyTable,
}

impl Attribute for PKeyTableRecord {
    const ID: u16 = id::P_KEY_TABLE_RECORD;
    const NAME: &'static str = "P_KeyTableRecord";
    const SIZE: usize = 72;
    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }
    fn decode(b: &[u8]) -> MadResult<Self> {
        let (h, table) = read(b, Self::NAME, Self::SIZE, 8)?;
        Ok(PKeyTableRecord {
            lid: h.u16(0)?,
            block_num: h.u16(2)?,
            port_num: h.u8(4)?,
            table,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let mut o = write(out, Self::NAME, Self::SIZE, 8, &self.table)?;
        o.u16(0, self.lid)?;
        o.u16(2, self.block_num)?;
        o.u8(4, self.port_num)
    }
}

impl SaRecord for PKeyTableRecord {
    type Mask = PKeyTableRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("BlockNum", 16, 16),
        C::new("PortNum", 32, 8),
        C::new("Reserved", 40, 24),
        C::new("P_KeyTable", 64, 512),
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
        let (h, table) = read(b, Self::NAME, Self::SIZE, 8)?;
        Ok(Sl2VlTableRecord {
            lid: h.u16(0)?,
            input_port: h.u8(2)?,
            output_port: h.u8(3)?,
            table,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let mut o = write(out, Self::NAME, Self::SIZE, 8, &self.table)?;
        o.u16(0, self.lid)?;
        o.u8(2, self.input_port)?;
        o.u8(3, self.output_port)
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
        let (h, table) = read(b, Self::NAME, Self::SIZE, 8)?;
        Ok(VlArbTableRecord {
            lid: h.u16(0)?,
            output_port: h.u8(2)?,
            block_num: h.u8(3)?,
            table,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> MadResult<()> {
        let mut o = write(out, Self::NAME, Self::SIZE, 8, &self.table)?;
        o.u16(0, self.lid)?;
        o.u8(2, self.output_port)?;
        o.u8(3, self.block_num)
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

#[cfg(test)]
mod tests {
    use super::super::tests::hostile;
    use super::*;

    /// The components tile the record from bit 0 (the masks name only the
    /// header's selectable fields, so `component`'s test, which wants a bit
    /// per component, does not apply).
    fn tiled<R: SaRecord>() {
        let mut at = 0;
        for c in R::COMPONENTS {
            assert_eq!(usize::from(c.offset), at, "{} {}", R::NAME, c.name);
            assert!(c.width > 0, "{} {}", R::NAME, c.name);
            at = c.end();
        }
        assert!(at <= R::SIZE * 8 && R::SIZE * 8 - at < 64, "{}", R::NAME);
        assert_eq!(usize::from(R::ATTR_OFFSET), R::SIZE.div_ceil(8));
    }

    #[test]
    fn every_record_codec_tiles_its_components_and_survives_hostile_bytes() {
        fn both<R: SaRecord + PartialEq + std::fmt::Debug>() {
            tiled::<R>();
            hostile::<R>();
        }
        both::<SmInfoRecord>();
        both::<SwitchInfoRecord>();
        both::<LftRecord>();
        both::<MftRecord>();
        both::<GuidInfoRecord>();
        both::<PKeyTableRecord>();
        both::<Sl2VlTableRecord>();
        both::<VlArbTableRecord>();
    }

    #[test]
    fn records_are_laid_out_as_ib_types_h_lays_them_out() {
        let r = SmInfoRecord {
            lid: 0x0102,
            sm_info: SmInfo {
                guid: 0x0a0b_0c0d_0e0f_1011,
                sm_key: 0,
                act_count: 0x2122_2324,
                priority: 5,
                sm_state: 3,
            },
        };
        let b = r.to_bytes().unwrap();
        assert_eq!(b.len(), 28);
        assert_eq!(&b[..4], [1, 2, 0, 0]);
        assert_eq!(&b[4..12], 0x0a0b_0c0d_0e0f_1011u64.to_be_bytes());
        assert_eq!(&b[20..25], [0x21, 0x22, 0x23, 0x24, 0x53]);

        let mut mft = MulticastForwardingTable::default();
        mft.port_masks[1] = 0xbeef;
        let r = MftRecord {
            lid: 7,
            position: 2,
            block_num: 0x105,
            mft,
        };
        let b = r.to_bytes().unwrap();
        assert_eq!(&b[..8], [0, 7, 0x21, 0x05, 0, 0, 0, 0]);
        assert_eq!(&b[10..12], [0xbe, 0xef]);
        for bad in [
            MftRecord { position: 16, ..r },
            MftRecord {
                block_num: 0x200,
                ..r
            },
        ] {
            assert!(matches!(
                bad.to_bytes(),
                Err(crate::mad::Error::FieldOverflow { .. })
            ));
        }

        let r = Sl2VlTableRecord {
            lid: 9,
            input_port: 1,
            output_port: 2,
            table: SlToVlMappingTable {
                vl: core::array::from_fn(|i| i as u8 & 0xf),
            },
        };
        let b = r.to_bytes().unwrap();
        assert_eq!(&b[..9], [0, 9, 1, 2, 0, 0, 0, 0, 0x01]);

        let r = VlArbTableRecord {
            lid: 9,
            output_port: 3,
            block_num: 4,
            table: VlArbitrationTable::default(),
        };
        assert_eq!(&r.to_bytes().unwrap()[..4], [0, 9, 3, 4]);
        let r = GuidInfoRecord {
            lid: 9,
            block_num: 1,
            guid_info: GuidInfo { guids: [0x55; 8] },
        };
        let b = r.to_bytes().unwrap();
        assert_eq!(&b[..4], [0, 9, 1, 0]);
        assert_eq!(&b[8..16], 0x55u64.to_be_bytes());
        let r = LftRecord {
            lid: 9,
            block_num: 0x0203,
            lft: LinearForwardingTable { ports: [4; 64] },
        };
        let b = r.to_bytes().unwrap();
        assert_eq!(&b[..9], [0, 9, 2, 3, 0, 0, 0, 0, 4]);
    }
}
