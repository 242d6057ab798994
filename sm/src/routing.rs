//! The routing engines and the fallback list that picks one, as OpenSM's
//! `-R`: each engine in turn until one routes the subnet.

use std::fmt;
use std::str::FromStr;

use crate::subnet::{Lids, Routes, Topology};

/// A unicast routing engine, by OpenSM's name for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutingEngine {
    /// `minhop`: shortest paths, spread over parallel links (OpenSM's
    /// default). Can deadlock on topologies with cycles (a ring).
    MinHop,
    /// `updn`: up/down from the roots ([`Config::roots`](crate::Config),
    /// or the middle of the subnet): no credit loop on any topology.
    UpDown,
    /// `ftree`: on a fat tree, up/down from every top switch, found from
    /// the leaves (the switches with CAs): the shortest routes, no credit
    /// loop, spread over the links up. Refuses a subnet that is no fat
    /// tree, so that the next engine of the list routes it.
    FatTree,
}

impl RoutingEngine {
    /// OpenSM's name of the engine.
    pub fn name(self) -> &'static str {
        match self {
            RoutingEngine::MinHop => "minhop",
            RoutingEngine::UpDown => "updn",
            RoutingEngine::FatTree => "ftree",
        }
    }
}

impl fmt::Display for RoutingEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RoutingEngine {
    type Err = String;
    fn from_str(s: &str) -> Result<RoutingEngine, String> {
        match s {
            "minhop" => Ok(RoutingEngine::MinHop),
            "updn" => Ok(RoutingEngine::UpDown),
            "ftree" => Ok(RoutingEngine::FatTree),
            _ => Err(format!(
                "no routing engine {s:?} (there are minhop, updn and ftree)"
            )),
        }
    }
}

/// Parses a root GUID file (OpenSM's `-a`): a GUID a line, in hexadecimal
/// with or without `0x`; blank lines and `#` comments are skipped.
pub fn parse_root_guids(text: &str) -> Result<Vec<u64>, String> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i, l.split('#').next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, l)| {
            let hex = l
                .strip_prefix("0x")
                .or_else(|| l.strip_prefix("0X"))
                .unwrap_or(l);
            u64::from_str_radix(hex, 16)
                .map_err(|e| format!("line {}: {l:?} is not a GUID: {e}", i + 1))
        })
        .collect()
}

/// Routes the subnet with the first of `engines` that can (minhop always
/// can); the routes and the engine that made them.
pub(crate) fn route(
    topo: &Topology,
    lids: &Lids,
    engines: &[RoutingEngine],
    roots: &[u64],
) -> (Routes, RoutingEngine) {
    for &engine in engines {
        match engine {
            RoutingEngine::MinHop => return (topo.min_hop_routes(lids), engine),
            RoutingEngine::UpDown => match topo.up_down_routes(lids, roots) {
                Ok(r) => return (r, engine),
                Err(e) => tracing::warn!("routing engine updn failed: {e}; trying the next"),
            },
            RoutingEngine::FatTree => match topo.fat_tree_routes(lids) {
                Ok(r) => return (r, engine),
                Err(e) => tracing::warn!("routing engine ftree failed: {e}; trying the next"),
            },
        }
    }
    tracing::warn!("no routing engine of the list routed the subnet: minhop");
    (topo.min_hop_routes(lids), RoutingEngine::MinHop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subnet::NodeKind;

    #[test]
    fn engine_names_and_root_files_parse_as_opensm_writes_them() {
        assert_eq!("updn".parse(), Ok(RoutingEngine::UpDown));
        assert_eq!("ftree".parse(), Ok(RoutingEngine::FatTree));
        assert!("dor".parse::<RoutingEngine>().unwrap_err().contains("dor"));
        assert_eq!(
            parse_root_guids("# roots\n0x0002c90300000001\n\n2c90300000002 # spine 2\n"),
            Ok(vec![0x0002_c903_0000_0001, 0x2_c903_0000_0002])
        );
        assert!(parse_root_guids("0x1\nspine\n")
            .unwrap_err()
            .starts_with("line 2"));
    }

    #[test]
    fn a_failing_engine_falls_back_to_the_next() {
        let mut t = Topology::new();
        let s = t.add_node(0x10, NodeKind::Switch, 2);
        let h = t.add_node(0x1000, NodeKind::Ca, 1);
        t.link(s, 1, h, 1).unwrap();
        let mut lids = Lids::new();
        lids.assign(&t);
        // A root that is no switch: updn fails, minhop routes.
        let (r, e) = route(
            &t,
            &lids,
            &[RoutingEngine::UpDown, RoutingEngine::MinHop],
            &[0x1000],
        );
        assert_eq!(e, RoutingEngine::MinHop);
        assert_eq!(r, t.min_hop_routes(&lids));
        let (_, e) = route(&t, &lids, &[RoutingEngine::UpDown], &[]);
        assert_eq!(e, RoutingEngine::UpDown);
    }

    /// OpenSM's list `ftree,updn,minhop`: a ring is no fat tree, so up/down
    /// routes it; a fat tree is routed by ftree.
    #[test]
    fn ftree_routes_a_fat_tree_and_leaves_a_ring_to_the_next() {
        let list = [
            RoutingEngine::FatTree,
            RoutingEngine::UpDown,
            RoutingEngine::MinHop,
        ];
        let mut ring = Topology::new();
        let s: Vec<_> = (0..4)
            .map(|i| ring.add_node(0x10 + i, NodeKind::Switch, 3))
            .collect();
        for i in 0..4 {
            ring.link(s[i], 1, s[(i + 1) % 4], 2).unwrap();
            let h = ring.add_node(0x100 + i as u64, NodeKind::Ca, 1);
            ring.link(s[i], 3, h, 1).unwrap();
        }
        let mut lids = Lids::new();
        lids.assign(&ring);
        assert_eq!(route(&ring, &lids, &list, &[]).1, RoutingEngine::UpDown);

        let mut tree = Topology::new();
        let spine = tree.add_node(0x10, NodeKind::Switch, 2);
        for i in 0..2u8 {
            let leaf = tree.add_node(0x20 + u64::from(i), NodeKind::Switch, 2);
            tree.link(spine, 1 + i, leaf, 1).unwrap();
            let h = tree.add_node(0x100 + u64::from(i), NodeKind::Ca, 1);
            tree.link(leaf, 2, h, 1).unwrap();
        }
        let mut lids = Lids::new();
        lids.assign(&tree);
        let (r, e) = route(&tree, &lids, &list, &[]);
        assert_eq!(e, RoutingEngine::FatTree);
        assert_eq!(r, tree.fat_tree_routes(&lids).unwrap());
    }
}
