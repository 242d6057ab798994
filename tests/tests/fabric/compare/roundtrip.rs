//! ibnetdiscover's round trip: `ci/fabric.sh --suite` feeds our
//! ibnetdiscover's output of a CI topology (kept by `compare::ibnetdiscover`)
//! to ibsim as the net file of a fabric of its own, and runs these tests
//! there (`RDMA_FABRIC_ROUNDTRIP` set): ours and the C tool discover it
//! again, and both graphs (nodes by GUID with type and port count, links
//! between GUID/port pairs) must be the net file's. NodeDescriptions are
//! not part of the graph: ibsim names a node after its id in the net file
//! (`S-<guid>`). On that fabric the two outputs are compared line by line
//! too, first.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use rdma_tests::fabric::{output_within, Fabric, FabricTest};
use rdma_tests::{check, Outcome, TestResult};

use super::norm::Norm::Generated;
use super::{compare_group, Case, Ctx};

/// The tests of the round-trip fabric.
pub const TESTS: &[FabricTest] = &[FabricTest {
    name: "roundtrip::ibnetdiscover",
    run: ibnetdiscover,
}];

const TEXT: &[Case] = &[Case::new("roundtrip-text", "ibnetdiscover", &[]).norm(&[Generated])];

/// The graph of a topology file (ibsim's or ibnetdiscover's): one line per
/// node (`node KIND GUID ports N`) and per link (`link GUID/PORT
/// GUID/PORT`, each link once, its lesser end first), sorted, so that two
/// files of the same fabric give the same lines.
pub fn graph(text: &str) -> Vec<String> {
    let (mut nodes, mut links) = (BTreeSet::new(), BTreeSet::new());
    let mut cur: Option<u64> = None;
    // `"S-0123abcd"` at the start of `s`: the GUID and what follows.
    let guid = |s: &str| -> Option<(u64, usize)> {
        let s2 = s.strip_prefix('"')?;
        let kind = s2.chars().next()?;
        if !"SHR".contains(kind) {
            return None;
        }
        let hex = s2.get(1..)?.strip_prefix('-')?;
        let n = hex
            .bytes()
            .take_while(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            .count();
        if n == 0 || !hex[n..].starts_with('"') {
            return None;
        }
        Some((
            u64::from_str_radix(&hex[..n], 16).ok()?,
            s.len() - hex.len() + n + 1,
        ))
    };
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if let Some(kind @ ("Switch" | "Ca" | "Rt")) = words.next() {
            let ports = words
                .next()
                .filter(|p| p.bytes().all(|b| b.is_ascii_digit()));
            let rest = line
                .splitn(3, char::is_whitespace)
                .nth(2)
                .map(str::trim_start);
            if let (Some(ports), Some((g, _))) = (ports, rest.and_then(guid)) {
                nodes.insert(format!("node {kind} {g:016x} ports {ports}"));
                cur = Some(g);
                continue;
            }
        }
        let (Some(node), Some(rest)) = (cur, line.strip_prefix('[')) else {
            continue;
        };
        let Some((port, rest)) = rest.split_once(']') else {
            continue;
        };
        let Ok(port) = port.parse::<u32>() else {
            continue;
        };
        // An optional `(port GUID)` after a CA's port number.
        let rest = match rest.strip_prefix('(') {
            Some(r) => match r.split_once(')') {
                Some((g, r)) if g.bytes().all(|b| b.is_ascii_hexdigit()) => r,
                _ => continue,
            },
            None => rest,
        };
        let rest = rest.trim_start();
        let Some((peer, at)) = guid(rest) else {
            continue;
        };
        let Some(peer_port) = rest[at..]
            .strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .and_then(|(p, _)| p.parse::<u32>().ok())
        else {
            continue;
        };
        let (a, b) = ((node, port), (peer, peer_port));
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        links.insert(format!(
            "link {:016x}/{} {:016x}/{}",
            lo.0, lo.1, hi.0, hi.1
        ));
    }
    nodes.into_iter().chain(links).collect()
}

fn ibnetdiscover(f: &Fabric) -> TestResult {
    let ctx = Ctx::new(f)?;
    let first = graph(&std::fs::read_to_string(&f.net)?);
    check!(
        first.iter().any(|l| l.starts_with("link ")),
        "the net file {} (the first discovery) has no link",
        f.net.display()
    );
    // The text first (its group prints the line break after the test's name).
    let text = compare_group(&ctx, TEXT);
    let (mut ok, mut why) = (0, String::new());
    for (which, program) in [
        ("rust", rdma_tests::example("ibnetdiscover")?),
        ("c", "ibnetdiscover".into()),
    ] {
        let out = output_within(
            f.command(&program, None),
            std::time::Duration::from_secs(60),
        )?;
        let second = graph(&String::from_utf8_lossy(&out.stdout));
        let name = format!("roundtrip-{which}");
        if second == first {
            let n = |k: &str| first.iter().filter(|l| l.starts_with(k)).count();
            println!(
                "  compare {name}: ok ({} nodes, {} links)",
                n("node "),
                n("link ")
            );
            ok += 1;
        } else {
            println!("  compare {name}: FAILED");
            let _ = writeln!(
                why,
                "{name}: the second discovery ({which}) differs from the first (ours):"
            );
            for l in first.iter().filter(|l| !second.contains(l)).take(20) {
                let _ = writeln!(why, "    only in the first:  {l}");
            }
            for l in second.iter().filter(|l| !first.contains(l)).take(20) {
                let _ = writeln!(why, "    only in the second: {l}");
            }
        }
    }
    println!("  compare: {ok} ok, {} failed", 2 - ok);
    check!(ok == 2, "{why}");
    text?;
    Ok(Outcome::Passed)
}
