//! An open umad port: the file descriptor of `/dev/infiniband/umadN`, and
//! reading and writing MADs through it.

use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::addr::{Address, ADDR_SIZE};
use super::agent::{Agent, Registration};
use super::ca::{ca_cstring, CaPort};
use super::{Error, Result};
use crate::mad::Mad;

/// The size of `struct ib_user_mad` with P_Key support: five 32-bit words
/// and the 44-byte address.
pub(crate) const HDR_SIZE: usize = 64;
const _: () = assert!(std::mem::size_of::<umad_sys::ib_user_mad>() == HDR_SIZE);
const _: () = assert!(20 + ADDR_SIZE == HDR_SIZE);

/// A MAD read from a port: which agent it is for, the kernel's status, where
/// it came from, and the MAD.
#[derive(Debug, Clone)]
pub struct Received {
    /// The ID of the agent it was delivered to.
    pub agent_id: u32,
    /// 0, or an errno: ETIMEDOUT (110) for a request that got no response
    /// (then `mad` holds only the request's header).
    pub status: i32,
    /// The source address (the GRH's GID is the sender's).
    pub addr: Address,
    /// The MAD.
    pub mad: Mad,
}

impl Received {
    /// The MAD's TID.
    pub fn tid(&self) -> u64 {
        self.mad.tid()
    }
    /// Whether this is the kernel's notice that a request timed out.
    pub fn is_timeout(&self) -> bool {
        self.status == libc::ETIMEDOUT
    }
    /// The address to reply to (GSI Q_Key set, as RoCE needs).
    pub fn reply_address(&self) -> Address {
        self.addr.reply()
    }
}

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

    /// Registers an agent for a class (see [`Registration`]).
    pub fn register(&self, reg: &Registration) -> Result<Agent> {
        Agent::register(self.inner.clone(), reg)
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

/// Builds the `struct ib_user_mad` header of a send.
pub(crate) fn send_header(
    agent_id: u32,
    timeout_ms: u32,
    retries: u32,
    len: usize,
    addr: &Address,
) -> [u8; HDR_SIZE] {
    let mut h = [0u8; HDR_SIZE];
    h[0..4].copy_from_slice(&agent_id.to_ne_bytes());
    h[8..12].copy_from_slice(&timeout_ms.to_ne_bytes());
    h[12..16].copy_from_slice(&retries.to_ne_bytes());
    h[16..20].copy_from_slice(&(len as u32).to_ne_bytes());
    let mut a = [0u8; ADDR_SIZE];
    addr.write(&mut a);
    h[20..].copy_from_slice(&a);
    h
}

/// Parses what `read` returned: the header, then the MAD.
pub(crate) fn parse(b: &[u8]) -> Result<Received> {
    let word = |o: usize| -> u32 {
        b.get(o..o + 4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_ne_bytes)
            .unwrap_or(0)
    };
    let addr: [u8; ADDR_SIZE] =
        b.get(20..HDR_SIZE)
            .and_then(|s| s.try_into().ok())
            .ok_or(Error::Mad(crate::mad::Error::Truncated {
                what: "umad header",
                need: HDR_SIZE,
                have: b.len(),
            }))?;
    let len = (word(16) as usize).min(b.len() - HDR_SIZE);
    let mad = Mad::decode(&b[HDR_SIZE..HDR_SIZE + len])?;
    Ok(Received {
        agent_id: word(0),
        status: word(4) as i32,
        addr: Address::read(&addr),
        mad,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::{MadHeader, Method};

    #[test]
    fn a_timeout_notice_parses_with_its_tid() {
        let h = MadHeader::request(0x32, 1, Method::GET, 0x0000_0005_0000_0042, 0);
        let mut b = send_header(3, 0, 0, 24, &Address::gsi_lid(1)).to_vec();
        b[4..8].copy_from_slice(&(libc::ETIMEDOUT as u32).to_ne_bytes());
        b.extend_from_slice(&h.to_bytes());
        let r = parse(&b).unwrap();
        assert_eq!(r.agent_id, 3);
        assert!(r.is_timeout());
        assert_eq!(r.tid(), 0x0000_0005_0000_0042);
        assert_eq!(r.addr, Address::gsi_lid(1));
    }

    #[test]
    fn short_reads_are_errors() {
        assert!(parse(&[0u8; 10]).is_err());
        assert!(parse(&[0u8; 64]).is_err());
        let mut b = send_header(1, 0, 0, 1000, &Address::gsi_lid(1)).to_vec();
        b.extend_from_slice(&MadHeader::default().to_bytes());
        assert!(parse(&b).is_ok(), "a length past the data is clamped");
    }
}
