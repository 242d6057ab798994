//! Shows every link of the fabric, like infiniband-diags' `iblinkinfo`:
//! for each node (as the C tool lists them, last found first) each port
//! with its LID, width, speed and states, `==>` the port at the other end
//! of its link, and what the link could be (the best width and speed both
//! ends support) where it runs below that.
//!
//! The fabric is swept as `ibnetdiscover` sweeps it
//! ([`rdma_examples::discover`]). `-S`/`-G GUID` and `-D PATH` show one
//! node: the C tool sweeps one hop around it, this tool the whole fabric
//! and shows the same node with the same peers.
//!
//! `--load-cache FILE` shows the fabric of a cache file instead
//! ([`rdma_examples::fabric_cache`]: libibnetdisc's format, so that a file
//! of C `ibnetdiscover --cache` serves as well as one of ours).
//!
//! Usage: `iblinkinfo [-l] [-p] [-d] [--switches-only|--cas-only]
//! [-S GUID | -D PATH] [-o OUTSTANDING] [--load-cache FILE]`

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Parser;
use rdma::mad::PortState;
use rdma_examples::discover::{clean, Fabric, NodeRec, PortRec, Sweep, CA, SWITCH};
use rdma_examples::fabric_cache;
use rdma_examples::ibdiag::{self, Common, Diag};
use rdma_examples::linkinfo::{link_state, peer};

/// Show the links of the fabric (like iblinkinfo).
#[derive(Parser, Debug)]
#[command(name = "iblinkinfo")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Show the node that has the port of this GUID only.
    #[arg(
        short = 'S',
        long = "switch",
        visible_short_alias = 'G',
        value_name = "GUID"
    )]
    guid: Option<String>,
    /// Show the node at the end of this directed route only.
    #[arg(short = 'D', long = "Direct", value_name = "PATH")]
    direct: Option<String>,
    /// Show only the ports that are Down.
    #[arg(short = 'd', long = "down")]
    down: bool,
    /// Line mode: each link on one line, with both ends' GUIDs.
    #[arg(short = 'l', long = "line")]
    line: bool,
    /// Add the port's HOQLife and VLStallCount.
    #[arg(short = 'p', long = "additional")]
    additional: bool,
    /// Show switches only.
    #[arg(long = "switches-only", conflicts_with = "cas_only")]
    switches_only: bool,
    /// Show CAs only.
    #[arg(long = "cas-only")]
    cas_only: bool,
    /// How many SMPs may be outstanding at once during the sweep.
    #[arg(short = 'o', long = "outstanding_smps", default_value_t = 2)]
    outstanding: usize,
    /// Show the fabric of this cache file (`ibnetdiscover --cache`)
    /// instead of sweeping.
    #[arg(long = "load-cache", value_name = "FILE")]
    load_cache: Option<String>,
}

/// What the options ask to print.
struct Show {
    line: bool,
    additional: bool,
    down: bool,
}

/// The `( 4X 2.5 Gbps Active/  LinkUp)` of a port, with `-p` its
/// HOQLife and VLStallCount after it.
fn link(n: &NodeRec, p: &PortRec, show: &Show) -> String {
    let mut s = link_state(n, p);
    let info = p.info.unwrap_or_default();
    if show.additional && info.port_state != PortState::Down {
        let _ = write!(
            s,
            " (HOQ:{} VL_Stall:{})",
            info.hoq_life, info.vl_stall_count
        );
    }
    s
}

/// One port's line.
fn port_line(o: &mut String, s: &Fabric, n: &NodeRec, p: &PortRec, show: &Show) {
    let info = p.info.unwrap_or_default();
    let remote = match p.remote {
        Some(r) => peer(s, n, p, r, show.line),
        None if info.port_state == PortState::Down => "           [  ] \"\" ( )".to_string(),
        None => "    \"Port not available\"".to_string(),
    };
    if show.line {
        let _ = write!(o, "0x{:016x} \"{:>30}\" ", p.guid, clean(&n.desc));
    } else {
        o.push_str("      ");
    }
    let lid = if n.info.node_type == SWITCH {
        n.smalid
    } else {
        if !show.line {
            let _ = write!(o, "0x{:016x} ", p.guid);
        }
        p.base_lid
    };
    let _ = writeln!(
        o,
        "{lid:6} {:4}[  ] =={}==>  {remote}",
        p.num,
        link(n, p, show)
    );
}

/// A node's ports (those Down only with `-d`), after its header line
/// (none in line mode) when any is shown.
fn node(o: &mut String, s: &Fabric, n: &NodeRec, show: &Show) {
    let mut header = show.line;
    for p in n.ports.iter().skip(1).flatten() {
        let down = p.info.unwrap_or_default().port_state == PortState::Down;
        if show.down && !down {
            continue;
        }
        if !header {
            let desc = clean(&n.desc);
            match n.info.node_type {
                SWITCH => {
                    let guid = n.ports[0].as_ref().map_or(n.info.port_guid, |p0| p0.guid);
                    let _ = writeln!(o, "Switch: 0x{guid:016x} {desc}:");
                }
                CA => {
                    let _ = writeln!(o, "CA: {desc}:");
                }
                3 => {
                    let _ = writeln!(o, "Router: {desc}:");
                }
                _ => {
                    let _ = writeln!(o, "??: {desc}:");
                }
            }
            header = true;
        }
        port_line(o, s, n, p, show);
    }
}

/// The port GUID at the end of a directed route (NodeInfo:PortGUID).
fn guid_at(diag: &Diag, path: &str) -> Result<u64, String> {
    // A route that does not parse is, as for the C tool, the local node
    // (its query goes out with no address at all).
    let dest = ibdiag::Dest::parse(path, true).unwrap_or_else(|_| {
        eprintln!("ibwarn: Failed to resolve {path}; attempting full scan");
        ibdiag::Dest::Dr(vec![0])
    });
    Ok(diag.node_info(&dest)?.port_guid)
}

fn main() -> ExitCode {
    let a = Args::parse();
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("iblinkinfo", &e));
    if a.direct.is_some() && a.load_cache.is_some() {
        eprintln!("Cannot specify cache and direct route path");
        return ExitCode::from(1);
    }
    // With -D the node is asked for its NodeInfo first, as the C tool
    // does: a route that leads nowhere is an error before any sweep.
    let wanted = match (&a.guid, &a.direct) {
        (_, Some(path)) => match guid_at(&diag, path) {
            Ok(g) => Some((g, path.clone())),
            Err(_) => {
                eprintln!("Failed to get local Node Info");
                return ExitCode::from(1);
            }
        },
        (Some(g), None) => Some((ibdiag::parse_int(g).unwrap_or(0), g.clone())),
        (None, None) => None,
    };
    let s = match &a.load_cache {
        Some(file) => match fabric_cache::load(std::path::Path::new(file)) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("loading cached fabric failed");
                eprintln!("iblinkinfo: {e}");
                return ExitCode::from(1);
            }
        },
        None => match Sweep::fabric(&diag, a.outstanding, a.common.timeout_ms) {
            Some(f) => f,
            None => {
                eprintln!("discover failed");
                return ExitCode::from(1);
            }
        },
    };
    let only = if a.switches_only {
        Some(SWITCH)
    } else if a.cas_only {
        Some(CA)
    } else {
        None
    };
    let show = Show {
        line: a.line,
        additional: a.additional,
        down: a.down,
    };
    let mut o = String::new();
    match wanted {
        Some((guid, what)) => match s.node_of_port_guid(guid) {
            Some(n) if only.is_none_or(|t| t == n.info.node_type) => node(&mut o, &s, n, &show),
            _ => eprintln!("Failed to find port: {what}"),
        },
        None => {
            for n in s.nodes.iter().rev() {
                if only.is_none_or(|t| t == n.info.node_type) {
                    node(&mut o, &s, n, &show);
                }
            }
        }
    }
    print!("{o}");
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
