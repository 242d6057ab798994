//! The sweep against a fabric in memory: each node's SMA answers the
//! sweep's SMPs as IBA says (and as ibsim does), a hook changes the fabric
//! after any SMP, and a filter loses SMPs. The order of the sweep's
//! operations, what it writes, and how many SMPs it has outstanding at once
//! are checked here without a device.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use rdma::mad::{
    Attribute, LinearForwardingTable, Method, NodeInfo, PhysPortState, PortInfo, PortState, SmInfo,
    SwitchInfo,
};

use super::wire::Wire;
use super::Sm;
use crate::routing::RoutingEngine;
use crate::state::{lock_r, Subnet};
use crate::subnet::Lids;

/// One SMP as a node's SMA took it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Op {
    pub method: Method,
    pub attr: u16,
    pub attr_mod: u32,
    /// The node it reached (its index).
    pub node: usize,
}

struct Node {
    info: NodeInfo,
    /// By port number (a switch's port 0 included; a CA's port 0 unused).
    ports: Vec<PortInfo>,
    links: HashMap<u8, (usize, u8)>,
    si: Option<SwitchInfo>,
    lft: Vec<u8>,
}

type Hook = Box<dyn FnMut(&mut Fabric, &Op) + Send>;
type Filter = Box<dyn Fn(&Op) -> bool + Send>;

/// Nodes and links; node 0 holds the SM's port.
pub(super) struct Fabric {
    nodes: Vec<Node>,
    /// Every SMP answered, in order.
    pub log: Vec<Op>,
    hook: Option<Hook>,
    lost: Option<Filter>,
}

const CA: u8 = 1;
const SWITCH: u8 = 2;

impl Fabric {
    /// A switch of `ports` ports; CA `i` on port `i + 1` (CA 0 the SM's),
    /// the other ports down. Node 0: CA 0; node 1: the switch; node `i + 2`:
    /// CA `i + 1`.
    pub fn star(cas: u8, ports: u8) -> Fabric {
        let mut f = Fabric {
            nodes: Vec::new(),
            log: Vec::new(),
            hook: None,
            lost: None,
        };
        f.add(0x100, CA, 1);
        let sw = f.add(0x200, SWITCH, ports);
        for i in 1..cas {
            f.add(0x100 + 0x100 * u64::from(i) + 0x1000, CA, 1);
        }
        f.link(0, 1, sw, 1);
        for i in 1..cas {
            f.link(usize::from(i) + 1, 1, sw, i + 1);
        }
        f
    }

    fn add(&mut self, guid: u64, node_type: u8, num_ports: u8) -> usize {
        // MTU 4096 and VL0-7 (as ibsim's ports), NeighborMTU and
        // OperationalVLs at their reset values (256, VL0).
        let down = PortInfo {
            port_state: PortState::Down,
            port_physical_state: PhysPortState::Polling,
            mtu_cap: 5,
            vl_cap: 4,
            neighbor_mtu: 1,
            operational_vls: 1,
            ..PortInfo::default()
        };
        let mut ports = vec![down; usize::from(num_ports) + 1];
        let si = (node_type == SWITCH).then(|| {
            // A switch's management port is up from the start.
            ports[0].port_state = PortState::Active;
            ports[0].port_physical_state = PhysPortState::LinkUp;
            SwitchInfo {
                linear_fdb_cap: 768 * 64,
                ..SwitchInfo::default()
            }
        });
        self.nodes.push(Node {
            info: NodeInfo {
                base_version: 1,
                class_version: 1,
                node_type,
                num_ports,
                node_guid: guid,
                port_guid: guid,
                partition_cap: 32,
                ..NodeInfo::default()
            },
            ports,
            links: HashMap::new(),
            si,
            lft: vec![0xff; 64 * 4],
        });
        self.nodes.len() - 1
    }

    fn link(&mut self, a: usize, pa: u8, b: usize, pb: u8) {
        self.nodes[a].links.insert(pa, (b, pb));
        self.nodes[b].links.insert(pb, (a, pa));
        for (n, p) in [(a, pa), (b, pb)] {
            let pi = &mut self.nodes[n].ports[usize::from(p)];
            pi.port_state = PortState::Initialize;
            pi.port_physical_state = PhysPortState::LinkUp;
            if let Some(si) = &mut self.nodes[n].si {
                si.port_state_change = true;
            }
        }
    }

    /// A new CA (GUID `guid`) plugged into port `p` of `node`: the port
    /// comes up, which sets the switch's PortStateChange.
    pub fn plug(&mut self, node: usize, p: u8, guid: u64) {
        let ca = self.add(guid, CA, 1);
        self.link(node, p, ca, 1);
    }

    /// A switch's reset: its LFT empty, port 0 without a LID.
    pub fn reset(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.lft.fill(0xff);
        n.ports[0].lid = 0;
        if let Some(si) = &mut n.si {
            si.linear_fdb_top = 0;
        }
    }

    pub fn port_state_change(&self, node: usize) -> bool {
        self.nodes[node].si.is_some_and(|si| si.port_state_change)
    }

    pub fn lft(&self, node: usize) -> &[u8] {
        &self.nodes[node].lft
    }

    pub fn port(&self, node: usize, p: u8) -> &PortInfo {
        &self.nodes[node].ports[usize::from(p)]
    }

    pub fn on_each(&mut self, hook: impl FnMut(&mut Fabric, &Op) + Send + 'static) {
        self.hook = Some(Box::new(hook));
    }

    pub fn lose(&mut self, filter: Option<Filter>) {
        self.lost = filter;
    }

    /// The node at the end of `path`, and the port the SMP entered it by.
    fn along(&self, path: &[u8]) -> Option<(usize, u8)> {
        let mut at = (0, 1);
        for &p in path.get(1..)? {
            at = *self.nodes[at.0].links.get(&p)?;
        }
        Some(at)
    }

    /// The SMA's answer (the attribute's bytes); `None`: lost or no node.
    fn answer(
        &mut self,
        method: Method,
        attr: u16,
        attr_mod: u32,
        path: &[u8],
        data: Option<&[u8]>,
    ) -> Option<Vec<u8>> {
        let (node, entered) = self.along(path)?;
        let op = Op {
            method,
            attr,
            attr_mod,
            node,
        };
        if self.lost.as_ref().is_some_and(|lost| lost(&op)) {
            return None;
        }
        let set = method == Method::SET;
        let n = &mut self.nodes[node];
        let out = match attr {
            NodeInfo::ID => encode(&NodeInfo {
                local_port_num: entered,
                ..n.info
            }),
            0x10 => vec![0; 64],
            PortInfo::ID => {
                let p = usize::try_from(attr_mod).ok()?;
                let cur = n.ports.get_mut(p)?;
                if set {
                    let w = PortInfo::decode(data?).ok()?;
                    cur.lid = w.lid;
                    cur.lmc = w.lmc;
                    cur.master_sm_lid = w.master_sm_lid;
                    cur.gid_prefix = w.gid_prefix;
                    // As ibsim: more VLs than the port has is a bad Set.
                    if w.operational_vls > cur.vl_cap {
                        return None;
                    }
                    cur.neighbor_mtu = w.neighbor_mtu;
                    cur.operational_vls = w.operational_vls;
                    cur.port_state = match (cur.port_state, w.port_state) {
                        (PortState::Initialize, PortState::Armed) => PortState::Armed,
                        (PortState::Armed, PortState::Active) => PortState::Active,
                        (s, _) => s,
                    };
                }
                encode(&PortInfo {
                    local_port_num: entered,
                    ..*cur
                })
            }
            SwitchInfo::ID => {
                let si = n.si.as_mut()?;
                if set {
                    let w = SwitchInfo::decode(data?).ok()?;
                    // Written as 1, PortStateChange clears.
                    if w.port_state_change {
                        si.port_state_change = false;
                    }
                    si.linear_fdb_top = w.linear_fdb_top;
                }
                encode(&*si)
            }
            LinearForwardingTable::ID => {
                n.si?;
                let lo = usize::try_from(attr_mod).ok()? * 64;
                let block = n.lft.get_mut(lo..lo + 64)?;
                if set {
                    block.copy_from_slice(data?.get(..64)?);
                }
                block.to_vec()
            }
            // MulticastForwardingTable and the rest: taken as sent.
            _ => data?.to_vec(),
        };
        self.log.push(op.clone());
        if let Some(mut hook) = self.hook.take() {
            hook(self, &op);
            self.hook = Some(hook);
        }
        Some(out)
    }
}

fn encode<A: Attribute>(a: &A) -> Vec<u8> {
    let mut b = vec![0; A::SIZE];
    a.encode_into(&mut b).expect("an attribute fits its size");
    b
}

/// An SM sweeping `fabric` with at most `limit` SMPs outstanding.
pub(super) fn sm(fabric: &Arc<Mutex<Fabric>>, limit: usize) -> Sm {
    let f = fabric.clone();
    let wire = Wire::fake(
        Box::new(move |method, attr, attr_mod, path, data| {
            f.lock()
                .expect("the fake fabric")
                .answer(method, attr, attr_mod, path, data)
        }),
        limit,
    );
    Sm {
        smi: Arc::new(wire),
        subnet: Arc::new(RwLock::new(Subnet::default())),
        sm_info: Arc::new(RwLock::new(SmInfo::default())),
        written: HashMap::new(),
        mft_written: HashMap::new(),
        pkey_written: HashMap::new(),
        partitions: crate::partitions::Partitions::default(),
        lids: Lids::new(),
        routing: vec![RoutingEngine::MinHop],
        roots: Vec::new(),
        resweep: None,
        reregister: false,
        adopted: None,
    }
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(f)
}

/// A change to a switch port just after the sweep read it (the port comes
/// up, PortStateChange set) is not lost: the sweep cleared
/// PortStateChange before it read the switch's ports, not after, so the
/// bit is still set when the sweep ends and the next light sweep calls for
/// a heavy one.
#[test]
fn a_port_change_after_its_port_was_read_is_left_for_the_light_sweep() {
    const SW: usize = 1;
    let fabric = Arc::new(Mutex::new(Fabric::star(2, 4)));
    let mut plugged = false;
    fabric.lock().unwrap().on_each(move |f, op| {
        let read = op.method == Method::GET && op.attr == PortInfo::ID;
        if !plugged && op.node == SW && read && op.attr_mod == 3 {
            f.plug(SW, 3, 0x9000);
            plugged = true;
        }
    });
    let mut sm = sm(&fabric, 4);
    let rep = run(sm.sweep()).unwrap();
    let f = fabric.lock().unwrap();
    assert!(
        f.port_state_change(SW),
        "PortStateChange cleared after the change it flags ({rep})"
    );
    // The order: the switch's SwitchInfo read, PortStateChange cleared,
    // then its ports.
    let at = |m: Method, attr: u16| {
        f.log
            .iter()
            .position(|o| o.node == SW && o.method == m && o.attr == attr)
            .unwrap()
    };
    assert!(at(Method::GET, SwitchInfo::ID) < at(Method::SET, SwitchInfo::ID));
    assert!(at(Method::SET, SwitchInfo::ID) < at(Method::GET, PortInfo::ID));
    drop(f);
    let why = run(sm.light_sweep()).expect("a heavy sweep called for");
    assert!(why.contains("PortStateChange on switch 0x200"), "{why}");
    // The heavy sweep that follows finds the CA behind the port, and
    // clears the bit.
    let rep = run(sm.sweep()).unwrap();
    assert!(!fabric.lock().unwrap().port_state_change(SW));
    assert!(lock_r(&sm.subnet).topo.find(0x9000).is_some(), "{rep}");
    assert_eq!(
        fabric.lock().unwrap().port(3, 1).port_state,
        PortState::Active
    );
}

/// A switch that resets between two sweeps (its LFT emptied, port 0
/// without LID) has its whole LFT and its MFT blocks written again; one
/// that did not, none of them (the blocks written are remembered).
#[test]
fn a_switch_that_reset_has_its_tables_written_whole_again() {
    const SW: usize = 1;
    let fabric = Arc::new(Mutex::new(Fabric::star(3, 4)));
    let mut sm = sm(&fabric, 4);
    let first = run(sm.sweep()).unwrap();
    assert!(first.lft_blocks > 0, "{first}");
    let table = fabric.lock().unwrap().lft(SW).to_vec();
    assert!(table.iter().any(|&p| p != 0xff));
    join_a_group(&sm, &[0x100, 0x1200]);
    let mfts = run(sm.program_multicast());
    assert!(mfts > 0);
    assert_eq!(run(sm.program_multicast()), 0);
    let again = run(sm.sweep()).unwrap();
    assert_eq!((again.lft_blocks, again.resets), (0, 0), "{again}");
    assert_eq!(run(sm.program_multicast()), 0);
    fabric.lock().unwrap().reset(SW);
    let after = run(sm.sweep()).unwrap();
    assert_eq!(after.resets, 1, "{after}");
    assert_eq!(after.lft_blocks, first.lft_blocks, "{after}");
    assert_eq!(run(sm.program_multicast()), mfts);
    let f = fabric.lock().unwrap();
    assert_eq!(f.lft(SW), table);
    assert_ne!(f.port(SW, 0).lid, 0);
}

/// With LMC 2 the sweep writes every CA port a base LID aligned to 4 and
/// LMC 2, the switch's port 0 a LID of its own and LMC 0, LinearFDBTop up to the last CA's
/// last LID, and a route for each of a CA's four LIDs to the CA's port; a
/// second sweep has nothing to write again.
#[test]
fn with_an_lmc_each_ca_port_gets_its_block_and_each_lid_a_route() {
    const SW: usize = 1;
    let fabric = Arc::new(Mutex::new(Fabric::star(3, 4)));
    let mut sm = sm(&fabric, 4);
    sm.lids = Lids::with_lmc(2).unwrap();
    let rep = run(sm.sweep()).unwrap();
    assert!(rep.port_infos_set > 0, "{rep}");
    {
        let f = fabric.lock().unwrap();
        let mut top = 0;
        // CA 0 on switch port 1, CA i (node i + 1) on port i + 1.
        for (node, sw_port) in [(0, 1), (2, 2), (3, 3)] {
            let pi = f.port(node, 1);
            assert_eq!(pi.lmc, 2, "node {node}");
            assert!(pi.lid != 0 && pi.lid % 4 == 0, "LID {}", pi.lid);
            for lid in pi.lid..pi.lid + 4 {
                assert_eq!(f.lft(SW)[usize::from(lid)], sw_port, "LID {lid}");
            }
            top = top.max(pi.lid + 3);
        }
        let sw = f.port(SW, 0);
        // One LID, below the CAs' first block.
        assert_eq!((sw.lmc, sw.lid), (0, 1));
        assert_eq!(f.lft(SW)[usize::from(sw.lid)], 0);
        assert_eq!(f.lft(SW)[usize::from(sw.lid) + 1], 0xff, "not the switch's");
        assert_eq!(f.nodes[SW].si.unwrap().linear_fdb_top, top);
    }
    let again = run(sm.sweep()).unwrap();
    assert_eq!((again.port_infos_set, again.lft_blocks), (0, 0), "{again}");
}

/// A group of the CA ports of `guids` in the SA's groups, MLID 0xc001.
fn join_a_group(sm: &Sm, guids: &[u64]) {
    use rdma::mad::sa::{JoinState, McMemberRecord};
    let mut members = std::collections::BTreeMap::new();
    for &g in guids {
        let mut gid = [0u8; 16];
        gid[..8].copy_from_slice(&crate::state::SUBNET_PREFIX.to_be_bytes());
        gid[8..].copy_from_slice(&g.to_be_bytes());
        members.insert(gid, JoinState::FULL_MEMBER);
    }
    let mgid = [0xff, 0x12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    crate::state::lock_w(&sm.subnet).groups.by_mgid.insert(
        mgid,
        crate::groups::Group {
            rec: McMemberRecord {
                mgid: rdma::Gid(mgid),
                mlid: 0xc001,
                ..McMemberRecord::default()
            },
            members,
            permanent: false,
        },
    );
}

/// Every NodeInfo sent to a CA lost: the sweep does not find it, and the
/// next light sweep calls for a heavy one for the SMPs that failed. With
/// its SMPs through again the light sweep finds the switch port that is up
/// and leads to no known node, and the heavy sweep that follows finds the
/// CA and makes its port Active.
#[test]
fn a_node_whose_node_info_was_lost_is_swept_for_and_found() {
    const LOST: usize = 2;
    let fabric = Arc::new(Mutex::new(Fabric::star(2, 4)));
    fabric.lock().unwrap().lose(Some(Box::new(|op: &Op| {
        op.node == LOST && op.attr == NodeInfo::ID
    })));
    let mut sm = sm(&fabric, 4);
    let rep = run(sm.sweep()).unwrap();
    assert!(rep.failures > 0, "{rep}");
    assert_eq!(lock_r(&sm.subnet).topo.len(), 2, "{rep}");
    let why = run(sm.light_sweep()).expect("a heavy sweep called for");
    assert!(why.contains("SMPs failed in the last heavy sweep"), "{why}");
    // Still lost: swept again, and again not found.
    let rep = run(sm.sweep()).unwrap();
    assert!(rep.failures > 0, "{rep}");
    fabric.lock().unwrap().lose(None);
    let why = run(sm.light_sweep()).expect("a heavy sweep called for");
    assert!(
        why.contains("port 2 of 0x200 leads to node 0x1200, not reached by the last heavy sweep"),
        "{why}"
    );
    let rep = run(sm.sweep()).unwrap();
    assert_eq!(rep.failures, 0, "{rep}");
    assert!(lock_r(&sm.subnet).topo.find(0x1200).is_some(), "{rep}");
    assert_eq!(
        fabric.lock().unwrap().port(LOST, 1).port_state,
        PortState::Active
    );
    assert_eq!(run(sm.light_sweep()), None);
}

/// The sweep of a switch with 30 CAs never has more SMPs outstanding than
/// its limit, and reaches it; without a limit (0) it has more than 4.
#[test]
fn a_sweep_keeps_at_most_its_limit_of_smps_outstanding() {
    for (limit, most) in [(1, 1), (4, 4), (7, 7)] {
        let fabric = Arc::new(Mutex::new(Fabric::star(30, 32)));
        let mut sm = sm(&fabric, limit);
        let rep = run(sm.sweep()).unwrap();
        assert_eq!(rep.peak_smps, most, "limit {limit}: {rep}");
        assert_eq!(rep.failures, 0, "{rep}");
        assert_eq!(lock_r(&sm.subnet).topo.len(), 31);
    }
    let fabric = Arc::new(Mutex::new(Fabric::star(30, 32)));
    let rep = run(sm(&fabric, 0).sweep()).unwrap();
    assert!(rep.peak_smps > 4, "{rep}");
}

/// A master's first sweep continues from the discovery that made it
/// master: no node is discovered again, the subnet comes up, and the
/// PortStateChange that discovery left set makes the first light sweep
/// call for a heavy one (which clears it), so a change since then is not
/// lost.
#[test]
fn a_first_sweep_continues_from_the_discovery_that_made_it_master() {
    const SW: usize = 1;
    let fabric = Arc::new(Mutex::new(Fabric::star(3, 4)));
    let mut sm = sm(&fabric, 4);
    let node_infos = |f: &Fabric| f.log.iter().filter(|o| o.attr == NodeInfo::ID).count();
    let d = run(sm.discover_subnet()).unwrap();
    let discovered = node_infos(&fabric.lock().unwrap());
    assert!(discovered >= 4);
    assert!(
        fabric.lock().unwrap().port_state_change(SW),
        "discovery cleared nothing"
    );
    sm.adopt(d);
    let rep = run(sm.sweep()).unwrap();
    {
        let f = fabric.lock().unwrap();
        assert_eq!(node_infos(&f), discovered, "discovered again: {rep}");
        for node in [0, 2, 3] {
            assert_eq!(f.port(node, 1).port_state, PortState::Active);
        }
        assert!(f.port_state_change(SW));
    }
    let why = run(sm.light_sweep()).expect("a heavy sweep called for");
    assert!(why.contains("PortStateChange"), "{why}");
    run(sm.sweep()).unwrap();
    assert!(!fabric.lock().unwrap().port_state_change(SW));
    assert!(node_infos(&fabric.lock().unwrap()) > discovered);
}

/// Two spines and two leaves, each leaf linked to each spine, and two CAs
/// on each leaf (CA 0 the SM's). Each link is probed from one end only:
/// a leaf's uplink found from the spine is not probed again from the
/// leaf, so NodeInfo goes once along each link (and once to the SM's own
/// CA). A CA port takes its LID and Armed in one Set, then Active: two
/// PortInfo Sets, where a switch port takes two state Sets and no LID.
#[test]
fn each_link_is_probed_once_and_a_ca_port_is_set_twice() {
    let mut f = Fabric {
        nodes: Vec::new(),
        log: Vec::new(),
        hook: None,
        lost: None,
    };
    let ca0 = f.add(0x100, CA, 1);
    let leaves = [f.add(0x200, SWITCH, 4), f.add(0x300, SWITCH, 4)];
    let spines = [f.add(0x400, SWITCH, 2), f.add(0x500, SWITCH, 2)];
    let mut cas = vec![ca0];
    for (i, &leaf) in leaves.iter().enumerate() {
        for (j, &spine) in spines.iter().enumerate() {
            f.link(leaf, 3 + j as u8, spine, 1 + i as u8);
        }
        for k in 0..2u8 {
            let ca = if i == 0 && k == 0 {
                ca0
            } else {
                f.add(0x1000 + 0x100 * (2 * i as u64 + u64::from(k)), CA, 1)
            };
            f.link(ca, 1, leaf, 1 + k);
            if ca != ca0 {
                cas.push(ca);
            }
        }
    }
    let fabric = Arc::new(Mutex::new(f));
    let mut sm = sm(&fabric, 4);
    let rep = run(sm.sweep()).unwrap();
    let f = fabric.lock().unwrap();
    let links = 4 + 4;
    let node_infos = f.log.iter().filter(|o| o.attr == NodeInfo::ID).count();
    assert_eq!(node_infos, links + 1, "{rep}");
    let sets_to = |node: usize| {
        f.log
            .iter()
            .filter(|o| o.attr == PortInfo::ID && o.method == Method::SET && o.node == node)
            .count()
    };
    for &ca in &cas {
        assert_eq!(f.port(ca, 1).port_state, PortState::Active, "CA {ca}");
        assert_eq!(sets_to(ca), 2, "CA {ca}: {rep}");
    }
    // Each spine: its port 0's LID, and its two linked ports to Armed and
    // Active (port 0 is Active already here).
    for &spine in &spines {
        assert_eq!(sets_to(spine), 1 + 2 * 2, "spine {spine}: {rep}");
    }
    // The CAs' ports, the leaves' four and the spines' two.
    assert_eq!(rep.armed, 4 + 2 * 4 + 2 * 2, "{rep}");
    assert_eq!(rep.activated, rep.armed, "{rep}");
}

/// Each link's ends get the smaller MTU of the two in the Set that arms
/// them (a CA of MTU 2048 on a switch of 4096: both ends 2048), and their
/// operational VLs stay as they were (VL0: no SL-to-VL or arbitration
/// tables are written for more).
#[test]
fn a_link_takes_the_smaller_mtu_of_its_ends() {
    let mut f = Fabric::star(3, 4);
    // CA 1 (node 2) on switch port 2: MTU 2048, VL0-3 (its peer VL0-7).
    f.nodes[2].ports[1].mtu_cap = 4;
    f.nodes[2].ports[1].vl_cap = 3;
    let fabric = Arc::new(Mutex::new(f));
    let mut sm = sm(&fabric, 4);
    let rep = run(sm.sweep()).unwrap();
    let f = fabric.lock().unwrap();
    for (node, p, mtu, vls) in [
        (2, 1, 4, 1),
        (1, 2, 4, 1),
        (0, 1, 5, 1),
        (1, 1, 5, 1),
        (3, 1, 5, 1),
    ] {
        let pi = f.port(node, p);
        assert_eq!(
            pi.port_state,
            PortState::Active,
            "node {node} port {p}: {rep}"
        );
        assert_eq!(
            (pi.neighbor_mtu, pi.operational_vls),
            (mtu, vls),
            "node {node} port {p}: {rep}"
        );
    }
    // Down ports keep their reset values.
    assert_eq!(f.port(1, 4).neighbor_mtu, 1);
    assert_eq!(rep.failures, 0, "{rep}");
}
