//! Queries or changes a port's state, like infiniband-diags'
//! `ibportstate`: the PortInfo fields of link state, LIDs, widths and
//! speeds of a port (and of its peer, for an active switch port), and
//! with an operation a PortInfo Set: enable, disable, reset, on, off,
//! down, arm, active, speed, espeed, width, vls, mtu, lid, smlid, lmc,
//! mkey, mkeylease, mkeyprot.
//!
//! Usage: `ibportstate [-D|-G] DEST PORT [OP [VALUE]]...`

use std::process::ExitCode;

use clap::Parser;
use rdma::mad::{Attribute, Method, NodeInfo, PhysPortState, PortInfo, PortState};
use rdma_examples::ibdiag::{self, Addressing, Common, Dest, Diag};

/// Query or change a port's state (like ibportstate).
#[derive(Parser, Debug)]
#[command(name = "ibportstate")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    addr: Addressing,
    /// The node: a LID, with -G a port GUID, with -D a directed route.
    dest: String,
    /// The port number.
    #[arg(value_name = "PORT")]
    portnum: String,
    /// The operations and their values: query, enable, disable, on, off,
    /// reset, down, arm, active; speed, espeed, fdr10, width, vls, mtu,
    /// lid, smlid, lmc, mkey, mkeylease, mkeyprot with a value each.
    ops: Vec<String>,
}

const TOOL: &str = "ibportstate";

fn fail(what: &str) -> ! {
    ibdiag::exit_error(TOOL, what)
}

/// The operations that take no value (ibportstate's `port_op`).
const OPS: [&str; 9] = [
    "query", "enable", "reset", "disable", "down", "arm", "active", "on", "off",
];

/// The settings with a value, each with the largest it takes (and
/// whether 0 is refused).
const SETTINGS: [(&str, u64, bool); 12] = [
    ("speed", 15, false),
    ("espeed", 31, false),
    ("fdr10", 1, false),
    ("width", 255, false),
    ("vls", 5, true),
    ("mtu", 5, true),
    ("lid", 0xbfff, true),
    ("smlid", 0xbfff, true),
    ("lmc", 7, false),
    ("mkey", u64::MAX, false),
    ("mkeylease", 0xffff, false),
    ("mkeyprot", 3, false),
];

/// What the command line asks for.
#[derive(Default)]
struct Request {
    op: Option<&'static str>,
    values: Vec<(&'static str, u64)>,
}

impl Request {
    fn parse(args: &[String]) -> Request {
        let mut r = Request::default();
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            if let Some(op) = OPS.iter().find(|&&o| o == a) {
                if r.op.is_some() {
                    fail(&format!(
                        "{op} only one of: query, enable, disable, reset, down, arm, active, can be specified"
                    ));
                }
                r.op = Some(op);
            } else if let Some(&(name, max, no_zero)) = SETTINGS.iter().find(|s| s.0 == a) {
                i += 1;
                let Some(v) = args.get(i) else {
                    fail(&format!("{name} requires an additional parameter"))
                };
                let v = ibdiag::parse_int(v).unwrap_or(0);
                let bad = match name {
                    "width" => v > 31 && v != 255,
                    _ => v > max || (no_zero && v == 0),
                };
                if bad {
                    fail(&match name {
                        "espeed" => format!("invalid extended speed value {v}"),
                        "fdr10" => format!("invalid fdr10 speed value {v}"),
                        "lid" | "smlid" => format!("invalid {name} value 0x{v:x}"),
                        "mkeylease" => format!("invalid mkey lease time {v}"),
                        "mkeyprot" => format!("invalid mkey protection bit setting {v}"),
                        _ => format!("invalid {name} value {v}"),
                    });
                }
                r.values.push((name, v));
            } else {
                fail(&format!("invalid operation: {a}"));
            }
            i += 1;
        }
        r
    }

    fn value(&self, name: &str) -> Option<u64> {
        self.values.iter().rev().find(|v| v.0 == name).map(|v| v.1)
    }

    fn changes(&self) -> bool {
        self.op.is_some_and(|o| o != "query") || !self.values.is_empty()
    }
}

/// The PortInfo fields ibportstate shows, in its order.
fn show(dest: &Dest, port: u8, pi: &PortInfo, espeed: bool, switch: bool) {
    let text = pi.diag().to_string();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.split(':').next() == Some(name))
            .map(|l| format!("{l}\n"))
            .unwrap_or_default()
    };
    let mut names = vec![
        "LinkState",
        "PhysLinkState",
        "Lid",
        "SMLid",
        "LMC",
        "LinkWidthSupported",
        "LinkWidthEnabled",
        "LinkWidthActive",
        "LinkSpeedSupported",
        "LinkSpeedEnabled",
        "LinkSpeedActive",
    ];
    if espeed {
        names.extend([
            "LinkSpeedExtSupported",
            "LinkSpeedExtEnabled",
            "LinkSpeedExtActive",
        ]);
    }
    if !switch || port == 0 {
        names.extend(["Mkey", "MkeyLeasePeriod", "ProtectBits"]);
    }
    let body: String = names.into_iter().map(field).collect();
    print!("# Port info: {} port {port}\n{body}", dest.describe());
}

/// IsExtendedSpeedsSupported of CapabilityMask.
const CAP_EXT_SPEEDS: u32 = 1 << 14;

/// ibportstate's `get_port_info`: the port's PortInfo and whether the
/// node has extended speeds (a switch's port 0 tells).
fn port_info(diag: &Diag, dest: &Dest, port: u8, switch: bool) -> (PortInfo, bool) {
    let cap = switch.then(|| {
        diag.port_info(dest, 0)
            .unwrap_or_else(|_| fail("smp query port 0 portinfo failed"))
            .capability_mask
    });
    let pi = diag
        .port_info(dest, port)
        .unwrap_or_else(|_| fail("smp query portinfo failed"));
    let cap = cap.unwrap_or(pi.capability_mask);
    (pi, cap & CAP_EXT_SPEEDS != 0)
}

fn node_info(diag: &Diag, dest: &Dest) -> NodeInfo {
    diag.node_info(dest)
        .unwrap_or_else(|_| fail("smp query nodeinfo failed"))
}

/// The PortInfo Set of the operations (ibportstate's main after the
/// query), and the PortInfo it answers.
fn set(
    diag: &Diag,
    dest: &Dest,
    port: u8,
    mut pi: PortInfo,
    r: &Request,
    espeed: bool,
) -> PortInfo {
    let physical = u8::from(pi.port_physical_state);
    if r.value("lid").is_none() && (pi.lid == 0 || pi.lid == 0xffff) {
        pi.lid = 0x1234;
    }
    if r.value("smlid").is_none() && (pi.master_sm_lid == 0 || pi.master_sm_lid == 0xffff) {
        pi.master_sm_lid = 0x1234;
    }
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::from(0);
    match r.op {
        Some("on") if physical != 3 => {
            println!("Port is already in enable state");
            std::process::exit(0);
        }
        Some("on" | "enable" | "reset") => pi.port_physical_state = PhysPortState::from(2),
        Some("off" | "disable") => {
            println!("Disable may be irreversible");
            pi.port_physical_state = PhysPortState::from(3);
        }
        Some("down") => pi.port_state = PortState::Down,
        Some("arm") => pi.port_state = PortState::Armed,
        Some("active") => pi.port_state = PortState::Active,
        _ => {}
    }
    let v = |n: &str| r.value(n).unwrap_or(0);
    pi.link_speed_enabled = v("speed") as u8;
    pi.link_speed_ext_enabled = v("espeed") as u8;
    pi.link_width_enabled = v("width") as u8;
    if let Some(x) = r.value("vls") {
        pi.operational_vls = x as u8;
    }
    if let Some(x) = r.value("mtu") {
        pi.neighbor_mtu = x as u8;
    }
    if let Some(x) = r.value("lid") {
        pi.lid = x as u16;
    }
    if let Some(x) = r.value("smlid") {
        pi.master_sm_lid = x as u16;
    }
    if let Some(x) = r.value("lmc") {
        pi.lmc = x as u8;
    }
    if r.value("fdr10").is_some() {
        // MLNXExtendedPortInfo, which only Mellanox devices have.
        fail("smp set MLNX ext portinfo failed");
    }
    if let Some(x) = r.value("mkey") {
        pi.m_key = x;
    }
    if let Some(x) = r.value("mkeylease") {
        pi.m_key_lease_period = x as u16;
    }
    if let Some(x) = r.value("mkeyprot") {
        pi.m_key_protect_bits = x as u8;
    }
    let mut data = [0u8; 64];
    pi.encode_into(&mut data)
        .unwrap_or_else(|e| fail(&format!("smp set portinfo failed: {e}")));
    let modifier = u32::from(port) | if espeed { 1 << 31 } else { 0 };
    let m = diag
        .smp(Method::SET, PortInfo::ID, modifier, dest, Some(&data))
        .unwrap_or_else(|_| fail("smp set portinfo failed"));
    PortInfo::decode(m.data()).unwrap_or_else(|_| fail("smp set portinfo failed"))
}

/// The peer of an active switch port: one hop further on the route.
fn peer_of(diag: &Diag, dest: &Dest, port: u8) -> Dest {
    match dest {
        Dest::Dr(p) | Dest::LidDr { path: p, .. } if p.len() >= 64 => fail("Too many hops"),
        Dest::Dr(p) => Dest::Dr([p.as_slice(), &[port]].concat()),
        Dest::LidDr { lid, slid, path } => Dest::LidDr {
            lid: *lid,
            slid: *slid,
            path: [path.as_slice(), &[port]].concat(),
        },
        Dest::Lid(lid) => Dest::LidDr {
            lid: *lid,
            slid: diag.local().base_lid as u16,
            path: vec![0, port],
        },
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    let diag = Diag::open(&a.common).unwrap_or_else(|e| fail(&e));
    let dest = diag
        .resolve(&a.dest, &a.addr)
        .unwrap_or_else(|_| fail(&format!("can't resolve destination port {}", a.dest)));
    let port = ibdiag::parse_int(&a.portnum).unwrap_or(0) as u8;
    let r = Request::parse(&a.ops);
    let ni = node_info(&diag, &dest);
    let switch = ni.node_type == 2;
    if switch
        && port != 0
        && ["mkey", "mkeylease", "mkeyprot"]
            .iter()
            .any(|n| r.value(n).is_some())
    {
        fail("Can't set M_Key fields on switch port != 0");
    }
    let kind = if switch { "Switch" } else { "CA/RT" };
    if r.changes() {
        println!("Initial {kind} PortInfo:");
    } else {
        println!("{kind} PortInfo:");
    }
    let (pi, espeed) = port_info(&diag, &dest, port, switch);
    show(&dest, port, &pi, espeed, switch);
    if r.changes() {
        let after = set(&diag, &dest, port, pi, &r, espeed);
        println!("\nAfter PortInfo set:");
        show(&dest, port, &after, espeed, switch);
    } else if switch && port != 0 && pi.port_state == PortState::Active {
        let peer = peer_of(&diag, &dest, port);
        let pn = node_info(&diag, &peer);
        println!("Peer PortInfo:");
        let (ppi, pespeed) = port_info(&diag, &peer, pn.local_port_num, pn.node_type == 2);
        show(&peer, pn.local_port_num, &ppi, pespeed, pn.node_type == 2);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Args::command().debug_assert();
    }
}
