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

/// A table that could not be sent is answered ERR_NO_RESOURCES with no
/// records, the request's TID and attribute, the GetTable response method.
#[test]
fn an_unsent_table_is_no_resources_not_part_of_it() {
    let req = rdma::mad::sa::SaRequest::get_table(0)
        .record(
            &NodeRecord::default(),
            rdma::mad::sa::NodeRecordMask::empty(),
        )
        .unwrap();
    let r = unsent(&req);
    let h = r.header();
    assert_eq!(
        (h.method, h.tid, h.attr_id),
        (Method::GET_TABLE_RESP, req.tid(), req.header().attr_id)
    );
    match rdma::mad::sa::SaTable::<NodeRecord>::from_mad(&r) {
        Err(e) => assert_eq!(e.code(), Some(SaStatusCode::NoResources)),
        Ok(t) => panic!("an unsent table gave {} records", t.count()),
    }
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

/// The selectors as OpenSM applies them (the path: MTU 1024 (3), 100 Gb/s
/// (16), lifetime 18): greater than, the path's value must be; less than,
/// the path at the highest value below the query's; exactly, at the query's
/// value when the path's is at least that (rates: equal); largest, as it
/// is; a value without its selector, or a selector without its value,
/// ignored. The path's (MTU, rate, lifetime), or `None` for ERR_NO_RECORDS.
#[test]
fn path_queries_meet_their_mtu_rate_and_lifetime_selectors() {
    let (s, a, b) = two_cas_one_small();
    let base = PathRecordMask::SLID | PathRecordMask::DLID;
    let ask = |m: PathRecordMask, q: PathRecord| {
        let v = path_records(
            &s,
            &PathRecord {
                slid: a,
                dlid: b,
                ..q
            },
            base | m,
            a,
            None,
        );
        assert!(v.len() <= 1, "{v:?}");
        v.first().map(|p| (p.mtu, p.rate, p.packet_life_time))
    };
    let mtu = |sel, mtu| PathRecord {
        mtu_selector: sel,
        mtu,
        ..PathRecord::default()
    };
    let with_mtu = PathRecordMask::MTU | PathRecordMask::MTU_SELECTOR;
    let path = Some((3, 16, PACKET_LIFE));
    assert_eq!(ask(base, PathRecord::default()), path);
    assert_eq!(ask(with_mtu, mtu(Selector::GreaterThan, 4)), None, "> 2048");
    assert_eq!(ask(with_mtu, mtu(Selector::GreaterThan, 2)), path);
    assert_eq!(ask(with_mtu, mtu(Selector::LessThan, 3)), Some((2, 16, 18)));
    assert_eq!(ask(with_mtu, mtu(Selector::LessThan, 5)), path);
    assert_eq!(ask(with_mtu, mtu(Selector::LessThan, 1)), None, "< 256");
    assert_eq!(ask(with_mtu, mtu(Selector::Exactly, 3)), path);
    assert_eq!(ask(with_mtu, mtu(Selector::Exactly, 1)), Some((1, 16, 18)));
    assert_eq!(ask(with_mtu, mtu(Selector::Exactly, 4)), None);
    assert_eq!(ask(with_mtu, mtu(Selector::Best, 5)), path);
    // A value or a selector alone: ignored.
    assert_eq!(
        ask(PathRecordMask::MTU, mtu(Selector::GreaterThan, 4)),
        path
    );
    assert_eq!(
        ask(PathRecordMask::MTU_SELECTOR, mtu(Selector::GreaterThan, 4)),
        path
    );
    let rate = |sel, rate| PathRecord {
        rate_selector: sel,
        rate,
        ..PathRecord::default()
    };
    let with_rate = PathRecordMask::RATE | PathRecordMask::RATE_SELECTOR;
    assert_eq!(
        ask(with_rate, rate(Selector::GreaterThan, 7)),
        path,
        "100 > 40 Gb/s"
    );
    assert_eq!(ask(with_rate, rate(Selector::GreaterThan, 16)), None);
    assert_eq!(
        ask(with_rate, rate(Selector::LessThan, 17)),
        path,
        "100 < 200 Gb/s"
    );
    // Less than 20 Gb/s: the next rate below, 14 Gb/s (code 11); less than
    // 10: 5 Gb/s (code 5); less than 2.5: nothing.
    assert_eq!(
        ask(with_rate, rate(Selector::LessThan, 6)),
        Some((3, 11, 18))
    );
    assert_eq!(
        ask(with_rate, rate(Selector::LessThan, 3)),
        Some((3, 5, 18))
    );
    assert_eq!(ask(with_rate, rate(Selector::LessThan, 2)), None);
    assert_eq!(ask(with_rate, rate(Selector::Exactly, 16)), path);
    assert_eq!(
        ask(with_rate, rate(Selector::Exactly, 7)),
        None,
        "not 40 Gb/s"
    );
    let life = |sel, l| PathRecord {
        packet_life_time_selector: sel,
        packet_life_time: l,
        ..PathRecord::default()
    };
    let with_life = PathRecordMask::PACKET_LIFE_TIME | PathRecordMask::PACKET_LIFE_TIME_SELECTOR;
    assert_eq!(
        ask(with_life, life(Selector::LessThan, PACKET_LIFE)),
        Some((3, 16, 17))
    );
    assert_eq!(
        ask(with_life, life(Selector::LessThan, PACKET_LIFE + 1)),
        path
    );
    assert_eq!(ask(with_life, life(Selector::LessThan, 1)), None);
    assert_eq!(ask(with_life, life(Selector::Exactly, 5)), Some((3, 16, 5)));
    assert_eq!(
        ask(with_life, life(Selector::Exactly, PACKET_LIFE + 1)),
        None
    );
    assert_eq!(
        ask(with_life, life(Selector::GreaterThan, PACKET_LIFE)),
        None
    );
    assert_eq!(ask(with_life, life(Selector::Best, 0)), path);
    // A port to itself: lifetime 0, so greater than 0 is no path.
    let q = |sel| PathRecord {
        slid: a,
        dlid: a,
        ..life(sel, 0)
    };
    let to_self = |sel| path_records(&s, &q(sel), base | with_life, a, None);
    assert_eq!(to_self(Selector::Best)[0].packet_life_time, 0);
    assert!(to_self(Selector::GreaterThan).is_empty());
}

/// A join that creates the group `mgid` (its last two bytes) for the
/// port `port_gid`.
fn create(s: &mut Subnet, mgid: u16, port_gid: Gid) -> Result<McMemberRecord, SaStatusCode> {
    let rate = McMemberRecord {
        rate: 2,
        ..McMemberRecord::default()
    };
    join_new(s, mgid, port_gid, McMemberRecordMask::RATE, rate)
}

/// A full-member join of `port_gid`, for itself, to the group `n` of
/// [`mgid`], naming what a join that creates a group must (Q_Key 0x1234,
/// the default P_Key, SL, FlowLabel, TClass) and the components `extra`
/// of `q`.
fn join_new(
    s: &mut Subnet,
    n: u16,
    port_gid: Gid,
    extra: McMemberRecordMask,
    q: McMemberRecord,
) -> Result<McMemberRecord, SaStatusCode> {
    let q = McMemberRecord {
        mgid: mgid(n),
        port_gid,
        qkey: 0x1234,
        pkey: 0xffff,
        join_state: JoinState::FULL_MEMBER,
        ..q
    };
    let m = McMemberRecordMask::MGID
        | McMemberRecordMask::PORT_GID
        | McMemberRecordMask::QKEY
        | McMemberRecordMask::PKEY
        | McMemberRecordMask::SL
        | McMemberRecordMask::FLOW_LABEL
        | McMemberRecordMask::TCLASS
        | McMemberRecordMask::JOIN_STATE
        | extra;
    let me = end_port_by_gid(s, port_gid).unwrap_or(0);
    join(s, &q, m, me)
}

fn leave_all(s: &mut Subnet, rec: &McMemberRecord) {
    let m =
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE;
    let me = end_port_by_gid(s, rec.port_gid).unwrap();
    leave(s, rec, m, me).unwrap();
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

/// The MGID of the group `create(_, n, _)` makes.
fn mgid(n: u16) -> Gid {
    let mut g = [0xff, 0x12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    g[14..].copy_from_slice(&n.to_be_bytes());
    Gid(g)
}

#[test]
fn another_port_can_neither_change_nor_end_a_membership_its_port_made() {
    let (mut s, ports) = subnet_of_cas(3);
    let lid = |s: &Subnet, g| end_port_by_gid(s, g).unwrap();
    let (a, b) = (lid(&s, ports[0]), lid(&s, ports[1]));
    create(&mut s, 1, ports[1]).unwrap();
    let m =
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE;
    let of_b = |js| McMemberRecord {
        mgid: mgid(1),
        port_gid: ports[1],
        join_state: js,
        ..McMemberRecord::default()
    };
    // A leave and a join of another state, by A for B: refused.
    assert_eq!(
        leave(&mut s, &of_b(JoinState::FULL_MEMBER), m, a),
        Err(SaStatusCode::ReqInvalid)
    );
    assert_eq!(
        join(&mut s, &of_b(JoinState::SEND_ONLY_NON_MEMBER), m, a),
        Err(SaStatusCode::ReqInvalid)
    );
    // An unknown requester: refused.
    assert_eq!(
        leave(&mut s, &of_b(JoinState::FULL_MEMBER), m, 0xbeef),
        Err(SaStatusCode::ReqInvalid)
    );
    let g = &s.groups.by_mgid[&mgid(1).0];
    assert_eq!(g.members.get(&ports[1].0), Some(&JoinState::FULL_MEMBER));
    // B itself may; a leave of a state B does not hold is refused.
    assert_eq!(
        leave(&mut s, &of_b(JoinState::NON_MEMBER), m, b),
        Err(SaStatusCode::ReqInvalid)
    );
    leave(&mut s, &of_b(JoinState::FULL_MEMBER), m, b).unwrap();
    assert!(!s.groups.by_mgid.contains_key(&mgid(1).0));
}

#[test]
fn a_proxy_join_may_be_ended_by_the_proxy_and_by_the_port() {
    let (mut s, ports) = subnet_of_cas(3);
    let lid = |s: &Subnet, g| end_port_by_gid(s, g).unwrap();
    let (a, c) = (lid(&s, ports[0]), lid(&s, ports[2]));
    create(&mut s, 2, ports[1]).unwrap();
    let m =
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE;
    let of_c = McMemberRecord {
        mgid: mgid(2),
        port_gid: ports[2],
        join_state: JoinState::FULL_MEMBER,
        ..McMemberRecord::default()
    };
    // A joins C (not a member yet): a proxy join, then A leaves for C.
    join(&mut s, &of_c, m, a).unwrap();
    assert!(s.groups.proxies.contains(&(mgid(2).0, ports[2].0)));
    leave(&mut s, &of_c, m, a).unwrap();
    assert!(s.groups.proxies.is_empty());
    // Joined by proxy again, C itself leaves.
    join(&mut s, &of_c, m, a).unwrap();
    leave(&mut s, &of_c, m, c).unwrap();
    assert!(!s.groups.by_mgid[&mgid(2).0]
        .members
        .contains_key(&ports[2].0));
}

#[test]
fn reports_go_to_the_subscriptions_that_match() {
    use rdma::mad::{Attribute, Notice, Trap};
    let (mut s, ports) = subnet_of_cas(2);
    let a = end_port_by_gid(&s, ports[0]).unwrap();
    s.sm_lid = a;
    let all = InformInfo {
        lid_range_begin: 0xffff,
        is_generic: true,
        subscribe: true,
        trap_type: 0xffff,
        trap_number: 0xffff,
        producer_type: 0xff_ffff,
        ..InformInfo::default()
    };
    let only = |n| InformInfo {
        trap_number: n,
        ..all
    };
    s.groups.subscriptions = vec![
        (10, all),
        (11, only(66)),
        (12, only(67)),
        (
            13,
            InformInfo {
                is_generic: false,
                ..all
            },
        ),
        (
            14,
            InformInfo {
                trap_type: 4,
                ..only(66)
            },
        ),
        (
            15,
            InformInfo {
                gid: ports[1],
                ..all
            },
        ),
        (
            16,
            InformInfo {
                gid: ports[0],
                ..all
            },
        ),
        (
            17,
            InformInfo {
                lid_range_begin: a + 1,
                lid_range_end: a + 9,
                ..all
            },
        ),
        (
            18,
            InformInfo {
                lid_range_begin: a,
                lid_range_end: a,
                qpn: 7,
                ..all
            },
        ),
        (
            19,
            InformInfo {
                producer_type: 1,
                ..all
            },
        ),
    ];
    let r = reports::reports(&s, Trap::McGroupCreated(mgid(5)));
    let to: Vec<(u16, u32)> = r.iter().map(|(a, _)| (a.lid, a.qpn)).collect();
    assert_eq!(to, [(10, 1), (11, 1), (16, 1), (18, 7)]);
    let n = Notice::decode(&r[0].1[..64]).unwrap();
    assert_eq!(n.trap(), Some(Trap::McGroupCreated(mgid(5))));
    assert_eq!(
        (n.issuer_lid, n.notice_type, n.producer_type_or_vendor_id),
        (a, 3, 4)
    );
    assert_eq!(Notice::issuer_gid(&r[0].1).unwrap(), ports[0]);
}

/// A join that creates a group without naming MTU and rate gives the group
/// the requesting port's (as OpenSM): a 2.5 Gb/s port's group takes the
/// next 2.5 Gb/s port (a fixed 10 Gb/s refused it); with selectors, the
/// values OpenSM picks, and ERR_REQ_INVALID where none fits.
#[test]
fn a_new_group_takes_its_creators_mtu_and_rate_or_what_the_selectors_pick() {
    let (mut s, ports) = subnet_of_cas(3);
    let slow = PortInfo {
        mtu_cap: 5,
        neighbor_mtu: 3,
        link_width_active: rdma::mad::LinkWidth::X1,
        link_speed_active: rdma::mad::LinkSpeed::Sdr,
        ..PortInfo::default()
    };
    for i in 1..=3 {
        let id = s.topo.find(0x1000 * i).unwrap();
        s.port_info.insert((id, 1), slow);
    }
    let ask = |s: &mut Subnet, n: u16, port: usize, m: McMemberRecordMask, q: McMemberRecord| {
        join_new(s, n, ports[port], m, q).map(|r| (r.mtu, r.rate))
    };
    let none = McMemberRecordMask::empty();
    assert_eq!(
        ask(&mut s, 1, 0, none, McMemberRecord::default()),
        Ok((3, 2))
    );
    assert_eq!(
        ask(&mut s, 1, 1, none, McMemberRecord::default()),
        Ok((3, 2)),
        "a second 2.5 Gb/s port"
    );
    let mtu = McMemberRecordMask::MTU | McMemberRecordMask::MTU_SELECTOR;
    let rate = McMemberRecordMask::RATE | McMemberRecordMask::RATE_SELECTOR;
    let q = |mtu_selector, mtu, rate_selector, rate| McMemberRecord {
        mtu_selector,
        mtu,
        rate_selector,
        rate,
        ..McMemberRecord::default()
    };
    use Selector::*;
    // Greater than the port's own: refused; than less: the port's.
    assert_eq!(
        ask(&mut s, 2, 0, mtu, q(GreaterThan, 3, Exactly, 0)),
        Err(SaStatusCode::ReqInvalid)
    );
    assert_eq!(
        ask(&mut s, 3, 0, mtu, q(GreaterThan, 1, Exactly, 0)),
        Ok((3, 2))
    );
    // Less than: the port's when the query's is above it, else one below.
    assert_eq!(
        ask(&mut s, 4, 0, mtu, q(LessThan, 5, Exactly, 0)),
        Ok((3, 2))
    );
    assert_eq!(
        ask(&mut s, 5, 0, mtu, q(LessThan, 2, Exactly, 0)),
        Ok((1, 2))
    );
    assert_eq!(
        ask(&mut s, 6, 0, mtu, q(LessThan, 1, Exactly, 0)),
        Err(SaStatusCode::ReqInvalid)
    );
    // Exactly and largest.
    assert_eq!(
        ask(&mut s, 7, 0, mtu, q(Exactly, 5, Exactly, 0)),
        Ok((5, 2))
    );
    assert_eq!(ask(&mut s, 8, 0, mtu, q(Best, 1, Exactly, 0)), Ok((3, 2)));
    // Rates by speed: greater than 2.5 on a 2.5 Gb/s port refused; less
    // than 10 Gb/s (above the port's): the port's; less than 5: 2.5.
    assert_eq!(
        ask(&mut s, 9, 0, rate, q(Exactly, 0, GreaterThan, 2)),
        Err(SaStatusCode::ReqInvalid)
    );
    assert_eq!(
        ask(&mut s, 10, 0, rate, q(Exactly, 0, LessThan, 3)),
        Ok((3, 2))
    );
    assert_eq!(
        ask(&mut s, 11, 0, rate, q(Exactly, 0, LessThan, 5)),
        Ok((3, 2))
    );
    assert_eq!(
        ask(&mut s, 12, 0, rate, q(Exactly, 0, LessThan, 2)),
        Err(SaStatusCode::ReqInvalid)
    );
    assert_eq!(
        ask(&mut s, 13, 0, rate, q(Exactly, 0, Exactly, 7)),
        Ok((3, 7))
    );
}
