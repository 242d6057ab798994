//! The diagnostics operators run (`ibroute`, `ibtracert`, ...) against the
//! C tools of infiniband-diags, line by line, on every node of the fabric
//! (by LID, by GUID with `-G`, by directed route with `-D` where the tool
//! takes one), with their errors: an unknown LID or GUID, a bad flag.
//! The cases are rows of `compare`'s table; each tool is one test.

use rdma_tests::fabric::{Fabric, FabricTest, NodeKind};
use rdma_tests::{check, Outcome, TestResult};

use crate::compare::norm::Norm::InlineTraffic;
use crate::compare::{compare_group, At, Case, Ctx, Must, Outputs, Over};

const fn c(name: &'static str, tool: &'static str, args: &'static [&'static str]) -> Case {
    Case::new(name, tool, args)
}

/// A LID no port has (the CI fabrics have fewer than 100 ports).
const NO_LID: &str = "999";
/// A GUID no port has.
const NO_GUID: &str = "0x1234";

const IBROUTE: &[Case] = &[
    c("ibroute-{node}", "ibroute", &["{lid}"]).over(Over::Nodes),
    c("ibroute-G-{node}", "ibroute", &["-G", "{guid}"]).over(Over::Nodes),
    c("ibroute-a-{node}", "ibroute", &["-a", "{lid}"]).over(Over::Nodes),
    c("ibroute-n-{node}", "ibroute", &["-n", "{lid}"]).over(Over::Nodes),
    c("ibroute-range-{node}", "ibroute", &["{lid}", "2", "0x4"]).over(Over::Nodes),
    c("ibroute-dr-{path}", "ibroute", &["-D", "{path}"]).over(Over::Paths),
    c("ibroute-M-{node}", "ibroute", &["-M", "{lid}"]).over(Over::Nodes),
    c("ibroute-M-n-{node}", "ibroute", &["-M", "-n", "{lid}"]).over(Over::Nodes),
    c(
        "ibroute-M-v-dr-{path}",
        "ibroute",
        &["-M", "-v", "-D", "{path}"],
    )
    .over(Over::Paths),
    c("ibroute-M-a-dr", "ibroute", &["-M", "-a", "-D", "0,1"]),
    c("ibroute-no-lid", "ibroute", &["-t", "100", NO_LID]).must(Must::Exit(255)),
    c("ibroute-no-guid", "ibroute", &["-G", NO_GUID]).must(Must::Exit(255)),
    c("ibroute-bad-flag", "ibroute", &["-Z", "1"]).must(Must::Exit(2)),
    c("ibroute-no-dest", "ibroute", &[]).must(Must::Exit(2)),
];

const IBTRACERT: &[Case] = &[
    c(
        "ibtracert-{node}-{node2}",
        "ibtracert",
        &["{lid}", "{lid2}"],
    )
    .over(Over::Pairs),
    c(
        "ibtracert-n-{node}-{node2}",
        "ibtracert",
        &["-n", "{lid}", "{lid2}"],
    )
    .over(Over::Pairs),
    c(
        "ibtracert-G-{node}-{node2}",
        "ibtracert",
        &["-G", "{guid}", "{guid2}"],
    )
    .over(Over::Pairs),
    c(
        "ibtracert-no-lid",
        "ibtracert",
        &["-t", "100", "{sm}", NO_LID],
    )
    .must(Must::Exit(255)),
    c("ibtracert-no-guid", "ibtracert", &["-G", NO_GUID, NO_GUID]).must(Must::Exit(255)),
    c("ibtracert-bad-flag", "ibtracert", &["-Z", "1", "2"]).must(Must::Exit(2)),
    c("ibtracert-no-dr", "ibtracert", &["-D", "0", "0,1"]).must(Must::Exit(2)),
    c("ibtracert-one-port", "ibtracert", &["1"]).must(Must::Exit(2)),
];

const IBADDR: &[Case] = &[
    c("ibaddr", "ibaddr", &[]).at(At::Hosts),
    c("ibaddr-{node}", "ibaddr", &["{lid}"]).over(Over::Nodes),
    c("ibaddr-{node}-1", "ibaddr", &["{lid}", "1"]).over(Over::Nodes),
    c("ibaddr-G-{node}", "ibaddr", &["-G", "{guid}"]).over(Over::Nodes),
    c("ibaddr-l-{node}", "ibaddr", &["-l", "{lid}"]).over(Over::Nodes),
    c("ibaddr-L-{node}", "ibaddr", &["-L", "{lid}"]).over(Over::Nodes),
    c("ibaddr-g-{node}", "ibaddr", &["-g", "{lid}"]).over(Over::Nodes),
    c("ibaddr-dr-{path}", "ibaddr", &["-D", "{path}"]).over(Over::Paths),
    c("ibaddr-no-lid", "ibaddr", &["-t", "100", NO_LID]).must(Must::Exit(255)),
    c("ibaddr-no-guid", "ibaddr", &["-G", NO_GUID]).must(Must::Exit(255)),
    c("ibaddr-bad-flag", "ibaddr", &["-Z"]).must(Must::Exit(2)),
];

const IBPORTSTATE: &[Case] = &[
    c("ibportstate-{node}-0", "ibportstate", &["{lid}", "0"]).over(Over::Nodes),
    c("ibportstate-{node}-1", "ibportstate", &["{lid}", "1"]).over(Over::Hcas),
    c(
        "ibportstate-{node}-2",
        "ibportstate",
        &["{lid}", "2", "query"],
    )
    .over(Over::Hcas),
    c(
        "ibportstate-G-{node}-1",
        "ibportstate",
        &["-G", "{guid}", "1"],
    )
    .over(Over::Hcas),
    // The peer of an active switch port addressed by LID is asked for
    // along a route LID routed to the switch, then directed (DrSLID this
    // port's LID): ibsim answers no such SMP, and both tools time out
    // alike (LIDs 1 to 3 only: each waits out the retries, 100 ms a try).
    // By directed route the peer is shown.
    c(
        "ibportstate-lid-{lid}-1",
        "ibportstate",
        &["-t", "100", "{lid}", "1"],
    )
    .over(Over::Lids),
    c(
        "ibportstate-dr-{path}-1",
        "ibportstate",
        &["-D", "{path}", "1"],
    )
    .over(Over::Paths),
    c(
        "ibportstate-dr-{path}-3",
        "ibportstate",
        &["-D", "{path}", "3"],
    )
    .over(Over::Paths),
    c("ibportstate-{node}-99", "ibportstate", &["{lid}", "99"]).over(Over::Nodes),
    // Sets that change nothing: the widths and speeds enabled set to
    // those supported (255 and 15), on a CA where no SM and no client
    // runs; the answer is shown after the Set.
    c(
        "ibportstate-width",
        "ibportstate",
        &["{ca_lid}", "1", "width", "255"],
    ),
    c(
        "ibportstate-speed",
        "ibportstate",
        &["{ca_lid}", "1", "speed", "15"],
    ),
    c(
        "ibportstate-no-lid",
        "ibportstate",
        &["-t", "100", NO_LID, "1"],
    )
    .must(Must::Exit(255)),
    c("ibportstate-no-guid", "ibportstate", &["-G", NO_GUID, "1"]).must(Must::Exit(255)),
    c("ibportstate-bad-op", "ibportstate", &["{sm}", "1", "foo"]).must(Must::Exit(255)),
    c(
        "ibportstate-bad-speed",
        "ibportstate",
        &["{sm}", "1", "speed", "99"],
    )
    .must(Must::Exit(255)),
    c(
        "ibportstate-two-ops",
        "ibportstate",
        &["{sm}", "1", "query", "arm"],
    )
    .must(Must::Exit(255)),
    c("ibportstate-no-value", "ibportstate", &["{sm}", "1", "lid"]).must(Must::Exit(255)),
    c("ibportstate-no-port", "ibportstate", &["{sm}"]).must(Must::Exit(2)),
    c("ibportstate-bad-flag", "ibportstate", &["-Z", "1", "1"]).must(Must::Exit(2)),
];

/// iblinkinfo over the whole fabric, and by `-D` the local node. Not
/// compared: `-S`/`-G` and `-D` of another node, for which the C tool
/// sweeps one hop from that node only; under ibsim the return of its
/// SMPs beyond the node times out (a CA's peer is then "Port not
/// available") or, from a switch's GUID, the C tool does not finish.
const IBLINKINFO: &[Case] = &[
    c("iblinkinfo", "iblinkinfo", &[])
        .at(At::Hosts)
        .must(Must::Exit(0)),
    c("iblinkinfo-l", "iblinkinfo", &["-l"]),
    c("iblinkinfo-p", "iblinkinfo", &["-p"]),
    c("iblinkinfo-d", "iblinkinfo", &["-d"]),
    c("iblinkinfo-l-d", "iblinkinfo", &["-l", "-d"]),
    c("iblinkinfo-switches", "iblinkinfo", &["--switches-only"]),
    c("iblinkinfo-cas", "iblinkinfo", &["--cas-only", "-l"]),
    c("iblinkinfo-dr", "iblinkinfo", &["-D", "0"]).must(Must::Exit(0)),
    c(
        "iblinkinfo-dr-cas",
        "iblinkinfo",
        &["-D", "0", "--cas-only"],
    ),
    // Unknown GUID: "Failed to find port" on stderr, exit status 0.
    c("iblinkinfo-no-guid", "iblinkinfo", &["-S", NO_GUID]).must(Must::Exit(0)),
    c("iblinkinfo-no-dr", "iblinkinfo", &["-D", "0,99"]).must(Must::Exit(1)),
    // A route that does not parse: the C tool warns and shows the local
    // node.
    c("iblinkinfo-bad-dr", "iblinkinfo", &["-D", "x"]).must(Must::Exit(0)),
    c("iblinkinfo-bad-flag", "iblinkinfo", &["-Z"]).must(Must::Exit(2)),
];

/// dump_fts (and dump_lfts, the script that runs it): every switch's
/// tables, read along the route the sweep found it by.
const DUMP_FTS: &[Case] = &[
    c("dump_fts", "dump_fts", &[])
        .at(At::Hosts)
        .must(Must::Exit(0)),
    c("dump_fts-a", "dump_fts", &["-a"]),
    c("dump_fts-n", "dump_fts", &["-n"]),
    c("dump_fts-range", "dump_fts", &["2", "0x4"]),
    c("dump_fts-M", "dump_fts", &["-M"]),
    c("dump_fts-M-n", "dump_fts", &["-M", "-n"]),
    c(
        "dump_fts-M-a-v",
        "dump_fts",
        &["-M", "-a", "-v", "0xc000", "0xc010"],
    ),
    c("dump_fts-bad-flag", "dump_fts", &["-Z"]).must(Must::Exit(2)),
    c("dump_lfts", "dump_lfts", &[]).must(Must::Exit(0)),
    c("dump_lfts-n", "dump_lfts", &["-n"]),
    // The script's status is its last echo's: 0 after dump_fts failed.
    c("dump_lfts-bad-flag", "dump_lfts", &["-Z"]).must(Must::Exit(0)),
];

/// What sets the error counters of [`ibqueryerrors`] again (written by
/// it into the run folder, where the commands run).
const INJECT: &[&str] = &["sh", "ibqueryerrors-inject.sh"];

/// ibqueryerrors, with errors set on a switch port and two CAs' ports
/// (ibsim's `PerformanceSet`) after every counter was cleared (the
/// comparisons of error paths before leave PortRcvSwitchRelayErrors on the
/// switches). `-k`/`-K` clear what they read: the counters are cleared and
/// set again between the C tool and ours. Not compared: `-G` of
/// another node and `-D` beyond the first node, for which the C tool
/// sweeps one hop only (see [`IBLINKINFO`]).
const IBQUERYERRORS: &[Case] = &[
    c("ibqueryerrors", "ibqueryerrors", &[])
        .at(At::Hosts)
        .must(Must::Exit(1)),
    c("ibqueryerrors-r", "ibqueryerrors", &["-r"]),
    c("ibqueryerrors-details", "ibqueryerrors", &["--details"]),
    c(
        "ibqueryerrors-s",
        "ibqueryerrors",
        &["-s", "SymbolErrorCounter,PortXmitDiscards"],
    ),
    c("ibqueryerrors-c", "ibqueryerrors", &["-c"]),
    c("ibqueryerrors-switch", "ibqueryerrors", &["--switch"]),
    c("ibqueryerrors-ca", "ibqueryerrors", &["--ca", "-r"]),
    c("ibqueryerrors-dr", "ibqueryerrors", &["-D", "0"]),
    c(
        "ibqueryerrors-thresholds",
        "ibqueryerrors",
        &["--threshold-file", "/nonexistent"],
    ),
    // The data counters: the flow counters move with every MAD (normalised);
    // the unicast and multicast ones are the injected values, compared.
    c("ibqueryerrors-data", "ibqueryerrors", &["--data"])
        .norm(&[InlineTraffic])
        .must(Must::Exit(1)),
    c(
        "ibqueryerrors-counters-r",
        "ibqueryerrors",
        &["--counters", "-r"],
    )
    .norm(&[InlineTraffic])
    .must(Must::Exit(0)),
    c("ibqueryerrors-no-guid", "ibqueryerrors", &["-G", NO_GUID]).must(Must::Exit(0)),
    c("ibqueryerrors-k", "ibqueryerrors", &["-k"])
        .before_each(INJECT)
        .must(Must::Exit(1)),
    c("ibqueryerrors-after-k", "ibqueryerrors", &[]).must(Must::Exit(0)),
    c(
        "ibqueryerrors-k-K-details",
        "ibqueryerrors",
        &["-k", "-K", "--details"],
    )
    .before_each(INJECT),
    // Last: the SMPs of a route that leads nowhere count as the first
    // switch's PortRcvSwitchRelayErrors. No summary, exit status 0.
    c("ibqueryerrors-no-dr", "ibqueryerrors", &["-D", "0,99"]).must(Must::Exit(0)),
    c("ibqueryerrors-bad-flag", "ibqueryerrors", &["-Z"]).must(Must::Exit(2)),
];

/// ibhosts, ibswitches and ibnodes (ibnetdiscover's topology, listed).
const LISTS: &[Case] = &[
    c("ibhosts", "ibhosts", &[])
        .at(At::Hosts)
        .must(Must::Exit(0)),
    // -C and -t passed on to ibnetdiscover (not -P: the first node is a
    // switch on some fabrics, with port 0 only, and our ibnetdiscover
    // words the failure to open a port otherwise than the C one).
    c("ibhosts-C", "ibhosts", &["-C", "ibsim0", "-t", "500"]).must(Must::Exit(0)),
    c("ibhosts-bad-flag", "ibhosts", &["-Z"]).must(Must::Exit(255)),
    c("ibhosts-two-files", "ibhosts", &["a", "b"]).must(Must::Exit(255)),
    c("ibhosts-no-value", "ibhosts", &["-C"]).must(Must::Exit(255)),
    c("ibswitches", "ibswitches", &[])
        .at(At::Hosts)
        .must(Must::Exit(0)),
    c("ibswitches-t", "ibswitches", &["-t", "500"]),
    c("ibswitches-bad-flag", "ibswitches", &["-Z"]).must(Must::Exit(255)),
    c("ibnodes", "ibnodes", &[])
        .at(At::Hosts)
        .must(Must::Exit(0)),
    c("ibnodes-bad-flag", "ibnodes", &["-Z"]).must(Must::Exit(255)),
    c("ibnodes-no-file", "ibnodes", &["/nonexistent"]).must(Must::Exit(1)),
];

/// The tests of this module.
pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "diags::ibroute",
        run: ibroute,
    },
    FabricTest {
        name: "diags::ibtracert",
        run: ibtracert,
    },
    FabricTest {
        name: "diags::ibaddr",
        run: ibaddr,
    },
    FabricTest {
        name: "diags::ibportstate",
        run: ibportstate,
    },
    FabricTest {
        name: "diags::iblinkinfo",
        run: iblinkinfo,
    },
    FabricTest {
        name: "diags::dump_fts",
        run: dump_fts,
    },
    FabricTest {
        name: "diags::ibqueryerrors",
        run: ibqueryerrors,
    },
    FabricTest {
        name: "diags::ibhosts_ibswitches_ibnodes",
        run: lists,
    },
];

fn outputs(f: &Fabric, group: &[Case]) -> Result<Outputs, Box<dyn std::error::Error>> {
    let ctx = Ctx::new(f)?.with_ports()?;
    compare_group(&ctx, group)
}

/// How many outputs end with a line that `last` takes and exit status 0.
fn ending(outs: &Outputs, last: impl Fn(&str) -> bool) -> usize {
    outs.iter()
        .filter(|(_, r)| {
            let mut l = r.text.lines().rev();
            l.next() == Some("exit status 0") && l.next().is_some_and(&last)
        })
        .count()
}

/// ibroute; the comparisons must have covered every switch's table, by
/// LID and by GUID, with destinations resolved.
fn ibroute(f: &Fabric) -> TestResult {
    let outs = outputs(f, IBROUTE)?;
    let tables = ending(&outs, |l| l.ends_with(" lids dumped "));
    // -a, -n, by LID, by GUID and the range, on each switch.
    check!(
        tables >= 5 * f.switches(),
        "{tables} unicast tables dumped by the C tool, {} switches",
        f.switches()
    );
    let resolved = outs
        .iter()
        .any(|(_, r)| r.text.contains(": (Channel Adapter portguid 0x"));
    check!(resolved, "no destination resolved to a CA in any table");
    check!(
        ending(&outs, |l| l.ends_with("mlids dumped ")) >= 2 * f.switches(),
        "too few multicast tables dumped"
    );
    Ok(Outcome::Passed)
}

/// ibtracert; the C tool must have found the routes between CAs (a route
/// through at least one switch to a CA's `To` line).
fn ibtracert(f: &Fabric) -> TestResult {
    let outs = outputs(f, IBTRACERT)?;
    let routes = outs
        .iter()
        .filter(|(_, r)| {
            r.text.lines().any(|l| l.starts_with("To ca "))
                && r.text.lines().any(|l| l.contains("-> switch port {0x"))
        })
        .count();
    check!(routes >= 3, "only {routes} routes from CA to CA traced");
    Ok(Outcome::Passed)
}

/// ibaddr; every node compared must have its address shown by LID and by
/// GUID.
fn ibaddr(f: &Fabric) -> TestResult {
    let outs = outputs(f, IBADDR)?;
    let shown = outs
        .iter()
        .filter(|(_, r)| r.text.starts_with("GID fe80::") && r.text.contains(" LID start 0x"))
        .count();
    let nodes = crate::compare::nodes_compared(f);
    check!(
        shown >= 2 * nodes,
        "{shown} addresses shown by the C tool, {nodes} nodes compared"
    );
    Ok(Outcome::Passed)
}

/// ibportstate; the peers of active switch ports and the Sets must have
/// been shown.
fn ibportstate(f: &Fabric) -> TestResult {
    let outs = outputs(f, IBPORTSTATE)?;
    let peers = outs
        .iter()
        .filter(|(_, r)| r.text.contains("\nPeer PortInfo:\n# Port info: DR path "))
        .count();
    check!(peers >= 1, "no peer of a switch port shown");
    let sets = outs
        .iter()
        .filter(|(_, r)| r.text.contains("\nAfter PortInfo set:\n"))
        .count();
    check!(sets == 2, "{sets} Sets shown by the C tool, 2 asked");
    Ok(Outcome::Passed)
}

/// iblinkinfo; the C tool's output from the first node must have shown
/// every switch, and every port of a switch that is linked.
fn iblinkinfo(f: &Fabric) -> TestResult {
    let outs = outputs(f, IBLINKINFO)?;
    let (_, all) = outs
        .iter()
        .find(|(n, _)| n.starts_with("iblinkinfo@"))
        .ok_or("no iblinkinfo comparison")?;
    let switches = all
        .text
        .lines()
        .filter(|l| l.starts_with("Switch: 0x"))
        .count();
    check!(
        switches == f.switches(),
        "iblinkinfo showed {switches} switches; the net file has {}",
        f.switches()
    );
    let links = all.text.matches(" Active/  LinkUp)==> ").count();
    check!(
        links >= 2 * f.hcas(),
        "iblinkinfo showed {links} active links, {} CAs",
        f.hcas()
    );
    Ok(Outcome::Passed)
}

/// dump_fts and dump_lfts; the C tool's dump from the first node must
/// have shown every switch's unicast table, with destinations resolved.
fn dump_fts(f: &Fabric) -> TestResult {
    let outs = outputs(f, DUMP_FTS)?;
    let (_, all) = outs
        .iter()
        .find(|(n, _)| n.starts_with("dump_fts@"))
        .ok_or("no dump_fts comparison")?;
    let tables = all.text.matches(" valid lids dumped \n").count();
    check!(
        tables == f.switches(),
        "dump_fts dumped {tables} tables; the net file has {} switches",
        f.switches()
    );
    check!(
        all.text.contains(": (Channel Adapter portguid 0x"),
        "no destination resolved to a CA"
    );
    Ok(Outcome::Passed)
}

/// ibqueryerrors: errors set (ibsim's `PerformanceSet`, by the script
/// [`INJECT`] runs) on port 1 of the first switch and of the first and the
/// last CA, after every counter was cleared; the C tool's report from the
/// first node must show each of them.
fn ibqueryerrors(f: &Fabric) -> TestResult {
    let ctx = Ctx::new(f)?.with_ports()?;
    let sw = f.first(NodeKind::Switch).ok_or("no switch")?;
    let cas: Vec<&str> = f
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Hca)
        .map(|n| n.name.as_str())
        .collect();
    let (first, last) = match cas.as_slice() {
        [a, .., b] => (*a, *b),
        _ => return Err("fewer than two CAs".into()),
    };
    let lid = |name: &str| {
        ctx.ports
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.lid)
            .ok_or_else(|| format!("{name}: no LID"))
    };
    let set = [
        (sw.name.as_str(), "SymbolErrorCounter", 5),
        (sw.name.as_str(), "LinkDownedCounter", 1),
        (first, "PortXmitDiscards", 3),
        (first, "PortRcvErrors", 2),
        (last, "PortRcvSwitchRelayErrors", 4),
    ];
    // Data counters that no MAD moves (ibsim counts flow only), shown by
    // --data and --counters with the C tool's scaling. (Not
    // PortMulticastRcvPkts: ibsim sets it but its PMA answers 0.)
    let data: [(&str, &str, u64); 3] = [
        (first, "PortUnicastXmitPkts", 5_000_000),
        (first, "PortMultiCastXmitPkts", 1_088),
        (sw.name.as_str(), "PortUnicastRcvPkts", 123_456_789_012),
    ];
    let mut script = String::from("set -e\nibqueryerrors -k -K >/dev/null || true\n");
    for (node, counter, v) in set {
        script += &format!(
            "echo 'PerformanceSet \"{node}\"[1] PortCounters.{counter}={v}' > \"$RDMA_FABRIC_CONSOLE\"\n"
        );
    }
    for (node, counter, v) in data {
        script += &format!(
            "echo 'PerformanceSet \"{node}\"[1] PortCountersExtended.{counter}={v}' > \"$RDMA_FABRIC_CONSOLE\"\n"
        );
    }
    // ibsim reads its console when it gets to it: wait (up to 10 s) until
    // the last one is set.
    script += &format!(
        "i=0\nuntil perfquery {} 1 | grep -q '^PortRcvSwitchRelayErrors:\\.*4$'; do\n  i=$((i+1)); [ $i -lt 200 ]; sleep 0.05\ndone\n",
        lid(last)?
    );
    std::fs::write(f.dir.join("ibqueryerrors-inject.sh"), script)?;
    let mut inject = f.command(INJECT[0], None);
    inject.args(&INJECT[1..]);
    let out = rdma_tests::fabric::output_within(inject, std::time::Duration::from_secs(30))?;
    check!(out.status.success(), "the errors were not set: {out:?}");
    let outs = compare_group(&ctx, IBQUERYERRORS)?;
    let (_, all) = outs
        .iter()
        .find(|(n, _)| n.starts_with("ibqueryerrors@"))
        .ok_or("no ibqueryerrors comparison")?;
    for (node, counter, v) in set {
        check!(
            all.text.contains(&format!("[{counter} == {v}]")),
            "{node}: {counter} == {v} not reported:\n{}",
            all.text
        );
    }
    let (_, counters) = outs
        .iter()
        .find(|(n, _)| *n == "ibqueryerrors-counters-r")
        .ok_or("no ibqueryerrors --counters comparison")?;
    for (node, shown) in [
        (first, "[PortUnicastXmitPkts == 5000000 (4.768M)]"),
        (first, "[PortMulticastXmitPkts == 1088 (1.062K)]"),
        (
            sw.name.as_str(),
            "[PortUnicastRcvPkts == 123456789012 (114.978G)]",
        ),
    ] {
        // In the node's own block: from its header to the next one.
        let block = counters
            .text
            .split("Data Counters for ")
            .find(|b| {
                b.lines()
                    .next()
                    .is_some_and(|h| h.ends_with(&format!("\"{node}\"")))
            })
            .unwrap_or("");
        check!(
            block.contains(shown),
            "{node}: {shown} not reported in its block:\n{}",
            counters.text
        );
    }
    Ok(Outcome::Passed)
}

/// ibhosts, ibswitches, ibnodes; every node of the net file listed.
fn lists(f: &Fabric) -> TestResult {
    let outs = outputs(f, LISTS)?;
    let (_, nodes) = outs
        .iter()
        .find(|(n, _)| n.starts_with("ibnodes@"))
        .ok_or("no ibnodes comparison")?;
    let cas = nodes
        .text
        .lines()
        .filter(|l| l.starts_with("Ca\t: 0x"))
        .count();
    let sws = nodes
        .text
        .lines()
        .filter(|l| l.starts_with("Switch\t: 0x"))
        .count();
    check!(
        (cas, sws) == (f.hcas(), f.switches()),
        "ibnodes listed {cas} CAs and {sws} switches; the net file has {} and {}",
        f.hcas(),
        f.switches()
    );
    Ok(Outcome::Passed)
}
