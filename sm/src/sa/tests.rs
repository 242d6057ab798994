//! Unit tests of the SA server's answers, over subnets built in Rust.

use super::paths::path;
use super::*;

/// A subnet of `n` CAs on one switch, each with one port and a LID, as
/// a sweep leaves it; the GIDs of the CAs' ports.
fn subnet_of_cas(n: u8) -> (Subnet, Vec<Gid>) {
    let mut s = Subnet::default();
    let switch = s.topo.add_node(0x10, NodeKind::Switch, n);
    let ids: Vec<NodeId> = (1..=n)
        .map(|i| {
            let ca = s.topo.add_node(0x1000 * u64::from(i), NodeKind::Ca, 1);
            s.topo.link(switch, i, ca, 1).unwrap();
            ca
        })
        .collect();
    s.lids.assign(&s.topo);
    s.index_lids();
    let mut gids = Vec::new();
    for id in ids {
        s.port_info.insert((id, 1), PortInfo::default());
        let mut g = [0u8; 16];
        g[..8].copy_from_slice(&SUBNET_PREFIX.to_be_bytes());
        g[8..].copy_from_slice(&s.topo.node(id).port_guid(1).to_be_bytes());
        gids.push(Gid(g));
    }
    (s, gids)
}

/// Two CAs on a switch, every link 4X EDR and MTU 4096 but the second
/// CA's port, which takes 1024; routed. The LIDs of the two CAs.
fn two_cas_one_small() -> (Subnet, u16, u16) {
    let (mut s, _) = subnet_of_cas(2);
    s.routes = s.topo.min_hop_routes(&s.lids);
    let fast = PortInfo {
        mtu_cap: 5,
        link_width_active: rdma::mad::LinkWidth::X4,
        link_speed_active: rdma::mad::LinkSpeed::Sdr,
        link_speed_ext_active: rdma::mad::LinkSpeedExt::Edr,
        ..PortInfo::default()
    };
    let switch = s.topo.find(0x10).unwrap();
    let (a, b) = (s.topo.find(0x1000).unwrap(), s.topo.find(0x2000).unwrap());
    for key in [(switch, 1), (switch, 2), (a, 1)] {
        s.port_info.insert(key, fast);
    }
    s.port_info.insert((b, 1), PortInfo { mtu_cap: 3, ..fast });
    let lid = |id| s.lids.of(&s.topo, id, 1).unwrap();
    let (la, lb) = (lid(a), lid(b));
    (s, la, lb)
}

#[test]
fn a_path_takes_the_destinations_mtu_and_extended_speeds() {
    let (s, a, b) = two_cas_one_small();
    let p = path(&s, a, b).unwrap();
    assert_eq!((p.mtu, p.rate), (3, 16), "MTU 1024 and 100 Gb/s");
    let back = path(&s, b, a).unwrap();
    assert_eq!((back.mtu, back.rate), (3, 16));
}

#[test]
fn path_queries_meet_their_mtu_rate_and_lifetime_selectors() {
    let (s, a, b) = two_cas_one_small();
    let base = PathRecordMask::SLID | PathRecordMask::DLID;
    let ask = |m: PathRecordMask, q: PathRecord| {
        path_records(
            &s,
            &PathRecord {
                slid: a,
                dlid: b,
                ..q
            },
            base | m,
            a,
        )
        .len()
    };
    let mtu = |sel, mtu| PathRecord {
        mtu_selector: sel,
        mtu,
        ..PathRecord::default()
    };
    let with_mtu = PathRecordMask::MTU | PathRecordMask::MTU_SELECTOR;
    assert_eq!(ask(base, PathRecord::default()), 1);
    assert_eq!(
        ask(with_mtu, mtu(Selector::GreaterThan, 4)),
        0,
        "> 2048: the path has 1024"
    );
    assert_eq!(ask(with_mtu, mtu(Selector::GreaterThan, 2)), 1);
    assert_eq!(ask(with_mtu, mtu(Selector::LessThan, 3)), 0);
    assert_eq!(ask(with_mtu, mtu(Selector::Exactly, 3)), 1);
    assert_eq!(ask(with_mtu, mtu(Selector::Best, 5)), 1);
    // Without its selector, a value must match exactly.
    assert_eq!(ask(PathRecordMask::MTU, mtu(Selector::GreaterThan, 2)), 0);
    let rate = |sel, rate| PathRecord {
        rate_selector: sel,
        rate,
        ..PathRecord::default()
    };
    let with_rate = PathRecordMask::RATE | PathRecordMask::RATE_SELECTOR;
    assert_eq!(
        ask(with_rate, rate(Selector::GreaterThan, 7)),
        1,
        "100 > 40 Gb/s"
    );
    assert_eq!(ask(with_rate, rate(Selector::GreaterThan, 16)), 0);
    assert_eq!(
        ask(with_rate, rate(Selector::LessThan, 17)),
        1,
        "100 < 200 Gb/s"
    );
    let life = |sel, l| PathRecord {
        packet_life_time_selector: sel,
        packet_life_time: l,
        ..PathRecord::default()
    };
    let with_life = PathRecordMask::PACKET_LIFE_TIME | PathRecordMask::PACKET_LIFE_TIME_SELECTOR;
    assert_eq!(ask(with_life, life(Selector::LessThan, PACKET_LIFE)), 0);
    assert_eq!(ask(with_life, life(Selector::LessThan, PACKET_LIFE + 1)), 1);
}

/// A join that creates the group `mgid` (its last two bytes) for the
/// port `port_gid`.
fn create(s: &mut Subnet, mgid: u16, port_gid: Gid) -> Result<McMemberRecord, SaStatusCode> {
    let mut g = [0xff, 0x12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    g[14..].copy_from_slice(&mgid.to_be_bytes());
    let q = McMemberRecord {
        mgid: Gid(g),
        port_gid,
        qkey: 0x1234,
        pkey: 0xffff,
        rate: 2,
        join_state: JoinState::FULL_MEMBER,
        ..McMemberRecord::default()
    };
    let m = McMemberRecordMask::MGID
        | McMemberRecordMask::PORT_GID
        | McMemberRecordMask::QKEY
        | McMemberRecordMask::PKEY
        | McMemberRecordMask::SL
        | McMemberRecordMask::FLOW_LABEL
        | McMemberRecordMask::TCLASS
        | McMemberRecordMask::RATE
        | McMemberRecordMask::JOIN_STATE;
    join(s, &q, m)
}

fn leave_all(s: &mut Subnet, rec: &McMemberRecord) {
    let m =
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE;
    leave(s, rec, m).unwrap();
}

#[test]
fn a_group_gone_gives_its_mlid_to_the_next_group() {
    let (mut s, ports) = subnet_of_cas(3);
    // The broadcast group holds 0xc000.
    let a = create(&mut s, 1, ports[0]).unwrap();
    let b = create(&mut s, 2, ports[0]).unwrap();
    assert_eq!((a.mlid, b.mlid), (0xc001, 0xc002));
    leave_all(&mut s, &a);
    let c = create(&mut s, 3, ports[1]).unwrap();
    assert_eq!(c.mlid, 0xc001, "the lowest free MLID");
    // Joins and leaves without end run out of nothing.
    for i in 0..5_000u16 {
        let g = create(&mut s, 10 + i, ports[2]).unwrap();
        assert_eq!(g.mlid, 0xc003);
        leave_all(&mut s, &g);
    }
    assert_eq!(s.groups.by_mgid.len(), 3);
}

#[test]
fn every_mlid_taken_is_no_resources_not_a_reuse() {
    let (mut s, ports) = subnet_of_cas(1);
    let port_gid = ports[0].0;
    // Every MLID but the last held by a group already.
    for mlid in crate::groups::MLIDS.skip(1).take(0xfffe - 0xc000 - 1) {
        let mut g = [0xff, 0x12, 0x12, 0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        g[14..].copy_from_slice(&mlid.to_be_bytes());
        s.groups.by_mgid.insert(
            g,
            Group {
                rec: McMemberRecord {
                    mgid: Gid(g),
                    mlid,
                    ..McMemberRecord::default()
                },
                members: BTreeMap::from([(port_gid, JoinState::FULL_MEMBER)]),
                permanent: false,
            },
        );
    }
    assert_eq!(create(&mut s, 1, ports[0]).unwrap().mlid, 0xfffe);
    assert_eq!(
        create(&mut s, 2, ports[0]).map(|r| r.mlid),
        Err(SaStatusCode::NoResources)
    );
}
use rdma::mad::sa::{LinkRecordMask, NodeRecordMask};
use rdma::mad::NodeInfo;

fn nodes() -> Vec<NodeRecord> {
    (1..=3u16)
        .map(|lid| NodeRecord {
            lid,
            node_info: NodeInfo {
                node_type: if lid == 2 { 2 } else { 1 },
                node_guid: 0x100 + u64::from(lid),
                ..NodeInfo::default()
            },
            ..NodeRecord::default()
        })
        .collect()
}

#[test]
fn queries_select_on_every_component() {
    let q = NodeRecord::default();
    // No mask: all of them; mask bits past the table: ignored.
    assert_eq!(matching(&q, 0, nodes()).unwrap(), nodes());
    assert_eq!(matching(&q, 1 << 63, nodes()).unwrap(), nodes());
    let q = NodeRecord {
        node_info: NodeInfo {
            node_type: 1,
            node_guid: 0x103,
            ..NodeInfo::default()
        },
        ..NodeRecord::default()
    };
    let lids = |mask: NodeRecordMask| -> Vec<u16> {
        matching(&q, mask.bits(), nodes())
            .unwrap()
            .iter()
            .map(|r| r.lid)
            .collect()
    };
    assert_eq!(lids(NodeRecordMask::NODE_TYPE), [1, 3]);
    assert_eq!(
        lids(NodeRecordMask::NODE_TYPE | NodeRecordMask::NODE_GUID),
        [3]
    );
    // DeviceID, 0 in every record: all of them for 0, none for 7.
    assert_eq!(lids(NodeRecordMask::DEVICE_ID), [1, 2, 3]);
    let q = NodeRecord {
        node_info: NodeInfo {
            device_id: 7,
            ..NodeInfo::default()
        },
        ..NodeRecord::default()
    };
    assert!(matching(&q, NodeRecordMask::DEVICE_ID.bits(), nodes())
        .unwrap()
        .is_empty());
    let links = vec![
        LinkRecord {
            from_lid: 1,
            from_port: 1,
            to_port: 2,
            to_lid: 2,
        },
        LinkRecord {
            from_lid: 2,
            from_port: 2,
            to_port: 1,
            to_lid: 1,
        },
    ];
    let q = LinkRecord {
        to_lid: 1,
        ..LinkRecord::default()
    };
    assert_eq!(
        matching(&q, LinkRecordMask::TO_LID.bits(), links.clone()).unwrap(),
        links[1..]
    );
}

#[test]
fn port_info_options_and_capability_masks() {
    let rec = |lid: u16, cm: u32| PortInfoRecord {
        endport_lid: lid,
        port_num: 1,
        options: 0,
        port_info: PortInfo {
            capability_mask: cm,
            ..PortInfo::default()
        },
    };
    let all = vec![rec(1, 0b110), rec(2, 0b010), rec(3, 0b100)];
    let lids = |q: &PortInfoRecord, mask: PortInfoRecordMask, bitwise: bool| -> Vec<u16> {
        port_info_matching(q, mask.bits(), bitwise, all.clone())
            .unwrap()
            .iter()
            .map(|r| r.endport_lid)
            .collect()
    };
    let q = PortInfoRecord {
        options: 0x81,
        ..rec(0, 0b010)
    };
    // Options selects nothing; CapabilityMask is exact, or with
    // AttributeModifier bit 31 asks for the query's bits.
    assert_eq!(lids(&q, PortInfoRecordMask::OPTIONS, false), [1, 2, 3]);
    assert_eq!(lids(&q, PortInfoRecordMask::CAPABILITY_MASK, false), [2]);
    assert_eq!(lids(&q, PortInfoRecordMask::CAPABILITY_MASK, true), [1, 2]);
    assert_eq!(
        lids(
            &q,
            PortInfoRecordMask::CAPABILITY_MASK | PortInfoRecordMask::LID,
            true
        ),
        Vec::<u16>::new()
    );
    let q = PortInfoRecord {
        endport_lid: 1,
        ..q
    };
    assert_eq!(
        lids(
            &q,
            PortInfoRecordMask::CAPABILITY_MASK | PortInfoRecordMask::LID,
            true
        ),
        [1]
    );
    // Without the CapabilityMask bit, bit 31 changes nothing.
    assert_eq!(lids(&q, PortInfoRecordMask::PORT_NUM, true), [1, 2, 3]);
}
