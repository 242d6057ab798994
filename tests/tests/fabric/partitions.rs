//! Partitions, as the SM's clients see them, under the partitions file of
//! `ci/partitions-2sw2path4hca.conf` (`RDMA_FABRIC_PCONFIG`, which
//! `ci/fabric.sh` gives the SM, OpenSM or ours, as its `-P`), on
//! 2sw2path4hca; skipped without it. The same checks pass under OpenSM
//! and under ours:
//!
//! - each HCA port's P_Key table (`smpquery pkeys`) holds the P_Keys the
//!   file gives it, with their membership;
//! - `saquery -p` between two HCAs gets a PathRecord with a P_Key they
//!   share, and none between HCAs that share no partition (the default
//!   partition has them limited, so they do not share it);
//! - `saquery PKTR` gives the same tables, by LID, port and block, and
//!   the SM's port full in the default partition;
//! - the broadcast group of the partition with the `ipoib` flag exists
//!   (`saquery -g` from one of its members), and none of the other.

use std::collections::BTreeSet;

use rdma_tests::fabric::{output_within, Fabric, FabricTest};
use rdma_tests::{check, fail, Outcome, TestResult};

use crate::sm::tool;

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "partitions::hca_pkey_tables_hold_the_configured_keys",
        run: hca_pkey_tables_hold_the_configured_keys,
    },
    FabricTest {
        name: "partitions::path_records_only_within_a_shared_partition",
        run: path_records_only_within_a_shared_partition,
    },
    FabricTest {
        name: "partitions::pkey_table_records_list_the_tables",
        run: pkey_table_records_list_the_tables,
    },
    FabricTest {
        name: "partitions::the_ipoib_partitions_broadcast_group_exists",
        run: the_ipoib_partitions_broadcast_group_exists,
    },
];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// What `ci/partitions-2sw2path4hca.conf` gives each HCA port (by port
/// GUID): its P_Keys, with the membership bit (0x8000: full).
const TABLES: &[(u64, &[u16])] = &[
    (0x100001, &[0x7fff, 0x8001]),
    (0x100004, &[0x7fff, 0x0001, 0x0002]),
    (0x100007, &[0x7fff, 0x8002]),
    (0x10000a, &[0x7fff, 0x8002]),
];

/// The P_Key two ports share (held by both, one a full member), without
/// the membership bit; none if they share none.
fn shared(a: &[u16], b: &[u16]) -> BTreeSet<u16> {
    a.iter()
        .filter(|&&ka| {
            b.iter()
                .any(|&kb| ka & 0x7fff == kb & 0x7fff && (ka | kb) & 0x8000 != 0)
        })
        .map(|k| k & 0x7fff)
        .collect()
}

/// Skipped without the partitions file, or on another topology (the
/// file names 2sw2path4hca's GUIDs).
fn gated(f: &Fabric) -> Option<TestResult> {
    let conf = std::env::var("RDMA_FABRIC_PCONFIG").unwrap_or_default();
    if !conf.ends_with("partitions-2sw2path4hca.conf") {
        return Some(Ok(Outcome::Skipped(
            "RDMA_FABRIC_PCONFIG=ci/partitions-2sw2path4hca.conf runs it (the SM gets it as -P)"
                .into(),
        )));
    }
    (!f.name.starts_with("2sw2path4hca")).then(|| {
        Ok(Outcome::Skipped(format!(
            "the partitions file names 2sw2path4hca's port GUIDs, not {}'s",
            f.name
        )))
    })
}

/// The LID of each HCA port of [`TABLES`], in its order.
fn hca_lids(f: &Fabric) -> Res<Vec<u16>> {
    let lids = f.lids()?;
    TABLES
        .iter()
        .map(|(guid, _)| {
            lids.iter()
                .find(|(g, _)| g == guid)
                .map(|&(_, l)| l)
                .ok_or_else(|| format!("no LID for port {guid:#x}: {lids:x?}").into())
        })
        .collect()
}

/// The non-zero P_Keys of a table as `smpquery pkeys` or `saquery PKTR`
/// print it (`0x....` words after each `N:` index, or after `PKey
/// Table:`).
fn pkeys_in(text: &str) -> BTreeSet<u16> {
    text.split_whitespace()
        .filter_map(|w| w.strip_prefix("0x"))
        .filter(|h| h.len() == 4)
        .filter_map(|h| u16::from_str_radix(h, 16).ok())
        .filter(|&k| k & 0x7fff != 0)
        .collect()
}

fn hca_pkey_tables_hold_the_configured_keys(f: &Fabric) -> TestResult {
    if let Some(r) = gated(f) {
        return r;
    }
    for ((guid, want), lid) in TABLES.iter().zip(hca_lids(f)?) {
        let text = tool(f, &["smpquery", "pkeys", &lid.to_string(), "1"])?;
        let table: String = text
            .lines()
            .filter(|l| {
                l.trim_start()
                    .split(':')
                    .next()
                    .is_some_and(|i| i.trim().parse::<u32>().is_ok())
            })
            .collect::<Vec<_>>()
            .join(" ");
        let have = pkeys_in(&table);
        let want: BTreeSet<u16> = want.iter().copied().collect();
        check!(
            have == want,
            "port {guid:#x} (LID {lid}): P_Keys {have:04x?}, the file gives {want:04x?}:\n{text}"
        );
    }
    Ok(Outcome::Passed)
}

fn path_records_only_within_a_shared_partition(f: &Fabric) -> TestResult {
    if let Some(r) = gated(f) {
        return r;
    }
    let lids = hca_lids(f)?;
    let (mut with, mut without) = (0, 0);
    for (i, (ga, ta)) in TABLES.iter().enumerate() {
        for (j, (gb, tb)) in TABLES.iter().enumerate() {
            if i == j {
                continue;
            }
            let (a, b) = (lids[i], lids[j]);
            let mut c = f.command("saquery", None);
            c.args(["-p", "--src-to-dst", &format!("{a}:{b}")]);
            let out = output_within(c, std::time::Duration::from_secs(60))?;
            let text = String::from_utf8_lossy(&out.stdout);
            let got: BTreeSet<u16> = text
                .lines()
                .filter(|l| l.trim_start().starts_with("pkey"))
                .filter_map(|l| l.rsplit('.').next())
                .filter_map(|v| u16::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok())
                .map(|k| k & 0x7fff)
                .collect();
            let want = shared(ta, tb);
            if want.is_empty() {
                without += 1;
                check!(
                    got.is_empty() && !text.contains("PathRecord dump"),
                    "{ga:#x} to {gb:#x} share no partition, yet a path:\n{text}"
                );
            } else {
                with += 1;
                check!(
                    got.len() == 1 && got.is_subset(&want),
                    "{ga:#x} to {gb:#x}: P_Keys {got:04x?} of the path, shared {want:04x?}:\n{text}{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    check!(
        with > 0 && without > 0,
        "{with} pairs share a partition, {without} do not"
    );
    Ok(Outcome::Passed)
}

/// The SM_Key the P_KeyTableRecord queries carry: both SMs' default (OpenSM
/// answers P_KeyTableRecord only to a requester with its SM_Key).
const SM_KEY: &str = "1";

fn pkey_table_records_list_the_tables(f: &Fabric) -> TestResult {
    if let Some(r) = gated(f) {
        return r;
    }
    for ((guid, want), lid) in TABLES.iter().zip(hca_lids(f)?) {
        let text = tool(
            f,
            &["saquery", "--smkey", SM_KEY, "PKTR", &format!("{lid}/1/0")],
        )?;
        let recs = text.matches("PKeyTableRecord dump:").count();
        let have = pkeys_in(text.split_once("PKey Table:").map_or("", |(_, t)| t));
        let want: BTreeSet<u16> = want.iter().copied().collect();
        check!(
            recs == 1 && have == want,
            "saquery PKTR {lid}/1/0 (port {guid:#x}): {recs} records, P_Keys {have:04x?}, \
             the file gives {want:04x?}:\n{text}"
        );
    }
    // The SM's port (Switch1's port 0, LID of the SM): the default
    // partition, full. (A whole table is more than one MAD, which the
    // kernel's RMPP of our SA cannot send under umad2sim.)
    let lid = f.sm_lid.to_string();
    let text = tool(
        f,
        &["saquery", "--smkey", SM_KEY, "PKTR", &format!("{lid}/0/0")],
    )?;
    let have = pkeys_in(text.split_once("PKey Table:").map_or("", |(_, t)| t));
    check!(
        have.contains(&0xffff),
        "saquery PKTR {lid}/0/0 (the SM's port): P_Keys {have:04x?}:\n{text}"
    );
    Ok(Outcome::Passed)
}

fn the_ipoib_partitions_broadcast_group_exists(f: &Fabric) -> TestResult {
    if let Some(r) = gated(f) {
        return r;
    }
    // From Hca1, a member of the partition: the SA lists the groups of
    // the requester's partitions.
    let mut c = f.command("saquery", Some("Hca1"));
    c.arg("-g");
    let out = output_within(c, std::time::Duration::from_secs(60))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.contains("ff12:401b:8001::ffff:ffff") {
        fail!("no IPoIB broadcast group of partition 0x0001 (ff12:401b:8001::ffff:ffff):\n{text}");
    }
    check!(
        !text.contains("ff12:401b:8002::ffff:ffff"),
        "a broadcast group of partition 0x0002, which has no ipoib flag:\n{text}"
    );
    Ok(Outcome::Passed)
}
