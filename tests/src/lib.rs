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
mod process;
mod resources;
pub mod scratch;
pub mod sys;

pub use defer::Defer;
pub use process::{
    crate_example, example, wait_cm_listening, wait_tcp_listening, wait_until, Running,
};
pub use resources::{cm_ids, grown_counts, resource_counts};
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
    // In a child process of `in_own_process` the whole line comes at the
    // end, so that what the test printed meanwhile cannot split it: the
    // parent reads the outcome from it.
    let lead = if std::env::var(CHILD_VAR).as_deref() == Ok(name) {
        format!("test {name} ... ")
    } else {
        print!("test {name} ... ");
        let _ = std::io::stdout().flush();
        String::new()
    };
    let start = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(body));
    let ms = start.elapsed().as_millis();
    match result {
        Ok(Ok(Outcome::Passed)) => {
            println!("{lead}ok ({ms} ms)");
            Ran::Passed
        }
        Ok(Ok(Outcome::Skipped(why))) => {
            println!("{lead}SKIPPED ({why})");
            Ran::Skipped(why)
        }
        Ok(Err(e)) => {
            println!("{lead}FAILED ({ms} ms): {e}");
            Ran::Failed(e.to_string())
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            println!("{lead}FAILED ({ms} ms): panicked: {msg}");
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

#[cfg(test)]
mod tests {
    use super::selects;

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
