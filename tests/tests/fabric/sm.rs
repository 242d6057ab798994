//! The subnet manager of the fabric, as its C clients see it: the same
//! checks pass under OpenSM and under ours (`sm/`, the package `rdma-sm`, which
//! `ci/fabric.sh --sm ours` starts instead of OpenSM; `RDMA_FABRIC_SM` names
//! the one running).
//!
//! - `sminfo` reports a master at the SM's LID;
//! - `ibnetdiscover` lists every node with a LID, and every HCA port is
//!   Active with the SM's LID as its SMLid (`smpquery portinfo`);
//! - `ibroute` shows every LID routed on every switch, and `ibtracert`
//!   finds the route between sampled pairs of HCAs;
//! - `saquery` gets a NodeRecord for every LID and a PathRecord between the
//!   sampled pairs;
//! - a link between switches taken down (ibsim's console) is swept and
//!   routed around, and back up is swept and Active again;
//! - an HCA port reset to Init by an SMP (`ibportstate LID PORT down`: no
//!   trap, only PortStateChange on its switch) is found by a light sweep
//!   and made Active again.

use std::collections::BTreeSet;
use std::time::Duration;

use rdma::mad::sa::{JoinState, McMemberRecord, McMemberRecordMask};
use rdma::Gid;
use rdma_tests::fabric::{output_within, Fabric, FabricTest};
use rdma_tests::{check, fail, Outcome, TestResult};

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "sm::sminfo_reports_a_master_at_the_sm_lid",
        run: sminfo_reports_a_master,
    },
    FabricTest {
        name: "sm::every_node_has_a_lid_and_every_hca_port_is_active",
        run: every_node_has_a_lid_and_every_hca_port_is_active,
    },
    FabricTest {
        name: "sm::ibroute_routes_every_lid_on_every_switch",
        run: ibroute_routes_every_lid_on_every_switch,
    },
    FabricTest {
        name: "sm::ibtracert_finds_routes_between_sampled_hcas",
        run: ibtracert_finds_routes_between_sampled_hcas,
    },
    FabricTest {
        name: "sm::saquery_gets_node_records_and_paths",
        run: saquery_gets_node_records_and_paths,
    },
    FabricTest {
        name: "sm::routes_between_hcas_have_no_credit_loop_under_up_down",
        run: routes_between_hcas_have_no_credit_loop_under_up_down,
    },
    FabricTest {
        name: "sm::a_link_taken_down_is_routed_around_and_back_up",
        run: a_link_taken_down_is_routed_around_and_back_up,
    },
    FabricTest {
        name: "sm::a_port_reset_without_a_trap_is_found_by_a_light_sweep",
        run: a_port_reset_without_a_trap_is_found_by_a_light_sweep,
    },
    FabricTest {
        name: "sm::the_sa_serves_what_its_class_port_info_advertises",
        run: the_sa_serves_what_its_class_port_info_advertises,
    },
    FabricTest {
        name: "sm::the_sm_program_refuses_a_port_guid_no_port_has",
        run: the_sm_program_refuses_a_port_guid_no_port_has,
    },
    FabricTest {
        name: "sm::our_sa_answers_hostile_requests_with_error_statuses",
        run: our_sa_answers_hostile_requests_with_error_statuses,
    },
];

const LIMIT: Duration = Duration::from_secs(60);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The SM running, for messages.
pub(crate) fn sm_name() -> String {
    std::env::var("RDMA_FABRIC_SM").unwrap_or_else(|_| "opensm".into())
}

/// stdout of a C tool run against the fabric (attached at the first node),
/// failing with its stderr when it fails.
pub(crate) fn tool(f: &Fabric, args: &[&str]) -> Res<String> {
    let mut c = f.command(args[0], None);
    c.args(&args[1..]);
    let out = output_within(c, LIMIT)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        fail!(
            "`{}` under {}: {}\n{text}{}",
            args.join(" "),
            sm_name(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

/// The LIDs of the subnet by node kind: (switch LIDs, HCA port LIDs), from
/// the SM's guid2lid and the net file's order (switch GUIDs are those
/// `ibnetdiscover` names with `switchguid=`).
pub(crate) fn lids_by_kind(f: &Fabric) -> Res<(Vec<u16>, Vec<u16>)> {
    let text = tool(f, &["ibnetdiscover"])?;
    let mut switch_guids = BTreeSet::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("switchguid=0x") {
            let hex: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            switch_guids.insert(u64::from_str_radix(&hex, 16)?);
        }
    }
    let (mut sw, mut ca) = (Vec::new(), Vec::new());
    for (guid, lid) in f.lids()? {
        if switch_guids.contains(&guid) {
            sw.push(lid);
        } else {
            ca.push(lid);
        }
    }
    if sw.len() != f.switches() || ca.len() < f.hcas() {
        fail!(
            "{} switch LIDs and {} CA LIDs, for {} switches and {} HCAs",
            sw.len(),
            ca.len(),
            f.switches(),
            f.hcas()
        );
    }
    Ok((sw, ca))
}

/// Up to `n` LIDs spread over `lids` (first, last and between).
pub(crate) fn sample(lids: &[u16], n: usize) -> Vec<u16> {
    if lids.len() <= n {
        return lids.to_vec();
    }
    (0..n)
        .map(|i| lids[i * (lids.len() - 1) / (n - 1)])
        .collect()
}

fn sminfo_reports_a_master(f: &Fabric) -> TestResult {
    let text = tool(f, &["sminfo"])?;
    let want = format!("sminfo: sm lid {} ", f.sm_lid);
    check!(
        text.starts_with(&want) && text.contains("SMINFO_MASTER"),
        "sminfo under {}: {text}",
        sm_name()
    );
    Ok(Outcome::Passed)
}

fn every_node_has_a_lid_and_every_hca_port_is_active(f: &Fabric) -> TestResult {
    let text = tool(f, &["ibnetdiscover"])?;
    let headers: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("Switch\t") || l.starts_with("Ca\t"))
        .collect();
    check!(
        headers.len() == f.nodes.len(),
        "ibnetdiscover under {} lists {} nodes, the net file {}",
        sm_name(),
        headers.len(),
        f.nodes.len()
    );
    if let Some(l) = text.lines().find(|l| l.contains(" lid 0 ")) {
        fail!(
            "ibnetdiscover under {} shows a port without LID: {l}",
            sm_name()
        );
    }
    let (_, cas) = lids_by_kind(f)?;
    let sm = format!("SMLid:...........................{}\n", f.sm_lid);
    for lid in cas {
        let pi = tool(f, &["smpquery", "portinfo", &lid.to_string()])?;
        check!(
            pi.contains("LinkState:.......................Active\n") && pi.contains(&sm),
            "the port of LID {lid} under {}:\n{pi}",
            sm_name()
        );
    }
    Ok(Outcome::Passed)
}

fn ibroute_routes_every_lid_on_every_switch(f: &Fabric) -> TestResult {
    let (switches, _) = lids_by_kind(f)?;
    let all = f.lids()?.len();
    for lid in switches {
        let text = tool(f, &["ibroute", &lid.to_string()])?;
        let want = format!("{all} valid lids dumped");
        check!(
            text.contains(&want),
            "ibroute {lid} under {}: not `{want}`:\n{text}",
            sm_name()
        );
    }
    Ok(Outcome::Passed)
}

fn ibtracert_finds_routes_between_sampled_hcas(f: &Fabric) -> TestResult {
    let (_, cas) = lids_by_kind(f)?;
    let s = sample(&cas, 5);
    for &a in &s {
        for &b in &s {
            if a == b {
                continue;
            }
            let text = tool(f, &["ibtracert", &a.to_string(), &b.to_string()])?;
            let end = format!("lid {b}-{b} ");
            check!(
                text.lines()
                    .last()
                    .is_some_and(|l| l.starts_with("To ca") && l.contains(&end)),
                "ibtracert {a} {b} under {}:\n{text}",
                sm_name()
            );
        }
    }
    Ok(Outcome::Passed)
}

fn saquery_gets_node_records_and_paths(f: &Fabric) -> TestResult {
    for (_, lid) in f.lids()? {
        let text = tool(f, &["saquery", &lid.to_string()])?;
        let want = format!("\t\tlid.....................{lid}\n");
        check!(
            text.matches("NodeRecord dump:").count() == 1 && text.contains(&want),
            "saquery {lid} under {}:\n{text}",
            sm_name()
        );
    }
    let (_, cas) = lids_by_kind(f)?;
    let s = sample(&cas, 4);
    for &a in &s {
        for &b in &s {
            let text = tool(f, &["saquery", "-p", "--src-to-dst", &format!("{a}:{b}")])?;
            let want = [
                format!("\t\tdlid....................{b}\n"),
                format!("\t\tslid....................{a}\n"),
            ];
            check!(
                text.matches("PathRecord dump:").count() == 1
                    && want.iter().all(|w| text.contains(w)),
                "saquery -p --src-to-dst {a}:{b} under {}:\n{text}",
                sm_name()
            );
        }
    }
    Ok(Outcome::Passed)
}

/// The switch-to-switch hops of `ibtracert` output: (the switch sent
/// from, by name; its egress port). A hop line reads
/// `[3] -> switch port {0x...}[5] lid 4-4 "Switch2"`: out of port 3 of the
/// node of the line before.
pub(crate) fn switch_hops(trace: &str) -> Vec<(String, u8)> {
    let mut hops = Vec::new();
    let mut at_switch: Option<String> = None;
    for l in trace.lines() {
        let name = l
            .rsplit_once(" \"")
            .map(|(_, n)| n.trim_end_matches('"').to_string());
        let egress: Option<u8> = l
            .strip_prefix('[')
            .and_then(|r| r.split(']').next())
            .and_then(|n| n.parse().ok());
        if l.contains("] -> switch port ") {
            if let (Some(from), Some(p)) = (at_switch.take(), egress) {
                hops.push((from, p));
            }
            at_switch = name;
        } else {
            at_switch = None;
        }
    }
    hops
}

/// Polls `probe` every 250 ms for up to `limit`; the last detail on a
/// timeout.
pub(crate) fn wait_for(limit: Duration, mut probe: impl FnMut() -> Res<(bool, String)>) -> Res<()> {
    let end = std::time::Instant::now() + limit;
    loop {
        let (ok, detail) = probe()?;
        if ok {
            return Ok(());
        }
        if std::time::Instant::now() > end {
            fail!("not within {limit:?}: {detail}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

pub(crate) fn console(cmd: &str) -> Res<()> {
    use std::io::Write;
    let path = std::env::var("RDMA_FABRIC_CONSOLE").map_err(|_| "no RDMA_FABRIC_CONSOLE")?;
    let mut f = std::fs::OpenOptions::new().write(true).open(&path)?;
    writeln!(f, "{cmd}")?;
    Ok(())
}

/// Takes down the first switch-to-switch link on the route between two
/// HCAs (ibsim's `Unlink`), waits until `ibtracert` finds a route between
/// them that avoids it, brings it back (`ReLink`) and waits until its port
/// is Active again.
fn a_link_taken_down_is_routed_around_and_back_up(f: &Fabric) -> TestResult {
    let (_, cas) = lids_by_kind(f)?;
    let s = sample(&cas, 6);
    let mut chosen = None;
    'pairs: for &a in &s {
        for &b in &s {
            if a == b {
                continue;
            }
            let t = tool(f, &["ibtracert", &a.to_string(), &b.to_string()])?;
            if let Some(hop) = switch_hops(&t).into_iter().next() {
                chosen = Some((a, b, hop));
                break 'pairs;
            }
        }
    }
    let Some((a, b, (node, port))) = chosen else {
        return Ok(Outcome::Skipped(
            "no route between sampled HCAs crosses two switches".into(),
        ));
    };
    let limit = Duration::from_secs(45);
    console(&format!("Unlink \"{node}\"[{port}]"))?;
    let around = wait_for(limit, || {
        let mut c = f.command("ibtracert", None);
        c.args([a.to_string(), b.to_string()]);
        let out = output_within(c, LIMIT)?;
        let t = String::from_utf8_lossy(&out.stdout).into_owned();
        let avoids = !switch_hops(&t).contains(&(node.clone(), port));
        Ok((out.status.success() && avoids && t.contains("To ca"), t))
    });
    console(&format!("ReLink \"{node}\"[{port}]"))?;
    if let Err(e) = around {
        fail!(
            "under {}, with {node}[{port}] down, LID {a} to {b}: {e}",
            sm_name()
        );
    }
    // The switch's LID, from its NodeRecord name.
    let lid = f
        .lids()?
        .into_iter()
        .find_map(|(_, l)| {
            let t = tool(f, &["smpquery", "nodedesc", &l.to_string()]).ok()?;
            t.trim_end().ends_with(&format!(".{node}")).then_some(l)
        })
        .ok_or_else(|| format!("no LID has the node description {node}"))?;
    wait_for(limit, || {
        let pi = tool(
            f,
            &["smpquery", "portinfo", &lid.to_string(), &port.to_string()],
        )?;
        Ok((pi.contains("LinkState:.......................Active\n"), pi))
    })
    .map_err(|e| format!("under {}, {node}[{port}] back up: {e}", sm_name()))?;
    Ok(Outcome::Passed)
}

/// Resets an HCA port (not the SM's) to Init with a PortInfo Set of
/// PortState Down (`ibportstate LID PORT down`): ibsim takes the port and
/// its switch's port to Init and sets the switch's PortStateChange, and
/// sends no trap. The SM's light sweep must find it and a heavy sweep make
/// the port Active again (ci/fabric.sh starts ours with a 5 s sweep
/// interval; OpenSM's is 10 s); under ours its log must say a light sweep
/// found it.
fn a_port_reset_without_a_trap_is_found_by_a_light_sweep(f: &Fabric) -> TestResult {
    let (_, cas) = lids_by_kind(f)?;
    let Some(lid) = cas.iter().rev().copied().find(|&l| l != f.sm_lid) else {
        return Ok(Outcome::Skipped("no HCA but the SM's".into()));
    };
    let lid = lid.to_string();
    let pi = tool(f, &["smpquery", "portinfo", &lid])?;
    let port = pi
        .lines()
        .find_map(|l| l.strip_prefix("LocalPort:"))
        .map(|v| v.trim_start_matches('.').trim().to_string())
        .ok_or_else(|| format!("no LocalPort in the PortInfo of LID {lid}:\n{pi}"))?;
    let out = tool(f, &["ibportstate", &lid, &port, "down"])?;
    let after = out.split("After PortInfo set:").nth(1).unwrap_or("");
    check!(
        after.contains("LinkState:.......................Initialize\n"),
        "ibportstate {lid} {port} down did not leave the port in Init:\n{out}"
    );
    wait_for(Duration::from_secs(40), || {
        let mut c = f.command("smpquery", None);
        c.args(["portinfo", &lid, &port]);
        let out = output_within(c, LIMIT)?;
        let t = String::from_utf8_lossy(&out.stdout).into_owned();
        Ok((t.contains("LinkState:.......................Active\n"), t))
    })
    .map_err(|e| {
        format!(
            "under {}, LID {lid} port {port} after a reset: {e}",
            sm_name()
        )
    })?;
    if sm_name() == "ours" {
        let dir = std::env::var("RDMA_FABRIC_DIR").map_err(|_| "no RDMA_FABRIC_DIR")?;
        let log = std::fs::read_to_string(std::path::Path::new(&dir).join("sm.out"))?;
        check!(
            log.lines().any(|l| l.contains(" INFO light sweep: ")),
            "our SM's log names no light sweep that found the reset:\n{log}"
        );
    }
    Ok(Outcome::Passed)
}

/// Malformed and hostile requests to our SA: each gets an error status
/// (never a crash, never silence), and the SA answers a good query after
/// them. (OpenSM drops some of these unanswered; the test is of ours.)
fn our_sa_answers_hostile_requests_with_error_statuses(f: &Fabric) -> TestResult {
    use rdma::mad::sa::{NodeRecord, NodeRecordMask, SaRequest, SaStatusCode};
    use rdma::mad::{class, Mad, MadHeader, Method};
    use rdma::umad::{Address, Port, Registration};
    if sm_name() != "ours" {
        return Ok(Outcome::Skipped(
            "checks our SA (OpenSM leaves some of these unanswered)".into(),
        ));
    }
    let ca = rdma::umad::Ca::get("ibsim0")?;
    let port_num = ca.ports.first().map(|p| p.port_num).ok_or("no port")?;
    let port = Port::open(&ca.name, port_num)?;
    let agent = port.register(&Registration::new(class::SUBN_ADM, 2))?;
    let sa = Address::gsi_lid(f.sm_lid);
    let t = Duration::from_millis(500);
    let ask = |m: &Mad| -> Res<rdma::mad::Status> { Ok(agent.request(m, &sa, t, 2)?.mad.status()) };
    let tid = || agent.next_tid();
    let mut cases: Vec<(&str, Mad, Option<SaStatusCode>)> = Vec::new();
    // An attribute the SA does not have.
    cases.push((
        "Get of attribute 0x7777",
        Mad::new(&MadHeader::request(
            class::SUBN_ADM,
            2,
            Method::GET,
            tid(),
            0x7777,
        )),
        None,
    ));
    // A method the SA does not have, on a record it has.
    cases.push((
        "method 0x1f on NodeRecord",
        Mad::new(&MadHeader::request(
            class::SUBN_ADM,
            2,
            Method(0x1f),
            tid(),
            0x0011,
        )),
        None,
    ));
    // A Get that matches nothing, and one that matches many.
    let none = SaRequest::get(tid()).record(
        &NodeRecord {
            lid: 0xbffe,
            ..NodeRecord::default()
        },
        NodeRecordMask::LID,
    )?;
    cases.push((
        "Get of a LID that is not there",
        none,
        Some(SaStatusCode::NoRecords),
    ));
    let many = SaRequest::get(tid()).record(&NodeRecord::default(), NodeRecordMask::empty())?;
    cases.push((
        "Get that matches every NodeRecord",
        many,
        Some(SaStatusCode::TooManyRecords),
    ));
    // Multicast: a join without a JoinState, a leave of a group never joined.
    let (gid, _) = {
        let info = port.info()?;
        (
            Gid::from_parts(info.gid_prefix, info.port_guid),
            info.base_lid,
        )
    };
    // Groups of our own test MGIDs (last byte `n`), none of them joined.
    let member = |n: u8, join_state: JoinState| McMemberRecord {
        mgid: Gid([0xff, 0x12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, n]),
        port_gid: gid,
        join_state,
        ..McMemberRecord::default()
    };
    let keys =
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE;
    for (what, req, n, join_state, code) in [
        (
            "join with JoinState 0",
            SaRequest::set(tid()),
            9,
            JoinState::empty(),
            SaStatusCode::ReqInvalid,
        ),
        (
            "leave of a group never joined",
            SaRequest::delete(tid()),
            8,
            JoinState::FULL_MEMBER,
            SaStatusCode::ReqInvalid,
        ),
        (
            "a new group without its Q_Key, P_Key, SL, FlowLabel and TClass",
            SaRequest::set(tid()),
            7,
            JoinState::FULL_MEMBER,
            SaStatusCode::ReqInsufficientComponents,
        ),
    ] {
        cases.push((what, req.record(&member(n, join_state), keys)?, Some(code)));
    }
    // Garbage after a good header: a random NodeRecord query.
    let mut junk =
        SaRequest::get_table(tid()).record(&NodeRecord::default(), NodeRecordMask::LID)?;
    for (i, b) in junk.as_bytes_mut()[56..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(151).wrapping_add(7);
    }
    let junk_status = ask(&junk)?;
    let mut failures = Vec::new();
    for (what, m, want) in &cases {
        match ask(m) {
            Ok(st) if st.is_ok() => failures.push(format!("{what}: answered OK")),
            Ok(st) => {
                if let Some(code) = want {
                    if SaStatusCode::of(st) != Some(*code) {
                        failures.push(format!("{what}: {st:?}, not {code:?}"));
                    }
                }
            }
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    // And the SA still answers.
    let lid = f.lids()?[0].1;
    let good = SaRequest::get(tid()).record(
        &NodeRecord {
            lid,
            ..NodeRecord::default()
        },
        NodeRecordMask::LID,
    )?;
    let r = agent.request(&good, &sa, t, 2)?;
    let rec = rdma::mad::sa::response::<NodeRecord>(r.received_bytes())?;
    check!(
        failures.is_empty() && rec.lid == lid,
        "our SA: {failures:?}; the garbage GetTable got {junk_status:?}; the good Get after them: {rec:?}"
    );
    Ok(Outcome::Passed)
}

/// The SA's ClassPortInfo advertises the PortInfoRecord capability matches
/// that both SMs' SAs serve. Ours advertises MultiPathRecord and
/// TraceRecord only if a TraceRecord query is served (answered with
/// anything but "method or attribute not supported"). OpenSM is not held
/// to that: it advertises MultiPath (CapabilityMask 0x2602 under ibsim)
/// for its MultiPathRecord GetMulti, and leaves a TraceRecord query
/// unanswered.
fn the_sa_serves_what_its_class_port_info_advertises(f: &Fabric) -> TestResult {
    use rdma::mad::sa::{attr_id, cap, cap2};
    use rdma::mad::{class, ClassPortInfo, InvalidField, Mad, MadHeader, Method};
    use rdma::umad::{Address, Port, Registration};
    let ca = rdma::umad::Ca::get("ibsim0")?;
    let port_num = ca.ports.first().map(|p| p.port_num).ok_or("no port")?;
    let port = Port::open(&ca.name, port_num)?;
    let agent = port.register(&Registration::new(class::SUBN_ADM, 2))?;
    let sa = Address::gsi_lid(f.sm_lid);
    let t = Duration::from_millis(500);
    let get = |method: Method, attr: u16| -> Res<Mad> {
        let req = Mad::new(&MadHeader::request(
            class::SUBN_ADM,
            2,
            method,
            agent.next_tid(),
            attr,
        ));
        Ok(agent.request(&req, &sa, t, 2)?.mad)
    };
    let resp = get(Method::GET, attr_id::CLASS_PORT_INFO)?;
    check!(
        resp.status().is_ok(),
        "ClassPortInfo under {}: status {:?}",
        sm_name(),
        resp.status()
    );
    let cpi: ClassPortInfo = resp.attribute()?;
    check!(
        cpi.capability_mask & cap::PORT_INFO_CAP_MASK_MATCH != 0
            && cpi.capability_mask2 & cap2::PORT_INFO_CAP_MASK2_MATCH != 0,
        "{}'s SA serves PortInfoRecord's capability matches but advertises CapabilityMask {:#06x}, CapabilityMask2 {:#010x}",
        sm_name(),
        cpi.capability_mask,
        cpi.capability_mask2
    );
    if sm_name() == "ours" && cpi.capability_mask & cap::MULTI_PATH != 0 {
        let trace = get(Method::GET_TABLE, attr_id::TRACE_RECORD)?;
        let refused = matches!(
            trace.status().invalid_field(),
            InvalidField::MethodNotSupported | InvalidField::MethodAttributeNotSupported
        );
        check!(
            !refused,
            "{}'s SA advertises MultiPath (CapabilityMask {:#06x}) but refuses TraceRecord: {:?}",
            sm_name(),
            cpi.capability_mask,
            trace.status()
        );
    }
    Ok(Outcome::Passed)
}

/// The program `sm` on the command line OpenSM takes: a port GUID (`-g`)
/// that no local port has is refused before anything is sent (so this runs
/// beside the fabric's SM, whichever it is): exit status 1, the GUID named
/// on stderr and in the log file of `-f`. A log file that cannot be opened
/// is refused too.
fn the_sm_program_refuses_a_port_guid_no_port_has(_f: &Fabric) -> TestResult {
    let sm = rdma_tests::example("sm")?;
    let dir = std::env::temp_dir().join(format!("rdma-sm-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log = dir.join("sm.log");
    let mut c = std::process::Command::new(&sm);
    c.args(["-g", "0x1", "-s", "1", "-f"]).arg(&log);
    let out = output_within(c, LIMIT)?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let mut c = std::process::Command::new(&sm);
    c.args(["-f"]).arg(dir.join("no-such-dir").join("sm.log"));
    let unopened = output_within(c, LIMIT)?;
    let _ = std::fs::remove_dir_all(&dir);
    let named = "no local port has GUID 0x0000000000000001";
    check!(
        out.status.code() == Some(1) && stderr.contains(named) && logged.contains(named),
        "sm -g 0x1: {}; stderr:\n{stderr}\nlog file:\n{logged}",
        out.status
    );
    check!(
        unopened.status.code() == Some(1)
            && String::from_utf8_lossy(&unopened.stderr).contains("no-such-dir"),
        "sm -f into a missing directory: {}; stderr:\n{}",
        unopened.status,
        String::from_utf8_lossy(&unopened.stderr)
    );
    Ok(Outcome::Passed)
}

/// The channel dependency graph of the routes the SM programmed, as
/// `ibtracert` follows them between every pair of sampled HCAs: each switch-to-switch
/// egress port a route takes depends on the next one it takes. Under up/down
/// routing (`RDMA_FABRIC_ROUTING=updn`) and fat-tree routing (`ftree`, which
/// is up/down from the top level) it has no cycle, so the routes cannot
/// deadlock. Under minimum hops on the ring it has one: what the test
/// would find if up/down routes had a credit loop.
fn routes_between_hcas_have_no_credit_loop_under_up_down(f: &Fabric) -> TestResult {
    let routing = std::env::var("RDMA_FABRIC_ROUTING").unwrap_or_else(|_| "minhop".into());
    let updn = matches!(routing.split(',').next(), Some("updn" | "ftree"));
    let ring = f.name.starts_with("ring");
    if !updn && !ring {
        return Ok(Outcome::Skipped(format!(
            "routing {routing} promises no loop-free routes, and only the ring is known to loop under minimum hops"
        )));
    }
    // Up to 12 HCAs spread over the fabric (every pair of them: 132
    // traces): on the ring at least two on each switch.
    let (_, cas) = lids_by_kind(f)?;
    let lids = sample(&cas, 12);
    // Channels by (switch name, egress port); each one's successors.
    let mut deps: std::collections::BTreeMap<(String, u8), BTreeSet<(String, u8)>> =
        Default::default();
    for &a in &lids {
        for &b in &lids {
            if a == b {
                continue;
            }
            let trace = tool(f, &["ibtracert", &a.to_string(), &b.to_string()])?;
            let hops = switch_hops(&trace);
            for w in hops.windows(2) {
                deps.entry(w[0].clone()).or_default().insert(w[1].clone());
            }
        }
    }
    let cycle = find_cycle(&deps);
    if updn {
        check!(
            cycle.is_none(),
            "{} under {routing}: a credit loop through {:?}",
            sm_name(),
            cycle
        );
    } else {
        check!(
            cycle.is_some(),
            "{} under {routing} on the ring: no credit loop among {} channel dependencies",
            sm_name(),
            deps.values().map(BTreeSet::len).sum::<usize>()
        );
    }
    Ok(Outcome::Passed)
}

/// A cycle of a dependency graph, if it has one (depth first).
fn find_cycle<T: Ord + Clone>(deps: &std::collections::BTreeMap<T, BTreeSet<T>>) -> Option<Vec<T>> {
    fn visit<T: Ord + Clone>(
        n: &T,
        deps: &std::collections::BTreeMap<T, BTreeSet<T>>,
        way: &mut Vec<T>,
        done: &mut BTreeSet<T>,
    ) -> Option<Vec<T>> {
        if let Some(i) = way.iter().position(|w| w == n) {
            return Some(way[i..].to_vec());
        }
        if done.contains(n) {
            return None;
        }
        way.push(n.clone());
        for m in deps.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, deps, way, done) {
                return Some(c);
            }
        }
        way.pop();
        done.insert(n.clone());
        None
    }
    let mut done = BTreeSet::new();
    deps.keys()
        .find_map(|n| visit(n, deps, &mut Vec::new(), &mut done))
}
