//! Up/down routing: routes that cannot deadlock on any topology.
//!
//! The switches are ranked by their hop distance from the roots (rank 0),
//! and ordered by (rank, GUID). A link taken toward a switch earlier in that
//! order goes *up*, toward a later one *down*. Every route is some up links
//! followed by some down links, never up after down: the channels a route
//! holds then never wait on each other in a circle (no credit loop), since
//! up links alone and down links alone each follow one strict order.

use std::collections::{HashMap, VecDeque};

use super::{unrouted_tables, Lids, NodeId, NodeKind, Routes, Spread, Topology};

/// Why up/down routes could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpDownError {
    /// The topology has no switch to be a root.
    #[error("no switch to root the up/down ranks at")]
    NoSwitch,
    /// A root named by GUID is not a switch of the topology.
    #[error("root {0:#018x} is not a switch of the subnet")]
    NotASwitch(u64),
    /// A switch has no up-then-down route to a LID that some switch reaches
    /// (the roots leave part of the subnet unranked or cut off).
    #[error("switch {switch:#018x} has no up/down route to LID {lid}")]
    Unrouted {
        /// The switch.
        switch: u64,
        /// The LID.
        lid: u16,
    },
}

impl Topology {
    /// The root an up/down routing without given roots takes: the switch
    /// whose farthest CA is the fewest hops away (the middle of the subnet:
    /// a fat tree's spine), the lowest GUID among equals.
    pub fn up_down_root(&self) -> Option<NodeId> {
        let cas: Vec<(NodeId, u8)> = self
            .nodes()
            .filter(|(_, n)| n.kind != NodeKind::Switch)
            .flat_map(|(id, n)| n.end_ports().map(move |p| (id, p)))
            .collect();
        let mut far: HashMap<NodeId, u32> = HashMap::new();
        for &(ca, p) in &cas {
            for (s, h) in self.switch_hops_to(ca, p) {
                let f = far.entry(s).or_default();
                *f = (*f).max(h);
            }
        }
        self.nodes()
            .filter(|(_, n)| n.kind == NodeKind::Switch)
            .map(|(id, n)| (far.get(&id).copied().unwrap_or(u32::MAX), n.guid, id))
            .min()
            .map(|(_, _, id)| id)
    }

    /// Up/down routes for every switch to every LID of `lids`, ranked from
    /// the switches with GUIDs `roots` (none: [`Topology::up_down_root`]).
    /// For each destination a switch takes the shortest route that goes
    /// only down if it has one, else the shortest that goes up first, so
    /// that the switch a route goes down to continues down; among equal
    /// ports, the one with the fewest destinations so far. A switch's own
    /// LID that up/down cannot reach from some switch (between roots of
    /// equal rank) gets the minimum-hop route there; a CA's is an error.
    pub fn up_down_routes(&self, lids: &Lids, roots: &[u64]) -> Result<Routes, UpDownError> {
        let root_ids: Vec<NodeId> = if roots.is_empty() {
            vec![self.up_down_root().ok_or(UpDownError::NoSwitch)?]
        } else {
            roots
                .iter()
                .map(|&g| match self.find(g) {
                    Some(id) if self.node(id).kind == NodeKind::Switch => Ok(id),
                    _ => Err(UpDownError::NotASwitch(g)),
                })
                .collect::<Result<_, _>>()?
        };
        let key = self.up_down_order(&root_ids);
        let switches: Vec<NodeId> = {
            let mut v: Vec<NodeId> = key.keys().copied().collect();
            v.sort_by_key(|id| key[id]);
            v
        };
        let mut tables = unrouted_tables(&switches, lids);
        let mut load: HashMap<(NodeId, u8), u32> = HashMap::new();
        let mut spread = Spread::default();
        let mut down: HashMap<NodeId, u32> = HashMap::new();
        for (lid, dest, dport) in self.destinations(lids) {
            let new_port = spread.next_lid(dest, dport);
            // The switch the destination is, or hangs on, and its port to it.
            let (sd, last) = if self.node(dest).kind == NodeKind::Switch {
                (dest, 0)
            } else {
                match self.peer(dest, dport) {
                    Some(p) if self.node(p.node).kind == NodeKind::Switch => (p.node, p.port),
                    _ => continue,
                }
            };
            if !key.contains_key(&sd) {
                continue;
            }
            // Hops of the down-only route of each switch to `sd`: keys rise
            // along it, so from `sd` backwards they fall. The same for each
            // LID of a port.
            if new_port {
                down = HashMap::from([(sd, 0)]);
                let mut queue = VecDeque::from([sd]);
                while let Some(n) = queue.pop_front() {
                    for (_, m) in self.switch_links(n) {
                        if key.get(&m).is_some_and(|k| *k < key[&n]) && !down.contains_key(&m) {
                            down.insert(m, down[&n] + 1);
                            queue.push_back(m);
                        }
                    }
                }
            }
            // Each switch's route, in the order (roots first), so that the
            // switches an up link reaches have theirs already.
            let mut len: HashMap<NodeId, u32> = HashMap::new();
            let mut min_hops: Option<HashMap<NodeId, u32>> = None;
            for &s in &switches {
                let table = tables.get_mut(&s).expect("a table per switch");
                if s == sd {
                    table[usize::from(lid)] = last;
                    len.insert(s, 0);
                    continue;
                }
                let candidates: Vec<(u8, u32)> = match down.get(&s) {
                    // Down to a switch whose down-only route is one shorter.
                    Some(&d) => self
                        .switch_links(s)
                        .filter(|&(_, n)| key[&n] > key[&s] && down.get(&n) == Some(&(d - 1)))
                        .map(|(p, _)| (p, d))
                        .collect(),
                    // Up to a switch with a route, the shortest.
                    None => {
                        let ups: Vec<(u8, u32)> = self
                            .switch_links(s)
                            .filter(|&(_, n)| key[&n] < key[&s])
                            .filter_map(|(p, n)| len.get(&n).map(|&l| (p, l + 1)))
                            .collect();
                        let best = ups.iter().map(|&(_, l)| l).min();
                        ups.into_iter().filter(|&(_, l)| Some(l) == best).collect()
                    }
                };
                let chosen = candidates
                    .iter()
                    .min_by_key(|&&(p, _)| {
                        (
                            spread.taken(s, p),
                            load.get(&(s, p)).copied().unwrap_or(0),
                            p,
                        )
                    })
                    .copied();
                let (p, l) = match chosen {
                    Some(c) => c,
                    // A switch's own LID (management traffic) that up/down
                    // cannot reach, as between two roots of equal rank:
                    // the minimum-hop route. Routes to CAs never take one.
                    None if sd == dest => {
                        let hops = min_hops.get_or_insert_with(|| self.switch_hops_to(sd, 0));
                        let Some(&h) = hops.get(&s) else { continue };
                        let p = self
                            .switch_links(s)
                            .find(|&(_, n)| hops.get(&n) == Some(&(h - 1)))
                            .map(|(p, _)| p)
                            .expect("a switch h hops away has a neighbour h - 1 away");
                        (p, h)
                    }
                    None => {
                        return Err(UpDownError::Unrouted {
                            switch: self.node(s).guid,
                            lid,
                        })
                    }
                };
                table[usize::from(lid)] = p;
                *load.entry((s, p)).or_default() += 1;
                spread.take(s, p);
                len.insert(s, l);
            }
        }
        Ok(Routes { tables })
    }

    /// The up/down order of the switches reachable from `roots`: (rank,
    /// GUID), rank the hops from the nearest root.
    fn up_down_order(&self, roots: &[NodeId]) -> HashMap<NodeId, (u32, u64)> {
        let mut rank: HashMap<NodeId, u32> = roots.iter().map(|&r| (r, 0)).collect();
        let mut queue: VecDeque<NodeId> = roots.iter().copied().collect();
        while let Some(n) = queue.pop_front() {
            for (_, m) in self.switch_links(n) {
                if !rank.contains_key(&m) {
                    rank.insert(m, rank[&n] + 1);
                    queue.push_back(m);
                }
            }
        }
        rank.into_iter()
            .map(|(id, r)| (id, (r, self.node(id).guid)))
            .collect()
    }

    /// The ports of switch `s` linked to another switch, with that switch.
    pub(super) fn switch_links(&self, s: NodeId) -> impl Iterator<Item = (u8, NodeId)> + '_ {
        (1..=self.node(s).num_ports).filter_map(move |p| {
            let peer = self.peer(s, p)?;
            (self.node(peer.node).kind == NodeKind::Switch).then_some((p, peer.node))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::cdg::{credit_loop, dependencies, Channel};
    use super::*;

    /// A ring of `n` switches (ports 1 and 2 to the neighbours) with
    /// `hcas` HCAs on each (ports 3 on).
    fn ring(n: usize, hcas: usize) -> Topology {
        let mut t = Topology::new();
        let s: Vec<_> = (0..n)
            .map(|i| t.add_node(0x100 + i as u64, NodeKind::Switch, 2 + hcas as u8))
            .collect();
        for i in 0..n {
            t.link(s[i], 1, s[(i + 1) % n], 2).unwrap();
            for j in 0..hcas {
                let h = t.add_node(0x10_000 + (i * 16 + j) as u64 * 0x10, NodeKind::Ca, 1);
                t.link(s[i], 3 + j as u8, h, 1).unwrap();
            }
        }
        t
    }

    /// A two-level fat tree: `spines` spines, `leaves` leaves each linked
    /// to every spine, `hcas` HCAs on each leaf.
    fn fat_tree(spines: usize, leaves: usize, hcas: usize) -> (Topology, Vec<NodeId>) {
        let mut t = Topology::new();
        // Leaves first, so that GUID order alone would not find the spines.
        let l: Vec<_> = (0..leaves)
            .map(|i| t.add_node(0x100 + i as u64, NodeKind::Switch, (spines + hcas) as u8))
            .collect();
        let s: Vec<_> = (0..spines)
            .map(|i| t.add_node(0x200 + i as u64, NodeKind::Switch, leaves as u8))
            .collect();
        for (i, &leaf) in l.iter().enumerate() {
            for (j, &spine) in s.iter().enumerate() {
                t.link(leaf, 1 + j as u8, spine, 1 + i as u8).unwrap();
            }
            for k in 0..hcas {
                let h = t.add_node(0x10_000 + (i * 16 + k) as u64 * 0x10, NodeKind::Ca, 1);
                t.link(leaf, (spines + 1 + k) as u8, h, 1).unwrap();
            }
        }
        (t, s)
    }

    /// Every switch's route to every LID ends at the LID's port.
    fn assert_all_routed(t: &Topology, lids: &Lids, routes: &Routes) {
        for (s, n) in t.nodes() {
            if n.kind != NodeKind::Switch {
                continue;
            }
            for (guid, lid) in lids.iter_all() {
                let (dest, dport) = t.end_port_of(guid).unwrap();
                let path = routes
                    .trace(t, s, lid)
                    .unwrap_or_else(|| panic!("{s:?} to {lid}"));
                let &(last, p) = path.last().unwrap();
                if t.node(dest).kind == NodeKind::Switch {
                    assert_eq!((last, p), (dest, 0));
                } else {
                    let peer = t.peer(last, p).unwrap();
                    assert_eq!((peer.node, peer.port), (dest, dport));
                }
            }
        }
    }

    /// The test can fail: minimum hops on a ring make a credit loop, which
    /// up/down routes of the same ring do not.
    #[test]
    fn a_ring_loops_under_minimum_hops_and_not_under_up_down() {
        for n in [4, 5, 6] {
            let t = ring(n, 2);
            let mut lids = Lids::new();
            lids.assign(&t);
            let min_hop = t.min_hop_routes(&lids);
            assert!(
                credit_loop(&dependencies(&t, &lids, &min_hop)).is_some(),
                "ring of {n}: minimum hops without a credit loop"
            );
            let updn = t.up_down_routes(&lids, &[]).unwrap();
            assert_all_routed(&t, &lids, &updn);
            let deps = dependencies(&t, &lids, &updn);
            assert!(!deps.is_empty());
            assert_eq!(credit_loop(&deps), None, "ring of {n} under up/down");
        }
    }

    #[test]
    fn a_fat_tree_is_rooted_at_a_spine_and_routed_without_a_loop() {
        let (t, spines) = fat_tree(2, 4, 2);
        assert!(spines.contains(&t.up_down_root().unwrap()));
        let mut lids = Lids::new();
        lids.assign(&t);
        for roots in [vec![], vec![0x200, 0x201]] {
            let r = t.up_down_routes(&lids, &roots).unwrap();
            assert_all_routed(&t, &lids, &r);
            assert_eq!(credit_loop(&dependencies(&t, &lids, &r)), None);
        }
        // Shortest: a leaf reaches another leaf's HCA through one spine.
        let r = t.up_down_routes(&lids, &[]).unwrap();
        let leaf0 = t.find(0x100).unwrap();
        let far = lids
            .of(&t, t.find(0x10_000 + 3 * 16 * 0x10).unwrap(), 1)
            .unwrap();
        assert_eq!(r.trace(&t, leaf0, far).unwrap().len(), 3);
    }

    /// With LMC 2 every LID of every CA is routed by each engine, up/down
    /// and fat-tree routes stay free of credit loops, and the four LIDs
    /// of a CA leave any other leaf on four different links up (one per
    /// spine). (Load alone spreads them here too: the next test is the one
    /// that needs the spreading of a port's LIDs.)
    #[test]
    fn the_lids_of_a_port_part_on_different_links() {
        let (t, _) = fat_tree(4, 3, 2);
        let mut lids = Lids::with_lmc(2).unwrap();
        lids.assign(&t);
        let engines: [(&str, Routes); 3] = [
            ("minhop", t.min_hop_routes(&lids)),
            // Rooted at every spine (from one, the others rank below the
            // leaves, and up/down takes no route through them).
            (
                "updn",
                t.up_down_routes(&lids, &[0x200, 0x201, 0x202, 0x203])
                    .unwrap(),
            ),
            ("ftree", t.fat_tree_routes(&lids).unwrap()),
        ];
        let leaves: Vec<NodeId> = (0..3).map(|i| t.find(0x100 + i).unwrap()).collect();
        let cas: Vec<NodeId> = t
            .nodes()
            .filter(|(_, n)| n.kind == NodeKind::Ca)
            .map(|(id, _)| id)
            .collect();
        for (name, r) in &engines {
            assert_all_routed(&t, &lids, r);
            if *name != "minhop" {
                assert_eq!(credit_loop(&dependencies(&t, &lids, r)), None, "{name}");
            }
            for &ca in &cas {
                let home = t.peer(ca, 1).unwrap().node;
                let range = lids.range(t.node(ca).port_guid(1)).unwrap();
                for &leaf in leaves.iter().filter(|&&l| l != home) {
                    let mut ups: Vec<u8> =
                        range.clone().map(|l| r.port(leaf, l).unwrap()).collect();
                    ups.sort_unstable();
                    assert_eq!(ups, [1, 2, 3, 4], "{name}: {ca:?} from {leaf:?}");
                }
            }
        }
    }

    /// Load alone would send both LIDs of a port one way when the other
    /// link is busier: leaf A reaches two switches hung off spine 0 only
    /// (lower LIDs, routed first), so its link to spine 1 is the less
    /// loaded for both LIDs of B's CA; each LID of the CA still takes its
    /// own link up, under minimum hops and up/down.
    #[test]
    fn the_lids_of_a_port_part_even_when_one_link_is_busier() {
        let mut t = Topology::new();
        let s0 = t.add_node(0x200, NodeKind::Switch, 4);
        let s1 = t.add_node(0x201, NodeKind::Switch, 4);
        let a = t.add_node(0x100, NodeKind::Switch, 3);
        let b = t.add_node(0x101, NodeKind::Switch, 3);
        for (i, x) in [0x300, 0x301].into_iter().enumerate() {
            let x = t.add_node(x, NodeKind::Switch, 1);
            t.link(s0, 3 + i as u8, x, 1).unwrap();
        }
        for (p, leaf) in [(1, a), (2, b)] {
            t.link(leaf, 1, s0, p).unwrap();
            t.link(leaf, 2, s1, p).unwrap();
        }
        let ca = t.add_node(0x1000, NodeKind::Ca, 1);
        t.link(b, 3, ca, 1).unwrap();
        let other = t.add_node(0x2000, NodeKind::Ca, 1);
        t.link(a, 3, other, 1).unwrap();
        let mut lids = Lids::with_lmc(1).unwrap();
        lids.assign(&t);
        let range = lids.range(0x1000 + 1).unwrap();
        for (name, r) in [
            ("minhop", t.min_hop_routes(&lids)),
            ("updn", t.up_down_routes(&lids, &[0x200, 0x201]).unwrap()),
        ] {
            assert_all_routed(&t, &lids, &r);
            let mut ups: Vec<u8> = range.clone().map(|l| r.port(a, l).unwrap()).collect();
            ups.sort_unstable();
            assert_eq!(ups, [1, 2], "{name}");
        }
    }

    #[test]
    fn roots_that_are_no_switch_are_refused() {
        let (t, _) = fat_tree(2, 2, 1);
        let mut lids = Lids::new();
        lids.assign(&t);
        assert_eq!(
            t.up_down_routes(&lids, &[0x10_000]),
            Err(UpDownError::NotASwitch(0x10_000))
        );
        assert_eq!(
            t.up_down_routes(&lids, &[0xdead]),
            Err(UpDownError::NotASwitch(0xdead))
        );
        assert_eq!(
            Topology::new().up_down_routes(&Lids::new(), &[]),
            Err(UpDownError::NoSwitch)
        );
    }

    #[test]
    fn a_credit_loop_is_found_and_a_chain_is_not() {
        let c = |n: usize, p: u8| (NodeId(n), p);
        let mut deps: HashMap<Channel, std::collections::HashSet<Channel>> = HashMap::new();
        deps.entry(c(0, 1)).or_default().insert(c(1, 1));
        deps.entry(c(1, 1)).or_default().insert(c(2, 1));
        assert_eq!(credit_loop(&deps), None);
        deps.entry(c(2, 1)).or_default().insert(c(0, 1));
        let cycle = credit_loop(&deps).unwrap();
        assert_eq!(cycle.len(), 3);
    }
}
