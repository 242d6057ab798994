//! Reports the ports of the fabric whose error counters are beyond their
//! thresholds, like infiniband-diags' `ibqueryerrors`: the fabric swept
//! as `ibnetdiscover` sweeps it ([`rdma_examples::discover`]), then for
//! each node (as the C tool lists them, last found first) the PMA's
//! ClassPortInfo, and PortCounters of all its ports at once (AllPortSelect,
//! where the agent has it) or of each port, by LID; then a summary. The
//! exit status is 1 when a port is beyond a threshold.
//!
//! Thresholds come from the C tool's file (`name=value` lines), 0 for a
//! counter the file does not name. `--data` adds a port's nonzero data
//! counters to its errors, `--counters` prints every port's data counters
//! instead of errors (both from PortCountersExtended where the PMA has
//! it, else PortCounters; each with the C tool's scaled value). Not done: the SL of each destination
//! (the C tool asks the SA for PathRecords to address the PMAs on them;
//! these requests go on SL 0), and the 64-bit error counters of
//! PortCountersExtended (CapabilityMask2 IsAdditionalPortCountersExtended).
//!
//! Usage: `ibqueryerrors [-s NAMES] [-c] [-r] [--details] [--data]
//! [--counters] [-k] [-K] [--switch] [--ca] [--router] [-G GUID | -D PATH]
//! [--threshold-file FILE]`

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Parser;
use rdma::mad::{attr_id, Attribute, ClassPortInfo, Method, PortCounters, PortCountersExtended};
use rdma_examples::discover::{clean, Fabric, NodeRec, Sweep, CA, ROUTER, SWITCH};
use rdma_examples::ibdiag::{self, Common, Dest, Diag};
use rdma_examples::linkinfo::{link_state, peer};

/// Report the ports whose error counters are beyond their thresholds
/// (like ibqueryerrors).
#[derive(Parser, Debug)]
#[command(name = "ibqueryerrors")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Suppress these errors (counter names, comma separated).
    #[arg(short = 's', long = "suppress", value_name = "ERR1,ERR2,...")]
    suppress: Vec<String>,
    /// Suppress the common errors (PortRcvSwitchRelayErrors).
    #[arg(short = 'c', long = "suppress-common")]
    suppress_common: bool,
    /// Report the node that has the port of this GUID only.
    #[arg(
        short = 'G',
        long = "port-guid",
        visible_short_alias = 'S',
        value_name = "GUID"
    )]
    guid: Option<String>,
    /// Report the node at the end of this directed route only.
    #[arg(short = 'D', long = "Direct", value_name = "PATH")]
    direct: Option<String>,
    /// Report the link of each port with errors.
    #[arg(short = 'r', long = "report-port")]
    report_port: bool,
    /// The thresholds file.
    #[arg(
        long = "threshold-file",
        value_name = "FILE",
        default_value = "/etc/infiniband-diags/error_thresholds"
    )]
    threshold_file: String,
    /// Switches only.
    #[arg(long = "switch")]
    switch: bool,
    /// CAs only.
    #[arg(long = "ca")]
    ca_only: bool,
    /// Routers only.
    #[arg(long = "router")]
    router: bool,
    /// Add the details of PortXmitDiscards and PortRcvErrors.
    #[arg(long = "details")]
    details: bool,
    /// Add the data counters to the ports with errors.
    #[arg(long = "data")]
    data: bool,
    /// Print the data counters of every port only (no errors).
    #[arg(long = "counters")]
    counters_only: bool,
    /// Clear the error counters after reading them.
    #[arg(short = 'k', long = "clear-errors")]
    clear_errors: bool,
    /// Clear the data counters after reading them.
    #[arg(short = 'K', long = "clear-counts")]
    clear_counts: bool,
    /// Do not ask the SA for the SL of each destination (accepted; this
    /// tool never does).
    #[arg(long = "skip-sl")]
    skip_sl: bool,
    /// How many SMPs may be outstanding at once during the sweep.
    #[arg(short = 'o', long = "outstanding_smps", default_value_t = 2)]
    outstanding: usize,
}

/// ClassPortInfo:CapabilityMask bits of the PMA.
const ALL_PORT_SELECT: u16 = 1 << 8;
const EXT_WIDTH: u16 = (1 << 9) | (1 << 10);
/// PortCountersExtended with its unicast and multicast counters (IETF).
const EXT_WIDTH_IETF: u16 = 1 << 9;
const XMIT_WAIT_SUP: u16 = 1 << 12;
/// PortSelect of all ports.
const ALL_PORTS: u8 = 0xff;
/// PortXmitDiscardDetails and PortRcvErrorDetails.
const XMIT_DISCARD_DETAILS: u16 = 0x0016;
const RCV_ERROR_DETAILS: u16 = 0x0015;

/// The PortCounters that libibmad names, in its order, with their values
/// (the data counters after the error counters, for `-s`).
fn counters(pc: &PortCounters) -> [(&'static str, u64); 18] {
    [
        ("SymbolErrorCounter", pc.symbol_error_counter.into()),
        (
            "LinkErrorRecoveryCounter",
            pc.link_error_recovery_counter.into(),
        ),
        ("LinkDownedCounter", pc.link_downed_counter.into()),
        ("PortRcvErrors", pc.port_rcv_errors.into()),
        (
            "PortRcvRemotePhysicalErrors",
            pc.port_rcv_remote_physical_errors.into(),
        ),
        (
            "PortRcvSwitchRelayErrors",
            pc.port_rcv_switch_relay_errors.into(),
        ),
        ("PortXmitDiscards", pc.port_xmit_discards.into()),
        (
            "PortXmitConstraintErrors",
            pc.port_xmit_constraint_errors.into(),
        ),
        (
            "PortRcvConstraintErrors",
            pc.port_rcv_constraint_errors.into(),
        ),
        (
            "LocalLinkIntegrityErrors",
            pc.local_link_integrity_errors.into(),
        ),
        (
            "ExcessiveBufferOverrunErrors",
            pc.excessive_buffer_overrun_errors.into(),
        ),
        ("QP1Dropped", pc.qp1_dropped.into()),
        ("VL15Dropped", pc.vl15_dropped.into()),
        ("PortXmitWait", pc.port_xmit_wait.into()),
        ("PortXmitData", pc.port_xmit_data.into()),
        ("PortRcvData", pc.port_rcv_data.into()),
        ("PortXmitPkts", pc.port_xmit_pkts.into()),
        ("PortRcvPkts", pc.port_rcv_pkts.into()),
    ]
}

/// The error counters: the first 14 of [`counters`].
const ERROR_COUNTERS: usize = 14;

/// The counters of the details attributes, as the C tool decodes them:
/// after PortXmitDiscards it reads PortXmitDiscardDetails with the fields
/// of PortRcvErrorDetails, and the other way round.
const RCV_DETAIL_NAMES: [&str; 6] = [
    "PortLocalPhysicalErrors",
    "PortMalformedPacketErrors",
    "PortBufferOverrunErrors",
    "PortDLIDMappingErrors",
    "PortVLMappingErrors",
    "PortLoopingErrors",
];
const XMIT_DETAIL_NAMES: [&str; 4] = [
    "PortInactiveDiscards",
    "PortNeighborMismatchDiscards",
    "PortSwLifetimeLimitDiscards",
    "PortSwHOQLifetimeLimitDiscards",
];

/// The thresholds file: `name=value` lines, `#` comments; `None` when it
/// cannot be read (the summary then says `(null)`, as the C tool's).
fn thresholds(path: &str) -> Option<(HashMap<String, u64>, String)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut map = HashMap::new();
    let mut shown = String::from("Thresholds: ");
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, val) = line.split_once('=').unwrap_or((line, ""));
        let v = ibdiag::parse_int(val).unwrap_or(0);
        if counters(&PortCounters::default())[..ERROR_COUNTERS]
            .iter()
            .any(|(n, _)| *n == name)
        {
            let _ = write!(shown, "[{name} = {v}]");
            map.insert(name.to_string(), v);
        }
    }
    Some((map, shown))
}

#[derive(Default)]
struct Summary {
    nodes_checked: u32,
    bad_nodes: u32,
    ports_checked: u32,
    bad_ports: u32,
    pma_failures: u32,
}

/// The data counters, named as libibmad names them, of PortCountersExtended
/// where the PMA has it (with the unicast and multicast ones where it has
/// those), else of PortCounters.
fn data_counters(
    pc: &PortCounters,
    pce: Option<&PortCountersExtended>,
    cap: u16,
) -> Vec<(&'static str, u64)> {
    let Some(x) = pce else {
        return vec![
            ("PortXmitData", pc.port_xmit_data.into()),
            ("PortRcvData", pc.port_rcv_data.into()),
            ("PortXmitPkts", pc.port_xmit_pkts.into()),
            ("PortRcvPkts", pc.port_rcv_pkts.into()),
        ];
    };
    let mut v = vec![
        ("PortXmitData", x.port_xmit_data),
        ("PortRcvData", x.port_rcv_data),
        ("PortXmitPkts", x.port_xmit_pkts),
        ("PortRcvPkts", x.port_rcv_pkts),
    ];
    if cap & EXT_WIDTH_IETF != 0 {
        v.extend([
            ("PortUnicastXmitPkts", x.port_unicast_xmit_pkts),
            ("PortUnicastRcvPkts", x.port_unicast_rcv_pkts),
            ("PortMulticastXmitPkts", x.port_multicast_xmit_pkts),
            ("PortMulticastRcvPkts", x.port_multicast_rcv_pkts),
        ]);
    }
    v
}

/// A counter scaled as the C tools scale it (`conv_cnt_human_readable`,
/// in `float`): by powers of 1,024 with the unit's prefix; a data counter
/// (4-byte words) in bytes, B to EB.
fn human(v: u64, data: bool) -> (f32, &'static str) {
    let mut tmp = v / 1024;
    let mut ui = 0usize;
    let mut div: u64 = 1;
    while tmp != 0 {
        ui += 1;
        tmp /= 1024;
        div = div.wrapping_mul(1024);
    }
    let mut val = v as f32;
    if data {
        val *= 4.0;
        if val / div as f32 > 1024.0 {
            ui += 1;
            div = div.wrapping_mul(1024);
        }
    }
    val /= div as f32;
    let units: [&str; 7] = if data {
        ["B", "KB", "MB", "GB", "TB", "PB", "EB"]
    } else {
        ["", "K", "M", "G", "T", "P", "E"]
    };
    (val, units.get(ui).copied().unwrap_or(""))
}

/// ` [name == value (scaled unit)]` of a data counter.
fn data_field(name: &str, v: u64) -> String {
    let bytes = matches!(name, "PortXmitData" | "PortRcvData");
    let (val, unit) = human(v, bytes);
    format!(" [{name} == {v} ({val:5.3}{unit})]")
}

struct Check<'a> {
    diag: &'a Diag,
    sweep: &'a Fabric,
    a: &'a Args,
    suppressed: Vec<String>,
    limits: HashMap<String, u64>,
    sum: Summary,
}

impl Check<'_> {
    fn pma(&self, method: Method, attr: u16, lid: u16, data: &[u8]) -> ibdiag::Result<Vec<u8>> {
        self.diag
            .perf(method, attr, lid, data)
            .map(|m| m.data().to_vec())
    }

    /// A failed PMA query, warned of and counted.
    fn failed(&mut self, what: &str, name: &str, lid: u16, port: u8) {
        eprintln!("ibwarn: {what} query failed on {name}, Lid {lid} port {port}");
        self.sum.pma_failures += 1;
    }

    /// The nonzero counters of a details attribute, ` [name == n]` each.
    fn details(&mut self, attr: u16, names: &[&str], name: &str, lid: u16, port: u8) -> String {
        let what = if attr == XMIT_DISCARD_DETAILS {
            "PortXmitDiscardDetails"
        } else {
            "PortRcvErrorDetails"
        };
        let Ok(d) = self.pma(Method::GET, attr, lid, &[0, port]) else {
            self.failed(what, name, lid, port);
            return String::new();
        };
        let mut s = String::new();
        for (i, n) in names.iter().enumerate() {
            let v = u16::from_be_bytes([d[4 + 2 * i], d[5 + 2 * i]]);
            if v != 0 {
                let _ = write!(s, " [{n} == {v}]");
            }
        }
        s
    }

    /// The counters of `port` beyond their thresholds, printed; whether
    /// there were any (a failed query: none).
    fn errors(
        &mut self,
        n: &NodeRec,
        name: &str,
        lid: u16,
        port: u8,
        cap: u16,
        header: &mut bool,
    ) -> bool {
        let pc = match self.pma(Method::GET, PortCounters::ID, lid, &[0, port]) {
            Ok(d) => PortCounters::decode(&d).ok(),
            Err(_) => None,
        };
        let Some(mut pc) = pc else {
            self.failed("IB_GSI_PORT_COUNTERS", name, lid, port);
            return false;
        };
        let mut pce = None;
        if cap & EXT_WIDTH != 0 {
            match self.extended(lid, port) {
                Some(x) => pce = Some(x),
                None => {
                    self.failed("IB_GSI_PORT_COUNTERS_EXT", name, lid, port);
                    return false;
                }
            }
        }
        if cap & XMIT_WAIT_SUP == 0 {
            pc.port_xmit_wait = 0;
        }
        let mut s = String::new();
        for (c, v) in counters(&pc).into_iter().take(ERROR_COUNTERS) {
            if self.suppressed.iter().any(|x| x == c) {
                continue;
            }
            if v <= self.limits.get(c).copied().unwrap_or(0) {
                continue;
            }
            let _ = write!(s, " [{c} == {v}]");
            if self.a.details && c == "PortXmitDiscards" {
                let d = self.details(XMIT_DISCARD_DETAILS, &RCV_DETAIL_NAMES, name, lid, port);
                s.push_str(&d);
            } else if self.a.details && c == "PortRcvErrors" {
                let d = self.details(RCV_ERROR_DETAILS, &XMIT_DETAIL_NAMES, name, lid, port);
                s.push_str(&d);
            }
        }
        if s.is_empty() {
            return false;
        }
        if self.a.data {
            for (c, v) in data_counters(&pc, pce.as_ref(), cap) {
                if v != 0 {
                    s.push_str(&data_field(c, v));
                }
            }
        }
        let port0 = n.ports[0].as_ref().map_or(n.info.port_guid, |p| p.guid);
        if !*header {
            if n.info.node_type == SWITCH {
                println!("Errors for 0x{port0:x} \"{name}\"");
            } else {
                println!("Errors for \"{name}\"");
            }
            *header = true;
            self.sum.bad_nodes += 1;
        }
        if port == ALL_PORTS {
            if n.info.node_type == SWITCH {
                println!("   GUID 0x{port0:x} port ALL:{s}");
            }
            return true;
        }
        let p = n.ports[usize::from(port)].as_ref();
        let guid = p.map_or(0, |p| p.guid);
        println!("   GUID 0x{guid:x} port {port}:{s}");
        self.link_info(n, port);
        self.sum.bad_ports += 1;
        true
    }

    /// `-r`: the link of `port`, as the C tool's `print_port_config`.
    fn link_info(&self, n: &NodeRec, port: u8) {
        let Some(p) = n.ports.get(usize::from(port)).and_then(|p| p.as_ref()) else {
            return;
        };
        if !self.a.report_port {
            return;
        }
        let lid = if n.info.node_type == SWITCH {
            n.smalid
        } else {
            p.base_lid
        };
        let remote = match p.remote {
            Some(r) => peer(self.sweep, n, p, r, true),
            None => "           [  ] \"\" ( )".to_string(),
        };
        println!(
            "       Link info: {lid:6}{:4}[  ] =={}==>  {remote}",
            p.num,
            link_state(n, p)
        );
    }

    /// PortCountersExtended of `port`.
    fn extended(&self, lid: u16, port: u8) -> Option<PortCountersExtended> {
        let d = self
            .pma(
                Method::GET,
                attr_id::PORT_COUNTERS_EXTENDED,
                lid,
                &[0, port],
            )
            .ok()?;
        PortCountersExtended::decode(&d).ok()
    }

    /// `--counters`: every data counter of `port`, printed (a failed query:
    /// warned of, nothing printed).
    fn data(&mut self, n: &NodeRec, name: &str, lid: u16, port: u8, cap: u16, header: &mut bool) {
        let counters = if cap & EXT_WIDTH != 0 {
            let Some(x) = self.extended(lid, port) else {
                self.failed("IB_GSI_PORT_COUNTERS_EXT", name, lid, port);
                return;
            };
            data_counters(&PortCounters::default(), Some(&x), cap)
        } else {
            let pc = self
                .pma(Method::GET, PortCounters::ID, lid, &[0, port])
                .ok()
                .and_then(|d| PortCounters::decode(&d).ok());
            let Some(pc) = pc else {
                self.failed("IB_GSI_PORT_COUNTERS", name, lid, port);
                return;
            };
            data_counters(&pc, None, cap)
        };
        let guid = n.info.node_guid;
        if !*header {
            println!("Data Counters for 0x{guid:x} \"{name}\"");
            *header = true;
        }
        let fields: String = counters.iter().map(|&(c, v)| data_field(c, v)).collect();
        println!("   GUID 0x{guid:x} port {port}:{fields}");
        self.link_info(n, port);
    }

    /// Clears the counters of `port` that `-k`/`-K` ask for.
    fn clear(&self, name: &str, lid: u16, port: u8, cap: u16) {
        let mut mask: u32 = 0;
        if self.a.clear_errors {
            mask |= 0xfff;
            if cap & XMIT_WAIT_SUP != 0 {
                mask |= 0x10000;
            }
        }
        if self.a.clear_counts {
            mask |= 0xf000;
        }
        if mask != 0 && self.reset(attr_id::PORT_COUNTERS, lid, port, mask).is_err() {
            eprintln!("Failed to reset errors {name} port {port}");
        }
        if self.a.clear_errors && self.a.details {
            let _ = self.reset(XMIT_DISCARD_DETAILS, lid, port, 0xf);
            let _ = self.reset(RCV_ERROR_DETAILS, lid, port, 0x3f);
        }
        if cap & EXT_WIDTH != 0 && self.a.clear_counts {
            let mask = if cap & (1 << 9) != 0 { 0xff } else { 0x0f };
            if self
                .reset(attr_id::PORT_COUNTERS_EXTENDED, lid, port, mask)
                .is_err()
            {
                eprintln!("Failed to reset extended data counters {name}, Lid {lid} port {port}");
            }
        }
    }

    /// A Set of `attr` with PortSelect `port` and CounterSelect `mask`
    /// (PortCounters: CounterSelect2 its bits 16 and up, in byte 18;
    /// PortCountersExtended: its 16 bits only).
    fn reset(&self, attr: u16, lid: u16, port: u8, mask: u32) -> ibdiag::Result<()> {
        let mut data = [0u8; 192];
        data[1] = port;
        data[2..4].copy_from_slice(&(mask as u16).to_be_bytes());
        if attr == attr_id::PORT_COUNTERS {
            data[18] = (mask >> 16) as u8;
        }
        self.pma(Method::SET, attr, lid, &data).map(|_| ())
    }

    /// One node: its counters (all ports at once where the PMA can),
    /// cleared after where asked.
    fn node(&mut self, n: &NodeRec) {
        let name = clean(&n.desc);
        let is_switch = n.info.node_type == SWITCH;
        let (lid, port) = if is_switch {
            (n.smalid, 0)
        } else {
            n.ports
                .iter()
                .skip(1)
                .flatten()
                .next()
                .map_or((0, 1), |p| (p.base_lid, p.num))
        };
        let cap = match self.pma(Method::GET, ClassPortInfo::ID, lid, &[0, port]) {
            Ok(d) => ClassPortInfo::decode(&d).ok().map(|c| c.capability_mask),
            Err(_) => None,
        };
        let cap = cap.unwrap_or_else(|| {
            self.failed("classportinfo", &name, lid, port);
            0
        });
        let all = cap & ALL_PORT_SELECT != 0;
        let mut header = false;
        let mut done = false;
        if self.a.counters_only {
            let first = if is_switch && n.enhsp0 { 0 } else { 1 };
            for p in n.ports.iter().skip(first).flatten() {
                let lid = if is_switch { n.smalid } else { p.base_lid };
                self.data(n, &name, lid, p.num, cap, &mut header);
                self.sum.ports_checked += 1;
                if !all {
                    self.clear(&name, lid, p.num, cap);
                }
            }
            done = true;
        }
        if !done && all && !self.errors(n, &name, lid, ALL_PORTS, cap, &mut header) {
            self.sum.ports_checked += u32::from(n.info.num_ports);
            done = true;
        }
        if !done {
            let first = if is_switch && n.enhsp0 { 0 } else { 1 };
            for p in n.ports.iter().skip(first).flatten() {
                let lid = if is_switch { n.smalid } else { p.base_lid };
                self.errors(n, &name, lid, p.num, cap, &mut header);
                self.sum.ports_checked += 1;
                if !all {
                    self.clear(&name, lid, p.num, cap);
                }
            }
        }
        self.sum.nodes_checked += 1;
        if all {
            self.clear(&name, lid, ALL_PORTS, cap);
        }
    }
}

/// The port GUID at the end of a directed route (NodeInfo:PortGUID).
fn guid_at(diag: &Diag, path: &str) -> Option<u64> {
    let dest = Dest::parse(path, true).unwrap_or_else(|_| {
        eprintln!("ibwarn: Failed to resolve {path}; attempting full scan");
        Dest::Dr(vec![0])
    });
    diag.node_info(&dest).ok().map(|ni| ni.port_guid)
}

fn main() -> ExitCode {
    let a = Args::parse();
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("ibqueryerrors", &e));
    let Some(fabric) = Sweep::fabric(&diag, a.outstanding, a.common.timeout_ms) else {
        eprintln!("discover failed");
        return ExitCode::from(255);
    };
    let (limits, shown) = match thresholds(&a.threshold_file) {
        Some((m, s)) => (m, s),
        None => (HashMap::new(), "(null)".to_string()),
    };
    let mut suppressed: Vec<String> = a
        .suppress
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|n| {
            counters(&PortCounters::default())
                .iter()
                .any(|(c, _)| c == n)
        })
        .map(str::to_string)
        .collect();
    if a.suppress_common {
        suppressed.push("PortRcvSwitchRelayErrors".into());
    }
    let types: Vec<u8> = [(a.switch, SWITCH), (a.ca_only, CA), (a.router, ROUTER)]
        .into_iter()
        .filter_map(|(on, t)| on.then_some(t))
        .collect();
    let mut c = Check {
        diag: &diag,
        sweep: &fabric,
        a: &a,
        suppressed,
        limits,
        sum: Summary::default(),
    };
    let wanted = |n: &NodeRec| types.is_empty() || types.contains(&n.info.node_type);
    if let Some(g) = &a.guid {
        let guid = ibdiag::parse_int(g).unwrap_or(0);
        match fabric.node_of_port_guid(guid) {
            Some(n) if wanted(n) => c.node(n),
            Some(_) => {}
            None => eprintln!("Failed to find node: {g}"),
        }
    } else if let Some(path) = &a.direct {
        let Some(guid) = guid_at(&diag, path) else {
            eprintln!("Failed to query local Node Info");
            return ExitCode::SUCCESS;
        };
        match fabric.node_of_port_guid(guid) {
            Some(n) if wanted(n) => c.node(n),
            Some(_) => {}
            None => eprintln!("Failed to find node: {path}"),
        }
    } else {
        for n in fabric.nodes.iter().rev().filter(|n| wanted(n)) {
            c.node(n);
        }
    }
    let sum = &c.sum;
    println!(
        "\n## Summary: {} nodes checked, {} bad nodes found",
        sum.nodes_checked, sum.bad_nodes
    );
    println!(
        "##          {} ports checked, {} ports have errors beyond threshold",
        sum.ports_checked, sum.bad_ports
    );
    println!("## {shown}");
    if sum.pma_failures != 0 {
        println!("##          {} PMA query failures", sum.pma_failures);
    }
    let sup: String = c.suppressed.iter().map(|n| format!(" {n}")).collect();
    println!("## Suppressed:{sup}");
    ExitCode::from(u8::from(sum.bad_ports != 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Args::command().debug_assert();
    }

    /// The C tool's scaling, as it prints it (`%5.3f` of a `float`).
    #[test]
    fn counters_scale_as_the_c_tool_scales_them() {
        let shown = |v, data| {
            let (val, unit) = human(v, data);
            format!("{val:5.3}{unit}")
        };
        assert_eq!(shown(0, true), "0.000B");
        assert_eq!(shown(0, false), "0.000");
        assert_eq!(shown(100, true), "400.000B");
        assert_eq!(shown(300, true), "1.172KB", "1,200 bytes: over 1,024");
        assert_eq!(shown(256, true), "1024.000B", "1,024 bytes: not over");
        assert_eq!(shown(1088, false), "1.062K", "a tie rounds to even");
        assert_eq!(shown(5_000_000, false), "4.768M");
        assert_eq!(shown(u64::MAX, true), "64.000EB");
        assert_eq!(shown(1088, true), "4.250KB");
        assert_eq!(shown(5_000_000, true), "19.073MB");
        assert_eq!(shown(u64::MAX, false), "16.000E");
        assert_eq!(
            data_field("PortRcvData", 300),
            " [PortRcvData == 300 (1.172KB)]"
        );
        assert_eq!(data_field("PortRcvPkts", 3), " [PortRcvPkts == 3 (3.000)]");
    }

    #[test]
    fn thresholds_are_the_named_error_counters_of_the_file() {
        let path = std::env::temp_dir().join(format!("ibqe-thr-{}", std::process::id()));
        std::fs::write(
            &path,
            "# comment\n\nSymbolErrorCounter=10\nPortXmitData=5\nNoSuchCounter=1\nLinkDownedCounter=0x2\n",
        )
        .unwrap();
        let (map, shown) = thresholds(path.to_str().unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(map.get("SymbolErrorCounter"), Some(&10));
        assert_eq!(map.get("LinkDownedCounter"), Some(&2));
        assert_eq!(map.len(), 2, "{map:?}");
        assert_eq!(
            shown,
            "Thresholds: [SymbolErrorCounter = 10][LinkDownedCounter = 2]"
        );
        assert!(thresholds("/nonexistent/thresholds").is_none());
    }
}
