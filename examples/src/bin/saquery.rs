//! Queries the subnet administrator (SA), like infiniband-diags' `saquery`:
//! NodeRecords (all, or of a LID), PortInfoRecords, PathRecords (`-p`,
//! `--src-to-dst A:B`), MCMemberRecords (`-g` groups, `-m` members, or
//! `MCMemberRecord`), LinkRecords (`-x`), ServiceRecords (`-S`) and the
//! SA's ClassPortInfo (`-c`).
//!
//! A GetTable response holds as many records as its length allows
//! (AttributeOffset apart), as saquery counts them: under ibsim, which does
//! not simulate RMPP, that is what fits in one MAD.
//!
//! Usage: `saquery [-p|-c|-g|-m|-x|-S|-N] [--src-to-dst A:B] [QUERY] [LID]`

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rdma::mad::sa::{
    LinkRecord, LinkRecordMask, McMemberRecord, McMemberRecordMask, NodeRecord, NodeRecordMask,
    PathRecord, PathRecordMask, PortInfoRecord, PortInfoRecordMask, SaHeader, SaRecord, SaRequest,
    ServiceRecord, ServiceRecordMask,
};
use rdma::mad::{Attribute, ClassPortInfo, Method};
use rdma_examples::ibdiag::{self, inet6, Common, Diag};

/// Query the subnet administrator (like saquery).
#[derive(Parser, Debug)]
#[command(name = "saquery")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// PathRecords.
    #[arg(short = 'p')]
    path: bool,
    /// The SA's ClassPortInfo.
    #[arg(short = 'c')]
    cpi: bool,
    /// ServiceRecords.
    #[arg(short = 'S')]
    service: bool,
    /// LinkRecords.
    #[arg(short = 'x')]
    link: bool,
    /// NodeRecords (all, or those of the node named by the argument).
    #[arg(short = 'N')]
    node: bool,
    /// The LIDs and names of the CAs (NodeRecords).
    #[arg(short = 'D')]
    descs: bool,
    /// The ports whose CapabilityMask has IsSM, then IsSMdisabled
    /// (PortInfoRecords).
    #[arg(short = 's')]
    issm: bool,
    /// The multicast groups (MCMemberRecords).
    #[arg(short = 'g')]
    groups: bool,
    /// The multicast group members (MCMemberRecords), with the names of
    /// their nodes; with an MLID, only that group's member GIDs.
    #[arg(short = 'm')]
    members: bool,
    /// The PathRecords from A to B (LIDs or node names).
    #[arg(long = "src-to-dst", value_name = "SRC:DST")]
    src_to_dst: Option<String>,
    /// Source LID (PathRecord).
    #[arg(long = "slid")]
    slid: Option<String>,
    /// Destination LID (PathRecord).
    #[arg(long = "dlid")]
    dlid: Option<String>,
    /// Multicast LID (MCMemberRecord).
    #[arg(long = "mlid")]
    mlid: Option<String>,
    /// The query name (NodeRecord/NR, PortInfoRecord/PIR, LinkRecord/LR,
    /// ServiceRecord/SR, PathRecord/PR, MCMemberRecord/MCMR,
    /// ClassPortInfo/CPI), then its argument (a LID, a node name,
    /// LID/PORT/OPTIONS).
    args: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Query {
    ClassPortInfo,
    Node,
    PortInfo,
    Link,
    Service,
    Path,
    McMember,
}

const QUERIES: [(&str, &str, Query); 7] = [
    ("ClassPortInfo", "CPI", Query::ClassPortInfo),
    ("NodeRecord", "NR", Query::Node),
    ("PortInfoRecord", "PIR", Query::PortInfo),
    ("LinkRecord", "LR", Query::Link),
    ("ServiceRecord", "SR", Query::Service),
    ("PathRecord", "PR", Query::Path),
    ("MCMemberRecord", "MCMR", Query::McMember),
];

/// A failed query: its message (on stderr) and the exit status saquery
/// gives (an errno, or EIO for an SA error status).
struct Failure(String, u8);

struct Sa<'a> {
    diag: &'a Diag,
    timeout: Duration,
}

/// The records of a response, AttributeOffset apart, as many as the
/// received length holds (saquery's count).
struct Records {
    data: Vec<u8>,
    stride: usize,
    count: usize,
}

impl Records {
    fn raw(&self, i: usize) -> &[u8] {
        &self.data[i * self.stride..]
    }
    fn get<R: Attribute>(&self, i: usize) -> Option<R> {
        R::decode(self.raw(i)).ok()
    }
}

impl Sa<'_> {
    fn query(&self, mut mad: rdma::mad::Mad) -> Result<Records, Failure> {
        let agent = self
            .diag
            .sa_agent()
            .map_err(|e| Failure(format!("Failed to bind to the SA: {e}"), 255))?;
        mad.set_tid(agent.next_tid());
        let method = mad.method();
        let r = agent
            .request(&mad, &self.diag.sa_address(), self.timeout, 0)
            .map_err(|e| {
                let errno = e.errno();
                Failure(format!("Query SA failed: {e}"), errno as u8)
            })?;
        let status = r.mad.status();
        if !status.is_ok() {
            return Err(Failure(
                format!(
                    "ERROR: Query result returned 0x{:04X}, {}",
                    status.0,
                    sa_status_name(status.0)
                ),
                libc_eio() as u8,
            ));
        }
        let len = r.len.min(r.mad.len());
        let bytes = &r.mad.as_bytes()[..len];
        let sa = r
            .mad
            .sa_header()
            .map_err(|e| Failure(e.to_string(), libc_eio() as u8))?;
        let data = bytes.get(SaHeader::DATA_OFFSET..).unwrap_or(&[]).to_vec();
        let stride = usize::from(sa.attr_offset) * 8;
        let count = if method != Method::GET_TABLE {
            1
        } else {
            data.len().checked_div(stride).unwrap_or(0)
        };
        // A Get's record is read from the whole (padded) MAD.
        let data = if method != Method::GET_TABLE {
            r.mad.data().to_vec()
        } else {
            data
        };
        Ok(Records {
            data,
            stride: stride.max(1),
            count,
        })
    }

    fn table<R: SaRecord>(&self, rec: &R, mask: R::Mask) -> Result<Records, Failure> {
        let m = SaRequest::get_table(0)
            .record(rec, mask)
            .map_err(|e| Failure(e.to_string(), 22))?;
        self.query(m)
    }
}

/// EIO, saquery's exit status for an SA error status.
fn libc_eio() -> i32 {
    5
}

fn sa_status_name(status: u16) -> String {
    let code = (status >> 8) & 0xff;
    let names = [
        "Success",
        "Insufficient Resources",
        "Invalid Request",
        "No Records",
        "Too Many Records",
        "Invalid GID",
        "Insufficient Components",
        "Denied",
    ];
    let mad = match status & 0x1c {
        0 => "",
        0x04 => "Bad version; ",
        0x08 => "Method not supported; ",
        0x0c => "Method/Attribute combo not supported; ",
        0x1c => "Attribute/modifier combo invalid; ",
        _ => "",
    };
    match names.get(usize::from(code)) {
        Some(n) => format!("{mad}{n}"),
        None => format!("{mad}Undefined Error"),
    }
}

fn dump_node_record(o: &mut String, raw: &[u8], nr: &NodeRecord) {
    let ni = &nr.node_info;
    let resv = u16::from_be_bytes([raw[2], raw[3]]);
    let _ = write!(
        o,
        "NodeRecord dump:\n\
         \t\tlid.....................{}\n\
         \t\treserved................0x{:X}\n\
         \t\tbase_version............0x{:X}\n\
         \t\tclass_version...........0x{:X}\n\
         \t\tnode_type...............{}\n\
         \t\tnum_ports...............{}\n\
         \t\tsys_guid................0x{:016x}\n\
         \t\tnode_guid...............0x{:016x}\n\
         \t\tport_guid...............0x{:016x}\n\
         \t\tpartition_cap...........0x{:X}\n\
         \t\tdevice_id...............0x{:X}\n\
         \t\trevision................0x{:X}\n\
         \t\tport_num................{}\n\
         \t\tvendor_id...............0x{:X}\n\
         \t\tNodeDescription.........{}\n",
        nr.lid,
        resv,
        ni.base_version,
        ni.class_version,
        sa_node_type(ni.node_type),
        ni.num_ports,
        ni.system_image_guid,
        ni.node_guid,
        ni.port_guid,
        ni.partition_cap,
        ni.device_id,
        ni.revision,
        ni.local_port_num,
        ni.vendor_id,
        clean(&nr.node_description.text())
    );
}

/// `ib_get_node_type_str` of OpenSM's headers.
fn sa_node_type(t: u8) -> String {
    match t {
        1 => "Channel Adapter".into(),
        2 => "Switch".into(),
        3 => "Router".into(),
        _ => "UNKNOWN".into(),
    }
}

fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { ' ' })
        .collect()
}

fn dump_path_record(o: &mut String, raw: &[u8], p: &PathRecord) {
    let hop_flow = (u32::from(p.raw_traffic) << 31) | (p.flow_label << 8) | u32::from(p.hop_limit);
    let num_path = (u8::from(p.reversible) << 7) | p.numb_path;
    let sel = |s: rdma::mad::sa::Selector, v: u8| (s.bits() << 6) | v;
    let resv2: String = raw[58..64].iter().map(|b| format!("{b:02X}")).collect();
    let _ = write!(
        o,
        "PathRecord dump:\n\
         \t\tservice_id..............0x{:016x}\n\
         \t\tdgid....................{}\n\
         \t\tsgid....................{}\n\
         \t\tdlid....................{}\n\
         \t\tslid....................{}\n\
         \t\thop_flow_raw............0x{:X}\n\
         \t\ttclass..................0x{:X}\n\
         \t\tnum_path_revers.........0x{:X}\n\
         \t\tpkey....................0x{:X}\n\
         \t\tqos_class...............0x{:X}\n\
         \t\tsl......................0x{:X}\n\
         \t\tmtu.....................0x{:X}\n\
         \t\trate....................0x{:X}\n\
         \t\tpkt_life................0x{:X}\n\
         \t\tpreference..............0x{:X}\n\
         \t\tresv2...................0x{resv2}\n",
        p.service_id,
        inet6(&p.dgid.0),
        inet6(&p.sgid.0),
        p.dlid,
        p.slid,
        hop_flow,
        p.tclass,
        num_path,
        p.pkey,
        p.qos_class,
        p.sl,
        sel(p.mtu_selector, p.mtu),
        sel(p.rate_selector, p.rate),
        sel(p.packet_life_time_selector, p.packet_life_time),
        p.preference
    );
}

fn dump_class_port_info(c: &ClassPortInfo) -> String {
    let tc_sl_fl = |tc: u8, sl: u8, fl: u32| (u32::from(tc) << 24) | (u32::from(sl) << 20) | fl;
    format!(
        "SA ClassPortInfo:\n\
         \t\tBase version.............{}\n\
         \t\tClass version............{}\n\
         \t\tCapability mask..........0x{:04X}\n\
         \t\tCapability mask 2........0x{:08X}\n\
         \t\tResponse time value......0x{:02X}\n\
         \t\tRedirect GID.............{}\n\
         \t\tRedirect TC/SL/FL........0x{:08X}\n\
         \t\tRedirect LID.............{}\n\
         \t\tRedirect PKey............0x{:04X}\n\
         \t\tRedirect QP..............0x{:08X}\n\
         \t\tRedirect QKey............0x{:08X}\n\
         \t\tTrap GID.................{}\n\
         \t\tTrap TC/SL/FL............0x{:08X}\n\
         \t\tTrap LID.................{}\n\
         \t\tTrap PKey................0x{:04X}\n\
         \t\tTrap HL/QP...............0x{:08X}\n\
         \t\tTrap QKey................0x{:08X}\n",
        c.base_version,
        c.class_version,
        c.capability_mask,
        c.capability_mask2,
        c.resp_time_value,
        inet6(&c.redirect_gid.0),
        tc_sl_fl(c.redirect_tc, c.redirect_sl, c.redirect_fl),
        c.redirect_lid,
        c.redirect_pkey,
        c.redirect_qp,
        c.redirect_qkey,
        inet6(&c.trap_gid.0),
        tc_sl_fl(c.trap_tc, c.trap_sl, c.trap_fl),
        c.trap_lid,
        c.trap_pkey,
        (u32::from(c.trap_hl) << 24) | c.trap_qp,
        c.trap_qkey
    )
}

fn dump_portinfo_record(o: &mut String, r: &PortInfoRecord) {
    let _ = write!(
        o,
        "PortInfoRecord dump:\n\
         \tRID\n\
         \t\tEndPortLid..............{}\n\
         \t\tPortNum.................{}\n\
         \t\tOptions.................0x{:x}\n\
         \tPortInfo dump:\n{}",
        r.endport_lid,
        r.port_num,
        r.options,
        r.port_info.diag().indent(2)
    );
}

fn dump_mcmember_record(o: &mut String, m: &McMemberRecord) {
    let _ = write!(
        o,
        "MCMember Record dump:\n\
         \t\tMGID....................{}\n\
         \t\tPortGid.................{}\n\
         \t\tqkey....................0x{:x}\n\
         \t\tmlid....................0x{:x}\n\
         \t\tmtu.....................0x{:x}\n\
         \t\tTClass..................0x{:x}\n\
         \t\tpkey....................0x{:x}\n\
         \t\trate....................0x{:x}\n\
         \t\tpkt_life................0x{:x}\n\
         \t\tSL......................0x{:x}\n\
         \t\tFlowLabel...............0x{:x}\n\
         \t\tHopLimit................0x{:x}\n\
         \t\tScope...................0x{:x}\n\
         \t\tJoinState...............0x{:x}\n\
         \t\tProxyJoin...............0x{:x}\n",
        inet6(&m.mgid.0),
        inet6(&m.port_gid.0),
        m.qkey,
        m.mlid,
        (m.mtu_selector.bits() << 6) | m.mtu,
        m.tclass,
        m.pkey,
        (m.rate_selector.bits() << 6) | m.rate,
        (m.packet_life_time_selector.bits() << 6) | m.packet_life_time,
        m.sl,
        m.flow_label,
        m.hop_limit,
        m.scope,
        m.join_state.bits(),
        u8::from(m.proxy_join)
    );
}

fn dump_group_record(o: &mut String, m: &McMemberRecord) {
    let _ = write!(
        o,
        "MCMemberRecord group dump:\n\
         \t\tMGID....................{}\n\
         \t\tMlid....................0x{:X}\n\
         \t\tMtu.....................0x{:X}\n\
         \t\tpkey....................0x{:X}\n\
         \t\tRate....................0x{:X}\n\
         \t\tSL......................0x{:X}\n",
        inet6(&m.mgid.0),
        m.mlid,
        (m.mtu_selector.bits() << 6) | m.mtu,
        m.pkey,
        (m.rate_selector.bits() << 6) | m.rate,
        m.sl
    );
}

fn dump_link_record(o: &mut String, l: &LinkRecord) {
    let _ = write!(
        o,
        "LinkRecord dump:\n\
         \t\tFromLID....................{}\n\
         \t\tFromPort...................{}\n\
         \t\tToPort.....................{}\n\
         \t\tToLID......................{}\n",
        l.from_lid, l.from_port, l.to_port, l.to_lid
    );
}

fn dump_service_record(o: &mut String, s: &ServiceRecord) {
    let end = s.service_name.iter().position(|&b| b == 0).unwrap_or(64);
    let name = String::from_utf8_lossy(&s.service_name[..end]);
    let _ = write!(
        o,
        "ServiceRecord dump:\n\
         \t\tServiceID...............0x{:016x}\n\
         \t\tServiceGID..............{}\n\
         \t\tServiceP_Key............0x{:X}\n\
         \t\tServiceLease............0x{:X}\n\
         \t\tServiceKey..............<not displayed>\n\
         \t\tServiceName.............{name}\n",
        s.service_id,
        inet6(&s.service_gid.0),
        s.service_pkey,
        s.service_lease
    );
    for (i, v) in s.service_data8.iter().enumerate() {
        let head = format!("ServiceData8.{}", i + 1);
        let _ = writeln!(o, "\t\t{head}{}0x{v:X}", ".".repeat(24 - head.len()));
    }
    for (i, v) in s.service_data16.iter().enumerate() {
        let head = format!("ServiceData16.{}", i + 1);
        let _ = writeln!(o, "\t\t{head}{}0x{v:X}", ".".repeat(24 - head.len()));
    }
    for (i, v) in s.service_data32.iter().enumerate() {
        let head = format!("ServiceData32.{}", i + 1);
        let _ = writeln!(o, "\t\t{head}{}0x{v:X}", ".".repeat(24 - head.len()));
    }
    for (i, v) in s.service_data64.iter().enumerate() {
        let head = format!("ServiceData64.{}", i + 1);
        let _ = writeln!(o, "\t\t{head}{}0x{v:016x}", ".".repeat(24 - head.len()));
    }
}

/// A LID as saquery's `get_lid` takes it: a number, or a node name looked
/// up in the NodeRecords.
fn lid_of(sa: &Sa<'_>, name: &str) -> Result<u16, Failure> {
    if name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        let all = sa.table(&NodeRecord::default(), NodeRecordMask::empty())?;
        for i in 0..all.count {
            if let Some(nr) = all.get::<NodeRecord>(i) {
                if nr.node_description.text() == name {
                    return Ok(nr.lid);
                }
            }
        }
        return Err(Failure(
            format!("Failed to find lid for \"{name}\": Machine is not on the network"),
            64,
        ));
    }
    match ibdiag::parse_int(name) {
        Some(v) if v > 0 && v <= u64::from(u16::MAX) => Ok(v as u16),
        _ => Err(Failure(format!("Invalid lid specified: \"{name}\""), 22)),
    }
}

fn run(a: &Args, sa: &Sa<'_>, out: &mut String) -> Result<(), Failure> {
    let mut args = a.args.clone();
    let mut query = None;
    if a.path || a.src_to_dst.is_some() {
        query = Some(Query::Path);
    }
    if a.service {
        query = Some(Query::Service);
    }
    if a.link {
        query = Some(Query::Link);
    }
    let command_set = a.cpi || a.groups || a.members || a.node || a.descs || a.issm;
    if query.is_none() && !command_set {
        let named = args.first().and_then(|n| {
            QUERIES.iter().find(|(name, alias, _)| {
                n.eq_ignore_ascii_case(name) || n.eq_ignore_ascii_case(alias)
            })
        });
        match named {
            Some((_, _, q)) => {
                query = Some(*q);
                args.remove(0);
            }
            None => query = Some(Query::Node),
        }
    }
    let (mut slid, mut dlid) = (0u16, 0u16);
    let mut numb_path = None;
    if let Some(sd) = &a.src_to_dst {
        let Some((s, d)) = sd.split_once(':') else {
            return Err(Failure("--src-to-dst takes SRC:DST".into(), 2));
        };
        numb_path = Some(0x7f);
        if !s.is_empty() {
            slid = lid_of(sa, s)?;
        }
        if !d.is_empty() {
            dlid = lid_of(sa, d)?;
        }
    }
    if let Some(s) = &a.slid {
        slid = ibdiag::parse_int(s).unwrap_or(0) as u16;
    }
    if let Some(d) = &a.dlid {
        dlid = ibdiag::parse_int(d).unwrap_or(0) as u16;
    }
    if a.cpi || query == Some(Query::ClassPortInfo) {
        let m = SaRequest::get(0)
            .attribute(&ClassPortInfo::default(), 0)
            .map_err(|e| Failure(e.to_string(), 22))?;
        let r = sa
            .query(m)
            .map_err(|f| Failure(format!("{}\nFailed to query SA:ClassPortInfo", f.0), f.1))?;
        let c = r
            .get::<ClassPortInfo>(0)
            .ok_or_else(|| Failure("Failed to query SA:ClassPortInfo".into(), 5))?;
        out.push_str(&dump_class_port_info(&c));
        return Ok(());
    }
    if a.node || a.descs {
        // saquery's print_node_records: every NodeRecord, then the filter.
        let r = sa.table(&NodeRecord::default(), NodeRecordMask::empty())?;
        if a.descs {
            out.push_str("   LID \"name\"\n================\n");
        }
        let wanted = args.first();
        for i in 0..r.count {
            let Some(nr) = r.get::<NodeRecord>(i) else {
                continue;
            };
            if a.descs {
                if nr.node_info.node_type == 1 {
                    let _ = writeln!(
                        out,
                        "{:6}  \"{}\"",
                        nr.lid,
                        clean(&nr.node_description.text())
                    );
                }
            } else if wanted.is_none_or(|w| *w == nr.node_description.text()) {
                dump_node_record(out, r.raw(i), &nr);
            }
        }
        return Ok(());
    }
    if a.issm {
        // saquery's print_issm_records: PortInfoRecords matched on their
        // CapabilityMask (attribute modifier bit 31: any of the bits).
        for (head, bit) in [
            ("IsSM ports\n", 1u32 << 1),
            ("\nIsSMdisabled ports\n", 1 << 10),
        ] {
            let mut q = PortInfoRecord::default();
            q.port_info.capability_mask = bit;
            let m = SaRequest {
                attr_mod: 1 << 31,
                ..SaRequest::get_table(0)
            }
            .record(&q, PortInfoRecordMask::CAPABILITY_MASK)
            .map_err(|e| Failure(e.to_string(), 22))?;
            let r = sa.query(m)?;
            out.push_str(head);
            for i in 0..r.count {
                if let Some(p) = r.get::<PortInfoRecord>(i) {
                    let _ = write!(
                        out,
                        "PortInfoRecord dump:\n\
                         \t\tEndPortLid..............{}\n\
                         \t\tPortNum.................{}\n\
                         \t\tbase_lid................{}\n\
                         \t\tmaster_sm_base_lid......{}\n\
                         \t\tcapability_mask.........0x{:X}\n",
                        p.endport_lid,
                        p.port_num,
                        p.port_info.lid,
                        p.port_info.master_sm_lid,
                        p.port_info.capability_mask
                    );
                }
            }
        }
        return Ok(());
    }
    if a.groups {
        let r = sa.table(&McMemberRecord::default(), McMemberRecordMask::empty())?;
        for i in 0..r.count {
            if let Some(m) = r.get::<McMemberRecord>(i) {
                dump_group_record(out, &m);
            }
        }
        return Ok(());
    }
    if a.members {
        let groups = sa.table(&McMemberRecord::default(), McMemberRecordMask::empty())?;
        let nodes = sa.table(&NodeRecord::default(), NodeRecordMask::empty())?;
        for i in 0..groups.count {
            let Some(m) = groups.get::<McMemberRecord>(i) else {
                continue;
            };
            let iface = u64::from_be_bytes(m.port_gid.0[8..16].try_into().unwrap_or([0; 8]));
            let mut name = "<unknown>".to_string();
            for j in 0..nodes.count {
                if let Some(nr) = nodes.get::<NodeRecord>(j) {
                    if nr.node_info.port_guid == iface {
                        name = clean(&nr.node_description.text());
                        break;
                    }
                }
            }
            if let Some(req) = args.first() {
                if ibdiag::parse_int(req).map(|v| v as u16) == Some(m.mlid) {
                    let _ = writeln!(
                        out,
                        "\t\tPortGid.................{} ({name})",
                        inet6(&m.port_gid.0)
                    );
                }
            } else {
                let scope_state = (m.scope << 4) | m.join_state.bits();
                let _ = write!(
                    out,
                    "MCMemberRecord member dump:\n\
                     \t\tMGID....................{}\n\
                     \t\tMlid....................0x{:X}\n\
                     \t\tPortGid.................{}\n\
                     \t\tScopeState..............0x{:X}\n\
                     \t\tProxyJoin...............0x{:X}\n\
                     \t\tNodeDescription.........{name}\n",
                    inet6(&m.mgid.0),
                    m.mlid,
                    inet6(&m.port_gid.0),
                    scope_state,
                    u8::from(m.proxy_join)
                );
            }
        }
        return Ok(());
    }
    let query = query.unwrap_or(Query::Node);
    // The LID (and ports) argument: LID/PORT/OPTIONS.
    let parts: Vec<String> = args
        .first()
        .map(|s| s.split('/').map(str::to_string).collect())
        .unwrap_or_default();
    let lid = match parts.first().filter(|s| !s.is_empty()) {
        Some(s) => lid_of(sa, s)?,
        None => 0,
    };
    let num = |i: usize| {
        parts
            .get(i)
            .and_then(|s| ibdiag::parse_int(s))
            .map(|v| v as u8)
    };
    match query {
        Query::Node => {
            let mut mask = NodeRecordMask::empty();
            if lid != 0 {
                mask |= NodeRecordMask::LID;
            }
            let r = sa.table(
                &NodeRecord {
                    lid,
                    ..Default::default()
                },
                mask,
            )?;
            for i in 0..r.count {
                if let Some(nr) = r.get::<NodeRecord>(i) {
                    dump_node_record(out, r.raw(i), &nr);
                }
            }
        }
        Query::PortInfo => {
            let mut q = PortInfoRecord {
                endport_lid: lid,
                ..Default::default()
            };
            let mut mask = PortInfoRecordMask::empty();
            if lid != 0 {
                mask |= PortInfoRecordMask::LID;
            }
            if let Some(p) = num(1) {
                q.port_num = p;
                mask |= PortInfoRecordMask::PORT_NUM;
            }
            if let Some(o) = num(2) {
                q.options = o;
                mask |= PortInfoRecordMask::OPTIONS;
            }
            let r = sa.table(&q, mask)?;
            for i in 0..r.count {
                if let Some(p) = r.get::<PortInfoRecord>(i) {
                    dump_portinfo_record(out, &p);
                }
            }
        }
        Query::Link => {
            let mut q = LinkRecord::default();
            let mut mask = LinkRecordMask::empty();
            if lid != 0 {
                q.from_lid = lid;
                mask |= LinkRecordMask::FROM_LID;
            }
            if let Some(p) = num(1) {
                q.from_port = p;
                mask |= LinkRecordMask::FROM_PORT;
            }
            let r = sa.table(&q, mask)?;
            for i in 0..r.count {
                if let Some(l) = r.get::<LinkRecord>(i) {
                    dump_link_record(out, &l);
                }
            }
        }
        Query::Service => {
            let r = sa.table(&ServiceRecord::default(), ServiceRecordMask::empty())?;
            for i in 0..r.count {
                if let Some(s) = r.get::<ServiceRecord>(i) {
                    dump_service_record(out, &s);
                }
            }
        }
        Query::Path => {
            let mut q = PathRecord::default();
            let mut mask = PathRecordMask::empty();
            if slid != 0 {
                q.slid = slid;
                mask |= PathRecordMask::SLID;
            }
            if dlid != 0 {
                q.dlid = dlid;
                mask |= PathRecordMask::DLID;
            }
            if let Some(n) = numb_path {
                q.numb_path = n;
                mask |= PathRecordMask::NUMB_PATH;
            }
            let r = sa.table(&q, mask)?;
            for i in 0..r.count {
                if let Some(p) = r.get::<PathRecord>(i) {
                    dump_path_record(out, r.raw(i), &p);
                }
            }
        }
        Query::McMember => {
            let mut q = McMemberRecord::default();
            let mut mask = McMemberRecordMask::empty();
            if let Some(m) = &a.mlid {
                q.mlid = ibdiag::parse_int(m).unwrap_or(0) as u16;
                if q.mlid != 0 {
                    mask |= McMemberRecordMask::MLID;
                }
            }
            let r = sa.table(&q, mask)?;
            for i in 0..r.count {
                if let Some(m) = r.get::<McMemberRecord>(i) {
                    dump_mcmember_record(out, &m);
                }
            }
        }
        Query::ClassPortInfo => {}
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    let diag = match Diag::open(&a.common) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("saquery: {e}");
            return ExitCode::from(255);
        }
    };
    let sa = Sa {
        diag: &diag,
        timeout: Duration::from_millis(a.common.timeout_ms.max(1)),
    };
    let mut out = String::new();
    let r = run(&a, &sa, &mut out);
    print!("{out}");
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg, code)) => {
            eprintln!("{msg}");
            ExitCode::from(code)
        }
    }
}
