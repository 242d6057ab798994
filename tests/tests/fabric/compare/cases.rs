//! The table: every comparison of an example with its C tool, by group
//! (one test each, run in this order; the SM must still be there at the
//! end).

use rdma_tests::fabric::{Fabric, FabricTest, NodeKind};
use rdma_tests::{check, Outcome, TestResult};

use super::norm::Norm::{Activity, Generated, LinkTail, PathTail, PingTime, Traffic};
use super::{compare_group, group_test, At, Case, Ctx, Must, Over};

const fn c(name: &'static str, tool: &'static str, args: &'static [&'static str]) -> Case {
    Case::new(name, tool, args)
}

/// `umad_info` against `ibstat`, from the first node, the first switch and
/// HCA and the last node.
const fn ib_stat(name: &'static str, args: &'static [&'static str]) -> Case {
    c(name, "ibstat", args).ours("umad_info").at(At::Hosts)
}

const IBSTAT: &[Case] = &[
    ib_stat("ibstat", &[]),
    ib_stat("ibstat-l", &["-l"]),
    ib_stat("ibstat-s", &["-s"]),
    ib_stat("ibstat-p", &["-p"]),
    ib_stat("ibstat-ca", &["ibsim0"]),
    ib_stat("ibstat-ca-port", &["ibsim0", "{port}"]),
    ib_stat("ibstat-s-ca-port", &["-s", "ibsim0", "{port}"]),
    ib_stat("ibstat-no-port", &["ibsim0", "9"]),
];

const PERFQUERY: &[Case] = &[
    c("perfquery", "perfquery", &[]).norm(&[Traffic]),
    c("perfquery-lid", "perfquery", &["{sm}", "1"]).norm(&[Traffic]),
    c("perfquery-x", "perfquery", &["-x"]).norm(&[Traffic]),
    c("perfquery-x-lid", "perfquery", &["-x", "{sm}", "1"]).norm(&[Traffic]),
    c("perfquery-a", "perfquery", &["-a", "{sm}"]).norm(&[Traffic]),
    c("perfquery-l", "perfquery", &["-l", "{sm}"]).norm(&[Traffic]),
    // -r resets after reading, so the second reader sees what came after
    // the first: both start from counters reset first (errors a test left,
    // such as the discards of a link taken down, would otherwise differ).
    c("perfquery-r", "perfquery", &["-r", "{sm}", "1"])
        .norm(&[Traffic])
        .before(&["perfquery", "-R", "{sm}", "1"]),
    c("perfquery-R", "perfquery", &["-R", "{sm}", "1"]),
    c("perfquery-x-a", "perfquery", &["-x", "-a", "{sm}"]).norm(&[Traffic]),
    c("perfquery-x-l", "perfquery", &["-x", "-l", "{sm}"]).norm(&[Traffic]),
    c("perfquery-x-r", "perfquery", &["-x", "-r", "{sm}", "1"])
        .norm(&[Traffic])
        .before(&["perfquery", "-x", "-R", "{sm}", "1"]),
    c("perfquery-ports", "perfquery", &["{sm}", "1,2"]).norm(&[Traffic]),
    c("perfquery-range-a", "perfquery", &["-a", "{sm}", "1-2"]).norm(&[Traffic]),
    // PortSamplesControl, which ibsim does not simulate: it hands the MAD to
    // a client of the target port that is its node's SM, and umad2sim
    // crashes a process that has no agent of the class (sent to the SM's
    // port, it kills the SM). So it goes to a CA where no SM and no client
    // runs, from a tool attached there and from one at the SM's node: both
    // tools time out alike.
    c("perfquery-c", "perfquery", &["-c"])
        .at(At::QuietCa)
        .must(Must::Exit(255)),
    c("perfquery-c-lid", "perfquery", &["-c", "{ca_lid}", "1"]).must(Must::Exit(255)),
];

const SMINFO: &[Case] = &[
    c("sminfo", "sminfo", &[])
        .norm(&[Activity])
        .must(Must::Exit(0)),
    c("sminfo-lid", "sminfo", &["{sm}"])
        .norm(&[Activity])
        .must(Must::Exit(0)),
    c("sminfo-dr", "sminfo", &["-D", "0"])
        .norm(&[Activity])
        .must(Must::Exit(0)),
    c("sminfo-dr-1", "sminfo", &["-D", "0,1"]).norm(&[Activity]),
];

const fn lids(name: &'static str, args: &'static [&'static str]) -> Case {
    c(name, "smpquery", args).over(Over::Lids)
}

const fn paths(name: &'static str, args: &'static [&'static str]) -> Case {
    c(name, "smpquery", args).over(Over::Paths)
}

const SMPQUERY: &[Case] = &[
    lids("smpquery-nodeinfo-{lid}", &["nodeinfo", "{lid}"]),
    lids("smpquery-nodedesc-{lid}", &["nodedesc", "{lid}"]),
    lids("smpquery-portinfo-{lid}", &["portinfo", "{lid}"]),
    lids("smpquery-switchinfo-{lid}", &["switchinfo", "{lid}"]),
    lids("smpquery-pkeys-{lid}", &["pkeys", "{lid}"]),
    lids("smpquery-sl2vl-{lid}", &["sl2vl", "{lid}"]),
    lids("smpquery-vlarb-{lid}", &["vlarb", "{lid}"]),
    lids("smpquery-guids-{lid}", &["guids", "{lid}"]),
    lids("smpquery-GUIDInfo-{lid}", &["GUIDInfo", "{lid}"]),
    lids("smpquery-portinfo-{lid}-1", &["portinfo", "{lid}", "1"]),
    lids(
        "smpquery-portinfo-x-{lid}-1",
        &["-x", "portinfo", "{lid}", "1"],
    ),
    lids("smpquery-NI-{lid}", &["NI", "{lid}"]),
    lids("smpquery-pkeys-{lid}-1", &["pkeys", "{lid}", "1"]),
    lids("smpquery-vlarb-{lid}-1", &["vlarb", "{lid}", "1"]),
    paths("smpquery-nodeinfo-dr-{path}", &["-D", "nodeinfo", "{path}"]),
    paths("smpquery-nodedesc-dr-{path}", &["-D", "nodedesc", "{path}"]),
    paths("smpquery-portinfo-dr-{path}", &["-D", "portinfo", "{path}"]),
    paths(
        "smpquery-switchinfo-dr-{path}",
        &["-D", "switchinfo", "{path}"],
    ),
    paths("smpquery-pkeys-dr-{path}", &["-D", "pkeys", "{path}"]),
    paths("smpquery-sl2vl-dr-{path}", &["-D", "sl2vl", "{path}"]),
    paths("smpquery-vlarb-dr-{path}", &["-D", "vlarb", "{path}"]),
    paths(
        "smpquery-portinfo-dr-{path}-1",
        &["-D", "portinfo", "{path}", "1"],
    ),
];

/// An SA query: the C tool must succeed.
const fn sa(name: &'static str, args: &'static [&'static str]) -> Case {
    c(name, "saquery", args).must(Must::Exit(0))
}

const SAQUERY: &[Case] = &[
    sa("saquery", &[]),
    sa("saquery-NR", &["NodeRecord"]),
    sa("saquery-lid-{lid}", &["{lid}"]).over(Over::Lids),
    sa("saquery-PIR-{lid}", &["PortInfoRecord", "{lid}"]).over(Over::Lids),
    sa("saquery-PIR-{lid}-1", &["PIR", "{lid}/1"]).over(Over::Lids),
    sa("saquery-LR-{lid}", &["LinkRecord", "{lid}"])
        .over(Over::Lids)
        .norm(&[LinkTail]),
    sa("saquery-PIR", &["PortInfoRecord"]),
    sa("saquery-p", &["-p"]).norm(&[PathTail]),
    sa("saquery-PR", &["PR"]).norm(&[PathTail]),
    sa("saquery-src-to-dst", &["--src-to-dst", "{sm}:2"]),
    sa("saquery-src-to-dst-2-3", &["--src-to-dst", "2:3"]),
    sa("saquery-slid", &["-p", "--slid", "2"]).norm(&[PathTail]),
    sa("saquery-g", &["-g"]),
    sa("saquery-m", &["-m"]),
    sa("saquery-m-mlid", &["-m", "0xc000"]),
    sa("saquery-MCMR", &["MCMemberRecord"]),
    sa("saquery-LR", &["LinkRecord"]).norm(&[LinkTail]),
    sa("saquery-x", &["-x"]).norm(&[LinkTail]),
    // Both SAs keep ServiceRecords (none registered here): exit 0.
    sa("saquery-SR", &["SR"]).must(Must::Exit(0)),
    sa("saquery-S", &["-S"]).must(Must::Exit(0)),
    sa("saquery-c", &["-c"]),
    sa("saquery-CPI", &["ClassPortInfo"]),
    sa("saquery-name", &["--src-to-dst", "{name}:2"]),
    sa("saquery-N", &["-N"]),
    sa("saquery-N-name", &["-N", "{name}"]),
    sa("saquery-D", &["-D"]),
    sa("saquery-s", &["-s"]),
];

/// Against our server at the last CA (see [`ibping`]).
const IBPING: &[Case] = &[
    c("ibping", "ibping", &["-c", "2", "{pong_lid}"])
        .norm(&[PingTime])
        .must(Must::Line("2 packets transmitted, 2 received")),
    c("ibping-flood", "ibping", &["-f", "-c", "20", "{pong_lid}"]).norm(&[PingTime]),
];

const IBNETDISCOVER: &[Case] = &[
    c("ibnetdiscover", "ibnetdiscover", &[]).norm(&[Generated]),
    c("ibnetdiscover-l", "ibnetdiscover", &["-l"]),
    c("ibnetdiscover-S", "ibnetdiscover", &["-S"]),
    c("ibnetdiscover-H", "ibnetdiscover", &["-H"]),
];

/// The SM is still there at the end: every comparison above had it.
const AT_THE_END: &[Case] = &[c("sminfo-at-the-end", "sminfo", &[])
    .norm(&[Activity])
    .must(Must::Exit(0))];

/// The tests of the table, in its order.
pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "compare::ibstat",
        run: ibstat,
    },
    FabricTest {
        name: "compare::perfquery",
        run: |f| group_test(f, PERFQUERY),
    },
    FabricTest {
        name: "compare::sminfo",
        run: |f| group_test(f, SMINFO),
    },
    FabricTest {
        name: "compare::smpquery",
        run: |f| group_test(f, SMPQUERY),
    },
    FabricTest {
        name: "compare::saquery",
        run: |f| group_test(f, SAQUERY),
    },
    FabricTest {
        name: "compare::ibping",
        run: ibping,
    },
    FabricTest {
        name: "compare::ibnetdiscover",
        run: |f| group_test(f, IBNETDISCOVER),
    },
    FabricTest {
        name: "compare::sm_is_still_there",
        run: |f| group_test(f, AT_THE_END),
    },
];

/// The ibstat comparisons, and what they must have covered: a switch shown
/// as one, and on the ring (whose HCA links have mixed widths and speeds,
/// ci/topology.py) its first HCA's 1x SDR link, which ibstat prints as 2.5.
fn ibstat(f: &Fabric) -> TestResult {
    let ctx = Ctx::new(f)?;
    let outs = compare_group(&ctx, IBSTAT)?;
    check!(outs.len() >= 16, "only {} comparisons", outs.len());
    if let Some(sw) = f.first(NodeKind::Switch) {
        let (_, run) = outs
            .iter()
            .find(|(n, _)| *n == format!("ibstat@{}", sw.name))
            .ok_or("no ibstat comparison at the first switch")?;
        check!(
            run.text.starts_with("Switch 'ibsim0'\n\tSwitch type: "),
            "{}: {}",
            sw.name,
            run.text
        );
    }
    if f.name == "ring" {
        let rates: std::collections::BTreeSet<&str> = outs
            .iter()
            .flat_map(|(_, r)| r.text.lines())
            .filter_map(|l| l.trim().strip_prefix("Rate: "))
            .collect();
        check!(
            rates.contains("2.5"),
            "no 1x SDR port compared on the ring: rates {rates:?}"
        );
    }
    Ok(Outcome::Passed)
}

/// ibping: under ibsim a request to QP1 reaches only a client that is its
/// node's SM (on a node where no SM runs). Our server claims that role
/// (`--sm`: the issm device, as OpenSM opens it, once its agents are
/// registered) at the last CA of the net file, and the C client and ours
/// ping it; the C client must get its pongs (`Must::Line`). (The C server cannot be used:
/// made the node's SM with SIM_SET_ISSM=1, umad2sim crashes it on the first
/// SMP that OpenSM sends it, for which it has no agent.)
fn ibping(f: &Fabric) -> TestResult {
    let ctx = Ctx::new(f)?;
    let (node, _) = ctx.pong.clone().ok_or("no CA with a LID in the net file")?;
    let mut server = f.command(rdma_tests::example("ibping")?, Some(&node));
    server
        .args(["-S", "--sm"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = server.spawn()?;
    let mut stop = rdma_tests::Defer::new();
    stop.push("stopping the ibping server", move || {
        let _ = child.kill();
        let _ = child.wait();
        0
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    compare_group(&ctx, IBPING)?;
    Ok(Outcome::Passed)
}
