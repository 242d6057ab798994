//! IPoIB's side of the subnet administrator (`rdma_ipoib::sa`, the
//! functions an IPoIB interface on an InfiniBand port uses) against the
//! SA of the simulated fabric: the join of the IPv4 broadcast group as a
//! full member, its answer (MLID, Q_Key, MTU, rate) as the SA's own
//! record of the group has it, the membership seen and gone after the
//! leave; an IPv6 group created like it; PathRecords to every other
//! CA's port GID, their LIDs those of the SA's NodeRecords. ibsim carries
//! no data: this proves the SA side only.

use rdma::mad::sa::{McMemberRecord, McMemberRecordMask, NodeRecord, NodeRecordMask, SaStatusCode};
use rdma::umad::SaClient;
use rdma::Gid;
use rdma_ipoib::mgid;
use rdma_ipoib::sa::{self, SaError};

use rdma_tests::fabric::{Fabric, FabricTest};
use rdma_tests::{fail, Outcome, TestResult};

use crate::sa_client::{async_port, at_hcas, local_gid_and_lid, runtime};

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "ipoib::join_the_broadcast_group_and_leave",
        run: join_the_broadcast_group_and_leave,
    },
    FabricTest {
        name: "ipoib::an_ipv6_group_is_created_like_the_broadcast_group",
        run: an_ipv6_group_is_created_like_the_broadcast_group,
    },
    FabricTest {
        name: "ipoib::paths_to_the_other_cas_port_gids",
        run: paths_to_the_other_cas,
    },
];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const PKEY: u16 = 0xffff;

fn broadcast() -> Gid {
    mgid::ipv4_broadcast(PKEY, mgid::LINK_LOCAL)
}

/// The SA's records of group `mgid` (one per group, PortGID and JoinState
/// zeroed for a requester without the SM_Key), and those of `port`'s
/// membership in it.
async fn records(sa: &SaClient, mgid: Gid, port: Gid) -> Res<(Vec<McMemberRecord>, usize)> {
    let q = McMemberRecord {
        mgid,
        ..McMemberRecord::default()
    };
    let groups = sa.get_table(&q, McMemberRecordMask::MGID).await?;
    let q = McMemberRecord {
        port_gid: port,
        ..q
    };
    let mine = sa
        .get_table(&q, McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID)
        .await?;
    Ok((groups, mine.len()))
}

/// Whether the join was refused because this port is slower than the
/// group (the SA's ERR_REQ_INVALID, as `sa_client::` shows of the same
/// group): then the port stays out.
fn refused_as_slower(r: &Result<sa::Joined, SaError>) -> bool {
    matches!(r, Err(SaError::Query(e)) if e.sa_status() == Some(SaStatusCode::ReqInvalid))
}

/// The broadcast group joined as IPoIB joins it: the answer is the group
/// the SA keeps (MLID, Q_Key, MTU, rate, SL of its record), the port is a
/// member between the join and the leave, and not after. A second join
/// of the same port is answered the same; one leave ends it.
fn join_the_broadcast_group_and_leave(f: &Fabric) -> TestResult {
    if let Some(r) = at_hcas(f, "ipoib::join_the_broadcast_group_and_leave") {
        return r;
    }
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, _) = local_gid_and_lid(&port)?;
        let (groups, before) = records(&sa, broadcast(), me).await?;
        let [g] = groups.as_slice() else {
            fail!("the SA's IPoIB broadcast group: {groups:?}");
        };
        let r = sa::join(&sa, me, broadcast(), PKEY).await;
        if refused_as_slower(&r) {
            let (_, after) = records(&sa, broadcast(), me).await?;
            if (before, after) != (0, 0) {
                fail!("refused, yet memberships {before} before and {after} after");
            }
            return Ok(Outcome::Passed);
        }
        let j = r?;
        let a = j.group;
        if (a.mlid, a.qkey, a.mtu, a.rate, a.sl, a.pkey & 0x7fff)
            != (g.mlid, g.qkey, g.mtu, g.rate, g.sl, g.pkey & 0x7fff)
        {
            fail!("the join answered {a:?} for the group {g:?}");
        }
        let (_, during) = records(&sa, broadcast(), me).await?;
        let again = sa::join(&sa, me, broadcast(), PKEY).await?;
        if (again.group.mlid, again.group.qkey) != (a.mlid, a.qkey) {
            fail!("a second join answered {:?}, the first {a:?}", again.group);
        }
        sa::leave(&sa, &j).await?;
        let (groups_after, after) = records(&sa, broadcast(), me).await?;
        if (before, during, after) != (0, 1, 0) {
            fail!(
                "memberships: {before} before the join, {during} after it, {after} after the leave"
            );
        }
        // The SM's group outlives its members.
        if groups_after.len() != 1 {
            fail!("the broadcast group after the leave: {groups_after:?}");
        }
        Ok(Outcome::Passed)
    })
}

/// The solicited-node group of an IPv6 address, which nobody has made,
/// is refused to a plain join (no Q_Key nor MTU to make it with) and
/// created by a join with the broadcast group's parameters: its answer
/// has them; after the leave of its only member the SA has no such
/// group.
fn an_ipv6_group_is_created_like_the_broadcast_group(f: &Fabric) -> TestResult {
    if let Some(r) = at_hcas(
        f,
        "ipoib::an_ipv6_group_is_created_like_the_broadcast_group",
    ) {
        return r;
    }
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, _) = local_gid_and_lid(&port)?;
        let r = sa::join(&sa, me, broadcast(), PKEY).await;
        if refused_as_slower(&r) {
            return Ok(Outcome::Skipped(
                "this port is slower than the broadcast group: no parameters to create a group with"
                    .into(),
            ));
        }
        let bcast = r?;
        // The GUID's low bytes in the address: each HCA's group is its own.
        let low = u16::from_be_bytes([me.0[14], me.0[15]]);
        let v6 = std::net::Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, low);
        let Some(sn) = mgid::ipv6(mgid::solicited_node(v6), PKEY, mgid::LINK_LOCAL) else {
            fail!("no MGID for the solicited-node group of {v6}");
        };
        let (groups, _) = records(&sa, sn, me).await?;
        if !groups.is_empty() {
            fail!("{v6}'s solicited-node group exists before any join: {groups:?}");
        }
        match sa::join(&sa, me, sn, PKEY).await {
            Err(SaError::Query(e)) if e.sa_status().is_some() => {}
            other => fail!("a plain join of a group nobody made answered {other:?}"),
        }
        let j = sa::create(&sa, me, sn, &bcast.group).await?;
        let (a, b) = (j.group, bcast.group);
        if (a.qkey, a.mtu, a.rate, a.sl, a.pkey & 0x7fff)
            != (b.qkey, b.mtu, b.rate, b.sl, b.pkey & 0x7fff)
            || a.mlid == b.mlid
        {
            fail!("created {a:?}, like {b:?}");
        }
        let (groups, during) = records(&sa, sn, me).await?;
        if groups.len() != 1 || during != 1 {
            fail!("after the join: groups {groups:?}, {during} memberships of ours");
        }
        sa::leave(&sa, &j).await?;
        sa::leave(&sa, &bcast).await?;
        let (groups, after) = records(&sa, sn, me).await?;
        if !groups.is_empty() || after != 0 {
            fail!("after the leave: groups {groups:?}, {after} memberships of ours");
        }
        Ok(Outcome::Passed)
    })
}

/// The NodeRecords of LIDs 1 to `MAX_LID`, one Get each (the SA answers
/// a LID no port has with ERR_NO_RECORDS).
async fn node_records(sa: &SaClient) -> Res<Vec<NodeRecord>> {
    const MAX_LID: u16 = 64;
    let mut v = Vec::new();
    for lid in 1..=MAX_LID {
        let q = NodeRecord {
            lid,
            ..NodeRecord::default()
        };
        match sa.get(&q, NodeRecordMask::LID).await {
            Ok(n) => v.push(n),
            Err(e) if e.sa_status() == Some(SaStatusCode::NoRecords) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(v)
}

/// From this port, the path to every other CA port's GID (the SA's
/// NodeRecords, by LID: subnet prefix and port GUID): between our LID and
/// the record's, in the default partition, with an MTU and a rate; the
/// path to a GID no port has is an error, not a path.
fn paths_to_the_other_cas(_: &Fabric) -> TestResult {
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, my_lid) = local_gid_and_lid(&port)?;
        let nodes = node_records(&sa).await?;
        if !nodes.iter().any(|n| n.lid == my_lid) {
            fail!("no NodeRecord of our own LID {my_lid} among {nodes:?}");
        }
        let cas: Vec<_> = nodes
            .iter()
            .filter(|n| n.node_info.node_type == 1 && n.node_info.port_guid != me.interface_id())
            .collect();
        if cas.is_empty() {
            return Ok(Outcome::Skipped("no other CA port on the fabric".into()));
        }
        for n in &cas {
            let dgid = Gid::from_parts(me.subnet_prefix(), n.node_info.port_guid);
            let p = sa::path(&sa, me, dgid, PKEY).await?;
            if (p.slid, p.dlid, p.pkey & 0x7fff) != (my_lid, n.lid, PKEY & 0x7fff)
                || p.mtu == 0
                || p.rate == 0
            {
                fail!("the path to {dgid:?} (LID {}): {p:?}", n.lid);
            }
        }
        let nobody = Gid::from_parts(me.subnet_prefix(), 0x0bad_0bad_0bad_0bad);
        if nodes
            .iter()
            .any(|n| n.node_info.port_guid == nobody.interface_id())
        {
            fail!("a port has the GUID of the test's absent GID");
        }
        match sa::path(&sa, me, nobody, PKEY).await {
            Err(_) => {}
            Ok(p) => fail!("a path to a GID no port has: {p:?}"),
        }
        Ok(Outcome::Passed)
    })
}
