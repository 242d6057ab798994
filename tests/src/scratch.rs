//! A soft-RDMA device of a test's own, on a dummy netdev of its own, for
//! tests that remove a device under live objects (VM only: needs root and
//! the `ip` and `rdma` tools).

use std::error::Error;
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
/// or opens devices other than its own, exclusively by a [`ScratchDevice`]
/// for its whole life. Released when dropped (or when the process dies: the
/// kernel drops a dead process's locks).
///
/// Locks belong to each open of the file: a test that holds it must not
/// wait for a process of its own that takes it exclusively (a scratch
/// device's test in its own process), or it waits for itself until
/// [`DEVICE_SET_WAIT`] ends the wait.
pub struct DeviceSet {
    // Held for its descriptor: closing it releases the lock.
    _file: File,
}

/// The lock's file; the same path for every suite of the machine.
const DEVICE_SET_LOCK: &str = "/tmp/rdma-tests-device-set.lock";

/// How long [`DeviceSet::lock`] waits: far longer than a scratch device's
/// test holds it (seconds), far shorter than a provider's run may take.
pub const DEVICE_SET_WAIT: Duration = Duration::from_secs(120);

impl DeviceSet {
    /// Waits for the lock, shared or exclusive, [`DEVICE_SET_WAIT`] at most:
    /// a holder that never lets go (a device removal that hangs) fails the
    /// waiting test with an error that names the lock, rather than hanging
    /// the suite.
    pub fn lock(exclusive: bool) -> std::io::Result<DeviceSet> {
        lock_at(Path::new(DEVICE_SET_LOCK), exclusive, DEVICE_SET_WAIT)
    }
}

/// [`DeviceSet::lock`] on the file at `path`, waiting `wait` at most.
fn lock_at(path: &Path, exclusive: bool, wait: Duration) -> std::io::Result<DeviceSet> {
    // Opened for writing if it can be (to create it); a file of another
    // user that may not be written to is locked through a read-only open
    // (flock needs no write access).
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .or_else(|_| File::open(path))?;
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | libc::LOCK_NB;
    let start = Instant::now();
    loop {
        // SAFETY: `file` is open for the duration of the call, so its
        // descriptor is valid; flock(2) takes no pointers.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(DeviceSet { _file: file });
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::Interrupted => continue,
            std::io::ErrorKind::WouldBlock if start.elapsed() < wait => {
                std::thread::sleep(Duration::from_millis(20));
            }
            std::io::ErrorKind::WouldBlock => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the device-set lock {} was not free in {wait:?} (a scratch device \
                         of another test not removed?)",
                        path.display()
                    ),
                ));
            }
            _ => return Err(e),
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

/// How long a dropped [`ScratchDevice`] waits for its device's removal.
pub const REMOVAL_WAIT: Duration = Duration::from_secs(30);

/// Whether librdmacm lists a device named `name` (`rdma_get_devices`,
/// which also makes it notice devices that are gone and close the context
/// it keeps on each).
pub fn rdmacm_lists(name: &str) -> bool {
    // SAFETY: NULL for the count is allowed; NULL on failure.
    let list = unsafe { rdmacm_sys::rdma_get_devices(std::ptr::null_mut()) };
    if list.is_null() {
        return false;
    }
    let mut found = false;
    let mut p = list;
    // SAFETY: a NULL-terminated list of open contexts, freed below.
    unsafe {
        while !(*p).is_null() {
            let dev = std::ffi::CStr::from_ptr(ibverbs_sys::ibv_get_device_name((**p).device));
            found |= dev.to_bytes() == name.as_bytes();
            p = p.add(1);
        }
        rdmacm_sys::rdma_free_devices(list);
    }
    found
}

impl Drop for ScratchDevice {
    /// Removes the device and its netdev. The removal waits until every
    /// context on the device is closed, and librdmacm keeps one open on
    /// each device it has seen until `rdma_get_devices` shows it gone: a
    /// test that ends (or fails) before removing its device itself still
    /// holds that context, so waiting for the removal alone would wait for
    /// this process forever. The drop starts the removal, makes librdmacm
    /// look again while it runs, and waits [`REMOVAL_WAIT`] at most: past
    /// that the device goes when this process exits (a scratch device's
    /// test runs in a process of its own), and the drop says so.
    fn drop(&mut self) {
        let Ok(mut removal) = self.start_removal() else {
            self.remove();
            return;
        };
        let start = Instant::now();
        loop {
            match removal.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if start.elapsed() < REMOVAL_WAIT => {
                    rdmacm_lists(self.name);
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    eprintln!(
                        "scratch device {}: its removal still waits after {REMOVAL_WAIT:?} \
                         (a context on it is open); it completes when this process exits",
                        self.name
                    );
                    return;
                }
            }
        }
        let _ = Command::new("ip")
            .args(["link", "del", self.netdev])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock file of this test's own.
    fn path() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("rdma-tests-lock-unit-{}", std::process::id()))
    }

    /// Whether an exclusive lock can be had at once, through an open of
    /// its own (flock locks belong to the open file description).
    fn exclusive_free(path: &Path) -> bool {
        lock_at(path, true, Duration::ZERO).is_ok()
    }

    #[test]
    fn device_set_excludes_while_held_and_frees_when_dropped() {
        let p = path();
        let wait = Duration::from_millis(100);
        let shared = lock_at(&p, false, wait).expect("shared");
        let again = lock_at(&p, false, wait).expect("a second shared lock at once");
        assert!(!exclusive_free(&p), "exclusive granted under shared locks");
        drop((shared, again));
        let held = lock_at(&p, true, wait).expect("exclusive");
        assert!(!exclusive_free(&p), "exclusive granted twice");
        let start = Instant::now();
        let e = lock_at(&p, false, wait)
            .err()
            .expect("shared granted under exclusive");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        assert!(start.elapsed() >= wait, "gave up before its wait");
        drop(held);
        assert!(exclusive_free(&p), "the lock outlived its DeviceSet");
        let _ = std::fs::remove_file(&p);
    }
}
