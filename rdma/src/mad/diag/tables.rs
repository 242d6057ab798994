//! The tables of a port as `smpquery` prints them: P_KeyTable, GUIDInfo,
//! SLtoVLMappingTable and VLArbitrationTable.

use std::fmt::{self, Display, Formatter};

use crate::mad::{GuidInfo, PKeyTable, SlToVlMappingTable, VlArbitrationTable};

/// The first `capacity` P_Keys of a port as `smpquery pkeys` prints them:
/// see [`PKeyTable::diag`].
#[derive(Clone, Copy, Debug)]
pub struct PKeysDiag<'a> {
    blocks: &'a [PKeyTable],
    capacity: u16,
}

impl PKeyTable {
    /// The blocks of a port's table (block 0 first) as `smpquery pkeys`
    /// prints them: lines of eight `0x%04x` P_Keys after the first one's
    /// index, up to `capacity` rounded up to eight (what the blocks hold,
    /// at most), then `N pkeys capacity for this port`. `capacity` is the
    /// NodeInfo's PartitionCap (a switch's external port: SwitchInfo's
    /// PartitionEnforcementCap); `smpquery` reads `capacity` / 32 blocks,
    /// rounded up.
    pub fn diag(blocks: &[PKeyTable], capacity: u16) -> PKeysDiag<'_> {
        PKeysDiag { blocks, capacity }
    }
}

/// The first `n` rounded up to `per_row` of `entries`, in rows of
/// `per_row` after the index of each row's first entry (`%4u: `).
fn rows<T: Copy>(
    f: &mut Formatter<'_>,
    entries: impl Iterator<Item = T>,
    n: usize,
    per_row: usize,
    each: impl Fn(&mut Formatter<'_>, T) -> fmt::Result,
) -> fmt::Result {
    let shown: Vec<T> = entries.take(n.div_ceil(per_row) * per_row).collect();
    for (i, row) in shown.chunks(per_row).enumerate() {
        write!(f, "{:4}:", i * per_row)?;
        for &e in row {
            f.write_str(" ")?;
            each(f, e)?;
        }
        f.write_str("\n")?;
    }
    Ok(())
}

impl Display for PKeysDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let keys = self.blocks.iter().flat_map(|b| b.pkeys);
        rows(f, keys, self.capacity.into(), 8, |f, k| {
            write!(f, "0x{k:04x}")
        })?;
        writeln!(f, "{} pkeys capacity for this port", self.capacity)
    }
}

/// The first `capacity` GUIDs of a port as `smpquery guids` prints them:
/// see [`GuidInfo::diag`].
#[derive(Clone, Copy, Debug)]
pub struct GuidsDiag<'a> {
    blocks: &'a [GuidInfo],
    capacity: u8,
}

impl GuidInfo {
    /// The blocks of a port's GUIDInfo (block 0 first) as `smpquery guids`
    /// prints them: lines of two `0x%016x` GUIDs after the first one's
    /// index, up to `capacity` (PortInfo's GUIDCap) rounded up to two (what
    /// the blocks hold, at most), then `N guids capacity for this port`.
    pub fn diag(blocks: &[GuidInfo], capacity: u8) -> GuidsDiag<'_> {
        GuidsDiag { blocks, capacity }
    }
}

impl Display for GuidsDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let guids = self.blocks.iter().flat_map(|b| b.guids);
        rows(f, guids, self.capacity.into(), 2, |f, g| {
            write!(f, "0x{g:016x}")
        })?;
        writeln!(f, "{} guids capacity for this port", self.capacity)
    }
}

/// The header of `smpquery sl2vl`'s table (after its `# SL2VL table:`
/// line): `#                 SL: | 0| 1|...|15|` and a newline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlToVlHeader;

impl Display for SlToVlHeader {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("#                 SL: |")?;
        for sl in 0..16 {
            write!(f, "{sl:2}|")?;
        }
        f.write_str("\n")
    }
}

/// One SLtoVLMappingTable as a line of `smpquery sl2vl`: see
/// [`SlToVlMappingTable::diag`].
#[derive(Clone, Copy, Debug)]
pub struct SlToVlDiag<'a> {
    table: &'a SlToVlMappingTable,
    input: u8,
    output: u8,
}

impl SlToVlMappingTable {
    /// The table of the ports `input` to `output` as `smpquery sl2vl`
    /// prints it under [`SlToVlHeader`]: `ports: in %2d, out %2d: |`, each
    /// SL's VL as `%2d|`, a newline.
    pub fn diag(&self, input: u8, output: u8) -> SlToVlDiag<'_> {
        SlToVlDiag {
            table: self,
            input,
            output,
        }
    }
}

impl Display for SlToVlDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "ports: in {:2}, out {:2}: |", self.input, self.output)?;
        for vl in self.table.vl {
            write!(f, "{vl:2}|")?;
        }
        f.write_str("\n")
    }
}

/// Which of a port's two VL arbitration tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VlArbPriority {
    /// The low-priority table (PortInfo's VLArbitrationLowCap entries).
    Low,
    /// The high-priority table (VLArbitrationHighCap entries).
    High,
}

/// A VL arbitration table as `smpquery vlarb` prints it: see
/// [`VlArbitrationTable::diag`].
#[derive(Clone, Copy, Debug)]
pub struct VlArbDiag<'a> {
    priority: VlArbPriority,
    blocks: &'a [VlArbitrationTable],
    capacity: u8,
}

impl VlArbitrationTable {
    /// The blocks of one priority's table (entries 0-31, then 32-63) as
    /// `smpquery vlarb` prints them: `# Low priority VL Arbitration
    /// Table:` (or `High`), then for each block a line of its first
    /// entries' VLs (`VL    : |0x%-2X|...`) and one of their weights
    /// (`WEIGHT: |...`), each pair after an empty line but the first:
    /// `capacity` entries in all (the port's VLArbitrationLowCap or
    /// HighCap; what the blocks hold, at most). `smpquery` reads a
    /// second block when `capacity` is over 32.
    pub fn diag(
        priority: VlArbPriority,
        blocks: &[VlArbitrationTable],
        capacity: u8,
    ) -> VlArbDiag<'_> {
        VlArbDiag {
            priority,
            blocks,
            capacity,
        }
    }
}

impl Display for VlArbDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let name = match self.priority {
            VlArbPriority::Low => "Low",
            VlArbPriority::High => "High",
        };
        write!(f, "# {name} priority VL Arbitration Table:")?;
        let mut left = usize::from(self.capacity);
        for b in self.blocks {
            if left == 0 {
                break;
            }
            let e = &b.entries[..left.min(b.entries.len())];
            left -= e.len();
            f.write_str("\nVL    : |")?;
            for x in e {
                write!(f, "0x{:<2X}|", x.vl & 0xf)?;
            }
            f.write_str("\nWEIGHT: |")?;
            for x in e {
                write!(f, "0x{:<2X}|", x.weight)?;
            }
            f.write_str("\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::VlArbEntry;

    #[test]
    fn pkeys_print_in_rows_of_eight_up_to_the_capacity() {
        let mut b = PKeyTable::default();
        b.pkeys[0] = 0xffff;
        b.pkeys[9] = 0x8001;
        let text = PKeyTable::diag(&[b], 16).to_string();
        assert_eq!(
            text,
            "   0: 0xffff 0x0000 0x0000 0x0000 0x0000 0x0000 0x0000 0x0000\n   \
             8: 0x0000 0x8001 0x0000 0x0000 0x0000 0x0000 0x0000 0x0000\n\
             16 pkeys capacity for this port\n"
        );
        // A capacity that is no multiple of eight: the row is printed whole.
        assert_eq!(PKeyTable::diag(&[b], 9).to_string().lines().count(), 3);
        // The second block's rows carry their index in the whole table.
        let text = PKeyTable::diag(&[b, b], 64).to_string();
        assert!(text.contains("\n  32: 0xffff "));
        assert!(text.contains("\n  56: 0x0000 "));
        assert_eq!(text.lines().count(), 9);
        // A capacity past what the blocks hold: what they hold.
        assert_eq!(PKeyTable::diag(&[b], 200).to_string().lines().count(), 5);
        assert_eq!(
            PKeyTable::diag(&[], 0).to_string(),
            "0 pkeys capacity for this port\n"
        );
    }

    #[test]
    fn guids_print_in_rows_of_two_up_to_the_capacity() {
        let mut g = GuidInfo::default();
        g.guids[0] = 0x0002_c903_0000_1001;
        let text = GuidInfo::diag(&[g], 1).to_string();
        assert_eq!(
            text,
            "   0: 0x0002c90300001001 0x0000000000000000\n1 guids capacity for this port\n"
        );
        let text = GuidInfo::diag(&[g, g], 10).to_string();
        assert!(text.contains("\n   8: 0x0002c90300001001 0x0000000000000000\n"));
        assert_eq!(text.lines().count(), 6);
    }

    #[test]
    fn sl2vl_prints_the_header_and_a_line_a_port_pair() {
        assert_eq!(
            SlToVlHeader.to_string(),
            "#                 SL: | 0| 1| 2| 3| 4| 5| 6| 7| 8| 9|10|11|12|13|14|15|\n"
        );
        let mut t = SlToVlMappingTable::default();
        t.vl[1] = 1;
        t.vl[15] = 15;
        assert_eq!(
            t.diag(3, 12).to_string(),
            "ports: in  3, out 12: | 0| 1| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0|15|\n"
        );
        // The header's columns are the line's.
        let head = SlToVlHeader.to_string();
        let row = t.diag(3, 12).to_string();
        assert_eq!(head.find('|'), row.find('|'));
        assert_eq!(head.len(), row.len());
    }

    #[test]
    fn vlarb_prints_vls_and_weights_up_to_the_capacity() {
        let mut t = VlArbitrationTable::default();
        t.entries[0] = VlArbEntry {
            vl: 0x11,
            weight: 0xff,
        };
        t.entries[1] = VlArbEntry { vl: 2, weight: 4 };
        assert_eq!(
            VlArbitrationTable::diag(VlArbPriority::Low, &[t], 2).to_string(),
            "# Low priority VL Arbitration Table:\nVL    : |0x1 |0x2 |\nWEIGHT: |0xFF|0x4 |\n"
        );
        let two = VlArbitrationTable::diag(VlArbPriority::High, &[t, t], 34).to_string();
        assert!(two.starts_with("# High priority VL Arbitration Table:\nVL    : |0x1 |"));
        assert!(two.contains("|\n\nVL    : |0x1 |0x2 |\nWEIGHT: |0xFF|0x4 |\n"));
        assert_eq!(two.matches("0x").count(), 2 * 34);
        // No capacity: the title alone; more than the blocks hold: what they hold.
        assert_eq!(
            VlArbitrationTable::diag(VlArbPriority::Low, &[t], 0).to_string(),
            "# Low priority VL Arbitration Table:"
        );
        let over = VlArbitrationTable::diag(VlArbPriority::Low, &[t], 64).to_string();
        assert_eq!(over.matches("0x").count(), 2 * 32);
    }
}
