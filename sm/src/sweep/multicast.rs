//! The switches' multicast forwarding tables: a tree per group over the
//! switches, written block by block where it changed.

use std::collections::HashMap;

use rdma::mad::MulticastForwardingTable;

use super::wire::set;
use super::Sm;
use crate::port_mask::PortMask;
use crate::state::{lock_r, Subnet};
use crate::subnet::{NodeId, NodeKind};

impl Sm {
    /// Programs every switch's multicast forwarding table for the groups
    /// of the SA: per group, a tree over the switches (breadth first from
    /// the switch of its first member, lowest ports first) pruned to the
    /// branches that lead to members; each switch forwards the MLID to its
    /// member CAs, to the tree children with members below, and to its
    /// parent when members are elsewhere. Writes only the blocks that
    /// changed; returns how many it wrote.
    pub async fn program_multicast(&mut self) -> usize {
        let (jobs, paths) = {
            let s = lock_r(&self.subnet);
            let masks = multicast_masks(&s);
            let mut jobs: Vec<(u64, u16, u8, [u16; 32])> = Vec::new();
            let mut paths = HashMap::new();
            for (id, n) in s.topo.nodes() {
                if n.kind != NodeKind::Switch {
                    continue;
                }
                paths.insert(n.guid, s.paths.get(&id).cloned().unwrap_or_default());
                let positions = usize::from(n.num_ports) / 16 + 1;
                // Every block that has a group now or had one before.
                let mut blocks: Vec<u16> = masks
                    .keys()
                    .filter(|(sw, _)| *sw == id)
                    .filter_map(|(_, mlid)| MulticastForwardingTable::block_of(*mlid).map(|b| b.0))
                    .chain(
                        self.mft_written
                            .keys()
                            .filter(|(g, _, _)| *g == n.guid)
                            .map(|(_, b, _)| *b),
                    )
                    .collect();
                blocks.sort_unstable();
                blocks.dedup();
                for b in blocks {
                    for pos in 0..positions as u8 {
                        let mut t = [0u16; 32];
                        for (i, slot) in t.iter_mut().enumerate() {
                            let mlid = MulticastForwardingTable::MLID_BASE + b * 32 + i as u16;
                            *slot = masks
                                .get(&(id, mlid))
                                .map_or(0, |ports| ports.position(pos));
                        }
                        let old = self.mft_written.get(&(n.guid, b, pos));
                        if old != Some(&t) && (old.is_some() || t.iter().any(|&m| m != 0)) {
                            jobs.push((n.guid, b, pos, t));
                        }
                    }
                }
            }
            (jobs, paths)
        };
        let mut written = 0;
        for (guid, b, pos, t) in jobs {
            let Ok(am) = MulticastForwardingTable::attr_mod(b, pos) else {
                continue;
            };
            let path = &paths[&guid];
            match set(
                &self.smi,
                am,
                path,
                &MulticastForwardingTable { port_masks: t },
            )
            .await
            {
                Ok(_) => {
                    written += 1;
                    self.mft_written.insert((guid, b, pos), t);
                }
                Err(e) => {
                    tracing::warn!("MFT Set along {path:?}: {e}");
                    self.resweep
                        .get_or_insert_with(|| "an MFT Set failed".into());
                }
            }
        }
        written
    }
}

/// Each switch's port mask (bit `p`: port `p`) for each MLID with members.
pub(crate) fn multicast_masks(s: &Subnet) -> HashMap<(NodeId, u16), PortMask> {
    let mut out = HashMap::new();
    for g in s.groups.by_mgid.values() {
        // The members' switches and the member CA ports on each.
        let mut at: HashMap<NodeId, PortMask> = HashMap::new();
        let mut order: Vec<NodeId> = Vec::new();
        for gid in g.members.keys() {
            let guid = u64::from_be_bytes(gid[8..].try_into().expect("8 bytes"));
            let Some((id, p)) = s.topo.end_port_of(guid) else {
                continue;
            };
            let (sw, bit) = match s.topo.node(id).kind {
                NodeKind::Switch => (id, PortMask::of(0)),
                _ => match s.topo.peer(id, p) {
                    Some(peer) if s.topo.node(peer.node).kind == NodeKind::Switch => {
                        (peer.node, PortMask::of(peer.port))
                    }
                    _ => continue,
                },
            };
            if !at.contains_key(&sw) {
                order.push(sw);
            }
            *at.entry(sw).or_default() |= bit;
        }
        let Some(&root) = order.first() else { continue };
        // A breadth-first tree over the switches from the root.
        let mut parent: HashMap<NodeId, (NodeId, u8, u8)> = HashMap::new();
        let mut seen = vec![root];
        let mut queue = std::collections::VecDeque::from([root]);
        while let Some(sw) = queue.pop_front() {
            for p in 1..=s.topo.node(sw).num_ports {
                let Some(peer) = s.topo.peer(sw, p) else {
                    continue;
                };
                if s.topo.node(peer.node).kind != NodeKind::Switch || seen.contains(&peer.node) {
                    continue;
                }
                seen.push(peer.node);
                parent.insert(peer.node, (sw, p, peer.port));
                queue.push_back(peer.node);
            }
        }
        // Mark the tree edges on the way from each member switch to the root.
        let mut masks: HashMap<NodeId, PortMask> = at.clone();
        for &sw in &order {
            let mut cur = sw;
            while let Some(&(up, up_port, my_port)) = parent.get(&cur) {
                masks.entry(cur).or_default().insert(my_port);
                let e = masks.entry(up).or_default();
                let already = e.contains(up_port);
                e.insert(up_port);
                if already {
                    break;
                }
                cur = up;
            }
        }
        for (sw, m) in masks {
            out.insert((sw, g.rec.mlid), m);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rdma::mad::sa::{JoinState, McMemberRecord};
    use rdma::Gid;

    use super::*;
    use crate::groups::Group;
    use crate::state::SUBNET_PREFIX;

    /// Ports past 64 of a switch (up to its 255th) carry a group's members
    /// and its tree, in the positions of their MFT blocks.
    #[test]
    fn multicast_masks_hold_ports_past_64() {
        let mut s = Subnet::default();
        let big = s.topo.add_node(0x10, NodeKind::Switch, 255);
        let small = s.topo.add_node(0x20, NodeKind::Switch, 8);
        let cas: Vec<NodeId> = (1..=3)
            .map(|i| s.topo.add_node(0x1000 * i, NodeKind::Ca, 1))
            .collect();
        s.topo.link(big, 70, cas[0], 1).unwrap();
        s.topo.link(big, 255, cas[1], 1).unwrap();
        s.topo.link(big, 130, small, 1).unwrap();
        s.topo.link(small, 2, cas[2], 1).unwrap();
        let mut members = BTreeMap::new();
        for &ca in &cas {
            let mut gid = [0u8; 16];
            gid[..8].copy_from_slice(&SUBNET_PREFIX.to_be_bytes());
            gid[8..].copy_from_slice(&s.topo.node(ca).port_guid(1).to_be_bytes());
            members.insert(gid, JoinState::FULL_MEMBER);
        }
        let mgid = [0xff, 0x12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        s.groups.by_mgid.insert(
            mgid,
            Group {
                rec: McMemberRecord {
                    mgid: Gid(mgid),
                    mlid: 0xc001,
                    ..McMemberRecord::default()
                },
                members,
                permanent: false,
            },
        );
        let masks = multicast_masks(&s);
        let at_big = masks[&(big, 0xc001)];
        for port in [70, 130, 255] {
            assert!(at_big.contains(port), "port {port}: {at_big:?}");
        }
        assert_eq!(at_big.position(4), 1 << 6); // port 70
        assert_eq!(at_big.position(8), 1 << 2); // port 130
        assert_eq!(at_big.position(15), 1 << 15); // port 255
        assert_eq!(at_big.position(0), 0);
        let at_small = masks[&(small, 0xc001)];
        assert_eq!(at_small.position(0), 1 << 1 | 1 << 2);
    }
}
