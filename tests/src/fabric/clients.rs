//! ibsim's clients: the processes attached to the simulator (umad2sim
//! connects each one on its first look at the umad devices).
//!
//! ibsim frees a client's slot only when the client says goodbye
//! (umad2sim does at a normal exit) or when a packet written to it fails.
//! A process that is killed, or crashes, keeps its slot: at most 10 are
//! held at a time, and a slot that claimed its node's SM role (the issm
//! device, or `SIM_SET_ISSM=1`) refuses the next process that claims it
//! there ("SM already exists"). [`Fabric::forget_dead_clients`] asks
//! ibsim's console for its clients (`Attached`) and disconnects (`X N`)
//! each one whose process is gone.

use std::error::Error;
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use super::Fabric;

/// A client ibsim lists (`Client N: pid P connected at "NODE" ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimClient {
    /// Its number (what `X` takes).
    pub id: u32,
    /// The process attached.
    pub pid: u32,
    /// The node it is attached at.
    pub node: String,
    /// Whether it holds the node's SM role (the line ends with `SM`).
    pub is_sm: bool,
}

/// The clients of the console's `Attached` listing in `text`.
pub fn parse_attached(text: &str) -> Vec<SimClient> {
    text.lines()
        .filter_map(|l| {
            let rest = &l[l.find("Client ")? + "Client ".len()..];
            let (id, rest) = rest.split_once(": pid ")?;
            let (pid, rest) = rest.split_once(" connected at \"")?;
            let (node, rest) = rest.split_once('"')?;
            Some(SimClient {
                id: id.trim().parse().ok()?,
                pid: pid.trim().parse().ok()?,
                node: node.to_string(),
                is_sm: rest.trim_end().ends_with(" SM"),
            })
        })
        .collect()
}

/// Whether process `pid` still runs (a zombie does not: it holds no
/// connection any more).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last `)`.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

/// Writes `cmd` to ibsim's console (`RDMA_FABRIC_CONSOLE`).
pub fn console(cmd: &str) -> Result<(), Box<dyn Error>> {
    let path = std::env::var("RDMA_FABRIC_CONSOLE").map_err(|_| "no RDMA_FABRIC_CONSOLE")?;
    let mut f = std::fs::OpenOptions::new().write(true).open(&path)?;
    writeln!(f, "{cmd}")?;
    Ok(())
}

fn log_from(path: &std::path::Path, from: u64) -> String {
    let mut text = Vec::new();
    let _ = std::fs::File::open(path).and_then(|mut f| {
        f.seek(SeekFrom::Start(from))?;
        f.read_to_end(&mut text)
    });
    String::from_utf8_lossy(&text).into_owned()
}

impl Fabric {
    /// ibsim's clients, as its console lists them (`Attached`; the
    /// listing is read back from ibsim's log in the run folder). This
    /// process is attached, so a listing without a client is not complete
    /// yet: read until it has one and the prompt after it, for at most 5 s.
    pub fn sim_clients(&self) -> Result<Vec<SimClient>, Box<dyn Error>> {
        let log = self.dir.join("ibsim.log");
        let from = std::fs::metadata(&log).map_or(0, |m| m.len());
        console("Attached")?;
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let text = log_from(&log, from);
            let last = text.rfind("Client ");
            if let Some(i) = last {
                if text[i..].contains("sim>") {
                    return Ok(parse_attached(&text));
                }
            }
            if Instant::now() > end {
                return Err(
                    format!("no client listing in ibsim's log within 5 s: {text:?}").into(),
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Disconnects each of ibsim's clients whose process is gone (`X N`),
    /// waiting until ibsim no longer lists them (at most 5 s); the clients
    /// it disconnected.
    pub fn forget_dead_clients(&self) -> Result<Vec<SimClient>, Box<dyn Error>> {
        let dead: Vec<SimClient> = self
            .sim_clients()?
            .into_iter()
            .filter(|c| !alive(c.pid))
            .collect();
        if dead.is_empty() {
            return Ok(dead);
        }
        for c in &dead {
            console(&format!("X {}", c.id))?;
        }
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let now = self.sim_clients()?;
            let left: Vec<_> = dead
                .iter()
                .filter(|d| now.iter().any(|c| c.id == d.id && c.pid == d.pid))
                .collect();
            if left.is_empty() {
                return Ok(dead);
            }
            if Instant::now() > end {
                return Err(format!("ibsim still lists the gone clients {left:?}").into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attached_listing_parses_into_clients() {
        let text =
            "sim> Client 0: pid 20837 connected at \"Switch1\" port 0x200000, lid 1, qp 0 SM\n\
                    Client 3: pid 41 connected at \"H 1\" port 0x10001, lid 5, qp 0\n\
                    sim> Client x: pid 1 connected at \"a\"\nnoise\n";
        assert_eq!(
            parse_attached(text),
            [
                SimClient {
                    id: 0,
                    pid: 20837,
                    node: "Switch1".into(),
                    is_sm: true
                },
                SimClient {
                    id: 3,
                    pid: 41,
                    node: "H 1".into(),
                    is_sm: false
                },
            ]
        );
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(alive(std::process::id()));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        assert!(!alive(pid));
    }
}
