//! The programs a test runs: example binaries built next to the test
//! binary, a child process killed when dropped, and waits for what a
//! child brings up (a CM listener, a TCP port).

use std::error::Error;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::cm_ids;

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
            "{} is missing: build them first (cargo build -p rdma --examples --features stream; ci/test.sh does)",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

/// A child process (an example program, an rdma-core tool, or this test
/// binary running a test's other side) whose output is collected as it
/// comes (so that a chatty child never stalls on a full pipe, and a test
/// can show what it printed so far), and which is killed and reaped when
/// dropped, however the test ends.
pub struct Running {
    /// What it is in the test ("server", "client"), for messages.
    pub role: &'static str,
    /// The command line, for messages.
    pub cmdline: String,
    /// The process.
    pub child: std::process::Child,
    /// Its standard output and standard error so far, each as it came.
    output: [Arc<Mutex<String>>; 2],
    /// The threads that collect them; each ends at its pipe's end.
    readers: Vec<JoinHandle<()>>,
}

impl Running {
    /// Starts `prog` with `args`, no standard input, output collected.
    pub fn spawn(role: &'static str, prog: &str, args: &[&str]) -> Result<Running, Box<dyn Error>> {
        let mut cmd = Command::new(prog);
        cmd.args(args);
        Running::start(role, cmd)
    }

    /// Starts `cmd` (with its own environment, say), no standard input,
    /// output collected.
    pub fn start(role: &'static str, mut cmd: Command) -> Result<Running, Box<dyn Error>> {
        let cmdline = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {cmdline}: {e}"))?;
        let output = [
            Arc::new(Mutex::new(String::new())),
            Arc::new(Mutex::new(String::new())),
        ];
        let pipes: [Option<Box<dyn Read + Send>>; 2] = [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        let readers = pipes
            .into_iter()
            .zip(&output)
            .filter_map(|(pipe, text)| {
                let (mut pipe, text) = (pipe?, Arc::clone(text));
                Some(std::thread::spawn(move || {
                    let mut buf = [0; 4096];
                    while let Ok(n) = pipe.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        text.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }))
            })
            .collect();
        Ok(Running {
            role,
            cmdline,
            child,
            output,
            readers,
        })
    }

    /// What it printed so far: its standard output, then its standard
    /// error.
    pub fn output(&self) -> String {
        self.output
            .iter()
            .map(|t| t.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect()
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
        self.kill_and_reap();
        // The pipes end with the child (unless a grandchild holds them:
        // then what came so far).
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        for r in std::mem::take(&mut self.readers) {
            while !r.is_finished() && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if r.is_finished() {
                let _ = r.join();
            }
        }
        format!("--- {} `{}`:\n{}", self.role, self.cmdline, self.output())
    }

    fn kill_and_reap(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
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
