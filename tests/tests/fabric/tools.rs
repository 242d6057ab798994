//! The C tools and the examples on the fabric: OpenSM's subnet as
//! `ibnetdiscover` sees it, and `umad_info` against `ibstat`, line by line,
//! from a switch and from HCAs.

use std::time::Duration;

use rdma_tests::fabric::{output_within, Fabric, FabricTest, NodeKind};
use rdma_tests::{check, fail, Outcome, TestResult};

/// The tests of this module.
pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "tools::ibnetdiscover_sees_every_node_of_the_net_file",
        run: ibnetdiscover_sees_every_node_of_the_net_file,
    },
    FabricTest {
        name: "tools::umad_info_prints_what_ibstat_prints",
        run: umad_info_prints_what_ibstat_prints,
    },
];

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

/// stdout of `program args` attached at `host`, and whether it succeeded.
fn run(
    f: &Fabric,
    program: &std::path::Path,
    host: &str,
    args: &[&str],
) -> Result<(bool, String), Box<dyn std::error::Error>> {
    let mut c = f.command(program, Some(host));
    c.args(args);
    let out = output_within(c, LIMIT)?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

fn umad_info_prints_what_ibstat_prints(f: &Fabric) -> TestResult {
    let ours = rdma_tests::example("umad_info")?;
    let ibstat = std::path::Path::new("ibstat");
    // The first node (the SM's), the first switch and HCA, and the last node.
    let mut hosts: Vec<&str> = vec![f.nodes[0].name.as_str()];
    for n in [
        f.first(NodeKind::Switch),
        f.first(NodeKind::Hca),
        f.nodes.last(),
    ]
    .into_iter()
    .flatten()
    {
        if !hosts.contains(&n.name.as_str()) {
            hosts.push(&n.name);
        }
    }
    let mut compared = 0;
    let mut rates = std::collections::BTreeSet::new();
    for host in &hosts {
        let kind = f.nodes.iter().find(|n| n.name == *host).map(|n| n.kind);
        let port = if kind == Some(NodeKind::Switch) {
            "0"
        } else {
            "1"
        };
        let cases: [&[&str]; 8] = [
            &[],
            &["-l"],
            &["-s"],
            &["-p"],
            &["ibsim0"],
            &["ibsim0", port],
            &["-s", "ibsim0", port],
            &["ibsim0", "9"],
        ];
        for args in cases {
            let (c_ok, c_out) = run(f, ibstat, host, args)?;
            let (r_ok, r_out) = run(f, &ours, host, args)?;
            let what = format!("SIM_HOST={host} {}", args.join(" "));
            check!(
                c_ok == r_ok,
                "{what}: ibstat succeeded {c_ok}, umad_info {r_ok}"
            );
            let (c_lines, r_lines): (Vec<&str>, Vec<&str>) =
                (c_out.lines().collect(), r_out.lines().collect());
            for (i, (c, r)) in c_lines.iter().zip(&r_lines).enumerate() {
                if c != r {
                    fail!("{what}: line {} differs:\n  ibstat:    {c:?}\n  umad_info: {r:?}\nibstat:\n{c_out}\numad_info:\n{r_out}", i + 1);
                }
            }
            check!(
                c_lines.len() == r_lines.len(),
                "{what}: ibstat printed {} lines, umad_info {}:\nibstat:\n{c_out}\numad_info:\n{r_out}",
                c_lines.len(),
                r_lines.len()
            );
            if c_ok {
                check!(!c_out.is_empty(), "{what}: ibstat printed nothing");
            }
            rates.extend(
                c_lines
                    .iter()
                    .filter_map(|l| l.trim().strip_prefix("Rate: "))
                    .map(str::to_string),
            );
            compared += 1;
        }
        // A switch is shown as one.
        if kind == Some(NodeKind::Switch) {
            let (_, out) = run(f, &ours, host, &[])?;
            check!(
                out.starts_with("Switch 'ibsim0'\n\tSwitch type: "),
                "{host}: {out}"
            );
        }
    }
    check!(compared >= 16, "only {compared} comparisons");
    // The ring's HCA links have mixed widths and speeds (ci/topology.py):
    // its first HCA is on a 1x SDR link, which ibstat prints as 2.5.
    if f.name == "ring" {
        check!(
            rates.contains("2.5"),
            "no 1x SDR port compared on the ring: rates {rates:?}"
        );
    }
    Ok(Outcome::Passed)
}
