//! The partitions in the ports: each end port's P_Key table, and, on the
//! switches that enforce partitions (SwitchInfo PartitionEnforcementCap
//! above 0), the table of each external port that leads to a CA, with the
//! port's PartitionEnforcementInbound and Outbound set (as OpenSM's
//! pkey manager does). Blocks are written where they differ from what
//! was last written, as the LFT blocks are.

use std::collections::HashMap;

use rdma::mad::{PKeyTable, PortInfo, PortState, SwitchInfo};

use super::wire::set_all;
use super::{Report, Sm};
use crate::partitions;
use crate::state::Subnet;
use crate::subnet::{NodeId, NodeKind};

/// A P_KeyTable Set: node, port, block, path, entries.
type Job = (NodeId, u8, u16, Vec<u8>, [u16; 32]);

impl Sm {
    /// Fills [`Subnet::pkeys`] from the partitions, and writes the tables
    /// into the ports when the partitions come from a file (without one
    /// the ports keep the table they come up with: the default partition,
    /// full).
    pub(super) async fn program_pkeys(
        &mut self,
        s: &mut Subnet,
        switch_infos: &HashMap<NodeId, SwitchInfo>,
        rep: &mut Report,
    ) {
        let sm_port = s.sm_node.map(|id| {
            let n = s.topo.node(id);
            match n.kind {
                NodeKind::Switch => n.port_guid(0),
                _ => n.port_guid(s.node_info.get(&id).map_or(1, |ni| ni.local_port_num)),
            }
        });
        let tables = self.partitions.tables(&s.topo, sm_port);
        s.pkeys.clear();
        for (guid, t) in &tables {
            let Some((id, p)) = s.topo.end_port_of(*guid) else {
                continue;
            };
            let cap = s.node_info.get(&id).map_or(0, |ni| ni.partition_cap);
            let (fits, dropped) = partitions::fit(t, cap);
            if dropped > 0 {
                tracing::warn!(
                    "port {guid:#x} holds {cap} P_Keys: {dropped} of its partitions left out"
                );
            }
            s.pkeys.insert((id, p), fits.to_vec());
        }
        if self.partitions.is_default() {
            return;
        }
        // Ports that came up again (Down or Init) lost what was written.
        for (&(id, p), pi) in &s.port_info {
            if matches!(pi.port_state, PortState::Down | PortState::Initialize) {
                let guid = s.topo.node(id).guid;
                self.pkey_written.retain(|k, _| (k.0, k.1) != (guid, p));
            }
        }
        // Switch external ports toward CAs, where the switch enforces:
        // the CA's table.
        let mut enforce = Vec::new();
        let mut toggles = Vec::new();
        for (id, n) in s.topo.nodes() {
            let Some(si) = switch_infos.get(&id) else {
                continue;
            };
            if n.kind != NodeKind::Switch || si.partition_enforcement_cap == 0 {
                continue;
            }
            for p in 1..=n.num_ports {
                let Some(peer) = s.topo.peer(id, p) else {
                    continue;
                };
                if s.topo.node(peer.node).kind == NodeKind::Switch {
                    continue;
                }
                let Some(t) = s.pkeys.get(&(peer.node, peer.port)) else {
                    continue;
                };
                let on = t.len() <= usize::from(si.partition_enforcement_cap);
                if on {
                    enforce.push(((id, p), t.clone()));
                } else {
                    tracing::warn!(
                        "switch {:#x} port {p}: {} P_Keys past its enforcement cap {}: not enforced",
                        n.guid,
                        t.len(),
                        si.partition_enforcement_cap
                    );
                }
                if let Some(pi) = s.port_info.get(&(id, p)) {
                    let have = (
                        pi.partition_enforcement_inbound,
                        pi.partition_enforcement_outbound,
                    );
                    if have != (on, on) {
                        toggles.push((id, p, on));
                    }
                }
            }
        }
        for (id, p, on) in toggles {
            self.set_enforcement(s, id, p, on).await;
        }
        s.pkeys.extend(enforce);
        let mut jobs: Vec<Job> = Vec::new();
        for (&(id, p), t) in &s.pkeys {
            let guid = s.topo.node(id).guid;
            let Some(path) = s.paths.get(&id) else {
                continue;
            };
            let mut blocks = partitions::blocks(t);
            // Blocks written before past the new table's end: cleared.
            let old = self
                .pkey_written
                .keys()
                .filter(|k| (k.0, k.1) == (guid, p))
                .map(|k| usize::from(k.2) + 1)
                .max()
                .unwrap_or(0);
            while blocks.len() < old {
                blocks.push([0; 32]);
            }
            for (b, entries) in blocks.into_iter().enumerate() {
                let b = b as u16;
                if self.pkey_written.get(&(guid, p, b)) != Some(&entries) {
                    jobs.push((id, p, b, path.clone(), entries));
                }
            }
        }
        jobs.sort_by_key(|j| (j.0, j.1, j.2));
        let res = set_all(
            &self.smi,
            jobs.iter()
                .map(|(_, p, b, path, e)| {
                    (
                        PKeyTable::attr_mod(*b, *p),
                        path.clone(),
                        PKeyTable { pkeys: *e },
                    )
                })
                .collect(),
        )
        .await;
        for ((id, p, b, _, e), r) in jobs.iter().zip(res) {
            let guid = s.topo.node(*id).guid;
            match r {
                Ok(_) => {
                    rep.pkey_blocks += 1;
                    self.pkey_written.insert((guid, *p, *b), *e);
                }
                Err(err) => {
                    self.pkey_written.remove(&(guid, *p, *b));
                    tracing::warn!("P_KeyTable Set block {b} of port {p} of {guid:#x}: {err}");
                }
            }
        }
    }

    /// PortInfo Set of a switch's external port with partition
    /// enforcement inbound and outbound `on`.
    async fn set_enforcement(&self, s: &mut Subnet, id: NodeId, p: u8, on: bool) {
        let Some(pi) = s.port_info.get(&(id, p)) else {
            return;
        };
        let w = PortInfo {
            partition_enforcement_inbound: on,
            partition_enforcement_outbound: on,
            port_state: PortState::NoChange,
            port_physical_state: rdma::mad::PhysPortState::NoChange,
            ..*pi
        };
        let path = s.paths[&id].clone();
        let r = self.set_port_infos(&[(id, p, path, w)]).await;
        match r.into_iter().next() {
            Some(Ok(mut pi)) => {
                if pi.port_state == PortState::NoChange {
                    pi.port_state = s.port_info[&(id, p)].port_state;
                }
                s.port_info.insert((id, p), pi);
            }
            Some(Err(e)) => tracing::warn!(
                "PortInfo Set (partition enforcement) of port {p} of {:#x}: {e}",
                s.topo.node(id).guid
            ),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use rdma::mad::{Attribute, PKeyTable};

    use super::super::fake::{sm, Fabric};
    use crate::partitions;
    use crate::state::lock_r;

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(f)
    }

    /// The P_KeyTable Sets in the fabric's log since `from`.
    fn pkey_sets(f: &Mutex<Fabric>, from: usize) -> usize {
        let f = f.lock().unwrap();
        f.log[from..]
            .iter()
            .filter(|o| o.attr == PKeyTable::ID && o.method == rdma::mad::Method::SET)
            .count()
    }

    #[test]
    fn tables_are_written_once_and_again_after_a_reset() {
        const SW: usize = 1;
        // Without a file: no P_Key writes, every port full in the default
        // partition.
        let fabric = Arc::new(Mutex::new(Fabric::star(3, 4)));
        let mut plain = sm(&fabric, 4);
        run(plain.sweep()).unwrap();
        assert_eq!(pkey_sets(&fabric, 0), 0);
        let subnet = plain.subnet();
        assert!(lock_r(&subnet).pkeys.values().all(|t| t == &[0xffff]));
        // With one: a block into each end port (3 CA ports, the switch's
        // port 0), none on the next sweep, the switch's again once reset.
        let fabric = Arc::new(Mutex::new(Fabric::star(3, 4)));
        let mut sm = sm(&fabric, 4);
        sm.partitions = partitions::parse("red=0x1:0x1200=full,ALL_SWITCHES;").unwrap();
        let first = run(sm.sweep()).unwrap();
        assert_eq!(
            (first.pkey_blocks, pkey_sets(&fabric, 0)),
            (4, 4),
            "{first}"
        );
        {
            let subnet = sm.subnet();
            let s = lock_r(&subnet);
            let mut tables: Vec<Vec<u16>> = s.pkeys.values().cloned().collect();
            tables.sort();
            // The SM's port (0x100) full in the default partition.
            assert_eq!(
                tables,
                [
                    vec![0x7fff],
                    vec![0x7fff, 0x0001],
                    vec![0x7fff, 0x8001],
                    vec![0xffff]
                ]
            );
        }
        let mark = fabric.lock().unwrap().log.len();
        let again = run(sm.sweep()).unwrap();
        assert_eq!(
            (again.pkey_blocks, pkey_sets(&fabric, mark)),
            (0, 0),
            "{again}"
        );
        fabric.lock().unwrap().reset(SW);
        let mark = fabric.lock().unwrap().log.len();
        let after = run(sm.sweep()).unwrap();
        assert_eq!(after.resets, 1, "{after}");
        assert_eq!(
            (after.pkey_blocks, pkey_sets(&fabric, mark)),
            (1, 1),
            "{after}"
        );
        // A new master writes them all again.
        sm.forget_tables();
        assert_eq!(run(sm.sweep()).unwrap().pkey_blocks, 4);
    }
}
