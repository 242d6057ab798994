//! The fabric tests' harness: the simulated InfiniBand fabric that
//! `ci/fabric.sh` starts (ibsim, OpenSM under umad2sim) as the tests see it,
//! and a runner like [`crate::run`].
//!
//! Outside `ci/fabric.sh` (no `RDMA_FABRIC` in the environment) every test
//! is reported skipped, with the reason, and the binary exits 0. Under it a
//! fabric that is not there (the shim not preloaded, the net file missing,
//! the CA absent) fails every test.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use crate::{Failure, TestResult};

mod clients;
pub use clients::{console, parse_attached, SimClient};

/// The kind of a node of the net file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A switch (its management port is port 0).
    Switch,
    /// A channel adapter.
    Hca,
}

/// A node of the net file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Switch or HCA.
    pub kind: NodeKind,
    /// The number of ports of the header line.
    pub ports: u32,
    /// The node's name (its node description in the simulator, and what
    /// `SIM_HOST` takes).
    pub name: String,
}

/// The fabric under test, as `ci/fabric.sh` describes it.
#[derive(Debug, Clone)]
pub struct Fabric {
    /// The topology's name (`2sw2path4hca`, `fattree`, `ring`).
    pub name: String,
    /// Its net file.
    pub net: PathBuf,
    /// The run folder: OpenSM's log and files (`guid2lid`).
    pub dir: PathBuf,
    /// The umad2sim shim (`LD_PRELOAD`).
    pub umad2sim: PathBuf,
    /// The nodes of the net file; the first holds the SM port.
    pub nodes: Vec<Node>,
    /// The master SM's LID.
    pub sm_lid: u16,
}

/// Parses the node header lines of a net file (`Switch 8 "name"`,
/// `Hca 2 "name"`); the port lines are skipped.
pub fn parse_net(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let (kind, rest) = if let Some(r) = line.strip_prefix("Switch") {
                (NodeKind::Switch, r)
            } else if let Some(r) = line.strip_prefix("Hca").or_else(|| line.strip_prefix("Ca")) {
                (NodeKind::Hca, r)
            } else {
                return None;
            };
            let rest = rest.trim_start();
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let ports = digits.parse().ok()?;
            let quoted = rest[digits.len()..].trim_start().strip_prefix('"')?;
            let name = quoted.split('"').next()?.to_string();
            Some(Node { kind, ports, name })
        })
        .collect()
}

/// The ports of OpenSM's `guid2lid` file: (port GUID, base LID).
pub fn parse_guid2lid(text: &str) -> Vec<(u64, u16)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let guid = u64::from_str_radix(w.next()?.strip_prefix("0x")?, 16).ok()?;
            let lid = u16::from_str_radix(w.next()?.strip_prefix("0x")?, 16).ok()?;
            Some((guid, lid))
        })
        .collect()
}

impl Fabric {
    /// How many switches the net file has.
    pub fn switches(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Switch)
            .count()
    }
    /// How many HCAs the net file has.
    pub fn hcas(&self) -> usize {
        self.nodes.len() - self.switches()
    }
    /// The node this process is attached to: `SIM_HOST`, or the first.
    pub fn attached(&self) -> &Node {
        let host = std::env::var("SIM_HOST").ok();
        host.and_then(|h| self.nodes.iter().find(|n| n.name == h))
            .unwrap_or(&self.nodes[0])
    }
    /// The first node of each kind, for the tests that attach a process to
    /// a switch and to an HCA.
    pub fn first(&self, kind: NodeKind) -> Option<&Node> {
        self.nodes.iter().find(|n| n.kind == kind)
    }
    /// The ports OpenSM assigned LIDs to (its `guid2lid`): (port GUID,
    /// LID), by LID.
    pub fn lids(&self) -> Result<Vec<(u64, u16)>, Box<dyn Error>> {
        let path = self.dir.join("guid2lid");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let mut v = parse_guid2lid(&text);
        v.sort_by_key(|&(_, lid)| lid);
        Ok(v)
    }
    /// A command run against the fabric: `LD_PRELOAD` of the shim, in the
    /// run folder (umad2sim writes its fake sysfs into the working
    /// directory), attached at `host` (`SIM_HOST`) or at the first node.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>, host: Option<&str>) -> Command {
        let mut c = Command::new(program);
        c.env("LD_PRELOAD", &self.umad2sim).current_dir(&self.dir);
        match host {
            Some(h) => c.env("SIM_HOST", h),
            None => c.env_remove("SIM_HOST"),
        };
        c
    }
}

/// Why there is no fabric.
enum NoFabric {
    /// Not under ci/fabric.sh: every test is skipped.
    Host,
    /// Under it, but the fabric is not there: a failure.
    Broken(String),
}

fn var(name: &str) -> Result<String, NoFabric> {
    std::env::var(name).map_err(|_| NoFabric::Broken(format!("{name} is not set")))
}

fn fabric_env() -> Result<Fabric, NoFabric> {
    if std::env::var_os("RDMA_FABRIC").is_none_or(|v| v != "1") {
        return Err(NoFabric::Host);
    }
    let broken = |s: String| NoFabric::Broken(s);
    let umad2sim = PathBuf::from(var("RDMA_FABRIC_UMAD2SIM")?);
    let preload = std::env::var("LD_PRELOAD").unwrap_or_default();
    if !preload
        .split([' ', ':'])
        .any(|p| Path::new(p) == umad2sim.as_path())
    {
        return Err(broken(format!(
            "LD_PRELOAD ({preload:?}) does not name umad2sim ({}): rdma::umad would talk to the kernel",
            umad2sim.display()
        )));
    }
    let net = PathBuf::from(var("RDMA_FABRIC_NET")?);
    let text = std::fs::read_to_string(&net)
        .map_err(|e| broken(format!("net file {}: {e}", net.display())))?;
    let nodes = parse_net(&text);
    if nodes.is_empty() {
        return Err(broken(format!("no node in {}", net.display())));
    }
    let fabric = Fabric {
        name: var("RDMA_FABRIC_NAME")?,
        net,
        dir: PathBuf::from(var("RDMA_FABRIC_DIR")?),
        umad2sim,
        nodes,
        sm_lid: var("RDMA_FABRIC_SM_LID")?
            .parse()
            .map_err(|e| broken(format!("RDMA_FABRIC_SM_LID: {e}")))?,
    };
    // Attaches this process to the simulator (umad2sim connects on the
    // first look at the umad devices, and says so on stderr): the CA must be
    // there before any test runs.
    match rdma::umad::ca_names() {
        Ok(names) if names == ["ibsim0"] => {}
        other => {
            return Err(broken(format!(
                "umad2sim shows no CA ibsim0 (ibsim not running?): {other:?}"
            )))
        }
    }
    for (what, v, n) in [
        (
            "RDMA_FABRIC_SWITCHES",
            var("RDMA_FABRIC_SWITCHES")?,
            fabric.switches(),
        ),
        ("RDMA_FABRIC_HCAS", var("RDMA_FABRIC_HCAS")?, fabric.hcas()),
    ] {
        if v.parse() != Ok(n) {
            return Err(broken(format!("{what}={v}, but the net file has {n}")));
        }
    }
    Ok(fabric)
}

/// One fabric test.
#[derive(Clone, Copy)]
pub struct FabricTest {
    /// The name printed and matched by the filter.
    pub name: &'static str,
    /// The test body.
    pub run: fn(&Fabric) -> TestResult,
}

/// Runs the tests and prints one line per test and a summary line
/// `fabric <topology>: N passed, N failed, N skipped` (`fabric host: ...`
/// outside the simulator, where every test is skipped).
///
/// The first command-line argument, if any, filters the tests by name (see
/// [`crate::selects`]). After each test, ibsim disconnects the clients whose
/// process is gone ([`Fabric::forget_dead_clients`]). Exits with failure if
/// any test failed or the fabric that `ci/fabric.sh` describes is not there.
pub fn run(tests: &[FabricTest]) -> ExitCode {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let selected: Vec<&FabricTest> = tests
        .iter()
        .filter(|t| filter.as_deref().is_none_or(|f| crate::selects(f, t.name)))
        .collect();
    let fabric = match fabric_env() {
        Ok(f) => f,
        Err(NoFabric::Host) => {
            let reason = "not on a simulated fabric (ci/fabric.sh --suite runs these tests \
                          under ibsim and OpenSM)";
            for t in &selected {
                println!("test {} ... SKIPPED ({reason})", t.name);
            }
            println!(
                "fabric host: 0 passed, 0 failed, {} skipped",
                selected.len()
            );
            return ExitCode::SUCCESS;
        }
        Err(NoFabric::Broken(why)) => {
            println!("fabric test environment is broken: {why}");
            let name = std::env::var("RDMA_FABRIC_NAME").unwrap_or_else(|_| "unknown".into());
            println!(
                "fabric {name}: 0 passed, {} failed, 0 skipped",
                selected.len()
            );
            return ExitCode::FAILURE;
        }
    };
    println!(
        "running {} fabric tests on {} ({} switches, {} HCAs; SM lid {}; attached at {:?})",
        selected.len(),
        fabric.name,
        fabric.switches(),
        fabric.hcas(),
        fabric.sm_lid,
        fabric.attached().name
    );
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let sm_log = fabric.dir.join("osm.log");
    let mut failures = Vec::new();
    for t in &selected {
        let logged = std::fs::metadata(&sm_log).map_or(0, |m| m.len());
        match crate::run_one(t.name, || (t.run)(&fabric)) {
            crate::Ran::Passed => passed += 1,
            crate::Ran::Skipped(_) => skipped += 1,
            crate::Ran::Failed(why) => {
                failed += 1;
                failures.push((t.name, why));
                for line in sm_errors_since(&sm_log, logged) {
                    println!("  OpenSM during the test: {line}");
                }
            }
        }
        // A process the test killed (or that crashed) keeps its slot in
        // ibsim, and its node's SM role if it held it: freed before the
        // next test.
        match fabric.forget_dead_clients() {
            Ok(gone) => {
                for c in gone {
                    println!(
                        "  ibsim: disconnected client {} (pid {} at {:?}{}), whose process is gone",
                        c.id,
                        c.pid,
                        c.node,
                        if c.is_sm { ", its SM" } else { "" }
                    );
                }
            }
            Err(e) => println!("  ibsim: its clients not checked: {e}"),
        }
    }
    crate::report_failures(&format!("fabric {}", fabric.name), &failures);
    println!(
        "fabric {}: {passed} passed, {failed} failed, {skipped} skipped",
        fabric.name
    );
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The error lines (`ERR xxxx`) that OpenSM wrote to its log past byte
/// `from`: why its SA refused a request or dropped a MAD, printed under a
/// failed test. None when the log is not there (our SM).
fn sm_errors_since(log: &std::path::Path, from: u64) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = Vec::new();
    let read = std::fs::File::open(log).and_then(|mut f| {
        f.seek(SeekFrom::Start(from))?;
        f.read_to_end(&mut text)
    });
    if read.is_err() {
        return Vec::new();
    }
    String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| l.contains(" ERR "))
        .map(str::to_owned)
        .collect()
}

/// The output of a command run to its end within `limit`, or a failure
/// naming it (killed past the limit).
pub fn output_within(
    mut cmd: Command,
    limit: std::time::Duration,
) -> Result<std::process::Output, Box<dyn Error>> {
    use std::process::Stdio;
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failure(format!("{shown}: {e}")))?;
    // Drained on threads: a full pipe would stall the child.
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let mut err = child.stderr.take().ok_or("no stderr")?;
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Failure(format!("{shown} ran past {limit:?}")).into());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Ok(std::process::Output {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opensm_errors_are_those_logged_past_the_offset() {
        let dir = std::env::temp_dir().join(format!("sm-errors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("osm.log");
        let before = "Dec 03 10:26:01 199240 [9493] 0x01 -> f: ERR 1B12: earlier\n";
        let after = "Dec 03 10:26:02 1 [9493] 0x02 -> SUBNET UP\n\
                     Dec 03 10:26:02 2 [9493] 0x01 -> ERR 4307: Failed to UnSubscribe\n";
        std::fs::write(&log, format!("{before}{after}")).unwrap();
        let got = sm_errors_since(&log, before.len() as u64);
        assert_eq!(
            got,
            ["Dec 03 10:26:02 2 [9493] 0x01 -> ERR 4307: Failed to UnSubscribe"]
        );
        assert_eq!(sm_errors_since(&log, 0).len(), 2);
        assert!(sm_errors_since(&dir.join("none.log"), 0).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn net_files_parse_into_their_nodes() {
        let text = "# comment\nSwitch\t8 \"Switch1\"\n[1]\t\"Hca1\"[1]\n\nHca \t2 \"Hca1\"\n[1]\t\"Switch1\"[1]\nCa 1 \"H-2\" # x\n";
        let nodes = parse_net(text);
        assert_eq!(
            nodes,
            [
                Node {
                    kind: NodeKind::Switch,
                    ports: 8,
                    name: "Switch1".into()
                },
                Node {
                    kind: NodeKind::Hca,
                    ports: 2,
                    name: "Hca1".into()
                },
                Node {
                    kind: NodeKind::Hca,
                    ports: 1,
                    name: "H-2".into()
                },
            ]
        );
    }

    #[test]
    fn guid2lid_lines_parse() {
        let v = parse_guid2lid(
            "0x000000000010001d 0x0015 0x0015\n\n0x0000000000200004 0x0007 0x0007\nbad\n",
        );
        assert_eq!(v, [(0x10001d, 0x15), (0x200004, 7)]);
    }
}
