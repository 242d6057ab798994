//! NodeInfo and PortInfo as `smpquery` prints them.

use std::fmt::{self, Display, Formatter};

use super::{
    line, CapMask, CapMask2, Hex, LinkDownDefaultState, LinkSpeeds, LinkSpeedsExt,
    LinkSpeedsExtEnabled, LinkWidthEnabled, LinkWidthSupported, Mtu, NodeType, Vls,
};
use crate::mad::{NodeInfo, PortInfo};

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
