//! An open umad port: the file descriptor of `/dev/infiniband/umadN`, and
//! reading and writing MADs through it. Its receive queue, which the
//! agents of the port share, is in [`recv`].

mod recv;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use self::recv::RecvState;
use super::ca::{ca_cstring, CaPort};
use super::wire::{Received, HDR_SIZE};
use super::{Error, Result};
use crate::error::errno;

pub(crate) struct PortInner {
    fd: RawFd,
    ca: String,
    port_num: u32,
    ethernet: bool,
    /// Whether the fd is one of ibsim's umad2sim (an LD_PRELOAD shim whose
    /// fds the kernel does not know): no event loop can wait on it, so an
    /// `AsyncPort` reads it from a thread of its own.
    pub(crate) simulated: bool,
    /// MADs read while waiting for another one, and who reads the fd.
    recv: Mutex<RecvState>,
    /// Signalled when a MAD is queued or the reading thread stops reading.
    queued: Condvar,
    /// Unsolicited MADs dropped because a receive queue was full.
    dropped: AtomicU64,
    /// MADs dropped because they did not decode.
    malformed: AtomicU64,
    /// MADs dropped because they were longer than [`MAX_READ`].
    too_long: AtomicU64,
    /// (agent ID, lower 32 bits of the TID) of requests sent with a timeout
    /// whose response or timeout has not been read yet.
    outstanding: Mutex<HashSet<(u32, u32)>>,
}

/// The errno of a failed read or write that returned `n`: errno for -1,
/// and the negated errno itself for other negative returns, which is how
/// ibsim's umad2sim fails reads (without setting errno).
fn failed_errno(n: isize) -> i32 {
    if n == -1 {
        errno()
    } else {
        n.checked_neg()
            .and_then(|e| i32::try_from(e).ok())
            .unwrap_or(libc::EIO)
    }
}

/// The first fd that ibsim's umad2sim (an LD_PRELOAD shim over
/// libibumad's open, read, write and poll) hands out: its fds are not the
/// kernel's.
const UMAD2SIM_FD_BASE: RawFd = 1024;

/// Whether a failed fcntl on a freshly opened umad fd is umad2sim's: the
/// kernel does not know its fds (EBADF). Such a port stays blocking, which
/// the receive path tolerates because it reads only after poll(2) said
/// there is a MAD, and only in the thread holding the reader role, which no
/// other thread's read can take that MAD from.
fn umad2sim_fcntl_failure(fd: RawFd, errno: i32) -> bool {
    errno == libc::EBADF && fd >= UMAD2SIM_FD_BASE
}

/// The largest read buffer a MAD is received into: an RMPP transfer that
/// needs more (the kernel reassembles transfers of up to 2 GiB) is read
/// into a scratch mapping and dropped (see `PortInner::read_mad`), so that
/// a peer cannot make a receiver hold more than this at once.
const MAX_READ: usize = 64 << 20;

/// The buffer length to retry a read with after ENOSPC on `len` bytes, when
/// the header's length word is `need` (the kernel's counts the header
/// too, so asking for the header's size more is only generous); `None` past
/// [`MAX_READ`]. A length that would not grow the buffer, or is over the
/// cap, is not believed: the buffer doubles instead, so that a bogus one
/// costs a handful of reads rather than one per byte.
fn grown_read_len(len: usize, need: usize) -> Option<usize> {
    if len >= MAX_READ {
        return None;
    }
    // Within 64 bytes of the bound, the bound itself holds what is needed.
    let asked = HDR_SIZE.saturating_add(need).min(MAX_READ);
    Some(if asked > len && need <= MAX_READ {
        asked
    } else {
        len.saturating_mul(2).min(MAX_READ)
    })
}

/// What one poll and read of the fd gave.
pub(crate) enum Read {
    /// A MAD, with whether it answers one of the port's tracked requests.
    Mad(Received, bool),
    /// Nothing within the poll's timeout.
    Nothing,
    /// A MAD that did not decode, dropped and counted.
    Malformed,
    /// A MAD longer than [`MAX_READ`], dropped and counted.
    TooLong(recv::TooLong),
}

impl Drop for PortInner {
    fn drop(&mut self) {
        // SAFETY: this PortInner owns `fd` (from umad_open_port, or a unit
        // test's socket: umad_close_port only closes it) and closes it once,
        // here; every agent and AsyncFd (which hold this PortInner) is gone.
        unsafe { umad_sys::umad_close_port(self.fd) };
    }
}

/// An open umad port (`umad_open_port`), closed on drop.
///
/// Its fd is non-blocking (except under ibsim's umad2sim, whose fds fcntl
/// cannot change; every read follows a poll(2) that found a MAD);
/// [`Port::recv`] waits in poll(2) with a timeout, and [`AsFd`] lets an
/// event loop wait on it (not under umad2sim: the kernel does not know its
/// fds, only the shim's poll does). All agents registered on the
/// port share its receive queue: a receive that reads a MAD for another
/// agent queues it for that agent, up to
/// [`pending_capacity`](Port::pending_capacity) unsolicited MADs (see
/// [`PortView`]).
///
/// What does not receive (the name, the attributes, the queue's counters)
/// is also on the [`PortView`] ([`Port::view`]), what an `AsyncPort` shares.
pub struct Port {
    view: PortView,
}

/// What can be asked of a umad port without receiving from it: its name and
/// attributes, and the bound and counters of its receive queue.
/// `AsyncPort::port` gives only this, since a
/// blocking receive there would race its reader task for MADs.
///
/// # The receive queue
/// MADs that one receive reads for someone else wait in the port's queue.
/// Unsolicited MADs (requests, sends, traps that peers send unasked) count
/// toward [`pending_capacity`](PortView::pending_capacity)
/// ([`Port::DEFAULT_PENDING_CAPACITY`] unless set); when it is full the
/// newest one is dropped, as a NIC drops what arrives at a full receive
/// queue (the sender's retries recover it), and counted in
/// [`dropped_mads`](PortView::dropped_mads). Responses and timeout notices
/// of the port's own requests are always kept: there is one per request in
/// flight, and a request whose wait ends without its response drops it. A
/// MAD that does not decode is dropped whichever receive reads it, and
/// counted in [`malformed_mads`](PortView::malformed_mads). So is an
/// RMPP transfer longer than the largest read (64 MiB), counted in
/// [`too_long_mads`](PortView::too_long_mads); the receive waiting for it
/// gets [`Error::MadTooLong`](super::Error::MadTooLong). An
/// `AsyncPort` bounds each server agent's stream of
/// requests the same way.
pub struct PortView {
    pub(crate) inner: Arc<PortInner>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.view.fmt(f)
    }
}

impl std::fmt::Debug for PortView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("ca", &self.inner.ca)
            .field("port", &self.inner.port_num)
            .field("fd", &self.inner.fd)
            .finish()
    }
}

impl Port {
    /// How many unsolicited MADs a port queues for its agents unless
    /// [`Port::set_pending_capacity`] says otherwise.
    pub const DEFAULT_PENDING_CAPACITY: usize = 256;

    /// Opens port `port_num` of the CA `ca` (`rxe0`, 1).
    pub fn open(ca: &str, port_num: u32) -> Result<Port> {
        Self::open_with(ca, port_num, "umad_open_port", umad_sys::umad_open_port)
    }

    /// Opens port `port_num` of the CA `ca` as its SMI port
    /// (`umad_open_smi_port`, rdma-core v56 and newer). On a device that
    /// splits a port's SMI (QP0) and GSI (QP1) into two CAs, open the SMI's
    /// CA and port, as [`smi_gsi_pair`](super::smi_gsi_pair) names them
    /// ([`SmiGsiPair::smi_ca`](super::SmiGsiPair::smi_ca)), and
    /// [`open`](Self::open) the GSI's.
    ///
    /// libibumad checks for an SMI only where it chooses the port itself;
    /// with a CA and a port number, as here, it opens that port's umad
    /// device as `umad_open_port` does. Whether the port serves the SMI
    /// classes shows at their registration: a RoCE port (rxe) refuses them
    /// with `EPROTONOSUPPORT`
    /// ([`Error::ClassRefused`](super::Error::ClassRefused)).
    #[cfg(has_umad_open_smi_port)]
    pub fn open_smi(ca: &str, port_num: u32) -> Result<Port> {
        Self::open_with(
            ca,
            port_num,
            "umad_open_smi_port",
            umad_sys::umad_open_smi_port,
        )
    }

    fn open_with(
        ca: &str,
        port_num: u32,
        op: &'static str,
        open: unsafe extern "C" fn(*const std::ffi::c_char, i32) -> i32,
    ) -> Result<Port> {
        let info = CaPort::get(ca, port_num)?;
        let cname = ca_cstring(ca)?;
        let port = i32::try_from(port_num).map_err(|_| Error::io(op, libc::EINVAL))?;
        // SAFETY: `cname` is NUL-terminated; the fd returned is owned by the
        // PortInner built below and closed in its Drop.
        let fd = unsafe { open(cname.as_ptr(), port) };
        if fd < 0 {
            let e = if fd == -1 { errno() } else { -fd };
            return Err(Error::io(op, e));
        }
        let mut inner = PortInner::new(fd, ca.to_string(), port_num, info.is_ethernet());
        // SAFETY: umad_size reads a global that umad_open_port has set.
        if unsafe { umad_sys::umad_size() } != HDR_SIZE {
            return Err(Error::io("IB_USER_MAD_ENABLE_PKEY", libc::EPROTO));
        }
        if let Err(e) = crate::os::set_nonblocking(fd, true) {
            if !umad2sim_fcntl_failure(fd, e.errno()) {
                return Err(Error::io("fcntl(O_NONBLOCK)", e.errno()));
            }
            inner.simulated = true;
        }
        Ok(Port {
            view: PortView {
                inner: Arc::new(inner),
            },
        })
    }

    /// The next MAD for any agent of this port, waiting up to `timeout`
    /// (`None`: forever).
    pub fn recv(&self, timeout: Option<Duration>) -> Result<Received> {
        self.view.inner.recv_matching(timeout, |_| true)
    }

    /// The next MAD if one is queued, without waiting.
    ///
    /// While another thread waits in [`Port::recv`] (or an agent's receive)
    /// it reads the fd, and this returns only what is already queued.
    pub fn try_recv(&self) -> Result<Option<Received>> {
        self.view.inner.try_recv()
    }

    /// What the port is without its receiving: the same view an
    /// `AsyncPort` gives, for code that serves both.
    pub fn view(&self) -> &PortView {
        &self.view
    }
    /// The CA's name.
    pub fn ca_name(&self) -> &str {
        self.view.ca_name()
    }
    /// The port number.
    pub fn port_num(&self) -> u32 {
        self.view.port_num()
    }
    /// Whether the port is Ethernet (RoCE): MADs need a GRH.
    pub fn is_ethernet(&self) -> bool {
        self.view.is_ethernet()
    }
    /// The port's current attributes.
    pub fn info(&self) -> Result<CaPort> {
        self.view.info()
    }
    /// How many unsolicited MADs the receive queue holds before it drops
    /// the newest ([`PortView::pending_capacity`]).
    pub fn pending_capacity(&self) -> usize {
        self.view.pending_capacity()
    }
    /// Sets the bound of the receive queue
    /// ([`PortView::set_pending_capacity`]).
    pub fn set_pending_capacity(&self, capacity: usize) {
        self.view.set_pending_capacity(capacity)
    }
    /// How many MADs wait in the receive queue now.
    pub fn pending_len(&self) -> usize {
        self.view.pending_len()
    }
    /// How many unsolicited MADs were dropped because a receive queue was
    /// full ([`PortView::dropped_mads`]).
    pub fn dropped_mads(&self) -> u64 {
        self.view.dropped_mads()
    }
    /// How many MADs were dropped because they did not decode
    /// ([`PortView::malformed_mads`]).
    pub fn malformed_mads(&self) -> u64 {
        self.view.malformed_mads()
    }
    /// How many MADs were dropped because they were longer than the largest
    /// read ([`PortView::too_long_mads`]).
    pub fn too_long_mads(&self) -> u64 {
        self.view.too_long_mads()
    }
}

impl PortView {
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
}

impl AsFd for Port {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open as long as `self.inner` lives, which
        // outlives the borrow of `self`.
        unsafe { BorrowedFd::borrow_raw(self.view.inner.fd) }
    }
}

impl AsRawFd for Port {
    fn as_raw_fd(&self) -> RawFd {
        self.view.inner.fd
    }
}

impl PortInner {
    /// The state around an open umad fd, which it closes on drop.
    pub(crate) fn new(fd: RawFd, ca: String, port_num: u32, ethernet: bool) -> PortInner {
        PortInner {
            fd,
            ca,
            port_num,
            ethernet,
            simulated: false,
            recv: Mutex::new(RecvState::new(Port::DEFAULT_PENDING_CAPACITY)),
            queued: Condvar::new(),
            dropped: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            too_long: AtomicU64::new(0),
            outstanding: Mutex::default(),
        }
    }
    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }
    pub(crate) fn is_ethernet(&self) -> bool {
        self.ethernet
    }
    pub(crate) fn count_dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits up to `timeout` (`None`: forever) for the fd to be readable,
    /// then reads one MAD.
    ///
    /// Polling before reading means a read is only tried on a readable fd,
    /// and a negative return of read other than -1 is taken as the negated
    /// errno itself. Only the holder of the reader role calls it: under
    /// umad2sim the fd blocks, so a MAD that poll announced must still be
    /// there when this thread reads.
    fn read_one(&self, timeout: Option<Duration>) -> Result<Read> {
        let revents =
            crate::os::poll_readable(self.fd, timeout).map_err(|e| Error::io("poll", e.errno()))?;
        if revents == 0 {
            return Ok(Read::Nothing);
        }
        let broken = revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
        self.read_mad(broken, |buf| {
            // SAFETY: `buf` is writable for its whole length.
            unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) }
        })
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
            match failed_errno(n) {
                libc::EINTR => continue,
                e => return Err(e),
            }
        }
    }
}

#[cfg(all(test, feature = "tokio"))]
impl Port {
    /// A port over a unit test's fake fd.
    pub(crate) fn from_inner(inner: Arc<PortInner>) -> Port {
        Port {
            view: PortView { inner },
        }
    }
}
