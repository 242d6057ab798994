//! The tables of a subnet management agent (IBA 14.2.5): the linear and
//! multicast forwarding tables, GUIDInfo, P_KeyTable, SLtoVLMappingTable
//! and VLArbitrationTable.
//!
//! Tables come in blocks that fill an SMP's 64 data bytes; the attribute
//! modifier names the block (and, on a switch, the port), built by each
//! table's `attr_mod`.

use super::attr::{id, Attribute};
use super::sma::smi;
use super::wire::{fit, nibbles, In, Out};
use super::Result;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
