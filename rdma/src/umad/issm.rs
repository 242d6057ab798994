//! The IsSM capability of a port: held by a subnet manager while it runs.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, RawFd};

use super::{Error, Result};

/// Holds the IsSM bit of a port's CapabilityMask: while it lives, the port
/// says that a subnet manager runs behind it (PortInfo CapabilityMask bit
/// 1), the kernel hands it the requests that only an SM takes, and under
/// ibsim's umad2sim the simulator passes it the unsolicited requests of
/// the SM's port (SA queries, SMInfo). Dropping it clears the bit.
///
/// It is the open `issm` device of the port (`/dev/infiniband/issmN`),
/// which takes one holder at a time: a second `IsSm` of the same port
/// waits in the kernel until the first is dropped, so [`IsSm::try_acquire`]
/// opens it without waiting and reports `EAGAIN` (another SM holds it).
#[derive(Debug)]
pub struct IsSm {
    /// The open device. A raw fd rather than an `OwnedFd`: under umad2sim
    /// it is the shim's (the kernel's close(2) of it fails with EBADF,
    /// which `OwnedFd` takes for a double close).
    fd: RawFd,
    path: String,
}

impl IsSm {
    /// Sets the IsSM bit of port `port_num` of `ca`, waiting while another
    /// process holds it.
    pub fn acquire(ca: &str, port_num: u32) -> Result<IsSm> {
        IsSm::open(ca, port_num, 0)
    }

    /// Sets the IsSM bit, or fails with `EAGAIN` (as [`Error::Io`]) at once
    /// if another process holds it.
    pub fn try_acquire(ca: &str, port_num: u32) -> Result<IsSm> {
        IsSm::open(ca, port_num, libc::O_NONBLOCK)
    }

    fn open(ca: &str, port_num: u32, flags: i32) -> Result<IsSm> {
        let name = CString::new(ca).map_err(|_| Error::NoDevice(ca.to_string()))?;
        let port =
            i32::try_from(port_num).map_err(|_| Error::io("umad_get_issm_path", libc::EINVAL))?;
        let mut buf = [0 as libc::c_char; 256];
        // SAFETY: `name` is NUL-terminated; `buf` is writable for its
        // length, which is passed as the maximum libibumad writes
        // (NUL included).
        let rc = unsafe {
            umad_sys::umad_get_issm_path(name.as_ptr(), port, buf.as_mut_ptr(), buf.len() as i32)
        };
        if rc < 0 {
            return Err(Error::io("umad_get_issm_path", -rc));
        }
        // SAFETY: on success libibumad wrote a NUL-terminated path into
        // `buf` (it truncates to the maximum, NUL included).
        let path = unsafe { CStr::from_ptr(buf.as_ptr()) };
        // SAFETY: `path` is NUL-terminated; open(2) takes no other pointer.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | flags) };
        if fd < 0 {
            return Err(Error::io(
                "open (issm)",
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            ));
        }
        Ok(IsSm {
            fd,
            path: path.to_string_lossy().into_owned(),
        })
    }

    /// The device held (`/dev/infiniband/issm0`).
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl AsRawFd for IsSm {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for IsSm {
    fn drop(&mut self) {
        // SAFETY: the fd was opened by `IsSm::open` and is closed only
        // here; nothing else owns it.
        unsafe { libc::close(self.fd) };
    }
}
