//! An open umad port: the file descriptor of `/dev/infiniband/umadN`, and
//! reading and writing MADs through it.

use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::ca::{ca_cstring, CaPort};
use super::wire::{parse, Received, HDR_SIZE};
use super::{Error, Result};
use crate::mad::Mad;

pub(crate) struct PortInner {
    fd: RawFd,
    ca: String,
    port_num: u32,
    ethernet: bool,
    /// MADs read while waiting for another one.
    pending: Mutex<VecDeque<Received>>,
    /// (agent ID, lower 32 bits of the TID) of requests sent with a timeout
    /// whose response or timeout has not been read yet.
    outstanding: Mutex<HashSet<(u32, u32)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

impl Drop for PortInner {
    fn drop(&mut self) {
        // SAFETY: `fd` came from umad_open_port and is closed once, here;
        // every agent (which holds this PortInner) is gone.
        unsafe { umad_sys::umad_close_port(self.fd) };
    }
}

/// An open umad port (`umad_open_port`), closed on drop.
///
/// Its fd is non-blocking; [`Port::recv`] polls it with a timeout, and
/// [`AsFd`] lets an event loop wait on it. All agents registered on the port
/// share its receive queue.
pub struct Port {
    pub(crate) inner: Arc<PortInner>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("ca", &self.inner.ca)
            .field("port", &self.inner.port_num)
            .field("fd", &self.inner.fd)
            .finish()
    }
}

impl Port {
    /// Opens port `port_num` of the CA `ca` (`rxe0`, 1).
    pub fn open(ca: &str, port_num: u32) -> Result<Port> {
        let info = CaPort::get(ca, port_num)?;
        let cname = ca_cstring(ca)?;
        // SAFETY: `cname` is NUL-terminated; the fd returned is owned by the
        // PortInner built below and closed in its Drop.
        let fd = unsafe { umad_sys::umad_open_port(cname.as_ptr(), port_num as i32) };
        if fd < 0 {
            let e = if fd == -1 { errno() } else { -fd };
            return Err(Error::io("umad_open_port", e));
        }
        let inner = PortInner {
            fd,
            ca: ca.to_string(),
            port_num,
            ethernet: info.is_ethernet(),
            pending: Mutex::default(),
            outstanding: Mutex::default(),
        };
        // SAFETY: umad_size reads a global that umad_open_port has set.
        if unsafe { umad_sys::umad_size() } != HDR_SIZE {
            return Err(Error::io("IB_USER_MAD_ENABLE_PKEY", libc::EPROTO));
        }
        // SAFETY: `fd` is open; F_GETFL/F_SETFL change only its flags.
        let nonblock = unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
        };
        if !nonblock {
            return Err(Error::last("fcntl(O_NONBLOCK)"));
        }
        Ok(Port {
            inner: Arc::new(inner),
        })
    }

    /// The CA's name.
    pub fn ca_name(&self) -> &str {
        &self.inner.ca
    }
    /// The port number.
    pub fn port_num(&self) -> u32 {
        self.inner.port_num
    }
    /// Whether the port is Ethernet (RoCE): MADs need a GRH.
    pub fn is_ethernet(&self) -> bool {
        self.inner.ethernet
    }
    /// The port's current attributes.
    pub fn info(&self) -> Result<CaPort> {
        CaPort::get(&self.inner.ca, self.inner.port_num)
    }

    /// The next MAD for any agent of this port, waiting up to `timeout`
    /// (`None`: forever).
    pub fn recv(&self, timeout: Option<Duration>) -> Result<Received> {
        self.inner.recv_matching(timeout, |_| true)
    }

    /// The next MAD if one is queued, without waiting.
    pub fn try_recv(&self) -> Result<Option<Received>> {
        if let Some(r) = lock(&self.inner.pending).pop_front() {
            return Ok(Some(r));
        }
        self.inner.read_one()
    }
}

impl AsFd for Port {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open as long as `self.inner` lives, which
        // outlives the borrow of `self`.
        unsafe { BorrowedFd::borrow_raw(self.inner.fd) }
    }
}

impl AsRawFd for Port {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd
    }
}

impl PortInner {
    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }
    pub(crate) fn is_ethernet(&self) -> bool {
        self.ethernet
    }

    /// Reads one MAD from the fd; `None` when none is queued.
    pub(crate) fn read_one(&self) -> Result<Option<Received>> {
        let mut buf = vec![0u8; HDR_SIZE + Mad::SIZE];
        loop {
            // SAFETY: `buf` is writable for its whole length.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                let r = parse(&buf[..(n as usize).min(buf.len())])?;
                self.settle(&r);
                return Ok(Some(r));
            }
            match errno() {
                libc::EAGAIN => return Ok(None),
                libc::EINTR => continue,
                libc::ENOSPC => {
                    // An RMPP transfer larger than the buffer: the kernel
                    // wrote the header with the length it needs and kept it.
                    let need = u32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]) as usize;
                    let want = HDR_SIZE.saturating_add(need).max(buf.len() + 1);
                    if want > 64 << 20 {
                        return Err(Error::io("read", libc::EMSGSIZE));
                    }
                    buf.resize(want, 0);
                }
                e => return Err(Error::io("read", e)),
            }
        }
    }

    /// Forgets an outstanding request once its response or timeout is read.
    fn settle(&self, r: &Received) {
        if r.status != 0 || r.mad.method().is_response() {
            lock(&self.outstanding).remove(&(r.agent_id, r.tid() as u32));
        }
    }

    pub(crate) fn add_outstanding(&self, agent: u32, tid: u64) {
        lock(&self.outstanding).insert((agent, tid as u32));
    }
    pub(crate) fn is_outstanding(&self, agent: u32, tid: u64) -> bool {
        lock(&self.outstanding).contains(&(agent, tid as u32))
    }

    /// Waits for a MAD that `want` accepts; others are queued for later.
    pub(crate) fn recv_matching(
        &self,
        timeout: Option<Duration>,
        want: impl Fn(&Received) -> bool,
    ) -> Result<Received> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            {
                let mut q = lock(&self.pending);
                if let Some(i) = q.iter().position(&want) {
                    if let Some(r) = q.remove(i) {
                        return Ok(r);
                    }
                }
            }
            while let Some(r) = self.read_one()? {
                if want(&r) {
                    return Ok(r);
                }
                lock(&self.pending).push_back(r);
            }
            // Wait in short slices, so that a MAD another thread queued for
            // us is seen soon.
            let slice = Duration::from_millis(20);
            let wait = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::RecvTimeout(timeout.unwrap_or_default()));
                    }
                    left.min(slice)
                }
                None => slice,
            };
            let mut pfd = libc::pollfd {
                fd: self.fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, wait.as_millis().max(1) as i32) };
            if rc < 0 && errno() != libc::EINTR {
                return Err(Error::last("poll"));
            }
        }
    }

    /// Writes one MAD with its header.
    pub(crate) fn write(&self, hdr: &[u8; HDR_SIZE], mad: &[u8]) -> std::result::Result<(), i32> {
        let mut buf = Vec::with_capacity(HDR_SIZE + mad.len());
        buf.extend_from_slice(hdr);
        buf.extend_from_slice(mad);
        loop {
            // SAFETY: `buf` is readable for its whole length.
            let n = unsafe { libc::write(self.fd, buf.as_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(());
            }
            match errno() {
                libc::EINTR => continue,
                e => return Err(e),
            }
        }
    }
}
