//! The election of a master among several SMs (IBA 14.4), with SMs the
//! tests start on HCAs beside the fabric's own (ours or OpenSM, priority 0,
//! on the first node):
//!
//! - two of ours: the higher priority is master, the other standby, and
//!   `sminfo` shows each state (the fabric's SM hands over and is standby);
//! - ours with OpenSM, in both orders of priority, where the fabric's SM is
//!   ours (see the test for why not beside the fabric's OpenSM): the
//!   higher is master
//!   (ours hands over to a better OpenSM, and takes over when it dies; a
//!   better ours stays master beside OpenSM);
//! - the master killed: the standby takes over, every LID as it was;
//! - our master killed and restarted: every LID as it was.
//!
//! Our SMs run with a 1 s SMInfo poll and 2 retries; the failover times are
//! printed, never asserted (the machine is shared): a bound is a count of
//! the standby's polls, from its log. Each test ends with the SMs it started
//! stopped (ours with SIGTERM, handing over to the fabric's SM; OpenSM with
//! SIGKILL, as it ignores SIGTERM under umad2sim) and the fabric's SM
//! master again. Like the fault tests, they run on the topologies of
//! `RDMA_FABRIC_FAULT_NETS` (see `sm_faults`) and report skipped elsewhere.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdma_tests::fabric::{Fabric, FabricTest, NodeKind};
use rdma_tests::{check, fail, Outcome, TestResult};

use crate::sm::{tool, wait_for};

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "sm_election::two_of_ours_one_master_one_standby",
        run: two_of_ours_one_master_one_standby,
    },
    FabricTest {
        name: "sm_election::ours_and_opensm_the_higher_priority_is_master",
        run: ours_and_opensm_the_higher_priority_is_master,
    },
    FabricTest {
        name: "sm_election::the_master_killed_the_standby_takes_over_with_the_same_lids",
        run: the_master_killed_the_standby_takes_over_with_the_same_lids,
    },
    FabricTest {
        name: "sm_election::our_master_killed_and_restarted_keeps_the_lids",
        run: our_master_killed_and_restarted_keeps_the_lids,
    },
];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// How long an election may take before the test fails (generous: the
/// fabric's SM polls a dead master every 10 s, 4 times, before it takes
/// back the subnet).
const LIMIT: Duration = Duration::from_secs(90);
/// Our SMs' SMInfo poll (ms) and retries.
const POLL_MS: u64 = 1000;
const RETRIES: u32 = 2;

/// `sminfo` states.
const STANDBY: u8 = 2;
const MASTER: u8 = 3;

/// An SM a test started: killed on drop.
struct SmProc {
    child: Child,
    /// Its log and cache folder.
    dir: PathBuf,
    host: String,
    opensm: bool,
    /// The fabric: once the process is gone, ibsim is made to drop its
    /// connection ([`Fabric::forget_dead_clients`]), which would otherwise
    /// keep the node's SM role from the next SM started there.
    f: Fabric,
}

impl SmProc {
    /// SIGTERM (ours hands over first; OpenSM ignores it under umad2sim:
    /// SIGKILL), waiting for the exit.
    fn stop(mut self) -> Res<()> {
        let sig = if self.opensm { "-KILL" } else { "-TERM" };
        Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()?;
        let end = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > end {
                let _ = self.child.kill();
                fail!("the SM on {} did not stop within 20 s", self.host);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.f.forget_dead_clients()?;
        Ok(())
    }

    /// SIGKILL: the SM dies without a word.
    fn kill(mut self) -> Res<()> {
        self.child.kill()?;
        self.child.wait()?;
        self.f.forget_dead_clients()?;
        Ok(())
    }

    fn log(&self) -> String {
        let name = if self.opensm { "osm.log" } else { "sm.log" };
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// The LIDs it wrote (`guid2lid` of its OSM_CACHE_DIR).
    fn lids(&self) -> Res<BTreeMap<u64, u16>> {
        let text = std::fs::read_to_string(self.dir.join("guid2lid"))?;
        Ok(rdma_tests::fabric::parse_guid2lid(&text)
            .into_iter()
            .collect())
    }
}

impl Drop for SmProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = self.f.forget_dead_clients();
        }
    }
}

/// A folder of its own for an SM of this test.
fn sm_dir(f: &Fabric, tag: &str) -> Res<PathBuf> {
    let dir = f.dir.join(format!("election-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Ours on `host` at `priority`, with the test's poll; its log and
/// guid2lid in `dir`.
fn start_ours(f: &Fabric, host: &str, priority: u8, dir: &std::path::Path) -> Res<SmProc> {
    let mut c = f.command(rdma_tests::example("sm")?, Some(host));
    c.args(["-p", &priority.to_string(), "-s", "2"])
        .args(["--sminfo_polling_timeout", &POLL_MS.to_string()])
        .args(["--polling_retry_number", &RETRIES.to_string(), "-f"])
        .arg(dir.join("sm.log"))
        .env("OSM_CACHE_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok(SmProc {
        f: f.clone(),
        child: c.spawn()?,
        dir: dir.to_path_buf(),
        host: host.into(),
        opensm: false,
    })
}

/// OpenSM on `host` at `priority` (its own poll: 10 s, 4 retries; a
/// standby of OpenSM of higher priority than the master sends it trap 144,
/// which starts the master's heavy sweep).
fn start_opensm(f: &Fabric, host: &str, priority: u8, dir: &std::path::Path) -> Res<SmProc> {
    let mut c = f.command("opensm", Some(host));
    c.args(["-p", &priority.to_string(), "-d", "2", "-f"])
        .arg(dir.join("osm.log"))
        .env("OSM_CACHE_DIR", dir)
        .env("OSM_TMP_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok(SmProc {
        f: f.clone(),
        child: c.spawn()?,
        dir: dir.to_path_buf(),
        host: host.into(),
        opensm: true,
    })
}

/// Two HCAs other than the first node (where the fabric's SM runs), for a
/// test's SMs; or the test's outcome where it does not run: a fabric with
/// fewer than two such HCAs.
fn two_hcas(f: &Fabric) -> Result<(String, String), TestResult> {
    if let Some(skipped) = crate::sm_faults::gated(f) {
        return Err(skipped);
    }
    let mut h = f
        .nodes
        .iter()
        .skip(1)
        .filter(|n| n.kind == NodeKind::Hca)
        .map(|n| n.name.clone());
    match (h.next(), h.next()) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(Ok(Outcome::Skipped(
            "fewer than two HCAs beside the SM's node".into(),
        ))),
    }
}

/// The LID of the port a process attached at `host` uses (`ibaddr`).
fn lid_of(f: &Fabric, host: &str) -> Res<u16> {
    let out = f.command("ibaddr", Some(host)).output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let hex = text
        .split("LID start ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|h| h.strip_prefix("0x"))
        .ok_or_else(|| format!("ibaddr at {host}: {text:?}"))?;
    Ok(u16::from_str_radix(hex, 16)?)
}

/// The state `sminfo LID` shows (0 when it gets no answer), and its line.
fn state_at(f: &Fabric, lid: u16) -> Res<(u8, String)> {
    let mut c = f.command("sminfo", None);
    c.arg(lid.to_string());
    let out = rdma_tests::fabric::output_within(c, Duration::from_secs(30))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let state = text
        .split(" state ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((state, text))
}

/// Waits until each (LID, state) of `want` holds.
fn wait_states(f: &Fabric, want: &[(u16, u8)]) -> Res<String> {
    let mut shown = String::new();
    wait_for(LIMIT, || {
        shown.clear();
        let mut ok = true;
        for &(lid, st) in want {
            let (got, text) = state_at(f, lid)?;
            ok &= got == st;
            shown.push_str(&format!("LID {lid}: want state {st}: {text}\n"));
        }
        Ok((ok, shown.clone()))
    })?;
    Ok(shown)
}

/// Every port's LID as the fabric's SM assigned it.
fn fabric_lids(f: &Fabric) -> Res<BTreeMap<u64, u16>> {
    Ok(f.lids()?.into_iter().collect())
}

/// Each LID of `want` still answers NodeInfo with its port's GUID.
fn lids_still_hold(f: &Fabric, want: &BTreeMap<u64, u16>) -> Res<()> {
    for (&guid, &lid) in want {
        let t = tool(f, &["smpquery", "nodeinfo", &lid.to_string()])?;
        let port_guid = t
            .lines()
            .find_map(|l| l.strip_prefix("PortGuid:"))
            .map(|v| v.trim_start_matches('.').trim().to_string());
        check!(
            port_guid == Some(format!("0x{guid:016x}")),
            "LID {lid} is no longer port {guid:#018x}:\n{t}"
        );
    }
    Ok(())
}

/// Waits for the LIDs an SM wrote, then checks they are `want`.
fn same_lids(sm: &SmProc, want: &BTreeMap<u64, u16>) -> Res<()> {
    let mut got = BTreeMap::new();
    wait_for(LIMIT, || {
        got = sm.lids().unwrap_or_default();
        Ok((
            got.len() >= want.len(),
            format!("{} LIDs written", got.len()),
        ))
    })?;
    check!(
        &got == want,
        "the LIDs moved under the SM on {}:\nbefore {want:x?}\nafter  {got:x?}",
        sm.host
    );
    Ok(())
}

/// The fabric's SM master again at its LID.
/// Then the ports the tests used, and the SM's own, name it as their
/// master again (each port's MasterSMLID, which `sminfo` without a LID
/// asks): SA queries go there, so the tests that follow need it, and an
/// SM that reports itself master has not always written it yet.
fn fabric_sm_back(f: &Fabric) -> Res<()> {
    wait_states(f, &[(f.sm_lid, MASTER)])
        .map_err(|e| format!("the fabric's SM did not take the subnet back: {e}"))?;
    let mut hosts: Vec<Option<String>> = vec![None];
    if let Ok((a, b)) = two_hcas(f) {
        hosts.extend([Some(a), Some(b)]);
    }
    let want = format!("sm lid {} sm guid", f.sm_lid);
    wait_for(LIMIT, || {
        let mut shown = String::new();
        let mut ok = true;
        for h in &hosts {
            let c = f.command("sminfo", h.as_deref());
            let out = rdma_tests::fabric::output_within(c, Duration::from_secs(30))?;
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            ok &= out.status.success() && text.contains(&want);
            shown.push_str(&format!(
                "at {}: {text}\n",
                h.as_deref().unwrap_or("the SM's node")
            ));
        }
        Ok((ok, shown))
    })
    .map(|_| ())
    .map_err(|e| {
        format!(
            "the ports do not name the fabric's SM (LID {}) as master: {e}",
            f.sm_lid
        )
        .into()
    })
}

fn two_of_ours_one_master_one_standby(f: &Fabric) -> TestResult {
    let (a, b) = match two_hcas(f) {
        Ok(hcas) => hcas,
        Err(outcome) => return outcome,
    };
    let (la, lb) = (lid_of(f, &a)?, lid_of(f, &b)?);
    let high = start_ours(f, &a, 10, &sm_dir(f, "high")?)?;
    let low = start_ours(f, &b, 5, &sm_dir(f, "low")?)?;
    let shown = wait_states(f, &[(la, MASTER), (lb, STANDBY), (f.sm_lid, STANDBY)])
        .map_err(|e| format!("{e}\nhigh:\n{}\nlow:\n{}", high.log(), low.log()))?;
    println!("  {}", shown.replace('\n', "\n  "));
    let (_, text) = state_at(f, lb)?;
    check!(text.contains("SMINFO_STANDBY"), "sminfo {lb}: {text}");
    low.stop()?;
    high.stop()?;
    fabric_sm_back(f)?;
    Ok(Outcome::Passed)
}

fn ours_and_opensm_the_higher_priority_is_master(f: &Fabric) -> TestResult {
    let (a, b) = match two_hcas(f) {
        Ok(hcas) => hcas,
        Err(outcome) => return outcome,
    };
    if crate::sm::sm_name() != "ours" {
        return Ok(Outcome::Skipped(
            "run where the fabric's SM is ours: an OpenSM keeps an SMP it sent outstanding \
             for good when ibsim drops the answer (it drops every TrapRepress, and an OpenSM \
             that finds a master in its discovery sends it trap 144), as umad2sim has no MAD \
             timeouts, and then none of its sweeps ends; beside the fabric's OpenSM, that \
             OpenSM, master again by handover after this test, never ended a sweep in 1 run \
             of 2 on fattree, and the suite's next tests found no SM"
                .into(),
        ));
    }
    let (la, lb) = (lid_of(f, &a)?, lid_of(f, &b)?);
    for opensm_higher in [true, false] {
        let (po, pr) = if opensm_higher { (10, 5) } else { (5, 10) };
        // Ours first, master once the fabric's SM (priority 0) handed over
        // to it; then OpenSM. OpenSM never starts under a master of lower
        // priority than its own but ours: such a standby OpenSM sends that
        // master trap 144, whose TrapRepress ibsim drops, and under
        // umad2sim (no MAD timeouts) that trap stays outstanding in
        // OpenSM for good, so that none of its later sweeps as master
        // ends (it would never find ours, nor hand over to it).
        let ours = start_ours(f, &b, pr, &sm_dir(f, "ours")?)?;
        wait_states(f, &[(lb, MASTER), (f.sm_lid, STANDBY)])
            .map_err(|e| format!("ours alone, priority {pr}: {e}\nours:\n{}", ours.log()))?;
        let osm = start_opensm(f, &a, po, &sm_dir(f, "opensm")?)?;
        // OpenSM higher: ours finds it (its trap 144) and hands over.
        let want = if opensm_higher {
            [(la, MASTER), (lb, STANDBY), (f.sm_lid, STANDBY)]
        } else {
            [(lb, MASTER), (la, STANDBY), (f.sm_lid, STANDBY)]
        };
        let shown = wait_states(f, &want).map_err(|e| {
            format!(
                "OpenSM priority {po}, ours {pr}: {e}\nours:\n{}\nOpenSM:\n{}",
                ours.log(),
                osm.log()
            )
        })?;
        println!(
            "  OpenSM priority {po}, ours {pr}:\n  {}",
            shown.trim_end().replace('\n', "\n  ")
        );
        if opensm_higher {
            // The master dies: our standby takes over.
            let from = ours.log().len();
            let t0 = Instant::now();
            osm.stop()?;
            wait_states(f, &[(lb, MASTER)])
                .map_err(|e| format!("OpenSM stopped: {e}\nours:\n{}", ours.log()))?;
            println!(
                "  failover: ours master {:.1} s after OpenSM was killed (poll {POLL_MS} ms, {RETRIES} retries)",
                t0.elapsed().as_secs_f64()
            );
            took_over_in_time(&ours.log(), from)?;
            // Ours hands over to the fabric's SM as it stops.
            ours.stop()?;
        } else {
            // Not killed here: a standby OpenSM whose master dies keeps
            // its SMInfo poll outstanding for good under umad2sim (no MAD
            // timeouts), and the sweeps that would end its standby never
            // end (seen: the fabric's OpenSM, master again by handover
            // after such a death, never swept; the suite's later tests
            // found no SM).
            osm.stop()?;
            ours.stop()?;
        }
        fabric_sm_back(f)?;
    }
    Ok(Outcome::Passed)
}

/// The standby's polls of the master that got no answer, from its log
/// after its first `from` bytes (its length when the master was killed).
fn missed_polls(log: &str, from: usize) -> usize {
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("missed") && l.contains("polls"))
        .count()
}

/// The standby took over once the polls it missed after the master's
/// death ran out its retries, not later: a count, not a time (one missed
/// before the death may count towards them).
fn took_over_in_time(log: &str, from: usize) -> TestResult {
    let missed = missed_polls(log, from) as u32;
    check!(
        (1..=RETRIES).contains(&missed),
        "{missed} missed polls after the master's death before taking over (retries {RETRIES}):\n{log}"
    );
    Ok(Outcome::Passed)
}

fn the_master_killed_the_standby_takes_over_with_the_same_lids(f: &Fabric) -> TestResult {
    let (a, b) = match two_hcas(f) {
        Ok(hcas) => hcas,
        Err(outcome) => return outcome,
    };
    let (la, lb) = (lid_of(f, &a)?, lid_of(f, &b)?);
    let before = fabric_lids(f)?;
    let high = start_ours(f, &a, 10, &sm_dir(f, "high")?)?;
    let low = start_ours(f, &b, 5, &sm_dir(f, "low")?)?;
    wait_states(f, &[(la, MASTER), (lb, STANDBY)])?;
    let from = low.log().len();
    let t0 = Instant::now();
    high.kill()?;
    wait_states(f, &[(lb, MASTER)]).map_err(|e| format!("{e}\nstandby:\n{}", low.log()))?;
    println!(
        "  failover: the standby was master {:.1} s after the master was killed (poll {POLL_MS} ms, {RETRIES} retries)",
        t0.elapsed().as_secs_f64()
    );
    took_over_in_time(&low.log(), from)?;
    same_lids(&low, &before)?;
    lids_still_hold(f, &before)?;
    low.stop()?;
    fabric_sm_back(f)?;
    Ok(Outcome::Passed)
}

fn our_master_killed_and_restarted_keeps_the_lids(f: &Fabric) -> TestResult {
    let (a, _) = match two_hcas(f) {
        Ok(hcas) => hcas,
        Err(outcome) => return outcome,
    };
    let la = lid_of(f, &a)?;
    let before = fabric_lids(f)?;
    let dir = sm_dir(f, "restart")?;
    let first = start_ours(f, &a, 10, &dir)?;
    wait_states(f, &[(la, MASTER), (f.sm_lid, STANDBY)])?;
    same_lids(&first, &before)?;
    first.kill()?;
    // The restarted one finds the fabric's SM standby (it polls every 10 s,
    // 4 times, before it would take over) and is master again.
    let _ = std::fs::remove_file(dir.join("guid2lid"));
    let t0 = Instant::now();
    let again = start_ours(f, &a, 10, &dir)?;
    wait_states(f, &[(la, MASTER)]).map_err(|e| format!("{e}\nrestarted:\n{}", again.log()))?;
    println!(
        "  restart: master again {:.1} s after the start",
        t0.elapsed().as_secs_f64()
    );
    same_lids(&again, &before)?;
    lids_still_hold(f, &before)?;
    again.stop()?;
    fabric_sm_back(f)?;
    Ok(Outcome::Passed)
}
