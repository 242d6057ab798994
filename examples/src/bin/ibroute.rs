//! Dumps a switch's forwarding tables, like infiniband-diags' `ibroute`:
//! the linear forwarding table (each LID's output port, with the node
//! behind the LID) or with `-M` the multicast forwarding table (each
//! MLID's port mask), of a switch given by LID, GUID (`-G`) or directed
//! route (`-D`).
//!
//! Usage: `ibroute [-a] [-n] [-M] DEST [STARTLID [ENDLID]]`

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Parser;
use rdma::mad::diag::{Hex, NodeType};
use rdma::mad::{
    LinearForwardingTable, MulticastForwardingTable, NodeDescription, NodeInfo, PortInfo,
    SwitchInfo,
};
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

/// The highest unicast LID.
const MAX_UCAST_LID: u32 = 0xbfff;
/// The first and the highest multicast LID.
const MIN_MCAST_LID: u32 = 0xc000;
const MAX_MCAST_LID: u32 = 0xfffe;

struct Switch {
    nports: u32,
    guid: u64,
    desc: String,
    info: SwitchInfo,
}

/// ibroute's `check_switch`: NodeInfo, NodeDescription and SwitchInfo of
/// a node that must be a switch.
fn check_switch(diag: &Diag, dest: &Dest) -> Result<Switch, &'static str> {
    let ni = diag
        .node_info(dest)
        .map_err(|_| "node info failed: valid addr?")?;
    let nd = diag
        .smp_get::<NodeDescription>(0, dest)
        .map_err(|_| "node desc failed")?;
    if ni.node_type != 2 {
        return Err("not a switch");
    }
    let info = diag
        .smp_get::<SwitchInfo>(0, dest)
        .map_err(|_| "switch info failed: is a switch node?")?;
    Ok(Switch {
        nports: u32::from(ni.num_ports),
        guid: ni.node_guid,
        desc: ibdiag::node_desc(&nd),
        info,
    })
}

/// What `dump_lid` remembers between LIDs: the LMC range of the last port
/// resolved and its GUID.
#[derive(Default)]
struct LidCache {
    base: u32,
    last: u32,
    port_guid: u64,
}

impl LidCache {
    /// The destination column of `lid` (ibroute's `dump_lid`).
    fn describe(&mut self, diag: &Diag, lid: u32, valid: bool) -> String {
        if lid <= self.last {
            return if !valid {
                format!(": (path #{} - illegal port)", lid - self.base)
            } else if self.port_guid == 0 {
                format!(
                    ": (path #{} out of {})",
                    lid - self.base + 1,
                    self.last - self.base + 1
                )
            } else {
                format!(
                    ": (path #{} out of {}: portguid {})",
                    lid - self.base + 1,
                    self.last - self.base + 1,
                    Hex(self.port_guid, 8)
                )
            };
        }
        if !valid {
            return ": (illegal port)".into();
        }
        self.port_guid = 0;
        let dest = Dest::Lid(lid as u16);
        let nd = diag.smp_get::<NodeDescription>(0, &dest);
        let pi = nd
            .as_ref()
            .ok()
            .and_then(|_| diag.smp_get::<PortInfo>(0, &dest).ok());
        let ni = pi
            .as_ref()
            .and_then(|_| diag.smp_get::<NodeInfo>(0, &dest).ok());
        let (Ok(nd), Some(pi), Some(ni)) = (nd, pi, ni) else {
            return ": (unknown node and type)".into();
        };
        self.port_guid = ni.port_guid;
        if pi.lmc > 0 {
            self.base = u32::from(pi.lid);
            self.last = self.base + (1 << pi.lmc) - 1;
        }
        format!(
            ": ({} portguid {}: '{}')",
            NodeType(ni.node_type),
            Hex(ni.port_guid, 8),
            ibdiag::node_desc(&nd)
        )
    }
}

/// The first line of a table: `Unicast lids [0x1-0x6] of switch Lid 3 guid
/// 0x... (Switch2):` (`kind` its first words).
fn table_header(kind: &str, start: u32, end: u32, dest: &Dest, sw: &Switch) {
    println!(
        "{kind} [0x{start:x}-0x{end:x}] of switch {} guid {} ({}):",
        dest.describe(),
        Hex(sw.guid, 8),
        sw.desc
    );
}

fn dump_unicast(
    diag: &Diag,
    a: &Args,
    dest: &Dest,
    start: u32,
    end: u32,
) -> Result<(), &'static str> {
    let sw = check_switch(diag, dest)?;
    let top = u32::from(sw.info.linear_fdb_top);
    let mut end = if end == 0 || end > top { top } else { end };
    if end > MAX_UCAST_LID {
        eprintln!("ibwarn: illegal lft top {end}, truncate to {MAX_UCAST_LID}");
        end = MAX_UCAST_LID;
    }
    table_header("Unicast lids", start, end, dest, &sw);
    println!("  Lid  Out   Destination");
    println!("       Port     Info ");
    let mut cache = LidCache::default();
    let mut n = 0;
    // As ibroute: the blocks up to endlid rounded up to a block, so an
    // endlid on a block's first LID leaves that block out.
    for block in start / 64..end.div_ceil(64) {
        let lft = match diag.smp_get::<LinearForwardingTable>(block, dest) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("SubnGet() failed; {e} AM 0x{block:x}");
                return Ok(());
            }
        };
        let first = (block * 64).max(start);
        let last = (block * 64 + 64).min(end + 1);
        for lid in first..last {
            let out = u32::from(lft.ports[(lid % 64) as usize]);
            let valid = out <= sw.nports;
            if !valid && !a.all {
                continue;
            }
            let info = if a.brief {
                String::new()
            } else {
                cache.describe(diag, lid, valid)
            };
            println!("0x{lid:04x} {out:03} {info}");
            n += 1;
        }
    }
    println!("{n} {}lids dumped ", if a.all { "" } else { "valid " });
    Ok(())
}

/// The port-mask column of an MLID (ibroute's `dump_mlid`): `None` when
/// every mask is empty and not `-a`.
fn mlid_line(a: &Args, nports: u32, masks: &[u16]) -> Option<String> {
    let nonzero = masks.iter().any(|&m| m != 0);
    if !nonzero && !a.all {
        return None;
    }
    let mut s = String::new();
    if a.brief {
        for m in masks {
            let _ = write!(s, "{m:04x}");
        }
    } else {
        for i in 0..=nports as usize {
            s.push(if masks[i / 16] & (1 << (i % 16)) != 0 {
                'x'
            } else {
                ' '
            });
            s.push(' ');
        }
    }
    Some(s)
}

fn dump_multicast(
    diag: &Diag,
    a: &Args,
    dest: &Dest,
    start: u32,
    end: u32,
) -> Result<(), &'static str> {
    let sw = check_switch(diag, dest)?;
    let cap = u32::from(sw.info.multicast_fdb_cap);
    let top = u32::from(sw.info.multicast_fdb_top);
    let mut end = if end == 0 || end > MIN_MCAST_LID + cap - 1 {
        (MIN_MCAST_LID + cap).wrapping_sub(1)
    } else {
        end
    };
    if !a.all && top != 0 && top < end {
        if top < MIN_MCAST_LID - 1 {
            eprintln!("ibwarn: illegal top mlid {top:x}");
        } else {
            end = top;
        }
    }
    let start = if start == 0 {
        MIN_MCAST_LID
    } else if start < MIN_MCAST_LID {
        eprintln!("ibwarn: illegal start mlid {start:x}, set to {MIN_MCAST_LID:x}");
        MIN_MCAST_LID
    } else {
        start
    };
    if end > MAX_MCAST_LID {
        eprintln!("ibwarn: illegal end mlid {end:x}, truncate to {MAX_MCAST_LID:x}");
        end = MAX_MCAST_LID;
    }
    table_header("Multicast mlids", start, end, dest, &sw);
    if a.brief {
        println!(" MLid       Port Mask");
    } else {
        if sw.nports > 9 {
            let tens: String = (0..=sw.nports)
                .map(|i| {
                    if i % 10 != 0 {
                        "  ".to_string()
                    } else {
                        format!("{} ", char::from(b'0' + (i / 10) as u8))
                    }
                })
                .collect();
            println!("            {tens}");
        }
        let ones: String = (0..=sw.nports).map(|i| format!("{} ", i % 10)).collect();
        println!("     Ports: {ones}");
        println!(" MLid");
    }
    if a.addr.verbose > 0 {
        println!("Switch multicast mlid capability is {cap} top is 0x{top:x}");
    }
    let chunks = (sw.nports + 1).div_ceil(16) as usize;
    let per = MulticastForwardingTable::ENTRIES as u32;
    let mut n = 0;
    for block in start / per..=end / per {
        let mut tables = Vec::with_capacity(chunks);
        for j in 0..chunks {
            let modifier = (block - MIN_MCAST_LID / per) | ((j as u32) << 28);
            match diag.smp_get::<MulticastForwardingTable>(modifier, dest) {
                Ok(t) => tables.push(t),
                Err(e) => {
                    eprintln!("SubnGet() failed; {e} AM 0x{modifier:x}");
                    return Ok(());
                }
            }
        }
        let first = (block * per).max(start);
        let last = (block * per + per).min(end + 1);
        for mlid in first..last {
            let i = (mlid % per) as usize;
            let masks: Vec<u16> = tables.iter().map(|t| t.port_masks[i]).collect();
            if let Some(s) = mlid_line(a, sw.nports, &masks) {
                println!("0x{mlid:04x}      {s}");
                n += 1;
            }
        }
    }
    println!("{n} {}mlids dumped ", if a.all { "" } else { "valid " });
    Ok(())
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
    let r = if a.multicast {
        dump_multicast(&diag, &a, &dest, start, end)
    } else {
        dump_unicast(&diag, &a, &dest, start, end)
    };
    if let Err(e) = r {
        ibdiag::exit_error("ibroute", &format!("dump tables: {e}"));
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
