//! Attributes as infiniband-diags prints them: the `Name:.....value` lines
//! of libibmad's dump functions (`smpquery`, `perfquery`, `saquery`), as
//! `Display` adaptors, so that any tool can print what the C tools print
//! byte for byte.
//!
//! [`field`] writes one line's text; [`PortInfo::diag`],
//! [`NodeInfo::diag`], [`NodeDescription::diag`], [`SwitchInfo::diag`],
//! [`PortCounters::diag`], [`PortCountersExtended::diag`] and
//! [`PortSamplesControl::diag`] write the whole attribute, and
//! [`PKeyTable::diag`], [`GuidInfo::diag`], [`SlToVlMappingTable::diag`]
//! (under [`SlToVlHeader`]) and [`VlArbitrationTable::diag`] a port's
//! tables as `smpquery` prints them. The value adaptors
//! ([`Hex`], [`LinkWidthEnabled`], [`CapMask`], ...) write one value as its
//! libibmad dump function does; the enumerated fields ([`PortState`],
//! [`LinkWidth`], ...) do so through their own `Display`.
//!
//! ```
//! use rdma::mad::{diag, PortInfo, PortState};
//!
//! let pi = PortInfo { lid: 3, port_state: PortState::Active, ..Default::default() };
//! let text = pi.diag().to_string();
//! assert!(text.contains("Lid:.............................3\n"));
//! assert!(text.contains("LinkState:.......................Active\n"));
//! assert_eq!(diag::field("LMC", 0).to_string(), "LMC:.............................0");
//! ```
//!
//! [`PortState`]: super::PortState
//! [`LinkWidth`]: super::LinkWidth
//! [`PortInfo::diag`]: super::PortInfo::diag
//! [`NodeInfo::diag`]: super::NodeInfo::diag
//! [`NodeDescription::diag`]: super::NodeDescription::diag
//! [`SwitchInfo::diag`]: super::SwitchInfo::diag
//! [`PKeyTable::diag`]: super::PKeyTable::diag
//! [`GuidInfo::diag`]: super::GuidInfo::diag
//! [`SlToVlMappingTable::diag`]: super::SlToVlMappingTable::diag
//! [`VlArbitrationTable::diag`]: super::VlArbitrationTable::diag
//! [`PortCounters::diag`]: super::PortCounters::diag
//! [`PortCountersExtended::diag`]: super::PortCountersExtended::diag
//! [`PortSamplesControl::diag`]: super::PortSamplesControl::diag

use std::fmt::{self, Display, Formatter};

mod perf;
mod smp;
mod tables;

pub use perf::{PortCountersDiag, PortCountersExtendedDiag, PortSamplesControlDiag};
pub use smp::{NodeDescriptionDiag, NodeInfoDiag, PortInfoDiag, SwitchInfoDiag};
pub use tables::{GuidsDiag, PKeysDiag, SlToVlDiag, SlToVlHeader, VlArbDiag, VlArbPriority};

/// The column libibmad's values start at (`Name:` and dots fill the
/// columns before it).
pub const VALUE_COLUMN: usize = 33;

/// One `Name:.....value` line, without its newline: the name and a colon,
/// dots up to [`VALUE_COLUMN`] (or the column of [`Field::column`]), the
/// value. A name that reaches the column gets no dot.
#[derive(Clone, Copy, Debug)]
pub struct Field<'a, V> {
    name: &'a str,
    value: V,
    column: usize,
}

/// The line of `name` and `value` (see [`Field`]).
pub fn field<V: Display>(name: &str, value: V) -> Field<'_, V> {
    Field {
        name,
        value,
        column: VALUE_COLUMN,
    }
}

impl<V> Field<'_, V> {
    /// The value at `column` instead of [`VALUE_COLUMN`].
    pub fn column(self, column: usize) -> Self {
        Field { column, ..self }
    }
}

impl<V: Display> Display for Field<'_, V> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)?;
        f.write_str(":")?;
        for _ in (self.name.len() + 1)..self.column {
            f.write_str(".")?;
        }
        write!(f, "{}", self.value)
    }
}

/// A value as `0x` and twice `bytes` hex digits (libibmad's
/// `mad_dump_hex`): `Hex(0x15, 2)` is `0x0015`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hex(pub u64, pub usize);

impl Display for Hex {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:0w$x}", self.0, w = self.1 * 2)
    }
}

/// A node type (NodeInfo:NodeType) as `mad_dump_node_type` writes it
/// (`Channel Adapter`, `Switch`, `Router`, `?(n)?`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeType(pub u8);

impl Display for NodeType {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            1 => f.write_str("Channel Adapter"),
            2 => f.write_str("Switch"),
            3 => f.write_str("Router"),
            n => write!(f, "?({n})?"),
        }
    }
}

/// The names of the bits set in `v`, joined by ` or `; `undefined (v)`
/// after them when `undefined`.
fn or_list(f: &mut Formatter<'_>, names: &[(u32, &str)], v: u32, undefined: bool) -> fmt::Result {
    let mut first = true;
    for (bit, n) in names {
        if v & bit != 0 {
            if !first {
                f.write_str(" or ")?;
            }
            f.write_str(n)?;
            first = false;
        }
    }
    if undefined {
        if !first {
            f.write_str(" or ")?;
        }
        write!(f, "undefined ({v})")?;
    }
    Ok(())
}

const WIDTHS: [(u32, &str); 5] = [(1, "1X"), (2, "4X"), (4, "8X"), (8, "12X"), (16, "2X")];

/// A LinkWidthEnabled mask as `mad_dump_linkwidthen` writes it: the
/// widths joined by ` or ` (`1X or 4X`), `undefined (n)` for 0 or bits past
/// 2X.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkWidthEnabled(pub u8);

impl Display for LinkWidthEnabled {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let w = u32::from(self.0);
        or_list(f, &WIDTHS, w, w == 0 || w >> 5 != 0)
    }
}

/// A LinkWidthSupported mask as `mad_dump_linkwidthsup` writes it: as
/// [`LinkWidthEnabled`], then ` (IBA extension)` when the mask is not one
/// the base specification lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkWidthSupported(pub u8);

impl Display for LinkWidthSupported {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let w = self.0;
        LinkWidthEnabled(w).fmt(f)?;
        if !matches!(w, 1 | 3 | 7 | 11 | 15 | 17 | 19 | 23 | 27 | 31) && w >> 5 == 0 {
            f.write_str(" (IBA extension)")?;
        }
        Ok(())
    }
}

/// A LinkSpeedSupported or LinkSpeedEnabled mask as
/// `mad_dump_linkspeedsup` and `mad_dump_linkspeeden` write it (`2.5 Gbps
/// or 5.0 Gbps`, ` (IBA extension)` after a mask the base specification
/// does not list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpeeds(pub u8);

impl Display for LinkSpeeds {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let names = [(1, "2.5 Gbps"), (2, "5.0 Gbps"), (4, "10.0 Gbps")];
        or_list(f, &names, v.into(), v == 0 || v >> 3 != 0)?;
        if !matches!(v, 1 | 3 | 5 | 7) && v >> 3 == 0 {
            f.write_str(" (IBA extension)")?;
        }
        Ok(())
    }
}

/// A LinkSpeedExtSupported mask as `mad_dump_linkspeedextsup` writes it
/// (`0`, `14.0625 Gbps or 25.78125 Gbps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpeedsExt(pub u8);

impl Display for LinkSpeedsExt {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v == 0 {
            return f.write_str("0");
        }
        let names = [
            (1, "14.0625 Gbps"),
            (2, "25.78125 Gbps"),
            (4, "53.125 Gbps"),
            (8, "106.25 Gbps"),
        ];
        or_list(f, &names, v.into(), v >> 4 != 0)
    }
}

/// A LinkSpeedExtEnabled mask as `mad_dump_linkspeedexten` writes it: 30
/// is `Extended link speeds disabled`, others as [`LinkSpeedsExt`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpeedsExtEnabled(pub u8);

impl Display for LinkSpeedsExtEnabled {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.0 == 30 {
            f.write_str("Extended link speeds disabled")
        } else {
            LinkSpeedsExt(self.0).fmt(f)
        }
    }
}

/// A LinkDownDefaultState as `mad_dump_linkdowndefstate` writes it
/// (`NoChange`, `Sleep`, `Polling`, `?(n)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkDownDefaultState(pub u8);

impl Display for LinkDownDefaultState {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => f.write_str("NoChange"),
            1 => f.write_str("Sleep"),
            2 => f.write_str("Polling"),
            n => write!(f, "?({n})"),
        }
    }
}

/// An MTU code as `mad_dump_mtu` writes it (`256` ... `4096`, `?(n)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mtu(pub u8);

impl Display for Mtu {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            v @ 1..=5 => write!(f, "{}", 128u32 << v),
            n => write!(f, "?({n})"),
        }
    }
}

/// A VL count code (VLCap, OperationalVLs) as `mad_dump_vlcap` writes it
/// (`VL0-7`, `?(n)`); with `.1` true, as `mad_dump_opervls`, where 0 is `No
/// change`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vls(pub u8, pub bool);

impl Display for Vls {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 if self.1 => f.write_str("No change"),
            1 => f.write_str("VL0"),
            2 => f.write_str("VL0-1"),
            3 => f.write_str("VL0-3"),
            4 => f.write_str("VL0-7"),
            5 => f.write_str("VL0-14"),
            n => write!(f, "?({n})"),
        }
    }
}

const CAP_MASK: [(u32, &str); 30] = [
    (1, "IsSM"),
    (2, "IsNoticeSupported"),
    (3, "IsTrapSupported"),
    (4, "IsOptionalIPDSupported"),
    (5, "IsAutomaticMigrationSupported"),
    (6, "IsSLMappingSupported"),
    (7, "IsMKeyNVRAM"),
    (8, "IsPKeyNVRAM"),
    (9, "IsLedInfoSupported"),
    (10, "IsSMdisabled"),
    (11, "IsSystemImageGUIDsupported"),
    (12, "IsPkeySwitchExternalPortTrapSupported"),
    (14, "IsExtendedSpeedsSupported"),
    (15, "IsCapabilityMask2Supported"),
    (16, "IsCommunicatonManagementSupported"),
    (17, "IsSNMPTunnelingSupported"),
    (18, "IsReinitSupported"),
    (19, "IsDeviceManagementSupported"),
    (20, "IsVendorClassSupported"),
    (21, "IsDRNoticeSupported"),
    (22, "IsCapabilityMaskNoticeSupported"),
    (23, "IsBootManagementSupported"),
    (24, "IsLinkRoundTripLatencySupported"),
    (25, "IsClientRegistrationSupported"),
    (26, "IsOtherLocalChangesNoticeSupported"),
    (27, "IsLinkSpeedWidthPairsTableSupported"),
    (28, "IsVendorSpecificMadsTableSupported"),
    (29, "IsMcastPkeyTrapSuppressionSupported"),
    (30, "IsMulticastFDBTopSupported"),
    (31, "IsHierarchyInfoSupported"),
];

const CAP_MASK2: [(u32, &str); 11] = [
    (0, "IsSetNodeDescriptionSupported"),
    (1, "IsPortInfoExtendedSupported"),
    (2, "IsVirtualizationSupported"),
    (3, "IsSwitchPortStateTableSupported"),
    (4, "IsLinkWidth2xSupported"),
    (5, "IsLinkSpeedHDRSupported"),
    (6, "IsMKeyProtectBitsExtSupported"),
    (7, "IsEnhancedTrap128Supported"),
    (8, "IsPartitionTopSupported"),
    (9, "IsEnhancedQoSArbiterSupported"),
    (10, "IsLinkSpeedNDRSupported"),
];

fn cap_lines(f: &mut Formatter<'_>, mask: u32, names: &[(u32, &str)]) -> fmt::Result {
    write!(f, "{mask:#x}")?;
    for (bit, n) in names {
        if mask & (1 << bit) != 0 {
            write!(f, "\n\t\t\t\t{n}")?;
        }
    }
    Ok(())
}

/// A PortInfo:CapabilityMask as `mad_dump_portcapmask` writes it: the mask
/// in hex, then a line of four tabs and its name for each capability set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapMask(pub u32);

impl Display for CapMask {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        cap_lines(f, self.0, &CAP_MASK)
    }
}

/// A PortInfo:CapabilityMask2 as `mad_dump_portcapmask2` writes it (as
/// [`CapMask`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapMask2(pub u16);

impl Display for CapMask2 {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        cap_lines(f, self.0.into(), &CAP_MASK2)
    }
}

/// Writes `field(name, value)` and a newline after `indent` tabs.
fn line(f: &mut Formatter<'_>, indent: usize, name: &str, value: impl Display) -> fmt::Result {
    for _ in 0..indent {
        f.write_str("\t")?;
    }
    writeln!(f, "{}", field(name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_pad_with_dots_to_column_33() {
        assert_eq!(
            field("BaseVers", 1).to_string(),
            "BaseVers:........................1"
        );
        assert_eq!(
            field("McastPkeyTrapSuppressionEnabled", 0).to_string(),
            "McastPkeyTrapSuppressionEnabled:.0"
        );
        assert_eq!(
            field("ALongerNameThanTheColumnAllows", 7)
                .column(8)
                .to_string(),
            "ALongerNameThanTheColumnAllows:7"
        );
        assert_eq!(field("Lid", 1).column(8).to_string(), "Lid:....1");
        assert_eq!(Hex(0x15, 2).to_string(), "0x0015");
    }

    #[test]
    fn widths_speeds_and_masks_read_as_libibmad_writes_them() {
        let s = |d: &dyn Display| d.to_string();
        assert_eq!(s(&LinkWidthSupported(31)), "1X or 4X or 8X or 12X or 2X");
        assert_eq!(s(&LinkWidthSupported(2)), "4X (IBA extension)");
        assert_eq!(s(&LinkWidthEnabled(0)), "undefined (0)");
        assert_eq!(s(&LinkWidthEnabled(33)), "1X or undefined (33)");
        assert_eq!(s(&LinkSpeeds(7)), "2.5 Gbps or 5.0 Gbps or 10.0 Gbps");
        assert_eq!(s(&LinkSpeeds(2)), "5.0 Gbps (IBA extension)");
        assert_eq!(s(&LinkSpeeds(0)), "undefined (0) (IBA extension)");
        assert_eq!(s(&LinkSpeedsExt(0)), "0");
        assert_eq!(s(&LinkSpeedsExt(3)), "14.0625 Gbps or 25.78125 Gbps");
        assert_eq!(
            s(&LinkSpeedsExtEnabled(30)),
            "Extended link speeds disabled"
        );
        assert_eq!(
            s(&CapMask(0xc04a)),
            "0xc04a\n\t\t\t\tIsSM\n\t\t\t\tIsTrapSupported\n\t\t\t\tIsSLMappingSupported\n\t\t\t\tIsExtendedSpeedsSupported\n\t\t\t\tIsCapabilityMask2Supported"
        );
        assert_eq!(s(&CapMask2(0)), "0x0");
        assert_eq!(s(&Mtu(4)), "2048");
        assert_eq!(s(&Mtu(0)), "?(0)");
        assert_eq!(s(&Vls(0, true)), "No change");
        assert_eq!(s(&Vls(0, false)), "?(0)");
        assert_eq!(s(&NodeType(1)), "Channel Adapter");
        assert_eq!(s(&NodeType(9)), "?(9)?");
        assert_eq!(s(&LinkDownDefaultState(2)), "Polling");
    }
}
