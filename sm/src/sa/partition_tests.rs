//! Unit tests of the SA's answers under partitions: PathRecords and
//! MCMemberRecords only within a shared partition, joins refused outside
//! the port's partitions, P_KeyTableRecords of the ports' tables.

use super::pkey_records::pkey_table_records;
use super::*;
use crate::partitions::{self, Partitions};
use rdma::mad::sa::PKeyTableRecord;

/// Three CAs (ports 0x1001, 0x2001, 0x3001) on a switch, routed, with the
/// P_Key tables of `conf` as the sweep gives them (the SM on 0x3001); the
/// CAs' LIDs and GIDs.
fn fabric(conf: &str) -> (Subnet, Vec<u16>, Vec<Gid>) {
    let mut s = Subnet::default();
    let sw = s.topo.add_node(0x10, NodeKind::Switch, 3);
    let mut cas = Vec::new();
    for i in 1..=3u8 {
        let ca = s.topo.add_node(0x1000 * u64::from(i), NodeKind::Ca, 1);
        s.topo.link(sw, i, ca, 1).unwrap();
        cas.push(ca);
    }
    s.lids.assign(&s.topo);
    s.index_lids();
    s.routes = s.topo.min_hop_routes(&s.lids);
    for i in 1..=3 {
        s.port_info.insert((sw, i), PortInfo::default());
    }
    let p = partitions::parse(conf).unwrap();
    for (guid, t) in p.tables(&s.topo, Some(0x3001)) {
        let (id, port) = s.topo.end_port_of(guid).unwrap();
        s.pkeys.insert((id, port), t);
    }
    s.groups = crate::groups::Groups::for_partitions(&p);
    let mut lids = Vec::new();
    let mut gids = Vec::new();
    // 4X SDR: the 10 Gb/s of the broadcast groups.
    let pi = PortInfo {
        link_width_active: rdma::mad::LinkWidth::X4,
        link_speed_active: rdma::mad::LinkSpeed::Sdr,
        ..PortInfo::default()
    };
    for id in cas {
        s.port_info.insert((id, 1), pi);
        lids.push(s.lids.of(&s.topo, id, 1).unwrap());
        gids.push(Gid::from_parts(SUBNET_PREFIX, s.topo.node(id).port_guid(1)));
    }
    (s, lids, gids)
}

const CONF: &str = "red=0x1,ipoib:0x1001=full,0x2001;\nblue=0x2,ipoib,mtu=5:0x3001=full;";

fn paths(s: &Subnet, a: u16, b: u16, pkey: Option<u16>) -> Vec<PathRecord> {
    let mut m = PathRecordMask::SLID | PathRecordMask::DLID;
    if pkey.is_some() {
        m |= PathRecordMask::PKEY;
    }
    let q = PathRecord {
        slid: a,
        dlid: b,
        pkey: pkey.unwrap_or(0),
        ..PathRecord::default()
    };
    path_records(s, &q, m, a, None)
}

#[test]
fn paths_only_between_ports_that_share_a_partition_with_its_pkey() {
    let (s, l, _) = fabric(CONF);
    // 1 and 2 share red (1 full, 2 limited); the default partition is
    // limited for both, so not shared.
    let p = paths(&s, l[0], l[1], None);
    assert_eq!(p.iter().map(|p| p.pkey).collect::<Vec<_>>(), [0x8001]);
    assert_eq!(
        paths(&s, l[1], l[0], None)[0].pkey,
        0x0001,
        "the source's entry"
    );
    assert!(paths(&s, l[0], l[1], Some(0xffff)).is_empty());
    assert!(paths(&s, l[0], l[1], Some(0x0002)).is_empty());
    assert_eq!(paths(&s, l[0], l[1], Some(0x8001)).len(), 1);
    // 1 and 3 share the default partition only (3 is the SM's port: full).
    assert_eq!(paths(&s, l[0], l[2], None)[0].pkey, 0x7fff);
    assert_eq!(paths(&s, l[2], l[0], None)[0].pkey, 0xffff);
    assert!(paths(&s, l[0], l[2], Some(0x0001)).is_empty());
    // Without partitions (no tables): the default partition, full.
    let (mut s, l, _) = fabric(CONF);
    s.pkeys.clear();
    assert_eq!(paths(&s, l[0], l[1], None)[0].pkey, 0xffff);
}

#[test]
fn joins_outside_the_ports_partitions_are_refused() {
    let (mut s, l, g) = fabric(CONF);
    let blue = partitions::ipoib_broadcast_mgid(0x0002);
    let red = partitions::ipoib_broadcast_mgid(0x0001);
    assert!(s.groups.by_mgid.contains_key(&blue) && s.groups.by_mgid.contains_key(&red));
    assert!(!s
        .groups
        .by_mgid
        .contains_key(&crate::groups::IPOIB_BROADCAST));
    let m =
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE;
    let q = |mgid: [u8; 16], port: Gid| McMemberRecord {
        mgid: Gid(mgid),
        port_gid: port,
        join_state: JoinState::FULL_MEMBER,
        ..McMemberRecord::default()
    };
    assert_eq!(
        join(&mut s, &q(blue, g[0]), m, l[0]).map(|r| r.pkey),
        Err(SaStatusCode::ReqInvalid)
    );
    assert_eq!(
        join(&mut s, &q(red, g[0]), m, l[0]).map(|r| r.pkey),
        Ok(0x8001)
    );
    assert_eq!(
        join(&mut s, &q(red, g[1]), m, l[1]).map(|r| r.pkey),
        Ok(0x8001)
    );
    assert_eq!(
        join(&mut s, &q(blue, g[2]), m, l[2]).map(|r| r.pkey),
        Ok(0x8002)
    );
    // A new group in a partition the port is not in.
    let create = m
        | McMemberRecordMask::QKEY
        | McMemberRecordMask::PKEY
        | McMemberRecordMask::SL
        | McMemberRecordMask::FLOW_LABEL
        | McMemberRecordMask::TCLASS;
    let mut mine = [0xff, 0x12, 0xa0, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
    let new = |mgid: [u8; 16], pkey: u16| McMemberRecord {
        pkey,
        ..q(mgid, g[1])
    };
    assert_eq!(
        join(&mut s, &new(mine, 0x8002), create, l[1]).map(|_| ()),
        Err(SaStatusCode::ReqInvalid)
    );
    assert!(join(&mut s, &new(mine, 0x8001), create, l[1]).is_ok());
    mine[15] = 10;
    assert!(
        join(&mut s, &new(mine, 0xffff), create, l[1]).is_ok(),
        "limited in the default partition"
    );
    // Each port sees the groups of its partitions only.
    let seen = |s: &Subnet, lid| -> std::collections::BTreeSet<[u8; 16]> {
        member_records(s, McMemberRecordMask::empty(), lid)
            .iter()
            .map(|r| r.mgid.0)
            .collect()
    };
    assert!(!seen(&s, l[0]).contains(&blue) && seen(&s, l[0]).contains(&red));
    assert!(seen(&s, l[2]).contains(&blue) && !seen(&s, l[2]).contains(&red));
}

#[test]
fn pkey_table_records_are_the_tables_by_lid_port_and_block() {
    let (s, l, _) = fabric(CONF);
    let all = pkey_table_records(&s);
    assert_eq!(
        all.len(),
        4,
        "three CA ports and the switch's port 0, a block each"
    );
    let of = |lid| all.iter().find(|r| r.lid == lid).unwrap();
    assert_eq!(of(l[0]).table.pkeys[..3], [0x7fff, 0x8001, 0]);
    assert_eq!((of(l[2]).port_num, of(l[2]).block_num), (1, 0));
    assert_eq!(of(l[2]).table.pkeys[..3], [0xffff, 0x8002, 0]);
    // Component mask: LID; and a query that matches nothing.
    let q = PKeyTableRecord {
        lid: l[1],
        ..PKeyTableRecord::default()
    };
    let hits = matching(&q, 1, all.clone()).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].table.pkeys[..2], [0x7fff, 0x0001]);
    let q = PKeyTableRecord { block_num: 1, ..q };
    assert!(matching(&q, 0b11, all.clone()).unwrap().is_empty());
    assert_eq!(matching(&q, 0, all.clone()).unwrap().len(), 4);
    // Encode and decode; short input is a typed error.
    let r = *of(l[0]);
    let mut b = [0u8; 72];
    rdma::mad::Attribute::encode_into(&r, &mut b).unwrap();
    assert_eq!(
        <PKeyTableRecord as rdma::mad::Attribute>::decode(&b).unwrap(),
        r
    );
    assert!(<PKeyTableRecord as rdma::mad::Attribute>::decode(&b[..71]).is_err());
    assert!(rdma::mad::Attribute::encode_into(&r, &mut [0u8; 71]).is_err());
    assert_eq!(u16::from_be_bytes([b[8], b[9]]), 0x7fff);
}

#[test]
fn without_a_file_the_groups_and_paths_are_as_before() {
    assert_eq!(
        crate::groups::Groups::for_partitions(&Partitions::default())
            .by_mgid
            .keys()
            .collect::<Vec<_>>(),
        [&crate::groups::IPOIB_BROADCAST]
    );
}
