//! The SA records of nodes, ports and links: NodeRecord, PortInfoRecord and
//! LinkRecord (IBA 15.2.5.2, 15.2.5.3, 15.2.5.13).

use super::{attr_id, Component as C, SaRecord};
use crate::mad::wire::{In, Out};
use crate::mad::{class, Attribute, NodeDescription, NodeInfo, PortInfo, Result};

bitflags::bitflags! {
    /// The ComponentMask bits of a NodeRecord query: one per field of the
    /// record, in the order of the record (NodeInfo's fields one by one).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct NodeRecordMask: u64 {
        /// LID.
        const LID = 1 << 0;
        /// The reserved 16 bits after the LID.
        const RESERVED = 1 << 1;
        /// NodeInfo.BaseVersion.
        const BASE_VERSION = 1 << 2;
        /// NodeInfo.ClassVersion.
        const CLASS_VERSION = 1 << 3;
        /// NodeInfo.NodeType.
        const NODE_TYPE = 1 << 4;
        /// NodeInfo.NumPorts.
        const NUM_PORTS = 1 << 5;
        /// NodeInfo.SystemImageGUID.
        const SYSTEM_IMAGE_GUID = 1 << 6;
        /// NodeInfo.NodeGUID.
        const NODE_GUID = 1 << 7;
        /// NodeInfo.PortGUID.
        const PORT_GUID = 1 << 8;
        /// NodeInfo.PartitionCap.
        const PARTITION_CAP = 1 << 9;
        /// NodeInfo.DeviceID.
        const DEVICE_ID = 1 << 10;
        /// NodeInfo.Revision.
        const REVISION = 1 << 11;
        /// NodeInfo.LocalPortNum.
        const LOCAL_PORT_NUM = 1 << 12;
        /// NodeInfo.VendorID.
        const VENDOR_ID = 1 << 13;
        /// NodeDescription.
        const NODE_DESCRIPTION = 1 << 14;
    }
}

/// NodeRecord (IBA 15.2.5.2, 108 bytes; 112 in a table): a node's NodeInfo
/// and NodeDescription, by the LID of the port it was reached through.
///
/// | byte | field |
/// |---|---|
/// | 0-1 | LID |
/// | 2-3 | reserved |
/// | 4-43 | NodeInfo ([`NodeInfo`], 40 bytes) |
/// | 44-107 | NodeDescription ([`NodeDescription`], 64 bytes) |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeRecord {
    /// The LID of the port (the base LID; for a switch, port 0's).
    pub lid: u16,
    /// The node's NodeInfo.
    pub node_info: NodeInfo,
    /// The node's NodeDescription.
    pub node_description: NodeDescription,
}

impl Attribute for NodeRecord {
    const ID: u16 = attr_id::NODE_RECORD;
    const NAME: &'static str = "NodeRecord";
    const SIZE: usize = 108;

    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        Ok(NodeRecord {
            lid: r.u16(0)?,
            node_info: NodeInfo::decode(b.get(4..).unwrap_or(&[]))?,
            node_description: NodeDescription(r.bytes(44)?),
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        w.u16(0, self.lid)?;
        w.u16(2, 0)?;
        w.bytes(44, &self.node_description.0)?;
        self.node_info
            .encode_into(out.get_mut(4..).unwrap_or(&mut []))
    }
}

impl SaRecord for NodeRecord {
    type Mask = NodeRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("Reserved", 16, 16),
        C::new("BaseVersion", 32, 8),
        C::new("ClassVersion", 40, 8),
        C::new("NodeType", 48, 8),
        C::new("NumPorts", 56, 8),
        C::new("SystemImageGUID", 64, 64),
        C::new("NodeGUID", 128, 64),
        C::new("PortGUID", 192, 64),
        C::new("PartitionCap", 256, 16),
        C::new("DeviceID", 272, 16),
        C::new("Revision", 288, 32),
        C::new("LocalPortNum", 320, 8),
        C::new("VendorID", 328, 24),
        C::new("NodeDescription", 352, 512),
    ];
}

bitflags::bitflags! {
    /// The ComponentMask bits of a PortInfoRecord query: EndportLID,
    /// PortNum, Options, then PortInfo's fields one by one (reserved fields
    /// included, as the specification counts them; the names follow OpenSM's
    /// `IB_PIR_COMPMASK_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct PortInfoRecordMask: u64 {
        /// EndportLID.
        const LID = 1 << 0;
        /// PortNum.
        const PORT_NUM = 1 << 1;
        /// Options.
        const OPTIONS = 1 << 2;
        /// PortInfo.M_Key.
        const M_KEY = 1 << 3;
        /// PortInfo.GidPrefix.
        const GID_PREFIX = 1 << 4;
        /// PortInfo.LID.
        const BASE_LID = 1 << 5;
        /// PortInfo.MasterSMLID.
        const MASTER_SM_LID = 1 << 6;
        /// PortInfo.CapabilityMask.
        const CAPABILITY_MASK = 1 << 7;
        /// PortInfo.DiagCode.
        const DIAG_CODE = 1 << 8;
        /// PortInfo.M_KeyLeasePeriod.
        const M_KEY_LEASE_PERIOD = 1 << 9;
        /// PortInfo.LocalPortNum.
        const LOCAL_PORT_NUM = 1 << 10;
        /// PortInfo.LinkWidthEnabled.
        const LINK_WIDTH_ENABLED = 1 << 11;
        /// PortInfo.LinkWidthSupported.
        const LINK_WIDTH_SUPPORTED = 1 << 12;
        /// PortInfo.LinkWidthActive.
        const LINK_WIDTH_ACTIVE = 1 << 13;
        /// PortInfo.LinkSpeedSupported.
        const LINK_SPEED_SUPPORTED = 1 << 14;
        /// PortInfo.PortState.
        const PORT_STATE = 1 << 15;
        /// PortInfo.PortPhysicalState.
        const PORT_PHYSICAL_STATE = 1 << 16;
        /// PortInfo.LinkDownDefaultState.
        const LINK_DOWN_DEFAULT_STATE = 1 << 17;
        /// PortInfo.M_KeyProtectBits.
        const M_KEY_PROTECT_BITS = 1 << 18;
        /// The reserved bits of PortInfo's byte 34.
        const RESERVED2 = 1 << 19;
        /// PortInfo.LMC.
        const LMC = 1 << 20;
        /// PortInfo.LinkSpeedActive.
        const LINK_SPEED_ACTIVE = 1 << 21;
        /// PortInfo.LinkSpeedEnabled.
        const LINK_SPEED_ENABLED = 1 << 22;
        /// PortInfo.NeighborMTU.
        const NEIGHBOR_MTU = 1 << 23;
        /// PortInfo.MasterSMSL.
        const MASTER_SM_SL = 1 << 24;
        /// PortInfo.VLCap.
        const VL_CAP = 1 << 25;
        /// PortInfo.InitType.
        const INIT_TYPE = 1 << 26;
        /// PortInfo.VLHighLimit.
        const VL_HIGH_LIMIT = 1 << 27;
        /// PortInfo.VLArbitrationHighCap.
        const VL_ARBITRATION_HIGH_CAP = 1 << 28;
        /// PortInfo.VLArbitrationLowCap.
        const VL_ARBITRATION_LOW_CAP = 1 << 29;
        /// PortInfo.InitTypeReply.
        const INIT_TYPE_REPLY = 1 << 30;
        /// PortInfo.MTUCap.
        const MTU_CAP = 1 << 31;
        /// PortInfo.VLStallCount.
        const VL_STALL_COUNT = 1 << 32;
        /// PortInfo.HOQLife.
        const HOQ_LIFE = 1 << 33;
        /// PortInfo.OperationalVLs.
        const OPERATIONAL_VLS = 1 << 34;
        /// PortInfo.PartitionEnforcementInbound.
        const PARTITION_ENFORCEMENT_INBOUND = 1 << 35;
        /// PortInfo.PartitionEnforcementOutbound.
        const PARTITION_ENFORCEMENT_OUTBOUND = 1 << 36;
        /// PortInfo.FilterRawInbound.
        const FILTER_RAW_INBOUND = 1 << 37;
        /// PortInfo.FilterRawOutbound.
        const FILTER_RAW_OUTBOUND = 1 << 38;
        /// PortInfo.M_KeyViolations.
        const M_KEY_VIOLATIONS = 1 << 39;
        /// PortInfo.P_KeyViolations.
        const P_KEY_VIOLATIONS = 1 << 40;
        /// PortInfo.Q_KeyViolations.
        const Q_KEY_VIOLATIONS = 1 << 41;
        /// PortInfo.GUIDCap.
        const GUID_CAP = 1 << 42;
        /// PortInfo.ClientReregister.
        const CLIENT_REREGISTER = 1 << 43;
        /// PortInfo.MulticastPKeyTrapSuppressionEnabled (OpenSM: RESV3).
        const MULTICAST_PKEY_TRAP_SUPPRESSION = 1 << 44;
        /// PortInfo.SubnetTimeOut.
        const SUBNET_TIMEOUT = 1 << 45;
        /// The reserved bits of PortInfo's byte 52.
        const RESERVED4 = 1 << 46;
        /// PortInfo.RespTimeValue.
        const RESP_TIME_VALUE = 1 << 47;
        /// PortInfo.LocalPhyErrors.
        const LOCAL_PHY_ERRORS = 1 << 48;
        /// PortInfo.OverrunErrors.
        const OVERRUN_ERRORS = 1 << 49;
        /// PortInfo.MaxCreditHint.
        const MAX_CREDIT_HINT = 1 << 50;
        /// The reserved byte 56 of PortInfo.
        const RESERVED5 = 1 << 51;
        /// PortInfo.LinkRoundTripLatency.
        const LINK_ROUND_TRIP_LATENCY = 1 << 52;
        /// PortInfo.CapabilityMask2.
        const CAPABILITY_MASK2 = 1 << 53;
        /// PortInfo.LinkSpeedExtActive.
        const LINK_SPEED_EXT_ACTIVE = 1 << 54;
        /// PortInfo.LinkSpeedExtSupported.
        const LINK_SPEED_EXT_SUPPORTED = 1 << 55;
        /// The reserved bits of PortInfo's byte 63.
        const RESERVED7 = 1 << 56;
        /// PortInfo.LinkSpeedExtEnabled.
        const LINK_SPEED_EXT_ENABLED = 1 << 57;
    }
}

/// PortInfoRecord (IBA 15.2.5.3, 68 bytes; 72 in a table): a port's
/// PortInfo, by the LID of its end port and its number.
///
/// | byte | field |
/// |---|---|
/// | 0-1 | EndportLID |
/// | 2 | PortNum |
/// | 3 | Options (reserved before IBA 1.3) |
/// | 4-67 | PortInfo ([`PortInfo`], 64 bytes) |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PortInfoRecord {
    /// EndportLID: the LID of the CA or router port, or of a switch's port 0.
    pub endport_lid: u16,
    /// PortNum: the port of the node (a switch's external ports are 1-N).
    pub port_num: u8,
    /// Options: how a CapabilityMask in the query matches (IBA 1.3).
    pub options: u8,
    /// The port's PortInfo.
    pub port_info: PortInfo,
}

impl Attribute for PortInfoRecord {
    const ID: u16 = attr_id::PORT_INFO_RECORD;
    const NAME: &'static str = "PortInfoRecord";
    const SIZE: usize = 68;

    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        Ok(PortInfoRecord {
            endport_lid: r.u16(0)?,
            port_num: r.u8(2)?,
            options: r.u8(3)?,
            port_info: PortInfo::decode(b.get(4..).unwrap_or(&[]))?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        w.u16(0, self.endport_lid)?;
        w.u8(2, self.port_num)?;
        w.u8(3, self.options)?;
        self.port_info
            .encode_into(out.get_mut(4..).unwrap_or(&mut []))
    }
}

impl SaRecord for PortInfoRecord {
    type Mask = PortInfoRecordMask;
    /// EndportLID, PortNum, Options, then PortInfo's fields at their
    /// PortInfo offsets + 32.
    const COMPONENTS: &'static [C] = &[
        C::new("EndportLID", 0, 16),
        C::new("PortNum", 16, 8),
        C::new("Options", 24, 8),
        C::new("M_Key", 32, 64),
        C::new("GidPrefix", 96, 64),
        C::new("LID", 160, 16),
        C::new("MasterSMLID", 176, 16),
        C::new("CapabilityMask", 192, 32),
        C::new("DiagCode", 224, 16),
        C::new("M_KeyLeasePeriod", 240, 16),
        C::new("LocalPortNum", 256, 8),
        C::new("LinkWidthEnabled", 264, 8),
        C::new("LinkWidthSupported", 272, 8),
        C::new("LinkWidthActive", 280, 8),
        C::new("LinkSpeedSupported", 288, 4),
        C::new("PortState", 292, 4),
        C::new("PortPhysicalState", 296, 4),
        C::new("LinkDownDefaultState", 300, 4),
        C::new("M_KeyProtectBits", 304, 2),
        C::new("Reserved", 306, 3),
        C::new("LMC", 309, 3),
        C::new("LinkSpeedActive", 312, 4),
        C::new("LinkSpeedEnabled", 316, 4),
        C::new("NeighborMTU", 320, 4),
        C::new("MasterSMSL", 324, 4),
        C::new("VLCap", 328, 4),
        C::new("InitType", 332, 4),
        C::new("VLHighLimit", 336, 8),
        C::new("VLArbitrationHighCap", 344, 8),
        C::new("VLArbitrationLowCap", 352, 8),
        C::new("InitTypeReply", 360, 4),
        C::new("MTUCap", 364, 4),
        C::new("VLStallCount", 368, 3),
        C::new("HOQLife", 371, 5),
        C::new("OperationalVLs", 376, 4),
        C::new("PartitionEnforcementInbound", 380, 1),
        C::new("PartitionEnforcementOutbound", 381, 1),
        C::new("FilterRawInbound", 382, 1),
        C::new("FilterRawOutbound", 383, 1),
        C::new("M_KeyViolations", 384, 16),
        C::new("P_KeyViolations", 400, 16),
        C::new("Q_KeyViolations", 416, 16),
        C::new("GUIDCap", 432, 8),
        C::new("ClientReregister", 440, 1),
        C::new("MulticastPKeyTrapSuppressionEnabled", 441, 2),
        C::new("SubnetTimeOut", 443, 5),
        C::new("Reserved", 448, 3),
        C::new("RespTimeValue", 451, 5),
        C::new("LocalPhyErrors", 456, 4),
        C::new("OverrunErrors", 460, 4),
        C::new("MaxCreditHint", 464, 16),
        C::new("Reserved", 480, 8),
        C::new("LinkRoundTripLatency", 488, 24),
        C::new("CapabilityMask2", 512, 16),
        C::new("LinkSpeedExtActive", 528, 4),
        C::new("LinkSpeedExtSupported", 532, 4),
        C::new("Reserved", 536, 3),
        C::new("LinkSpeedExtEnabled", 539, 5),
    ];
}

bitflags::bitflags! {
    /// The ComponentMask bits of a LinkRecord query.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct LinkRecordMask: u64 {
        /// FromLID.
        const FROM_LID = 1 << 0;
        /// FromPort.
        const FROM_PORT = 1 << 1;
        /// ToPort.
        const TO_PORT = 1 << 2;
        /// ToLID.
        const TO_LID = 1 << 3;
    }
}

/// LinkRecord (IBA 15.2.5.13, 6 bytes; 8 in a table): one link of the
/// fabric, from a port of a node to a port of its neighbor.
///
/// | byte | field |
/// |---|---|
/// | 0-1 | FromLID |
/// | 2 | FromPort |
/// | 3 | ToPort |
/// | 4-5 | ToLID |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LinkRecord {
    /// FromLID: the LID of the node (a switch's port 0 LID).
    pub from_lid: u16,
    /// FromPort: the port of that node.
    pub from_port: u8,
    /// ToPort: the port of the neighbor.
    pub to_port: u8,
    /// ToLID: the neighbor's LID.
    pub to_lid: u16,
}

impl Attribute for LinkRecord {
    const ID: u16 = attr_id::LINK_RECORD;
    const NAME: &'static str = "LinkRecord";
    const SIZE: usize = 6;

    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        Ok(LinkRecord {
            from_lid: r.u16(0)?,
            from_port: r.u8(2)?,
            to_port: r.u8(3)?,
            to_lid: r.u16(4)?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        w.u16(0, self.from_lid)?;
        w.u8(2, self.from_port)?;
        w.u8(3, self.to_port)?;
        w.u16(4, self.to_lid)
    }
}

impl SaRecord for LinkRecord {
    type Mask = LinkRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("FromLID", 0, 16),
        C::new("FromPort", 16, 8),
        C::new("ToPort", 24, 8),
        C::new("ToLID", 32, 16),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::Error;

    #[test]
    fn node_record_matches_the_spec_layout() {
        let mut want = [0u8; 108];
        want[0..2].copy_from_slice(&[0x00, 0x2a]); // LID
        want[4] = 1; // NodeInfo.BaseVersion
        want[6] = 2; // NodeInfo.NodeType: switch
        want[7] = 36; // NodeInfo.NumPorts
        want[16..24].copy_from_slice(&[0, 2, 0xc9, 3, 0, 0, 0, 7]); // NodeGUID
        want[40] = 0; // LocalPortNum
        want[41..44].copy_from_slice(&[0x00, 0x02, 0xc9]); // VendorID
        want[44..52].copy_from_slice(b"switch-1");
        let mut nr = NodeRecord {
            lid: 42,
            node_info: NodeInfo {
                base_version: 1,
                node_type: 2,
                num_ports: 36,
                node_guid: 0x0002_c903_0000_0007,
                vendor_id: 0x0002c9,
                ..Default::default()
            },
            ..Default::default()
        };
        nr.node_description = NodeDescription::new("switch-1").unwrap();
        assert_eq!(nr.to_bytes().unwrap(), want);
        assert_eq!(NodeRecord::decode(&want).unwrap(), nr);
        assert_eq!(nr.node_description.text(), "switch-1");
        assert!(NodeRecord::decode(&want[..107]).is_err());
        // Encoding clears the reserved bytes of a dirty buffer.
        let mut dirty = [0xffu8; 108];
        NodeRecord::default().encode_into(&mut dirty).unwrap();
        assert!(dirty.iter().all(|&b| b == 0));
    }

    #[test]
    fn port_info_record_matches_the_spec_layout() {
        let pi = PortInfo {
            lid: 0x0011,
            port_state: crate::mad::PortState::Active,
            lmc: 2,
            ..Default::default()
        };
        let rec = PortInfoRecord {
            endport_lid: 0x0011,
            port_num: 3,
            options: 0,
            port_info: pi,
        };
        let b = rec.to_bytes().unwrap();
        assert_eq!(b.len(), 68);
        assert_eq!(&b[..4], &[0x00, 0x11, 3, 0]);
        assert_eq!(&b[4..], &pi.to_bytes().unwrap()[..]);
        assert_eq!(&b[4 + 16..4 + 18], &[0x00, 0x11]); // PortInfo.LID
        assert_eq!(PortInfoRecord::decode(&b).unwrap(), rec);
        assert!(PortInfoRecord::decode(&b[..67]).is_err());
        let bad = PortInfoRecord {
            port_info: PortInfo { lmc: 8, ..pi },
            ..rec
        };
        assert!(matches!(bad.to_bytes(), Err(Error::FieldOverflow { .. })));
        assert_eq!(PortInfoRecordMask::LINK_SPEED_EXT_ENABLED.bits(), 1 << 57);
    }

    #[test]
    fn link_record_matches_the_spec_layout() {
        let want = [0x00, 0x05, 7, 1, 0x00, 0x09];
        let lr = LinkRecord {
            from_lid: 5,
            from_port: 7,
            to_port: 1,
            to_lid: 9,
        };
        assert_eq!(lr.to_bytes().unwrap(), want);
        assert_eq!(LinkRecord::decode(&want).unwrap(), lr);
        assert!(LinkRecord::decode(&want[..5]).is_err());
        assert_eq!(
            (LinkRecordMask::FROM_LID | LinkRecordMask::TO_LID).bits(),
            0b1001
        );
    }
}
