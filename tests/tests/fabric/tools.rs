//! The subnet as `ibnetdiscover` sees it: every node of the net file. (The
//! examples against the C tools, `umad_info` against `ibstat` among them,
//! are the table of `compare`.)

use std::time::Duration;

use rdma_tests::fabric::{output_within, Fabric, FabricTest};
use rdma_tests::{check, Outcome, TestResult};

/// The tests of this module.
pub const TESTS: &[FabricTest] = &[FabricTest {
    name: "tools::ibnetdiscover_sees_every_node_of_the_net_file",
    run: ibnetdiscover_sees_every_node_of_the_net_file,
}];

const LIMIT: Duration = Duration::from_secs(60);

fn ibnetdiscover_sees_every_node_of_the_net_file(f: &Fabric) -> TestResult {
    let out = output_within(f.command("ibnetdiscover", None), LIMIT)?;
    let text = String::from_utf8_lossy(&out.stdout);
    check!(
        out.status.success(),
        "ibnetdiscover: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let switches = text.lines().filter(|l| l.starts_with("Switch\t")).count();
    let cas = text.lines().filter(|l| l.starts_with("Ca\t")).count();
    check!(
        (switches, cas) == (f.switches(), f.hcas()),
        "ibnetdiscover found {switches} switches and {cas} CAs; the net file has {} and {}",
        f.switches(),
        f.hcas()
    );
    // Every node by its description (the net file's name).
    for n in &f.nodes {
        let quoted = format!("\"{}\"", n.name);
        check!(
            text.contains(&quoted),
            "ibnetdiscover does not name {quoted}"
        );
    }
    Ok(Outcome::Passed)
}
