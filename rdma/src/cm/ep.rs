//! The connection manager's blocking face, as C programs know it from
//! rdma-core's `rdma_server.c` and `rdma_client.c`: `rdma_getaddrinfo`
//! ([`AddrInfo`]), `rdma_create_ep`, `rdma_get_request` and the
//! `rdma_verbs.h` helpers ([`Endpoint`]).

use std::ffi::{CStr, CString};
use std::net::SocketAddr;
use std::ptr::{self, NonNull};
use std::time::Duration;

use rdmacm_sys as cm;

use super::addr::from_raw;
use super::event::{CmEvent, CmEventKind, ConnParam};
use super::{CmId, EventChannel, PortSpace};
use crate::{
    AccessFlags, AddressHandle, CompletionChannel, CompletionQueue, Context, Error, IpFamily,
    MemoryRegion, ProtectionDomain, QpCaps, QpType, QueuePair, RecvWr, RemoteMemory, Result,
    SendFlags, SendWr, Sge, WorkCompletion,
};

/// What [`AddrInfo::resolve`] looks for (`struct rdma_addrinfo` hints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrHints {
    /// A passive side (`RAI_PASSIVE`): the node, if any, is the local
    /// address to bind; without one, the wildcard.
    pub passive: bool,
    /// The node is a numeric address, never a name to look up
    /// (`RAI_NUMERICHOST`).
    pub numeric_host: bool,
    /// Only addresses of this family.
    pub family: Option<IpFamily>,
    /// The port space (and so the QP type: RC for TCP and IB, UD for UDP
    /// and IPoIB).
    pub port_space: PortSpace,
}

impl Default for AddrHints {
    /// An active side, any family, TCP (RC).
    fn default() -> Self {
        AddrHints {
            passive: false,
            numeric_host: false,
            family: None,
            port_space: PortSpace::Tcp,
        }
    }
}

impl AddrHints {
    /// The hints of a passive side (a server), TCP (RC).
    pub fn passive() -> AddrHints {
        AddrHints {
            passive: true,
            ..AddrHints::default()
        }
    }

    /// The C hints (`struct rdma_addrinfo` with its hint fields set), as
    /// `rdma_getaddrinfo` and `rdma_resolve_addrinfo` take them.
    pub(crate) fn to_raw(self) -> cm::rdma_addrinfo {
        // SAFETY: plain data; zero is valid for every field.
        let mut h: cm::rdma_addrinfo = unsafe { std::mem::zeroed() };
        let mut flags = 0;
        if self.passive {
            flags |= cm::RAI_PASSIVE;
        }
        if self.numeric_host {
            flags |= cm::RAI_NUMERICHOST;
        }
        h.ai_flags = flags as i32;
        h.ai_family = match self.family {
            None => 0,
            Some(IpFamily::V4) => libc::AF_INET,
            Some(IpFamily::V6) => libc::AF_INET6,
        };
        h.ai_port_space = self.port_space.raw() as i32;
        h.ai_qp_type = match self.port_space {
            PortSpace::Udp | PortSpace::IpoIb => crate::sys::IBV_QPT_UD,
            PortSpace::Tcp | PortSpace::Ib => crate::sys::IBV_QPT_RC,
        } as i32;
        h
    }
}

/// The addresses `rdma_getaddrinfo` found: a list whose first entry
/// [`Endpoint::create`] uses, as C's `rdma_create_ep` does. Freed on drop.
pub struct AddrInfo {
    raw: NonNull<cm::rdma_addrinfo>,
}

// SAFETY: the list is librdmacm's plain data, written once by
// rdma_getaddrinfo and only read afterwards; rdma_freeaddrinfo (in Drop) may
// run on any thread.
unsafe impl Send for AddrInfo {}
// SAFETY: as above: `&AddrInfo` only reads.
unsafe impl Sync for AddrInfo {}

/// One entry of an [`AddrInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrEntry {
    /// The local address (a passive entry's, or an active one's when the
    /// hints or the route named one).
    pub src: Option<SocketAddr>,
    /// The remote address (active entries).
    pub dst: Option<SocketAddr>,
    /// Whether the entry is passive (`RAI_PASSIVE`).
    pub passive: bool,
}

impl AddrInfo {
    /// Resolves `node` (a host name or numeric address; `None` with
    /// passive hints: the wildcard) and `service` (a port number or service
    /// name) into RDMA addresses (`rdma_getaddrinfo`).
    ///
    /// A name that does not resolve gives `EADDRNOTAVAIL` with the
    /// resolver's reason as hint; a NUL byte in either string `EINVAL`.
    pub fn resolve(
        node: Option<&str>,
        service: Option<&str>,
        hints: &AddrHints,
    ) -> Result<AddrInfo> {
        const VERB: &str = "rdma_getaddrinfo";
        let (node_c, service_c) = c_names(VERB, node, service)?;
        let h = hints.to_raw();
        let mut res = ptr::null_mut();
        // SAFETY: NUL-terminated strings or NULL, live for the call;
        // complete hints; `res` is writable and set only on success.
        let ret = unsafe { cm::rdma_getaddrinfo(c_ptr(&node_c), c_ptr(&service_c), &h, &mut res) };
        if ret != 0 {
            return Err(gai_error(ret, node, service));
        }
        let raw = NonNull::new(res).ok_or_else(|| {
            Error::new(VERB, libc::EADDRNOTAVAIL).with_hint("no RDMA address found")
        })?;
        Ok(AddrInfo { raw })
    }

    /// The entries, in the order rdma_getaddrinfo gave them.
    pub fn entries(&self) -> Vec<AddrEntry> {
        let mut out = Vec::new();
        let mut p = self.raw.as_ptr();
        while !p.is_null() {
            // SAFETY: an entry of the list this value owns; its addresses
            // are NULL or socket addresses of the lengths it records.
            let e = unsafe { &*p };
            out.push(AddrEntry {
                // SAFETY: as above.
                src: unsafe { from_raw(e.ai_src_addr) },
                // SAFETY: as above.
                dst: unsafe { from_raw(e.ai_dst_addr) },
                passive: e.ai_flags & cm::RAI_PASSIVE as i32 != 0,
            });
            p = e.ai_next;
        }
        out
    }

    fn first_is_passive(&self) -> bool {
        // SAFETY: the first entry of the list this value owns.
        unsafe { (*self.raw.as_ptr()).ai_flags & cm::RAI_PASSIVE as i32 != 0 }
    }
}

impl Drop for AddrInfo {
    fn drop(&mut self) {
        // SAFETY: the list rdma_getaddrinfo returned, freed once; nothing
        // borrows it (entries are copied out).
        unsafe { cm::rdma_freeaddrinfo(self.raw.as_ptr()) };
    }
}

impl std::fmt::Debug for AddrInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries()).finish()
    }
}

/// rdma_getaddrinfo's failure: -1 (and `EAI_SYSTEM`) with errno set, or a
/// resolver (`getaddrinfo`) code.
#[cold]
fn gai_error(ret: i32, node: Option<&str>, service: Option<&str>) -> Error {
    const VERB: &str = "rdma_getaddrinfo";
    if ret == -1 || ret == libc::EAI_SYSTEM {
        let e = Error::last(VERB);
        return if e.errno() == libc::ENODEV {
            e.with_hint("no RDMA device")
        } else {
            e
        };
    }
    unresolved(VERB, &gai_reason(ret), node, service)
}

/// The resolver's reason for its failure code `code` (`gai_strerror`).
pub(crate) fn gai_reason(code: i32) -> String {
    // SAFETY: gai_strerror returns a static NUL-terminated string for any
    // code.
    unsafe { CStr::from_ptr(libc::gai_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

/// The error of a resolution of `node` and `service` that found nothing:
/// `EADDRNOTAVAIL`, with the resolver's reason `why`.
pub(crate) fn unresolved(
    verb: &'static str,
    why: &str,
    node: Option<&str>,
    service: Option<&str>,
) -> Error {
    Error::new(verb, libc::EADDRNOTAVAIL).with_hint(format!(
        "{} {}: {why}",
        node.unwrap_or("(any)"),
        service.unwrap_or("(any)")
    ))
}

/// `node` and `service` as C strings for `verb`; a NUL byte in either is
/// `EINVAL`.
pub(crate) fn c_names(
    verb: &'static str,
    node: Option<&str>,
    service: Option<&str>,
) -> Result<(Option<CString>, Option<CString>)> {
    let c = |s: Option<&str>, what: &str| -> Result<Option<CString>> {
        s.map(CString::new)
            .transpose()
            .map_err(|_| Error::invalid(verb, format!("the {what} holds a NUL byte")))
    };
    Ok((c(node, "node")?, c(service, "service")?))
}

/// The pointer of a C string, NULL for none.
pub(crate) fn c_ptr(s: &Option<CString>) -> *const std::ffi::c_char {
    s.as_ref().map_or(ptr::null(), |s| s.as_ptr())
}

/// The QP an [`Endpoint`] makes (`struct ibv_qp_init_attr` of
/// `rdma_create_ep`): an accepted endpoint gets the listener's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpAttr {
    /// The transport (RC for a TCP port space, UD for UDP).
    pub qp_type: QpType,
    /// Queue sizes; each CQ holds its queue's work requests.
    pub caps: QpCaps,
    /// Every send generates a completion, signaled or not.
    pub sq_sig_all: bool,
}

impl Default for EpAttr {
    /// RC, the default queue sizes, sends signaled when asked.
    fn default() -> Self {
        EpAttr {
            qp_type: QpType::Rc,
            caps: QpCaps::default(),
            sq_sig_all: false,
        }
    }
}

/// The verbs objects of an endpoint with a QP.
struct Verbs {
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
}

/// A connection-manager id with its own event channel and, when made with
/// [`EpAttr`], its PD, CQs and QP: C's `rdma_create_ep` and the blocking
/// calls of a synchronous id.
///
/// An [`Endpoint`] is a [`CmId`] on an event channel of its own, with the
/// verbs objects `rdma_create_ep` makes when given QP attributes ([`EpAttr`]):
/// a PD, a send and a receive CQ (each with a completion channel, so that
/// waiting for a completion sleeps) and the QP. Every call that C's
/// synchronous ids block in blocks here too, up to a timeout (the
/// resolution in [`Endpoint::create`], up to librdmacm's): the id is
/// created by `rdma_create_ep` (which resolves the address and route, or
/// binds a passive one) and then moved onto the endpoint's channel, so it
/// shares [`CmId`]'s guarantees (its QP, its context, the acknowledgement of
/// every event as it is read).
///
/// ```no_run
/// use rdma::cm::{AddrHints, AddrInfo, ConnParam, EpAttr, Endpoint};
/// use std::time::Duration;
///
/// # fn main() -> rdma::Result<()> {
/// let t = Duration::from_secs(5);
/// let info = AddrInfo::resolve(Some("192.0.2.1"), Some("7471"), &AddrHints::default())?;
/// let ep = Endpoint::create(&info, Some(EpAttr::default()))?;
/// let mr = ep.reg_msgs(16)?;
/// ep.post_recv(1, &mr.sge(0..16)?)?;
/// ep.connect(&ConnParam::new(), t)?;
/// mr.write(0, b"sixteen bytes!!!")?;
/// ep.post_send(2, &mr.sge(0..16)?, rdma::SendFlags::SIGNALED)?;
/// ep.get_send_comp(t)?.result()?;
/// ep.get_recv_comp(t)?.result()?;
/// ep.disconnect()?;
/// # Ok(())
/// # }
/// ```
pub struct Endpoint {
    // The id (and its QP) goes before the CQs and PD it uses.
    id: CmId,
    verbs: Option<Verbs>,
    attr: Option<EpAttr>,
}

impl Endpoint {
    /// Creates an endpoint for the first entry of `info`
    /// (`rdma_create_ep`): a passive one is bound to its address (then
    /// [`listen`](Self::listen)); an active one has its address and route
    /// resolved (then [`connect`](Self::connect)), and its QP made from
    /// `attr`. A listener keeps `attr` for the endpoints
    /// [`get_request`](Self::get_request) returns.
    ///
    /// librdmacm bounds the resolution itself (2 s for the address, 2 s
    /// for the route), not the caller.
    pub fn create(info: &AddrInfo, attr: Option<EpAttr>) -> Result<Endpoint> {
        let channel = EventChannel::new()?;
        let mut raw = ptr::null_mut();
        // SAFETY: the first entry of a live list; no PD and no QP
        // attributes, so librdmacm makes no verbs objects; `raw` is
        // writable and set only on success.
        let r = unsafe {
            cm::rdma_create_ep(
                &mut raw,
                info.raw.as_ptr(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if r != 0 {
            let e = Error::last("rdma_create_ep");
            return Err(match e.errno() {
                libc::EADDRNOTAVAIL | libc::ENODEV => {
                    e.with_hint("no RDMA device has that address (or a route to it)")
                }
                libc::EADDRINUSE => e.with_hint("the address and port are already bound"),
                _ => e,
            });
        }
        let raw = NonNull::new(raw).ok_or_else(|| Error::new("rdma_create_ep", libc::ENOMEM))?;
        // SAFETY: a live synchronous id, owned here alone; the channel is
        // new and live. Moving the id off its own channel acknowledges the
        // event librdmacm kept of its last blocking call and frees that
        // channel; from then on it is an id of `channel` like any other.
        if unsafe { cm::rdma_migrate_id(raw.as_ptr(), channel.as_raw()) } != 0 {
            let e = Error::last("rdma_migrate_id");
            // SAFETY: the id, not handed out, destroyed once.
            unsafe { cm::rdma_destroy_ep(raw.as_ptr()) };
            return Err(e);
        }
        let mut ep = Endpoint {
            id: CmId::from_new(raw, channel),
            verbs: None,
            attr,
        };
        if !info.first_is_passive() && attr.is_some() {
            ep.make_qp()?;
        }
        Ok(ep)
    }

    /// Makes the PD, CQs and QP of `self.attr` on the id's device.
    fn make_qp(&mut self) -> Result<()> {
        let Some(attr) = self.attr else {
            return Ok(());
        };
        let ctx = self.id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = |n: u32| -> Result<CompletionQueue> {
            let ch = CompletionChannel::new(&ctx)?;
            CompletionQueue::builder(&ctx)
                .cqe(n.max(1) as i32)
                .channel(&ch)
                .build()
        };
        let send_cq = cq(attr.caps.max_send_wr)?;
        let recv_cq = cq(attr.caps.max_recv_wr)?;
        let qp = QueuePair::builder(&pd, attr.qp_type, &send_cq)
            .recv_cq(&recv_cq)
            .caps(attr.caps)
            .sq_sig_all(attr.sq_sig_all)
            .build()?;
        self.id.attach_qp(qp)?;
        self.verbs = Some(Verbs {
            pd,
            send_cq,
            recv_cq,
        });
        Ok(())
    }

    /// The CM id.
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// The id's context (its device).
    pub fn context(&self) -> Result<Context> {
        self.id.context()
    }

    /// The QP, for an endpoint made with [`EpAttr`].
    pub fn qp(&self) -> Option<&QueuePair> {
        self.id.qp()
    }

    /// The PD, for an endpoint made with [`EpAttr`].
    pub fn pd(&self) -> Option<&ProtectionDomain> {
        self.verbs.as_ref().map(|v| &v.pd)
    }

    /// The send CQ, for an endpoint made with [`EpAttr`].
    pub fn send_cq(&self) -> Option<&CompletionQueue> {
        self.verbs.as_ref().map(|v| &v.send_cq)
    }

    /// The receive CQ, for an endpoint made with [`EpAttr`].
    pub fn recv_cq(&self) -> Option<&CompletionQueue> {
        self.verbs.as_ref().map(|v| &v.recv_cq)
    }

    fn verbs(&self, verb: &'static str) -> Result<&Verbs> {
        self.verbs.as_ref().ok_or_else(|| {
            Error::invalid(
                verb,
                "the endpoint has no QP: make it with EpAttr (a listener's endpoints get theirs from get_request)",
            )
        })
    }

    fn the_qp(&self, verb: &'static str) -> Result<&QueuePair> {
        self.verbs(verb)?;
        self.id
            .qp()
            .ok_or_else(|| Error::invalid(verb, "the endpoint has no QP"))
    }

    /// The local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.peer_addr()
    }

    /// Listens for connect requests (`rdma_listen`; a backlog of 0: the
    /// system's default).
    pub fn listen(&self, backlog: i32) -> Result<()> {
        self.id.listen(backlog)
    }

    /// Waits up to `timeout` for the next connect request of a listening
    /// endpoint (`rdma_get_request`) and returns its endpoint, with a QP
    /// made from the listener's [`EpAttr`] when it has one, on a channel of
    /// its own; accept it with [`accept`](Self::accept). The returned
    /// [`Request`] also carries the request's event (its parameters and
    /// private data).
    ///
    /// Any other event of the listener is an error that names it (its
    /// channel carries only the listener's events: an accepted endpoint
    /// moves to its own).
    pub fn get_request(&self, timeout: Duration) -> Result<Request> {
        let mut ev = self
            .id
            .channel()
            .expect(&self.id, CmEventKind::ConnectRequest, timeout)?;
        let mut id = ev
            .take_new_id()
            .ok_or_else(|| Error::invalid("rdma_get_request", "a connect request without an id"))?;
        id.migrate(&EventChannel::new()?)?;
        let mut ep = Endpoint {
            id,
            verbs: None,
            attr: self.attr,
        };
        ep.make_qp()?;
        Ok(Request { ep, event: ev })
    }

    /// Accepts the connect request this endpoint came from and waits up to
    /// `timeout` for the connection (`rdma_accept` on a synchronous id);
    /// returns the `Established` event. The CM takes the QP to RTS. An
    /// endpoint without a QP (no [`EpAttr`]) is refused (`EINVAL`).
    pub fn accept(&self, param: &ConnParam, timeout: Duration) -> Result<CmEvent> {
        self.the_qp("rdma_accept")?;
        self.id.accept(param)?;
        self.id
            .channel()
            .expect(&self.id, CmEventKind::Established, timeout)
    }

    /// Connects and waits up to `timeout` for the connection
    /// (`rdma_connect` on a synchronous id); returns the `Established`
    /// event. A refusal is [`Error::is_refused`]. An endpoint without a QP
    /// (no [`EpAttr`]) is refused (`EINVAL`).
    pub fn connect(&self, param: &ConnParam, timeout: Duration) -> Result<CmEvent> {
        self.the_qp("rdma_connect")?;
        self.id.connect(param)?;
        self.id
            .channel()
            .expect(&self.id, CmEventKind::Established, timeout)
    }

    /// Rejects the connect request this endpoint came from, with
    /// `private_data` for the peer (`rdma_reject`).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.id.reject(private_data)
    }

    /// Disconnects (`rdma_disconnect`); the QP's outstanding requests are
    /// flushed.
    pub fn disconnect(&self) -> Result<()> {
        self.id.disconnect()
    }

    /// Waits up to `timeout` for the peer's disconnect (`Disconnected`).
    pub fn wait_disconnected(&self, timeout: Duration) -> Result<CmEvent> {
        self.id
            .channel()
            .expect(&self.id, CmEventKind::Disconnected, timeout)
    }

    /// A zeroed region of `len` bytes on the endpoint's PD for messages
    /// (`rdma_reg_msgs`: local write).
    pub fn reg_msgs(&self, len: usize) -> Result<MemoryRegion> {
        self.reg(len, AccessFlags::LOCAL_WRITE, "rdma_reg_msgs")
    }

    /// A region the peer may read (`rdma_reg_read`).
    pub fn reg_read(&self, len: usize) -> Result<MemoryRegion> {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        self.reg(len, access, "rdma_reg_read")
    }

    /// A region the peer may write (`rdma_reg_write`).
    pub fn reg_write(&self, len: usize) -> Result<MemoryRegion> {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        self.reg(len, access, "rdma_reg_write")
    }

    fn reg(&self, len: usize, access: AccessFlags, verb: &'static str) -> Result<MemoryRegion> {
        MemoryRegion::new(&self.verbs(verb)?.pd, len, access)
    }

    /// Posts a receive into `sge` (`rdma_post_recv`).
    pub fn post_recv(&self, wr_id: u64, sge: &Sge<'_>) -> Result<()> {
        self.recv("rdma_post_recv", wr_id, std::slice::from_ref(sge))
    }

    /// Posts a receive scattered over `sges`, in order (`rdma_post_recvv`;
    /// at most the QP's `max_recv_sge` entries, else `EINVAL`).
    pub fn post_recvv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        self.recv("rdma_post_recvv", wr_id, sges)
    }

    /// Posts a SEND of `sge` with `flags` (`rdma_post_send`).
    pub fn post_send(&self, wr_id: u64, sge: &Sge<'_>, flags: SendFlags) -> Result<()> {
        let sges = std::slice::from_ref(sge);
        self.send("rdma_post_send", SendWr::send(wr_id, sges).flags(flags))
    }

    /// Posts a SEND gathered from `sges`, in order, with `flags`
    /// (`rdma_post_sendv`; at most the QP's `max_send_sge` entries, else
    /// `EINVAL`).
    pub fn post_sendv(&self, wr_id: u64, sges: &[Sge<'_>], flags: SendFlags) -> Result<()> {
        self.send("rdma_post_sendv", SendWr::send(wr_id, sges).flags(flags))
    }

    /// Posts a SEND of a copy of `data`, taken now (`rdma_post_send` with
    /// `IBV_SEND_INLINE`; at most the QP's `max_inline_data` bytes).
    pub fn post_send_inline(&self, wr_id: u64, data: &[u8], flags: SendFlags) -> Result<()> {
        self.send(
            "rdma_post_send",
            SendWr::send_inline(wr_id, data).flags(flags),
        )
    }

    /// Posts a SEND of `sge` through `ah` to the UD QP `remote_qpn`
    /// (`rdma_post_ud_send`), with the Q_Key of the CM's UDP port space
    /// (`RDMA_UDP_QKEY`), as C does: the Q_Key the CM gives UD ids and
    /// reports in [`UdParam`](super::UdParam). For a UD endpoint; `ah` must
    /// be of its PD (`pd()`), else the post is refused. `ah` may be dropped
    /// once the post returned (see [`AddressHandle`]).
    pub fn post_ud_send(
        &self,
        wr_id: u64,
        sge: &Sge<'_>,
        ah: &AddressHandle,
        remote_qpn: u32,
        flags: SendFlags,
    ) -> Result<()> {
        let sges = std::slice::from_ref(sge);
        let wr = SendWr::send(wr_id, sges)
            .ud(ah, remote_qpn, cm::RDMA_UDP_QKEY)
            .flags(flags);
        self.send("rdma_post_ud_send", wr)
    }

    /// Posts an RDMA WRITE of `sge` to `remote` (`rdma_post_write`).
    pub fn post_write(
        &self,
        wr_id: u64,
        sge: &Sge<'_>,
        remote: RemoteMemory,
        flags: SendFlags,
    ) -> Result<()> {
        let sges = std::slice::from_ref(sge);
        let wr = SendWr::rdma_write(wr_id, sges, remote).flags(flags);
        self.send("rdma_post_write", wr)
    }

    /// Posts an RDMA WRITE gathered from `sges`, in order, to `remote`
    /// (`rdma_post_writev`).
    pub fn post_writev(
        &self,
        wr_id: u64,
        sges: &[Sge<'_>],
        remote: RemoteMemory,
        flags: SendFlags,
    ) -> Result<()> {
        let wr = SendWr::rdma_write(wr_id, sges, remote).flags(flags);
        self.send("rdma_post_writev", wr)
    }

    /// Posts an RDMA READ from `remote` into `sge` (`rdma_post_read`).
    pub fn post_read(
        &self,
        wr_id: u64,
        sge: &Sge<'_>,
        remote: RemoteMemory,
        flags: SendFlags,
    ) -> Result<()> {
        let sges = std::slice::from_ref(sge);
        let wr = SendWr::rdma_read(wr_id, sges, remote).flags(flags);
        self.send("rdma_post_read", wr)
    }

    /// Posts an RDMA READ from `remote` scattered into `sges`, in order
    /// (`rdma_post_readv`). A READ takes at most the device's `max_sge_rd`
    /// entries (`DeviceAttr::as_raw().orig_attr.max_sge_rd`), fewer than
    /// other requests on some devices: siw's is 1, and siw (Linux 6.1)
    /// completes a READ of more entries having filled the first one only.
    pub fn post_readv(
        &self,
        wr_id: u64,
        sges: &[Sge<'_>],
        remote: RemoteMemory,
        flags: SendFlags,
    ) -> Result<()> {
        let wr = SendWr::rdma_read(wr_id, sges, remote).flags(flags);
        self.send("rdma_post_readv", wr)
    }

    /// Posts `wr` on the endpoint's QP; `verb` names the helper in errors.
    fn send(&self, verb: &'static str, wr: SendWr<'_>) -> Result<()> {
        self.the_qp(verb)?.post_send(&mut [wr])
    }

    /// Posts a receive of `wr_id` into `sges` on the endpoint's QP.
    fn recv(&self, verb: &'static str, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        self.the_qp(verb)?
            .post_recv(&mut [RecvWr::new(wr_id, sges)])
    }

    /// Waits up to `timeout` for the next send completion, successful or
    /// not (`rdma_get_send_comp`); `ETIMEDOUT` when none came. Sleeps on
    /// the CQ's completion channel.
    pub fn get_send_comp(&self, timeout: Duration) -> Result<WorkCompletion> {
        self.verbs("rdma_get_send_comp")?.send_cq.wait_one(timeout)
    }

    /// Waits up to `timeout` for the next receive completion
    /// (`rdma_get_recv_comp`), as [`get_send_comp`](Self::get_send_comp).
    pub fn get_recv_comp(&self, timeout: Duration) -> Result<WorkCompletion> {
        self.verbs("rdma_get_recv_comp")?.recv_cq.wait_one(timeout)
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .field("qp", &self.qp().map(|q| q.qp_num()))
            .finish()
    }
}

/// A connect request [`Endpoint::get_request`] took: the new endpoint and
/// the request's event (its parameters and private data).
#[derive(Debug)]
pub struct Request {
    /// The endpoint to accept (or reject, or drop: the peer then sees a
    /// reject).
    pub ep: Endpoint,
    /// The `ConnectRequest` event.
    pub event: CmEvent,
}

impl AddrInfo {
    /// Takes a list librdmacm allocated (`rdma_query_addrinfo`'s), which
    /// the value frees with `rdma_freeaddrinfo`.
    ///
    /// # Safety
    /// `raw` is the head of a list of `rdma_addrinfo` the caller owns and
    /// gives up.
    #[cfg(has_rdma_query_addrinfo)]
    pub(crate) unsafe fn from_raw(raw: NonNull<cm::rdma_addrinfo>) -> AddrInfo {
        AddrInfo { raw }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_carry_flags_family_and_port_space() {
        let h = AddrHints {
            passive: true,
            numeric_host: true,
            family: Some(IpFamily::V6),
            port_space: PortSpace::Udp,
        }
        .to_raw();
        assert_eq!(h.ai_flags, (cm::RAI_PASSIVE | cm::RAI_NUMERICHOST) as i32);
        assert_eq!(h.ai_family, libc::AF_INET6);
        assert_eq!(h.ai_port_space, cm::RDMA_PS_UDP as i32);
        assert_eq!(h.ai_qp_type, crate::sys::IBV_QPT_UD as i32);
        let h = AddrHints::default().to_raw();
        assert_eq!((h.ai_flags, h.ai_family), (0, 0));
        assert_eq!(h.ai_qp_type, crate::sys::IBV_QPT_RC as i32);
    }
}
