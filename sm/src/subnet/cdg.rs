//! The channel dependency graph of a subnet's routes: whether they can
//! deadlock.
//!
//! A channel is a switch's egress port toward another switch. A route that
//! leaves one channel for the next makes the second a dependency of the
//! first: a packet holding buffer credits of the first waits for credits of
//! the second. A cycle of such dependencies is a credit loop, which can
//! deadlock the subnet under load; routes without one cannot.

use std::collections::{HashMap, HashSet};

use super::{Lids, NodeId, NodeKind, Routes, Topology};

/// A switch's egress port toward another switch.
pub type Channel = (NodeId, u8);

/// The channel dependencies of the routes between every pair of CA end
/// ports of `lids` (each the switch-to-switch channels its packets take, in
/// order): for each channel, the channels a route takes next.
pub fn dependencies(
    topo: &Topology,
    lids: &Lids,
    routes: &Routes,
) -> HashMap<Channel, HashSet<Channel>> {
    // Each LID of each CA end port (all 2^LMC of them) and the switch the
    // port hangs on.
    let cas: Vec<(u16, NodeId)> = lids
        .iter_all()
        .filter_map(|(guid, lid)| {
            let (id, port) = topo.end_port_of(guid)?;
            if topo.node(id).kind == NodeKind::Switch {
                return None;
            }
            let peer = topo.peer(id, port)?;
            (topo.node(peer.node).kind == NodeKind::Switch).then_some((lid, peer.node))
        })
        .collect();
    let mut deps: HashMap<Channel, HashSet<Channel>> = HashMap::new();
    let mut sources: Vec<NodeId> = cas.iter().map(|&(_, s)| s).collect();
    sources.sort_unstable();
    sources.dedup();
    for &from in &sources {
        for &(lid, _) in &cas {
            let Some(path) = routes.trace(topo, from, lid) else {
                continue;
            };
            let channels: Vec<Channel> = path
                .into_iter()
                .filter(|&(s, p)| {
                    p != 0
                        && topo
                            .peer(s, p)
                            .is_some_and(|peer| topo.node(peer.node).kind == NodeKind::Switch)
                })
                .collect();
            for w in channels.windows(2) {
                deps.entry(w[0]).or_default().insert(w[1]);
            }
        }
    }
    deps
}

/// A cycle of the channel dependency graph (its channels in order), if
/// there is one: a credit loop of the routes.
pub fn credit_loop(deps: &HashMap<Channel, HashSet<Channel>>) -> Option<Vec<Channel>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut mark: HashMap<Channel, Mark> = HashMap::new();
    let mut starts: Vec<Channel> = deps.keys().copied().collect();
    starts.sort_unstable();
    for start in starts {
        if mark.contains_key(&start) {
            continue;
        }
        // Depth first, without recursion: the channels on the way, each
        // with the dependencies still to visit.
        let mut way: Vec<(Channel, Vec<Channel>)> = vec![(start, next_of(deps, start))];
        mark.insert(start, Mark::Open);
        while let Some((at, todo)) = way.last_mut() {
            let at = *at;
            match todo.pop() {
                Some(n) => match mark.get(&n) {
                    Some(Mark::Open) => {
                        let from = way
                            .iter()
                            .position(|(c, _)| *c == n)
                            .expect("open on the way");
                        return Some(way[from..].iter().map(|(c, _)| *c).collect());
                    }
                    Some(Mark::Done) => {}
                    None => {
                        mark.insert(n, Mark::Open);
                        way.push((n, next_of(deps, n)));
                    }
                },
                None => {
                    mark.insert(at, Mark::Done);
                    way.pop();
                }
            }
        }
    }
    None
}

fn next_of(deps: &HashMap<Channel, HashSet<Channel>>, c: Channel) -> Vec<Channel> {
    let mut v: Vec<Channel> = deps.get(&c).into_iter().flatten().copied().collect();
    v.sort_unstable();
    v
}
