//! Dumps the forwarding tables of every switch of the fabric, like
//! infiniband-diags' `dump_fts`: the fabric swept as `ibnetdiscover`
//! sweeps it ([`rdma_examples::discover`]), then each switch's linear (or
//! with `-M` multicast) forwarding table as `ibroute` prints it, read
//! along the directed route the switch was found by, with the port behind
//! each LID taken from the sweep.
//!
//! Usage: `dump_fts [-a] [-n] [-M] [STARTLID [ENDLID]]`

use std::process::ExitCode;

use clap::Parser;
use rdma_examples::discover::{clean, Sweep, SWITCH};
use rdma_examples::fts::{self, LidPort, Options, Switch};
use rdma_examples::ibdiag::{self, Common, Dest, Diag};

/// Dump the forwarding tables of every switch (like dump_fts).
#[derive(Parser, Debug)]
#[command(name = "dump_fts")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Show all LIDs, even those with invalid output ports.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Do not resolve the destinations (simple format).
    #[arg(short = 'n', long = "no_dests")]
    brief: bool,
    /// Show the multicast forwarding tables.
    #[arg(short = 'M', long = "Multicast")]
    multicast: bool,
    /// More output.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// A node name map file (accepted; names come from NodeDescription).
    #[arg(long = "node-name-map", value_name = "FILE")]
    node_name_map: Option<String>,
    /// The first LID to dump.
    startlid: Option<String>,
    /// The last LID to dump.
    endlid: Option<String>,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let num = |s: &Option<String>| {
        s.as_deref()
            .map_or(0, |v| ibdiag::parse_int(v).unwrap_or(0) as u32)
    };
    let range = (num(&a.startlid), num(&a.endlid));
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("dump_fts", &e));
    let Some(fabric) = Sweep::fabric(&diag, 2, a.common.timeout_ms) else {
        eprintln!("Failed to discover fabric");
        return ExitCode::from(255);
    };
    let o = Options {
        all: a.all,
        brief: a.brief,
        verbose: a.verbose > 0,
    };
    let mut find = |lid| {
        fabric.port_of_lid(lid).map(|(n, p)| LidPort {
            node_type: n.info.node_type,
            port_guid: p.guid,
            base_lid: p.base_lid,
            lmc: p.lmc,
            desc: clean(&n.desc),
        })
    };
    for n in fabric
        .nodes
        .iter()
        .rev()
        .filter(|n| n.info.node_type == SWITCH)
    {
        let hops: Vec<String> = n.path.iter().map(u8::to_string).collect();
        let sw = Switch {
            nports: u32::from(n.info.num_ports),
            guid: n.info.node_guid,
            desc: clean(&n.desc),
            info: n.switch_info.unwrap_or_default(),
            dest: Dest::Dr(n.path.clone()),
            at: format!("DR path slid 0; dlid 0; {}", hops.join(",")),
        };
        // A block that cannot be read is reported and the dump goes on.
        let smalid = n.smalid;
        let go_on = |sw: &Switch, table: &str, modifier: u32, e: &ibdiag::Error| {
            eprintln!(
                "SubnGet({table}) failed on switch '{}' {} Node GUID 0x{:x} SMA LID {smalid}; {e} AM 0x{modifier:x}",
                sw.desc, sw.at, sw.guid
            );
            Ok(())
        };
        if a.multicast {
            fts::dump_multicast(&diag, o, &sw, range, &go_on);
        } else {
            let unknown = ": (node info not available fabric scan)";
            fts::dump_unicast(&diag, o, &sw, range, &mut find, unknown, &go_on);
        }
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
