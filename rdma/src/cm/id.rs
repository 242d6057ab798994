//! Event channels and CM ids.

use std::fmt;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

use rdmacm_sys as cm;

use super::addr::{from_raw, RawAddr};
use super::event::{CmEvent, CmEventKind, ConnParam};
use crate::{CompletionQueue, Context, Error, ProtectionDomain, QpCaps, QpType, QueuePair, Result};

/// The port space of a CM id: which transport its connections use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// Reliable connections (RC), TCP-like ports.
    Tcp,
    /// Datagrams (UD), UDP-like ports.
    Udp,
    /// IPoIB-compatible datagrams.
    IpoIb,
    /// Native InfiniBand service IDs.
    Ib,
}

impl PortSpace {
    fn raw(self) -> cm::rdma_port_space {
        match self {
            PortSpace::Tcp => cm::RDMA_PS_TCP,
            PortSpace::Udp => cm::RDMA_PS_UDP,
            PortSpace::IpoIb => cm::RDMA_PS_IPOIB,
            PortSpace::Ib => cm::RDMA_PS_IB,
        }
    }
}

/// An event channel (`rdma_event_channel`). Cloning shares it; ids on it keep
/// it alive.
#[derive(Clone)]
pub struct EventChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

pub(crate) struct ChannelInner {
    raw: NonNull<cm::rdma_event_channel>,
}

// SAFETY: an event channel is an fd; librdmacm allows its use from any thread.
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: destroyed once, after every id on it (they hold this Arc).
        unsafe { cm::rdma_destroy_event_channel(self.raw.as_ptr()) };
    }
}

impl EventChannel {
    /// Creates an event channel.
    pub fn new() -> Result<EventChannel> {
        // SAFETY: no arguments; NULL on failure.
        let raw = unsafe { cm::rdma_create_event_channel() };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("rdma_create_event_channel"))?;
        Ok(EventChannel {
            inner: Arc::new(ChannelInner { raw }),
        })
    }

    /// The raw channel, valid while this value lives.
    pub fn as_raw(&self) -> *mut cm::rdma_event_channel {
        self.inner.raw.as_ptr()
    }

    /// Makes [`get_event`](Self::get_event) return `Ok(None)` instead of
    /// blocking when no event is pending.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        crate::channel::set_nonblocking(self.as_raw_fd(), nonblocking)
    }

    /// The next event, copied and acknowledged; `Ok(None)` when non-blocking
    /// and none is pending.
    pub fn get_event(&self) -> Result<Option<CmEvent>> {
        self.get_event_with(|event| event)
    }

    /// The next event, copied, handed to `f` before it is acknowledged (so
    /// that destroying its id waits until `f` has returned); `f`'s result,
    /// or `Ok(None)` when non-blocking and none is pending.
    ///
    /// `f` must not drop the event's new id (of a connect request) nor
    /// destroy any id with an unacknowledged event: that destroy would wait
    /// for this acknowledgement. It returns what is to be dropped.
    pub(crate) fn get_event_with<R>(&self, f: impl FnOnce(CmEvent) -> R) -> Result<Option<R>> {
        let mut ev = ptr::null_mut();
        // SAFETY: a live channel; `ev` is writable.
        if unsafe { cm::rdma_get_cm_event(self.as_raw(), &mut ev) } != 0 {
            let e = Error::last("rdma_get_cm_event");
            return if e.errno() == libc::EAGAIN {
                Ok(None)
            } else {
                Err(e)
            };
        }
        // SAFETY: `ev` is a live event until acked below.
        let mut event = unsafe { CmEvent::copy(ev) };
        if event.kind == CmEventKind::ConnectRequest {
            // The new id belongs to the application from now on.
            if let Some(raw) = NonNull::new(event.id) {
                event.new_id = Some(CmId::from_new(raw, self.clone()));
            }
        }
        let r = f(event);
        // SAFETY: acknowledged once; everything needed was copied.
        unsafe { cm::rdma_ack_cm_event(ev) };
        Ok(Some(r))
    }

    /// Waits up to `timeout` for the next event (`Ok(None)` on timeout).
    pub fn wait_event(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        let mut pfd = libc::pollfd {
            fd: self.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            return Err(Error::last("poll"));
        }
        if n == 0 {
            return Ok(None);
        }
        self.get_event()
    }

    /// Waits up to `timeout` for an event of `kind` about `id`; any other
    /// event is an error that names what arrived.
    pub fn expect(&self, id: &CmId, kind: CmEventKind, timeout: Duration) -> Result<CmEvent> {
        let verb = "rdma_get_cm_event";
        let Some(ev) = self.wait_event(timeout)? else {
            return Err(Error::new(verb, libc::ETIMEDOUT)
                .with_hint(format!("no {kind:?} within {timeout:?}")));
        };
        if ev.kind == kind && ev.is_for(id) {
            return Ok(ev);
        }
        Err(event_error(verb, &ev, kind))
    }
}

/// An error for an unexpected event, with the errno the event implies.
pub(crate) fn event_error(verb: &'static str, ev: &CmEvent, wanted: CmEventKind) -> Error {
    let errno = match ev.kind {
        CmEventKind::Rejected => libc::ECONNREFUSED,
        CmEventKind::Unreachable => libc::EHOSTUNREACH,
        CmEventKind::AddrError | CmEventKind::RouteError => {
            if ev.status < 0 {
                -ev.status
            } else {
                libc::EHOSTUNREACH
            }
        }
        CmEventKind::ConnectError => libc::ECONNABORTED,
        _ if ev.status < 0 => -ev.status,
        _ => libc::EPROTO,
    };
    Error::new(verb, errno).with_hint(format!(
        "{:?} (status {}) instead of {wanted:?}",
        ev.kind, ev.status
    ))
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: a live channel; the fd is set at creation.
        unsafe { (*self.as_raw()).fd }
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open while the channel lives.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

impl fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

/// A CM id (`rdma_cm_id`) and the queue pair it owns, if any.
pub struct CmId {
    raw: NonNull<cm::rdma_cm_id>,
    qp: Option<QueuePair>,
    channel: EventChannel,
}

// SAFETY: librdmacm allows calls on an id from any thread; the QP is Send
// and Sync.
unsafe impl Send for CmId {}
// SAFETY: as above; `&CmId` methods are librdmacm calls that lock internally.
unsafe impl Sync for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        self.destroy_qp();
        // SAFETY: destroyed once. Every event of this id is acknowledged once
        // read (CmEvent copies) and, through AsyncCm, routed, so this waits
        // at most for a routing under way.
        unsafe { cm::rdma_destroy_id(self.raw.as_ptr()) };
    }
}

fn rc(verb: &'static str, r: i32) -> Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(Error::last(verb))
    }
}

fn timeout_ms(t: Duration) -> i32 {
    t.as_millis().clamp(1, i32::MAX as u128) as i32
}

impl CmId {
    /// Creates an id on `channel` in `port_space`.
    pub fn new(channel: &EventChannel, port_space: PortSpace) -> Result<CmId> {
        let mut raw = ptr::null_mut();
        // SAFETY: a live channel; `raw` is writable; no context pointer.
        rc("rdma_create_id", unsafe {
            cm::rdma_create_id(
                channel.as_raw(),
                &mut raw,
                ptr::null_mut(),
                port_space.raw(),
            )
        })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new("rdma_create_id", libc::ENOMEM))?;
        Ok(CmId::from_new(raw, channel.clone()))
    }

    pub(crate) fn from_new(raw: NonNull<cm::rdma_cm_id>, channel: EventChannel) -> CmId {
        CmId {
            raw,
            qp: None,
            channel,
        }
    }

    /// The raw id, valid while this value lives.
    pub fn as_raw(&self) -> *mut cm::rdma_cm_id {
        self.raw.as_ptr()
    }

    /// The channel the id reports events on.
    pub fn channel(&self) -> &EventChannel {
        &self.channel
    }

    /// Binds to a local address (port 0: an ephemeral port).
    pub fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        // SAFETY: a live id; a complete socket address.
        rc("rdma_bind_addr", unsafe {
            cm::rdma_bind_addr(self.as_raw(), a.as_mut_ptr())
        })
        .map_err(|e| {
            if e.errno() == libc::EADDRINUSE {
                e.with_hint(format!("{addr} is already bound by another CM id"))
            } else if e.errno() == libc::EADDRNOTAVAIL || e.errno() == libc::ENODEV {
                e.with_hint(format!("no RDMA device has the address {}", addr.ip()))
            } else {
                e
            }
        })
    }

    /// Listens for connect requests.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: a live id.
        rc("rdma_listen", unsafe {
            cm::rdma_listen(self.as_raw(), backlog)
        })
    }

    /// Starts resolving `dst` (and binds to `src` or a local address of the
    /// route); completes with an `AddrResolved` or `AddrError` event.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let mut d = RawAddr::new(dst);
        let mut s = src.map(RawAddr::new);
        let sp = s.as_mut().map_or(ptr::null_mut(), |s| s.as_mut_ptr());
        // SAFETY: a live id; complete socket addresses or NULL.
        rc("rdma_resolve_addr", unsafe {
            cm::rdma_resolve_addr(self.as_raw(), sp, d.as_mut_ptr(), timeout_ms(timeout))
        })
    }

    /// Starts resolving the route; completes with `RouteResolved` or `RouteError`.
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        // SAFETY: a live id with a resolved address.
        rc("rdma_resolve_route", unsafe {
            cm::rdma_resolve_route(self.as_raw(), timeout_ms(timeout))
        })
    }

    /// The verbs context of the device the id is bound to (after address
    /// resolution, a bind to a device address, or a connect request).
    ///
    /// librdmacm owns this context; the returned value never closes it.
    pub fn context(&self) -> Option<Context> {
        // SAFETY: a live id; `verbs` is set by librdmacm once bound.
        let raw = NonNull::new(unsafe { (*self.as_raw()).verbs })?;
        // SAFETY: librdmacm keeps the contexts of its devices open until the
        // library is unloaded or the device removed.
        Some(unsafe { Context::from_rdmacm(raw) })
    }

    /// The port of the device the id is bound to.
    pub fn port_num(&self) -> u8 {
        // SAFETY: a live id.
        unsafe { (*self.as_raw()).port_num }
    }

    /// Creates a queue pair for the id, on its device, and attaches it, as
    /// `rdma_create_qp` does: a connected QP is moved to INIT, a UD QP to RTS.
    /// The id owns the QP from now on; [`qp`](Self::qp) reaches it.
    pub fn create_qp(
        &mut self,
        pd: &ProtectionDomain,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: QpCaps,
    ) -> Result<&QueuePair> {
        if self.qp.is_some() {
            return Err(Error::invalid("rdma_create_qp", "the id already has a QP"));
        }
        let ctx = self.context().ok_or_else(|| {
            Error::invalid("rdma_create_qp", "the id is not bound to a device yet")
        })?;
        if ctx.name() != pd.context().name() {
            return Err(Error::invalid(
                "rdma_create_qp",
                format!(
                    "the PD is on {}, the id on {}",
                    pd.context().name(),
                    ctx.name()
                ),
            ));
        }
        let qp = QueuePair::builder(pd, qp_type, send_cq)
            .recv_cq(recv_cq)
            .caps(caps)
            .build()?;
        let (mut attr, mask) = self.init_qp_attr(crate::sys::IBV_QPS_INIT)?;
        // RESET -> INIT with the CM's attributes, as rdma_create_qp does: one
        // ibv_modify_qp (QueuePair::modify would query the state first).
        // SAFETY: a live QP; `attr` is complete for `mask`.
        let rc = unsafe { crate::sys::ibv_modify_qp(qp.as_raw(), &mut attr, mask as i32) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_modify_qp", rc).with_hint("RESET -> INIT"));
        }
        if qp_type == QpType::Ud {
            qp.set_state(crate::QpState::Rtr)?;
            qp.to_rts(&crate::RtsAttr::default())?;
        }
        // SAFETY: a live id; the QP lives as long as the id holds it, and
        // Drop detaches it before destroying it.
        unsafe { (*self.as_raw()).qp = qp.as_raw() };
        Ok(self.qp.insert(qp))
    }

    /// The attributes the CM prescribes for moving the id's QP to `state`.
    pub fn init_qp_attr(
        &self,
        state: crate::sys::ibv_qp_state,
    ) -> Result<(crate::sys::ibv_qp_attr, u32)> {
        // SAFETY: plain data.
        let mut attr: crate::sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state;
        let mut mask = 0;
        // SAFETY: a live id; writable out-parameters.
        rc("rdma_init_qp_attr", unsafe {
            cm::rdma_init_qp_attr(self.as_raw(), &mut attr, &mut mask)
        })?;
        Ok((attr, mask as u32))
    }

    /// The id's queue pair.
    pub fn qp(&self) -> Option<&QueuePair> {
        self.qp.as_ref()
    }

    /// Detaches the id's queue pair and destroys it, as `rdma_destroy_qp`
    /// does (after [`disconnect`](Self::disconnect), say); the id lives on.
    /// Its CQs and PD go when nothing else holds them. Nothing happens when
    /// the id has no QP.
    pub fn destroy_qp(&mut self) {
        if let Some(qp) = self.qp.take() {
            // SAFETY: a live id; librdmacm no longer touches the QP once
            // detached, and the QP is then destroyed by its own Drop.
            unsafe { (*self.as_raw()).qp = ptr::null_mut() };
            drop(qp);
        }
    }

    /// Starts connecting (after route resolution); completes with
    /// `Established`, `Rejected`, `Unreachable` or `ConnectError`.
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        let mut p = param.raw()?;
        // SAFETY: a live id; `p` points into `param`, alive during the call.
        rc("rdma_connect", unsafe {
            cm::rdma_connect(self.as_raw(), &mut p)
        })
    }

    /// Accepts the connect request this id was created by.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let mut p = param.raw()?;
        // SAFETY: as in `connect`.
        rc("rdma_accept", unsafe {
            cm::rdma_accept(self.as_raw(), &mut p)
        })
    }

    /// Rejects the connect request this id was created by, with private data.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        let len = u8::try_from(private_data.len())
            .map_err(|_| Error::invalid("rdma_reject", "at most 255 bytes of private data"))?;
        let p = if len == 0 {
            ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: a live id; `p` is NULL or `len` readable bytes.
        rc("rdma_reject", unsafe {
            cm::rdma_reject(self.as_raw(), p, len)
        })
    }

    /// Disconnects; both sides then get `Disconnected`.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: a live id.
        rc("rdma_disconnect", unsafe {
            cm::rdma_disconnect(self.as_raw())
        })
    }

    /// Joins the multicast group `addr`; completes with `MulticastJoin`
    /// (whose UD parameters address the group) or `MulticastError`.
    pub fn join_multicast(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        // SAFETY: a live id; a complete address; no context pointer.
        rc("rdma_join_multicast", unsafe {
            cm::rdma_join_multicast(self.as_raw(), a.as_mut_ptr(), ptr::null_mut())
        })
    }

    /// Leaves the multicast group `addr`.
    pub fn leave_multicast(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        // SAFETY: a live id; a complete address.
        rc("rdma_leave_multicast", unsafe {
            cm::rdma_leave_multicast(self.as_raw(), a.as_mut_ptr())
        })
    }

    /// Lets the id's address be reused (`RDMA_OPTION_ID_REUSEADDR`).
    pub fn set_reuseaddr(&self, on: bool) -> Result<()> {
        let mut v: i32 = on as i32;
        // SAFETY: a live id; `v` is the int the option expects.
        rc("rdma_set_option", unsafe {
            cm::rdma_set_option(
                self.as_raw(),
                cm::RDMA_OPTION_ID as i32,
                cm::RDMA_OPTION_ID_REUSEADDR as i32,
                (&mut v as *mut i32).cast(),
                std::mem::size_of::<i32>(),
            )
        })
    }

    /// The local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: a live id; the route's address storage is large enough.
        unsafe { from_raw(cm::rdma_get_local_addr(self.as_raw())) }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as above.
        unsafe { from_raw(cm::rdma_get_peer_addr(self.as_raw())) }
    }
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .field("qp", &self.qp.as_ref().map(|q| q.qp_num()))
            .finish()
    }
}
