//! Support for the device tests: a small harness, the test environment the
//! CI VM describes, and helpers shared by the tests.
//!
//! The harness exists because a device test has three outcomes, not two: a
//! feature the provider lacks (siw has no UD) is reported as *skipped*, with
//! the reason, and counted apart from passes.

use std::error::Error;
use std::fmt;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::time::Instant;

pub mod defer;
pub mod fabric;
#[cfg(has_libibmad)]
pub mod libibmad;
pub mod scratch;
pub mod sys;

pub use defer::Defer;
pub use scratch::{rdmacm_lists, DeviceSet, ScratchDevice};

/// What a test that did not fail reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The test ran and every check held.
    Passed,
    /// The test did not run; the reason says why (a feature the provider lacks).
    Skipped(String),
}

/// The result of one device test.
pub type TestResult = Result<Outcome, Box<dyn Error>>;

/// A failure with a message; `fail!` builds one.
#[derive(Debug)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl Error for Failure {}

/// Returns early from a test with a formatted failure.
#[macro_export]
macro_rules! fail {
    ($($t:tt)*) => { return Err(::std::convert::From::from($crate::Failure(format!($($t)*)))) };
}

/// Fails the test unless the condition holds.
#[macro_export]
macro_rules! check {
    ($cond:expr) => {
        if !$cond { $crate::fail!("check failed: {}", stringify!($cond)); }
    };
    ($cond:expr, $($t:tt)*) => {
        if !$cond { $crate::fail!($($t)*); }
    };
}

/// The soft-RDMA providers the tests know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Soft-RoCE: RoCEv2 over an Ethernet netdev.
    Rxe,
    /// Soft-iWARP: iWARP over TCP; connections only through rdma_cm.
    Siw,
}

impl Provider {
    /// The provider's name as in `rdma link` (`rxe`, `siw`).
    pub fn name(self) -> &'static str {
        match self {
            Provider::Rxe => "rxe",
            Provider::Siw => "siw",
        }
    }
}

/// The device under test, as the VM harness describes it in the environment.
#[derive(Debug, Clone)]
pub struct TestEnv {
    /// Which provider the device belongs to.
    pub provider: Provider,
    /// The verbs device name (`rxe0`).
    pub device: String,
    /// The netdev the device is bound to (`rd0`).
    pub netdev: String,
    /// The netdev's IPv4 address.
    pub ipv4: Ipv4Addr,
    /// The netdev's IPv6 address.
    pub ipv6: Ipv6Addr,
}

/// Why there is no test environment.
#[derive(Debug)]
enum NoEnv {
    /// Not in the VM and no device named: every test is skipped.
    Host,
    /// In the VM but the description is incomplete or wrong: a failure.
    Broken(String),
}

fn var(name: &str) -> Result<String, NoEnv> {
    std::env::var(name).map_err(|_| NoEnv::Broken(format!("{name} is not set")))
}

fn test_env() -> Result<TestEnv, NoEnv> {
    let in_vm = std::env::var_os("RDMA_TEST_IN_VM").is_some_and(|v| v == "1");
    if !in_vm && std::env::var_os("RDMA_TEST_DEVICE").is_none() {
        return Err(NoEnv::Host);
    }
    let provider = match var("RDMA_TEST_PROVIDER")?.as_str() {
        "rxe" => Provider::Rxe,
        "siw" => Provider::Siw,
        other => {
            return Err(NoEnv::Broken(format!(
                "unknown RDMA_TEST_PROVIDER {other:?}"
            )))
        }
    };
    let parse = |name: &str| var(name);
    let ipv4 = parse("RDMA_TEST_IPV4")?
        .parse()
        .map_err(|e| NoEnv::Broken(format!("RDMA_TEST_IPV4: {e}")))?;
    let ipv6 = parse("RDMA_TEST_IPV6")?
        .parse()
        .map_err(|e| NoEnv::Broken(format!("RDMA_TEST_IPV6: {e}")))?;
    let env = TestEnv {
        provider,
        device: var("RDMA_TEST_DEVICE")?,
        netdev: var("RDMA_TEST_NETDEV")?,
        ipv4,
        ipv6,
    };
    let sysfs = format!("/sys/class/infiniband/{}", env.device);
    if !std::path::Path::new(&sysfs).exists() {
        return Err(NoEnv::Broken(format!(
            "device {} does not exist ({sysfs} is missing): the VM set-up did not create it",
            env.device
        )));
    }
    Ok(env)
}

/// How one test ended, as [`run_one`] printed it.
pub enum Ran {
    /// It passed.
    Passed,
    /// It was skipped, for this reason.
    Skipped(String),
    /// It failed or panicked, with this message.
    Failed(String),
}

/// Runs one test body and prints its line: `test NAME ... ok (N ms)`,
/// `SKIPPED (why)` or `FAILED (N ms): the error` (a panic is a failure,
/// with its message).
pub fn run_one(name: &str, body: impl FnOnce() -> TestResult) -> Ran {
    print!("test {name} ... ");
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(body));
    let ms = start.elapsed().as_millis();
    match result {
        Ok(Ok(Outcome::Passed)) => {
            println!("ok ({ms} ms)");
            Ran::Passed
        }
        Ok(Ok(Outcome::Skipped(why))) => {
            println!("SKIPPED ({why})");
            Ran::Skipped(why)
        }
        Ok(Err(e)) => {
            println!("FAILED ({ms} ms): {e}");
            Ran::Failed(e.to_string())
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            println!("FAILED ({ms} ms): panicked: {msg}");
            Ran::Failed(format!("panicked: {msg}"))
        }
    }
}

/// Repeats each failure at the end of a run, one line each, as `failed on
/// WHO: NAME: first line of the error`, so that a run's tail names every
/// failure even when two suites' output interleaves (ci/lib.sh,
/// ci/fabric.sh and ci/memcheck.sh pick these lines up).
pub fn report_failures(who: &str, failures: &[(&str, String)]) {
    for (name, why) in failures {
        let first = why.lines().next().unwrap_or("");
        println!("failed on {who}: {name}: {first}");
    }
}

/// One device test.
#[derive(Clone, Copy)]
pub struct Test {
    /// The name printed and matched by the filter.
    pub name: &'static str,
    /// The test body.
    pub run: fn(&TestEnv) -> TestResult,
}

/// The `TESTS` table of a module, each test function named once and
/// registered as `GROUP::function`:
///
/// ```ignore
/// rdma_tests::tests!("cq": resize_keeps_completions, wait_times_out);
/// ```
///
/// A test finds its own name with [`current_test`].
#[macro_export]
macro_rules! tests {
    ($group:literal: $($f:ident),+ $(,)?) => {
        /// The tests of this module.
        pub const TESTS: &[$crate::Test] = &[$($crate::Test {
            name: concat!($group, "::", stringify!($f)),
            run: $f,
        }),+];
    };
}

/// The name of the test [`run`] is running (for a test that starts itself
/// again in a child process: [`in_own_process`]).
static CURRENT: std::sync::Mutex<&str> = std::sync::Mutex::new("");

/// The name of the test that runs now, as the harness printed it.
pub fn current_test() -> &'static str {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the tests and prints one line per test and a summary line
/// `<provider>: N passed, N failed, N skipped`.
///
/// The first command-line argument, if any, filters the tests by name (see
/// [`selects`]). Exits with failure if any test failed, or if the
/// environment says the run is inside the VM and the device is missing.
pub fn run(tests: &[Test]) -> ExitCode {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let child = std::env::var(CHILD_VAR).ok();
    let selected: Vec<&Test> = tests
        .iter()
        .filter(|t| match &child {
            Some(name) => t.name == name,
            None => filter.as_deref().is_none_or(|f| selects(f, t.name)),
        })
        .collect();
    let env = match test_env() {
        Ok(env) => env,
        Err(NoEnv::Host) => {
            let reason = "no RDMA device on this host (the device tests run inside the \
                          soft-RDMA VM: ci/test.sh)";
            for t in &selected {
                println!("test {} ... SKIPPED ({reason})", t.name);
            }
            println!("host: 0 passed, 0 failed, {} skipped", selected.len());
            return ExitCode::SUCCESS;
        }
        Err(NoEnv::Broken(why)) => {
            println!("device test environment is broken: {why}");
            let name = std::env::var("RDMA_TEST_PROVIDER").unwrap_or_else(|_| "device".into());
            println!("{name}: 0 passed, {} failed, 0 skipped", selected.len());
            return ExitCode::FAILURE;
        }
    };
    println!(
        "running {} device tests on {} ({}, {} / {})",
        selected.len(),
        env.device,
        env.netdev,
        env.ipv4,
        env.ipv6
    );
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut skips = Vec::new();
    let mut failures = Vec::new();
    // The kernel's resource counts before any test, to prove afterwards that
    // the whole suite released everything it created. librdmacm opens one
    // context per device on first use and keeps it for the process's life;
    // make it do so before the baseline.
    if let Err(e) = open_rdmacm_context(env.ipv4) {
        println!("note: could not warm up librdmacm: {e}");
    }
    let baseline = resource_counts(&env.device);
    // A child runs one test for a parent (see `in_own_process`); the parent
    // counts the resources after the child has exited.
    let check_resources = child.is_none();
    for t in &selected {
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = t.name;
        match run_one(t.name, || (t.run)(&env)) {
            Ran::Passed => passed += 1,
            Ran::Skipped(why) => {
                skipped += 1;
                skips.push((t.name, why));
            }
            Ran::Failed(why) => {
                failed += 1;
                failures.push((t.name, why));
            }
        }
    }
    match (baseline, resource_counts(&env.device)) {
        _ if !check_resources => {}
        (Ok(before), Ok(after)) if before == after => {
            println!(
                "resources of {} back at baseline after the suite: {after:?}",
                env.device
            );
        }
        (Ok(before), Ok(after)) => {
            failed += 1;
            let why = format!(
                "resources of {} leaked by the suite: before {before:?}, after {after:?}",
                env.device
            );
            println!("FAILED: {why}");
            failures.push(("(the whole suite)", why));
        }
        (b, a) => {
            failed += 1;
            let why = format!("resource counts unavailable: {:?} / {:?}", b.err(), a.err());
            println!("FAILED: {why}");
            failures.push(("(the whole suite)", why));
        }
    }
    for (name, why) in &skips {
        println!("skipped on {}: {name}: {why}", env.provider.name());
    }
    // The suite's own resource check among them.
    report_failures(env.provider.name(), &failures);
    println!(
        "{}: {passed} passed, {failed} failed, {skipped} skipped",
        env.provider.name()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The variable that makes the device binary a child running one test.
const CHILD_VAR: &str = "RDMA_TEST_CHILD";

/// Runs the test that runs now ([`current_test`]) in a child process of its own and returns its
/// outcome, or `None` when this process is that child (run the test's body).
///
/// For the tests that add and remove a device: librdmacm before v52 sorts
/// its device list with a comparison that overflows on 64-bit pointers
/// (fixed in rdma-core c4a5ac8), so once a device comes and goes in a
/// process it may take a device that stayed for one that left, close its
/// context, and later hang in a call that walks the list. The suite's
/// process must never see a device come and go; the child's resources are
/// the kernel's to release when it exits, and the suite's final count
/// proves that they were.
pub fn in_own_process() -> Result<Option<Outcome>, Box<dyn Error>> {
    let name = current_test();
    if std::env::var(CHILD_VAR).as_deref() == Ok(name) {
        return Ok(None);
    }
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(exe)
        .env(CHILD_VAR, name)
        .stdin(std::process::Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("test {name} ... ");
    let line = text.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
    match line {
        Some(rest) if rest.starts_with("ok") && out.status.success() => Ok(Some(Outcome::Passed)),
        Some(rest) if rest.starts_with("SKIPPED (") && out.status.success() => Ok(Some(
            Outcome::Skipped(rest["SKIPPED (".len()..].trim_end_matches(')').to_string()),
        )),
        _ => Err(Box::new(Failure(format!(
            "in its own process ({}): {}{}",
            out.status,
            line.unwrap_or("no result line"),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .map(|l| format!("; stderr: {l}"))
                .unwrap_or_default()
        )))),
    }
}

/// Whether `filter` selects the test `name`. The filter is a list of
/// substrings separated by commas: a name is selected when it contains one
/// of them (any name, when all are exclusions) and none of those written
/// with a leading `!`. `qp::,cm::,!cm::async::` runs the QP and CM
/// tests except the async CM ones (ci/memcheck.sh runs its subset so).
pub fn selects(filter: &str, name: &str) -> bool {
    let mut included = None;
    for term in filter.split(',').filter(|t| !t.is_empty()) {
        match term.strip_prefix('!') {
            Some(excluded) if name.contains(excluded) => return false,
            Some(_) => {}
            None => included = Some(included == Some(true) || name.contains(term)),
        }
    }
    included.unwrap_or(true)
}

/// The kernel's resource counts of `device`: pd, cq, qp, cm_id, mr, ctx,
/// srq (the kinds of `rdma resource show`), less the objects of other live
/// processes that this one did not start. Used to prove that objects are
/// released.
///
/// The device tests of two providers may run at the same time (ci/test.sh),
/// and the other provider's process reaches this device too: a wildcard
/// listener puts a listening CM id on every device, and opening every
/// device (`ibv_devinfo`, enumeration) puts a context on it. Each object is
/// listed with the thread that made it (`rdma resource show KIND`); an
/// object counts unless that thread is alive and belongs to a process that
/// is neither this one nor one it started (a child's objects count: a test
/// checks that they go when the child dies). An object of a thread that has
/// exited counts, whoever made it (nothing tells any more); the kernel's own
/// objects (no thread) count.
pub fn resource_counts(
    device: &str,
) -> Result<std::collections::BTreeMap<String, u64>, Box<dyn Error>> {
    use std::collections::HashMap;
    // One `rdma` run: the summary (its line for the device gives the kinds),
    // then the objects of each kind.
    let mut batch = String::from("resource show\n");
    for (kind, _) in RESOURCE_KINDS {
        batch += &format!("resource show {kind}\n");
    }
    // A summary that disagrees with the listing (objects gone between the
    // two dumps) is read again, twice at most.
    let mut attempt = 0;
    loop {
        let out = run_rdma(&["-b", "-"], Some(&batch))?;
        if !out.status.success() {
            return Err(Box::new(Failure(format!(
                "`rdma -b -` ({}) failed: {}",
                batch.trim().replace('\n', "; "),
                String::from_utf8_lossy(&out.stderr)
            ))));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut memo: HashMap<u32, bool> = HashMap::new();
        match count_resources(&text, device, |pid| {
            *memo.entry(pid).or_insert_with(|| foreign(pid))
        }) {
            Ok(counts) => return Ok(counts),
            Err(e) if attempt == 2 => {
                return Err(Box::new(Failure(format!(
                    "`rdma resource show`: {e}: {text}"
                ))))
            }
            Err(_) => attempt += 1,
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The object kinds of `rdma resource show KIND` and the key that follows
/// the device in each object's line.
const RESOURCE_KINDS: [(&str, &str); 7] = [
    ("pd", "pdn"),
    ("cq", "cqn"),
    ("qp", "lqpn"),
    ("cm_id", "cm-idn"),
    ("mr", "mrn"),
    ("ctx", "ctxn"),
    ("srq", "srqn"),
];

/// Counts the objects of `device` in the output of `rdma resource show`
/// followed by `rdma resource show KIND` for each kind, leaving out those
/// made by a thread that `foreign` says is another process's. An error when
/// the summary has no line for the device, or when it counts objects of a
/// kind of which no line was read (the listing's form is not the one parsed
/// here, or the objects went between the two dumps): the counts would then
/// be too low, and a leak could go unseen.
fn count_resources(
    text: &str,
    device: &str,
    mut foreign: impl FnMut(u32) -> bool,
) -> Result<std::collections::BTreeMap<String, u64>, String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut summary: Option<BTreeMap<String, u64>> = None;
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    // The kinds of which a line was read, whoever made the object.
    let mut listed: BTreeSet<&str> = BTreeSet::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(first), Some(name)) = (words.first(), words.get(1)) else {
            continue;
        };
        if first.ends_with(':') {
            // Summary: `0: rxe0: pd 1 cq 2 qp 2 cm_id 0 mr 1 ctx 1 srq 0`.
            if name.trim_end_matches(':') == device {
                summary = Some(
                    words[2..]
                        .chunks(2)
                        .filter_map(|kv| Some((kv[0].to_string(), kv.get(1)?.parse().ok()?)))
                        .collect(),
                );
            }
            continue;
        }
        // An object: `dev rxe0 cqn 0 ...` or `link rxe0/1 lqpn 1 ...`, with
        // `pid N` unless the kernel owns it.
        if name.split('/').next() != Some(device) {
            continue;
        }
        let Some(&(kind, _)) = RESOURCE_KINDS
            .iter()
            .find(|(_, key)| words.get(2) == Some(key))
        else {
            continue;
        };
        listed.insert(kind);
        let pid = words
            .windows(2)
            .find(|w| w[0] == "pid")
            .and_then(|w| w[1].parse::<u32>().ok());
        if !pid.is_some_and(&mut foreign) {
            *counts.entry(kind).or_insert(0) += 1;
        }
    }
    let summary = summary.ok_or_else(|| format!("no summary line for {device}"))?;
    for (kind, n) in &summary {
        if *n > 0 && !listed.contains(kind.as_str()) {
            return Err(format!(
                "the summary counts {n} {kind} on {device}, and no line of them was read"
            ));
        }
    }
    // Every kind of the summary, 0 where none counted.
    Ok(summary
        .into_keys()
        .map(|k| {
            let n = counts.get(k.as_str()).copied().unwrap_or(0);
            (k, n)
        })
        .collect())
}

/// Whether thread `tid` is alive in a process that is neither this one nor
/// one it started (directly or further down).
fn foreign(tid: u32) -> bool {
    // A status field of a thread or process: `Tgid:` (its process), `PPid:`.
    fn field(pid: u32, name: &str) -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    }
    let me = std::process::id();
    let Some(mut p) = field(tid, "Tgid:") else {
        return false; // exited: counted
    };
    // Up the parents: this process, or the top (0, 1) first.
    for _ in 0..64 {
        if p == me {
            return false;
        }
        match field(p, "PPid:") {
            Some(pp) if pp > 1 => p = pp,
            _ => return true,
        }
    }
    true
}

/// Makes librdmacm open its (process-lifetime) context of the device that
/// owns `ip`, by binding a CM id to it.
fn open_rdmacm_context(ip: Ipv4Addr) -> Result<(), Box<dyn Error>> {
    use rdmacm_sys as cm;
    // SAFETY: no arguments; NULL on failure.
    let ch = unsafe { cm::rdma_create_event_channel() };
    if ch.is_null() {
        return Err(Box::new(Failure("rdma_create_event_channel failed".into())));
    }
    let mut id = std::ptr::null_mut();
    // SAFETY: a live channel; `id` is writable.
    let mut rc = unsafe { cm::rdma_create_id(ch, &mut id, std::ptr::null_mut(), cm::RDMA_PS_TCP) };
    if rc == 0 {
        // SAFETY: all-zero bytes are a valid sockaddr_in.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from(ip).to_be();
        // SAFETY: a live id and a complete address.
        rc = unsafe { cm::rdma_bind_addr(id, (&mut sa as *mut libc::sockaddr_in).cast()) };
        // SAFETY: destroyed once; it has no events.
        unsafe { cm::rdma_destroy_id(id) };
    }
    // SAFETY: destroyed once, after its only id.
    unsafe { cm::rdma_destroy_event_channel(ch) };
    if rc != 0 {
        return Err(Box::new(Failure(format!(
            "binding to {ip}: {}",
            std::io::Error::last_os_error()
        ))));
    }
    Ok(())
}

/// The path of example binary `name`, built next to the test binary
/// (`target/debug/deps/device-*` -> `target/debug/<name>`).
pub fn example(name: &str) -> Result<std::path::PathBuf, Box<dyn Error>> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or("the test binary has no parent directory")?;
    let bin = dir.join(name);
    if !bin.is_file() {
        return Err(format!(
            "{} is missing: build the examples first (cargo build -p rdma-examples; ci/test.sh does)",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

/// The path of the `rdma` crate's example `name` (its `examples/`: the
/// programs of the crate docs), built next to the test binary
/// (`target/debug/examples/<name>`).
pub fn crate_example(name: &str) -> Result<std::path::PathBuf, Box<dyn Error>> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or("the test binary has no parent directory")?;
    let bin = dir.join("examples").join(name);
    if !bin.is_file() {
        return Err(format!(
            "{} is missing: build them first (cargo build -p rdma --examples --features tokio; ci/test.sh does)",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

/// A child process (an example program or an rdma-core tool) whose output
/// (stdout, then stderr) is collected when it ends.
pub struct Running {
    /// What it is in the test ("server", "client"), for messages.
    pub role: &'static str,
    /// The command line, for messages.
    pub cmdline: String,
    /// The process.
    pub child: std::process::Child,
}

impl Running {
    /// Starts `prog` with `args`, no standard input, output piped.
    pub fn spawn(role: &'static str, prog: &str, args: &[&str]) -> Result<Running, Box<dyn Error>> {
        let child = std::process::Command::new(prog)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {prog}: {e}"))?;
        Ok(Running {
            role,
            cmdline: format!("{prog} {}", args.join(" ")),
            child,
        })
    }

    /// The exit status, or `None` at the deadline.
    pub fn wait_status(&mut self, deadline: Instant) -> Option<std::process::ExitStatus> {
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                _ => return None,
            }
        }
    }

    /// The exit code, or `None` at the deadline (or when killed by a signal).
    pub fn wait(&mut self, deadline: Instant) -> Option<i32> {
        self.wait_status(deadline)?.code()
    }

    /// Kills the child if it still runs, reaps it, and returns its output.
    pub fn finish_killed(&mut self) -> String {
        use std::io::Read;
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let mut out = String::new();
        if let Some(mut s) = self.child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        let mut err = String::new();
        if let Some(mut s) = self.child.stderr.take() {
            let _ = s.read_to_string(&mut err);
        }
        format!("--- {} `{}`:\n{}{}", self.role, self.cmdline, out, err)
    }
}

/// Runs the `rdma` tool with `args` (and `input` on its standard input),
/// again, twice at most, when it fails: it lists the devices once, then
/// stops at the first query that fails, as for a device removed in between
/// (a scratch device of the other provider's suite, which runs at the same
/// time). The last run's output, whatever its status.
fn run_rdma(args: &[&str], input: Option<&str>) -> std::io::Result<std::process::Output> {
    use std::process::{Command, Stdio};
    let mut attempt = 0;
    loop {
        let mut child = Command::new("rdma")
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if out.status.success() || attempt == 2 {
            return Ok(out);
        }
        attempt += 1;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The CM ids of the system, as `rdma resource show cm_id` lists them.
pub fn cm_ids() -> Result<String, String> {
    let out = run_rdma(&["resource", "show", "cm_id"], None)
        .map_err(|e| format!("cannot run `rdma resource show cm_id`: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Waits until a CM id listens on `port`, from `rdma resource show cm_id`
/// (an RDMA listener on RoCE has no TCP socket to look for).
pub fn wait_cm_listening(port: u16, server: &mut Running, deadline: Instant) -> Result<(), String> {
    let needle = format!(":{port} ");
    let goal = format!("listening on port {port}");
    wait_until(server, "server", &goal, deadline, || {
        let text = cm_ids()?;
        let listening = text
            .lines()
            .any(|l| l.contains("LISTEN") && format!("{l} ").contains(&needle));
        Ok((listening, format!("; cm ids:\n{text}")))
    })
}

/// Waits until something listens on TCP `port` (from /proc/net/tcp and
/// tcp6), without connecting: servers that accept exactly one connection
/// stay untouched.
pub fn wait_tcp_listening(
    port: u16,
    server: &mut Running,
    deadline: Instant,
) -> Result<(), String> {
    let needle = format!(":{port:04X} ");
    let goal = format!("listening on port {port}");
    wait_until(server, "server", &goal, deadline, || {
        let listening = ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
            let text = std::fs::read_to_string(table).unwrap_or_default();
            // Columns: sl local_address rem_address st ...; 0A is LISTEN.
            text.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "0A"
            })
        });
        Ok((listening, String::new()))
    })
}

/// Polls `probe` (whether `child`, the `who`, has reached `goal`, and what
/// to add to a timeout error) every 50 ms until it says yes, the child
/// exits, or `deadline`.
pub fn wait_until(
    child: &mut Running,
    who: &str,
    goal: &str,
    deadline: Instant,
    mut probe: impl FnMut() -> Result<(bool, String), String>,
) -> Result<(), String> {
    loop {
        let (reached, detail) = probe()?;
        if reached {
            return Ok(());
        }
        if let Ok(Some(status)) = child.child.try_wait() {
            return Err(format!("the {who} exited ({status}) before {goal}"));
        }
        if Instant::now() > deadline {
            return Err(format!("the {who} was not {goal} in time{detail}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::{count_resources, foreign, selects};

    #[test]
    fn resources_of_other_live_processes_are_left_out() {
        // The summary, then the objects of each kind, as `rdma -b -` prints
        // them: a wildcard listener of process 300 has a CM id on both
        // devices; 400 is this process (or one it started), 500 has exited.
        let text = "\
0: rxe0: pd 2 cq 1 qp 1 cm_id 3 mr 0 ctx 1 srq 0
1: siw0: pd 0 cq 0 qp 0 cm_id 1 mr 0 ctx 0 srq 0
dev rxe0 pdn 0 local_dma_lkey 0x198 users 1 comm [ib_core]
dev rxe0 pdn 1 users 0 pid 400 comm device
dev rxe0 cqn 0 cqe 1023 users 2 poll-ctx WORKQUEUE adaptive-moderation off comm [ib_core]
link rxe0/1 lqpn 1 type GSI state RTS sq-psn 0 comm [ib_core]
link rxe0/- cm-idn 0 state LISTEN ps TCP pid 300 comm rping src-addr 0.0.0.0:7999
link siw0/- cm-idn 0 state LISTEN ps TCP pid 300 comm rping src-addr 0.0.0.0:7999
link rxe0/1 cm-idn 1 state CONNECT ps TCP pid 400 comm device src-addr 192.0.2.1:1
link rxe0/1 cm-idn 2 state CONNECT ps TCP pid 500 comm gone src-addr 192.0.2.1:2
dev rxe0 ctxn 0 pid 300 comm ibv_devinfo
";
        let live_other = |pid| pid == 300;
        let rxe = count_resources(text, "rxe0", live_other).expect("rxe0");
        let want: Vec<(&str, u64)> = vec![
            ("cm_id", 2),
            ("cq", 1),
            ("ctx", 0),
            ("mr", 0),
            ("pd", 2),
            ("qp", 1),
            ("srq", 0),
        ];
        assert_eq!(
            rxe.iter()
                .map(|(k, v)| (k.as_str(), *v))
                .collect::<Vec<_>>(),
            want
        );
        let siw = count_resources(text, "siw0", live_other).expect("siw0");
        assert_eq!(siw["cm_id"], 0);
        // Nothing foreign: the summary's counts.
        let all = count_resources(text, "rxe0", |_| false).expect("rxe0");
        assert_eq!((all["cm_id"], all["ctx"], all["pd"]), (3, 1, 2));
        assert!(count_resources(text, "mlx5_0", |_| false).is_err());
        // Objects the summary counts and the listing lacks (another form of
        // listing): an error, not counts too low.
        let drifted = text.replace("cm-idn", "cm_idn");
        let e = count_resources(&drifted, "rxe0", |_| false).unwrap_err();
        assert!(e.contains("3 cm_id"), "{e}");
        // This process, and a live thread of it, are not foreign; a pid that
        // does not exist is not either; this process's parent is.
        assert!(!foreign(std::process::id()));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        assert_ne!(tid, std::process::id());
        assert!(!foreign(tid));
        drop(done_tx);
        t.join().unwrap();
        assert!(!foreign(u32::MAX - 1));
        assert!(foreign(std::os::unix::process::parent_id()));
    }

    #[test]
    fn filter_is_a_substring_or_a_comma_separated_list_with_exclusions() {
        assert!(selects("verbs::", "verbs::uc_send_and_write"));
        assert!(!selects("verbs::", "cm::connect_send_and_disconnect"));
        assert!(selects("", "anything"));
        let f = "verbs::,cm::,!cm::async::sixty";
        assert!(selects(f, "verbs::uc_send_and_write"));
        assert!(selects(
            f,
            "cm::async::dropped_connect_futures_leak_nothing"
        ));
        assert!(!selects(f, "cm::async::sixty_four_concurrent_connections"));
        assert!(!selects(
            f,
            "faults::error_state_flushes_outstanding_requests"
        ));
        assert!(selects("!load::", "verbs::uc_send_and_write"));
        assert!(!selects("!load::", "load::thousand_queue_pairs"));
    }
}
