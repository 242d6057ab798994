//! The async SA client (`rdma::umad::SaClient`) against OpenSM's SA on the
//! simulated fabric: PathRecords by LIDs and by GIDs, many in flight; a
//! multicast join and leave of the IPoIB broadcast group, seen in the SA's
//! MCMemberRecords in between; InformInfo subscriptions; the SA's error
//! statuses as typed errors; every NodeRecord by one GetTable against
//! `saquery` LID by LID (or the typed error of a table cut short, ibsim
//! carrying no RMPP); a dropped query leaves nothing behind; and the
//! time of a burst of PathRecord queries against `saquery` issuing them one
//! by one.

use std::collections::BTreeSet;
use std::error::Error as StdError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma::mad::sa::{
    InformInfo, InformInfoRecord, InformInfoRecordMask, JoinState, McMemberRecord,
    McMemberRecordMask, NodeRecord, NodeRecordMask, SaError, SaStatusCode,
};
use rdma::umad::SaClient;
use rdma::umad::{self, AsyncPort, Port};
use rdma::Gid;
use std::process::Command;

use rdma_tests::fabric::{output_within, Fabric, FabricTest, NodeKind};
use rdma_tests::{fail, Outcome, TestResult};

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "sa_client::path_records_from_the_sm_to_every_lid_in_flight",
        run: path_records_to_every_lid_in_flight,
    },
    FabricTest {
        name: "sa_client::path_records_by_gids_are_those_by_lids",
        run: path_records_by_gids,
    },
    FabricTest {
        name: "sa_client::join_and_leave_the_ipoib_broadcast_group",
        run: join_and_leave_the_ipoib_broadcast_group,
    },
    FabricTest {
        name: "sa_client::subscribe_and_unsubscribe_gid_in_service_reports",
        run: subscribe_and_unsubscribe,
    },
    FabricTest {
        name: "sa_client::sa_errors_are_typed_and_no_records_is_an_empty_table",
        run: sa_errors_are_typed,
    },
    FabricTest {
        name: "sa_client::every_node_record_by_get_table_is_saquery_s_or_cut_short_typed",
        run: every_node_record_by_get_table,
    },
    FabricTest {
        name: "sa_client::dropped_queries_leave_nothing_behind",
        run: dropped_queries_leave_nothing_behind,
    },
    FabricTest {
        name: "sa_client::a_burst_of_path_queries_against_saquery_one_by_one",
        run: burst_against_saquery,
    },
];

type Res<T> = Result<T, Box<dyn StdError>>;
type SendRes<T> = Result<T, Box<dyn StdError + Send + Sync>>;

/// The default subnet prefix, which OpenSM keeps unless configured.
const SUBNET_PREFIX: u64 = 0xfe80_0000_0000_0000;

/// The IPoIB IPv4 broadcast group of the default partition
/// (ff12:401b:ffff::ffff:ffff), which OpenSM creates at start.
const IPOIB_BROADCAST: [u8; 16] = [
    0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
];

pub(crate) fn runtime() -> Res<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// The simulated CA's port as an `AsyncPort` (call inside the runtime).
pub(crate) fn async_port() -> Res<AsyncPort> {
    let ca = umad::Ca::get("ibsim0")?;
    let Some(p) = ca.ports.first() else {
        fail!("ibsim0 has no port: {ca:?}");
    };
    Ok(AsyncPort::new(Port::open(&ca.name, p.port_num)?)?)
}

/// This port's GID (subnet prefix and port GUID) and LID.
pub(crate) fn local_gid_and_lid(port: &AsyncPort) -> Res<(Gid, u16)> {
    let info = port.port().info()?;
    Ok((
        Gid::from_parts(info.gid_prefix, info.port_guid),
        info.base_lid as u16,
    ))
}

/// One query per LID of the subnet, from the SM's LID, all in flight at
/// once (as many tasks); each answer holds one path with the LIDs asked
/// for.
fn path_records_to_every_lid_in_flight(f: &Fabric) -> TestResult {
    let lids = f.lids()?;
    let sm = f.sm_lid;
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = Arc::new(SaClient::new(&port)?);
        let mut tasks = Vec::new();
        for &(_, lid) in &lids {
            let sa = sa.clone();
            tasks.push(tokio::spawn(async move {
                let paths = sa.paths_between_lids(sm, lid).await?;
                SendRes::Ok((lid, paths))
            }));
        }
        let n = tasks.len();
        for t in tasks {
            let (lid, paths) = t.await?.map_err(|e| e.to_string())?;
            let [p] = paths.as_slice() else {
                fail!(
                    "LID {sm} to LID {lid}: {} paths, not 1: {paths:?}",
                    paths.len()
                );
            };
            if p.slid != sm || p.dlid != lid || p.pkey == 0 || p.mtu == 0 || p.rate == 0 {
                fail!("LID {sm} to LID {lid}: {p:?}");
            }
        }
        if n != lids.len() || n == 0 {
            fail!("{n} queries for {} LIDs", lids.len());
        }
        Ok(Outcome::Passed)
    })
}

/// The path from this port's GID to each port's GID (fe80:: and the GUID
/// of OpenSM's guid2lid) is the path between their LIDs.
fn path_records_by_gids(f: &Fabric) -> TestResult {
    let lids = f.lids()?;
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, my_lid) = local_gid_and_lid(&port)?;
        if me.subnet_prefix() != SUBNET_PREFIX {
            fail!("the port's GID {me:?} has not the default subnet prefix");
        }
        for &(guid, lid) in lids.iter().take(12) {
            let dgid = Gid::from_parts(SUBNET_PREFIX, guid);
            let by_gid = sa.paths_between_gids(me, dgid).await?;
            let by_lid = sa.paths_between_lids(my_lid, lid).await?;
            let [g] = by_gid.as_slice() else {
                fail!("{me:?} to {dgid:?}: {by_gid:?}");
            };
            if g.sgid != me || g.dgid != dgid || g.dlid != lid || g.slid != my_lid {
                fail!("{me:?} to {dgid:?} (LID {lid}): {g:?}");
            }
            let [l] = by_lid.as_slice() else {
                fail!("LID {my_lid} to {lid}: {by_lid:?}");
            };
            if (g.sl, g.mtu, g.rate, g.pkey, g.packet_life_time)
                != (l.sl, l.mtu, l.rate, l.pkey, l.packet_life_time)
            {
                fail!("by GID {g:?}\nby LID {l:?}");
            }
        }
        Ok(Outcome::Passed)
    })
}

/// The broadcast group's MCMemberRecords that match PortGID `gid`: 1 while
/// the port is a member, else none. (OpenSM answers a requester without
/// the SM_Key with the group's record, its PortGID and JoinState zeroed.)
async fn members_with(sa: &SaClient, gid: Gid) -> Res<usize> {
    let q = McMemberRecord {
        mgid: Gid(IPOIB_BROADCAST),
        port_gid: gid,
        ..McMemberRecord::default()
    };
    let mask = McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID;
    let all = sa.get_table(&q, mask).await?;
    if let Some(m) = all.iter().find(|m| m.mgid != q.mgid || m.mlid < 0xc000) {
        fail!("a query of {:?}'s membership answered {m:?}", q.mgid);
    }
    Ok(all.len())
}

/// Runs the test `name` again in child processes of this binary attached
/// at the fabric's first two HCAs (`SIM_HOST`), unless this process is
/// attached at an HCA already (then `None`: run the test here). Each child
/// inherits the fabric's environment and runs only that test.
pub(crate) fn at_hcas(f: &Fabric, name: &str) -> Option<TestResult> {
    if f.attached().kind == NodeKind::Hca {
        return None;
    }
    Some((|| {
        let hcas: Vec<_> = f
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Hca)
            .take(2)
            .collect();
        if hcas.is_empty() {
            return Ok(Outcome::Skipped("the fabric has no HCA".into()));
        }
        // A child may skip (its HCA cannot run the test: a slow link, say);
        // the test passes where one ran and none failed, and is skipped
        // where every child skipped, with their reasons.
        let mut skips = Vec::new();
        let mut passed = 0;
        for hca in &hcas {
            let mut c = Command::new(std::env::current_exe()?);
            c.arg(name).env("SIM_HOST", &hca.name);
            let out = output_within(c, Duration::from_secs(60))?;
            let text = String::from_utf8_lossy(&out.stdout);
            let summary = format!("fabric {}: 1 passed, 0 failed, 0 skipped", f.name);
            let skipped = format!("fabric {}: 0 passed, 0 failed, 1 skipped", f.name);
            if out.status.success() && text.contains(&summary) {
                passed += 1;
            } else if out.status.success() && text.contains(&skipped) {
                let why = text
                    .lines()
                    .find_map(|l| {
                        l.split_once("SKIPPED (")
                            .map(|(_, r)| r.trim_end_matches(')'))
                    })
                    .unwrap_or("no reason printed");
                skips.push(format!("at {}: {why}", hca.name));
            } else {
                fail!(
                    "at {} ({}): {}\n{text}{}",
                    hca.name,
                    out.status,
                    summary,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        if passed == 0 {
            return Ok(Outcome::Skipped(skips.join("; ")));
        }
        for s in &skips {
            println!("  skipped {s}");
        }
        Ok(Outcome::Passed)
    })())
}

/// A rate of PortInfo or the SA (IBA table 205's codes 2-10) in tenths of
/// Gb/s.
fn rate_code_tenths(code: u8) -> Option<u32> {
    Some(match code {
        2 => 25,
        3 => 100,
        4 => 300,
        5 => 50,
        6 => 200,
        7 => 400,
        8 => 600,
        9 => 800,
        10 => 1200,
        _ => return None,
    })
}

/// Joins the IPoIB broadcast group as a full member, as IPoIB does (MGID,
/// PortGID, JoinState), finds this port among its members, leaves, and
/// finds it gone; or, from a port slower than the group, is refused with
/// the SA's ERR_REQ_INVALID and stays out. From HCAs: OpenSM refuses a
/// switch's port 0 (its port capabilities do not meet the group's).
fn join_and_leave_the_ipoib_broadcast_group(f: &Fabric) -> TestResult {
    if let Some(r) = at_hcas(f, "sa_client::join_and_leave_the_ipoib_broadcast_group") {
        return r;
    }
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, _) = local_gid_and_lid(&port)?;
        let info = port.port().info()?;
        let my_rate = if info.rate == 2 { 25 } else { info.rate * 10 };
        let group = McMemberRecord {
            mgid: Gid(IPOIB_BROADCAST),
            ..McMemberRecord::default()
        };
        let groups = sa.get_table(&group, McMemberRecordMask::MGID).await?;
        let [g] = groups.as_slice() else {
            fail!("OpenSM's IPoIB broadcast group: {groups:?}");
        };
        let Some(group_rate) = rate_code_tenths(g.rate) else {
            fail!("the group's rate code {} is not a rate", g.rate);
        };
        let member = McMemberRecord {
            port_gid: me,
            join_state: JoinState::FULL_MEMBER,
            ..group
        };
        let mask = McMemberRecordMask::MGID
            | McMemberRecordMask::PORT_GID
            | McMemberRecordMask::JOIN_STATE;
        let before = members_with(&sa, me).await?;
        if my_rate < group_rate {
            return match sa.join_multicast(&member, mask).await {
                Err(e) if e.sa_status() == Some(SaStatusCode::ReqInvalid) => {
                    let after = members_with(&sa, me).await?;
                    if before != 0 || after != 0 {
                        fail!("refused, yet memberships {before} before and {after} after");
                    }
                    Ok(Outcome::Passed)
                }
                other => fail!(
                    "a port of {my_rate}/10 Gb/s joining a group of {group_rate}/10 Gb/s: {other:?}"
                ),
            };
        }
        let joined = sa.join_multicast(&member, mask).await?;
        if joined.mgid != member.mgid || joined.mlid != g.mlid || joined.qkey != g.qkey {
            fail!("the join answered {joined:?} for the group {g:?}");
        }
        let during = members_with(&sa, me).await?;
        let left = sa.leave_multicast(&member, mask).await?;
        if left.mgid != member.mgid {
            fail!("the leave answered {left:?}");
        }
        let after = members_with(&sa, me).await?;
        if before != 0 || during != 1 || after != 0 {
            fail!(
                "memberships: {before} before the join, {during} after it, {after} after the leave"
            );
        }
        Ok(Outcome::Passed)
    })
}

/// A subscription to trap 64 (GID in service) for every port, then its
/// unsubscription: each answered as the SA's copy of the request; in
/// between the SA lists it among our port's InformInfoRecords (its QPN 0:
/// the SA shows the subscriber's QPN only to a trusted request, C15-0.2-1.16,
/// and ours carries SM_Key 0), and after it no longer does.
///
/// An unsubscription the SA refuses as naming no subscription (OpenSM:
/// ERR_REQ_INVALID) is looked up again: if the SA no longer lists the
/// subscription, the SA dropped it on its own (OpenSM matches a
/// subscription by the whole source address of the MAD, and has refused
/// an unsubscription right after its subscription, rarely, under ibsim),
/// and the two are tried again, three times at most; if it still lists
/// it, the same request is sent again (its bytes are those of the first
/// but the TID) twice at most, and a refusal each time fails the test.
/// Each retry is printed.
fn subscribe_and_unsubscribe(_f: &Fabric) -> TestResult {
    runtime()?.block_on(async {
        let port = async_port()?;
        let (me, _) = local_gid_and_lid(&port)?;
        let sa = SaClient::new(&port)?;
        let inform = InformInfo {
            lid_range_begin: 0xffff,
            is_generic: true,
            subscribe: true,
            trap_type: 0xffff,
            trap_number: 64,
            producer_type: 0xff_ffff,
            ..InformInfo::default()
        };
        let off_req = InformInfo {
            subscribe: false,
            ..inform
        };
        for attempt in 1..=3 {
            let on = match sa.subscribe(&inform).await {
                Ok(on) => on,
                Err(e) => fail!("the subscription: {e}"),
            };
            if !on.subscribe || on.trap_number != 64 || !on.is_generic {
                fail!("the subscription answered {on:?}");
            }
            let held = subscriptions_of(&sa, me).await?;
            match held.as_slice() {
                [r] if r.inform_info.qpn == 0 && r.inform_info.lid_range_begin == 0xffff => {}
                _ => fail!("after the subscription the SA lists {held:?}"),
            }
            let mut refused = 0;
            let off = loop {
                match sa.subscribe(&off_req).await {
                    Ok(off) => break Some(off),
                    Err(e) if e.sa_status() == Some(SaStatusCode::ReqInvalid) => {
                        let still = subscriptions_of(&sa, me).await?;
                        if still.is_empty() {
                            println!(
                                "  attempt {attempt}: the unsubscription was refused ({e}) and the SA no longer lists the subscription: subscribing again"
                            );
                            break None;
                        }
                        refused += 1;
                        if refused == 3 {
                            fail!("the unsubscription was refused three times ({e}) while the SA lists {still:?}");
                        }
                        println!(
                            "  the unsubscription was refused ({e}) while the SA lists the subscription: the same request again"
                        );
                    }
                    Err(e) => fail!("the unsubscription (after {on:?} was answered): {e}"),
                }
            };
            let Some(off) = off else { continue };
            if off.subscribe || off.trap_number != 64 {
                fail!("the unsubscription answered {off:?}");
            }
            let left = subscriptions_of(&sa, me).await?;
            if !left.is_empty() {
                fail!("after the unsubscription the SA still lists {left:?}");
            }
            return Ok(Outcome::Passed);
        }
        fail!("the SA dropped the subscription before its unsubscription three times")
    })
}

/// The trap-64 subscriptions the SA lists for subscriber `me` (a GetTable
/// of InformInfoRecords by SubscriberGID; a record of another subscriber
/// in the answer fails).
async fn subscriptions_of(sa: &SaClient, me: Gid) -> Res<Vec<InformInfoRecord>> {
    let q = InformInfoRecord {
        subscriber_gid: me,
        ..InformInfoRecord::default()
    };
    let all = sa
        .get_table(&q, InformInfoRecordMask::SUBSCRIBER_GID)
        .await?;
    if let Some(r) = all.iter().find(|r| r.subscriber_gid != me) {
        fail!("a query of {me:?}'s InformInfoRecords answered {r:?}");
    }
    Ok(all
        .into_iter()
        .filter(|r| r.inform_info.is_generic && r.inform_info.trap_number == 64)
        .collect())
}

/// A Get of a NodeRecord for a LID that does not exist is the SA's "no
/// records" status, typed; a GetTable for it is an empty table; a path to
/// it is no records too.
fn sa_errors_are_typed(f: &Fabric) -> TestResult {
    let lids = f.lids()?;
    let nowhere = lids.iter().map(|&(_, l)| l).max().unwrap_or(0) + 50;
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let q = NodeRecord {
            lid: nowhere,
            ..NodeRecord::default()
        };
        match sa.get(&q, NodeRecordMask::LID).await {
            Err(e) if e.sa_status() == Some(SaStatusCode::NoRecords) && e.is_no_records() => {}
            other => fail!("a Get of LID {nowhere}'s NodeRecord gave {other:?}"),
        }
        let table = sa.get_table(&q, NodeRecordMask::LID).await?;
        if !table.is_empty() {
            fail!("a GetTable of LID {nowhere}'s NodeRecord gave {table:?}");
        }
        let paths = sa.paths_between_lids(f.sm_lid, nowhere).await;
        match paths {
            Ok(p) if p.is_empty() => {}
            Err(e) if e.sa_status().is_some() => {}
            other => fail!("a path to LID {nowhere} gave {other:?}"),
        }
        // The one that exists, by Get.
        let (_, lid) = lids[0];
        let r = sa
            .get(
                &NodeRecord {
                    lid,
                    ..NodeRecord::default()
                },
                NodeRecordMask::LID,
            )
            .await?;
        if r.lid != lid {
            fail!("the NodeRecord of LID {lid} is {r:?}");
        }
        Ok(Outcome::Passed)
    })
}

/// The (LID, port GUID) of each NodeRecord `saquery` (the C tool) gives,
/// one `saquery NodeRecord LID` per LID of the subnet (each answer one
/// record, one MAD).
fn saquery_node_records(f: &Fabric, lids: &[u16]) -> Res<BTreeSet<(u16, u64)>> {
    let mut set = BTreeSet::new();
    for &lid in lids {
        let mut c = f.command("saquery", None);
        c.args(["NodeRecord", &lid.to_string()]);
        let out = output_within(c, Duration::from_secs(20))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.trim().strip_prefix(name))
                .map(|v| v.trim_start_matches('.').to_string())
                .collect()
        };
        let (l, g) = (field("lid."), field("port_guid."));
        let ([l], [g], true) = (&l[..], &g[..], out.status.success()) else {
            fail!(
                "saquery NodeRecord {lid}: {}\n{text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let g = u64::from_str_radix(g.trim_start_matches("0x"), 16)?;
        set.insert((l.parse()?, g));
    }
    Ok(set)
}

/// Every NodeRecord by one GetTable from an `SaClient`, against what
/// `saquery` gives LID by LID: the same (LID, port GUID) set; or, where the
/// port carries one MAD of a longer RMPP transfer (ibsim simulates no
/// RMPP), the typed `SaError::Truncated`, its whole records among
/// saquery's and its count (when the SA sent a PayloadLength) theirs;
/// never fewer records as if they were the table. A Get per LID from the
/// same client gives saquery's set whole.
fn every_node_record_by_get_table(f: &Fabric) -> TestResult {
    let mut lids: Vec<u16> = f.lids()?.iter().map(|&(_, l)| l).collect();
    lids.sort_unstable();
    lids.dedup();
    let theirs = saquery_node_records(f, &lids)?;
    if theirs.len() != lids.len() || theirs.len() < 2 {
        fail!(
            "saquery: {} NodeRecords for LIDs {lids:?}: {theirs:?}",
            theirs.len()
        );
    }
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let key = |n: &NodeRecord| (n.lid, n.node_info.port_guid);
        match sa
            .get_table(&NodeRecord::default(), NodeRecordMask::empty())
            .await
        {
            Ok(table) => {
                let ours: BTreeSet<_> = table.iter().map(key).collect();
                if ours != theirs || table.len() != theirs.len() {
                    fail!(
                        "GetTable: {} NodeRecords {ours:?}, saquery {theirs:?}",
                        table.len()
                    );
                }
            }
            Err(umad::Error::Sa(SaError::Truncated { count, have })) => {
                if have >= theirs.len() || count.is_some_and(|n| n != theirs.len()) {
                    fail!(
                        "GetTable cut short: {have} records of {count:?}, saquery has {}",
                        theirs.len()
                    );
                }
                println!(
                    "  GetTable of {} NodeRecords cut short (no RMPP here): {have} arrived, \
                     count {count:?}",
                    theirs.len()
                );
            }
            Err(e) => fail!("GetTable of every NodeRecord: {e}"),
        }
        let mut ours = BTreeSet::new();
        for &lid in &lids {
            let q = NodeRecord {
                lid,
                ..NodeRecord::default()
            };
            ours.insert(key(&sa.get(&q, NodeRecordMask::LID).await?));
        }
        if ours != theirs {
            fail!("Get by LID: {ours:?}, saquery {theirs:?}");
        }
        Ok(Outcome::Passed)
    })
}

/// Queries dropped before their answer (a timeout of the caller's, a
/// cancelled select) leave no waiter behind: the same client then answers
/// a full round of queries.
fn dropped_queries_leave_nothing_behind(f: &Fabric) -> TestResult {
    let lids = f.lids()?;
    let sm = f.sm_lid;
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = Arc::new(SaClient::new(&port)?);
        for &(_, lid) in lids.iter().take(16) {
            let q = sa.paths_between_lids(sm, lid);
            // Polled once or not at all, then dropped.
            let _ = tokio::time::timeout(Duration::from_micros(1), q).await;
        }
        for &(_, lid) in lids.iter().take(16) {
            let paths = sa.paths_between_lids(sm, lid).await?;
            if paths.len() != 1 || paths[0].dlid != lid {
                fail!("after the dropped queries, LID {lid}: {paths:?}");
            }
        }
        Ok(Outcome::Passed)
    })
}

/// The median of `v`.
fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Times `n` PathRecord queries (SM LID to each LID) issued at once by the
/// client against the same queries issued one by one by `saquery -p
/// --src-to-dst` (one process each, as a script would), median of 5 each,
/// and prints the ratio. Each saquery answer is checked to name the path's
/// DLID, and each of ours too.
fn burst_against_saquery(f: &Fabric) -> TestResult {
    let lids: Vec<u16> = f.lids()?.iter().map(|&(_, l)| l).collect();
    let sm = f.sm_lid;
    let rt = runtime()?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = rt.block_on(async {
            let port = async_port()?;
            let sa = Arc::new(SaClient::new(&port)?);
            let start = Instant::now();
            let mut tasks = Vec::new();
            for &lid in &lids {
                let sa = sa.clone();
                tasks.push(tokio::spawn(async move {
                    SendRes::Ok((lid, sa.paths_between_lids(sm, lid).await?))
                }));
            }
            for t in tasks {
                let (lid, p) = t.await?.map_err(|e| e.to_string())?;
                if p.len() != 1 || p[0].dlid != lid {
                    fail!("LID {lid}: {p:?}");
                }
            }
            Res::Ok(start.elapsed())
        })?;
        ours.push(t);
        let start = Instant::now();
        for &lid in &lids {
            let mut c = f.command("saquery", None);
            c.args(["-p", "--src-to-dst", &format!("{sm}:{lid}")]);
            let out = output_within(c, Duration::from_secs(20))?;
            let text = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() || !text.contains(&format!("dlid....................{lid}")) {
                fail!(
                    "saquery -p --src-to-dst {sm}:{lid}: {}\n{text}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        theirs.push(start.elapsed());
    }
    let (o, t) = (median(ours), median(theirs));
    println!(
        "  {} PathRecord queries: SaClient burst {:.1} ms, saquery one by one {:.1} ms \
         (median of 5): ratio {:.3}",
        lids.len(),
        o.as_secs_f64() * 1e3,
        t.as_secs_f64() * 1e3,
        o.as_secs_f64() / t.as_secs_f64()
    );
    Ok(Outcome::Passed)
}
