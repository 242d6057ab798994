//! NodeInfo, NodeDescription, PortInfo and SwitchInfo as `smpquery`
//! prints them.

use std::fmt::{self, Display, Formatter};

use super::{
    line, CapMask, CapMask2, Hex, LinkDownDefaultState, LinkSpeeds, LinkSpeedsExt,
    LinkSpeedsExtEnabled, LinkWidthEnabled, LinkWidthSupported, Mtu, NodeType, Vls,
};
use crate::mad::{NodeDescription, NodeInfo, PortInfo, SwitchInfo};

/// NodeInfo as `mad_dump_nodeinfo` writes it: see [`NodeInfo::diag`].
#[derive(Clone, Copy, Debug)]
pub struct NodeInfoDiag<'a>(&'a NodeInfo);

impl NodeInfo {
    /// The attribute as `smpquery nodeinfo` prints it after its `#` line:
    /// one `Name:.....value` line a field, each ending in a newline.
    pub fn diag(&self) -> NodeInfoDiag<'_> {
        NodeInfoDiag(self)
    }
}

impl Display for NodeInfoDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let n = self.0;
        line(f, 0, "BaseVers", n.base_version)?;
        line(f, 0, "ClassVers", n.class_version)?;
        line(f, 0, "NodeType", NodeType(n.node_type))?;
        line(f, 0, "NumPorts", n.num_ports)?;
        line(f, 0, "SystemGuid", Hex(n.system_image_guid, 8))?;
        line(f, 0, "Guid", Hex(n.node_guid, 8))?;
        line(f, 0, "PortGuid", Hex(n.port_guid, 8))?;
        line(f, 0, "PartCap", n.partition_cap)?;
        line(f, 0, "DevId", Hex(n.device_id.into(), 2))?;
        line(f, 0, "Revision", Hex(n.revision.into(), 4))?;
        line(f, 0, "LocalPort", n.local_port_num)?;
        line(f, 0, "VendorId", Hex(n.vendor_id.into(), 3))
    }
}

/// NodeDescription as `smpquery nodedesc` prints it: see
/// [`NodeDescription::diag`].
#[derive(Clone, Copy, Debug)]
pub struct NodeDescriptionDiag<'a>(&'a NodeDescription);

impl NodeDescription {
    /// The attribute as `smpquery nodedesc` prints it: `Node Description:`,
    /// dots up to column 49 (one dot at least), the text up to the first NUL
    /// (at most the 64 bytes; invalid UTF-8 replaced), a newline.
    pub fn diag(&self) -> NodeDescriptionDiag<'_> {
        NodeDescriptionDiag(self)
    }
}

impl Display for NodeDescriptionDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let bytes = &self.0 .0;
        // smpquery counts the dots by the bytes (strlen), not the characters.
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        f.write_str("Node Description:")?;
        for _ in 0..32usize.saturating_sub(len).max(1) {
            f.write_str(".")?;
        }
        writeln!(f, "{}", String::from_utf8_lossy(&bytes[..len]))
    }
}

/// SwitchInfo as `mad_dump_switchinfo` writes it: see [`SwitchInfo::diag`].
#[derive(Clone, Copy, Debug)]
pub struct SwitchInfoDiag<'a>(&'a SwitchInfo);

impl SwitchInfo {
    /// The attribute as `smpquery switchinfo` prints it after its `#` line:
    /// one `Name:.....value` line a field, each ending in a newline.
    pub fn diag(&self) -> SwitchInfoDiag<'_> {
        SwitchInfoDiag(self)
    }
}

impl Display for SwitchInfoDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let s = self.0;
        let bit = u8::from;
        line(f, 0, "LinearFdbCap", s.linear_fdb_cap)?;
        line(f, 0, "RandomFdbCap", s.random_fdb_cap)?;
        line(f, 0, "McastFdbCap", s.multicast_fdb_cap)?;
        line(f, 0, "LinearFdbTop", s.linear_fdb_top)?;
        line(f, 0, "DefPort", s.default_port)?;
        line(f, 0, "DefMcastPrimPort", s.default_multicast_primary_port)?;
        line(
            f,
            0,
            "DefMcastNotPrimPort",
            s.default_multicast_not_primary_port,
        )?;
        line(f, 0, "LifeTime", s.life_time_value)?;
        line(f, 0, "StateChange", bit(s.port_state_change))?;
        line(
            f,
            0,
            "OptSLtoVLMapping",
            s.optimized_sl_to_vl_mapping_programming,
        )?;
        line(f, 0, "LidsPerPort", s.lids_per_port)?;
        line(f, 0, "PartEnforceCap", s.partition_enforcement_cap)?;
        line(f, 0, "InboundPartEnf", bit(s.inbound_enforcement_cap))?;
        line(f, 0, "OutboundPartEnf", bit(s.outbound_enforcement_cap))?;
        line(f, 0, "FilterRawInbound", bit(s.filter_raw_inbound_cap))?;
        line(f, 0, "FilterRawOutbound", bit(s.filter_raw_outbound_cap))?;
        line(f, 0, "EnhancedPort0", bit(s.enhanced_port0))?;
        line(f, 0, "MulticastFDBTop", Hex(s.multicast_fdb_top.into(), 2))
    }
}

/// PortInfo as infiniband-diags' `dump_portinfo` writes it: see
/// [`PortInfo::diag`].
#[derive(Clone, Copy, Debug)]
pub struct PortInfoDiag<'a> {
    info: &'a PortInfo,
    indent: usize,
}

impl PortInfo {
    /// The attribute as `smpquery portinfo` prints it after its `#` line:
    /// one `Name:.....value` line a field, each ending in a newline, the
    /// M_Key `<not displayed>`, the capability masks' names on lines of
    /// their own.
    pub fn diag(&self) -> PortInfoDiag<'_> {
        PortInfoDiag {
            info: self,
            indent: 0,
        }
    }
}

impl PortInfoDiag<'_> {
    /// Each field's line after `tabs` tabs (as `saquery` prints a
    /// PortInfoRecord's, with 2); the capability lines keep their four.
    pub fn indent(self, tabs: usize) -> Self {
        PortInfoDiag {
            indent: tabs,
            ..self
        }
    }
}

impl Display for PortInfoDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let (p, t) = (self.info, self.indent);
        line(f, t, "Mkey", "<not displayed>")?;
        line(f, t, "GidPrefix", Hex(p.gid_prefix, 8))?;
        line(f, t, "Lid", p.lid)?;
        line(f, t, "SMLid", p.master_sm_lid)?;
        line(f, t, "CapMask", CapMask(p.capability_mask))?;
        line(f, t, "DiagCode", Hex(p.diag_code.into(), 2))?;
        line(f, t, "MkeyLeasePeriod", p.m_key_lease_period)?;
        line(f, t, "LocalPort", p.local_port_num)?;
        line(
            f,
            t,
            "LinkWidthEnabled",
            LinkWidthEnabled(p.link_width_enabled),
        )?;
        line(
            f,
            t,
            "LinkWidthSupported",
            LinkWidthSupported(p.link_width_supported),
        )?;
        line(f, t, "LinkWidthActive", p.link_width_active)?;
        line(
            f,
            t,
            "LinkSpeedSupported",
            LinkSpeeds(p.link_speed_supported),
        )?;
        line(f, t, "LinkState", p.port_state)?;
        line(f, t, "PhysLinkState", p.port_physical_state)?;
        line(
            f,
            t,
            "LinkDownDefState",
            LinkDownDefaultState(p.link_down_default_state),
        )?;
        line(f, t, "ProtectBits", p.m_key_protect_bits)?;
        line(f, t, "LMC", p.lmc)?;
        line(f, t, "LinkSpeedActive", p.link_speed_active)?;
        line(f, t, "LinkSpeedEnabled", LinkSpeeds(p.link_speed_enabled))?;
        line(f, t, "NeighborMTU", Mtu(p.neighbor_mtu))?;
        line(f, t, "SMSL", p.master_sm_sl)?;
        line(f, t, "VLCap", Vls(p.vl_cap, false))?;
        line(f, t, "InitType", Hex(p.init_type.into(), 1))?;
        line(f, t, "VLHighLimit", p.vl_high_limit)?;
        line(f, t, "VLArbHighCap", p.vl_arbitration_high_cap)?;
        line(f, t, "VLArbLowCap", p.vl_arbitration_low_cap)?;
        line(f, t, "InitReply", Hex(p.init_type_reply.into(), 1))?;
        line(f, t, "MtuCap", Mtu(p.mtu_cap))?;
        line(f, t, "VLStallCount", p.vl_stall_count)?;
        line(f, t, "HoqLife", p.hoq_life)?;
        line(f, t, "OperVLs", Vls(p.operational_vls, true))?;
        let bit = u8::from;
        line(f, t, "PartEnforceInb", bit(p.partition_enforcement_inbound))?;
        line(
            f,
            t,
            "PartEnforceOutb",
            bit(p.partition_enforcement_outbound),
        )?;
        line(f, t, "FilterRawInb", bit(p.filter_raw_inbound))?;
        line(f, t, "FilterRawOutb", bit(p.filter_raw_outbound))?;
        line(f, t, "MkeyViolations", p.m_key_violations)?;
        line(f, t, "PkeyViolations", p.p_key_violations)?;
        line(f, t, "QkeyViolations", p.q_key_violations)?;
        line(f, t, "GuidCap", p.guid_cap)?;
        line(f, t, "ClientReregister", bit(p.client_reregister))?;
        line(
            f,
            t,
            "McastPkeyTrapSuppressionEnabled",
            p.multicast_pkey_trap_suppression_enabled,
        )?;
        line(f, t, "SubnetTimeout", p.subnet_timeout)?;
        line(f, t, "RespTimeVal", p.resp_time_value)?;
        line(f, t, "LocalPhysErr", p.local_phy_errors)?;
        line(f, t, "OverrunErr", p.overrun_errors)?;
        line(f, t, "MaxCreditHint", p.max_credit_hint)?;
        line(f, t, "RoundTrip", p.link_round_trip_latency)?;
        line(f, t, "CapabilityMask2", CapMask2(p.capability_mask2))?;
        line(f, t, "LinkSpeedExtActive", p.link_speed_ext_active)?;
        line(
            f,
            t,
            "LinkSpeedExtSupported",
            LinkSpeedsExt(p.link_speed_ext_supported),
        )?;
        line(
            f,
            t,
            "LinkSpeedExtEnabled",
            LinkSpeedsExtEnabled(p.link_speed_ext_enabled),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_description_pads_to_column_49_by_bytes() {
        let nd = |t: &str| NodeDescription::new(t).unwrap().diag().to_string();
        assert_eq!(
            nd("sw1"),
            "Node Description:.............................sw1\n"
        );
        assert_eq!(nd("").len(), "Node Description:".len() + 32 + 1);
        let long = "x".repeat(40);
        assert_eq!(nd(&long), format!("Node Description:.{long}\n"));
        // Two bytes, one character: the dots count the bytes.
        assert_eq!(nd("\u{e9}").matches('.').count(), 30);
        // All 64 bytes, no NUL: all of them.
        let full = NodeDescription([b'a'; 64]).diag().to_string();
        assert_eq!(full, format!("Node Description:.{}\n", "a".repeat(64)));
        // Invalid UTF-8 is replaced, not a panic.
        let mut raw = [0u8; 64];
        raw[..2].copy_from_slice(&[0xff, b'z']);
        assert!(NodeDescription(raw)
            .diag()
            .to_string()
            .ends_with("\u{fffd}z\n"));
    }

    #[test]
    fn switch_info_prints_every_field_of_mad_dump_switchinfo() {
        let s = SwitchInfo {
            linear_fdb_cap: 48128,
            linear_fdb_top: 12,
            port_state_change: true,
            lids_per_port: 0,
            partition_enforcement_cap: 32,
            enhanced_port0: false,
            multicast_fdb_top: 0xc000,
            ..Default::default()
        };
        let text = s.diag().to_string();
        let names: Vec<&str> = text.lines().map(|l| l.split(':').next().unwrap()).collect();
        assert_eq!(
            names,
            [
                "LinearFdbCap",
                "RandomFdbCap",
                "McastFdbCap",
                "LinearFdbTop",
                "DefPort",
                "DefMcastPrimPort",
                "DefMcastNotPrimPort",
                "LifeTime",
                "StateChange",
                "OptSLtoVLMapping",
                "LidsPerPort",
                "PartEnforceCap",
                "InboundPartEnf",
                "OutboundPartEnf",
                "FilterRawInbound",
                "FilterRawOutbound",
                "EnhancedPort0",
                "MulticastFDBTop"
            ]
        );
        assert!(text.starts_with("LinearFdbCap:....................48128\n"));
        assert!(text.contains("\nLinearFdbTop:....................12\n"));
        assert!(text.contains("\nStateChange:.....................1\n"));
        assert!(text.contains("\nPartEnforceCap:..................32\n"));
        assert!(text.ends_with("\nMulticastFDBTop:.................0xc000\n"));
    }
    use crate::mad::{LinkSpeed, LinkSpeedExt, LinkWidth, PhysPortState, PortState};

    #[test]
    fn port_info_prints_as_smpquery_and_indents_as_saquery() {
        let p = PortInfo {
            gid_prefix: 0xfe80_0000_0000_0000,
            lid: 3,
            master_sm_lid: 1,
            capability_mask: 0x0251_0a68,
            local_port_num: 1,
            link_width_enabled: 3,
            link_width_supported: 3,
            link_width_active: LinkWidth::X4,
            link_speed_supported: 5,
            port_state: PortState::Active,
            port_physical_state: PhysPortState::LinkUp,
            link_down_default_state: 2,
            link_speed_active: LinkSpeed::Sdr,
            link_speed_enabled: 5,
            neighbor_mtu: 4,
            vl_cap: 4,
            mtu_cap: 4,
            operational_vls: 4,
            capability_mask2: 0,
            link_speed_ext_active: LinkSpeedExt::NoExtendedSpeed,
            ..Default::default()
        };
        let text = p.diag().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Mkey:............................<not displayed>");
        assert_eq!(
            lines[1],
            "GidPrefix:.......................0xfe80000000000000"
        );
        assert_eq!(lines[4], "CapMask:.........................0x2510a68");
        assert_eq!(lines[5], "\t\t\t\tIsTrapSupported");
        assert!(text.contains("\nLinkWidthActive:.................4X\n"));
        assert!(text.contains("\nLinkState:.......................Active\n"));
        assert!(text.contains("\nPhysLinkState:...................LinkUp\n"));
        assert!(text.contains("\nLinkSpeedActive:.................2.5 Gbps\n"));
        assert!(text.contains("\nLinkSpeedExtActive:..............No Extended Speed\n"));
        assert!(text.ends_with("LinkSpeedExtEnabled:.............0\n"));
        let indented = p.diag().indent(2).to_string();
        for (a, b) in text.lines().zip(indented.lines()) {
            if a.starts_with('\t') {
                assert_eq!(a, b);
            } else {
                assert_eq!(format!("\t\t{a}"), b);
            }
        }
        assert_eq!(text.lines().count(), indented.lines().count());
    }
}
