//! Fat-tree routing: the levels of a fat tree found from its leaves, and
//! up/down routes rooted at every switch of the top level.
//!
//! The leaves are the switches with CAs; a switch's level is its distance
//! in switch hops from the nearest leaf. The subnet is a fat tree when every
//! link between switches joins two adjacent levels (no link within a level)
//! and every switch that has no link up is on the top level. Routes then go
//! up to the lowest common level and down again: the shortest routes, with
//! no credit loop (up/down, [`Topology::up_down_routes`], ranked from all
//! top switches at once, destinations spread over the parallel links by
//! their load). A subnet that is no fat tree (a ring, linked leaves) is
//! refused with the reason, so that the next engine of the list routes it.

use std::collections::{HashMap, VecDeque};

use super::updn::UpDownError;
use super::{Lids, NodeId, NodeKind, Routes, Topology};

/// Why a subnet is no fat tree, or its routes could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FatTreeError {
    /// No switch has a CA: there are no leaves.
    #[error("no switch has a CA (no leaf)")]
    NoLeaf,
    /// A switch is not connected to any leaf through switches.
    #[error("switch {0:#018x} reaches no leaf")]
    Unreached(u64),
    /// Two switches of one level are linked (as in a ring).
    #[error("switches {0:#018x} and {1:#018x} of level {2} are linked: no fat tree")]
    LinkWithinLevel(u64, u64, u32),
    /// A switch below the top level has no link up.
    #[error("switch {0:#018x} of level {1} has no link up, below the top level {2}")]
    TopBelowTop(u64, u32, u32),
    /// The up/down routes from the top level failed.
    #[error(transparent)]
    UpDown(#[from] UpDownError),
}

impl Topology {
    /// The level of each switch of a fat tree: 0 for the leaves (the
    /// switches with CAs), the distance in switch hops from the nearest
    /// leaf for the others; an error when the subnet is no fat tree.
    pub fn fat_tree_levels(&self) -> Result<HashMap<NodeId, u32>, FatTreeError> {
        let switches: Vec<NodeId> = self
            .nodes()
            .filter(|(_, n)| n.kind == NodeKind::Switch)
            .map(|(id, _)| id)
            .collect();
        let mut level: HashMap<NodeId, u32> = HashMap::new();
        let mut queue = VecDeque::new();
        for &s in &switches {
            let has_ca = (1..=self.node(s).num_ports).any(|p| {
                self.peer(s, p)
                    .is_some_and(|peer| self.node(peer.node).kind != NodeKind::Switch)
            });
            if has_ca {
                level.insert(s, 0);
                queue.push_back(s);
            }
        }
        if level.is_empty() {
            return Err(FatTreeError::NoLeaf);
        }
        while let Some(s) = queue.pop_front() {
            for (_, n) in self.switch_links(s) {
                if !level.contains_key(&n) {
                    level.insert(n, level[&s] + 1);
                    queue.push_back(n);
                }
            }
        }
        let top = level.values().copied().max().unwrap_or(0);
        for &s in &switches {
            let Some(&l) = level.get(&s) else {
                return Err(FatTreeError::Unreached(self.node(s).guid));
            };
            let mut up = false;
            for (_, n) in self.switch_links(s) {
                let ln = level[&n];
                if ln == l {
                    let (a, b) = (self.node(s).guid, self.node(n).guid);
                    return Err(FatTreeError::LinkWithinLevel(a.min(b), a.max(b), l));
                }
                up |= ln == l + 1;
            }
            if !up && l != top {
                return Err(FatTreeError::TopBelowTop(self.node(s).guid, l, top));
            }
        }
        Ok(level)
    }

    /// Fat-tree routes for every switch to every LID of `lids`: up/down
    /// from every switch of the top level (see the module's text).
    pub fn fat_tree_routes(&self, lids: &Lids) -> Result<Routes, FatTreeError> {
        let level = self.fat_tree_levels()?;
        let top = level.values().copied().max().unwrap_or(0);
        let mut roots: Vec<u64> = level
            .iter()
            .filter(|&(_, &l)| l == top)
            .map(|(&s, _)| self.node(s).guid)
            .collect();
        roots.sort_unstable();
        Ok(self.up_down_routes(lids, &roots)?)
    }
}

#[cfg(test)]
mod tests {
    use super::super::cdg::{credit_loop, dependencies};
    use super::*;

    /// A three-level fat tree: `pods` pods of `aggs` aggregation and
    /// `edges` edge switches (each edge linked to each aggregation switch
    /// of its pod), `hcas` HCAs on each edge, and `aggs * group` cores:
    /// aggregation switch `a` of every pod linked to cores `a * group ..`.
    /// Cores and edges have one spare port, the last.
    fn fat_tree3(pods: usize, aggs: usize, edges: usize, hcas: usize, group: usize) -> Topology {
        let mut t = Topology::new();
        let cores: Vec<_> = (0..aggs * group)
            .map(|c| t.add_node(0x100 + c as u64, NodeKind::Switch, pods as u8 + 1))
            .collect();
        for p in 0..pods {
            let agg: Vec<_> = (0..aggs)
                .map(|a| {
                    let g = 0x1000 + (p * 16 + a) as u64;
                    t.add_node(g, NodeKind::Switch, (edges + group) as u8)
                })
                .collect();
            for e in 0..edges {
                let g = 0x2000 + (p * 16 + e) as u64;
                let edge = t.add_node(g, NodeKind::Switch, (hcas + aggs + 1) as u8);
                for h in 0..hcas {
                    let g = 0x10_0000 + ((p * 16 + e) * 16 + h) as u64 * 0x10;
                    let ca = t.add_node(g, NodeKind::Ca, 1);
                    t.link(edge, 1 + h as u8, ca, 1).unwrap();
                }
                for (a, &ag) in agg.iter().enumerate() {
                    t.link(edge, (hcas + 1 + a) as u8, ag, 1 + e as u8).unwrap();
                }
            }
            for (a, &ag) in agg.iter().enumerate() {
                for g in 0..group {
                    t.link(ag, (edges + 1 + g) as u8, cores[a * group + g], 1 + p as u8)
                        .unwrap();
                }
            }
        }
        t
    }

    fn lids_of(t: &Topology) -> Lids {
        let mut lids = Lids::new();
        lids.assign(t);
        lids
    }

    /// The LIDs of the CAs' ports.
    fn ca_lids(t: &Topology, lids: &Lids) -> Vec<(NodeId, u16)> {
        t.nodes()
            .filter(|(_, n)| n.kind == NodeKind::Ca)
            .map(|(id, _)| (id, lids.of(t, id, 1).unwrap()))
            .collect()
    }

    #[test]
    fn three_levels_are_found_from_the_leaves() {
        let t = fat_tree3(3, 2, 2, 2, 2);
        let level = t.fat_tree_levels().unwrap();
        for (id, n) in t.nodes().filter(|(_, n)| n.kind == NodeKind::Switch) {
            let want = match n.guid >> 8 {
                0x1 => 2,  // core
                0x10 => 1, // aggregation
                0x20 => 0, // edge
                g => panic!("guid {g:#x}"),
            };
            assert_eq!(level[&id], want, "switch {:#x}", n.guid);
        }
    }

    /// Every route between two CAs is as short as the minimum-hop one, no
    /// route makes a credit loop, and each edge switch spreads the CAs of
    /// the other edges evenly over its links up.
    #[test]
    fn routes_are_shortest_loop_free_and_spread_over_the_links_up() {
        let t = fat_tree3(4, 2, 3, 4, 2);
        let lids = lids_of(&t);
        let r = t.fat_tree_routes(&lids).unwrap();
        let min_hop = t.min_hop_routes(&lids);
        let cas = ca_lids(&t, &lids);
        for &(src, _) in &cas {
            let leaf = t.peer(src, 1).unwrap().node;
            for &(_, lid) in &cas {
                let ours = r.trace(&t, leaf, lid).unwrap().len();
                let shortest = min_hop.trace(&t, leaf, lid).unwrap().len();
                assert_eq!(ours, shortest, "from {src:?} to LID {lid}");
            }
        }
        assert_eq!(credit_loop(&dependencies(&t, &lids, &r)), None);
        let level = t.fat_tree_levels().unwrap();
        for (s, _) in t.nodes().filter(|&(id, _)| level.get(&id) == Some(&0)) {
            let mut per_port: HashMap<u8, u32> = HashMap::new();
            for &(ca, lid) in &cas {
                if t.peer(ca, 1).unwrap().node == s {
                    continue;
                }
                let p = r.port(s, lid).unwrap();
                assert_eq!(level[&t.peer(s, p).unwrap().node], 1, "an edge routes up");
                *per_port.entry(p).or_default() += 1;
            }
            assert_eq!(per_port.len(), 2, "both links up carry routes");
            let (lo, hi) = (per_port.values().min(), per_port.values().max());
            assert!(hi.unwrap() - lo.unwrap() <= 1, "uneven: {per_port:?}");
        }
    }

    /// The test can fail: a ring, two linked leaves and a switch that stops
    /// below the top are refused, each with its reason.
    #[test]
    fn subnets_that_are_no_fat_tree_are_refused() {
        let mut ring = Topology::new();
        let s: Vec<_> = (0..3)
            .map(|i| ring.add_node(0x10 + i, NodeKind::Switch, 3))
            .collect();
        for i in 0..3 {
            ring.link(s[i], 1, s[(i + 1) % 3], 2).unwrap();
            let h = ring.add_node(0x100 + i as u64, NodeKind::Ca, 1);
            ring.link(s[i], 3, h, 1).unwrap();
        }
        assert!(matches!(
            ring.fat_tree_routes(&lids_of(&ring)),
            Err(FatTreeError::LinkWithinLevel(_, _, 0))
        ));

        // Two leaves linked to each other.
        let mut t = fat_tree3(2, 2, 2, 1, 1);
        let (e0, e1) = (t.find(0x2000).unwrap(), t.find(0x2001).unwrap());
        t.link(e0, 4, e1, 4).unwrap();
        assert_eq!(
            t.fat_tree_levels(),
            Err(FatTreeError::LinkWithinLevel(0x2000, 0x2001, 0))
        );

        // A switch hung below an edge with nothing under it: level 1 and
        // no link up, under a top at level 2.
        let mut t = fat_tree3(2, 2, 2, 1, 1);
        let edge = t.find(0x2000).unwrap();
        let stub = t.add_node(0x5000, NodeKind::Switch, 1);
        t.link(edge, 4, stub, 1).unwrap();
        assert_eq!(
            t.fat_tree_levels(),
            Err(FatTreeError::TopBelowTop(0x5000, 1, 2))
        );

        assert_eq!(Topology::new().fat_tree_levels(), Err(FatTreeError::NoLeaf));
    }
}
