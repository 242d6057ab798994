//! The sweep: directed-route discovery, LIDs, routes, the switches' tables
//! and the ports' states.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use crate::subnet::{Lids, NodeId, NodeKind};
use rdma::mad::{
    LinearForwardingTable, NodeDescription, NodeInfo, PhysPortState, PortInfo, PortState, SmInfo,
    SwitchInfo,
};
use rdma::umad::AsyncAgent;

use crate::routing::{self, RoutingEngine};
use crate::state::{lock_r, lock_w, Subnet, SUBNET_PREFIX};
use crate::Error;

#[cfg(test)]
mod fake;
mod faults;
mod multicast;
mod pkeys;
pub(crate) use multicast::multicast_masks;
mod wire;

use wire::{get_all, set_all, Wire};

/// The sweeper.
pub struct Sm {
    smi: Arc<Wire>,
    subnet: Arc<RwLock<Subnet>>,
    sm_info: Arc<RwLock<SmInfo>>,
    /// The LFTs as written, by node GUID.
    written: HashMap<u64, Vec<u8>>,
    /// The MFT blocks as written: (node GUID, block, position) to masks.
    mft_written: HashMap<(u64, u16, u8), [u16; 32]>,
    /// The P_KeyTable blocks as written: (node GUID, port, block) to
    /// entries.
    pkey_written: HashMap<(u64, u8, u16), [u16; 32]>,
    /// The partitions, whose P_Keys the sweep writes into the ports.
    pub partitions: crate::partitions::Partitions,
    /// LIDs kept across sweeps.
    lids: Lids,
    /// The routing engines to try, in order, and the roots of up/down.
    routing: Vec<RoutingEngine>,
    roots: Vec<u64>,
    /// Why the next light sweep must be a heavy one: SMPs of the last
    /// heavy sweep (or of the multicast tables since) failed.
    resweep: Option<String>,
    /// Set ClientReregister in the PortInfo of every CA port at the next
    /// sweep (the first as master), so that hosts re-join and re-subscribe.
    pub reregister: bool,
    /// A discovery the next sweep starts from instead of its own (the one
    /// that made this SM master, [`Sm::adopt`]).
    adopted: Option<Discovery>,
}

/// A discovery that cleared no PortStateChange: the subnet found and each
/// switch's SwitchInfo as read.
pub struct Discovery {
    /// Nodes, ports, links, what was read of them.
    pub subnet: Subnet,
    switch_infos: HashMap<NodeId, SwitchInfo>,
}

/// What one sweep found and did.
#[derive(Default, Debug)]
pub struct Report {
    switches: usize,
    cas: usize,
    links: usize,
    new_lids: usize,
    port_infos_set: usize,
    lft_blocks: usize,
    pkey_blocks: usize,
    armed: usize,
    activated: usize,
    failures: usize,
    /// Switches found reset (their tables written whole again).
    resets: usize,
    /// The most SMPs outstanding at once.
    peak_smps: usize,
    /// The routing engine that made the routes.
    engine: Option<RoutingEngine>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} switches, {} CAs, {} links; {} new LIDs; routed by {}; {} PortInfos set; \
             {} switches reset; {} LFT blocks written; {} P_Key blocks written; {} ports armed, {} activated; \
             {} SMPs failed; at most {} SMPs in flight",
            self.switches,
            self.cas,
            self.links,
            self.new_lids,
            self.engine.map_or("nothing", RoutingEngine::name),
            self.port_infos_set,
            self.resets,
            self.lft_blocks,
            self.pkey_blocks,
            self.armed,
            self.activated,
            self.failures,
            self.peak_smps
        )
    }
}

/// A node to reach: its path, and the port it is reached from.
#[derive(Clone)]
struct Probe {
    path: Vec<u8>,
    from: Option<(NodeId, u8)>,
}

impl Sm {
    /// The sweeper of the SMI agent `smi`, with at most `max_wire_smps`
    /// SMPs outstanding at once (0: no limit).
    pub fn new(
        smi: Arc<AsyncAgent>,
        subnet: Arc<RwLock<Subnet>>,
        sm_info: Arc<RwLock<SmInfo>>,
        routing: Vec<RoutingEngine>,
        roots: Vec<u64>,
        max_wire_smps: usize,
    ) -> Sm {
        Sm {
            smi: Arc::new(Wire::new(smi, max_wire_smps)),
            subnet,
            sm_info,
            written: HashMap::new(),
            mft_written: HashMap::new(),
            pkey_written: HashMap::new(),
            partitions: crate::partitions::Partitions::default(),
            lids: Lids::new(),
            routing,
            roots,
            resweep: None,
            reregister: false,
            adopted: None,
        }
    }

    /// Forgets which LFT and MFT blocks were written: the next sweep writes
    /// them all (a new master cannot know what another master left).
    pub fn forget_tables(&mut self) {
        self.written.clear();
        self.mft_written.clear();
        self.pkey_written.clear();
    }

    /// The LIDs kept across sweeps (for the LIDs of an earlier run).
    pub fn lids_mut(&mut self) -> &mut Lids {
        &mut self.lids
    }

    /// Discovery alone, the subnet it found (an SM that is not master
    /// looks for the other SMs in it).
    pub async fn discover_subnet(&self) -> Result<Discovery, Error> {
        let mut subnet = Subnet::default();
        // Read only: PortStateChange is the master's to clear.
        let switch_infos = self.discover(&mut subnet, false).await?;
        Ok(Discovery {
            subnet,
            switch_infos,
        })
    }

    /// The next sweep starts from `d` (the discovery that made this SM
    /// master, as OpenSM's first sweep continues from its discovering
    /// one) instead of discovering again. That discovery cleared no
    /// PortStateChange, so the first light sweep finds it set and a heavy
    /// sweep follows, which clears it: a change since `d` is not lost.
    pub fn adopt(&mut self, d: Discovery) {
        self.adopted = Some(d);
    }

    /// One sweep: discover, assign LIDs, route, program, activate.
    pub async fn sweep(&mut self) -> Result<Report, Error> {
        let mut rep = Report::default();
        let mut next = Subnet::default();
        self.resweep = None;
        let switch_infos = match self.adopted.take() {
            // Its failed SMPs, if any, still in the counts.
            Some(d) => {
                next = d.subnet;
                d.switch_infos
            }
            None => {
                self.smi.take_counts();
                self.discover(&mut next, true).await?
            }
        };
        tracing::debug!("discovered {} nodes", next.topo.len());
        let mut current: Vec<_> = next
            .port_info
            .iter()
            .map(|(&(id, p), pi)| (id, p, pi.lid))
            .collect();
        current.sort_unstable();
        self.lids.keep_current(&next.topo, current);
        rep.resets = self.forget_reset_switches(&next);
        rep.new_lids = self.lids.assign(&next.topo);
        next.lids = self.lids.clone();
        next.index_lids();
        tracing::debug!("{} LIDs, {} new", next.sorted_lids.len(), rep.new_lids);
        let (routes, engine) = routing::route(&next.topo, &next.lids, &self.routing, &self.roots);
        next.routes = routes;
        rep.engine = Some(engine);
        tracing::debug!("routed by {engine}");
        let sm_node = next.sm_node.ok_or("the sweep found no local node")?;
        let sm_port = match next.topo.node(sm_node).kind {
            NodeKind::Switch => 0,
            _ => next.node_info[&sm_node].local_port_num,
        };
        next.sm_lid = next.lids.of(&next.topo, sm_node, sm_port).unwrap_or(0);
        self.program(&mut next, &switch_infos, &mut rep).await;
        (rep.peak_smps, rep.failures) = self.smi.take_counts();
        if rep.failures > 0 {
            self.resweep = Some(format!(
                "{} SMPs failed in the last heavy sweep",
                rep.failures
            ));
        }
        self.reregister = false;
        tracing::debug!("programmed: {rep}");
        for (_, n) in next.topo.nodes() {
            match n.kind {
                NodeKind::Switch => rep.switches += 1,
                _ => rep.cas += 1,
            }
            rep.links += n.links.iter().flatten().count();
        }
        rep.links /= 2;
        let top = next.lids.max_lid();
        next.switch_info = switch_infos
            .into_iter()
            .map(|(id, si)| {
                let si = SwitchInfo {
                    linear_fdb_top: top,
                    port_state_change: false,
                    ..si
                };
                (id, si)
            })
            .collect();
        let mut info = self.sm_info.write().unwrap_or_else(|e| e.into_inner());
        info.sm_state = SmInfo::MASTER;
        info.act_count = info.act_count.wrapping_add(1);
        next.sm_info = *info;
        drop(info);
        {
            let mut s = lock_w(&self.subnet);
            next.groups = std::mem::take(&mut s.groups);
            next.up = true;
            *s = next;
        }
        Ok(rep)
    }

    /// A light sweep: every switch's SwitchInfo and every CA port's
    /// PortInfo, all at once. `None` when nothing changed since the last
    /// heavy sweep; otherwise what did, for the log (a switch whose
    /// PortStateChange is set, a CA port whose state is not the one the
    /// sweep left or not Active, or a node that no longer answers), which
    /// calls for a heavy sweep.
    pub async fn light_sweep(&self) -> Option<String> {
        let (switches, ca_ports) = {
            let s = lock_r(&self.subnet);
            if !s.up {
                return Some("no heavy sweep yet".into());
            }
            let mut switches = Vec::new();
            let mut ca_ports = Vec::new();
            for (id, n) in s.topo.nodes() {
                let Some(path) = s.paths.get(&id) else {
                    continue;
                };
                if n.kind == NodeKind::Switch {
                    switches.push((n.guid, path.clone()));
                    continue;
                }
                for p in n.end_ports() {
                    if let Some(pi) = s.port_info.get(&(id, p)) {
                        ca_ports.push((n.guid, p, path.clone(), pi.port_state));
                    }
                }
            }
            (switches, ca_ports)
        };
        let infos = get_all::<SwitchInfo>(
            &self.smi,
            switches.iter().map(|(_, path)| (0, path.clone())).collect(),
        );
        let ports = get_all::<PortInfo>(
            &self.smi,
            ca_ports
                .iter()
                .map(|(_, p, path, _)| (PortInfo::attr_mod(*p), path.clone()))
                .collect(),
        );
        let (infos, ports, mut changed) = tokio::join!(infos, ports, self.missed());
        for ((guid, _), r) in switches.iter().zip(infos) {
            match r {
                Ok(si) if si.port_state_change => {
                    changed.push(format!("PortStateChange on switch {guid:#x}"))
                }
                Ok(_) => {}
                Err(e) => changed.push(format!("switch {guid:#x}: {e}")),
            }
        }
        for ((guid, p, _, was), r) in ca_ports.iter().zip(ports) {
            match r {
                Ok(pi) if pi.port_state != *was => changed.push(format!(
                    "port {p} of {guid:#x} went from state {was} to {}",
                    pi.port_state
                )),
                // The last heavy sweep did not get it to Active: again.
                Ok(pi) if pi.port_state != PortState::Active => changed.push(format!(
                    "port {p} of {guid:#x} is in state {}, not Active",
                    pi.port_state
                )),
                Ok(_) => {}
                Err(e) => changed.push(format!("port {p} of {guid:#x}: {e}")),
            }
        }
        (!changed.is_empty()).then(|| changed.join("; "))
    }

    /// The subnet the SA serves.
    pub fn subnet(&self) -> Arc<RwLock<Subnet>> {
        self.subnet.clone()
    }

    /// Finds the nodes breadth first from the local one: each new node's
    /// NodeInfo, its description and, of a switch, its SwitchInfo, with
    /// PortStateChange cleared (where set) before the switch's ports are
    /// read, so that a port that changes after its PortInfo was read sets
    /// it again for the next light sweep; then every port. The
    /// switches' SwitchInfos, as read. `clear_psc`: clear PortStateChange
    /// (the master's sweep); a discovery that only looks (a standby's
    /// search for other SMs) leaves it for the master.
    async fn discover(
        &self,
        s: &mut Subnet,
        clear_psc: bool,
    ) -> Result<HashMap<NodeId, SwitchInfo>, Error> {
        let mut switch_infos = HashMap::new();
        let mut level = vec![Probe {
            path: vec![0],
            from: None,
        }];
        while !level.is_empty() {
            let infos = get_all::<NodeInfo>(
                &self.smi,
                level.iter().map(|p| (0, p.path.clone())).collect(),
            )
            .await;
            let mut fresh = Vec::new();
            for (probe, r) in level.iter().zip(infos) {
                let ni = match r {
                    Ok(ni) => ni,
                    Err(e) => {
                        tracing::warn!("NodeInfo along {:?}: {e}", probe.path);
                        continue;
                    }
                };
                let Some(kind) = NodeKind::from_node_type(ni.node_type) else {
                    continue;
                };
                let known = s.topo.find(ni.node_guid).is_some();
                let id = s.topo.add_node(ni.node_guid, kind, ni.num_ports);
                {
                    let n = s.topo.node_mut(id);
                    let slot = if kind == NodeKind::Switch {
                        0
                    } else {
                        ni.local_port_num
                    };
                    if let Some(g) = n.port_guids.get_mut(usize::from(slot)) {
                        *g = ni.port_guid;
                    }
                }
                if let Some((pid, pport)) = probe.from {
                    if let Err(e) = s.topo.link(pid, pport, id, ni.local_port_num) {
                        tracing::warn!("link along {:?}: {e}", probe.path);
                    }
                }
                if probe.from.is_none() {
                    s.sm_node = Some(id);
                }
                // New nodes, and new ports of a CA reached again.
                let new_ca_port =
                    kind != NodeKind::Switch && !s.port_info.contains_key(&(id, ni.local_port_num));
                if !known || new_ca_port {
                    fresh.push((id, probe.clone(), ni, known));
                }
            }
            // The new nodes' descriptions and the new switches' SwitchInfos
            // at once; PortStateChange cleared where set; then the ports of
            // every node of this level.
            let mut described = Vec::new();
            let mut port_jobs = Vec::new();
            for (k, (id, probe, ni, known)) in fresh.iter().enumerate() {
                if !known {
                    s.node_info.insert(*id, *ni);
                    s.paths.insert(*id, probe.path.clone());
                    described.push((*id, probe.path.clone()));
                }
                let ports: Vec<u8> = match s.topo.node(*id).kind {
                    NodeKind::Switch => (0..=ni.num_ports).collect(),
                    _ => vec![ni.local_port_num],
                };
                port_jobs.extend(ports.into_iter().map(|p| (k, p, probe.path.clone())));
            }
            let switches: Vec<(NodeId, Vec<u8>)> = fresh
                .iter()
                .filter(|(id, _, _, known)| !known && s.topo.node(*id).kind == NodeKind::Switch)
                .map(|(id, probe, _, _)| (*id, probe.path.clone()))
                .collect();
            let descs = get_all::<NodeDescription>(
                &self.smi,
                described
                    .iter()
                    .map(|(_, path)| (0, path.clone()))
                    .collect(),
            );
            let sis = get_all::<SwitchInfo>(
                &self.smi,
                switches.iter().map(|(_, path)| (0, path.clone())).collect(),
            );
            let (descs, sis) = tokio::join!(descs, sis);
            for ((id, _), d) in described.iter().zip(descs) {
                if let Ok(d) = d {
                    s.topo.node_mut(*id).description = d.text();
                }
            }
            switch_infos.extend(
                self.clear_port_state_changes(&switches, sis, clear_psc)
                    .await,
            );
            let pis = get_all::<PortInfo>(
                &self.smi,
                port_jobs
                    .iter()
                    .map(|(_, p, path)| (PortInfo::attr_mod(*p), path.clone()))
                    .collect(),
            )
            .await;
            let mut next = Vec::new();
            for ((k, p, _), r) in port_jobs.iter().zip(pis) {
                let (id, probe, ni, _) = &fresh[*k];
                let (id, p) = (*id, *p);
                match r {
                    Ok(pi) => {
                        let up = pi.port_physical_state == PhysPortState::LinkUp;
                        s.port_info.insert((id, p), pi);
                        // A port whose link a probe from its other end
                        // already found leads nowhere new: not probed again
                        // (on a fat tree, every leaf's uplinks, found from
                        // the spines).
                        let explore = s.topo.peer(id, p).is_none()
                            && match s.topo.node(id).kind {
                                NodeKind::Switch => {
                                    p != 0 && (probe.from.is_none() || p != ni.local_port_num)
                                }
                                // Only the local CA sends out of its port.
                                _ => probe.from.is_none(),
                            };
                        if up && explore && probe.path.len() < 64 {
                            let mut path = probe.path.clone();
                            path.push(p);
                            next.push(Probe {
                                path,
                                from: Some((id, p)),
                            });
                        }
                    }
                    Err(e) => {
                        tracing::warn!("PortInfo {p} along {:?}: {e}", probe.path);
                    }
                }
            }
            level = next;
        }
        Ok(switch_infos)
    }

    /// Clears PortStateChange on the `switches` (node, path) whose
    /// SwitchInfo (`infos`, in order) has it set, by writing it back as 1
    /// (IBA 14.2.5.4); the SwitchInfos read, by node.
    async fn clear_port_state_changes(
        &self,
        switches: &[(NodeId, Vec<u8>)],
        infos: Vec<Result<SwitchInfo, Error>>,
        clear_psc: bool,
    ) -> HashMap<NodeId, SwitchInfo> {
        let mut out = HashMap::new();
        let mut clear = Vec::new();
        for ((id, path), r) in switches.iter().zip(infos) {
            match r {
                Ok(si) => {
                    if clear_psc && si.port_state_change {
                        clear.push((0, path.clone(), si));
                    }
                    out.insert(*id, si);
                }
                Err(e) => tracing::warn!("SwitchInfo along {path:?}: {e}"),
            }
        }
        let res = set_all(&self.smi, clear.clone()).await;
        for ((_, path, _), r) in clear.iter().zip(res) {
            if let Err(e) = r {
                tracing::warn!("clearing PortStateChange along {path:?}: {e}");
            }
        }
        out
    }

    /// PortInfo Sets of (node, port, path, value): each port's answer, in
    /// order.
    async fn set_port_infos(
        &self,
        jobs: &[(NodeId, u8, Vec<u8>, PortInfo)],
    ) -> Vec<Result<PortInfo, Error>> {
        let jobs = jobs
            .iter()
            .map(|(_, p, path, w)| (PortInfo::attr_mod(*p), path.clone(), *w))
            .collect();
        set_all(&self.smi, jobs).await
    }

    /// Writes LIDs, the SM's LID and the subnet prefix into every end
    /// port, the LFTs into every switch, then takes the ports to Armed and
    /// Active.
    async fn program(
        &mut self,
        s: &mut Subnet,
        switch_infos: &HashMap<NodeId, SwitchInfo>,
        rep: &mut Report,
    ) {
        let sm_lid = s.sm_lid;
        // End ports: LID, SM LID, prefix (and ClientReregister on CA ports
        // when asked); a linked CA port in Initialize goes to Armed in the
        // same Set (one SMP fewer a CA; switch ports go to Armed below,
        // after the LFTs).
        let mut jobs = Vec::new();
        for (id, n) in s.topo.nodes() {
            let rereg = self.reregister && n.kind != NodeKind::Switch;
            for p in n.end_ports() {
                let Some(lid) = s.lids.of(&s.topo, id, p) else {
                    continue;
                };
                let Some(pi) = s.port_info.get(&(id, p)) else {
                    continue;
                };
                let lmc = s.lids.lmc_of(n.port_guid(p)).unwrap_or(0);
                if !rereg
                    && pi.lid == lid
                    && pi.lmc == lmc
                    && pi.master_sm_lid == sm_lid
                    && pi.gid_prefix == SUBNET_PREFIX
                {
                    continue;
                }
                let mut w = *pi;
                w.lid = lid;
                w.master_sm_lid = sm_lid;
                w.gid_prefix = SUBNET_PREFIX;
                w.lmc = lmc;
                let arm = n.kind != NodeKind::Switch
                    && pi.port_state == PortState::Initialize
                    && s.topo.peer(id, p).is_some();
                w.port_state = if arm {
                    link_params(s, id, p, &mut w);
                    PortState::Armed
                } else {
                    PortState::NoChange
                };
                w.port_physical_state = PhysPortState::NoChange;
                w.subnet_timeout = 18;
                w.client_reregister = rereg;
                jobs.push((id, p, s.paths[&id].clone(), w));
            }
        }
        let results = self.set_port_infos(&jobs).await;
        for ((id, p, _, w), r) in jobs.into_iter().zip(results) {
            match r {
                Ok(pi) => {
                    rep.port_infos_set += 1;
                    if w.port_state == PortState::Armed {
                        rep.armed += 1;
                    }
                    // Kept without the one-shot ClientReregister, which
                    // later Sets (port states) copy; a port that answers
                    // NoChange took the state asked for (as below).
                    let pi = PortInfo {
                        client_reregister: false,
                        port_state: match pi.port_state {
                            PortState::NoChange if w.port_state == PortState::Armed => {
                                PortState::Armed
                            }
                            st => st,
                        },
                        ..pi
                    };
                    s.port_info.insert((id, p), pi);
                }
                Err(e) => {
                    tracing::warn!("PortInfo Set {p} of {:#x}: {e}", s.topo.node(id).guid);
                }
            }
        }
        // Switches: LinearFDBTop where it differs from the SwitchInfo that
        // discovery read, then the LFT blocks that changed, every switch at
        // once.
        let top = s.lids.max_lid();
        let switches: Vec<(NodeId, Vec<u8>)> = s
            .topo
            .nodes()
            .filter(|(_, n)| n.kind == NodeKind::Switch)
            .map(|(id, _)| (id, s.paths[&id].clone()))
            .collect();
        let si_sets: Vec<(u32, Vec<u8>, SwitchInfo)> = switches
            .iter()
            .filter_map(|(id, path)| {
                let si = switch_infos.get(id)?;
                // PortStateChange written as 0 leaves it as it is: set
                // by a change since discovery cleared it.
                (si.linear_fdb_top != top).then(|| {
                    let w = SwitchInfo {
                        linear_fdb_top: top,
                        port_state_change: false,
                        ..*si
                    };
                    (0, path.clone(), w)
                })
            })
            .collect();
        let res = set_all(&self.smi, si_sets.clone()).await;
        for ((_, path, _), r) in si_sets.iter().zip(res) {
            if let Err(e) = r {
                tracing::warn!("SwitchInfo Set along {path:?}: {e}");
            }
        }
        let mut lft_jobs = Vec::new();
        for (sw, path) in &switches {
            let guid = s.topo.node(*sw).guid;
            let table = s.routes.table(*sw).unwrap_or(&[]);
            let old = self
                .written
                .get(&guid)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for (b, entries) in s.routes.blocks(*sw) {
                let lo = b as usize * 64;
                let hi = (lo + 64).min(table.len());
                if old.len() >= hi && old.get(lo..hi) == table.get(lo..hi) {
                    continue;
                }
                lft_jobs.push((*sw, b, path.clone(), entries));
            }
        }
        let res = set_all(
            &self.smi,
            lft_jobs
                .iter()
                .map(|(_, b, path, entries)| {
                    (
                        LinearForwardingTable::attr_mod(*b),
                        path.clone(),
                        LinearForwardingTable { ports: *entries },
                    )
                })
                .collect(),
        )
        .await;
        let mut failed = std::collections::HashSet::new();
        for ((sw, _, path, _), r) in lft_jobs.iter().zip(res) {
            match r {
                Ok(_) => rep.lft_blocks += 1,
                Err(e) => {
                    failed.insert(*sw);
                    tracing::warn!("LFT Set along {path:?}: {e}");
                }
            }
        }
        // A switch's table counts as written once all its blocks are.
        for (sw, _) in &switches {
            if !failed.contains(sw) {
                let table = s.routes.table(*sw).unwrap_or(&[]).to_vec();
                self.written.insert(s.topo.node(*sw).guid, table);
            }
        }
        self.program_pkeys(s, switch_infos, rep).await;
        // Port states: Init to Armed, then Armed to Active.
        for (from, to) in [
            (PortState::Initialize, PortState::Armed),
            (PortState::Armed, PortState::Active),
        ] {
            let mut jobs = Vec::new();
            for (&(id, p), pi) in &s.port_info {
                let node = s.topo.node(id);
                let linked = p != 0 && s.topo.peer(id, p).is_some();
                let is_port0 = node.kind == NodeKind::Switch && p == 0;
                if pi.port_state == from && (linked || is_port0) {
                    let mut w = *pi;
                    if to == PortState::Armed && linked {
                        link_params(s, id, p, &mut w);
                    }
                    w.port_state = to;
                    w.port_physical_state = PhysPortState::NoChange;
                    jobs.push((id, p, s.paths[&id].clone(), w));
                }
            }
            jobs.sort_by_key(|j| (j.0, j.1));
            let results = self.set_port_infos(&jobs).await;
            for ((id, p, _, _), r) in jobs.into_iter().zip(results) {
                match r {
                    Ok(pi) => {
                        if to == PortState::Armed {
                            rep.armed += 1;
                        } else {
                            rep.activated += 1;
                        }
                        let mut pi = pi;
                        // A Set answers with the state it asked for once
                        // the port takes it.
                        if pi.port_state == PortState::NoChange {
                            pi.port_state = to;
                        }
                        s.port_info.insert((id, p), pi);
                    }
                    Err(e) => {
                        tracing::warn!(
                            "PortState {to} for port {p} of {:#x}: {e}",
                            s.topo.node(id).guid
                        );
                    }
                }
            }
        }
    }
}

/// The link's MTU in `w`, the PortInfo that takes port `p` of `id` from
/// Initialize to Armed: NeighborMTU the smaller MTUCap of the two ends,
/// as OpenSM's link manager computes it (which writes it in its pass
/// before Armed). OperationalVLs stays as the port has it: more data VLs
/// need SL-to-VL and VL arbitration tables, which this SM does not write
/// (OpenSM writes all three). Left as read when the peer is not known.
fn link_params(s: &Subnet, id: NodeId, p: u8, w: &mut PortInfo) {
    let Some(peer) = s.topo.peer(id, p) else {
        return;
    };
    let Some(other) = s.port_info.get(&(peer.node, peer.port)) else {
        return;
    };
    if w.mtu_cap != 0 && other.mtu_cap != 0 {
        w.neighbor_mtu = w.mtu_cap.min(other.mtu_cap);
    }
}
