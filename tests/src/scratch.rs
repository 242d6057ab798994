//! A soft-RDMA device of a test's own, on a dummy netdev of its own, for
//! tests that remove a device under live objects (VM only: needs root and
//! the `ip` and `rdma` tools).

use std::error::Error;
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};

use crate::Provider;

/// The device and its netdev; both are removed when it is dropped.
pub struct ScratchDevice {
    /// The verbs device name.
    pub name: &'static str,
    /// The dummy netdev it is bound to.
    pub netdev: &'static str,
}

/// Runs a command; its failure, with its stderr, is the error.
fn run(args: &[&str]) -> Result<(), Box<dyn Error>> {
    let out = Command::new(args[0]).args(&args[1..]).output()?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

impl ScratchDevice {
    /// Adds device `name` of `provider` on dummy netdev `netdev` with
    /// address `ip`/24, first removing any left by a run that did not finish.
    pub fn new(
        provider: Provider,
        name: &'static str,
        netdev: &'static str,
        ip: Ipv4Addr,
    ) -> Result<ScratchDevice, Box<dyn Error>> {
        let dev = ScratchDevice { name, netdev };
        dev.remove();
        run(&["ip", "link", "add", netdev, "type", "dummy"])?;
        run(&["ip", "addr", "add", &format!("{ip}/24"), "dev", netdev])?;
        run(&["ip", "link", "set", netdev, "up"])?;
        run(&[
            "rdma",
            "link",
            "add",
            name,
            "type",
            provider.name(),
            "netdev",
            netdev,
        ])?;
        Ok(dev)
    }

    /// Starts removing the device without waiting for the removal (which
    /// waits until every process has closed its contexts); its stderr is
    /// piped.
    pub fn start_removal(&self) -> std::io::Result<Child> {
        Command::new("rdma")
            .args(["link", "delete", self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
    }

    fn remove(&self) {
        for args in [
            &["rdma", "link", "delete", self.name][..],
            &["ip", "link", "del", self.netdev][..],
        ] {
            let _ = Command::new(args[0])
                .args(&args[1..])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for ScratchDevice {
    fn drop(&mut self) {
        self.remove();
    }
}
