//! Typed attributes of the general services and subnet management:
//! ClassPortInfo (every class), NodeInfo and PortInfo (SMA, also the records
//! of SA queries).

use super::port::{LinkSpeed, LinkSpeedExt, LinkWidth, PhysPortState, PortState};
use super::wire::{fit, nibbles, In, Out};
use super::Result;
use crate::Gid;

/// An attribute with a fixed layout: its ID, size, decoder and encoder.
///
/// `decode` reads the first `SIZE` bytes of its input and ignores the rest
/// (the data area of a MAD is larger than most attributes); a shorter input
/// is an error, never a panic.
pub trait Attribute: Sized {
    /// The attribute ID of the common header.
    const ID: u16;
    /// The attribute's name in the specification.
    const NAME: &'static str;
    /// Its size in bytes.
    const SIZE: usize;
    /// Decodes the attribute at the start of `b`.
    fn decode(b: &[u8]) -> Result<Self>;
    /// Encodes the attribute into the first `SIZE` bytes of `out`; fails if
    /// `out` is too short or a field does not fit its width.
    fn encode_into(&self, out: &mut [u8]) -> Result<()>;
    /// Whether the attribute belongs to management class `class` (an
    /// attribute ID means different things in different classes: 0x0012 is
    /// SwitchInfo in subnet management and PortCounters in PerfMgt).
    /// [`Mad::attribute`](super::Mad::attribute) and
    /// [`Mad::set_attribute`](super::Mad::set_attribute) refuse other
    /// classes. The default accepts every class.
    fn in_class(class: u8) -> bool {
        let _ = class;
        true
    }
    /// The encoded attribute.
    fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = vec![0; Self::SIZE];
        self.encode_into(&mut v)?;
        Ok(v)
    }
}

/// Attribute IDs of the common and SMA attributes.
pub mod id {
    /// ClassPortInfo (every class).
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Notice.
    pub const NOTICE: u16 = 0x0002;
    /// NodeDescription (SMA).
    pub const NODE_DESCRIPTION: u16 = 0x0010;
    /// NodeInfo (SMA).
    pub const NODE_INFO: u16 = 0x0011;
    /// PortInfo (SMA).
    pub const PORT_INFO: u16 = 0x0015;
    /// SwitchInfo (SMA).
    pub const SWITCH_INFO: u16 = 0x0012;
    /// GUIDInfo (SMA).
    pub const GUID_INFO: u16 = 0x0014;
    /// P_KeyTable (SMA).
    pub const P_KEY_TABLE: u16 = 0x0016;
    /// SLtoVLMappingTable (SMA).
    pub const SL_TO_VL_MAPPING_TABLE: u16 = 0x0017;
    /// VLArbitrationTable (SMA).
    pub const VL_ARBITRATION_TABLE: u16 = 0x0018;
    /// LinearForwardingTable (SMA).
    pub const LINEAR_FORWARDING_TABLE: u16 = 0x0019;
    /// RandomForwardingTable (SMA).
    pub const RANDOM_FORWARDING_TABLE: u16 = 0x001a;
    /// MulticastForwardingTable (SMA).
    pub const MULTICAST_FORWARDING_TABLE: u16 = 0x001b;
    /// SMInfo (SMA and SM).
    pub const SM_INFO: u16 = 0x0020;
    /// PortSamplesControl (PerfMgt; the same ID as NodeDescription).
    pub const PORT_SAMPLES_CONTROL: u16 = 0x0010;
    /// PortCounters (PerfMgt; the same ID as SwitchInfo).
    pub const PORT_COUNTERS: u16 = 0x0012;
    /// PortCountersExtended (PerfMgt).
    pub const PORT_COUNTERS_EXTENDED: u16 = 0x001d;
}

/// Splits a 32-bit `TC(8) | SL(4) | FL(20)` word.
fn tc_sl_fl(w: u32) -> (u8, u8, u32) {
    ((w >> 24) as u8, ((w >> 20) & 0xf) as u8, w & 0xf_ffff)
}

fn pack_tc_sl_fl(tc: u8, sl: u8, fl: u32, what: [&'static str; 2]) -> Result<u32> {
    let sl = fit(what[0], 4, sl.into())? as u32;
    let fl = fit(what[1], 20, fl.into())? as u32;
    Ok(u32::from(tc) << 24 | sl << 20 | fl)
}

/// ClassPortInfo (IBA 13.4.8.1, 72 bytes): what a class manager supports
/// and where to redirect requests and send traps.
///
/// | byte | field |
/// |---|---|
/// | 0 | BaseVersion |
/// | 1 | ClassVersion |
/// | 2-3 | CapabilityMask |
/// | 4-7 | CapabilityMask2 (27 bits), RespTimeValue (5 bits) |
/// | 8-23 | RedirectGID |
/// | 24-27 | RedirectTC (8), RedirectSL (4), RedirectFL (20) |
/// | 28-29 | RedirectLID |
/// | 30-31 | RedirectP_Key |
/// | 32-35 | reserved (8), RedirectQP (24) |
/// | 36-39 | RedirectQ_Key |
/// | 40-55 | TrapGID |
/// | 56-59 | TrapTC (8), TrapSL (4), TrapFL (20) |
/// | 60-61 | TrapLID |
/// | 62-63 | TrapP_Key |
/// | 64-67 | TrapHL (8), TrapQP (24) |
/// | 68-71 | TrapQ_Key |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct ClassPortInfo {
    pub base_version: u8,
    pub class_version: u8,
    pub capability_mask: u16,
    /// 27 bits.
    pub capability_mask2: u32,
    /// 5 bits: the response time is 4.096 us * 2^RespTimeValue.
    pub resp_time_value: u8,
    pub redirect_gid: Gid,
    pub redirect_tc: u8,
    /// 4 bits.
    pub redirect_sl: u8,
    /// 20 bits.
    pub redirect_fl: u32,
    pub redirect_lid: u16,
    pub redirect_pkey: u16,
    /// 24 bits.
    pub redirect_qp: u32,
    pub redirect_qkey: u32,
    pub trap_gid: Gid,
    pub trap_tc: u8,
    /// 4 bits.
    pub trap_sl: u8,
    /// 20 bits.
    pub trap_fl: u32,
    pub trap_lid: u16,
    pub trap_pkey: u16,
    pub trap_hl: u8,
    /// 24 bits.
    pub trap_qp: u32,
    pub trap_qkey: u32,
}

impl Attribute for ClassPortInfo {
    const ID: u16 = id::CLASS_PORT_INFO;
    const NAME: &'static str = "ClassPortInfo";
    const SIZE: usize = 72;

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let cm2 = r.u32(4)?;
        let (redirect_tc, redirect_sl, redirect_fl) = tc_sl_fl(r.u32(24)?);
        let (trap_tc, trap_sl, trap_fl) = tc_sl_fl(r.u32(56)?);
        Ok(ClassPortInfo {
            base_version: r.u8(0)?,
            class_version: r.u8(1)?,
            capability_mask: r.u16(2)?,
            capability_mask2: cm2 >> 5,
            resp_time_value: (cm2 & 0x1f) as u8,
            redirect_gid: Gid(r.bytes(8)?),
            redirect_tc,
            redirect_sl,
            redirect_fl,
            redirect_lid: r.u16(28)?,
            redirect_pkey: r.u16(30)?,
            redirect_qp: r.u24_low(32)?,
            redirect_qkey: r.u32(36)?,
            trap_gid: Gid(r.bytes(40)?),
            trap_tc,
            trap_sl,
            trap_fl,
            trap_lid: r.u16(60)?,
            trap_pkey: r.u16(62)?,
            trap_hl: r.u8(64)?,
            trap_qp: r.u24_low(64)?,
            trap_qkey: r.u32(68)?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let cm2 = fit("CapabilityMask2", 27, self.capability_mask2.into())? as u32;
        let rt = fit("RespTimeValue", 5, self.resp_time_value.into())? as u32;
        w.u8(0, self.base_version)?;
        w.u8(1, self.class_version)?;
        w.u16(2, self.capability_mask)?;
        w.u32(4, cm2 << 5 | rt)?;
        w.bytes(8, &self.redirect_gid.0)?;
        w.u32(
            24,
            pack_tc_sl_fl(
                self.redirect_tc,
                self.redirect_sl,
                self.redirect_fl,
                ["RedirectSL", "RedirectFL"],
            )?,
        )?;
        w.u16(28, self.redirect_lid)?;
        w.u16(30, self.redirect_pkey)?;
        w.u32(32, fit("RedirectQP", 24, self.redirect_qp.into())? as u32)?;
        w.u32(36, self.redirect_qkey)?;
        w.bytes(40, &self.trap_gid.0)?;
        w.u32(
            56,
            pack_tc_sl_fl(
                self.trap_tc,
                self.trap_sl,
                self.trap_fl,
                ["TrapSL", "TrapFL"],
            )?,
        )?;
        w.u16(60, self.trap_lid)?;
        w.u16(62, self.trap_pkey)?;
        let qp = fit("TrapQP", 24, self.trap_qp.into())? as u32;
        w.u32(64, u32::from(self.trap_hl) << 24 | qp)?;
        w.u32(68, self.trap_qkey)
    }
}

/// NodeInfo (IBA 14.2.5.3, 40 bytes).
///
/// | byte | field |
/// |---|---|
/// | 0 | BaseVersion |
/// | 1 | ClassVersion |
/// | 2 | NodeType (1 CA, 2 switch, 3 router) |
/// | 3 | NumPorts |
/// | 4-11 | SystemImageGUID |
/// | 12-19 | NodeGUID |
/// | 20-27 | PortGUID |
/// | 28-29 | PartitionCap |
/// | 30-31 | DeviceID |
/// | 32-35 | Revision |
/// | 36 | LocalPortNum |
/// | 37-39 | VendorID |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct NodeInfo {
    pub base_version: u8,
    pub class_version: u8,
    pub node_type: u8,
    pub num_ports: u8,
    pub system_image_guid: u64,
    pub node_guid: u64,
    pub port_guid: u64,
    pub partition_cap: u16,
    pub device_id: u16,
    pub revision: u32,
    pub local_port_num: u8,
    /// 24 bits.
    pub vendor_id: u32,
}

impl Attribute for NodeInfo {
    const ID: u16 = id::NODE_INFO;
    const NAME: &'static str = "NodeInfo";
    const SIZE: usize = 40;

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        Ok(NodeInfo {
            base_version: r.u8(0)?,
            class_version: r.u8(1)?,
            node_type: r.u8(2)?,
            num_ports: r.u8(3)?,
            system_image_guid: r.u64(4)?,
            node_guid: r.u64(12)?,
            port_guid: r.u64(20)?,
            partition_cap: r.u16(28)?,
            device_id: r.u16(30)?,
            revision: r.u32(32)?,
            local_port_num: r.u8(36)?,
            vendor_id: r.u24_low(36)?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let vendor = fit("VendorID", 24, self.vendor_id.into())? as u32;
        w.u8(0, self.base_version)?;
        w.u8(1, self.class_version)?;
        w.u8(2, self.node_type)?;
        w.u8(3, self.num_ports)?;
        w.u64(4, self.system_image_guid)?;
        w.u64(12, self.node_guid)?;
        w.u64(20, self.port_guid)?;
        w.u16(28, self.partition_cap)?;
        w.u16(30, self.device_id)?;
        w.u32(32, self.revision)?;
        w.u32(36, u32::from(self.local_port_num) << 24 | vendor)
    }
}

/// PortInfo (IBA 14.2.5.6, 64 bytes). Sub-byte fields are listed with their
/// width; a value too wide for its field fails to encode.
///
/// | byte | field |
/// |---|---|
/// | 0-7 | M_Key |
/// | 8-15 | GidPrefix |
/// | 16-17 | LID |
/// | 18-19 | MasterSMLID |
/// | 20-23 | CapabilityMask |
/// | 24-25 | DiagCode |
/// | 26-27 | M_KeyLeasePeriod |
/// | 28 | LocalPortNum |
/// | 29 | LinkWidthEnabled |
/// | 30 | LinkWidthSupported |
/// | 31 | LinkWidthActive |
/// | 32 | LinkSpeedSupported (4), PortState (4) |
/// | 33 | PortPhysicalState (4), LinkDownDefaultState (4) |
/// | 34 | M_KeyProtectBits (2), reserved (3), LMC (3) |
/// | 35 | LinkSpeedActive (4), LinkSpeedEnabled (4) |
/// | 36 | NeighborMTU (4), MasterSMSL (4) |
/// | 37 | VLCap (4), InitType (4) |
/// | 38 | VLHighLimit |
/// | 39 | VLArbitrationHighCap |
/// | 40 | VLArbitrationLowCap |
/// | 41 | InitTypeReply (4), MTUCap (4) |
/// | 42 | VLStallCount (3), HOQLife (5) |
/// | 43 | OperationalVLs (4), PartitionEnforcementInbound, PartitionEnforcementOutbound, FilterRawInbound, FilterRawOutbound (1 each) |
/// | 44-45 | M_KeyViolations |
/// | 46-47 | P_KeyViolations |
/// | 48-49 | Q_KeyViolations |
/// | 50 | GUIDCap |
/// | 51 | ClientReregister (1), MulticastPKeyTrapSuppressionEnabled (2), SubnetTimeOut (5) |
/// | 52 | reserved (3), RespTimeValue (5) |
/// | 53 | LocalPhyErrors (4), OverrunErrors (4) |
/// | 54-55 | MaxCreditHint |
/// | 56-59 | reserved (8), LinkRoundTripLatency (24) |
/// | 60-61 | CapabilityMask2 |
/// | 62 | LinkSpeedExtActive (4), LinkSpeedExtSupported (4) |
/// | 63 | reserved (3), LinkSpeedExtEnabled (5) |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct PortInfo {
    pub m_key: u64,
    pub gid_prefix: u64,
    pub lid: u16,
    pub master_sm_lid: u16,
    pub capability_mask: u32,
    pub diag_code: u16,
    pub m_key_lease_period: u16,
    pub local_port_num: u8,
    pub link_width_enabled: u8,
    pub link_width_supported: u8,
    pub link_width_active: LinkWidth,
    pub link_speed_supported: u8,
    /// 4 bits: 1 Down, 2 Initialize, 3 Armed, 4 Active.
    pub port_state: PortState,
    /// 4 bits: 5 LinkUp, 3 Disabled, 2 Polling, ...
    pub port_physical_state: PhysPortState,
    pub link_down_default_state: u8,
    /// 2 bits.
    pub m_key_protect_bits: u8,
    /// 3 bits.
    pub lmc: u8,
    /// 4 bits.
    pub link_speed_active: LinkSpeed,
    pub link_speed_enabled: u8,
    pub neighbor_mtu: u8,
    pub master_sm_sl: u8,
    pub vl_cap: u8,
    pub init_type: u8,
    pub vl_high_limit: u8,
    pub vl_arbitration_high_cap: u8,
    pub vl_arbitration_low_cap: u8,
    pub init_type_reply: u8,
    pub mtu_cap: u8,
    /// 3 bits.
    pub vl_stall_count: u8,
    /// 5 bits.
    pub hoq_life: u8,
    pub operational_vls: u8,
    pub partition_enforcement_inbound: bool,
    pub partition_enforcement_outbound: bool,
    pub filter_raw_inbound: bool,
    pub filter_raw_outbound: bool,
    pub m_key_violations: u16,
    pub p_key_violations: u16,
    pub q_key_violations: u16,
    pub guid_cap: u8,
    pub client_reregister: bool,
    /// 2 bits (bits 6-5 of byte 51). The specification gives the field two
    /// bits: it took over the two reserved bits that IBA 1.2 had between
    /// ClientReregister and SubnetTimeOut (the kernel's `ib_port_info` still
    /// names the byte `clientrereg_resv_subnetto`, 1b + 2b + 5b), and both
    /// OpenSM (mask 0x60) and libibmad (bits 409-410) read two bits. An
    /// earlier version of this crate read one bit and left bit 5 reserved,
    /// which dropped a value a port may report.
    pub multicast_pkey_trap_suppression_enabled: u8,
    /// 5 bits.
    pub subnet_timeout: u8,
    /// 5 bits.
    pub resp_time_value: u8,
    pub local_phy_errors: u8,
    pub overrun_errors: u8,
    pub max_credit_hint: u16,
    /// 24 bits.
    pub link_round_trip_latency: u32,
    pub capability_mask2: u16,
    /// 4 bits.
    pub link_speed_ext_active: LinkSpeedExt,
    pub link_speed_ext_supported: u8,
    /// 5 bits.
    pub link_speed_ext_enabled: u8,
}

pub(super) fn bit(b: u8, n: u8) -> bool {
    b >> n & 1 != 0
}

impl PortInfo {
    /// The attribute modifier of a Get or Set of a switch's port `port` (a
    /// channel adapter or router answers for the port the SMP came in on,
    /// whatever the modifier).
    pub fn attr_mod(port: u8) -> u32 {
        port.into()
    }
}

impl Attribute for PortInfo {
    const ID: u16 = id::PORT_INFO;
    const NAME: &'static str = "PortInfo";
    const SIZE: usize = 64;

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let hi = |o| -> Result<u8> { Ok(r.u8(o)? >> 4) };
        let lo = |o| -> Result<u8> { Ok(r.u8(o)? & 0xf) };
        let (b34, b42, b43, b51) = (r.u8(34)?, r.u8(42)?, r.u8(43)?, r.u8(51)?);
        Ok(PortInfo {
            m_key: r.u64(0)?,
            gid_prefix: r.u64(8)?,
            lid: r.u16(16)?,
            master_sm_lid: r.u16(18)?,
            capability_mask: r.u32(20)?,
            diag_code: r.u16(24)?,
            m_key_lease_period: r.u16(26)?,
            local_port_num: r.u8(28)?,
            link_width_enabled: r.u8(29)?,
            link_width_supported: r.u8(30)?,
            link_width_active: r.u8(31)?.into(),
            link_speed_supported: hi(32)?,
            port_state: lo(32)?.into(),
            port_physical_state: hi(33)?.into(),
            link_down_default_state: lo(33)?,
            m_key_protect_bits: b34 >> 6,
            lmc: b34 & 7,
            link_speed_active: hi(35)?.into(),
            link_speed_enabled: lo(35)?,
            neighbor_mtu: hi(36)?,
            master_sm_sl: lo(36)?,
            vl_cap: hi(37)?,
            init_type: lo(37)?,
            vl_high_limit: r.u8(38)?,
            vl_arbitration_high_cap: r.u8(39)?,
            vl_arbitration_low_cap: r.u8(40)?,
            init_type_reply: hi(41)?,
            mtu_cap: lo(41)?,
            vl_stall_count: b42 >> 5,
            hoq_life: b42 & 0x1f,
            operational_vls: b43 >> 4,
            partition_enforcement_inbound: bit(b43, 3),
            partition_enforcement_outbound: bit(b43, 2),
            filter_raw_inbound: bit(b43, 1),
            filter_raw_outbound: bit(b43, 0),
            m_key_violations: r.u16(44)?,
            p_key_violations: r.u16(46)?,
            q_key_violations: r.u16(48)?,
            guid_cap: r.u8(50)?,
            client_reregister: bit(b51, 7),
            multicast_pkey_trap_suppression_enabled: (b51 >> 5) & 3,
            subnet_timeout: b51 & 0x1f,
            resp_time_value: r.u8(52)? & 0x1f,
            local_phy_errors: hi(53)?,
            overrun_errors: lo(53)?,
            max_credit_hint: r.u16(54)?,
            link_round_trip_latency: r.u24_low(56)?,
            capability_mask2: r.u16(60)?,
            link_speed_ext_active: hi(62)?.into(),
            link_speed_ext_supported: lo(62)?,
            link_speed_ext_enabled: r.u8(63)? & 0x1f,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let f = |name, bits, v: u8| -> Result<u8> { Ok(fit(name, bits, v.into())? as u8) };
        w.u64(0, self.m_key)?;
        w.u64(8, self.gid_prefix)?;
        w.u16(16, self.lid)?;
        w.u16(18, self.master_sm_lid)?;
        w.u32(20, self.capability_mask)?;
        w.u16(24, self.diag_code)?;
        w.u16(26, self.m_key_lease_period)?;
        w.u8(28, self.local_port_num)?;
        w.u8(29, self.link_width_enabled)?;
        w.u8(30, self.link_width_supported)?;
        w.u8(31, self.link_width_active.into())?;
        w.u8(
            32,
            nibbles(
                "LinkSpeedSupported",
                self.link_speed_supported,
                "PortState",
                self.port_state.into(),
            )?,
        )?;
        w.u8(
            33,
            nibbles(
                "PortPhysicalState",
                self.port_physical_state.into(),
                "LinkDownDefaultState",
                self.link_down_default_state,
            )?,
        )?;
        w.u8(
            34,
            f("M_KeyProtectBits", 2, self.m_key_protect_bits)? << 6 | f("LMC", 3, self.lmc)?,
        )?;
        w.u8(
            35,
            nibbles(
                "LinkSpeedActive",
                self.link_speed_active.into(),
                "LinkSpeedEnabled",
                self.link_speed_enabled,
            )?,
        )?;
        w.u8(
            36,
            nibbles(
                "NeighborMTU",
                self.neighbor_mtu,
                "MasterSMSL",
                self.master_sm_sl,
            )?,
        )?;
        w.u8(
            37,
            nibbles("VLCap", self.vl_cap, "InitType", self.init_type)?,
        )?;
        w.u8(38, self.vl_high_limit)?;
        w.u8(39, self.vl_arbitration_high_cap)?;
        w.u8(40, self.vl_arbitration_low_cap)?;
        w.u8(
            41,
            nibbles(
                "InitTypeReply",
                self.init_type_reply,
                "MTUCap",
                self.mtu_cap,
            )?,
        )?;
        w.u8(
            42,
            f("VLStallCount", 3, self.vl_stall_count)? << 5 | f("HOQLife", 5, self.hoq_life)?,
        )?;
        w.u8(
            43,
            f("OperationalVLs", 4, self.operational_vls)? << 4
                | u8::from(self.partition_enforcement_inbound) << 3
                | u8::from(self.partition_enforcement_outbound) << 2
                | u8::from(self.filter_raw_inbound) << 1
                | u8::from(self.filter_raw_outbound),
        )?;
        w.u16(44, self.m_key_violations)?;
        w.u16(46, self.p_key_violations)?;
        w.u16(48, self.q_key_violations)?;
        w.u8(50, self.guid_cap)?;
        w.u8(
            51,
            u8::from(self.client_reregister) << 7
                | f(
                    "MulticastPKeyTrapSuppressionEnabled",
                    2,
                    self.multicast_pkey_trap_suppression_enabled,
                )? << 5
                | f("SubnetTimeOut", 5, self.subnet_timeout)?,
        )?;
        w.u8(52, f("RespTimeValue", 5, self.resp_time_value)?)?;
        w.u8(
            53,
            nibbles(
                "LocalPhyErrors",
                self.local_phy_errors,
                "OverrunErrors",
                self.overrun_errors,
            )?,
        )?;
        w.u16(54, self.max_credit_hint)?;
        w.u32(
            56,
            fit(
                "LinkRoundTripLatency",
                24,
                self.link_round_trip_latency.into(),
            )? as u32,
        )?;
        w.u16(60, self.capability_mask2)?;
        w.u8(
            62,
            nibbles(
                "LinkSpeedExtActive",
                self.link_speed_ext_active.into(),
                "LinkSpeedExtSupported",
                self.link_speed_ext_supported,
            )?,
        )?;
        w.u8(
            63,
            f("LinkSpeedExtEnabled", 5, self.link_speed_ext_enabled)?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::Error;

    #[test]
    fn class_port_info_matches_the_spec_layout() {
        let mut want = [0u8; 72];
        want[0] = 1; // BaseVersion
        want[1] = 2; // ClassVersion
        want[2..4].copy_from_slice(&[0x12, 0x34]); // CapabilityMask
                                                   // CapabilityMask2 = 0x0000_0203 (27 bits), RespTimeValue = 0x12
        want[4..8].copy_from_slice(&(0x0203u32 << 5 | 0x12).to_be_bytes());
        want[8..24].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        want[24..28].copy_from_slice(&[0xab, 0x5f, 0xff, 0xfe]); // TC ab, SL 5, FL 0xffffe
        want[28..30].copy_from_slice(&[0x00, 0x07]); // RedirectLID
        want[30..32].copy_from_slice(&[0xff, 0xff]); // RedirectP_Key
        want[32..36].copy_from_slice(&[0x00, 0x12, 0x34, 0x56]); // RedirectQP
        want[36..40].copy_from_slice(&[0x80, 0x01, 0x00, 0x00]); // RedirectQ_Key
        want[40..56].copy_from_slice(&[0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        want[56..60].copy_from_slice(&[0x01, 0x20, 0x00, 0x03]); // TC 1, SL 2, FL 3
        want[60..62].copy_from_slice(&[0x00, 0x09]);
        want[62..64].copy_from_slice(&[0x7f, 0xff]);
        want[64..68].copy_from_slice(&[0x40, 0x00, 0x00, 0x01]); // HL 64, QP 1
        want[68..72].copy_from_slice(&[0x80, 0x01, 0x00, 0x00]);
        let cpi = ClassPortInfo {
            base_version: 1,
            class_version: 2,
            capability_mask: 0x1234,
            capability_mask2: 0x0203,
            resp_time_value: 0x12,
            redirect_gid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
            redirect_tc: 0xab,
            redirect_sl: 5,
            redirect_fl: 0xffffe,
            redirect_lid: 7,
            redirect_pkey: 0xffff,
            redirect_qp: 0x123456,
            redirect_qkey: 0x8001_0000,
            trap_gid: Gid([0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            trap_tc: 1,
            trap_sl: 2,
            trap_fl: 3,
            trap_lid: 9,
            trap_pkey: 0x7fff,
            trap_hl: 64,
            trap_qp: 1,
            trap_qkey: 0x8001_0000,
        };
        assert_eq!(cpi.to_bytes().unwrap(), want);
        assert_eq!(ClassPortInfo::decode(&want).unwrap(), cpi);
    }

    #[test]
    fn class_port_info_fields_that_overflow_do_not_encode() {
        let too_wide = [
            ClassPortInfo {
                capability_mask2: 1 << 27,
                ..Default::default()
            },
            ClassPortInfo {
                resp_time_value: 32,
                ..Default::default()
            },
            ClassPortInfo {
                redirect_sl: 16,
                ..Default::default()
            },
            ClassPortInfo {
                trap_fl: 1 << 20,
                ..Default::default()
            },
            ClassPortInfo {
                trap_qp: 1 << 24,
                ..Default::default()
            },
        ];
        for c in too_wide {
            assert!(
                matches!(c.to_bytes(), Err(Error::FieldOverflow { .. })),
                "{c:?}"
            );
        }
    }

    #[test]
    fn node_info_matches_the_spec_layout() {
        let want: [u8; 40] = [
            1, 1, 1, 1, // BaseVersion, ClassVersion, NodeType CA, NumPorts
            0x00, 0x02, 0xc9, 0x03, 0x00, 0x10, 0x20, 0x30, // SystemImageGUID
            0x00, 0x02, 0xc9, 0x03, 0x00, 0x10, 0x20, 0x31, // NodeGUID
            0x00, 0x02, 0xc9, 0x03, 0x00, 0x10, 0x20, 0x32, // PortGUID
            0x00, 0x80, // PartitionCap
            0x10, 0x17, // DeviceID
            0x00, 0x00, 0x00, 0xa0, // Revision
            0x01, // LocalPortNum
            0x00, 0x02, 0xc9, // VendorID
        ];
        let ni = NodeInfo {
            base_version: 1,
            class_version: 1,
            node_type: 1,
            num_ports: 1,
            system_image_guid: 0x0002_c903_0010_2030,
            node_guid: 0x0002_c903_0010_2031,
            port_guid: 0x0002_c903_0010_2032,
            partition_cap: 128,
            device_id: 0x1017,
            revision: 0xa0,
            local_port_num: 1,
            vendor_id: 0x0002c9,
        };
        assert_eq!(ni.to_bytes().unwrap(), want);
        assert_eq!(NodeInfo::decode(&want).unwrap(), ni);
        assert!(NodeInfo::decode(&want[..39]).is_err());
    }

    fn sample_port_info() -> PortInfo {
        PortInfo {
            m_key: 0x0102_0304_0506_0708,
            gid_prefix: 0xfe80_0000_0000_0000,
            lid: 0x0011,
            master_sm_lid: 0x0001,
            capability_mask: 0x0251_0a6a,
            diag_code: 0,
            m_key_lease_period: 15,
            local_port_num: 1,
            link_width_enabled: 3,
            link_width_supported: 3,
            link_width_active: LinkWidth::X4,
            link_speed_supported: 7,
            port_state: PortState::Active,
            port_physical_state: PhysPortState::LinkUp,
            link_down_default_state: 2,
            m_key_protect_bits: 1,
            lmc: 3,
            link_speed_active: LinkSpeed::Qdr,
            link_speed_enabled: 7,
            neighbor_mtu: 5,
            master_sm_sl: 0,
            vl_cap: 4,
            init_type: 0,
            vl_high_limit: 0,
            vl_arbitration_high_cap: 8,
            vl_arbitration_low_cap: 8,
            init_type_reply: 0,
            mtu_cap: 5,
            vl_stall_count: 7,
            hoq_life: 31,
            operational_vls: 4,
            partition_enforcement_inbound: true,
            partition_enforcement_outbound: false,
            filter_raw_inbound: true,
            filter_raw_outbound: false,
            m_key_violations: 1,
            p_key_violations: 2,
            q_key_violations: 3,
            guid_cap: 128,
            client_reregister: true,
            multicast_pkey_trap_suppression_enabled: 0,
            subnet_timeout: 18,
            resp_time_value: 16,
            local_phy_errors: 8,
            overrun_errors: 8,
            max_credit_hint: 0,
            link_round_trip_latency: 0x12_3456,
            capability_mask2: 0x0020,
            link_speed_ext_active: LinkSpeedExt::Fdr,
            link_speed_ext_supported: 3,
            link_speed_ext_enabled: 0x1e,
        }
    }

    #[test]
    fn port_info_matches_the_spec_layout() {
        let want: [u8; 64] = [
            1, 2, 3, 4, 5, 6, 7, 8, // M_Key
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, // GidPrefix
            0x00, 0x11, 0x00, 0x01, // LID, MasterSMLID
            0x02, 0x51, 0x0a, 0x6a, // CapabilityMask
            0x00, 0x00, 0x00, 0x0f, // DiagCode, M_KeyLeasePeriod
            1, 3, 3, 2,    // LocalPortNum, LinkWidth{Enabled,Supported,Active}
            0x74, // LinkSpeedSupported 7, PortState 4 (Active)
            0x52, // PortPhysicalState 5 (LinkUp), LinkDownDefaultState 2
            0x43, // M_KeyProtectBits 1, LMC 3
            0x47, // LinkSpeedActive 4, LinkSpeedEnabled 7
            0x50, // NeighborMTU 5, MasterSMSL 0
            0x40, // VLCap 4, InitType 0
            0, 8, 8,    // VLHighLimit, VLArbitrationHighCap, VLArbitrationLowCap
            0x05, // InitTypeReply 0, MTUCap 5
            0xff, // VLStallCount 7, HOQLife 31
            0x4a, // OperationalVLs 4, PEI 1, PEO 0, FRI 1, FRO 0
            0, 1, 0, 2, 0, 3,    // M_Key, P_Key, Q_Key violations
            128,  // GUIDCap
            0x92, // ClientReregister 1, MulticastPKeyTrapSuppression 0, SubnetTimeOut 18
            0x10, // RespTimeValue 16
            0x88, // LocalPhyErrors 8, OverrunErrors 8
            0x00, 0x00, // MaxCreditHint
            0x00, 0x12, 0x34, 0x56, // LinkRoundTripLatency
            0x00, 0x20, // CapabilityMask2
            0x13, // LinkSpeedExtActive 1, LinkSpeedExtSupported 3
            0x1e, // LinkSpeedExtEnabled
        ];
        let pi = sample_port_info();
        assert_eq!(pi.to_bytes().unwrap(), want);
        assert_eq!(PortInfo::decode(&want).unwrap(), pi);
    }

    #[test]
    fn port_info_fields_that_overflow_do_not_encode() {
        let base = sample_port_info();
        let too_wide = [
            PortInfo {
                port_state: PortState::Other(16),
                ..base
            },
            PortInfo { lmc: 8, ..base },
            PortInfo {
                m_key_protect_bits: 4,
                ..base
            },
            PortInfo {
                hoq_life: 32,
                ..base
            },
            PortInfo {
                vl_stall_count: 8,
                ..base
            },
            PortInfo {
                link_round_trip_latency: 1 << 24,
                ..base
            },
            PortInfo {
                link_speed_ext_enabled: 32,
                ..base
            },
        ];
        for p in too_wide {
            assert!(matches!(p.to_bytes(), Err(Error::FieldOverflow { .. })));
        }
        assert!(base.encode_into(&mut [0u8; 63]).is_err());
    }
}
