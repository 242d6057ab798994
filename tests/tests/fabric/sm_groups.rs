//! Multicast groups our SA client makes and leaves, as the SM keeps them:
//! a group joined is listed by the C `saquery -g` and is gone after its
//! last member left; a group's MLID goes to the next new group; thousands
//! of groups made and left one after another never run out of MLIDs.
//! Under OpenSM and ours alike.

use rdma::mad::sa::{JoinState, McMemberRecord, McMemberRecordMask};
use rdma::umad::SaClient;
use rdma::Gid;
use rdma_tests::fabric::{Fabric, FabricTest, NodeKind};
use rdma_tests::{check, fail, Outcome, TestResult};

use crate::sa_client::{async_port, at_hcas, local_gid_and_lid, runtime};
use crate::sm::{sm_name, tool};

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "sm_groups::saquery_sees_a_group_our_client_joined",
        run: saquery_sees_a_group_our_client_joined,
    },
    FabricTest {
        name: "sm_groups::a_group_left_gives_its_mlid_to_the_next_group",
        run: a_group_left_gives_its_mlid_to_the_next_group,
    },
    FabricTest {
        name: "sm_groups::thousands_of_groups_made_and_left_leave_no_group_behind",
        run: thousands_of_groups_made_and_left_leave_no_group_behind,
    },
];

/// A group of our own (a full member creates it with its Q_Key, P_Key,
/// SL, FlowLabel and TClass), from an HCA: `saquery -g` lists its MGID
/// while we are a member and not after we leave.
fn saquery_sees_a_group_our_client_joined(f: &Fabric) -> TestResult {
    if let Some(r) = at_hcas(f, "sm_groups::saquery_sees_a_group_our_client_joined") {
        return r;
    }
    if f.attached().kind != NodeKind::Hca {
        fail!("not at an HCA");
    }
    let rt = runtime()?;
    rt.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, lid) = local_gid_and_lid(&port)?;
        let mgid = group_mgid(0x1234, lid);
        let member = full_member(mgid, me);
        let joined = sa.join_multicast(&member, CREATE).await?;
        let shown = Gid(mgid).to_ipv6().to_string();
        let during = tool(f, &["saquery", "-g"])?;
        sa.leave_multicast(&member, LEAVE).await?;
        let after = tool(f, &["saquery", "-g"])?;
        let line = format!("MGID....................{shown}\n");
        check!(
            joined.mlid >= 0xc000 && during.contains(&line) && !after.contains(&line),
            "group {shown} (MLID {:#x}) under {}: saquery -g while a member:\n{during}\nafter leaving:\n{after}",
            joined.mlid,
            sm_name()
        );
        Ok(Outcome::Passed)
    })
}

/// A group of the tests' own, per attachment point (`lid`): `tag` in its
/// MGID tells the tests' groups apart. Not an IPoIB MGID (signature 0x401b
/// or 0x601b), whose Q_Key OpenSM holds to the broadcast group's.
fn group_mgid(tag: u16, lid: u16) -> [u8; 16] {
    let mut mgid = [0xff, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    mgid[2..4].copy_from_slice(&tag.to_be_bytes());
    mgid[14..].copy_from_slice(&lid.to_be_bytes());
    mgid
}

/// The record of a full member `me` of the group `mgid`, with what a join
/// that creates the group names ([`CREATE`]).
pub(crate) fn full_member(mgid: [u8; 16], me: Gid) -> McMemberRecord {
    McMemberRecord {
        mgid: Gid(mgid),
        port_gid: me,
        qkey: 0x1234,
        pkey: 0xffff,
        sl: 0,
        flow_label: 0,
        tclass: 0,
        rate: 2,
        mtu: 4,
        join_state: JoinState::FULL_MEMBER,
        ..McMemberRecord::default()
    }
}

/// The components of a join that may create its group.
pub(crate) const CREATE: McMemberRecordMask = McMemberRecordMask::MGID
    .union(McMemberRecordMask::PORT_GID)
    .union(McMemberRecordMask::QKEY)
    .union(McMemberRecordMask::PKEY)
    .union(McMemberRecordMask::SL)
    .union(McMemberRecordMask::FLOW_LABEL)
    .union(McMemberRecordMask::TCLASS)
    .union(McMemberRecordMask::JOIN_STATE);

/// The components of a leave.
pub(crate) const LEAVE: McMemberRecordMask = McMemberRecordMask::MGID
    .union(McMemberRecordMask::PORT_GID)
    .union(McMemberRecordMask::JOIN_STATE);

/// A group's MLID is free once its last member left: the next new group
/// gets it, so that groups made and left without end never run out of
/// MLIDs, nor of the switches' multicast tables (1,024 under ibsim).
fn a_group_left_gives_its_mlid_to_the_next_group(f: &Fabric) -> TestResult {
    if let Some(r) = at_hcas(
        f,
        "sm_groups::a_group_left_gives_its_mlid_to_the_next_group",
    ) {
        return r;
    }
    let rt = runtime()?;
    rt.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, lid) = local_gid_and_lid(&port)?;
        let mut mlids = Vec::new();
        for tag in [0x1235, 0x1236, 0x1237] {
            let member = full_member(group_mgid(tag, lid), me);
            let joined = sa.join_multicast(&member, CREATE).await?;
            sa.leave_multicast(&member, LEAVE).await?;
            mlids.push(joined.mlid);
        }
        check!(
            mlids.iter().all(|&m| m == mlids[0] && m >= 0xc000),
            "three groups made and left in turn under {} got MLIDs {:x?}",
            sm_name(),
            mlids
        );
        Ok(Outcome::Passed)
    })
}

/// The tags of the churn's groups: 0x2000 and up, none of the other tests'.
fn churn_tag(i: u32) -> u16 {
    0x2000 + (i % CHURN_TAGS) as u16
}
const CHURN_TAGS: u32 = 0x4000;

/// Group churn: 5,000 groups (RDMA_FABRIC_GROUP_CYCLES), each made by a
/// join and deleted by the leave of its only member, one after another.
/// Every join succeeds with an MLID of the first few (the MLIDs of the
/// groups left are reused: the switches' multicast tables, 1,024 entries
/// under ibsim, are not exhausted), and afterwards the SA knows none of the
/// groups. Runs where the test process is an HCA (the fabrics whose first
/// node is one); a fabric whose first node is a switch skips it.
fn thousands_of_groups_made_and_left_leave_no_group_behind(f: &Fabric) -> TestResult {
    if f.attached().kind != NodeKind::Hca {
        return Ok(Outcome::Skipped(format!(
            "the test process is switch {} here; the churn runs on the fabrics whose first node is an HCA",
            f.attached().name
        )));
    }
    let cycles: u32 = match std::env::var("RDMA_FABRIC_GROUP_CYCLES") {
        Ok(v) => v
            .parse()
            .map_err(|e| format!("RDMA_FABRIC_GROUP_CYCLES={v}: {e}"))?,
        Err(_) => 5000,
    };
    let rt = runtime()?;
    let (lowest, highest, lid) = rt.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, lid) = local_gid_and_lid(&port)?;
        let (mut lowest, mut highest) = (u16::MAX, 0u16);
        for i in 0..cycles {
            let member = full_member(group_mgid(churn_tag(i), lid), me);
            let joined = match sa.join_multicast(&member, CREATE).await {
                Ok(j) => j,
                Err(e) => fail!("join {i} of {cycles} under {}: {e}", sm_name()),
            };
            if let Err(e) = sa.leave_multicast(&member, LEAVE).await {
                fail!("leave {i} of {cycles} under {}: {e}", sm_name());
            }
            lowest = lowest.min(joined.mlid);
            highest = highest.max(joined.mlid);
        }
        Ok::<_, Box<dyn std::error::Error>>((lowest, highest, lid))
    })?;
    check!(
        lowest >= 0xc000 && highest < 0xc000 + 16,
        "{cycles} groups made and left in turn under {} got MLIDs {lowest:#x}..={highest:#x}",
        sm_name()
    );
    // No group of ours (ff12:TAG:0:...:LID) is left in the SA.
    let groups = tool(f, &["saquery", "-g"])?;
    let tags = churn_tag(0)..=churn_tag(cycles.min(CHURN_TAGS) - 1);
    let left: Vec<&str> = groups
        .lines()
        .filter_map(|l| l.trim().strip_prefix("MGID"))
        .map(|l| l.trim_start_matches('.'))
        .filter(|m| {
            m.parse::<std::net::Ipv6Addr>()
                .is_ok_and(|a| tags.contains(&a.segments()[1]) && a.segments()[7] == lid)
        })
        .collect();
    check!(left.is_empty(), "groups of ours left in the SA: {left:?}");
    println!("  {cycles} groups made and left, MLIDs {lowest:#x}..={highest:#x}");
    Ok(Outcome::Passed)
}
