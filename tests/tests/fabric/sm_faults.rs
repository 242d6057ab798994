//! The subnet manager's sweep through faults that ibsim's console makes
//! (`RDMA_FABRIC_CONSOLE`), under OpenSM and under ours:
//!
//! - a switch that comes back from a reset with empty tables (its LFT
//!   emptied by SMPs of the test, then `Clear` and `ReLink`: its ports reset,
//!   port 0 without a LID) has its tables written whole again: `ibroute`
//!   shows every LID routed on it and `ibtracert` finds routes through it;
//! - a switch whose NodeInfo is lost (`Error "sw" 100 17`) while it comes
//!   back from a reset is found once its SMPs get through again;
//! - the fabric, every switch and HCA but the SM's reset, comes up while
//!   5% of the packets through every port are lost (`Error "node" 5`);
//! - our sweep keeps at most 4 SMPs outstanding at once (OpenSM's default
//!   `--maxsmps`), and reaches that many.
//!
//! Each test leaves the fabric as it found it (links back, no error rate).
//!
//! The three that make faults run on the topologies of
//! `RDMA_FABRIC_FAULT_NETS` (a space-separated list of topology names, or
//! `all`; unset: every topology) and report themselves skipped on the
//! others. `ci/fabric.sh --suite` sets it to `fattree` (the topology with the
//! most nodes and paths) unless it is set: they wait for the SM's sweeps
//! (about a minute per topology and SM), and the suite runs each under
//! OpenSM and under ours on that one topology. The count of SMPs in flight
//! (a look at the log) runs everywhere.

use std::collections::BTreeMap;
use std::time::Duration;

use rdma::mad::{class, Attribute, LinearForwardingTable, Mad, MadHeader, Method};
use rdma::umad::{Address, Port, Registration};
use rdma_tests::fabric::{output_within, Fabric, FabricTest, NodeKind};
use rdma_tests::{check, fail, Outcome, TestResult};

use crate::sm::{console, lids_by_kind, sample, sm_name, tool, wait_for};

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "sm_faults::a_switch_reset_with_empty_tables_is_routed_again",
        run: a_switch_reset_with_empty_tables_is_routed_again,
    },
    FabricTest {
        name: "sm_faults::a_switch_whose_node_info_was_lost_is_found_again",
        run: a_switch_whose_node_info_was_lost_is_found_again,
    },
    FabricTest {
        name: "sm_faults::the_fabric_comes_up_with_5_percent_of_packets_lost",
        run: the_fabric_comes_up_with_5_percent_of_packets_lost,
    },
    FabricTest {
        name: "sm_faults::our_sweep_keeps_at_most_maxsmps_in_flight",
        run: our_sweep_keeps_at_most_maxsmps_in_flight,
    },
];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const LIMIT: Duration = Duration::from_secs(60);
/// ibsim's attribute ID of NodeInfo, for `Error`.
const NODE_INFO: u16 = 0x11;

/// `Some(skipped)` on a fabric whose topology is not one of
/// `RDMA_FABRIC_FAULT_NETS` (see the module's documentation); the election
/// tests (`sm_election::`, SMs started, killed and restarted) take it too.
pub(crate) fn gated(f: &Fabric) -> Option<TestResult> {
    let nets = std::env::var("RDMA_FABRIC_FAULT_NETS").ok()?;
    (!crate::on_topology(&nets, &f.name)).then(|| {
        Ok(Outcome::Skipped(format!(
            "the fault and election tests run on {nets} (RDMA_FABRIC_FAULT_NETS), under each SM"
        )))
    })
}

/// The links of the net file: (node, port, peer node, peer port), each
/// once per side.
pub(crate) fn links(f: &Fabric) -> Res<Vec<(String, u8, String, u8)>> {
    let text = std::fs::read_to_string(&f.net)?;
    let mut out = Vec::new();
    let mut at: Option<String> = None;
    for line in text.lines() {
        let l = line.trim_start();
        if l.starts_with("Switch") || l.starts_with("Hca") || l.starts_with("Ca") {
            at = l.split('"').nth(1).map(str::to_owned);
            continue;
        }
        let (Some(node), Some(rest)) = (&at, l.strip_prefix('[')) else {
            continue;
        };
        let mut parts = rest.split('"');
        let (Some(port), Some(peer), Some(pport)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let port = port.trim().trim_end_matches(']').parse()?;
        let pport = pport
            .trim_start_matches('[')
            .split(']')
            .next()
            .unwrap_or("")
            .parse()?;
        out.push((node.clone(), port, peer.to_owned(), pport));
    }
    Ok(out)
}

/// The switch a test resets: the last of the net file (never the SM's
/// node, the first), and the HCAs linked to it.
fn victim(f: &Fabric) -> Res<Option<(String, Vec<String>)>> {
    let Some(sw) = f
        .nodes
        .iter()
        .skip(1)
        .rev()
        .find(|n| n.kind == NodeKind::Switch)
    else {
        return Ok(None);
    };
    let hcas: Vec<String> = f
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Hca)
        .map(|n| n.name.clone())
        .collect();
    let behind = links(f)?
        .into_iter()
        .filter(|(a, _, b, _)| *a == sw.name && hcas.contains(b))
        .map(|(_, _, b, _)| b)
        .collect();
    Ok(Some((sw.name.clone(), behind)))
}

/// Each node's LID by its name (its node description), from `smpquery
/// nodedesc` of every LID of the SM's `guid2lid`.
fn lids_by_name(f: &Fabric) -> Res<BTreeMap<String, u16>> {
    let mut out = BTreeMap::new();
    for (_, lid) in f.lids()? {
        let t = tool(f, &["smpquery", "nodedesc", &lid.to_string()])?;
        let name = t
            .trim_end()
            .rsplit("..")
            .next()
            .unwrap_or("")
            .trim_start_matches('.')
            .to_string();
        out.insert(name, lid);
    }
    Ok(out)
}

/// Whether the fabric is up as the SM left it: `ibnetdiscover` lists every
/// node of the net file and no port without a LID, and every HCA port of
/// the SM's `guid2lid` is Active with the SM's LID as its SMLid. The detail
/// of what is not.
fn fabric_up(f: &Fabric) -> Res<(bool, String)> {
    let out = output_within(f.command("ibnetdiscover", None), LIMIT)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let nodes = text
        .lines()
        .filter(|l| l.starts_with("Switch\t") || l.starts_with("Ca\t"))
        .count();
    if nodes != f.nodes.len() {
        return Ok((
            false,
            format!("ibnetdiscover lists {nodes} nodes of {}", f.nodes.len()),
        ));
    }
    if let Some(l) = text.lines().find(|l| l.contains(" lid 0 ")) {
        return Ok((false, format!("a port without LID: {l}")));
    }
    let (_, cas) = match lids_by_kind(f) {
        Ok(v) => v,
        Err(e) => return Ok((false, e.to_string())),
    };
    let sm = format!("SMLid:...........................{}\n", f.sm_lid);
    for lid in cas {
        let mut c = f.command("smpquery", None);
        c.args(["portinfo", &lid.to_string()]);
        let out = output_within(c, LIMIT)?;
        let pi = String::from_utf8_lossy(&out.stdout).into_owned();
        if !(pi.contains("LinkState:.......................Active\n") && pi.contains(&sm)) {
            return Ok((false, format!("the port of LID {lid}:\n{pi}")));
        }
    }
    Ok((true, String::new()))
}

/// Whether switch `lid` routes every LID of the SM's `guid2lid`, and
/// `ibtracert` finds the route between every two of `hcas`.
fn routed(f: &Fabric, lid: u16, hcas: &[u16]) -> Res<(bool, String)> {
    let all = f.lids()?.len();
    let mut c = f.command("ibroute", None);
    c.arg(lid.to_string());
    let out = output_within(c, LIMIT)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let want = format!("{all} valid lids dumped");
    if !text.contains(&want) {
        return Ok((false, format!("ibroute {lid}: not `{want}`:\n{text}")));
    }
    for &a in hcas {
        for &b in hcas {
            if a == b {
                continue;
            }
            let mut c = f.command("ibtracert", None);
            c.args([a.to_string(), b.to_string()]);
            let out = output_within(c, LIMIT)?;
            let t = String::from_utf8_lossy(&out.stdout).into_owned();
            let end = format!("lid {b}-{b} ");
            let reached = t
                .lines()
                .last()
                .is_some_and(|l| l.starts_with("To ca") && l.contains(&end));
            if !out.status.success() || !reached {
                return Ok((false, format!("ibtracert {a} {b}:\n{t}")));
            }
        }
    }
    Ok((true, String::new()))
}

/// Empties the LFT of the switch at `lid` (every entry 0xFF, the blocks up
/// to `top`) with LID-routed SubnSet(LinearForwardingTable), as a switch
/// that rebooted has it. The answers are not waited for: the switch cannot
/// route them back once its table is empty.
fn empty_lft(lid: u16, top: u16) -> Res<()> {
    let ca = rdma::umad::ca_names()?.into_iter().next().ok_or("no CA")?;
    let port = rdma::umad::Ca::get(&ca)?
        .ports
        .first()
        .map(|p| p.port_num)
        .ok_or("no port")?;
    let port = Port::open(&ca, port)?;
    let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    // From the last block to the first: the block of the switch's route
    // back to this port last.
    for block in (0..=u32::from(top) / 64).rev() {
        let mut h = MadHeader::request(
            class::SUBN_LID_ROUTED,
            1,
            Method::SET,
            agent.next_tid(),
            LinearForwardingTable::ID,
        );
        h.attr_mod = LinearForwardingTable::attr_mod(block);
        let mut m = Mad::new(&h);
        m.data_mut()[..64].fill(0xff);
        // Answered until the block that routes the answer is empty.
        let _ = agent.request(&m, &Address::smi_lid(lid), Duration::from_millis(200), 1);
    }
    Ok(())
}

/// Takes the switch of [`victim`] through a reset with empty tables: its
/// LFT emptied, then `Clear` (every port reset, port 0 without LID, its
/// links down) and `ReLink`. The SM must find it reset and write its LFT
/// whole again: `ibroute` shows every LID routed on it and `ibtracert`
/// finds routes between its HCAs and others. Under ours the LFT blocks
/// already written are cached by switch, and a switch that reset must
/// lose its cache.
fn a_switch_reset_with_empty_tables_is_routed_again(f: &Fabric) -> TestResult {
    if let Some(skipped) = gated(f) {
        return skipped;
    }
    let Some((sw, behind)) = victim(f)? else {
        return Ok(Outcome::Skipped("no switch but the SM's node".into()));
    };
    let by_name = lids_by_name(f)?;
    let lid = *by_name
        .get(&sw)
        .ok_or_else(|| format!("no LID has the node description {sw}"))?;
    let (_, cas) = lids_by_kind(f)?;
    let mut hcas = sample(&cas, 3);
    hcas.extend(behind.iter().filter_map(|n| by_name.get(n)).take(2));
    hcas.sort_unstable();
    hcas.dedup();
    let top = f.lids()?.iter().map(|&(_, l)| l).max().unwrap_or(0);
    empty_lft(lid, top)?;
    console(&format!("Clear \"{sw}\""))?;
    console(&format!("ReLink \"{sw}\""))?;
    wait_for(LIMIT, || {
        let (up, why) = fabric_up(f)?;
        if !up {
            return Ok((false, why));
        }
        routed(f, lid, &hcas)
    })
    .map_err(|e| format!("under {}, {sw} (LID {lid}) after a reset: {e}", sm_name()))?;
    Ok(Outcome::Passed)
}

/// The switch of [`victim`] reset (`Clear`, `ReLink`) while every NodeInfo
/// sent to it is lost (`Error "sw" 100 17`): the SM cannot find it or the
/// HCAs behind it. Once its SMPs get through again (the error rate back to
/// 0) the SM must find it, with no trap and no port changing state: ours
/// by the SMPs that failed and by the light sweep's look through ports
/// that are up but lead to no node it knows, OpenSM by its light sweep's.
fn a_switch_whose_node_info_was_lost_is_found_again(f: &Fabric) -> TestResult {
    if let Some(skipped) = gated(f) {
        return skipped;
    }
    let Some((sw, behind)) = victim(f)? else {
        return Ok(Outcome::Skipped("no switch but the SM's node".into()));
    };
    console(&format!("Error \"{sw}\" 100 {NODE_INFO}"))?;
    console(&format!("Clear \"{sw}\""))?;
    console(&format!("ReLink \"{sw}\""))?;
    // Time for the SM to sweep (traps from the switch's neighbours, then
    // light sweeps) while the switch does not answer.
    std::thread::sleep(Duration::from_secs(12));
    let lost = fabric_up(f);
    console(&format!("Error \"{sw}\" 0"))?;
    if let Ok((true, _)) = lost {
        fail!(
            "under {}, the fabric was up while {sw} answered no NodeInfo: was the error rate set?",
            sm_name()
        );
    }
    wait_for(LIMIT, || fabric_up(f)).map_err(|e| {
        format!(
            "under {}, {sw} (HCAs {behind:?}) after its NodeInfo got through again: {e}",
            sm_name()
        )
    })?;
    if sm_name() == "ours" {
        let dir = std::env::var("RDMA_FABRIC_DIR").map_err(|_| "no RDMA_FABRIC_DIR")?;
        let log = std::fs::read_to_string(std::path::Path::new(&dir).join("sm.out"))?;
        check!(
            log.lines().any(|l| l.contains(" INFO light sweep: ")
                && (l.contains("SMPs failed in the last heavy sweep")
                    || l.contains("not reached by the last heavy sweep"))),
            "our SM's log names no light sweep that looked for what it missed:\n{log}"
        );
    }
    Ok(Outcome::Passed)
}

/// How long the packets are lost in
/// [`the_fabric_comes_up_with_5_percent_of_packets_lost`]: the sweep that
/// the resets' traps start, and at least one light sweep (OpenSM's come
/// every 10 s, ours every 5 s in the suite), run into the loss.
const LOSS: Duration = Duration::from_secs(12);

/// The SM's log (OpenSM's `osm.log`, our `sm.out`) in the run folder.
fn sm_log(f: &Fabric) -> std::path::PathBuf {
    f.dir.join(if sm_name() == "ours" {
        "sm.out"
    } else {
        "osm.log"
    })
}

/// Whether the SM's log past byte `from` shows an SMP of a sweep lost:
/// ours logs each sweep with `N SMPs failed`, OpenSM an error per SMP
/// that timed out.
fn smps_lost_since(f: &Fabric, from: u64) -> Res<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(sm_log(f))?;
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(text.lines().any(|l| {
        if sm_name() == "ours" {
            l.split("; ").any(|part| {
                part.strip_suffix(" SMPs failed")
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n > 0)
            })
        } else {
            l.contains("ERR 3120: Timeout while getting attribute")
                || l.contains("ERR 5411: DR SMP Send completed with error")
        }
    }))
}

/// Every switch and HCA but the SM's node (and, when that is an HCA, its
/// switch) reset (`Clear`: ports down, no LIDs) and linked again while 5%
/// of the packets into every port of every node are lost (`Error "node"
/// 5`): SMPs of the sweeps that bring the fabric up again are lost (after
/// their retries, too, some of them; the SM's log must show it). After
/// [`LOSS`] of that the loss stops; the fabric must then be up (every node
/// with a LID, every HCA port Active) without anything else happening:
/// an SM that does not sweep again for what its sweeps missed leaves it
/// down (as ours does when its light sweeps are far apart, e.g.
/// `RDMA_FABRIC_SWEEP=600`).
fn the_fabric_comes_up_with_5_percent_of_packets_lost(f: &Fabric) -> TestResult {
    if let Some(skipped) = gated(f) {
        return skipped;
    }
    let logged = std::fs::metadata(sm_log(f))?.len();
    let sm_node = &f.nodes[0];
    let keep: Vec<String> = match sm_node.kind {
        NodeKind::Switch => vec![sm_node.name.clone()],
        NodeKind::Hca => links(f)?
            .into_iter()
            .filter(|(a, _, _, _)| *a == sm_node.name)
            .map(|(_, _, b, _)| b)
            .chain([sm_node.name.clone()])
            .collect(),
    };
    let reset: Vec<&str> = f
        .nodes
        .iter()
        .filter(|n| !keep.contains(&n.name))
        .map(|n| n.name.as_str())
        .collect();
    for n in &f.nodes {
        console(&format!("Error \"{}\" 5", n.name))?;
    }
    // HCAs first: their links are remembered on both sides, so that the
    // switches' ReLink brings them back.
    let (hcas, switches): (Vec<&str>, Vec<&str>) = reset.iter().partition(|n| {
        f.nodes
            .iter()
            .any(|m| m.name == **n && m.kind == NodeKind::Hca)
    });
    for n in hcas.iter().chain(&switches) {
        console(&format!("Clear \"{n}\""))?;
    }
    for n in switches.iter().chain(&hcas) {
        console(&format!("ReLink \"{n}\""))?;
    }
    std::thread::sleep(LOSS);
    for n in &f.nodes {
        console(&format!("Error \"{}\" 0", n.name))?;
    }
    check!(
        smps_lost_since(f, logged)?,
        "under {}, the SM's log ({}) shows no SMP lost in {LOSS:?} of 5% packet loss: was the error rate set?",
        sm_name(),
        sm_log(f).display()
    );
    wait_for(Duration::from_secs(30), || fabric_up(f)).map_err(|e| {
        format!(
            "under {}, {} nodes reset with 5% of packets lost: {e}",
            sm_name(),
            reset.len()
        )
    })?;
    Ok(Outcome::Passed)
}

/// Our SM's log (ci/fabric.sh starts it without `--maxsmps`: OpenSM's
/// default, 4) gives the most SMPs each heavy sweep had outstanding at
/// once: never more than 4, and 4 in the sweep that brought the fabric up
/// (it has far more than 4 ports to read).
fn our_sweep_keeps_at_most_maxsmps_in_flight(f: &Fabric) -> TestResult {
    if sm_name() != "ours" {
        return Ok(Outcome::Skipped(
            "OpenSM logs no count of its SMPs in flight".into(),
        ));
    }
    let log = std::fs::read_to_string(f.dir.join("sm.out"))?;
    let peaks: Vec<usize> = log
        .lines()
        .filter_map(|l| {
            let (head, _) = l.split_once(" SMPs in flight")?;
            head.rsplit("at most ").next()?.parse().ok()
        })
        .collect();
    check!(!peaks.is_empty(), "no sweep in our SM's log:\n{log}");
    check!(
        peaks.iter().all(|&p| p <= 4) && peaks[0] == 4,
        "SMPs in flight in each sweep: {peaks:?}"
    );
    Ok(Outcome::Passed)
}
