//! The enumerated fields of PortInfo (IBA 14.2.5.6): the logical and
//! physical port state, the active link width and the active link speeds.
//!
//! Each is an enum with a variant per value the specification names and an
//! `Other` variant for the rest, so that every byte decodes and encodes back
//! to itself: build one from a byte with `From<u8>` (which never yields
//! `Other` for a named value), read the byte back with `u8::from`.
//! `Display` writes the name libibmad's dump functions give (what
//! `smpquery`, `iblinkinfo` and `saquery` print); [`PortState::ibstat_name`]
//! and [`PhysPortState::ibstat_name`] give the words of `ibstat`'s tables,
//! which differ.
//!
//! [`PortState`] here is the wire field. [`crate::PortState`] is the state
//! libibverbs reports (`ibv_port_state`), which has the same values 0-4 and
//! adds `ActiveDefer` (5), a verbs-only state with no PortInfo encoding; the
//! two stay separate types, and `From<mad::PortState>` converts the wire
//! state to the verbs one without loss.

use std::fmt;

/// Defines an enum of a byte field: the named values, an `Other(u8)` for the
/// rest, `From<u8>`, `From<Self> for u8`, `Default` (the value 0), and a
/// `Display` with the given names and `$other` for the rest.
macro_rules! byte_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal => $text:literal, )*
        }
        other: $other:literal
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            /// A value the specification does not name here (`From<u8>`
            /// never yields it for a named value).
            Other(u8),
        }

        impl From<u8> for $name {
            fn from(v: u8) -> Self {
                match v {
                    $( $value => $name::$variant, )*
                    n => $name::Other(n),
                }
            }
        }

        impl From<$name> for u8 {
            fn from(v: $name) -> u8 {
                match v {
                    $( $name::$variant => $value, )*
                    $name::Other(n) => n,
                }
            }
        }

        impl Default for $name {
            /// The value 0.
            fn default() -> Self {
                $name::from(0)
            }
        }

        impl $name {
            /// The name libibmad prints, `None` for [`Self::Other`].
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $( $name::$variant => Some($text), )*
                    $name::Other(_) => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(s) => f.pad(s),
                    None => write!(f, $other, u8::from(*self)),
                }
            }
        }
    };
}

byte_enum! {
    /// PortInfo:PortState, the logical state of a port (4 bits).
    ///
    /// Displayed as libibmad's `mad_dump_portstate` (`Initialize`, `?(7)`);
    /// [`PortState::ibstat_name`] gives `ibstat`'s words.
    pub enum PortState {
        /// 0: no state change (in a Set); reserved in a Get.
        NoChange = 0 => "NoChange",
        /// 1: Down (includes failed links).
        Down = 1 => "Down",
        /// 2: Initialize.
        Initialize = 2 => "Initialize",
        /// 3: Armed.
        Armed = 3 => "Armed",
        /// 4: Active.
        Active = 4 => "Active",
    }
    other: "?({})"
}

impl PortState {
    /// The state as `ibstat` prints it: `Down`, `Initializing`, `Armed`,
    /// `Active`, and `???` for every other value (0 included).
    pub fn ibstat_name(self) -> &'static str {
        match self {
            PortState::Down => "Down",
            PortState::Initialize => "Initializing",
            PortState::Armed => "Armed",
            PortState::Active => "Active",
            PortState::NoChange | PortState::Other(_) => "???",
        }
    }
}

impl From<PortState> for crate::PortState {
    /// The verbs state of the same value (`Other` as `Other`).
    fn from(s: PortState) -> crate::PortState {
        match s {
            PortState::NoChange => crate::PortState::Nop,
            PortState::Down => crate::PortState::Down,
            PortState::Initialize => crate::PortState::Init,
            PortState::Armed => crate::PortState::Armed,
            PortState::Active => crate::PortState::Active,
            PortState::Other(n) => crate::PortState::Other(n.into()),
        }
    }
}

byte_enum! {
    /// PortInfo:PortPhysicalState (4 bits).
    ///
    /// Displayed as libibmad's `mad_dump_physportstate` (`LinkUp`, `?(9)`);
    /// [`PhysPortState::ibstat_name`] gives `ibstat`'s words.
    pub enum PhysPortState {
        /// 0: no state change (in a Set).
        NoChange = 0 => "NoChange",
        /// 1: Sleep.
        Sleep = 1 => "Sleep",
        /// 2: Polling.
        Polling = 2 => "Polling",
        /// 3: Disabled.
        Disabled = 3 => "Disabled",
        /// 4: PortConfigurationTraining.
        PortConfigurationTraining = 4 => "PortConfigurationTraining",
        /// 5: LinkUp.
        LinkUp = 5 => "LinkUp",
        /// 6: LinkErrorRecovery.
        LinkErrorRecovery = 6 => "LinkErrorRecovery",
        /// 7: Phy Test.
        PhyTest = 7 => "PhyTest",
    }
    other: "?({})"
}

impl PhysPortState {
    /// The state as `ibstat` prints it: as [`Display`](fmt::Display) but
    /// `No state change` for 0 and `???` past PhyTest.
    pub fn ibstat_name(self) -> &'static str {
        match self {
            PhysPortState::NoChange => "No state change",
            s => s.name().unwrap_or("???"),
        }
    }
}

byte_enum! {
    /// PortInfo:LinkWidthActive, one link width (a bit of the
    /// LinkWidthSupported and LinkWidthEnabled masks).
    ///
    /// Displayed as libibmad's `mad_dump_linkwidth` (`4X`, `undefined
    /// (0)`).
    pub enum LinkWidth {
        /// 1: 1x.
        X1 = 1 => "1X",
        /// 2: 4x.
        X4 = 2 => "4X",
        /// 4: 8x.
        X8 = 4 => "8X",
        /// 8: 12x.
        X12 = 8 => "12X",
        /// 16: 2x.
        X2 = 16 => "2X",
    }
    other: "undefined ({})"
}

impl LinkWidth {
    /// The number of lanes, `None` for [`LinkWidth::Other`].
    pub fn lanes(self) -> Option<u32> {
        match self {
            LinkWidth::X1 => Some(1),
            LinkWidth::X2 => Some(2),
            LinkWidth::X4 => Some(4),
            LinkWidth::X8 => Some(8),
            LinkWidth::X12 => Some(12),
            LinkWidth::Other(_) => None,
        }
    }
}

byte_enum! {
    /// PortInfo:LinkSpeedActive, one link speed (4 bits; a bit of the
    /// LinkSpeedSupported and LinkSpeedEnabled masks).
    ///
    /// Displayed as libibmad's `mad_dump_linkspeed` (`10.0 Gbps`,
    /// `undefined (3)`).
    pub enum LinkSpeed {
        /// 0: the speed is the extended one, [`LinkSpeedExt`].
        Extended = 0 => "Extended speed",
        /// 1: 2.5 Gb/s a lane (SDR).
        Sdr = 1 => "2.5 Gbps",
        /// 2: 5.0 Gb/s a lane (DDR).
        Ddr = 2 => "5.0 Gbps",
        /// 4: 10.0 Gb/s a lane (QDR).
        Qdr = 4 => "10.0 Gbps",
    }
    other: "undefined ({})"
}

byte_enum! {
    /// PortInfo:LinkSpeedExtActive, one extended link speed (4 bits; a bit
    /// of the LinkSpeedExtSupported and LinkSpeedExtEnabled masks).
    ///
    /// Displayed as libibmad's `mad_dump_linkspeedext` (`14.0625 Gbps`,
    /// `undefined (3)`).
    pub enum LinkSpeedExt {
        /// 0: no extended speed is active.
        NoExtendedSpeed = 0 => "No Extended Speed",
        /// 1: 14.0625 Gb/s a lane (FDR).
        Fdr = 1 => "14.0625 Gbps",
        /// 2: 25.78125 Gb/s a lane (EDR).
        Edr = 2 => "25.78125 Gbps",
        /// 4: 53.125 Gb/s a lane (HDR).
        Hdr = 4 => "53.125 Gbps",
        /// 8: 106.25 Gb/s a lane (NDR).
        Ndr = 8 => "106.25 Gbps",
    }
    other: "undefined ({})"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_decodes_and_encodes_back() {
        for b in 0..=u8::MAX {
            assert_eq!(u8::from(PortState::from(b)), b);
            assert_eq!(u8::from(PhysPortState::from(b)), b);
            assert_eq!(u8::from(LinkWidth::from(b)), b);
            assert_eq!(u8::from(LinkSpeed::from(b)), b);
            assert_eq!(u8::from(LinkSpeedExt::from(b)), b);
        }
        assert_eq!(PortState::from(4), PortState::Active);
        assert_eq!(PortState::from(9), PortState::Other(9));
        assert_eq!(PortState::default(), PortState::NoChange);
        assert_eq!(LinkWidth::default(), LinkWidth::Other(0));
        assert_eq!(LinkSpeed::default(), LinkSpeed::Extended);
    }

    #[test]
    fn names_are_libibmads() {
        // libibmad's dump.c: mad_dump_portstate, mad_dump_physportstate.
        let states = ["NoChange", "Down", "Initialize", "Armed", "Active", "?(5)"];
        for (i, n) in states.iter().enumerate() {
            assert_eq!(PortState::from(i as u8).to_string(), *n);
        }
        let phys = [
            "NoChange",
            "Sleep",
            "Polling",
            "Disabled",
            "PortConfigurationTraining",
            "LinkUp",
            "LinkErrorRecovery",
            "PhyTest",
            "?(8)",
        ];
        for (i, n) in phys.iter().enumerate() {
            assert_eq!(PhysPortState::from(i as u8).to_string(), *n);
        }
        // mad_dump_linkwidth, mad_dump_linkspeed, mad_dump_linkspeedext.
        let widths = [(1, "1X"), (2, "4X"), (4, "8X"), (8, "12X"), (16, "2X")];
        for (v, n) in widths {
            assert_eq!(LinkWidth::from(v).to_string(), n);
        }
        assert_eq!(LinkWidth::from(3).to_string(), "undefined (3)");
        assert_eq!(LinkWidth::X12.lanes(), Some(12));
        assert_eq!(LinkSpeed::from(0).to_string(), "Extended speed");
        assert_eq!(LinkSpeed::from(4).to_string(), "10.0 Gbps");
        assert_eq!(LinkSpeed::from(3).to_string(), "undefined (3)");
        assert_eq!(LinkSpeedExt::from(0).to_string(), "No Extended Speed");
        assert_eq!(LinkSpeedExt::from(8).to_string(), "106.25 Gbps");
        assert_eq!(LinkSpeedExt::from(5).to_string(), "undefined (5)");
    }

    #[test]
    fn ibstat_names_are_ibstats() {
        // infiniband-diags' ibstat.c: port_state_str, port_phy_state_str.
        let ports = ["???", "Down", "Initializing", "Armed", "Active", "???"];
        for (i, n) in ports.iter().enumerate() {
            assert_eq!(PortState::from(i as u8).ibstat_name(), *n);
        }
        assert_eq!(PortState::from(99).ibstat_name(), "???");
        let phys = [
            "No state change",
            "Sleep",
            "Polling",
            "Disabled",
            "PortConfigurationTraining",
            "LinkUp",
            "LinkErrorRecovery",
            "PhyTest",
            "???",
        ];
        for (i, n) in phys.iter().enumerate() {
            assert_eq!(PhysPortState::from(i as u8).ibstat_name(), *n);
        }
    }

    #[test]
    fn the_wire_state_converts_to_the_verbs_state() {
        assert_eq!(
            crate::PortState::from(PortState::Initialize),
            crate::PortState::Init
        );
        assert_eq!(
            crate::PortState::from(PortState::Other(7)),
            crate::PortState::Other(7)
        );
    }
}
