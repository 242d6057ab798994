//! Traces the unicast route between two ports, like infiniband-diags'
//! `ibtracert`: from this port a directed route to the source, then hop
//! by hop along the switches' linear forwarding tables to the
//! destination, each hop printed with its node. Ports by LID or by GUID
//! (`-G`).
//!
//! Usage: `ibtracert [-n] [-f] [-G] SRC DEST`

use std::process::ExitCode;

use clap::Parser;
use rdma::mad::diag::Hex;
use rdma::mad::{LinearForwardingTable, NodeDescription, NodeInfo, PortInfo, SwitchInfo};
use rdma_examples::ibdiag::{self, Addressing, Common, Dest, Diag};

/// Trace the route between two ports (like ibtracert).
#[derive(Parser, Debug)]
#[command(name = "ibtracert")]
struct Args {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    addr: Addressing,
    /// Go on when a port cannot be reached (match ports by LID).
    #[arg(short = 'f', long = "force")]
    force: bool,
    /// Simple format.
    #[arg(short = 'n', long = "no_info")]
    simple: bool,
    /// A node name map file (accepted; names come from NodeDescription).
    #[arg(long = "node-name-map", value_name = "FILE")]
    node_name_map: Option<String>,
    /// The source port: a LID, with -G a port GUID.
    src: String,
    /// The destination port.
    dest: String,
}

/// The longest route followed.
const MAXHOPS: i32 = 63;

#[derive(Clone, Default)]
struct Node {
    guid: u64,
    kind: u8,
    nports: u8,
    desc: String,
}

#[derive(Clone, Default)]
struct Port {
    guid: u64,
    num: u8,
    lid: u16,
    lmc: u8,
    state: u8,
}

#[derive(Default)]
struct Switch {
    top: u16,
    enhanced_port0: bool,
}

fn kind_name(k: u8) -> &'static str {
    match k {
        1 => "ca",
        2 => "switch",
        3 => "router",
        4 => "iwarp rnic",
        _ => "???",
    }
}

fn lid_range(p: &Port) -> String {
    format!("{}-{}", p.lid, u32::from(p.lid) + (1u32 << p.lmc) - 1)
}

struct Tracer<'a> {
    diag: &'a Diag,
    force: bool,
    verbose: bool,
}

/// Why a trace stopped (ibtracert's IBWARNs).
type Trace<T> = Result<T, String>;

impl Tracer<'_> {
    /// ibtracert's `get_node`: NodeInfo, NodeDescription and PortInfo of
    /// the port that `dest` reaches.
    fn get_node(&self, dest: &Dest) -> Option<(Node, Port)> {
        let ni = self.diag.smp_get::<NodeInfo>(0, dest).ok()?;
        let nd = self.diag.smp_get::<NodeDescription>(0, dest).ok()?;
        let pi = self.diag.smp_get::<PortInfo>(0, dest).ok()?;
        Some((
            Node {
                guid: ni.node_guid,
                kind: ni.node_type,
                nports: ni.num_ports,
                desc: ibdiag::node_desc(&nd),
            },
            Port {
                guid: ni.port_guid,
                num: ni.local_port_num,
                lid: pi.lid,
                lmc: pi.lmc,
                state: u8::from(pi.port_state),
            },
        ))
    }

    /// The output port of the switch at `dest` for `lid` (-1 when it has
    /// none to tell).
    fn switch_lookup(&self, sw: &mut Switch, dest: &Dest, lid: u16) -> i32 {
        let Ok(si) = self.diag.smp_get::<SwitchInfo>(0, dest) else {
            return -1;
        };
        sw.top = si.linear_fdb_top;
        sw.enhanced_port0 = si.enhanced_port0;
        if lid >= si.linear_fdb_cap && lid > si.linear_fdb_top {
            return -1;
        }
        let (block, i) = LinearForwardingTable::block_of(lid);
        match self.diag.smp_get::<LinearForwardingTable>(block, dest) {
            Ok(t) => i32::from(t.ports[i]),
            Err(_) => -1,
        }
    }

    fn same(&self, a: &Port, b: &Port) -> bool {
        a.guid == b.guid || (self.force && a.lid == b.lid)
    }

    fn dump_end(&self, dump: u8, prompt: &str, node: &Node, port: &Port) {
        let num = if node.kind == 2 { 0 } else { port.num };
        match dump {
            0 => {}
            1 => println!("{prompt} {{{}}}[{num}]", Hex(node.guid, 8)),
            _ => println!(
                "{prompt} {} {{{}}} portnum {num} lid {} \"{}\"",
                kind_name(node.kind),
                Hex(node.guid, 8),
                lid_range(port),
                node.desc
            ),
        }
    }

    fn dump_route(&self, dump: u8, node: &Node, out: i32, port: &Port) {
        if dump == 0 && !self.verbose {
            return;
        }
        if dump == 1 {
            println!("[{out}] -> {{{}}}[{}]", Hex(port.guid, 8), port.num);
        } else {
            println!(
                "[{out}] -> {} port {{{}}}[{}] lid {} \"{}\"",
                kind_name(node.kind),
                Hex(port.guid, 8),
                port.num,
                lid_range(port),
                node.desc
            );
        }
    }

    /// ibtracert's `find_route`: from the port at the directed route
    /// `from` (extended as the trace goes) to the port of LID `to`.
    fn find_route(&self, from: &mut Vec<u8>, to: u16, dump: u8) -> Trace<()> {
        let to_dest = Dest::Lid(to);
        let ends = self
            .get_node(&Dest::Dr(from.clone()))
            .zip(self.get_node(&to_dest));
        let ((mut node, mut port), (_, toport)) = match ends {
            Some(e) => e,
            None if !self.force => return Err("can't reach to/from ports".into()),
            None => {
                eprintln!("ibwarn: find_route: can't reach to/from ports");
                eprintln!("ibwarn: find_route: Force: look for lid {to}");
                let from_end = self.get_node(&Dest::Dr(from.clone())).unwrap_or_default();
                let to_port = Port {
                    lid: to,
                    ..Port::default()
                };
                (from_end, (Node::default(), to_port))
            }
        };
        let fromport = port.clone();
        let mut portnum = port.num;
        let mut sw = Switch::default();
        let mut next_out = 255i32;
        let bad_table = |node: &Node, out: i32, sw: &Switch| {
            format!(
                "Bad forwarding table entry found at: node \"{}\" lid entry {to} is {out} (top {})",
                node.desc, sw.top
            )
        };
        self.dump_end(dump, "From", &node, &port);
        if node.kind == 2 {
            next_out = self.switch_lookup(&mut sw, &Dest::Dr(from.clone()), to);
            if next_out < 0 || next_out > i32::from(node.nports) {
                return Err(bad_table(&node, next_out, &sw));
            }
        }
        let inactive = |node: &Node, port: &Port, sw: &Switch| {
            port.state != 4 && (node.kind != 2 || sw.enhanced_port0)
        };
        let mut maxhops = MAXHOPS;
        loop {
            let left = maxhops;
            maxhops -= 1;
            if left == 0 {
                break;
            }
            if inactive(&node, &port, &sw) {
                return Err(format!(
                    "Bad port state found: node \"{}\" port {portnum} state {}",
                    node.desc, port.state
                ));
            }
            if self.same(&port, &toport) {
                break;
            }
            let (nextnode, mut nextport);
            let outport;
            if node.kind == 2 {
                outport = next_out;
                extend(from, outport as u8)?;
                (nextnode, nextport) = self
                    .get_node(&Dest::Dr(from.clone()))
                    .ok_or_else(|| format!("can't reach port at {}", describe(from)))?;
                if outport == 0 {
                    if !self.same(&nextport, &toport) {
                        return Err(bad_table(&node, outport, &sw));
                    }
                    break;
                }
            } else {
                outport = i32::from(portnum);
                if !self.same(&port, &fromport) {
                    return Err(format!(
                        "can't continue: reached CA or router port {:x}, lid {}",
                        port.guid, port.lid
                    ));
                }
                let mut back = None;
                if from.len() > 1 {
                    back = from.pop();
                } else if portnum != 0 {
                    extend(from, portnum)?;
                }
                (nextnode, nextport) = self
                    .get_node(&Dest::Dr(from.clone()))
                    .ok_or_else(|| format!("can't reach port at {}", describe(from)))?;
                if let Some(b) = back {
                    nextport.num = b;
                }
            }
            if nextnode.kind == 2 {
                next_out = self.switch_lookup(&mut sw, &Dest::Dr(from.clone()), to);
                if next_out < 0 || next_out > i32::from(nextnode.nports) {
                    return Err(bad_table(&node, next_out, &sw));
                }
            }
            port = nextport;
            if inactive(&nextnode, &port, &sw) {
                return Err(format!(
                    "Bad out port state found: node \"{}\" outport {outport} state {}",
                    node.desc, port.state
                ));
            }
            node = nextnode;
            portnum = port.num;
            self.dump_route(dump, &node, outport, &port);
        }
        if maxhops <= 0 {
            return Err(format!("no route found after {MAXHOPS} hops"));
        }
        self.dump_end(dump, "To", &node, &port);
        Ok(())
    }
}

/// One more hop on a directed route (at most 62, as libibmad's path).
fn extend(path: &mut Vec<u8>, port: u8) -> Trace<()> {
    if path.len() + 1 >= 64 {
        return Err("Direct path too long!".into());
    }
    path.push(port);
    Ok(())
}

fn describe(path: &[u8]) -> String {
    Dest::Dr(path.to_vec()).describe()
}

fn get_route(t: &Tracer, a: &Args, dump: u8) -> Trace<()> {
    let lid_of = |s: &str, which: &str| match t.diag.resolve(s, &a.addr) {
        Ok(Dest::Lid(l)) => Ok(l),
        _ => Err(format!("can't resolve {which} port {s}")),
    };
    let src = lid_of(&a.src, "source")?;
    let dst = lid_of(&a.dest, "destination")?;
    let mut path = vec![0u8];
    t.find_route(&mut path, src, 0)
        .map_err(|e| format!("{e}\nibwarn: get_route: can't find a route to the src port"))?;
    t.find_route(&mut path, dst, dump)
        .map_err(|e| format!("{e}\nibwarn: get_route: can't find a route from src to dest"))
}

fn main() -> ExitCode {
    let a = Args::parse();
    if a.addr.direct {
        eprintln!("ibtracert: invalid option -- 'D'");
        return ExitCode::from(2);
    }
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("ibtracert", &e));
    let t = Tracer {
        diag: &diag,
        force: a.force,
        verbose: a.addr.verbose > 0,
    };
    let dump = if a.simple { 1 } else { 2 };
    if let Err(e) = get_route(&t, &a, dump) {
        eprintln!("ibwarn: {e}");
        ibdiag::exit_error("ibtracert", "Failed to get route information");
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
