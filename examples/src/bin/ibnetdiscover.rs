//! Discovers the fabric by a directed-route sweep and prints its topology,
//! like infiniband-diags' `ibnetdiscover`: the format that ibsim reads as
//! its net file (switches, then CAs, then routers, each with its links).
//!
//! The sweep is libibnetdisc's: NodeInfo along a directed route, then for
//! a new node its NodeDescription (and for a switch SwitchInfo and port 0's
//! PortInfo, then every port's), and through each port that is LinkUp (a
//! switch's, other than the one the SMP came in by) NodeInfo one hop
//! further. SMPs go out from a FIFO queue with at most `-o` of them
//! outstanding (2, as the C tool), and are handled as their responses
//! arrive, so that nodes are found, and listed, in the same order.
//!
//! Usage: `ibnetdiscover [-o OUTSTANDING] [-l|-S|-H] [TOPOLOGY_FILE]`

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use rdma::mad::{
    Attribute, Mad, Method, NodeDescription, NodeInfo, PhysPortState, PortInfo, SwitchInfo,
    PERMISSIVE_LID,
};
use rdma_examples::ibdiag::{self, smi_address, Common, Diag};

/// Discover the fabric and print its topology (like ibnetdiscover).
#[derive(Parser, Debug)]
#[command(name = "ibnetdiscover")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// How many SMPs may be outstanding at once.
    #[arg(short = 'o', long = "outstanding_smps", default_value_t = 2)]
    outstanding: usize,
    /// List the nodes (CAs, switches, routers) instead of the topology.
    #[arg(short = 'l', long = "list")]
    list: bool,
    /// List the switches only.
    #[arg(short = 'S', long = "Switch_list")]
    switch_list: bool,
    /// List the CAs only.
    #[arg(short = 'H', long = "Hca_list")]
    hca_list: bool,
    /// Write the topology to this file instead of stdout.
    file: Option<String>,
}

const SWITCH: u8 = 2;
const CA: u8 = 1;
const ROUTER: u8 = 3;
/// PortInfo:CapabilityMask IsExtendedSpeedsSupported.
const CAP_EXT_SPEEDS: u32 = 1 << 14;

#[derive(Default, Clone)]
struct PortRec {
    num: u8,
    guid: u64,
    base_lid: u16,
    lmc: u8,
    info: Option<PortInfo>,
    remote: Option<(usize, u8)>,
}

struct NodeRec {
    info: NodeInfo,
    desc: String,
    smalid: u16,
    smalmc: u8,
    enhsp0: bool,
    ports: Vec<Option<PortRec>>,
}

#[derive(Clone, Copy)]
enum Then {
    NodeInfo(Option<(usize, u8)>),
    NodeDesc(usize),
    SwitchInfo(usize),
    PortInfo(usize, u8),
}

struct Smp {
    path: Vec<u8>,
    attr: u16,
    modifier: u32,
    then: Then,
}

struct Sweep<'a> {
    diag: &'a Diag,
    max_out: usize,
    timeout: Duration,
    queue: VecDeque<Smp>,
    wire: HashMap<u32, Smp>,
    nodes: Vec<NodeRec>,
    by_guid: HashMap<u64, usize>,
    from: Option<(usize, u8)>,
    sent: usize,
}

impl Sweep<'_> {
    fn issue(&mut self, path: &[u8], attr: u16, modifier: u32, then: Then) -> ibdiag::Result<()> {
        self.queue.push_back(Smp {
            path: path.to_vec(),
            attr,
            modifier,
            then,
        });
        self.pump()
    }

    fn pump(&mut self) -> ibdiag::Result<()> {
        while self.wire.len() < self.max_out {
            let Some(smp) = self.queue.pop_front() else {
                return Ok(());
            };
            let agent = self.diag.dr_agent()?;
            let tid = agent.next_tid();
            let mad = Mad::smp_directed(Method::GET, smp.attr, smp.modifier, tid, 0, &smp.path)
                .map_err(|e| e.to_string())?;
            agent
                .send_request(&mad, &smi_address(PERMISSIVE_LID), self.timeout, RETRIES)
                .map_err(|e| e.to_string())?;
            self.wire.insert(tid as u32, smp);
            self.sent += 1;
        }
        Ok(())
    }

    fn run(&mut self) -> ibdiag::Result<()> {
        self.issue(&[0], NodeInfo::ID, 0, Then::NodeInfo(None))?;
        while !self.wire.is_empty() {
            let r = self
                .diag
                .dr_agent()?
                .recv(None)
                .map_err(|e| e.to_string())?;
            let Some(smp) = self.wire.remove(&(r.tid() as u32)) else {
                return Err(format!(
                    "Failed to find matching smp for trid ({:x})",
                    r.tid() as u32
                ));
            };
            self.pump()?;
            if r.status != 0 || !r.mad.status_without_direction().is_ok() {
                continue;
            }
            self.handle(&smp, &r.mad)?;
        }
        Ok(())
    }

    fn handle(&mut self, smp: &Smp, mad: &Mad) -> ibdiag::Result<()> {
        let data = mad.data();
        match smp.then {
            Then::NodeInfo(from) => {
                let ni = NodeInfo::decode(data).map_err(|e| e.to_string())?;
                self.node_info(&smp.path, ni, from)
            }
            Then::NodeDesc(n) => {
                let d = NodeDescription::decode(data).map_err(|e| e.to_string())?;
                self.nodes[n].desc = d.text();
                Ok(())
            }
            Then::SwitchInfo(n) => {
                let s = SwitchInfo::decode(data).map_err(|e| e.to_string())?;
                self.nodes[n].enhsp0 = s.enhanced_port0;
                Ok(())
            }
            Then::PortInfo(n, p) => {
                let pi = PortInfo::decode(data).map_err(|e| e.to_string())?;
                self.port_info(&smp.path, n, p, pi)?;
                if p == 0 {
                    for i in 1..=self.nodes[n].info.num_ports {
                        self.issue(&smp.path, PortInfo::ID, u32::from(i), Then::PortInfo(n, i))?;
                    }
                }
                Ok(())
            }
        }
    }

    fn port_mut(&mut self, n: usize, p: u8) -> &mut PortRec {
        let guid = self.nodes[n].info.port_guid;
        let slot = &mut self.nodes[n].ports[usize::from(p)];
        slot.get_or_insert_with(|| PortRec {
            num: p,
            guid,
            ..PortRec::default()
        })
    }

    fn node_info(
        &mut self,
        path: &[u8],
        ni: NodeInfo,
        from: Option<(usize, u8)>,
    ) -> ibdiag::Result<()> {
        let (n, new) = match self.by_guid.get(&ni.node_guid) {
            Some(&n) => (n, false),
            None => {
                self.nodes.push(NodeRec {
                    info: ni,
                    desc: String::new(),
                    smalid: 0,
                    smalmc: 0,
                    enhsp0: false,
                    ports: vec![None; usize::from(ni.num_ports) + 1],
                });
                let n = self.nodes.len() - 1;
                self.by_guid.insert(ni.node_guid, n);
                (n, true)
            }
        };
        let p = ni.local_port_num;
        if usize::from(p) >= self.nodes[n].ports.len() {
            return Ok(());
        }
        self.port_mut(n, p).guid = ni.port_guid;
        match from {
            None => self.from = Some((n, p)),
            Some((rn, rp)) => {
                if self.nodes[rn].ports[usize::from(rp)].is_none() {
                    return Err(format!(
                        "internal error: node {rn} port {rp} was not created"
                    ));
                }
                self.link((n, p), (rn, rp));
            }
        }
        if new {
            self.issue(path, NodeDescription::ID, 0, Then::NodeDesc(n))?;
            if ni.node_type == SWITCH {
                self.issue(path, SwitchInfo::ID, 0, Then::SwitchInfo(n))?;
                self.issue(path, PortInfo::ID, 0, Then::PortInfo(n, 0))?;
            }
        }
        if ni.node_type != SWITCH {
            self.issue(path, PortInfo::ID, u32::from(p), Then::PortInfo(n, p))?;
        }
        Ok(())
    }

    /// Links two ports, unlinking whatever either was linked to before
    /// (libibnetdisc's `link_ports`).
    fn link(&mut self, a: (usize, u8), b: (usize, u8)) {
        for x in [a, b] {
            if let Some((on, op)) = self.port_mut(x.0, x.1).remote.take() {
                if let Some(Some(other)) = self.nodes[on].ports.get_mut(usize::from(op)) {
                    other.remote = None;
                }
            }
        }
        self.port_mut(a.0, a.1).remote = Some(b);
        self.port_mut(b.0, b.1).remote = Some(a);
    }

    fn port_info(&mut self, path: &[u8], n: usize, p: u8, pi: PortInfo) -> ibdiag::Result<()> {
        if usize::from(p) >= self.nodes[n].ports.len() {
            return Ok(());
        }
        let is_switch = self.nodes[n].info.node_type == SWITCH;
        let (smalid, smalmc) = (self.nodes[n].smalid, self.nodes[n].smalmc);
        let port = self.port_mut(n, p);
        port.info = Some(pi);
        port.num = p;
        port.base_lid = pi.lid;
        port.lmc = pi.lmc;
        if p == 0 {
            self.nodes[n].smalid = pi.lid;
            self.nodes[n].smalmc = pi.lmc;
        } else if is_switch {
            port.base_lid = smalid;
            port.lmc = smalmc;
        }
        let from = self.from == Some((n, p));
        if p != 0
            && pi.port_physical_state == PhysPortState::LinkUp
            && ((is_switch && p != pi.local_port_num) || from)
        {
            let mut next = path.to_vec();
            if !is_switch && self.from.map(|f| f.0) == Some(n) && path.len() > 2 {
                next.pop();
            } else {
                if next.len() > 63 {
                    return Ok(());
                }
                next.push(p);
            }
            self.issue(&next, NodeInfo::ID, 0, Then::NodeInfo(Some((n, p))))?;
        }
        Ok(())
    }
}

const RETRIES: u32 = 3;

fn node_name(n: &NodeRec) -> String {
    let c = match n.info.node_type {
        SWITCH => 'S',
        CA => 'H',
        ROUTER => 'R',
        _ => '?',
    };
    format!("\"{c}-{:016x}\"", n.info.node_guid)
}

/// NodeDescription as `clean_nodedesc` leaves it: what is not printable
/// is a space.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { ' ' })
        .collect()
}

fn width_compat(w: u8) -> &'static str {
    match w {
        1 => "1x",
        2 => "4x",
        4 => "8x",
        8 => "12x",
        16 => "2x",
        _ => "??",
    }
}

fn speed_compat(s: u8) -> &'static str {
    match s {
        1 => "SDR",
        2 => "DDR",
        4 => "QDR",
        _ => "???",
    }
}

fn speed_ext_compat(e: u8, s: u8) -> &'static str {
    match e {
        0 => speed_compat(s),
        1 => "FDR",
        2 => "EDR",
        4 => "HDR",
        8 => "NDR",
        _ => "???",
    }
}

fn link_str(width: u8, speed: u8, espeed: u8) -> String {
    let s = if speed != 4 && espeed == 0 {
        speed_compat(speed)
    } else {
        speed_ext_compat(espeed, speed)
    };
    format!("{}{s}", width_compat(width))
}

/// `ctime(3)` of now, in UTC: `Tue Dec  1 17:11:41 2026`.
fn ctime_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let wd = (days + 4).rem_euclid(7) as usize;
    const WD: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MO: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {:2} {:02}:{:02}:{:02} {y}",
        WD[wd],
        MO[(m - 1) as usize],
        d,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn out_ids(o: &mut String, n: &NodeRec) {
    let _ = write!(
        o,
        "\nvendid=0x{:x}\ndevid=0x{:x}\n",
        n.info.vendor_id, n.info.device_id
    );
    if n.info.system_image_guid != 0 {
        let _ = writeln!(o, "sysimgguid=0x{:x}", n.info.system_image_guid);
    }
}

fn topology(s: &Sweep<'_>) -> String {
    let mut o = String::new();
    let _ = write!(o, "#\n# Topology file: generated on {}\n#\n", ctime_now());
    if let Some((f, _)) = s.from {
        let n = &s.nodes[f];
        let _ = writeln!(
            o,
            "# Initiated from node {:016x} port {:016x}",
            n.info.node_guid, n.info.port_guid
        );
    }
    let remote = |r: (usize, u8)| -> (&NodeRec, &PortRec) {
        let n = &s.nodes[r.0];
        // Linked ports always exist.
        let p = n.ports[usize::from(r.1)].as_ref();
        (n, p.expect("a linked port exists"))
    };
    let lid_of = |n: &NodeRec, p: &PortRec| {
        if n.info.node_type == SWITCH {
            n.smalid
        } else {
            p.base_lid
        }
    };
    for n in s.nodes.iter().rev().filter(|n| n.info.node_type == SWITCH) {
        out_ids(&mut o, n);
        let _ = writeln!(
            o,
            "switchguid=0x{:x}({:x})",
            n.info.node_guid, n.info.port_guid
        );
        let _ = writeln!(
            o,
            "Switch\t{} {}\t\t# \"{}\" {} port 0 lid {} lmc {}",
            n.info.num_ports,
            node_name(n),
            clean(&n.desc),
            if n.enhsp0 { "enhanced" } else { "base" },
            n.smalid,
            n.smalmc
        );
        let cap = n.ports[0]
            .as_ref()
            .and_then(|p| p.info)
            .map(|i| i.capability_mask);
        for p in n.ports.iter().skip(1).flatten() {
            let Some(r) = p.remote else { continue };
            let (rn, rp) = remote(r);
            let info = p.info.unwrap_or_default();
            let (speed, espeed) = match cap {
                None => (0, 0),
                Some(c) if c & CAP_EXT_SPEEDS != 0 => (
                    info.link_speed_active.into(),
                    info.link_speed_ext_active.into(),
                ),
                Some(_) => (info.link_speed_active.into(), 0),
            };
            let _ = write!(o, "[{}]\t{}[{}]", p.num, node_name(rn), rp.num);
            if rn.info.node_type != SWITCH {
                let _ = write!(o, "({:x}) ", rp.guid);
            }
            let _ = writeln!(
                o,
                "\t\t# \"{}\" lid {} {}",
                clean(&rn.desc),
                lid_of(rn, rp),
                link_str(info.link_width_active.into(), speed, espeed)
            );
        }
    }
    for t in [CA, ROUTER] {
        for n in s.nodes.iter().rev().filter(|n| n.info.node_type == t) {
            out_ids(&mut o, n);
            let (lower, upper) = if t == CA { ("ca", "Ca") } else { ("rt", "Rt") };
            let _ = writeln!(o, "{lower}guid=0x{:x}", n.info.node_guid);
            let _ = writeln!(
                o,
                "{upper}\t{} {}\t\t# \"{}\"",
                n.info.num_ports,
                node_name(n),
                clean(&n.desc)
            );
            for p in n.ports.iter().skip(1).flatten() {
                let Some(r) = p.remote else { continue };
                let (rn, rp) = remote(r);
                let info = p.info.unwrap_or_default();
                let espeed = if info.capability_mask & CAP_EXT_SPEEDS != 0 {
                    info.link_speed_ext_active.into()
                } else {
                    0
                };
                let _ = write!(
                    o,
                    "[{}]({:x}) \t{}[{}]",
                    p.num,
                    p.guid,
                    node_name(rn),
                    rp.num
                );
                if rn.info.node_type != SWITCH {
                    let _ = write!(o, " ({:x}) ", rp.guid);
                }
                let _ = writeln!(
                    o,
                    "\t\t# lid {} lmc {} \"{}\" lid {} {}",
                    p.base_lid,
                    p.lmc,
                    clean(&rn.desc),
                    lid_of(rn, rp),
                    link_str(
                        info.link_width_active.into(),
                        info.link_speed_active.into(),
                        espeed,
                    )
                );
            }
        }
    }
    o
}

fn list(s: &Sweep<'_>, types: &[u8]) -> String {
    let mut o = String::new();
    for &t in types {
        for n in s.nodes.iter().rev().filter(|n| n.info.node_type == t) {
            let kind = match t {
                SWITCH => "Switch",
                CA => "Ca",
                _ => "Router",
            };
            let _ = writeln!(
                o,
                "{kind}\t : 0x{:016x} ports {} devid 0x{:x} vendid 0x{:x} \"{}\"",
                n.info.node_guid,
                n.info.num_ports,
                n.info.device_id,
                n.info.vendor_id,
                clean(&n.desc)
            );
        }
    }
    o
}

fn main() -> ExitCode {
    let start = std::time::Instant::now();
    let a = Args::parse();
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("ibnetdiscover", &e));
    let opened = start.elapsed();
    let mut s = Sweep {
        diag: &diag,
        max_out: a.outstanding.max(1),
        timeout: Duration::from_millis(a.common.timeout_ms.max(1)),
        queue: VecDeque::new(),
        wire: HashMap::new(),
        nodes: Vec::new(),
        by_guid: HashMap::new(),
        from: None,
        sent: 0,
    };
    let t0 = std::time::Instant::now();
    if let Err(e) = s.run() {
        ibdiag::exit_error("ibnetdiscover", &format!("discover failed: {e}"));
    }
    let swept = t0.elapsed();
    if s.from.is_none() {
        ibdiag::exit_error("ibnetdiscover", "discover failed");
    }
    let out = if a.list {
        list(&s, &[CA, SWITCH, ROUTER])
    } else if a.switch_list {
        list(&s, &[SWITCH])
    } else if a.hca_list {
        list(&s, &[CA])
    } else {
        topology(&s)
    };
    match &a.file {
        Some(f) => {
            if let Err(e) = std::fs::write(f, out) {
                ibdiag::exit_error("ibnetdiscover", &format!("can't open file {f}: {e}"));
            }
        }
        None => print!("{out}"),
    }
    let (nodes, sent) = (s.nodes.len(), s.sent);
    let written = start.elapsed();
    drop(s);
    drop(diag);
    if std::env::var_os("RDMA_IBNETDISCOVER_STATS").is_some() {
        eprintln!(
            "ibnetdiscover: {nodes} nodes, {sent} SMPs, port opened in {opened:?}, sweep {swept:?}, output {:?}, port closed in {:?}",
            written - opened - swept,
            start.elapsed() - written
        );
    }
    ExitCode::SUCCESS
}
