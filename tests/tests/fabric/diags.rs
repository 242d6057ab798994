//! The diagnostics operators run (`ibroute`, `ibtracert`, ...) against the
//! C tools of infiniband-diags, line by line, on every node of the fabric
//! (by LID, by GUID with `-G`, by directed route with `-D` where the tool
//! takes one), with their errors: an unknown LID or GUID, a bad flag.
//! The cases are rows of `compare`'s table; each tool is one test.

use rdma_tests::fabric::{Fabric, FabricTest};
use rdma_tests::{check, Outcome, TestResult};

use crate::compare::{compare_group, Case, Ctx, Must, Outputs, Over};

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
    c("ibroute-M-v-dr-{path}", "ibroute", &["-M", "-v", "-D", "{path}"]).over(Over::Paths),
    c("ibroute-M-a-dr", "ibroute", &["-M", "-a", "-D", "0,1"]),
    c("ibroute-no-lid", "ibroute", &["-t", "100", NO_LID]).must(Must::Exit(255)),
    c("ibroute-no-guid", "ibroute", &["-G", NO_GUID]).must(Must::Exit(255)),
    c("ibroute-bad-flag", "ibroute", &["-Z", "1"]).must(Must::Exit(2)),
    c("ibroute-no-dest", "ibroute", &[]).must(Must::Exit(2)),
];

const IBTRACERT: &[Case] = &[
    c("ibtracert-{node}-{node2}", "ibtracert", &["{lid}", "{lid2}"]).over(Over::Pairs),
    c("ibtracert-n-{node}-{node2}", "ibtracert", &["-n", "{lid}", "{lid2}"]).over(Over::Pairs),
    c("ibtracert-G-{node}-{node2}", "ibtracert", &["-G", "{guid}", "{guid2}"])
        .over(Over::Pairs),
    c("ibtracert-no-lid", "ibtracert", &["-t", "100", "{sm}", NO_LID]).must(Must::Exit(255)),
    c("ibtracert-no-guid", "ibtracert", &["-G", NO_GUID, NO_GUID]).must(Must::Exit(255)),
    c("ibtracert-bad-flag", "ibtracert", &["-Z", "1", "2"]).must(Must::Exit(2)),
    c("ibtracert-no-dr", "ibtracert", &["-D", "0", "0,1"]).must(Must::Exit(2)),
    c("ibtracert-one-port", "ibtracert", &["1"]).must(Must::Exit(2)),
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
