//! PathRecords with the MTU, rate and packet-lifetime selectors (greater
//! than, less than, exactly, the best), asked with `rdma`'s SA client by
//! SubnAdmGet between pairs of HCAs (on the ring: links of 2.5 to 40 Gb/s),
//! under OpenSM and under ours.
//!
//! Under each SM every answer meets its selector (a path of a greater MTU
//! or rate than asked, a smaller one, the one asked, or the path's best),
//! and a selector above what the path has (greater than or exactly an MTU
//! or rate the path does not reach) gets ERR_NO_RECORDS. Under OpenSM the
//! answers (status, MTU, rate, packet lifetime; the HCAs by name) are kept
//! in the fabric's work folder (`sa-paths/NAME.opensm`); under ours each
//! must be the same, so the suite runs OpenSM first (its default order),
//! else the comparison is skipped with the reason.

use std::collections::BTreeMap;

use rdma::mad::sa::{PathRecord, PathRecordMask, SaStatusCode, Selector};
use rdma::umad::{Error as UmadError, SaClient};

use rdma_tests::fabric::{Fabric, FabricTest, NodeKind};
use rdma_tests::{check, fail, Outcome, TestResult};

use crate::sa_client::{async_port, runtime};
use crate::sa_records::{against_opensm, Against};
use crate::sm::{sm_name, tool};

pub const TESTS: &[FabricTest] = &[FabricTest {
    name: "sa_paths::selectors_are_met_and_answered_as_opensm_answers_them",
    run: selectors_are_met_and_answered_as_opensm_answers_them,
}];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The selectable fields of a PathRecord.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Mtu,
    Rate,
    Life,
}

impl Field {
    /// The values asked of each selector: MTU codes 256 to 4096 bytes;
    /// rates 2.5, 10, 30, 5, 20, 40 and 120 Gb/s (codes out of order of
    /// speed); packet lifetimes about OpenSM's default (18).
    fn values(self) -> &'static [u8] {
        match self {
            Field::Mtu => &[1, 3, 4, 5],
            Field::Rate => &[2, 3, 4, 5, 6, 7, 10],
            Field::Life => &[0, 17, 18, 19],
        }
    }
    fn of(self, p: &PathRecord) -> u8 {
        match self {
            Field::Mtu => p.mtu,
            Field::Rate => p.rate,
            Field::Life => p.packet_life_time,
        }
    }
    /// A value's rank: the rate in Gb/s (times 10), else the code.
    fn rank(self, v: u8) -> Option<u32> {
        match self {
            Field::Rate => rate_tenths(v),
            _ => Some(u32::from(v)),
        }
    }
    /// The query of `slid` to `dlid` with `sel` and `v` on this field.
    fn query(self, slid: u16, dlid: u16, sel: Selector, v: u8) -> (PathRecord, PathRecordMask) {
        let mut q = PathRecord {
            slid,
            dlid,
            ..PathRecord::default()
        };
        let mask = PathRecordMask::SLID
            | PathRecordMask::DLID
            | match self {
                Field::Mtu => {
                    (q.mtu_selector, q.mtu) = (sel, v);
                    PathRecordMask::MTU_SELECTOR | PathRecordMask::MTU
                }
                Field::Rate => {
                    (q.rate_selector, q.rate) = (sel, v);
                    PathRecordMask::RATE_SELECTOR | PathRecordMask::RATE
                }
                Field::Life => {
                    (q.packet_life_time_selector, q.packet_life_time) = (sel, v);
                    PathRecordMask::PACKET_LIFE_TIME_SELECTOR | PathRecordMask::PACKET_LIFE_TIME
                }
            };
        (q, mask)
    }
}

/// A rate code of the SA (IBA table 205 and its extensions, codes 2-22)
/// in tenths of Gb/s: an SM that lowers a rate to meet a less-than
/// selector may answer any of them (OpenSM answers 14 Gb/s, code 11, for
/// less than 20 Gb/s).
fn rate_tenths(code: u8) -> Option<u32> {
    const TENTHS: [u32; 21] = [
        25, 100, 300, 50, 200, 400, 600, 800, 1200, 140, 560, 1120, 1680, 250, 1000, 2000, 3000,
        280, 500, 4000, 6000,
    ];
    TENTHS.get(usize::from(code).checked_sub(2)?).copied()
}

/// An answer: the path's MTU, rate and lifetime, or the SA's status.
type Answer = Result<PathRecord, Option<SaStatusCode>>;

async fn ask(sa: &SaClient, q: &PathRecord, mask: PathRecordMask) -> Res<Answer> {
    match sa.get(q, mask).await {
        Ok(p) => Ok(Ok(p)),
        Err(UmadError::Sa(e)) if e.code().is_some() => Ok(Err(e.code())),
        Err(e) => Err(e.into()),
    }
}

fn shown(a: &Answer) -> String {
    match a {
        Ok(p) => format!(
            "mtu {} rate {} lifetime {}",
            p.mtu, p.rate, p.packet_life_time
        ),
        Err(code) => format!("status {code:?}"),
    }
}

/// Why `got` does not meet the query (`sel` and `v` on `field`) of a path
/// whose answer without a selector was `plain`; `None` when it does.
fn unmet(field: Field, sel: Selector, v: u8, plain: &PathRecord, got: &Answer) -> Option<String> {
    let (have, want) = (field.rank(field.of(plain)), field.rank(v));
    // A path gives no more MTU or rate than it has.
    let beyond = field != Field::Life
        && match sel {
            Selector::GreaterThan => have <= want,
            Selector::Exactly => have < want,
            _ => false,
        };
    match got {
        Ok(p) => {
            let r = field.rank(field.of(p));
            let met = r.is_some()
                && match sel {
                    Selector::GreaterThan => r > want,
                    Selector::LessThan => r < want,
                    Selector::Exactly => r == want,
                    Selector::Best => field.of(p) == field.of(plain),
                };
            if !met {
                Some(format!("{} does not meet {sel:?} {v}", shown(got)))
            } else {
                beyond.then(|| {
                    format!(
                        "{} though the path has {} (ERR_NO_RECORDS expected)",
                        shown(got),
                        field.of(plain)
                    )
                })
            }
        }
        Err(Some(SaStatusCode::NoRecords)) if sel == Selector::Best => {
            Some("ERR_NO_RECORDS for the best the path has".into())
        }
        Err(Some(SaStatusCode::NoRecords)) => None,
        Err(code) => Some(format!("status {code:?}, not a path or ERR_NO_RECORDS")),
    }
}

/// The pairs of HCAs asked about: the first with itself (a loopback path,
/// lifetime 0 under OpenSM), then pairs of the first four and the last.
fn pairs(hcas: &[String]) -> Vec<(String, String)> {
    let n = hcas.len();
    let ix: &[(usize, usize)] = &[
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 2),
        (1, 3),
        (2, 3),
        (0, 99),
        (3, 99),
    ];
    let mut v: Vec<(String, String)> = ix
        .iter()
        .map(|&(a, b)| (hcas[a.min(n - 1)].clone(), hcas[b.min(n - 1)].clone()))
        .collect();
    v.dedup();
    v
}

/// Each HCA's LID by its name, from one `ibnetdiscover`: a CA's header
/// line names it (`Ca 1 "H-..." # "hca-3-3"`), its port line gives its
/// LID (`[1](10001f) "S-..."[6] # lid 22 lmc 0 ...`).
fn hca_lids(f: &Fabric) -> Res<BTreeMap<String, u16>> {
    let text = tool(f, &["ibnetdiscover"])?;
    let mut out = BTreeMap::new();
    let mut name: Option<String> = None;
    for l in text.lines() {
        if l.starts_with("Ca") {
            name = l.rsplit('"').nth(1).map(str::to_owned);
        } else if let (Some(n), Some((_, rest))) = (&name, l.split_once("# lid ")) {
            let lid = rest.split_whitespace().next().unwrap_or("").parse()?;
            out.insert(n.clone(), lid);
            name = None;
        }
    }
    Ok(out)
}

fn selectors_are_met_and_answered_as_opensm_answers_them(f: &Fabric) -> TestResult {
    let hcas: Vec<String> = f
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Hca)
        .map(|n| n.name.clone())
        .collect();
    if hcas.len() < 2 {
        return Ok(Outcome::Skipped("fewer than 2 HCAs".into()));
    }
    if std::env::var_os("RDMA_FABRIC_PCONFIG").is_some() {
        return Ok(Outcome::Skipped(
            "under a partitions file (RDMA_FABRIC_PCONFIG) not every pair has a path; \
             the selectors are compared in the default partition"
                .into(),
        ));
    }
    let lids = hca_lids(f)?;
    let lid = |name: &str| -> Res<u16> {
        lids.get(name)
            .copied()
            .ok_or_else(|| format!("no LID for {name} under {}", sm_name()).into())
    };
    let sels = [
        Selector::GreaterThan,
        Selector::LessThan,
        Selector::Exactly,
        Selector::Best,
    ];
    let mut lines = Vec::new();
    let mut faults = Vec::new();
    let (mut paths, mut none) = (0, 0);
    runtime()?.block_on(async {
        let port = async_port()?;
        let sa = SaClient::new(&port)?;
        for (a, b) in pairs(&hcas) {
            let (sl, dl) = (lid(&a)?, lid(&b)?);
            let plain = PathRecord {
                slid: sl,
                dlid: dl,
                ..PathRecord::default()
            };
            let plain = match ask(&sa, &plain, PathRecordMask::SLID | PathRecordMask::DLID).await? {
                Ok(p) => p,
                Err(code) => fail!("{a} to {b} under {}: status {code:?}, no path", sm_name()),
            };
            lines.push(format!("{a} -> {b}: {}", shown(&Ok(plain))));
            for field in [Field::Mtu, Field::Rate, Field::Life] {
                for sel in sels {
                    let values: &[u8] = if sel == Selector::Best {
                        &field.values()[..1]
                    } else {
                        field.values()
                    };
                    for &v in values {
                        let (q, mask) = field.query(sl, dl, sel, v);
                        let got = ask(&sa, &q, mask).await?;
                        if got.is_ok() {
                            paths += 1;
                        } else {
                            none += 1;
                        }
                        let what = format!("{a} -> {b} {field:?} {sel:?} {v}");
                        if let Some(why) = unmet(field, sel, v, &plain, &got) {
                            faults.push(format!("{what}: {why}"));
                        }
                        lines.push(format!("{what}: {}", shown(&got)));
                    }
                }
            }
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    check!(
        faults.is_empty(),
        "under {}, answers that do not meet their selectors:\n{}",
        sm_name(),
        faults.join("\n")
    );
    let answers = lines.join("\n") + "\n";
    println!(
        "  {} queries: {paths} paths, {none} ERR_NO_RECORDS, each meeting its selector",
        lines.len()
    );
    let (theirs, ours) = match against_opensm(f, "sa-paths", &answers)? {
        Against::Done(o) => return Ok(o),
        Against::Same => {
            println!("  each as OpenSM answered it");
            return Ok(Outcome::Passed);
        }
        Against::Differ { theirs, ours } => (theirs, ours),
    };
    let diffs: Vec<String> = answers
        .lines()
        .zip(theirs.lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("  ours:   {a}\n  OpenSM: {b}"))
        .collect();
    let n = diffs.len();
    fail!(
        "{n} of {} answers differ from OpenSM's (ours kept in {}):\n{}",
        lines.len(),
        ours.display(),
        diffs.into_iter().take(20).collect::<Vec<_>>().join("\n")
    );
}
