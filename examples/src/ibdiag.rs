//! What the InfiniBand diagnostic examples (`perfquery`, `smpquery`,
//! `sminfo`, `saquery`, `ibnetdiscover`, `ibping`) share: the local port
//! and its agents, SMP, PerfMgt and SA requests by LID or directed route,
//! and the text formats of infiniband-diags and libibmad (`Name:....value`
//! lines, link widths and speeds, port states), so that their output
//! compares equal with the C tools' line by line.

use std::cell::OnceCell;
use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use rdma::mad::{class, Attribute, DrHeader, Mad, MadHeader, Method, NodeInfo, PortInfo};
use rdma::umad::{self, Address, Agent, CaPort, Port, Received, Registration};

/// What went wrong, in words.
pub type Error = String;
/// The result type of the diagnostic tools.
pub type Result<T> = std::result::Result<T, Error>;

/// The options every infiniband-diags tool takes (those of
/// `ibdiag_common`): which local port, and how long to wait.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// The CA to use (default: the first with a umad device).
    #[arg(short = 'C', long = "Ca", value_name = "CA")]
    pub ca: Option<String>,
    /// The CA's port (default: its first port).
    #[arg(short = 'P', long = "Port", value_name = "PORT")]
    pub port: Option<u32>,
    /// Timeout of one try in milliseconds.
    #[arg(
        short = 't',
        long = "timeout",
        value_name = "MS",
        default_value_t = 1000
    )]
    pub timeout_ms: u64,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// LID routed.
    Lid(u16),
    /// Directed route, as `-D` takes it (`[0, 1, 3]`).
    Dr(Vec<u8>),
}

impl Dest {
    /// Parses a LID (decimal or `0x` hex) or, with `directed`, a
    /// directed route (`0,1,3`).
    pub fn parse(s: &str, directed: bool) -> Result<Dest> {
        if directed {
            return rdma::mad::parse_dr_path(s)
                .map(Dest::Dr)
                .map_err(|e| format!("can't resolve destination port {s}: {e}"));
        }
        parse_int(s)
            .and_then(|v| u16::try_from(v).ok())
            .filter(|&l| l > 0)
            .map(Dest::Lid)
            .ok_or_else(|| format!("can't resolve destination port {s}"))
    }

    /// The destination as libibmad's `portid2str` writes it: `Lid 3`, or
    /// `DR path slid 65535; dlid 65535; 0,1`.
    pub fn describe(&self) -> String {
        match self {
            Dest::Lid(l) => format!("Lid {l}"),
            Dest::Dr(p) => {
                let hops: Vec<String> = p.iter().map(u8::to_string).collect();
                format!("DR path slid 65535; dlid 65535; {}", hops.join(","))
            }
        }
    }

    /// The LID, for the classes that go LID routed only.
    pub fn lid(&self) -> Option<u16> {
        match self {
            Dest::Lid(l) => Some(*l),
            Dest::Dr(_) => None,
        }
    }
}

/// Parses an integer as C's `strtoul(s, NULL, 0)` does for the inputs the
/// tools take: decimal, `0x` hex, or octal with a leading 0.
pub fn parse_int(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// The local port and its agents (registered as first used).
pub struct Diag {
    port: Port,
    info: CaPort,
    timeout: Duration,
    retries: u32,
    smi: OnceCell<Agent>,
    dr: OnceCell<Agent>,
    perf: OnceCell<Agent>,
    sa: OnceCell<Agent>,
}

/// The tries of a request (libibmad's default: 3 retries).
pub const RETRIES: u32 = 3;

impl Diag {
    /// Opens the port the options name: `-C`/`-P`, or the first CA with a
    /// umad device and its first port.
    pub fn open(c: &Common) -> Result<Diag> {
        let ca = match &c.ca {
            Some(n) => n.clone(),
            None => umad::ca_names()
                .map_err(|e| e.to_string())?
                .into_iter()
                .next()
                .ok_or("no CA has a umad device")?,
        };
        let cainfo = umad::Ca::get(&ca).map_err(|e| format!("{ca}: {e}"))?;
        let info = match c.port {
            Some(p) => cainfo
                .port(p)
                .cloned()
                .ok_or_else(|| format!("Failed to open '{ca}' port '{p}'"))?,
            None => cainfo
                .ports
                .first()
                .cloned()
                .ok_or_else(|| format!("{ca} has no port"))?,
        };
        let port = Port::open(&ca, info.port_num)
            .map_err(|e| format!("Failed to open '{ca}' port '{}': {e}", info.port_num))?;
        Ok(Diag {
            port,
            info,
            timeout: Duration::from_millis(c.timeout_ms.max(1)),
            retries: RETRIES,
            smi: OnceCell::new(),
            dr: OnceCell::new(),
            perf: OnceCell::new(),
            sa: OnceCell::new(),
        })
    }

    /// The local port's attributes as umad reports them (LID, SM LID,
    /// port number).
    pub fn local(&self) -> &CaPort {
        &self.info
    }

    /// The port.
    pub fn port(&self) -> &Port {
        &self.port
    }

    /// Sets the timeout of one try.
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Sets how many times a request is resent.
    pub fn set_retries(&mut self, r: u32) {
        self.retries = r;
    }

    fn agent<'a>(&'a self, cell: &'a OnceCell<Agent>, class: u8, version: u8) -> Result<&'a Agent> {
        if let Some(a) = cell.get() {
            return Ok(a);
        }
        let a = self
            .port
            .register(&Registration::new(class, version))
            .map_err(|e| e.to_string())?;
        Ok(cell.get_or_init(|| a))
    }

    /// The agent of the LID-routed SMI class.
    pub fn smi_agent(&self) -> Result<&Agent> {
        self.agent(&self.smi, class::SUBN_LID_ROUTED, 1)
    }
    /// The agent of the directed-route SMI class.
    pub fn dr_agent(&self) -> Result<&Agent> {
        self.agent(&self.dr, class::SUBN_DIRECTED_ROUTE, 1)
    }
    /// The agent of PerfMgt.
    pub fn perf_agent(&self) -> Result<&Agent> {
        self.agent(&self.perf, class::PERF_MGT, 1)
    }
    /// The agent of SubnAdm (version 2).
    pub fn sa_agent(&self) -> Result<&Agent> {
        self.agent(&self.sa, class::SUBN_ADM, 2)
    }

    /// A request and its response; a response with a status other than 0
    /// (the D bit of a directed-route SMP aside) is an error.
    pub fn rpc(&self, agent: &Agent, mad: &Mad, addr: &Address) -> Result<Received> {
        let r = agent
            .request(mad, addr, self.timeout, self.retries)
            .map_err(|e| e.to_string())?;
        let st = r.mad.status_without_direction();
        if !st.is_ok() {
            return Err(format!("MAD status {:#06x}", st.0));
        }
        Ok(r)
    }

    /// An SMP request (Get or Set) of `attr` with modifier `modifier` to
    /// `dest`, the attribute's bytes in `data` for a Set.
    pub fn smp(
        &self,
        method: Method,
        attr: u16,
        modifier: u32,
        dest: &Dest,
        data: Option<&[u8]>,
    ) -> Result<Mad> {
        let (agent, mut mad, addr) = match dest {
            Dest::Lid(lid) => {
                let a = self.smi_agent()?;
                let m = Mad::smp(method, attr, modifier, a.next_tid(), 0);
                (a, m, smi_address(*lid))
            }
            Dest::Dr(path) => {
                let a = self.dr_agent()?;
                let m = Mad::smp_directed(method, attr, modifier, a.next_tid(), 0, path)
                    .map_err(|e| e.to_string())?;
                (a, m, smi_address(rdma::mad::PERMISSIVE_LID))
            }
        };
        if let Some(d) = data {
            let out = mad.data_mut();
            let n = d.len().min(out.len());
            out[..n].copy_from_slice(&d[..n]);
        }
        Ok(self.rpc(agent, &mad, &addr)?.mad)
    }

    /// An SMP Get of a typed attribute.
    pub fn smp_get<A: Attribute>(&self, modifier: u32, dest: &Dest) -> Result<A> {
        let m = self.smp(Method::GET, A::ID, modifier, dest, None)?;
        A::decode(m.data()).map_err(|e| e.to_string())
    }

    /// NodeInfo of `dest`.
    pub fn node_info(&self, dest: &Dest) -> Result<NodeInfo> {
        self.smp_get::<NodeInfo>(0, dest)
    }

    /// PortInfo of `dest`'s port `port`.
    pub fn port_info(&self, dest: &Dest, port: u8) -> Result<PortInfo> {
        self.smp_get::<PortInfo>(u32::from(port), dest)
    }

    /// A PerfMgt request to the GSI of `lid`: the data (from byte 64)
    /// given, the response's MAD back.
    pub fn perf(&self, method: Method, attr: u16, lid: u16, data: &[u8]) -> Result<Mad> {
        let a = self.perf_agent()?;
        let mut m = Mad::new(&MadHeader::request(
            class::PERF_MGT,
            1,
            method,
            a.next_tid(),
            attr,
        ));
        let out = m.data_mut();
        let n = data.len().min(out.len());
        out[..n].copy_from_slice(&data[..n]);
        Ok(self.rpc(a, &m, &Address::gsi_lid(lid))?.mad)
    }

    /// The address of the SA: the SM's LID as the local port knows it.
    pub fn sa_address(&self) -> Address {
        Address::gsi_lid(self.info.sm_lid as u16)
    }
}

/// The address of a node's SMI (QP0) by LID.
pub fn smi_address(lid: u16) -> Address {
    Address {
        qpn: 0,
        qkey: 0,
        ..Address::gsi_lid(lid)
    }
}

/// A directed-route header along `path`, for callers that build SMPs
/// themselves.
pub fn dr_along(path: &[u8]) -> Result<DrHeader> {
    DrHeader::along(path).map_err(|e| e.to_string())
}

// ---- libibmad's field formats ----

/// One `Name:.....value` line of libibmad's dumps: the name and a colon,
/// dots up to column 33, the value.
pub fn field(out: &mut String, name: &str, value: impl std::fmt::Display) {
    field_w(out, name, 33, value);
}

/// A `Name:....value` line with the dots up to column `width`.
pub fn field_w(out: &mut String, name: &str, width: usize, value: impl std::fmt::Display) {
    let head = format!("{name}:");
    let dots = width.saturating_sub(head.len());
    let _ = writeln!(out, "{head}{}{value}", ".".repeat(dots));
}

/// A value as `0x` and `bytes` * 2 hex digits (libibmad's `mad_dump_hex`).
pub fn hex(v: u64, bytes: usize) -> String {
    format!("0x{:0w$x}", v, w = bytes * 2)
}

/// `mad_dump_node_type`.
pub fn node_type(t: u8) -> String {
    match t {
        1 => "Channel Adapter".into(),
        2 => "Switch".into(),
        3 => "Router".into(),
        n => format!("?({n})?"),
    }
}

/// `mad_dump_linkwidth` (one width).
pub fn link_width(w: u8) -> String {
    match w {
        1 => "1X".into(),
        2 => "4X".into(),
        4 => "8X".into(),
        8 => "12X".into(),
        16 => "2X".into(),
        n => format!("undefined ({n})"),
    }
}

fn or_list(names: &[(u32, &str)], v: u32, undefined: bool) -> String {
    let mut s = String::new();
    for (bit, n) in names {
        if v & bit != 0 {
            s.push_str(n);
            s.push_str(" or ");
        }
    }
    if undefined {
        let _ = write!(s, "undefined ({v})");
    } else {
        s.truncate(s.len().saturating_sub(4));
    }
    s
}

const WIDTHS: [(u32, &str); 5] = [(1, "1X"), (2, "4X"), (4, "8X"), (8, "12X"), (16, "2X")];

/// `mad_dump_linkwidthen`: the widths of a mask.
pub fn link_width_enabled(w: u8) -> String {
    let w = u32::from(w);
    or_list(&WIDTHS, w, w == 0 || w >> 5 != 0)
}

/// `mad_dump_linkwidthsup`: the widths, and a note when the mask is not
/// one the base specification lists.
pub fn link_width_supported(w: u8) -> String {
    let mut s = link_width_enabled(w);
    if !matches!(w, 1 | 3 | 7 | 11 | 15 | 17 | 19 | 23 | 27 | 31) && w >> 5 == 0 {
        s.push_str(" (IBA extension)");
    }
    s
}

/// `mad_dump_linkspeed` (one speed).
pub fn link_speed(v: u8) -> String {
    match v {
        0 => "Extended speed".into(),
        1 => "2.5 Gbps".into(),
        2 => "5.0 Gbps".into(),
        4 => "10.0 Gbps".into(),
        n => format!("undefined ({n})"),
    }
}

/// `mad_dump_linkspeedsup` and `mad_dump_linkspeeden`: the speeds of a
/// mask.
pub fn link_speeds(v: u8) -> String {
    let v32 = u32::from(v);
    let names = [(1, "2.5 Gbps"), (2, "5.0 Gbps"), (4, "10.0 Gbps")];
    let mut s = or_list(&names, v32, v == 0 || v >> 3 != 0);
    if !matches!(v, 1 | 3 | 5 | 7) && v >> 3 == 0 {
        s.push_str(" (IBA extension)");
    }
    s
}

/// `mad_dump_linkspeedext` (one extended speed).
pub fn link_speed_ext(v: u8) -> String {
    match v {
        0 => "No Extended Speed".into(),
        1 => "14.0625 Gbps".into(),
        2 => "25.78125 Gbps".into(),
        4 => "53.125 Gbps".into(),
        8 => "106.25 Gbps".into(),
        n => format!("undefined ({n})"),
    }
}

/// `mad_dump_linkspeedextsup`: the extended speeds of a mask.
pub fn link_speeds_ext(v: u8) -> String {
    if v == 0 {
        return "0".into();
    }
    let names = [
        (1, "14.0625 Gbps"),
        (2, "25.78125 Gbps"),
        (4, "53.125 Gbps"),
        (8, "106.25 Gbps"),
    ];
    or_list(&names, u32::from(v), v >> 4 != 0)
}

/// `mad_dump_linkspeedexten`.
pub fn link_speeds_ext_enabled(v: u8) -> String {
    if v == 30 {
        "Extended link speeds disabled".into()
    } else {
        link_speeds_ext(v)
    }
}

/// `mad_dump_portstate`.
pub fn port_state(v: u8) -> String {
    match v {
        0 => "NoChange".into(),
        1 => "Down".into(),
        2 => "Initialize".into(),
        3 => "Armed".into(),
        4 => "Active".into(),
        n => format!("?({n})"),
    }
}

/// `mad_dump_physportstate`.
pub fn phys_state(v: u8) -> String {
    let names = [
        "NoChange",
        "Sleep",
        "Polling",
        "Disabled",
        "PortConfigurationTraining",
        "LinkUp",
        "LinkErrorRecovery",
        "PhyTest",
    ];
    names
        .get(usize::from(v))
        .map_or_else(|| format!("?({v})"), |s| (*s).to_string())
}

/// `mad_dump_linkdowndefstate`.
pub fn link_down_def_state(v: u8) -> String {
    match v {
        0 => "NoChange".into(),
        1 => "Sleep".into(),
        2 => "Polling".into(),
        n => format!("?({n})"),
    }
}

/// `mad_dump_mtu`.
pub fn mtu(v: u8) -> String {
    match v {
        1..=5 => (128u32 << v).to_string(),
        n => format!("?({n})"),
    }
}

/// `mad_dump_vlcap` (`opervls`: `mad_dump_opervls`, where 0 is "No
/// change").
pub fn vls(v: u8, opervls: bool) -> String {
    match v {
        0 if opervls => "No change".into(),
        1 => "VL0".into(),
        2 => "VL0-1".into(),
        3 => "VL0-3".into(),
        4 => "VL0-7".into(),
        5 => "VL0-14".into(),
        n => format!("?({n})"),
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

fn cap_lines(mask: u32, names: &[(u32, &str)]) -> String {
    let mut s = format!("{mask:#x}");
    if mask == 0 {
        s = "0x0".into();
    }
    for (bit, n) in names {
        if mask & (1 << bit) != 0 {
            let _ = write!(s, "\n\t\t\t\t{n}");
        }
    }
    s
}

/// `mad_dump_portcapmask`: the mask, then one line of four tabs per
/// capability.
pub fn port_cap_mask(mask: u32) -> String {
    cap_lines(mask, &CAP_MASK)
}

/// `mad_dump_portcapmask2`.
pub fn port_cap_mask2(mask: u16) -> String {
    cap_lines(u32::from(mask), &CAP_MASK2)
}

/// NodeInfo as `mad_dump_nodeinfo` writes it.
pub fn dump_node_info(n: &NodeInfo) -> String {
    let mut s = String::new();
    field(&mut s, "BaseVers", n.base_version);
    field(&mut s, "ClassVers", n.class_version);
    field(&mut s, "NodeType", node_type(n.node_type));
    field(&mut s, "NumPorts", n.num_ports);
    field(&mut s, "SystemGuid", hex(n.system_image_guid, 8));
    field(&mut s, "Guid", hex(n.node_guid, 8));
    field(&mut s, "PortGuid", hex(n.port_guid, 8));
    field(&mut s, "PartCap", n.partition_cap);
    field(&mut s, "DevId", hex(n.device_id.into(), 2));
    field(&mut s, "Revision", hex(n.revision.into(), 4));
    field(&mut s, "LocalPort", n.local_port_num);
    field(&mut s, "VendorId", hex(n.vendor_id.into(), 3));
    s
}

/// PortInfo as infiniband-diags' `dump_portinfo` writes it, each line
/// after `tabs` tabs (the M_Key not displayed).
pub fn dump_port_info(p: &PortInfo, tabs: usize) -> String {
    let mut lines = String::new();
    let f = &mut lines;
    field(f, "Mkey", "<not displayed>");
    field(f, "GidPrefix", hex(p.gid_prefix, 8));
    field(f, "Lid", p.lid);
    field(f, "SMLid", p.master_sm_lid);
    field(f, "CapMask", port_cap_mask(p.capability_mask));
    field(f, "DiagCode", hex(p.diag_code.into(), 2));
    field(f, "MkeyLeasePeriod", p.m_key_lease_period);
    field(f, "LocalPort", p.local_port_num);
    field(
        f,
        "LinkWidthEnabled",
        link_width_enabled(p.link_width_enabled),
    );
    field(
        f,
        "LinkWidthSupported",
        link_width_supported(p.link_width_supported),
    );
    field(f, "LinkWidthActive", p.link_width_active);
    field(f, "LinkSpeedSupported", link_speeds(p.link_speed_supported));
    field(f, "LinkState", p.port_state);
    field(f, "PhysLinkState", p.port_physical_state);
    field(
        f,
        "LinkDownDefState",
        link_down_def_state(p.link_down_default_state),
    );
    field(f, "ProtectBits", p.m_key_protect_bits);
    field(f, "LMC", p.lmc);
    field(f, "LinkSpeedActive", p.link_speed_active);
    field(f, "LinkSpeedEnabled", link_speeds(p.link_speed_enabled));
    field(f, "NeighborMTU", mtu(p.neighbor_mtu));
    field(f, "SMSL", p.master_sm_sl);
    field(f, "VLCap", vls(p.vl_cap, false));
    field(f, "InitType", hex(p.init_type.into(), 1));
    field(f, "VLHighLimit", p.vl_high_limit);
    field(f, "VLArbHighCap", p.vl_arbitration_high_cap);
    field(f, "VLArbLowCap", p.vl_arbitration_low_cap);
    field(f, "InitReply", hex(p.init_type_reply.into(), 1));
    field(f, "MtuCap", mtu(p.mtu_cap));
    field(f, "VLStallCount", p.vl_stall_count);
    field(f, "HoqLife", p.hoq_life);
    field(f, "OperVLs", vls(p.operational_vls, true));
    field(
        f,
        "PartEnforceInb",
        u8::from(p.partition_enforcement_inbound),
    );
    field(
        f,
        "PartEnforceOutb",
        u8::from(p.partition_enforcement_outbound),
    );
    field(f, "FilterRawInb", u8::from(p.filter_raw_inbound));
    field(f, "FilterRawOutb", u8::from(p.filter_raw_outbound));
    field(f, "MkeyViolations", p.m_key_violations);
    field(f, "PkeyViolations", p.p_key_violations);
    field(f, "QkeyViolations", p.q_key_violations);
    field(f, "GuidCap", p.guid_cap);
    field(f, "ClientReregister", u8::from(p.client_reregister));
    field(
        f,
        "McastPkeyTrapSuppressionEnabled",
        p.multicast_pkey_trap_suppression_enabled,
    );
    field(f, "SubnetTimeout", p.subnet_timeout);
    field(f, "RespTimeVal", p.resp_time_value);
    field(f, "LocalPhysErr", p.local_phy_errors);
    field(f, "OverrunErr", p.overrun_errors);
    field(f, "MaxCreditHint", p.max_credit_hint);
    field(f, "RoundTrip", p.link_round_trip_latency);
    field(f, "CapabilityMask2", port_cap_mask2(p.capability_mask2));
    field(f, "LinkSpeedExtActive", p.link_speed_ext_active);
    field(
        f,
        "LinkSpeedExtSupported",
        link_speeds_ext(p.link_speed_ext_supported),
    );
    field(
        f,
        "LinkSpeedExtEnabled",
        link_speeds_ext_enabled(p.link_speed_ext_enabled),
    );
    indent(&lines, tabs)
}

/// Puts `tabs` tabs before each line that starts a field (the
/// capability lines, which start with tabs already, stay as they are).
pub fn indent(lines: &str, tabs: usize) -> String {
    let pre = "\t".repeat(tabs);
    let mut s = String::new();
    for l in lines.lines() {
        if !l.starts_with('\t') {
            s.push_str(&pre);
        }
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// A GID as glibc's `inet_ntop(AF_INET6)` writes it: lower-case groups
/// without leading zeros, the longest run of two or more zero groups (the
/// first of equal runs) as `::`, and the last 32 bits as a dotted IPv4
/// address when the first 96 bits are zero (other than `::` and `::1`) or
/// the address is IPv4-mapped.
pub fn inet6(g: &[u8; 16]) -> String {
    let w: Vec<u16> = g
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    let (mut best, mut best_len, mut cur, mut cur_len) = (usize::MAX, 0, 0, 0);
    for (i, &x) in w.iter().enumerate() {
        if x == 0 {
            if cur_len == 0 {
                cur = i;
            }
            cur_len += 1;
            if cur_len > best_len {
                best = cur;
                best_len = cur_len;
            }
        } else {
            cur_len = 0;
        }
    }
    if best_len < 2 {
        best = usize::MAX;
    }
    let mut s = String::new();
    let mut i = 0;
    while i < 8 {
        if i == best {
            if i == 0 {
                s.push(':');
            }
            s.push(':');
            i += best_len;
            continue;
        }
        if i == 6 && best == 0 && (best_len == 6 || (best_len == 5 && w[5] == 0xffff)) {
            let _ = write!(s, "{}.{}.{}.{}", g[12], g[13], g[14], g[15]);
            break;
        }
        let _ = write!(s, "{:x}", w[i]);
        if i < 7 {
            s.push(':');
        }
        i += 1;
    }
    s
}

/// Prints an error the way infiniband-diags' `IBEXIT` does
/// (`TOOL: iberror: failed: WHAT`, on stdout with 255 as exit status,
/// as v44 does) and exits.
pub fn exit_error(tool: &str, what: &str) -> ! {
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{tool}: iberror: failed: {what}");
    let _ = out.flush();
    std::process::exit(255)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_pad_with_dots_to_column_33() {
        let mut s = String::new();
        field(&mut s, "BaseVers", 1);
        field(&mut s, "McastPkeyTrapSuppressionEnabled", 0);
        assert_eq!(
            s,
            "BaseVers:........................1\nMcastPkeyTrapSuppressionEnabled:.0\n"
        );
    }

    #[test]
    fn widths_speeds_and_masks_read_as_libibmad_writes_them() {
        assert_eq!(link_width_supported(31), "1X or 4X or 8X or 12X or 2X");
        assert_eq!(link_width_supported(2), "4X (IBA extension)");
        assert_eq!(link_width_enabled(0), "undefined (0)");
        assert_eq!(link_speeds(7), "2.5 Gbps or 5.0 Gbps or 10.0 Gbps");
        assert_eq!(link_speeds(2), "5.0 Gbps (IBA extension)");
        assert_eq!(link_speeds_ext(0), "0");
        assert_eq!(link_speeds_ext(3), "14.0625 Gbps or 25.78125 Gbps");
        assert_eq!(link_speeds_ext_enabled(30), "Extended link speeds disabled");
        assert_eq!(
            port_cap_mask(0xc04a),
            "0xc04a\n\t\t\t\tIsSM\n\t\t\t\tIsTrapSupported\n\t\t\t\tIsSLMappingSupported\n\t\t\t\tIsExtendedSpeedsSupported\n\t\t\t\tIsCapabilityMask2Supported"
        );
        assert_eq!(port_cap_mask2(0), "0x0");
        assert_eq!(mtu(4), "2048");
        assert_eq!(phys_state(5), "LinkUp");
        assert_eq!(phys_state(9), "?(9)");
    }

    #[test]
    fn destinations_parse_and_describe_as_portid2str() {
        assert_eq!(Dest::parse("0x10", false), Ok(Dest::Lid(16)));
        assert!(Dest::parse("0", false).is_err());
        let d = Dest::parse("0,1,3", true).unwrap();
        assert_eq!(d.describe(), "DR path slid 65535; dlid 65535; 0,1,3");
        assert_eq!(parse_int("010"), Some(8));
    }

    #[test]
    fn gids_print_as_inet_ntop_does() {
        let g = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        assert_eq!(inet6(&g("fe80::20:0")), "fe80::20:0");
        assert_eq!(inet6(&g("::")), "::");
        assert_eq!(inet6(&g("::1")), "::1");
        assert_eq!(
            inet6(&g("ff12:401b:ffff::ffff:ffff")),
            "ff12:401b:ffff::ffff:ffff"
        );
        assert_eq!(inet6(&g("1:0:2::3")), "1:0:2::3");
        assert_eq!(inet6(&g("::ffff:1.2.3.4")), "::ffff:1.2.3.4");
        assert_eq!(inet6(&g("::1.2.3.4")), "::1.2.3.4");
        assert_eq!(inet6(&g("fe80::1:0:0:1")), "fe80::1:0:0:1");
    }
}
