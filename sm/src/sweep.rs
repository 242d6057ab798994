//! The sweep: directed-route discovery, LIDs, routes, the switches' tables
//! and the ports' states.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::subnet::{Lids, NodeId, NodeKind};
use rdma::mad::{
    Attribute, LinearForwardingTable, Mad, Method, NodeDescription, NodeInfo, PhysPortState,
    PortInfo, PortState, SmInfo, SwitchInfo,
};
use rdma::umad::{Address, AsyncAgent};

use crate::routing::{self, RoutingEngine};
use crate::state::{lock_r, lock_w, Subnet, SUBNET_PREFIX};
use crate::Error;

mod multicast;

/// Per attempt.
const SMP_TIMEOUT: Duration = Duration::from_millis(200);
const SMP_RETRIES: u32 = 3;
/// Concurrent SMPs of one sweep step.
const IN_FLIGHT: usize = 32;

/// The sweeper.
pub struct Sm {
    smi: Arc<AsyncAgent>,
    subnet: Arc<RwLock<Subnet>>,
    sm_info: Arc<RwLock<SmInfo>>,
    /// The LFTs as written, by node GUID.
    written: HashMap<u64, Vec<u8>>,
    /// The MFT blocks as written: (node GUID, block, position) to masks.
    mft_written: HashMap<(u64, u16, u8), [u16; 32]>,
    /// LIDs kept across sweeps.
    lids: Lids,
    /// The routing engines to try, in order, and the roots of up/down.
    routing: Vec<RoutingEngine>,
    roots: Vec<u64>,
    /// Set ClientReregister in the PortInfo of every CA port at the next
    /// sweep (the first as master), so that hosts re-join and re-subscribe.
    pub reregister: bool,
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
    armed: usize,
    activated: usize,
    failures: usize,
    /// The routing engine that made the routes.
    engine: Option<RoutingEngine>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} switches, {} CAs, {} links; {} new LIDs; routed by {}; {} PortInfos set; \
             {} LFT blocks written; {} ports armed, {} activated; {} SMPs failed",
            self.switches,
            self.cas,
            self.links,
            self.new_lids,
            self.engine.map_or("nothing", RoutingEngine::name),
            self.port_infos_set,
            self.lft_blocks,
            self.armed,
            self.activated,
            self.failures
        )
    }
}

/// A directed-route SMP Get or Set along `path`; the answer's attribute
/// data (after a status check).
async fn smp(
    smi: &AsyncAgent,
    method: Method,
    attr: u16,
    attr_mod: u32,
    path: &[u8],
    data: Option<&[u8]>,
) -> Result<Mad, Error> {
    let tid = smi.agent().next_tid();
    let mut m = Mad::smp_directed(method, attr, attr_mod, tid, 0, path)?;
    if let Some(d) = data {
        let dst = m.data_mut();
        let n = d.len().min(dst.len());
        dst[..n].copy_from_slice(&d[..n]);
    }
    tracing::trace!("SMP {method:?} {attr:#06x}/{attr_mod} along {path:?}");
    let r = smi
        .request(&m, &Address::smi_lid(0xffff), SMP_TIMEOUT, SMP_RETRIES)
        .await?;
    let st = r.mad.status_without_direction();
    if !st.is_ok() {
        return Err(
            format!("SMP {method:?} {attr:#06x}/{attr_mod} along {path:?}: status {st:?}").into(),
        );
    }
    Ok(r.mad)
}

async fn get<A: Attribute>(smi: &AsyncAgent, attr_mod: u32, path: &[u8]) -> Result<A, Error> {
    Ok(smp(smi, Method::GET, A::ID, attr_mod, path, None)
        .await?
        .attribute::<A>()?)
}

async fn set<A: Attribute>(
    smi: &AsyncAgent,
    attr_mod: u32,
    path: &[u8],
    value: &A,
) -> Result<A, Error> {
    let mut buf = vec![0u8; A::SIZE];
    value.encode_into(&mut buf)?;
    Ok(smp(smi, Method::SET, A::ID, attr_mod, path, Some(&buf))
        .await?
        .attribute::<A>()?)
}

/// Gets of attribute `A`, one per (attribute modifier, path) of `jobs`,
/// through [`all`]: the answers in the order of `jobs`.
async fn get_all<A: Attribute + Send + 'static>(
    smi: &Arc<AsyncAgent>,
    jobs: Vec<(u32, Vec<u8>)>,
) -> Vec<Result<A, Error>> {
    let smi = smi.clone();
    all(jobs, move |(am, path): (u32, Vec<u8>)| {
        let smi = smi.clone();
        async move { get::<A>(&smi, am, &path).await }
    })
    .await
    .into_iter()
    .map(|r| r.and_then(|x| x))
    .collect()
}

/// Runs the futures that `make` makes of `items`, at most [`IN_FLIGHT`]
/// at once (a new one starts as each ends), and returns their results in
/// the order of `items`.
async fn all<T, F, Fut>(items: Vec<T>, make: F) -> Vec<Result<Fut::Output, Error>>
where
    T: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let n = items.len();
    let mut out: Vec<Option<Result<Fut::Output, Error>>> = (0..n).map(|_| None).collect();
    let mut it = items.into_iter().enumerate();
    let mut set = tokio::task::JoinSet::new();
    // Which item each running task is, for a task that panics.
    let mut running = HashMap::new();
    loop {
        while set.len() < IN_FLIGHT {
            let Some((i, item)) = it.next() else { break };
            let fut = make(item);
            let h = set.spawn(async move { (i, fut.await) });
            running.insert(h.id(), i);
        }
        match set.join_next_with_id().await {
            Some(Ok((id, (i, v)))) => {
                running.remove(&id);
                out[i] = Some(Ok(v));
            }
            Some(Err(e)) => {
                if let Some(i) = running.remove(&e.id()) {
                    out[i] = Some(Err(e.to_string().into()));
                }
            }
            None => break,
        }
    }
    out.into_iter()
        .map(|c| c.unwrap_or_else(|| Err("lost".into())))
        .collect()
}

/// A node to reach: its path, and the port it is reached from.
#[derive(Clone)]
struct Probe {
    path: Vec<u8>,
    from: Option<(NodeId, u8)>,
}

impl Sm {
    pub fn new(
        smi: Arc<AsyncAgent>,
        subnet: Arc<RwLock<Subnet>>,
        sm_info: Arc<RwLock<SmInfo>>,
        routing: Vec<RoutingEngine>,
        roots: Vec<u64>,
    ) -> Sm {
        Sm {
            smi,
            subnet,
            sm_info,
            written: HashMap::new(),
            mft_written: HashMap::new(),
            lids: Lids::new(),
            routing,
            roots,
            reregister: false,
        }
    }

    /// Forgets which LFT and MFT blocks were written: the next sweep writes
    /// them all (a new master cannot know what another master left).
    pub fn forget_tables(&mut self) {
        self.written.clear();
        self.mft_written.clear();
    }

    /// The LIDs kept across sweeps (for the LIDs of an earlier run).
    pub fn lids_mut(&mut self) -> &mut Lids {
        &mut self.lids
    }

    /// Discovery alone, the subnet it found (an SM that is not master
    /// looks for the other SMs in it).
    pub async fn discover_subnet(&self) -> Result<Subnet, Error> {
        let mut s = Subnet::default();
        self.discover(&mut s, &mut Report::default()).await?;
        Ok(s)
    }

    /// One sweep: discover, assign LIDs, route, program, activate.
    pub async fn sweep(&mut self) -> Result<Report, Error> {
        let mut rep = Report::default();
        let mut next = Subnet::default();
        self.discover(&mut next, &mut rep).await?;
        tracing::debug!("discovered {} nodes", next.topo.len());
        let mut current: Vec<_> = next
            .port_info
            .iter()
            .map(|(&(id, p), pi)| (id, p, pi.lid))
            .collect();
        current.sort_unstable();
        self.lids.keep_current(&next.topo, current);
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
        self.program(&mut next, &mut rep).await;
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
        {
            let mut s = lock_w(&self.subnet);
            next.groups = std::mem::take(&mut s.groups);
            next.up = true;
            *s = next;
        }
        let mut info = self.sm_info.write().unwrap_or_else(|e| e.into_inner());
        info.sm_state = SmInfo::MASTER;
        info.act_count = info.act_count.wrapping_add(1);
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
        let (infos, ports) = tokio::join!(infos, ports);
        let mut changed = Vec::new();
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

    async fn discover(&self, s: &mut Subnet, rep: &mut Report) -> Result<(), Error> {
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
                        rep.failures += 1;
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
            // The new nodes' descriptions and the ports of every node of
            // this level, all at once.
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
            let descs = get_all::<NodeDescription>(
                &self.smi,
                described
                    .iter()
                    .map(|(_, path)| (0, path.clone()))
                    .collect(),
            );
            let pis = get_all::<PortInfo>(
                &self.smi,
                port_jobs
                    .iter()
                    .map(|(_, p, path)| (PortInfo::attr_mod(*p), path.clone()))
                    .collect(),
            );
            let (descs, pis) = tokio::join!(descs, pis);
            for ((id, _), d) in described.iter().zip(descs) {
                if let Ok(d) = d {
                    s.topo.node_mut(*id).description = d.text();
                }
            }
            let mut next = Vec::new();
            for ((k, p, _), r) in port_jobs.iter().zip(pis) {
                let (id, probe, ni, _) = &fresh[*k];
                let (id, p) = (*id, *p);
                match r {
                    Ok(pi) => {
                        let up = pi.port_physical_state == PhysPortState::LinkUp;
                        s.port_info.insert((id, p), pi);
                        let explore = match s.topo.node(id).kind {
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
                        rep.failures += 1;
                        tracing::warn!("PortInfo {p} along {:?}: {e}", probe.path);
                    }
                }
            }
            level = next;
        }
        Ok(())
    }

    /// PortInfo Sets of (node, port, path, value), [`IN_FLIGHT`] at once:
    /// each port's answer, in order.
    async fn set_port_infos(
        &self,
        jobs: &[(NodeId, u8, Vec<u8>, PortInfo)],
    ) -> Vec<Result<PortInfo, Error>> {
        let smi = self.smi.clone();
        all(
            jobs.to_vec(),
            move |(_, p, path, w): (NodeId, u8, Vec<u8>, PortInfo)| {
                let smi = smi.clone();
                async move { set(&smi, PortInfo::attr_mod(p), &path, &w).await }
            },
        )
        .await
        .into_iter()
        .map(|r| r.and_then(|x| x))
        .collect()
    }

    /// Writes LIDs, the SM's LID and the subnet prefix into every end
    /// port, the LFTs into every switch, then takes the ports to Armed and
    /// Active.
    async fn program(&mut self, s: &mut Subnet, rep: &mut Report) {
        let sm_lid = s.sm_lid;
        // End ports: LID, SM LID, prefix (and ClientReregister on CA ports
        // when asked).
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
                if !rereg
                    && pi.lid == lid
                    && pi.master_sm_lid == sm_lid
                    && pi.gid_prefix == SUBNET_PREFIX
                {
                    continue;
                }
                let mut w = *pi;
                w.lid = lid;
                w.master_sm_lid = sm_lid;
                w.gid_prefix = SUBNET_PREFIX;
                w.lmc = 0;
                w.port_state = PortState::NoChange;
                w.port_physical_state = PhysPortState::NoChange;
                w.subnet_timeout = 18;
                w.client_reregister = rereg;
                jobs.push((id, p, s.paths[&id].clone(), w));
            }
        }
        let results = self.set_port_infos(&jobs).await;
        for ((id, p, _, _), r) in jobs.into_iter().zip(results) {
            match r {
                Ok(pi) => {
                    rep.port_infos_set += 1;
                    // Kept without the one-shot ClientReregister, which
                    // later Sets (port states) copy.
                    let pi = PortInfo {
                        client_reregister: false,
                        ..pi
                    };
                    s.port_info.insert((id, p), pi);
                }
                Err(e) => {
                    rep.failures += 1;
                    tracing::warn!("PortInfo Set {p} of {:#x}: {e}", s.topo.node(id).guid);
                }
            }
        }
        // Switches: LinearFDBTop (clearing PortStateChange), then the LFT
        // blocks that changed, every switch at once.
        let top = s.lids.max_lid();
        let switches: Vec<(NodeId, Vec<u8>)> = s
            .topo
            .nodes()
            .filter(|(_, n)| n.kind == NodeKind::Switch)
            .map(|(id, _)| (id, s.paths[&id].clone()))
            .collect();
        let infos = get_all::<SwitchInfo>(
            &self.smi,
            switches.iter().map(|(_, path)| (0, path.clone())).collect(),
        )
        .await;
        let mut si_sets = Vec::new();
        for ((_, path), r) in switches.iter().zip(infos) {
            match r {
                // Writing PortStateChange as 1 clears it (IBA 14.2.5.4).
                Ok(si) if si.linear_fdb_top != top || si.port_state_change => {
                    si_sets.push((
                        path.clone(),
                        SwitchInfo {
                            linear_fdb_top: top,
                            ..si
                        },
                    ));
                }
                Ok(_) => {}
                Err(e) => {
                    rep.failures += 1;
                    tracing::warn!("SwitchInfo along {path:?}: {e}");
                }
            }
        }
        let smi = self.smi.clone();
        let res = all(si_sets.clone(), move |(path, w): (Vec<u8>, SwitchInfo)| {
            let smi = smi.clone();
            async move { set(&smi, 0, &path, &w).await }
        })
        .await;
        for ((path, _), r) in si_sets.iter().zip(res) {
            if let Err(e) = r.and_then(|x| x) {
                rep.failures += 1;
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
        let smi = self.smi.clone();
        let res = all(
            lft_jobs.clone(),
            move |(_, b, path, entries): (NodeId, u32, Vec<u8>, [u8; 64])| {
                let smi = smi.clone();
                async move {
                    set(
                        &smi,
                        LinearForwardingTable::attr_mod(b),
                        &path,
                        &LinearForwardingTable { ports: entries },
                    )
                    .await
                }
            },
        )
        .await;
        let mut failed = std::collections::HashSet::new();
        for ((sw, _, path, _), r) in lft_jobs.iter().zip(res) {
            match r.and_then(|x| x) {
                Ok(_) => rep.lft_blocks += 1,
                Err(e) => {
                    failed.insert(*sw);
                    rep.failures += 1;
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
                        rep.failures += 1;
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
