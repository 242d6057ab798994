//! A soft-RDMA device of a test's own, on a dummy netdev of its own, for
//! tests that remove a device under live objects (VM only: needs root and
//! the `ip` and `rdma` tools).

use std::error::Error;
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};

use crate::Provider;

/// The device and its netdev; both are removed when it is dropped.
///
/// It holds the [`DeviceSet`] lock exclusively from before the device is
/// added until after it is removed, so that another suite in the same VM
/// (rxe and siw run at the same time) never lists the devices while a
/// scratch device comes or goes.
pub struct ScratchDevice {
    /// The verbs device name.
    pub name: &'static str,
    /// The dummy netdev it is bound to.
    pub netdev: &'static str,
    // Dropped after `Drop::drop` has removed the device.
    _set: DeviceSet,
}

/// A lock on the set of RDMA devices, shared between the processes of one
/// machine (`flock(2)` on a file in /tmp): taken shared by a test that lists
/// or opens every device and compares listings, exclusively by a
/// [`ScratchDevice`] for its whole life. Released when dropped (or when the
/// process dies: the kernel drops a dead process's locks).
pub struct DeviceSet {
    // Held for its descriptor: closing it releases the lock.
    _file: File,
}

/// The lock's file; the same path for every suite of the machine.
const DEVICE_SET_LOCK: &str = "/tmp/rdma-tests-device-set.lock";

impl DeviceSet {
    /// Waits for the lock, shared or exclusive.
    pub fn lock(exclusive: bool) -> std::io::Result<DeviceSet> {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(DEVICE_SET_LOCK)?;
        let op = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        loop {
            // SAFETY: `file` is open for the duration of the call, so its
            // descriptor is valid; flock(2) takes no pointers.
            if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
                return Ok(DeviceSet { _file: file });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
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
        let dev = ScratchDevice {
            name,
            netdev,
            _set: DeviceSet::lock(true)?,
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether an exclusive lock can be had at once, through a descriptor
    /// of its own (flock locks belong to the open file description).
    fn exclusive_free() -> bool {
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(DEVICE_SET_LOCK)
            .expect("lock file");
        // SAFETY: `f` is open for the call; flock(2) takes no pointers.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        r == 0
    }

    #[test]
    fn device_set_excludes_while_held_and_frees_when_dropped() {
        let shared = DeviceSet::lock(false).expect("shared");
        let again = DeviceSet::lock(false).expect("a second shared lock at once");
        assert!(!exclusive_free(), "exclusive granted under shared locks");
        drop((shared, again));
        let held = DeviceSet::lock(true).expect("exclusive");
        assert!(!exclusive_free(), "exclusive granted twice");
        drop(held);
        assert!(exclusive_free(), "the lock outlived its DeviceSet");
    }
}
