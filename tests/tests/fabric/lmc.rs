//! The LID Mask Control, as the SM's clients see it, with `RDMA_FABRIC_LMC`
//! (which `ci/fabric.sh` gives the SM, OpenSM or ours, as its `-l`); skipped
//! without it. The same checks pass under OpenSM and under ours:
//!
//! - each sampled HCA port holds LMC and a base LID aligned to 2^LMC
//!   (`smpquery portinfo`), and each of its 2^LMC LIDs is routed to it
//!   from every other sampled HCA (`ibtracert` ends at its port);
//! - the LIDs of an HCA on another leaf leave the source's leaf on more
//!   than one link: the routes of one port's LIDs part;
//! - PathRecords between two ports come one per pair of their LIDs, those
//!   of equal offsets first with Preference 0, then the rest with
//!   Preference 2; a Get gives the pair of base LIDs; any LID of a range
//!   names its port.

use std::collections::BTreeSet;

use rdma::mad::sa::{PathRecord, PathRecordMask};
use rdma::umad::SaClient;
use rdma::Gid;
use rdma_tests::fabric::{Fabric, FabricTest};
use rdma_tests::{check, fail, Outcome, TestResult};

use crate::sa_client::{async_port, local_gid_and_lid, runtime};
use crate::sm::{lids_by_kind, sample, sm_name, switch_hops, tool};

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "lmc::every_lid_of_an_hca_is_routed_to_it_on_links_that_part",
        run: every_lid_of_an_hca_is_routed_to_it,
    },
    FabricTest {
        name: "lmc::path_records_come_one_per_pair_of_lids_preferred_first",
        run: path_records_come_one_per_pair_of_lids,
    },
];

/// The LMC of the run (`RDMA_FABRIC_LMC`), or the reason the test skips.
fn lmc(f: &Fabric) -> Result<u8, TestResult> {
    let skip = |why: String| Err(Ok(Outcome::Skipped(why)));
    let Ok(v) = std::env::var("RDMA_FABRIC_LMC") else {
        return skip("RDMA_FABRIC_LMC runs it (the SM gets it as -l)".into());
    };
    match v.parse::<u8>() {
        Ok(l @ 1..=7) => Ok(l),
        _ => skip(format!(
            "RDMA_FABRIC_LMC={v} on {}: an LMC of 1-7 runs it",
            f.name
        )),
    }
}

/// The value of a `Name:.....value` line of `smpquery`'s output.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim_start_matches('.').trim())
}

/// Up to 4 HCAs over the fabric (first, last and between, by LID: on
/// fattree on different leaves): each holds LMC and an aligned base, and
/// `ibtracert` from each to every LID of each other ends at the other's
/// port. Where a route leaves the source's leaf for another switch, the
/// 2^LMC LIDs of one destination leave it on at least two links.
fn every_lid_of_an_hca_is_routed_to_it(f: &Fabric) -> TestResult {
    let lmc = match lmc(f) {
        Ok(l) => l,
        Err(skip) => return skip,
    };
    let n = 1u16 << lmc;
    let (_, cas) = lids_by_kind(f)?;
    let hcas = sample(&cas, 4);
    for &base in &hcas {
        let pi = tool(f, &["smpquery", "portinfo", &base.to_string(), "1"])?;
        let have = field(&pi, "LMC");
        check!(
            have == Some(&lmc.to_string()) && base % n == 0,
            "HCA LID {base} under {}: LMC {have:?}, not {lmc}, or a base off a block of {n}",
            sm_name()
        );
    }
    let mut parted = 0;
    for &a in &hcas {
        for &b in &hcas {
            if a == b {
                continue;
            }
            let mut first_links = BTreeSet::new();
            let mut far = false;
            for lid in b..b + n {
                let trace = tool(f, &["ibtracert", &a.to_string(), &lid.to_string()])?;
                let end = format!("lid {b}-{}", b + n - 1);
                let last = trace.lines().rev().find(|l| !l.trim().is_empty());
                check!(
                    last.is_some_and(|l| l.starts_with("To ca") && l.contains(&end)),
                    "LID {a} to LID {lid} under {}: the trace does not end at the port of LIDs {b}-{}:\n{trace}",
                    sm_name(),
                    b + n - 1
                );
                let hops = switch_hops(&trace);
                if let Some(first) = hops.first() {
                    far = true;
                    first_links.insert(first.clone());
                }
            }
            if far {
                check!(
                    first_links.len() > 1,
                    "the {n} LIDs of {b} from {a} under {}: all on one link out of the first switch, {first_links:?}",
                    sm_name()
                );
                parted += 1;
            }
        }
    }
    if parted == 0 {
        fail!(
            "no pair of the HCAs {hcas:?} on {} is a switch hop apart",
            f.name
        );
    }
    Ok(Outcome::Passed)
}

/// From this port to the last HCA (another leaf): GetTable with NumbPath
/// 2 (ibsim carries no RMPP, and of one MAD's records the first two whole,
/// under either SM: C `saquery -n 3` shows the third zeroed) gives the
/// pairs of equal offsets from the base LIDs, Preference 0; from the last
/// LID of this port's range, its pair with the destination's base (0) then
/// with the next (2); a Get gives the base pair; a path between two LIDs
/// inside the ranges is that path.
fn path_records_come_one_per_pair_of_lids(f: &Fabric) -> TestResult {
    let lmc = match lmc(f) {
        Ok(l) => l,
        Err(skip) => return skip,
    };
    let n = 1u16 << lmc;
    let (_, cas) = lids_by_kind(f)?;
    let by_lid: std::collections::HashMap<u16, u64> =
        f.lids()?.into_iter().map(|(g, l)| (l, g)).collect();
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        let (me, my_lid) = local_gid_and_lid(&port)?;
        let Some(&d) = cas.iter().rev().find(|&&l| l != my_lid) else {
            fail!("no HCA but this port's LID {my_lid}");
        };
        let dgid = Gid::from_parts(me.subnet_prefix(), by_lid[&d]);
        let lids = |v: &[PathRecord]| -> Vec<(u16, u16, u8)> {
            v.iter().map(|p| (p.slid, p.dlid, p.preference)).collect()
        };
        let two = PathRecord {
            sgid: me,
            dgid,
            numb_path: 2,
            ..PathRecord::default()
        };
        let m = PathRecordMask::SGID | PathRecordMask::DGID | PathRecordMask::NUMB_PATH;
        let got = lids(&sa.get_table(&two, m).await?);
        let want: Vec<_> = (0..2).map(|i| (my_lid + i, d + i, 0)).collect();
        check!(
            got == want,
            "{} paths {my_lid} to {d} (LMC {lmc}), NumbPath 2: {got:?}, not {want:?}",
            sm_name()
        );
        let from_last = PathRecord {
            slid: my_lid + n - 1,
            ..two
        };
        let m2 = PathRecordMask::SLID | PathRecordMask::DGID | PathRecordMask::NUMB_PATH;
        let got = lids(&sa.get_table(&from_last, m2).await?);
        let last = my_lid + n - 1;
        let want = vec![(last, d, 0), (last, d + 1, 2)];
        check!(
            got == want,
            "{} paths from LID {last} to {d}'s port: {got:?}, not {want:?}",
            sm_name()
        );
        let one = sa
            .get(
                &PathRecord {
                    numb_path: 0,
                    ..two
                },
                PathRecordMask::SGID | PathRecordMask::DGID,
            )
            .await?;
        check!(
            (one.slid, one.dlid, one.dgid) == (my_lid, d, dgid),
            "{} Get {my_lid} to {d}: {one:?}",
            sm_name()
        );
        let inside = sa.paths_between_lids(my_lid + 1, d + n - 1).await?;
        check!(
            matches!(inside.as_slice(), [p] if p.slid == my_lid + 1 && p.dlid == d + n - 1 && p.dgid == dgid),
            "{} path LID {} to {}: {inside:?}",
            sm_name(),
            my_lid + 1,
            d + n - 1
        );
        Ok(Outcome::Passed)
    })
}
