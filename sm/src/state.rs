//! The state of the subnet that the sweep builds and the SA serves: the
//! topology, the LIDs, the routes, what the sweep read of each port, and the
//! multicast groups; shared behind one lock.

use std::collections::HashMap;
use std::sync::RwLock;

use rdma::mad::{NodeInfo, PortInfo, SmInfo, SwitchInfo};

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
    /// Each LID's end port (every LID of a port's 2^LMC): node, port
    /// number, port GUID.
    pub end_ports: HashMap<u16, (NodeId, u8, u64)>,
    /// The base LID of every end port, ascending.
    pub sorted_lids: Vec<u16>,
    /// The P_Key table entries of each end port (a switch's as port 0)
    /// and of each switch port that enforces partitions, by node and
    /// port; the default partition's first.
    pub pkeys: HashMap<(NodeId, u8), Vec<u16>>,
    /// Each switch's SwitchInfo as the sweep read it, with the
    /// LinearFDBTop it wrote and PortStateChange it cleared.
    pub switch_info: HashMap<NodeId, SwitchInfo>,
    /// The SM's own SMInfo at the end of the sweep.
    pub sm_info: SmInfo,
}

impl Subnet {
    /// Fills the LID indexes ([`Subnet::end_ports`], [`Subnet::sorted_lids`])
    /// from the LIDs and the topology.
    pub(crate) fn index_lids(&mut self) {
        let ports: HashMap<u64, (NodeId, u8)> = self
            .topo
            .nodes()
            .flat_map(|(id, n)| n.end_ports().map(move |p| (n.port_guid(p), (id, p))))
            .collect();
        self.end_ports = self
            .lids
            .iter_all()
            .filter_map(|(guid, lid)| {
                let &(id, p) = ports.get(&guid)?;
                Some((lid, (id, p, guid)))
            })
            .collect();
        self.sorted_lids = self.lids.iter().map(|(_, l)| l).collect();
        self.sorted_lids.sort_unstable();
    }
}

/// The LIDs in OpenSM's `guid2lid` format: `0x<port GUID> <base LID>
/// <last LID>` a line, by LID.
pub fn guid2lid(s: &RwLock<Subnet>) -> String {
    let s = lock_r(s);
    let mut v: Vec<(u64, u16, u16)> = s
        .lids
        .iter()
        .map(|(g, l)| (g, l, s.lids.range(g).map_or(l, |r| *r.end())))
        .collect();
    v.sort_by_key(|&(_, l, _)| l);
    v.iter()
        .map(|(g, l, last)| format!("0x{g:016x} 0x{l:04x} 0x{last:04x}\n"))
        .collect()
}

/// The entries of a `guid2lid` file as OpenSM writes it (`0x<port GUID>
/// 0x<LID> 0x<LID>` a line; blank lines and `#` comments skipped): (port
/// GUID, base LID). A malformed line is an error naming it, and the whole
/// file is then not to be used (as OpenSM starts with an empty database);
/// entries whose LID is not unicast or whose range is reversed, and a
/// second entry of a GUID or a LID, are left out.
pub fn parse_guid2lid(text: &str) -> Result<Vec<(u64, u16)>, String> {
    let hex = |w: Option<&str>| -> Option<u64> {
        let w = w?;
        let d = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X"))?;
        u64::from_str_radix(d, 16).ok()
    };
    let mut out: Vec<(u64, u16)> = Vec::new();
    let mut guids = std::collections::HashSet::new();
    let mut lids = std::collections::HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut w = line.split_whitespace();
        let (Some(guid), Some(min), Some(max), None) =
            (hex(w.next()), hex(w.next()), hex(w.next()), w.next())
        else {
            return Err(format!(
                "guid2lid line {}: {line:?} is not `GUID LID LID`",
                n + 1
            ));
        };
        let (Ok(min), Ok(max)) = (u16::try_from(min), u16::try_from(max)) else {
            continue;
        };
        if min == 0 || max > crate::subnet::MAX_UNICAST_LID || min > max {
            continue;
        }
        if guids.insert(guid) && lids.insert(min) {
            out.push((guid, min));
        }
    }
    Ok(out)
}

/// The subnet for writing, whatever a panicking holder left.
pub fn lock_w(s: &RwLock<Subnet>) -> std::sync::RwLockWriteGuard<'_, Subnet> {
    s.write().unwrap_or_else(|e| e.into_inner())
}

/// The subnet for reading.
pub fn lock_r(s: &RwLock<Subnet>) -> std::sync::RwLockReadGuard<'_, Subnet> {
    s.read().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid2lid_is_read_as_opensm_writes_it_and_bad_entries_are_left_out() {
        let text = "0x0002c90300000001 0x0001 0x0001\n\
                    # a comment\n\
                    \n\
                    0x0002c90300000002 0x0005 0x0005\n\
                    0x0002c90300000003 0x0000 0x0000\n\
                    0x0002c90300000004 0xc000 0xc000\n\
                    0x0002c90300000005 0x0009 0x0008\n\
                    0x0002c90300000002 0x0006 0x0006\n\
                    0x0002c90300000006 0x0005 0x0005\n\
                    0x0002c90300000007 0x10000 0x10000\n";
        assert_eq!(
            parse_guid2lid(text),
            Ok(vec![(0x0002_c903_0000_0001, 1), (0x0002_c903_0000_0002, 5)])
        );
        for bad in ["0x1 0x2", "1 0x2 0x2", "0x1 0x2 0x2 0x3", "0xzz 0x1 0x1"] {
            let e = parse_guid2lid(bad).unwrap_err();
            assert!(e.contains("line 1"), "{bad}: {e}");
        }
        // What the SM writes, it reads back.
        let s = RwLock::new(Subnet::default());
        assert_eq!(parse_guid2lid(&guid2lid(&s)), Ok(vec![]));
    }
}
