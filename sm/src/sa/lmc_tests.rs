//! Unit tests of PathRecords between ports of 2^LMC LIDs each.

use super::paths::path;
use super::*;

/// Two CAs on a switch with LMC 2, routed, every port read by the sweep:
/// the subnet and the two CAs' port GIDs.
fn two_cas_lmc2() -> (Subnet, Gid, Gid) {
    let mut s = Subnet {
        lids: crate::subnet::Lids::with_lmc(2).unwrap(),
        ..Subnet::default()
    };
    let sw = s.topo.add_node(0x10, NodeKind::Switch, 2);
    let a = s.topo.add_node(0x1000, NodeKind::Ca, 1);
    let b = s.topo.add_node(0x2000, NodeKind::Ca, 1);
    s.topo.link(sw, 1, a, 1).unwrap();
    s.topo.link(sw, 2, b, 1).unwrap();
    s.lids.assign(&s.topo);
    s.index_lids();
    s.routes = s.topo.min_hop_routes(&s.lids);
    for key in [(sw, 1), (sw, 2), (a, 1), (b, 1)] {
        s.port_info.insert(key, PortInfo::default());
    }
    let gid = |id: NodeId| Gid::from_parts(SUBNET_PREFIX, s.topo.node(id).port_guid(1));
    let (ga, gb) = (gid(a), gid(b));
    (s, ga, gb)
}

fn by_gids(s: &Subnet, a: Gid, b: Gid, limit: Option<usize>) -> Vec<PathRecord> {
    let q = PathRecord {
        sgid: a,
        dgid: b,
        ..PathRecord::default()
    };
    path_records(
        s,
        &q,
        PathRecordMask::SGID | PathRecordMask::DGID,
        s.lids.get(a.interface_id()).unwrap(),
        limit,
    )
}

/// Between two ports of four LIDs each: 16 paths, the four whose LIDs
/// have the same offsets first with Preference 0, then the other twelve
/// with Preference 2, each pair once; a Get's limit of one gives the
/// first, NumbPath n the first n.
#[test]
fn a_pair_of_ports_has_a_path_per_pair_of_lids_preferred_first() {
    let (s, a, b) = two_cas_lmc2();
    let (la, lb) = (
        s.lids.get(a.interface_id()).unwrap(),
        s.lids.get(b.interface_id()).unwrap(),
    );
    let all = by_gids(&s, a, b, None);
    assert_eq!(all.len(), 16);
    for (i, p) in all.iter().take(4).enumerate() {
        assert_eq!(
            (p.slid, p.dlid, p.preference),
            (la + i as u16, lb + i as u16, 0)
        );
    }
    let mut pairs = std::collections::HashSet::new();
    for p in &all {
        assert!((la..la + 4).contains(&p.slid) && (lb..lb + 4).contains(&p.dlid));
        assert_eq!((p.sgid, p.dgid), (a, b));
        assert!(
            pairs.insert((p.slid, p.dlid)),
            "{}-{} twice",
            p.slid,
            p.dlid
        );
    }
    assert!(all[4..]
        .iter()
        .all(|p| p.preference == 2 && p.slid - la != p.dlid - lb));
    assert_eq!(by_gids(&s, a, b, Some(1)), all[..1]);
    assert_eq!(by_gids(&s, a, b, Some(6)), all[..6]);
    assert!(by_gids(&s, a, b, Some(0)).is_empty());
}

/// Any LID of a port's range names the port: a DLID or SLID inside the
/// range gives paths to or from exactly that LID; a LID of a switch's
/// block past its base, and one past the last block, name nothing.
#[test]
fn any_lid_of_a_range_names_its_port_and_nothing_else_does() {
    let (s, a, b) = two_cas_lmc2();
    let la = s.lids.get(a.interface_id()).unwrap();
    let lb = s.lids.get(b.interface_id()).unwrap();
    let q = |slid, dlid| {
        let q = PathRecord {
            slid,
            dlid,
            ..PathRecord::default()
        };
        path_records(
            &s,
            &q,
            PathRecordMask::SLID | PathRecordMask::DLID,
            la,
            None,
        )
    };
    let p = q(la + 3, lb + 2);
    assert_eq!(p.len(), 1);
    assert_eq!(
        (p[0].slid, p[0].dlid, p[0].sgid, p[0].dgid),
        (la + 3, lb + 2, a, b)
    );
    let sw = s.lids.get(0x10).unwrap();
    assert_eq!(s.lids.range(0x10), Some(sw..=sw));
    assert_eq!(q(la, sw).len(), 1, "the switch's base LID");
    assert!(
        q(la, sw + 1).is_empty(),
        "inside the switch's block, no port's"
    );
    assert!(q(la, s.lids.max_lid() + 1).is_empty());
    // From the requester's port (no SLID or SGID): its four LIDs, from
    // whichever of them it asked.
    let dq = PathRecord {
        dgid: b,
        ..PathRecord::default()
    };
    let from = path_records(&s, &dq, PathRecordMask::DGID, la + 2, None);
    assert_eq!(from.len(), 16);
    assert_eq!(from[0].slid, la);
}

/// The path from a port to itself, by two of its LIDs, is the port's
/// loopback: no link on the way.
#[test]
fn a_port_reaches_itself_by_any_two_of_its_lids() {
    let (s, a, _) = two_cas_lmc2();
    let la = s.lids.get(a.interface_id()).unwrap();
    let p = path(&s, la, la + 1).unwrap();
    assert_eq!((p.sgid, p.dgid), (a, a));
}

/// NodeRecords and PortInfoRecords asked by any LID of a port's range
/// are the port's, with its base LID (as OpenSM looks the port up); a LID
/// of a switch's block past its base is nobody's.
#[test]
fn records_by_any_lid_of_a_range_are_the_ports() {
    let (mut s, a, _) = two_cas_lmc2();
    for (id, _) in s
        .topo
        .nodes()
        .map(|(id, n)| (id, n.kind))
        .collect::<Vec<_>>()
    {
        s.node_info.insert(id, rdma::mad::NodeInfo::default());
    }
    let la = s.lids.get(a.interface_id()).unwrap();
    let sw = s.lids.get(0x10).unwrap();
    let s = std::sync::RwLock::new(s);
    use super::records_tests::table;
    use rdma::mad::sa::{NodeRecord, PortInfoRecord, PortInfoRecordMask};
    for lid in la..la + 4 {
        let q = NodeRecord {
            lid,
            ..NodeRecord::default()
        };
        let v = table(&s, &q, rdma::mad::sa::NodeRecordMask::LID.bits()).unwrap();
        assert_eq!(
            v.iter().map(|r| r.lid).collect::<Vec<_>>(),
            [la],
            "NodeRecord by {lid}"
        );
        let q = PortInfoRecord {
            endport_lid: lid,
            ..PortInfoRecord::default()
        };
        let v = table(&s, &q, PortInfoRecordMask::LID.bits()).unwrap();
        assert_eq!(v.len(), 1, "PortInfoRecord by {lid}");
        assert_eq!(v[0].endport_lid, la);
    }
    let q = NodeRecord {
        lid: sw + 1,
        ..NodeRecord::default()
    };
    assert!(table(&s, &q, rdma::mad::sa::NodeRecordMask::LID.bits()).map_or(true, |v| v.is_empty()));
}
