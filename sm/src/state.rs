//! The state of the subnet that the sweep builds and the SA serves: the
//! topology, the LIDs, the routes, what the sweep read of each port, and the
//! multicast groups; shared behind one lock.

use std::collections::HashMap;
use std::sync::RwLock;

use rdma::mad::{NodeInfo, PortInfo};

use crate::groups::Groups;
use crate::subnet::{Lids, NodeId, Routes, Topology};

/// The default subnet prefix.
pub const SUBNET_PREFIX: u64 = 0xfe80_0000_0000_0000;

/// What the SA serves: the subnet as the last sweep left it.
#[derive(Default)]
pub struct Subnet {
    /// Nodes, ports and links.
    pub topo: Topology,
    /// LIDs, kept across sweeps.
    pub lids: Lids,
    /// Each switch's linear forwarding table.
    pub routes: Routes,
    /// NodeInfo of each node (as first reached).
    pub node_info: HashMap<NodeId, NodeInfo>,
    /// PortInfo of each port read in the sweep, as programmed.
    pub port_info: HashMap<(NodeId, u8), PortInfo>,
    /// The directed route to each node.
    pub paths: HashMap<NodeId, Vec<u8>>,
    /// The SM's own LID.
    pub sm_lid: u16,
    /// The node the SM runs on.
    pub sm_node: Option<NodeId>,
    /// Multicast groups (the SA's MCMemberRecords).
    pub groups: Groups,
    /// Whether the first sweep is done.
    pub up: bool,
    /// Each LID's end port: node, port number, port GUID.
    pub end_ports: HashMap<u16, (NodeId, u8, u64)>,
    /// Every LID assigned, ascending.
    pub sorted_lids: Vec<u16>,
}

impl Subnet {
    /// Fills the LID indexes ([`Subnet::end_ports`], [`Subnet::sorted_lids`])
    /// from the LIDs and the topology.
    pub(crate) fn index_lids(&mut self) {
        self.end_ports = self
            .lids
            .iter()
            .filter_map(|(guid, lid)| {
                let (id, p) = self.topo.end_port_of(guid)?;
                Some((lid, (id, p, guid)))
            })
            .collect();
        self.sorted_lids = self.lids.iter().map(|(_, l)| l).collect();
        self.sorted_lids.sort_unstable();
    }
}

/// The LIDs in OpenSM's `guid2lid` format: `0x<port GUID> <LID> <LID>` a
/// line, by LID.
pub fn guid2lid(s: &RwLock<Subnet>) -> String {
    let s = lock_r(s);
    let mut v: Vec<(u64, u16)> = s.lids.iter().collect();
    v.sort_by_key(|&(_, l)| l);
    v.iter()
        .map(|(g, l)| format!("0x{g:016x} 0x{l:04x} 0x{l:04x}\n"))
        .collect()
}

/// The subnet for writing, whatever a panicking holder left.
pub fn lock_w(s: &RwLock<Subnet>) -> std::sync::RwLockWriteGuard<'_, Subnet> {
    s.write().unwrap_or_else(|e| e.into_inner())
}

/// The subnet for reading.
pub fn lock_r(s: &RwLock<Subnet>) -> std::sync::RwLockReadGuard<'_, Subnet> {
    s.read().unwrap_or_else(|e| e.into_inner())
}
