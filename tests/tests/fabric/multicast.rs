//! The switches' multicast forwarding tables for groups that HCAs join
//! through `rdma`'s SA client (each member a child process of this binary
//! at its HCA), under OpenSM and ours:
//!
//! - on the `wide` topology (ci/topology.py: a switch of 254 ports, HCAs
//!   on ports both sides of 64 and of the 16-port PortMask positions, a
//!   second switch behind port 130), one group joined from HCAs on ports 2
//!   to 254 and behind the second switch: the MulticastForwardingTable
//!   blocks read by SMP from every position of each switch forward the
//!   group's MLID to exactly the members' ports and the port between the
//!   switches, and to no port once the members left; `ibroute` shows each
//!   switch's LFT sending every HCA's LID out of the port towards it;
//! - on every topology, four groups joined from six HCAs spread over the
//!   fabric: the SA's MulticastForwardingTableRecords of each switch give
//!   each group a tree (the switch ports set on both ends of a link, no
//!   loop, every member's port set, no port to an HCA that is not a
//!   member, no branch without a member; a group of one member no port
//!   or its own), and no port once they left.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rdma::mad::sa::{MftRecord, MftRecordMask};
use rdma::mad::{class, Attribute, Mad, MadHeader, Method, MulticastForwardingTable};
use rdma::umad::{Address, Port, Registration, SaClient};
use rdma::Gid;
use rdma_tests::fabric::{Fabric, FabricTest, Node, NodeKind};
use rdma_tests::{check, fail, Outcome, TestResult};

use crate::sa_client::{async_port, local_gid_and_lid, runtime};
use crate::sa_server::{hex, parse_gid, printed, step, ROLE};
use crate::sm::{sample, sm_name, tool, wait_for};
use crate::sm_groups::{full_member, CREATE, LEAVE};

const WIDE_TEST: &str = "multicast::a_wide_switch_forwards_a_group_to_its_ports_past_64";
const TREE_TEST: &str = "multicast::mft_records_span_the_members_of_each_joined_group";

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: WIDE_TEST,
        run: a_wide_switch_forwards_a_group_to_its_ports_past_64,
    },
    FabricTest {
        name: TREE_TEST,
        run: mft_records_span_the_members_of_each_joined_group,
    },
];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The MGIDs a member child joins or leaves: 32 hex digits each,
/// comma-separated.
const MGIDS: &str = "RDMA_MULTICAST_MGIDS";
/// What a member child prints per group joined: `MGID:MLID` (hex).
const MLID_KEY: &str = "MULTICAST_MLID=";
/// How long the SM may take to program a group's tree (OpenSM does it
/// after it answered the join).
const SETTLE: Duration = Duration::from_secs(30);

/// The MGID of the group `tag` of this run (the parent's PID in it).
fn mgid(tag: u8) -> Gid {
    let mut g = [
        0xff, 0x12, 0x6d, 0x63, 0x00, tag, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    g[12..].copy_from_slice(&std::process::id().to_be_bytes());
    Gid(g)
}

/// A member child's step: `join` (as a full member, creating the group if
/// need be; prints each MLID) or `leave` every group of [`MGIDS`].
fn member_step(role: &str) -> TestResult {
    let mgids: Vec<Gid> = std::env::var(MGIDS)
        .map_err(|_| format!("no {MGIDS}"))?
        .split(',')
        .map(parse_gid)
        .collect::<Res<_>>()?;
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, _) = local_gid_and_lid(&port)?;
        // A leave is tried for every group, whatever the others gave.
        let mut refused = Vec::new();
        for g in mgids {
            let member = full_member(g.0, me);
            match role {
                "join" => {
                    let joined = match sa.join_multicast(&member, CREATE).await {
                        Ok(j) => j,
                        Err(e) => fail!("join of {} under {}: {e}", g.to_ipv6(), sm_name()),
                    };
                    println!("{MLID_KEY}{}:{:04x}", hex(g), joined.mlid);
                }
                "leave" => {
                    if let Err(e) = sa.leave_multicast(&member, LEAVE).await {
                        refused.push(format!("leave of {} under {}: {e}", g.to_ipv6(), sm_name()));
                    }
                }
                other => fail!("no step {other:?}"),
            }
        }
        check!(refused.is_empty(), "{}", refused.join("; "));
        Ok(Outcome::Passed)
    })
}

/// The links and switch LIDs of the fabric, by node name.
struct Net {
    /// (node, port) -> (peer node, peer port), each side.
    links: BTreeMap<(String, u8), (String, u8)>,
    /// Switch name -> (LID, number of ports).
    switches: BTreeMap<String, (u16, u32)>,
    kinds: BTreeMap<String, NodeKind>,
}

impl Net {
    fn read(f: &Fabric) -> Res<Net> {
        let links = crate::sm_faults::links(f)?
            .into_iter()
            .map(|(a, pa, b, pb)| ((a, pa), (b, pb)))
            .collect();
        let kinds = f.nodes.iter().map(|n| (n.name.clone(), n.kind)).collect();
        // `Switch : 0x... ports 8 "name" base port 0 lid 3 lmc 0`.
        let mut switches = BTreeMap::new();
        for l in tool(f, &["ibswitches"])?.lines() {
            let Some(name) = l.split('"').nth(1) else {
                continue;
            };
            let lid = l
                .split_once(" lid ")
                .and_then(|(_, r)| r.split_whitespace().next())
                .ok_or_else(|| format!("no LID in ibswitches' line {l:?}"))?
                .parse::<u16>()?;
            let ports = f
                .nodes
                .iter()
                .find(|n| n.name == name)
                .ok_or_else(|| format!("ibswitches names {name:?}, not in the net file"))?
                .ports;
            switches.insert(name.to_string(), (lid, ports));
        }
        if switches.len() != f.switches() {
            fail!(
                "ibswitches under {} lists {} switches, the net file {}",
                sm_name(),
                switches.len(),
                f.switches()
            );
        }
        Ok(Net {
            links,
            switches,
            kinds,
        })
    }

    /// The switch and port an HCA hangs on.
    fn attachment(&self, hca: &str) -> Res<(String, u8)> {
        self.links
            .get(&(hca.to_string(), 1))
            .cloned()
            .ok_or_else(|| format!("{hca} has no link on port 1").into())
    }

    fn is_switch(&self, name: &str) -> bool {
        self.kinds.get(name) == Some(&NodeKind::Switch)
    }

    /// The port of switch `from` towards switch `to` along the fewest
    /// switch hops (the first of equal ones); none for `to == from`.
    fn port_towards(&self, from: &str, to: &str) -> Option<u8> {
        let mut first: BTreeMap<&str, u8> = BTreeMap::new();
        let mut frontier = vec![from];
        let mut seen = BTreeSet::from([from]);
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for s in frontier {
                for ((a, pa), (b, _)) in self.links.range((s.to_string(), 0)..=(s.to_string(), 255))
                {
                    debug_assert_eq!(a, s);
                    if !self.is_switch(b) || !seen.insert(b.as_str()) {
                        continue;
                    }
                    let port = if s == from { *pa } else { first[s] };
                    if b == to {
                        return Some(port);
                    }
                    first.insert(b.as_str(), port);
                    next.push(b.as_str());
                }
            }
            frontier = next;
        }
        None
    }
}

/// The ports of `mlid` in the 32 masks of `positions` blocks (position
/// `p`'s mask bit `i` is port `16p + i`).
fn ports_of(masks: &[[u16; 32]], index: usize) -> BTreeSet<u8> {
    let mut out = BTreeSet::new();
    for (pos, m) in masks.iter().enumerate() {
        for bit in 0..16 {
            if m[index] >> bit & 1 == 1 {
                out.insert((16 * pos + bit) as u8);
            }
        }
    }
    out
}

/// Each switch's ports of each of `mlids` (by switch name, then MLID), its
/// blocks read by `read(lid, block, position)` for every position of the
/// switch.
fn mft_ports(
    net: &Net,
    mlids: &BTreeSet<u16>,
    mut read: impl FnMut(u16, u16, u8) -> Res<[u16; 32]>,
) -> Res<BTreeMap<u16, BTreeMap<String, BTreeSet<u8>>>> {
    let mut out: BTreeMap<u16, BTreeMap<String, BTreeSet<u8>>> = BTreeMap::new();
    let blocks: BTreeSet<u16> = mlids
        .iter()
        .filter_map(|&m| MulticastForwardingTable::block_of(m))
        .map(|(b, _)| b)
        .collect();
    for (name, &(lid, ports)) in &net.switches {
        for &block in &blocks {
            let masks = (0..=ports / 16)
                .map(|pos| read(lid, block, pos as u8))
                .collect::<Res<Vec<_>>>()?;
            for &mlid in mlids {
                if let Some((b, i)) = MulticastForwardingTable::block_of(mlid) {
                    if b == block {
                        let set = ports_of(&masks, i);
                        if !set.is_empty() {
                            out.entry(mlid).or_default().insert(name.clone(), set);
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The member children: each HCA of `members` joins (or leaves) its
/// groups of `groups` (group tag -> member names); for a join, the MLID of
/// each group (every member must get the same).
fn members_step(
    f: &Fabric,
    test: &str,
    role: &str,
    groups: &BTreeMap<u8, BTreeSet<String>>,
) -> Res<BTreeMap<u8, u16>> {
    let mut by_hca: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
    for (tag, hcas) in groups {
        for h in hcas {
            by_hca.entry(h.as_str()).or_default().push(*tag);
        }
    }
    let mut mlids: BTreeMap<u8, u16> = BTreeMap::new();
    for (hca, tags) in by_hca {
        let node = f
            .nodes
            .iter()
            .find(|n| n.name == hca)
            .ok_or_else(|| format!("no node {hca}"))?;
        let list: Vec<String> = tags.iter().map(|&t| hex(mgid(t))).collect();
        let out = step(f, test, node, role, &[(MGIDS, list.join(","))])?;
        if role != "join" {
            continue;
        }
        for &t in &tags {
            let key = format!("{MLID_KEY}{}:", hex(mgid(t)));
            let mlid = u16::from_str_radix(printed(&out, &key)?, 16)?;
            check!(
                mlid >= 0xc000 && *mlids.entry(t).or_insert(mlid) == mlid,
                "group {t} under {}: MLID {mlid:#x} at {hca}, {:#x} at the others",
                sm_name(),
                mlids[&t]
            );
        }
    }
    Ok(mlids)
}

/// [`members_step`]'s joins; if one fails, every member leaves (a leave
/// of a group it had not joined refused) before the failure is returned,
/// so that no group of the test outlives it.
fn joined_or_left(
    f: &Fabric,
    test: &str,
    groups: &BTreeMap<u8, BTreeSet<String>>,
) -> Res<BTreeMap<u8, u16>> {
    members_step(f, test, "join", groups).inspect_err(|_| {
        let _ = members_step_all(f, test, "leave", groups);
    })
}

/// [`members_step`] at every member, whatever each gave; the first error.
fn members_step_all(
    f: &Fabric,
    test: &str,
    role: &str,
    groups: &BTreeMap<u8, BTreeSet<String>>,
) -> Res<()> {
    let mut first = Ok(());
    for (tag, hcas) in groups {
        for h in hcas {
            let one = BTreeMap::from([(*tag, BTreeSet::from([h.clone()]))]);
            if let Err(e) = members_step(f, test, role, &one) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
    }
    first
}

/// The HCAs that may be members: all but the first node (the SM's port,
/// where the test process is attached).
fn member_candidates(f: &Fabric) -> Vec<&Node> {
    f.nodes
        .iter()
        .skip(1)
        .filter(|n| n.kind == NodeKind::Hca)
        .collect()
}

/// The ports of `wide-0` whose HCAs join the wide test's group (with
/// `hca-x-0`, on `wide-1` behind `wide-0`'s port [`WIDE_UPLINK`]).
const WIDE_MEMBER_PORTS: &[u8] = &[2, 16, 63, 64, 65, 128, 254];
const WIDE_UPLINK: u8 = 130;

fn a_wide_switch_forwards_a_group_to_its_ports_past_64(f: &Fabric) -> TestResult {
    if let Ok(role) = std::env::var(ROLE) {
        return member_step(&role);
    }
    if !crate::on_topology("wide", &f.name) {
        return Ok(Outcome::Skipped(
            "runs on the wide topology (a switch of 254 ports; ci/fabric.sh --suite runs it)"
                .into(),
        ));
    }
    let net = Net::read(f)?;
    let (wide0, _) = net.switches.get("wide-0").ok_or("no switch wide-0")?;
    let (wide1, _) = net.switches.get("wide-1").ok_or("no switch wide-1")?;
    let (wide0, wide1) = (*wide0, *wide1);
    // Unicast: every HCA's LID leaves each switch by the port towards it.
    for sw in ["wide-0", "wide-1"] {
        let lid = net.switches[sw].0;
        let text = tool(f, &["ibroute", &lid.to_string()])?;
        let mut routed = 0;
        for n in f.nodes.iter().filter(|n| n.kind == NodeKind::Hca) {
            let (at, port) = net.attachment(&n.name)?;
            let want = if at == sw {
                port
            } else {
                net.port_towards(sw, &at)
                    .ok_or_else(|| format!("no way from {sw} to {at}"))?
            };
            let line = text
                .lines()
                .find(|l| l.ends_with(&format!("'{}')", n.name)))
                .ok_or_else(|| {
                    format!(
                        "ibroute {lid} ({sw}) under {}: no route to {}:\n{text}",
                        sm_name(),
                        n.name
                    )
                })?;
            let got: u8 = line
                .split_whitespace()
                .nth(1)
                .ok_or("no port column")?
                .parse()?;
            check!(
                got == want,
                "ibroute {lid} ({sw}) under {}: {} out of port {got}, not {want}",
                sm_name(),
                n.name
            );
            routed += 1;
        }
        println!("  {sw}: {routed} HCAs routed out of the ports towards them");
    }
    // Multicast: one group, members on both sides of port 64 and behind
    // the second switch.
    let mut members: BTreeSet<String> = WIDE_MEMBER_PORTS
        .iter()
        .map(|p| format!("hca-w-{p}"))
        .collect();
    members.insert("hca-x-0".into());
    let groups = BTreeMap::from([(1u8, members)]);
    let mlids = joined_or_left(f, WIDE_TEST, &groups)?;
    let mlid = mlids[&1];
    let expect: BTreeMap<String, BTreeSet<u8>> = BTreeMap::from([
        (
            "wide-0".to_string(),
            WIDE_MEMBER_PORTS
                .iter()
                .copied()
                .chain([WIDE_UPLINK])
                .collect(),
        ),
        ("wide-1".to_string(), BTreeSet::from([1, 2])),
    ]);
    let port = local_port()?;
    let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    let read = |lid: u16, block: u16, pos: u8| smp_mft(&agent, lid, block, pos);
    let only = BTreeSet::from([mlid]);
    let joined = wait_for(SETTLE, || {
        let got = mft_ports(&net, &only, read)?;
        let got = got.get(&mlid).cloned().unwrap_or_default();
        Ok((
            got == expect,
            format!("MLID {mlid:#x}'s ports by switch: {got:?}, not {expect:?}"),
        ))
    });
    // Whatever the check gave, the members leave.
    let left = members_step(f, WIDE_TEST, "leave", &groups);
    joined.map_err(|e| format!("under {} (switch LIDs {wide0}, {wide1}): {e}", sm_name()))?;
    left?;
    wait_for(SETTLE, || {
        let got = mft_ports(&net, &only, read)?;
        Ok((
            got.is_empty(),
            format!("after the members left, MLID {mlid:#x} still forwards to {got:?}"),
        ))
    })
    .map_err(|e| format!("under {}: {e}", sm_name()))?;
    println!(
        "  MLID {mlid:#x}: ports {:?} of wide-0 and [1, 2] of wide-1, none after the leaves",
        expect["wide-0"]
    );
    Ok(Outcome::Passed)
}

fn local_port() -> Res<Port> {
    let ca = rdma::umad::Ca::get("ibsim0")?;
    let p = ca.ports.first().ok_or("ibsim0 has no port")?.port_num;
    Ok(Port::open(&ca.name, p)?)
}

/// Block `block` of position `pos` of the MFT of the switch at `lid`, by a
/// LID-routed SubnGet.
fn smp_mft(agent: &rdma::umad::Agent, lid: u16, block: u16, pos: u8) -> Res<[u16; 32]> {
    let tid = agent.next_tid();
    let mut h = MadHeader::request(
        class::SUBN_LID_ROUTED,
        1,
        Method::GET,
        tid,
        MulticastForwardingTable::ID,
    );
    h.attr_mod = MulticastForwardingTable::attr_mod(block, pos)?;
    let r = agent.request(
        &Mad::new(&h),
        &Address::smi_lid(lid),
        Duration::from_millis(500),
        2,
    )?;
    check!(
        r.status == 0 && r.mad.status().is_ok() && r.mad.method() == Method::GET_RESP,
        "SubnGet(MFT block {block} position {pos}) of LID {lid}: umad status {}, {:?}",
        r.status,
        r.mad.header()
    );
    Ok(r.mad.attribute::<MulticastForwardingTable>()?.port_masks)
}

/// Block `block` of position `pos` of the switch at `lid` as the SA's
/// MftRecord gives it (a GetTable of LID, Position and BlockNum: one
/// record, or none for a block the SM keeps empty).
async fn sa_mft(sa: &SaClient, lid: u16, block: u16, pos: u8) -> Res<[u16; 32]> {
    let q = MftRecord {
        lid,
        position: pos,
        block_num: block,
        ..MftRecord::default()
    };
    let mask = MftRecordMask::LID | MftRecordMask::POSITION | MftRecordMask::BLOCK_NUM;
    let got = sa.get_table(&q, mask).await?;
    match got.as_slice() {
        [] => Ok([0; 32]),
        [r] if r.lid == lid && r.position == pos && r.block_num == block => Ok(r.mft.port_masks),
        other => fail!(
            "MftRecord of LID {lid} block {block} position {pos} under {}: {other:?}",
            sm_name()
        ),
    }
}

/// What is wrong with the tree of one group: `tree` its ports by switch,
/// `members` the HCAs that joined it.
fn tree_faults(
    net: &Net,
    tree: &BTreeMap<String, BTreeSet<u8>>,
    members: &BTreeSet<String>,
) -> Vec<String> {
    let mut faults = Vec::new();
    // A group of one member needs no forwarding (a switch never sends a
    // packet back out of the port it came in by): OpenSM programs no port
    // for it, ours the member's; either is right, any other port is not.
    if let [only] = Vec::from_iter(members).as_slice() {
        if tree.is_empty() {
            return faults;
        }
        if let Ok((sw, p)) = net.attachment(only) {
            if tree.len() != 1 || tree.get(&sw) != Some(&BTreeSet::from([p])) {
                faults.push(format!("the one member's group has ports {tree:?}"));
            }
        }
        return faults;
    }
    let set = |sw: &str, p: u8| tree.get(sw).is_some_and(|s| s.contains(&p));
    // Switch-to-switch links of the tree, each once.
    let mut edges: BTreeSet<(String, String, u8, u8)> = BTreeSet::new();
    for (sw, ports) in tree {
        for &p in ports {
            match net.links.get(&(sw.clone(), p)) {
                None => faults.push(format!("{sw} port {p}: no link there")),
                Some((peer, pp)) if net.is_switch(peer) => {
                    if !set(peer, *pp) {
                        faults.push(format!(
                            "{sw} port {p} to {peer}, whose port {pp} is not in the group"
                        ));
                    } else if sw < peer {
                        edges.insert((sw.clone(), peer.clone(), p, *pp));
                    }
                }
                Some((peer, _)) if !members.contains(peer) => {
                    faults.push(format!("{sw} port {p} to {peer}, not a member"));
                }
                Some(_) => {}
            }
        }
    }
    for m in members {
        match net.attachment(m) {
            Ok((sw, p)) if !set(&sw, p) => {
                faults.push(format!("member {m}: port {p} of {sw} not in the group"))
            }
            Ok(_) => {}
            Err(e) => faults.push(e.to_string()),
        }
    }
    // One tree: connected, with one link fewer than switches.
    let switches: Vec<&String> = tree.keys().collect();
    if let Some(&start) = switches.first() {
        let mut seen = BTreeSet::from([start]);
        let mut todo = vec![start];
        while let Some(s) = todo.pop() {
            for (a, b, _, _) in &edges {
                let other = if a == s {
                    b
                } else if b == s {
                    a
                } else {
                    continue;
                };
                if seen.insert(other) {
                    todo.push(other);
                }
            }
        }
        if seen.len() != switches.len() {
            faults.push(format!(
                "not one tree: from {start} the group reaches {seen:?} of {switches:?}"
            ));
        }
        if edges.len() + 1 != switches.len() {
            faults.push(format!(
                "a loop: {} links between {} switches: {edges:?}",
                edges.len(),
                switches.len()
            ));
        }
    }
    // No branch without a member: a switch at the end of the tree (one
    // link of it) has a member's port.
    for sw in &switches {
        let degree = edges
            .iter()
            .filter(|(a, b, _, _)| a == *sw || b == *sw)
            .count();
        let has_member = tree[*sw].iter().any(|&p| {
            net.links
                .get(&((*sw).clone(), p))
                .is_some_and(|(peer, _)| members.contains(peer))
        });
        if degree <= 1 && !has_member {
            faults.push(format!("{sw}: a branch with no member ({:?})", tree[*sw]));
        }
    }
    faults
}

fn mft_records_span_the_members_of_each_joined_group(f: &Fabric) -> TestResult {
    if let Ok(role) = std::env::var(ROLE) {
        return member_step(&role);
    }
    let hcas: Vec<String> = member_candidates(f)
        .iter()
        .map(|n| n.name.clone())
        .collect();
    if hcas.len() < 3 {
        return Ok(Outcome::Skipped(format!(
            "{} HCAs besides the SM's node, fewer than 3",
            hcas.len()
        )));
    }
    let idx: Vec<u16> = (0..hcas.len() as u16).collect();
    let s: Vec<&String> = sample(&idx, 6)
        .into_iter()
        .map(|i| &hcas[usize::from(i)])
        .collect();
    let n = s.len();
    let of = |ix: &[usize]| -> BTreeSet<String> { ix.iter().map(|&i| s[i % n].clone()).collect() };
    let groups: BTreeMap<u8, BTreeSet<String>> = BTreeMap::from([
        (10, of(&[0, n - 1])),
        (11, of(&(0..n).collect::<Vec<_>>())),
        (12, of(&[2])),
        (13, of(&[1, 3, 4])),
    ]);
    let net = Net::read(f)?;
    let mlids = joined_or_left(f, TREE_TEST, &groups)?;
    let all: BTreeSet<u16> = mlids.values().copied().collect();
    check!(
        all.len() == groups.len(),
        "under {}: {} groups got MLIDs {mlids:?}",
        sm_name(),
        groups.len()
    );
    let rt = runtime()?;
    let probe = |want_empty: bool| -> Res<(bool, String)> {
        rt.block_on(async {
            let port = async_port()?;
            let sa = SaClient::new(&port)?;
            let mut masks: BTreeMap<(u16, u16, u8), [u16; 32]> = BTreeMap::new();
            for &(lid, ports) in net.switches.values() {
                for &m in &all {
                    let (block, _) = MulticastForwardingTable::block_of(m).ok_or("not an MLID")?;
                    for pos in 0..=(ports / 16) as u8 {
                        if let std::collections::btree_map::Entry::Vacant(e) =
                            masks.entry((lid, block, pos))
                        {
                            e.insert(sa_mft(&sa, lid, block, pos).await?);
                        }
                    }
                }
            }
            let got = mft_ports(&net, &all, |lid, block, pos| {
                masks
                    .get(&(lid, block, pos))
                    .copied()
                    .ok_or_else(|| "a block not read".into())
            })?;
            if want_empty {
                return Ok((got.is_empty(), format!("after the leaves: {got:?}")));
            }
            let mut faults = Vec::new();
            for (tag, members) in &groups {
                let mlid = mlids[tag];
                let tree = got.get(&mlid).cloned().unwrap_or_default();
                for fault in tree_faults(&net, &tree, members) {
                    faults.push(format!(
                        "group {tag} (MLID {mlid:#x}, members {members:?}, ports {tree:?}): {fault}"
                    ));
                }
            }
            Ok((faults.is_empty(), faults.join("\n")))
        })
    };
    let joined = wait_for(SETTLE, || probe(false));
    let left = members_step(f, TREE_TEST, "leave", &groups);
    joined.map_err(|e| format!("under {}: {e}", sm_name()))?;
    left?;
    wait_for(SETTLE, || probe(true)).map_err(|e| format!("under {}: {e}", sm_name()))?;
    println!(
        "  {} groups of {} members on {} switches: each a tree of its members, none after the leaves",
        groups.len(),
        n,
        net.switches.len()
    );
    Ok(Outcome::Passed)
}
