//! The fabric sweep that `ibnetdiscover`, `iblinkinfo` and
//! `ibqueryerrors` share: libibnetdisc's, NodeInfo along a directed route,
//! then for a new node its NodeDescription (and for a switch SwitchInfo
//! and port 0's PortInfo, then every port's), and through each port that
//! is LinkUp (a switch's, other than the one the SMP came in by) NodeInfo
//! one hop further. SMPs go out from a FIFO queue with at most
//! `outstanding` of them on the wire (2 in the C tools), and are handled
//! as their responses arrive, so that nodes are found in the same order
//! as the C tools find them (which list them last found first).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use rdma::mad::{
    Attribute, Mad, Method, NodeDescription, NodeInfo, PhysPortState, PortInfo, SwitchInfo,
    PERMISSIVE_LID,
};

use crate::ibdiag::{self, smi_address, Diag};

/// NodeInfo:NodeType of a switch.
pub const SWITCH: u8 = 2;
/// NodeInfo:NodeType of a CA.
pub const CA: u8 = 1;
/// NodeInfo:NodeType of a router.
pub const ROUTER: u8 = 3;
/// PortInfo:CapabilityMask IsExtendedSpeedsSupported.
pub const CAP_EXT_SPEEDS: u32 = 1 << 14;

/// A port the sweep found.
#[derive(Default, Clone)]
pub struct PortRec {
    pub num: u8,
    pub guid: u64,
    pub base_lid: u16,
    pub lmc: u8,
    pub info: Option<PortInfo>,
    pub remote: Option<(usize, u8)>,
}

/// A node the sweep found, with its ports (index: port number; boxed, so
/// that a node of many ports that are not there costs a pointer each).
pub struct NodeRec {
    pub info: NodeInfo,
    /// NodeDescription as text (up to the first NUL).
    pub desc: String,
    /// NodeDescription as the node answered it.
    pub description: NodeDescription,
    pub smalid: u16,
    pub smalmc: u8,
    pub enhsp0: bool,
    /// A switch's SwitchInfo.
    pub switch_info: Option<SwitchInfo>,
    /// The directed route by which it was found first.
    pub path: Vec<u8>,
    pub ports: Vec<Option<Box<PortRec>>>,
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

/// A fabric as a sweep found it (or as a cache file holds it).
#[derive(Default)]
pub struct Fabric {
    /// The nodes, in the order they were found.
    pub nodes: Vec<NodeRec>,
    /// The local node and port the sweep started from.
    pub from: Option<(usize, u8)>,
    /// The most hops a NodeInfo probe took (libibnetdisc's
    /// `maxhops_discovered`, counted as it counts them).
    pub max_hops: u32,
}

impl Fabric {
    /// The port a link leads to (linked ports always exist).
    pub fn port(&self, r: (usize, u8)) -> (&NodeRec, &PortRec) {
        let n = &self.nodes[r.0];
        let p = n.ports[usize::from(r.1)].as_deref();
        (n, p.expect("a linked port exists"))
    }

    /// The port whose LIDs (its base LID and the LMC's range; a switch's
    /// port 0's) hold `lid`, and its node.
    pub fn port_of_lid(&self, lid: u32) -> Option<(&NodeRec, &PortRec)> {
        self.nodes.iter().find_map(|n| {
            let ports = if n.info.node_type == SWITCH {
                &n.ports[..1]
            } else {
                &n.ports[1..]
            };
            ports.iter().flatten().find_map(|p| {
                let base = u32::from(p.base_lid);
                let span = 1u32 << p.lmc.min(7);
                (base != 0 && (base..base + span).contains(&lid)).then_some((n, &**p))
            })
        })
    }

    /// The node that has a port of this GUID (a switch's ports share
    /// port 0's).
    pub fn node_of_port_guid(&self, guid: u64) -> Option<&NodeRec> {
        self.nodes
            .iter()
            .find(|n| n.ports.iter().flatten().any(|p| p.guid == guid))
    }
}

/// libibnetdisc's sweep (see the module's docs) and what it found.
pub struct Sweep<'a> {
    diag: &'a Diag,
    max_out: usize,
    timeout: Duration,
    queue: VecDeque<Smp>,
    wire: HashMap<u32, Smp>,
    /// What it found.
    pub fabric: Fabric,
    by_guid: HashMap<u64, usize>,
    /// How many SMPs were sent.
    pub sent: usize,
}

impl<'a> Sweep<'a> {
    /// A sweep from `diag`'s port with at most `outstanding` SMPs on the
    /// wire, each try waiting `timeout`.
    pub fn new(diag: &'a Diag, outstanding: usize, timeout: Duration) -> Self {
        Sweep {
            diag,
            max_out: outstanding.max(1),
            timeout,
            queue: VecDeque::new(),
            wire: HashMap::new(),
            fabric: Fabric::default(),
            by_guid: HashMap::new(),
            sent: 0,
        }
    }

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

    /// The whole fabric as a sweep from `diag`'s port finds it (at most
    /// `outstanding` SMPs on the wire, each try waiting `timeout_ms`, at
    /// least 1); `None` when the sweep failed or found no local node.
    pub fn fabric(diag: &Diag, outstanding: usize, timeout_ms: u64) -> Option<Fabric> {
        let mut s = Sweep::new(diag, outstanding, Duration::from_millis(timeout_ms.max(1)));
        match s.run() {
            Ok(()) if s.fabric.from.is_some() => Some(s.fabric),
            _ => None,
        }
    }

    /// Sweeps the fabric: every node reachable from the local port.
    pub fn run(&mut self) -> ibdiag::Result<()> {
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
                self.fabric.nodes[n].desc = d.text();
                self.fabric.nodes[n].description = d;
                Ok(())
            }
            Then::SwitchInfo(n) => {
                let s = SwitchInfo::decode(data).map_err(|e| e.to_string())?;
                self.fabric.nodes[n].enhsp0 = s.enhanced_port0;
                self.fabric.nodes[n].switch_info = Some(s);
                Ok(())
            }
            Then::PortInfo(n, p) => {
                let pi = PortInfo::decode(data).map_err(|e| e.to_string())?;
                self.port_info(&smp.path, n, p, pi)?;
                if p == 0 {
                    for i in 1..=self.fabric.nodes[n].info.num_ports {
                        self.issue(&smp.path, PortInfo::ID, u32::from(i), Then::PortInfo(n, i))?;
                    }
                }
                Ok(())
            }
        }
    }

    fn port_mut(&mut self, n: usize, p: u8) -> &mut PortRec {
        let guid = self.fabric.nodes[n].info.port_guid;
        let slot = &mut self.fabric.nodes[n].ports[usize::from(p)];
        slot.get_or_insert_with(|| {
            Box::new(PortRec {
                num: p,
                guid,
                ..PortRec::default()
            })
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
                self.fabric.nodes.push(NodeRec {
                    info: ni,
                    desc: String::new(),
                    description: NodeDescription([0; 64]),
                    smalid: 0,
                    smalmc: 0,
                    enhsp0: false,
                    switch_info: None,
                    path: path.to_vec(),
                    ports: vec![None; usize::from(ni.num_ports) + 1],
                });
                let n = self.fabric.nodes.len() - 1;
                self.by_guid.insert(ni.node_guid, n);
                (n, true)
            }
        };
        let p = ni.local_port_num;
        if usize::from(p) >= self.fabric.nodes[n].ports.len() {
            return Ok(());
        }
        self.port_mut(n, p).guid = ni.port_guid;
        match from {
            None => self.fabric.from = Some((n, p)),
            Some((rn, rp)) => {
                if self.fabric.nodes[rn].ports[usize::from(rp)].is_none() {
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
                if let Some(Some(other)) = self.fabric.nodes[on].ports.get_mut(usize::from(op)) {
                    other.remote = None;
                }
            }
        }
        self.port_mut(a.0, a.1).remote = Some(b);
        self.port_mut(b.0, b.1).remote = Some(a);
    }

    fn port_info(&mut self, path: &[u8], n: usize, p: u8, pi: PortInfo) -> ibdiag::Result<()> {
        if usize::from(p) >= self.fabric.nodes[n].ports.len() {
            return Ok(());
        }
        let is_switch = self.fabric.nodes[n].info.node_type == SWITCH;
        let (smalid, smalmc) = (self.fabric.nodes[n].smalid, self.fabric.nodes[n].smalmc);
        let port = self.port_mut(n, p);
        port.info = Some(pi);
        port.num = p;
        port.base_lid = pi.lid;
        port.lmc = pi.lmc;
        if p == 0 {
            self.fabric.nodes[n].smalid = pi.lid;
            self.fabric.nodes[n].smalmc = pi.lmc;
        } else if is_switch {
            port.base_lid = smalid;
            port.lmc = smalmc;
        }
        let from = self.fabric.from == Some((n, p));
        if p != 0
            && pi.port_physical_state == PhysPortState::LinkUp
            && ((is_switch && p != pi.local_port_num) || from)
        {
            let mut next = path.to_vec();
            if !is_switch && self.fabric.from.map(|f| f.0) == Some(n) && path.len() > 2 {
                // libibnetdisc counts a step back as a hop found.
                next.pop();
                self.fabric.max_hops += 1;
            } else {
                if next.len() > 63 {
                    return Ok(());
                }
                next.push(p);
                // The hops of the route (its first byte is the 0 of the
                // local port), counted up by one as libibnetdisc counts.
                if (next.len() - 1) as u32 > self.fabric.max_hops {
                    self.fabric.max_hops += 1;
                }
            }
            self.issue(&next, NodeInfo::ID, 0, Then::NodeInfo(Some((n, p))))?;
        }
        Ok(())
    }
}

/// The retries of each SMP.
pub const RETRIES: u32 = 3;

/// NodeDescription as `clean_nodedesc` leaves it: what is not printable
/// is a space.
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { ' ' })
        .collect()
}
