//! The subnet as a subnet manager sees it, in pure Rust: the topology that a
//! directed-route sweep discovers (nodes by GUID, their ports and the links
//! between them), LIDs assigned once per port GUID and kept across sweeps,
//! and minimum-hop unicast routing into linear forwarding tables, as
//! OpenSM's default routing engine computes them.
//!
//! ```
//! use rdma_sm::subnet::{Lids, NodeKind, Topology};
//!
//! // Two switches joined by two parallel links, an HCA on each.
//! let mut t = Topology::new();
//! let s1 = t.add_node(0x10, NodeKind::Switch, 4);
//! let s2 = t.add_node(0x20, NodeKind::Switch, 4);
//! let h1 = t.add_node(0x1000, NodeKind::Ca, 1);
//! let h2 = t.add_node(0x2000, NodeKind::Ca, 1);
//! t.link(s1, 1, s2, 1)?;
//! t.link(s1, 2, s2, 2)?;
//! t.link(s1, 3, h1, 1)?;
//! t.link(s2, 3, h2, 1)?;
//! let mut lids = Lids::new();
//! lids.assign(&t);
//! let routes = t.min_hop_routes(&lids);
//! let h2_lid = lids.of(&t, h2, 1).unwrap();
//! // Toward s2, on one of the parallel links (s2's own LID took the other).
//! assert_eq!(routes.port(s1, h2_lid), Some(2));
//! assert_eq!(routes.port(s1, lids.of(&t, s2, 0).unwrap()), Some(1));
//! assert_eq!(routes.port(s2, h2_lid), Some(3)); // the HCA's own link
//! # Ok::<(), rdma_sm::subnet::Error>(())
//! ```

use std::collections::{HashMap, VecDeque};

pub mod cdg;
mod ftree;
mod lids;
mod updn;

pub use ftree::FatTreeError;
pub use lids::{Lids, MAX_LMC, MAX_UNICAST_LID};
pub use updn::UpDownError;

/// What went wrong building a topology.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A port number beyond the node's ports (or 0 on a CA, whose ports
    /// start at 1).
    #[error("node {guid:#018x} has no port {port} (it has {ports})")]
    NoSuchPort {
        /// The node.
        guid: u64,
        /// The port asked for.
        port: u8,
        /// Its number of ports.
        ports: u8,
    },
    /// A port already linked to another peer.
    #[error("port {port} of node {guid:#018x} is already linked elsewhere")]
    PortTaken {
        /// The node.
        guid: u64,
        /// The port.
        port: u8,
    },
    /// A node linked to itself through one port.
    #[error("port {port} of node {guid:#018x} cannot be linked to itself")]
    SelfLink {
        /// The node.
        guid: u64,
        /// The port.
        port: u8,
    },
}

/// The kind of a node (NodeInfo's NodeType).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A channel adapter (NodeType 1): each port is an end port with a LID.
    Ca,
    /// A switch (NodeType 2): one LID, that of its management port 0.
    Switch,
    /// A router (NodeType 3): treated as a CA for LIDs and routes.
    Router,
}

impl NodeKind {
    /// The kind of NodeInfo's NodeType, if it is one.
    pub fn from_node_type(t: u8) -> Option<NodeKind> {
        match t {
            1 => Some(NodeKind::Ca),
            2 => Some(NodeKind::Switch),
            3 => Some(NodeKind::Router),
            _ => None,
        }
    }
}

/// A node's index in its [`Topology`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// The far end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The node.
    pub node: NodeId,
    /// Its port.
    pub port: u8,
}

/// A node: its GUID, kind, ports and links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// NodeGUID.
    pub guid: u64,
    /// Switch, CA or router.
    pub kind: NodeKind,
    /// NumPorts (a switch's external ports; port 0 is its management port).
    pub num_ports: u8,
    /// Port GUIDs by port number (a switch has one, for port 0; a CA one per
    /// port); 0 where not known (then the node GUID stands in for a switch,
    /// and `guid + port` for a CA port).
    pub port_guids: Vec<u64>,
    /// The link of each port, by port number (index 0: a switch's port 0,
    /// never linked).
    pub links: Vec<Option<Peer>>,
    /// NodeDescription.
    pub description: String,
}

impl Node {
    /// The GUID of the end port `port` (0 on a switch).
    pub fn port_guid(&self, port: u8) -> u64 {
        match self.port_guids.get(usize::from(port)) {
            Some(&g) if g != 0 => g,
            _ if self.kind == NodeKind::Switch => self.guid,
            _ => self.guid.wrapping_add(u64::from(port)),
        }
    }

    /// The end ports that have LIDs: port 0 of a switch, each linked port
    /// of a CA or router.
    pub fn end_ports(&self) -> impl Iterator<Item = u8> + '_ {
        let (first, last) = match self.kind {
            NodeKind::Switch => (0, 0),
            _ => (1, self.num_ports),
        };
        (first..=last).filter(move |&p| {
            self.kind == NodeKind::Switch
                || self.links.get(usize::from(p)).is_some_and(|l| l.is_some())
        })
    }
}

/// The discovered subnet: nodes, each once whatever the paths that reached
/// it, and the links between their ports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    nodes: Vec<Node>,
    by_guid: HashMap<u64, NodeId>,
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Topology {
        Topology::default()
    }

    /// The node with `guid`, added if new (a node reached again by another
    /// path is the same node).
    pub fn add_node(&mut self, guid: u64, kind: NodeKind, num_ports: u8) -> NodeId {
        if let Some(&id) = self.by_guid.get(&guid) {
            return id;
        }
        let id = NodeId(self.nodes.len());
        self.nodes.push(Node {
            guid,
            kind,
            num_ports,
            port_guids: vec![0; usize::from(num_ports) + 1],
            links: vec![None; usize::from(num_ports) + 1],
            description: String::new(),
        });
        self.by_guid.insert(guid, id);
        id
    }

    /// The node of `guid`, if discovered.
    pub fn find(&self, guid: u64) -> Option<NodeId> {
        self.by_guid.get(&guid).copied()
    }

    /// The node `id` (panics on an id of another topology).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    /// The node `id`, to fill in (description, port GUIDs).
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id.0]
    }

    /// Every node, by id.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.nodes.iter().enumerate().map(|(i, n)| (NodeId(i), n))
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn check_port(&self, id: NodeId, port: u8) -> Result<(), Error> {
        let n = self.node(id);
        if port == 0 || port > n.num_ports {
            return Err(Error::NoSuchPort {
                guid: n.guid,
                port,
                ports: n.num_ports,
            });
        }
        Ok(())
    }

    /// Links port `pa` of `a` with port `pb` of `b`. Linking the same two
    /// ports again is no change; a port linked elsewhere is an error.
    pub fn link(&mut self, a: NodeId, pa: u8, b: NodeId, pb: u8) -> Result<(), Error> {
        self.check_port(a, pa)?;
        self.check_port(b, pb)?;
        if a == b && pa == pb {
            return Err(Error::SelfLink {
                guid: self.node(a).guid,
                port: pa,
            });
        }
        let want_a = Peer { node: b, port: pb };
        let want_b = Peer { node: a, port: pa };
        for (id, port, want) in [(a, pa, want_a), (b, pb, want_b)] {
            if let Some(have) = self.node(id).links[usize::from(port)] {
                if have != want {
                    return Err(Error::PortTaken {
                        guid: self.node(id).guid,
                        port,
                    });
                }
            }
        }
        self.nodes[a.0].links[usize::from(pa)] = Some(want_a);
        self.nodes[b.0].links[usize::from(pb)] = Some(want_b);
        Ok(())
    }

    /// The peer of port `port` of `id`.
    pub fn peer(&self, id: NodeId, port: u8) -> Option<Peer> {
        self.node(id)
            .links
            .get(usize::from(port))
            .copied()
            .flatten()
    }

    /// Removes the link on port `port` of `id` (both ends), if any: a link
    /// that went down.
    pub fn unlink(&mut self, id: NodeId, port: u8) {
        if let Some(p) = self.peer(id, port) {
            self.nodes[p.node.0].links[usize::from(p.port)] = None;
            self.nodes[id.0].links[usize::from(port)] = None;
        }
    }

    /// Minimum-hop unicast routes for every switch to every LID of `lids`:
    /// for each destination, the switch ports on a shortest path; among
    /// equals, the port with the fewest destinations routed through it so
    /// far (destinations spread over parallel links), then the lowest
    /// number.
    pub fn min_hop_routes(&self, lids: &Lids) -> Routes {
        let switches: Vec<NodeId> = self
            .nodes()
            .filter(|(_, n)| n.kind == NodeKind::Switch)
            .map(|(id, _)| id)
            .collect();
        // Per-port counters in flat vectors, by node and port: the first
        // index of each node's ports.
        let mut first = Vec::with_capacity(self.nodes.len() + 1);
        let mut total = 0usize;
        for n in &self.nodes {
            first.push(total);
            total += usize::from(n.num_ports) + 1;
        }
        let mut load = vec![0u32; total];
        // The links each LID of the current port took, and which to clear.
        let mut taken = vec![0u32; total];
        let mut touched: Vec<usize> = Vec::new();
        let len = usize::from(lids.max_lid()) + 1;
        let mut tables: Vec<Vec<u8>> = vec![vec![UNROUTED; len]; switches.len()];
        let mut hops: Vec<u32> = Vec::new();
        let mut current = None;
        for (lid, dest, dport) in self.destinations(lids) {
            // The hops to a port are those of each of its LIDs.
            if current != Some((dest, dport)) {
                current = Some((dest, dport));
                hops = self.switch_hops_vec(dest, dport);
                for i in touched.drain(..) {
                    taken[i] = 0;
                }
            }
            let to_switch = self.node(dest).kind == NodeKind::Switch;
            for (si, &s) in switches.iter().enumerate() {
                let h = hops[s.0];
                if h == u32::MAX {
                    continue;
                }
                if h == 0 {
                    tables[si][usize::from(lid)] = 0;
                    continue;
                }
                let n = self.node(s);
                let base = first[s.0];
                let mut best: Option<(u32, u32, u8)> = None;
                for p in 1..=n.num_ports {
                    let Some(peer) = n.links[usize::from(p)] else {
                        continue;
                    };
                    let on_path = if !to_switch && h == 1 {
                        // The last hop to a CA's port is its own link.
                        peer.node == dest && peer.port == dport
                    } else {
                        hops[peer.node.0] == h - 1
                    };
                    if !on_path {
                        continue;
                    }
                    let i = base + usize::from(p);
                    let key = (taken[i], load[i], p);
                    if best.is_none_or(|b| key < b) {
                        best = Some(key);
                    }
                }
                if let Some((_, _, p)) = best {
                    let i = base + usize::from(p);
                    tables[si][usize::from(lid)] = p;
                    load[i] += 1;
                    if taken[i] == 0 {
                        touched.push(i);
                    }
                    taken[i] += 1;
                }
            }
        }
        Routes {
            tables: switches.into_iter().zip(tables).collect(),
        }
    }

    /// Every LID of the end ports of `lids` that are in the topology, by
    /// LID: (LID, node, port); the LIDs of one port (its 2^LMC) follow
    /// each other.
    fn destinations(&self, lids: &Lids) -> Vec<(u16, NodeId, u8)> {
        let ports: HashMap<u64, (NodeId, u8)> = self
            .nodes()
            .flat_map(|(id, n)| n.end_ports().map(move |p| (n.port_guid(p), (id, p))))
            .collect();
        let mut dests: Vec<(u16, NodeId, u8)> = lids
            .iter_all()
            .filter_map(|(guid, lid)| {
                let &(id, port) = ports.get(&guid)?;
                Some((lid, id, port))
            })
            .collect();
        dests.sort_unstable();
        dests
    }

    /// The node and port of the end port with port GUID `guid`.
    pub fn end_port_of(&self, guid: u64) -> Option<(NodeId, u8)> {
        self.nodes().find_map(|(id, n)| {
            n.end_ports()
                .find(|&p| n.port_guid(p) == guid)
                .map(|p| (id, p))
        })
    }

    /// Hops from each switch to the end port `port` of `dest` (0: the
    /// destination is that switch), by breadth-first search over links.
    fn switch_hops_to(&self, dest: NodeId, port: u8) -> HashMap<NodeId, u32> {
        self.switch_hops_vec(dest, port)
            .into_iter()
            .enumerate()
            .filter(|&(_, h)| h != u32::MAX)
            .map(|(i, h)| (NodeId(i), h))
            .collect()
    }

    /// Hops from each switch to the end port `port` of `dest`, by node
    /// index (`u32::MAX`: not reached; CAs never are), by breadth-first
    /// search over links: 0 when the destination is that switch.
    fn switch_hops_vec(&self, dest: NodeId, port: u8) -> Vec<u32> {
        let mut hops = vec![u32::MAX; self.nodes.len()];
        let mut queue = VecDeque::new();
        match self.node(dest).kind {
            NodeKind::Switch => {
                hops[dest.0] = 0;
                queue.push_back(dest);
            }
            _ => {
                if let Some(peer) = self.peer(dest, port) {
                    if self.node(peer.node).kind == NodeKind::Switch {
                        hops[peer.node.0] = 1;
                        queue.push_back(peer.node);
                    }
                }
            }
        }
        while let Some(s) = queue.pop_front() {
            let h = hops[s.0];
            for peer in self.node(s).links.iter().skip(1).flatten() {
                if hops[peer.node.0] == u32::MAX && self.node(peer.node).kind == NodeKind::Switch {
                    hops[peer.node.0] = h + 1;
                    queue.push_back(peer.node);
                }
            }
        }
        hops
    }
}

/// The links the LIDs of one end port took so far, switch by switch: with
/// an LMC above 0 each LID of a port takes, among a switch's equally good
/// ports, one that fewer of the port's other LIDs took (then the least
/// loaded), so that the port's paths part on different links wherever
/// the topology has them.
#[derive(Default)]
pub(crate) struct Spread {
    port: Option<(NodeId, u8)>,
    taken: HashMap<(NodeId, u8), u32>,
}

impl Spread {
    /// The next LID is one of end port `port` of `dest`: forgets the links
    /// of the port before when it is another, and says so.
    pub(crate) fn next_lid(&mut self, dest: NodeId, port: u8) -> bool {
        if self.port == Some((dest, port)) {
            return false;
        }
        self.port = Some((dest, port));
        self.taken.clear();
        true
    }

    /// How many LIDs of the port switch `s` routes through its port `p`.
    pub(crate) fn taken(&self, s: NodeId, p: u8) -> u32 {
        self.taken.get(&(s, p)).copied().unwrap_or(0)
    }

    /// Switch `s` routes the LID through its port `p`.
    pub(crate) fn take(&mut self, s: NodeId, p: u8) {
        *self.taken.entry((s, p)).or_default() += 1;
    }
}

/// A linear forwarding table entry for a LID that is not routed.
pub const UNROUTED: u8 = 0xff;

/// A table of each of `switches` with every LID of `lids` unrouted.
fn unrouted_tables(switches: &[NodeId], lids: &Lids) -> HashMap<NodeId, Vec<u8>> {
    let len = usize::from(lids.max_lid()) + 1;
    switches.iter().map(|&s| (s, vec![UNROUTED; len])).collect()
}

/// The linear forwarding table of every switch: the egress port of each
/// LID, [`UNROUTED`] where none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    tables: HashMap<NodeId, Vec<u8>>,
}

impl Routes {
    /// The port switch `s` forwards LID `lid` to (0: itself).
    pub fn port(&self, s: NodeId, lid: u16) -> Option<u8> {
        match self.tables.get(&s)?.get(usize::from(lid)) {
            Some(&UNROUTED) | None => None,
            Some(&p) => Some(p),
        }
    }

    /// Switch `s`'s table, indexed by LID.
    pub fn table(&self, s: NodeId) -> Option<&[u8]> {
        self.tables.get(&s).map(|t| t.as_slice())
    }

    /// The table of `s` in LinearForwardingTable blocks of 64 LIDs: (block
    /// number, entries), the last block padded with [`UNROUTED`].
    pub fn blocks(&self, s: NodeId) -> Vec<(u32, [u8; 64])> {
        let Some(t) = self.tables.get(&s) else {
            return Vec::new();
        };
        t.chunks(64)
            .enumerate()
            .map(|(i, c)| {
                let mut b = [UNROUTED; 64];
                b[..c.len()].copy_from_slice(c);
                (i as u32, b)
            })
            .collect()
    }

    /// The path of switches and ports a packet from switch `from` to `lid`
    /// takes: the egress port at each switch, ending where a table says 0
    /// (the switch itself) or at the first non-switch. `None` when a table
    /// has no route or the path loops.
    pub fn trace(&self, topo: &Topology, from: NodeId, lid: u16) -> Option<Vec<(NodeId, u8)>> {
        let mut path = Vec::new();
        let mut at = from;
        for _ in 0..=topo.len() {
            let p = self.port(at, lid)?;
            path.push((at, p));
            if p == 0 {
                return Some(path);
            }
            let peer = topo.peer(at, p)?;
            if topo.node(peer.node).kind != NodeKind::Switch {
                return Some(path);
            }
            at = peer.node;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring of `n` switches (ports 1 and 2 to the neighbours), one HCA on
    /// port 3 of each.
    pub(in crate::subnet) fn ring(n: usize) -> (Topology, Vec<NodeId>, Vec<NodeId>) {
        let mut t = Topology::new();
        let s: Vec<_> = (0..n)
            .map(|i| t.add_node(0x100 + i as u64, NodeKind::Switch, 4))
            .collect();
        let h: Vec<_> = (0..n)
            .map(|i| t.add_node(0x1000 + i as u64 * 0x10, NodeKind::Ca, 1))
            .collect();
        for i in 0..n {
            t.link(s[i], 1, s[(i + 1) % n], 2).unwrap();
            t.link(s[i], 3, h[i], 1).unwrap();
        }
        (t, s, h)
    }

    #[test]
    fn nodes_are_found_once_by_guid() {
        let mut t = Topology::new();
        let a = t.add_node(7, NodeKind::Switch, 8);
        let b = t.add_node(7, NodeKind::Switch, 8);
        assert_eq!(a, b);
        assert_eq!(t.len(), 1);
        assert_eq!(t.find(7), Some(a));
        assert_eq!(t.find(8), None);
    }

    #[test]
    fn bad_links_are_typed_errors() {
        let mut t = Topology::new();
        let s = t.add_node(1, NodeKind::Switch, 2);
        let h = t.add_node(2, NodeKind::Ca, 1);
        let h2 = t.add_node(3, NodeKind::Ca, 1);
        assert!(matches!(
            t.link(s, 3, h, 1),
            Err(Error::NoSuchPort { port: 3, .. })
        ));
        assert!(matches!(
            t.link(s, 0, h, 1),
            Err(Error::NoSuchPort { port: 0, .. })
        ));
        assert!(matches!(t.link(s, 1, s, 1), Err(Error::SelfLink { .. })));
        t.link(s, 1, h, 1).unwrap();
        t.link(s, 1, h, 1).unwrap(); // the same link again
        assert!(matches!(
            t.link(s, 1, h2, 1),
            Err(Error::PortTaken { port: 1, .. })
        ));
        t.unlink(h, 1);
        assert_eq!(t.peer(s, 1), None);
        t.link(s, 1, h2, 1).unwrap();
    }

    #[test]
    fn every_switch_reaches_every_lid_on_a_ring_by_a_shortest_path() {
        let (t, s, h) = ring(6);
        let mut lids = Lids::new();
        lids.assign(&t);
        let routes = t.min_hop_routes(&lids);
        for &from in &s {
            for &dest in s.iter().chain(&h) {
                let port = if t.node(dest).kind == NodeKind::Switch {
                    0
                } else {
                    1
                };
                let lid = lids.of(&t, dest, port).unwrap();
                let path = routes.trace(&t, from, lid).expect("routed, no loop");
                let i = s.iter().position(|&x| x == from).unwrap();
                let j = if t.node(dest).kind == NodeKind::Switch {
                    s.iter().position(|&x| x == dest).unwrap()
                } else {
                    h.iter().position(|&x| x == dest).unwrap()
                };
                let d = (i as isize - j as isize).unsigned_abs();
                let ring_hops = d.min(6 - d);
                // One table lookup per switch on the way, the last one
                // delivering (port 0 to a switch, port 3 to its HCA).
                assert_eq!(path.len(), ring_hops + 1, "{from:?} to {dest:?}: {path:?}");
            }
        }
    }

    #[test]
    fn parallel_links_share_the_destinations() {
        let mut t = Topology::new();
        let s1 = t.add_node(1, NodeKind::Switch, 8);
        let s2 = t.add_node(2, NodeKind::Switch, 8);
        t.link(s1, 1, s2, 1).unwrap();
        t.link(s1, 2, s2, 2).unwrap();
        let hcas: Vec<_> = (0..6)
            .map(|i| {
                let h = t.add_node(0x100 + i, NodeKind::Ca, 1);
                t.link(s2, 3 + i as u8, h, 1).unwrap();
                h
            })
            .collect();
        let mut lids = Lids::new();
        lids.assign(&t);
        let routes = t.min_hop_routes(&lids);
        let mut per_port = [0; 3];
        for &h in &hcas {
            let p = routes.port(s1, lids.of(&t, h, 1).unwrap()).unwrap();
            per_port[usize::from(p)] += 1;
        }
        assert_eq!(per_port, [0, 3, 3]);
    }

    #[test]
    fn blocks_cover_the_table_and_unreachable_lids_stay_unrouted() {
        let mut t = Topology::new();
        let s = t.add_node(0x10, NodeKind::Switch, 2);
        let h = t.add_node(0x1000, NodeKind::Ca, 1);
        t.link(s, 1, h, 1).unwrap();
        let mut lids = Lids::new();
        lids.assign(&t);
        // A lone switch, discovered but linked to nothing.
        let lone = t.add_node(0x20, NodeKind::Switch, 2);
        lids.assign(&t);
        let routes = t.min_hop_routes(&lids);
        let lone_lid = lids.of(&t, lone, 0).unwrap();
        assert_eq!(routes.port(s, lone_lid), None);
        assert_eq!(routes.port(lone, lone_lid), Some(0));
        assert_eq!(routes.port(s, lids.of(&t, h, 1).unwrap()), Some(1));
        let b = routes.blocks(s);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].1[usize::from(lone_lid)], UNROUTED);
        assert_eq!(b[0].1[63], UNROUTED);
    }
}
