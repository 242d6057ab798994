//! The examples against the C tools of infiniband-diags, line by line:
//! one table of cases ([`cases::CASES`]), each our program and the C tool
//! with the same arguments, attached at the same node, their stdout and
//! exit status compared after normalising only what changes between runs
//! ([`Norm`]), and what the C tool itself must do ([`Must`]).
//!
//! Each group of the table is one test (`compare::smpquery`, ...); it
//! prints a line a comparison and `compare: N ok, N failed`, which
//! `ci/fabric.sh --suite` adds up per topology. Both outputs of every
//! comparison are kept in the run folder (`compare/NAME.c`, `NAME.rust`,
//! their `.err`), where the suite's round trip takes ibnetdiscover's.

mod cases;
pub(crate) mod norm;
pub mod roundtrip;
pub mod speed;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use rdma_tests::fabric::{output_within, Fabric, NodeKind};
use rdma_tests::{check, Outcome, TestResult};

pub use cases::TESTS;
use norm::Norm;

/// What the C tool must do besides printing what ours prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Must {
    /// Nothing: a comparison of an error path that depends on the topology
    /// (a directed route through a port with no link) checks the likeness.
    Alike,
    /// Exit with this status: the comparisons that need the SM (two tools
    /// that both found no SM would compare alike and prove nothing) and
    /// those of a known error.
    Exit(i32),
    /// Exit 0 and print a line that starts with this.
    Line(&'static str),
}

/// Where both programs run (`SIM_HOST`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// The net file's first node (the SM's).
    First,
    /// A CA where neither the SM nor a client runs ([`Ctx::quiet_ca`]).
    QuietCa,
    /// Each of the first node, the first switch, the first HCA and the
    /// last node, with `{port}` its first port (0 on a switch, 1 on a CA).
    Hosts,
}

/// Which values a case runs over: its name and arguments' `{lid}` and
/// `{path}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Over {
    /// Once.
    One,
    /// LIDs 1, 2 and 3.
    Lids,
    /// The directed routes 0, 0,1 and 0,1,1.
    Paths,
    /// Every node of the net file ([`Ctx::with_ports`]): `{node}` its
    /// name, `{lid}` its port's LID (a switch's port 0, a CA's port the SM
    /// brought up), `{guid}` that port's GUID.
    Nodes,
    /// Every CA of the net file, as [`Over::Nodes`].
    Hcas,
    /// Pairs of nodes: the first CA to every other node and every other
    /// node to the last CA, `{node}`, `{lid}`, `{guid}` of the first and
    /// `{node2}`, `{lid2}`, `{guid2}` of the second.
    Pairs,
}

/// A node's port as the SM addressed it.
#[derive(Clone, Debug)]
pub struct NodePort {
    pub name: String,
    pub kind: NodeKind,
    pub lid: u16,
    pub guid: u64,
}

/// One comparison of the table (or one a value of [`Over`]).
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// The comparison's name, with `{lid}` / `{path}` for [`Over`].
    pub name: &'static str,
    /// The C tool.
    pub c: &'static str,
    /// Our example.
    pub ours: &'static str,
    /// The arguments of both; `{sm}` (the SM's LID), `{lid}`, `{path}`,
    /// `{port}`, `{ca_lid}` (the quiet CA's LID), `{pong_lid}` (the LID of
    /// the node where the ibping server runs), `{name}` (a NodeDescription
    /// that saquery finds) are replaced.
    pub args: &'static [&'static str],
    /// What is normalised in both outputs before the comparison.
    pub norm: &'static [Norm],
    /// What the C tool must do.
    pub must: Must,
    /// Where both run.
    pub at: At,
    /// Over which values.
    pub over: Over,
    /// A C command run (at the first node) before both, its output
    /// ignored: `perfquery -R` so that two readers of `-r` start from
    /// counters reset alike.
    pub before: &'static [&'static str],
    /// `before` runs again between the C tool and ours: for a tool that
    /// changes what it reads (`ibqueryerrors -k` clears the counters it
    /// reports), so that both read the same.
    pub again: bool,
}

impl Case {
    /// A case of the C tool `tool` and our example of the same name, at the
    /// first node, once, that must be alike.
    pub const fn new(
        name: &'static str,
        tool: &'static str,
        args: &'static [&'static str],
    ) -> Case {
        Case {
            name,
            c: tool,
            ours: tool,
            args,
            norm: &[],
            must: Must::Alike,
            at: At::First,
            over: Over::One,
            before: &[],
            again: false,
        }
    }
    pub const fn ours(self, ours: &'static str) -> Case {
        Case { ours, ..self }
    }
    pub const fn norm(self, norm: &'static [Norm]) -> Case {
        Case { norm, ..self }
    }
    pub const fn must(self, must: Must) -> Case {
        Case { must, ..self }
    }
    pub const fn at(self, at: At) -> Case {
        Case { at, ..self }
    }
    pub const fn over(self, over: Over) -> Case {
        Case { over, ..self }
    }
    pub const fn before(self, before: &'static [&'static str]) -> Case {
        Case { before, ..self }
    }
    pub const fn before_each(self, before: &'static [&'static str]) -> Case {
        Case {
            before,
            again: true,
            ..self
        }
    }
}

const LIMIT: Duration = Duration::from_secs(60);

/// The values of a fabric that the cases' arguments name.
pub struct Ctx<'f> {
    pub f: &'f Fabric,
    /// A CA where no SM and no client runs: the first CA of the net file
    /// that is not its first node (where the SM runs).
    pub quiet_ca: Option<String>,
    pub ca_lid: Option<u16>,
    /// The last CA of the net file (ibping's server) and its LID.
    pub pong: Option<(String, u16)>,
    /// The NodeDescription of the first NodeRecord of the SA's table.
    pub name: Option<String>,
    /// Where the outputs are kept.
    pub keep: PathBuf,
    /// The port of each node, for [`Over::Nodes`] and [`Over::Pairs`].
    pub ports: Vec<NodePort>,
}

impl<'f> Ctx<'f> {
    pub fn new(f: &'f Fabric) -> Result<Ctx<'f>, Box<dyn std::error::Error>> {
        let cas: Vec<&str> = f
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Hca)
            .map(|n| n.name.as_str())
            .collect();
        let quiet_ca = cas
            .iter()
            .find(|&&c| c != f.nodes[0].name)
            .map(|c| c.to_string());
        let ca_lid = match &quiet_ca {
            Some(c) => node_lid(f, c)?,
            None => None,
        };
        let pong = match cas.last() {
            Some(c) => node_lid(f, c)?.map(|l| (c.to_string(), l)),
            None => None,
        };
        let keep = f.dir.join("compare");
        std::fs::create_dir_all(&keep)?;
        Ok(Ctx {
            f,
            quiet_ca,
            ca_lid,
            pong,
            name: None,
            keep,
            ports: Vec::new(),
        })
    }

    /// The port of every node of the net file, as the C `smpquery -D`
    /// attached there reads it (NodeInfo's PortGUID, PortInfo's LID).
    pub fn with_ports(mut self) -> Result<Self, Box<dyn std::error::Error>> {
        for n in &self.f.nodes {
            let lid = node_lid(self.f, &n.name)?.ok_or_else(|| format!("{}: no LID", n.name))?;
            let mut c = self.f.command("smpquery", Some(&n.name));
            c.args(["-D", "nodeinfo", "0"]);
            let out = output_within(c, LIMIT)?;
            let guid = String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("PortGuid:"))
                .map(|v| {
                    v.trim_start_matches('.')
                        .trim_start_matches("0x")
                        .to_string()
                })
                .and_then(|v| u64::from_str_radix(&v, 16).ok())
                .ok_or_else(|| format!("{}: no PortGuid", n.name))?;
            self.ports.push(NodePort {
                name: n.name.clone(),
                kind: n.kind,
                lid,
                guid,
            });
        }
        Ok(self)
    }

    /// The NodeDescription that saquery finds first (for the queries by
    /// node name). Under umad2sim a GetTable answer is cut to one MAD, so
    /// the tools see only the first records; a name beyond them is found by
    /// neither.
    pub fn with_saquery_name(mut self) -> Result<Self, Box<dyn std::error::Error>> {
        let mut c = self.f.command("saquery", None);
        c.arg("NodeRecord");
        let out = output_within(c, LIMIT)?;
        self.name = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("NodeDescription"))
            .map(|v| v.trim_start_matches('.').to_string());
        Ok(self)
    }
}

/// The LID of `node`'s port, as `smpquery -D portinfo 0` attached there
/// reads it.
fn node_lid(f: &Fabric, node: &str) -> Result<Option<u16>, Box<dyn std::error::Error>> {
    let mut c = f.command("smpquery", Some(node));
    c.args(["-D", "portinfo", "0"]);
    let out = output_within(c, LIMIT)?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("Lid:"))
        .and_then(|v| v.trim_start_matches('.').parse().ok()))
}

/// The hosts of [`At::Hosts`] with their first port.
fn hosts(f: &Fabric) -> Vec<(&str, &'static str)> {
    let mut v: Vec<(&str, &'static str)> = Vec::new();
    let nodes = [
        Some(&f.nodes[0]),
        f.first(NodeKind::Switch),
        f.first(NodeKind::Hca),
        f.nodes.last(),
    ];
    for n in nodes.into_iter().flatten() {
        if !v.iter().any(|(h, _)| *h == n.name) {
            let port = if n.kind == NodeKind::Switch { "0" } else { "1" };
            v.push((&n.name, port));
        }
    }
    v
}

/// One program's run: stdout with `exit status N` as its last line.
pub struct Run {
    pub text: String,
    pub status: Option<i32>,
    pub stderr: String,
}

fn run(
    ctx: &Ctx,
    program: impl AsRef<std::ffi::OsStr>,
    host: Option<&str>,
    args: &[String],
) -> Result<Run, Box<dyn std::error::Error>> {
    let mut c = ctx.f.command(program, host);
    c.args(args);
    let out = output_within(c, LIMIT)?;
    let status = out.status.code();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = writeln!(
        text,
        "exit status {}",
        status.map_or_else(|| out.status.to_string(), |s| s.to_string())
    );
    Ok(Run {
        text,
        status,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// One concrete comparison: a case with its values put in.
struct Concrete {
    name: String,
    host: Option<String>,
    args: Vec<String>,
    /// The case's `before`, its values put in.
    before: Vec<String>,
}

/// How many nodes, CAs or pairs a case runs over: 12, evenly spread over
/// the fabric's list (the fat tree's 76 nodes would take minutes per tool
/// and SM; a case over nodes takes every switch, see [`nodes_compared`]);
/// `RDMA_FABRIC_COMPARE_ALL=1`: every one.
fn compare_limit() -> usize {
    match std::env::var("RDMA_FABRIC_COMPARE_ALL").as_deref() {
        Ok("1") => usize::MAX,
        _ => 12,
    }
}

/// How many nodes a case over every node compares on `f`: every switch, and
/// CAs up to [`compare_limit`] (at least 4).
pub fn nodes_compared(f: &Fabric) -> usize {
    let cas = compare_limit().saturating_sub(f.switches()).max(4);
    f.switches() + f.hcas().min(cas)
}

/// At most `max` of `v`, evenly spaced, the first and the last among them.
fn sample<T>(v: Vec<T>, max: usize) -> Vec<T> {
    let n = v.len();
    if n <= max || max == 0 {
        return v;
    }
    let keep: std::collections::BTreeSet<usize> = (0..max)
        .map(|i| if max == 1 { 0 } else { i * (n - 1) / (max - 1) })
        .collect();
    v.into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, x)| x)
        .collect()
}

fn expand(ctx: &Ctx, case: &Case) -> Result<Vec<Concrete>, String> {
    let one = |key: &'static str, v: &str| vec![(key, v.to_string())];
    let port = |p: &NodePort, n: &'static str, l: &'static str, g: &'static str| {
        vec![
            (n, p.name.clone()),
            (l, p.lid.to_string()),
            (g, format!("{:#x}", p.guid)),
        ]
    };
    let overs: Vec<Vec<(&str, String)>> = match case.over {
        Over::One => vec![vec![]],
        Over::Lids => ["1", "2", "3"].iter().map(|v| one("{lid}", v)).collect(),
        Over::Paths => ["0", "0,1", "0,1,1"]
            .iter()
            .map(|v| one("{path}", v))
            .collect(),
        Over::Nodes | Over::Hcas => ctx
            .ports
            .iter()
            .filter(|p| case.over == Over::Nodes || p.kind == NodeKind::Hca)
            .map(|p| port(p, "{node}", "{lid}", "{guid}"))
            .collect(),
        Over::Pairs => {
            let cas: Vec<&NodePort> = ctx
                .ports
                .iter()
                .filter(|p| p.kind == NodeKind::Hca)
                .collect();
            let (Some(first), Some(last)) = (cas.first(), cas.last()) else {
                return Err(format!("{}: no CA on this fabric", case.name));
            };
            let mut pairs = Vec::new();
            for p in &ctx.ports {
                if p.name != first.name {
                    pairs.push((*first, p));
                }
                if p.name != last.name && p.name != first.name {
                    pairs.push((p, *last));
                }
            }
            pairs
                .into_iter()
                .map(|(a, b)| {
                    let mut v = port(a, "{node}", "{lid}", "{guid}");
                    v.extend(port(b, "{node2}", "{lid2}", "{guid2}"));
                    v
                })
                .collect()
        }
    };
    // Every switch (tables, routes), and CAs to fill the limit (at least
    // 4); CAs and pairs: the limit.
    let overs = match case.over {
        Over::Nodes => {
            let (sw, ca): (Vec<_>, Vec<_>) = overs.into_iter().partition(|v| {
                v.iter().any(|(k, n)| {
                    *k == "{node}"
                        && ctx
                            .ports
                            .iter()
                            .any(|p| &p.name == n && p.kind == NodeKind::Switch)
                })
            });
            let cas = compare_limit().saturating_sub(sw.len()).max(4);
            sw.into_iter().chain(sample(ca, cas)).collect()
        }
        _ => sample(overs, compare_limit()),
    };
    if matches!(case.over, Over::Nodes | Over::Hcas | Over::Pairs) && ctx.ports.is_empty() {
        return Err(format!("{}: the nodes' ports were not read", case.name));
    }
    let hosts: Vec<(Option<String>, &str)> = match case.at {
        At::First => vec![(None, "")],
        At::QuietCa => vec![(
            Some(
                ctx.quiet_ca
                    .clone()
                    .ok_or("no CA other than the SM's node")?,
            ),
            "",
        )],
        At::Hosts => hosts(ctx.f)
            .into_iter()
            .map(|(h, p)| (Some(h.to_string()), p))
            .collect(),
    };
    let missing = |what: &str| format!("{}: no {what} on this fabric", case.name);
    let mut v = Vec::new();
    for (host, port) in &hosts {
        for values in &overs {
            let put = |mut s: String| {
                for (key, value) in values {
                    s = s.replace(key, value);
                }
                s
            };
            let fill = |a: &&str| -> Result<String, String> {
                let mut s = a.replace("{sm}", &ctx.f.sm_lid.to_string());
                s = put(s);
                s = s.replace("{port}", port);
                if s.contains("{ca_lid}") {
                    let l = ctx.ca_lid.ok_or_else(|| missing("LID of a quiet CA"))?;
                    s = s.replace("{ca_lid}", &l.to_string());
                }
                if s.contains("{pong_lid}") {
                    let (_, l) = ctx.pong.as_ref().ok_or_else(|| missing("CA with a LID"))?;
                    s = s.replace("{pong_lid}", &l.to_string());
                }
                if s.contains("{name}") {
                    let n = ctx
                        .name
                        .as_ref()
                        .ok_or_else(|| missing("NodeDescription in the SA's NodeRecords"))?;
                    s = s.replace("{name}", n);
                }
                Ok(s)
            };
            let args = case.args.iter().map(fill).collect::<Result<Vec<_>, _>>()?;
            let before = case
                .before
                .iter()
                .map(fill)
                .collect::<Result<Vec<_>, _>>()?;
            let mut name = put(case.name.to_string());
            if let Some(h) = host.as_deref().filter(|_| case.at == At::Hosts) {
                name = format!("{name}@{h}");
            }
            v.push(Concrete {
                name,
                host: host.clone(),
                args,
                before,
            });
        }
    }
    Ok(v)
}

/// The outcome of one comparison: `None` when alike, else why not.
fn compare_one(
    ctx: &Ctx,
    case: &Case,
    k: &Concrete,
) -> Result<(Run, Option<String>), Box<dyn std::error::Error>> {
    let file = |ext: &str| ctx.keep.join(format!("{}.{ext}", k.name.replace('/', "_")));
    let before = || -> Result<(), Box<dyn std::error::Error>> {
        if let Some((program, args)) = k.before.split_first() {
            let mut c = ctx.f.command(program, None);
            c.args(args);
            let out = output_within(c, LIMIT)?;
            if case.again && !out.status.success() {
                return Err(format!("{}: `{}` failed", k.name, k.before.join(" ")).into());
            }
        }
        Ok(())
    };
    before()?;
    let ours = rdma_tests::example(case.ours)?;
    // The C tool, run again (twice at most, its set-up first) when a signal
    // ends it: infiniband-diags' ibqueryerrors dies of SIGSEGV on some ibsim
    // fabrics before it prints anything, in its own code (7 of 50 runs on
    // one fabric, none of 60 on another); what it prints when it lives is
    // what is compared.
    let mut c = run(ctx, case.c, k.host.as_deref(), &k.args)?;
    for _ in 0..2 {
        if c.status.is_some() {
            break;
        }
        println!(
            "  compare {}: the C {} ended by a signal ({}); run again",
            k.name,
            case.c,
            last_line(&c.text)
        );
        before()?;
        c = run(ctx, case.c, k.host.as_deref(), &k.args)?;
    }
    if case.again {
        before()?;
    }
    let r = run(ctx, &ours, k.host.as_deref(), &k.args)?;
    for (ext, text) in [
        ("c", &c.text),
        ("rust", &r.text),
        ("c.err", &c.stderr),
        ("rust.err", &r.stderr),
    ] {
        std::fs::write(file(ext), text)?;
    }
    let shown = format!("{} {}", case.c, k.args.join(" "));
    let want = match case.must {
        Must::Alike | Must::Line(_) => None,
        Must::Exit(n) => Some(n),
    };
    if let Must::Line(l) = case.must {
        if c.status != Some(0) || !c.text.lines().any(|x| x.starts_with(l)) {
            let why = format!(
                "the C {shown} printed no line '{l}...':\n{}{}",
                c.text,
                stderr_lines("C", &c.stderr)
            );
            return Ok((c, Some(why)));
        }
    }
    if let Some(n) = want {
        if c.status != Some(n) {
            let why = format!(
                "the C {shown}: {}, expected exit status {n}{}",
                last_line(&c.text),
                stderr_lines("C", &c.stderr)
            );
            return Ok((c, Some(why)));
        }
    }
    let (cn, rn) = (
        norm::apply(case.norm, &c.text),
        norm::apply(case.norm, &r.text),
    );
    if cn == rn {
        return Ok((c, None));
    }
    let why = format!(
        "C {shown} and ours differ:\n{}{}{}",
        norm::diff(&cn, &rn),
        stderr_lines("C", &c.stderr),
        stderr_lines("our", &r.stderr)
    );
    Ok((c, Some(why)))
}

fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or("")
}

/// The first five lines of a program's stderr (but umad2sim's greeting),
/// each on a line of its own after `    WHO stderr: `.
fn stderr_lines(who: &str, err: &str) -> String {
    err.lines()
        .filter(|l| !l.contains("sim_connect: attached"))
        .take(5)
        .map(|l| format!("\n    {who} stderr: {l}"))
        .collect()
}

/// The C outputs of a group's comparisons, by name, for checks of a test
/// of its own.
pub type Outputs = Vec<(String, Run)>;

/// Runs the cases of `group`, prints a line a comparison and the count, and
/// fails with every difference.
pub fn compare_group(ctx: &Ctx, group: &[Case]) -> Result<Outputs, Box<dyn std::error::Error>> {
    println!();
    let (mut ok, mut failed, mut why) = (0, 0, String::new());
    let mut outs = Vec::new();
    for case in group {
        let concrete = match expand(ctx, case) {
            Ok(v) => v,
            Err(e) => {
                println!("  compare {}: FAILED ({e})", case.name);
                failed += 1;
                let _ = writeln!(why, "{e}");
                continue;
            }
        };
        for k in concrete {
            let (c, bad) = compare_one(ctx, case, &k)?;
            match bad {
                None => {
                    println!("  compare {}: ok", k.name);
                    ok += 1;
                }
                Some(w) => {
                    println!("  compare {}: FAILED", k.name);
                    failed += 1;
                    let _ = writeln!(why, "compare {}: {w}", k.name);
                }
            }
            outs.push((k.name, c));
        }
    }
    println!("  compare: {ok} ok, {failed} failed");
    check!(
        failed == 0,
        "{failed} of {} comparisons failed:\n{why}",
        ok + failed
    );
    check!(ok > 0, "no comparison ran");
    Ok(outs)
}

/// A test of one group of the table.
pub fn group_test(f: &Fabric, group: &[Case]) -> TestResult {
    let ctx = Ctx::new(f)?.with_saquery_name()?;
    compare_group(&ctx, group)?;
    Ok(Outcome::Passed)
}
