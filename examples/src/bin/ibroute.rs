//! Dumps a switch's forwarding tables, like infiniband-diags' `ibroute`:
//! the linear forwarding table (each LID's output port, with the node
//! behind the LID) or with `-M` the multicast forwarding table (each
//! MLID's port mask), of a switch given by LID, GUID (`-G`) or directed
//! route (`-D`).
//!
//! Usage: `ibroute [-a] [-n] [-M] DEST [STARTLID [ENDLID]]`

use std::process::ExitCode;

use clap::Parser;
use rdma::mad::{NodeDescription, NodeInfo, PortInfo, SwitchInfo};
use rdma_examples::fts::{self, LidPort, Options, Switch};
use rdma_examples::ibdiag::{self, Addressing, Common, Dest, Diag};

/// Dump a switch's unicast or multicast forwarding table (like ibroute).
#[derive(Parser, Debug)]
#[command(name = "ibroute")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    addr: Addressing,
    /// Show all LIDs, even those with invalid output ports.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Do not resolve the destinations (simple format).
    #[arg(short = 'n', long = "no_dests")]
    brief: bool,
    /// Show the multicast forwarding table.
    #[arg(short = 'M', long = "Multicast")]
    multicast: bool,
    /// A node name map file (accepted; names come from NodeDescription).
    #[arg(long = "node-name-map", value_name = "FILE")]
    node_name_map: Option<String>,
    /// The switch: a LID, with -G a port GUID, with -D a directed route.
    dest: String,
    /// The first LID to dump.
    startlid: Option<String>,
    /// The last LID to dump.
    endlid: Option<String>,
}

/// ibroute's `check_switch`: NodeInfo, NodeDescription and SwitchInfo of
/// a node that must be a switch.
fn check_switch(diag: &Diag, dest: Dest) -> Result<Switch, &'static str> {
    let ni = diag
        .node_info(&dest)
        .map_err(|_| "node info failed: valid addr?")?;
    let nd = diag
        .smp_get::<NodeDescription>(0, &dest)
        .map_err(|_| "node desc failed")?;
    if ni.node_type != 2 {
        return Err("not a switch");
    }
    let info = diag
        .smp_get::<SwitchInfo>(0, &dest)
        .map_err(|_| "switch info failed: is a switch node?")?;
    Ok(Switch {
        nports: u32::from(ni.num_ports),
        guid: ni.node_guid,
        desc: ibdiag::node_desc(&nd),
        info,
        at: dest.describe(),
        dest,
    })
}

/// The port behind a LID, asked of the LID itself: its NodeDescription,
/// PortInfo and NodeInfo.
fn lid_port(diag: &Diag, lid: u32) -> Option<LidPort> {
    let dest = Dest::Lid(lid as u16);
    let nd = diag.smp_get::<NodeDescription>(0, &dest).ok()?;
    let pi = diag.smp_get::<PortInfo>(0, &dest).ok()?;
    let ni = diag.smp_get::<NodeInfo>(0, &dest).ok()?;
    Some(LidPort {
        node_type: ni.node_type,
        port_guid: ni.port_guid,
        base_lid: pi.lid,
        lmc: pi.lmc,
        desc: ibdiag::node_desc(&nd),
    })
}

/// A block that cannot be read ends the dump.
fn stop(_: &Switch, _: &str, modifier: u32, e: &ibdiag::Error) -> Result<(), ()> {
    eprintln!("SubnGet() failed; {e} AM 0x{modifier:x}");
    Err(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    let num = |s: &Option<String>| {
        s.as_deref()
            .map_or(0, |v| ibdiag::parse_int(v).unwrap_or(0) as u32)
    };
    let (start, end) = (num(&a.startlid), num(&a.endlid));
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("ibroute", &e));
    let dest = diag.resolve(&a.dest, &a.addr).unwrap_or_else(|_| {
        ibdiag::exit_error(
            "ibroute",
            &format!("can't resolve destination port {}", a.dest),
        )
    });
    let sw = check_switch(&diag, dest)
        .unwrap_or_else(|e| ibdiag::exit_error("ibroute", &format!("dump tables: {e}")));
    let o = Options {
        all: a.all,
        brief: a.brief,
        verbose: a.addr.verbose > 0,
    };
    if a.multicast {
        fts::dump_multicast(&diag, o, &sw, (start, end), &stop);
    } else {
        let unknown = ": (unknown node and type)";
        let mut find = |lid| lid_port(&diag, lid);
        fts::dump_unicast(&diag, o, &sw, (start, end), &mut find, unknown, &stop);
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
