//! The CM id: creation, binding, resolution, the connection's steps and
//! the context of its device. Its queue pair, multicast groups and options
//! are in the files of this module's directory.

mod multicast;
mod options;
mod ports;
mod qp;
mod srq;

use std::any::Any;
use std::fmt;
use std::net::SocketAddr;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rdmacm_sys as cm;

use super::addr::{from_raw, RawAddr};
use super::channel::{ack_events_of, EventChannel};
use super::event::{reject_hint, ConnParam};
use crate::{Context, Error, QueuePair, Result};

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
    pub(crate) fn raw(self) -> cm::rdma_port_space {
        match self {
            PortSpace::Tcp => cm::RDMA_PS_TCP,
            PortSpace::Udp => cm::RDMA_PS_UDP,
            PortSpace::IpoIb => cm::RDMA_PS_IPOIB,
            PortSpace::Ib => cm::RDMA_PS_IB,
        }
    }
}

/// A CM id (`rdma_cm_id`) and the queue pair and shared receive queue it
/// owns, if any.
pub struct CmId {
    raw: NonNull<cm::rdma_cm_id>,
    qp: Option<QueuePair>,
    /// The id's SRQ (`id->srq`), given to the QP it creates.
    srq: Option<crate::SharedReceiveQueue>,
    /// Whether librdmacm stored the SRQ's PD in the id (`id->pd` was
    /// NULL), to be cleared when the SRQ goes.
    srq_set_pd: bool,
    channel: EventChannel,
    /// The multicast groups joined and not left: they are left before the
    /// QP goes, since a QP attached to a group cannot be destroyed.
    groups: Mutex<Vec<SocketAddr>>,
}

// SAFETY: librdmacm allows calls on an id from any thread, and the QP is
// Send. The id's fields are written by librdmacm in calls on the id and in
// the processing of its events; every such call, and every read of a field
// here, holds the channel's lock (`ChannelInner::locked`), so none overlaps
// another.
unsafe impl Send for CmId {}
// SAFETY: as above: `&CmId` methods make their librdmacm calls and read the
// id's fields with the channel's lock held; the QP and `groups` are Sync.
unsafe impl Sync for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        let qp = self.detach_qp();
        // Destroyed now when nothing else uses it; otherwise forgotten by
        // librdmacm and destroyed by its last handle (the QP's, say).
        let srq = self.detach_srq();
        // An event of this id being handed to a callback on this thread
        // would never be acknowledged while rdma_destroy_id waits for it.
        ack_events_of(self.as_raw());
        // SAFETY: destroyed once. Every event of this id is acknowledged once
        // read (CmEvent copies; an event being handed to a callback on
        // another thread is acknowledged when it returns, and one on this
        // thread just was), so this waits at most for a callback under way.
        // Once it returns, librdmacm touches neither the id nor its QP again.
        unsafe { cm::rdma_destroy_id(self.raw.as_ptr()) };
        // The QP goes after the id, whose events could use it until then
        // (detach_qp has also cleared `qp` under the lock).
        drop(qp);
        drop(srq);
    }
}

/// librdmacm's reference on a device, held by an id of its own bound to an
/// address of the device: while it lives, librdmacm keeps the device's
/// context open, even when the device goes away and every other id on it is
/// destroyed. (A reference released by destroying an id, unlike one of
/// `rdma_get_devices`, also frees librdmacm's own PD of the device when it
/// is the last.)
struct DeviceRef {
    raw: NonNull<cm::rdma_cm_id>,
    /// The context librdmacm gave the id.
    verbs: *mut crate::sys::ibv_context,
}

// SAFETY: the id is librdmacm's alone (a synchronous id, on a channel of its
// own that nothing reads); it is only destroyed, from any thread.
unsafe impl Send for DeviceRef {}
// SAFETY: as above: nothing reads or writes it through `&DeviceRef`.
unsafe impl Sync for DeviceRef {}

impl DeviceRef {
    /// A reference on the device of `local`, when it is the device of
    /// `verbs`.
    fn new(verbs: *mut crate::sys::ibv_context, local: SocketAddr) -> Option<DeviceRef> {
        let mut raw = ptr::null_mut();
        // SAFETY: a NULL channel makes a synchronous id with a channel of
        // its own; `raw` is writable.
        let r = unsafe {
            cm::rdma_create_id(ptr::null_mut(), &mut raw, ptr::null_mut(), cm::RDMA_PS_TCP)
        };
        let raw = NonNull::new(raw).filter(|_| r == 0)?;
        let mut pin = DeviceRef {
            raw,
            verbs: ptr::null_mut(),
        };
        let mut any_port = local;
        any_port.set_port(0);
        let mut a = RawAddr::new(any_port);
        // SAFETY: a live id; a complete address. Binding gives it a
        // reference on the address's device.
        if unsafe { cm::rdma_bind_addr(raw.as_ptr(), a.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: a live id that only this thread uses yet.
        pin.verbs = unsafe { (*raw.as_ptr()).verbs };
        (pin.verbs == verbs).then_some(pin)
    }
}

impl Drop for DeviceRef {
    fn drop(&mut self) {
        // SAFETY: destroyed once. None of its events is ever read, so none
        // waits for an acknowledgement; its channel goes with it.
        unsafe { cm::rdma_destroy_id(self.raw.as_ptr()) };
    }
}

/// The references that contexts handed out share while any of them lives,
/// so that `context()` binds an id of its own only when none does.
static PINS: Mutex<Vec<Weak<DeviceRef>>> = Mutex::new(Vec::new());

/// A reference on the device of `verbs` (whose address `local` is);
/// `None` when none can be taken (the device is being removed, or the
/// address is gone).
///
/// `verbs` must be the context of a live id: the id's reference on its
/// device keeps it open, so no other context can have its address, and a
/// reference whose context has that address is on this context's device.
fn pin(verbs: *mut crate::sys::ibv_context, local: SocketAddr) -> Option<Arc<DeviceRef>> {
    let mut pins = crate::os::lock(&PINS);
    pins.retain(|w| w.strong_count() > 0);
    if let Some(p) = pins
        .iter()
        .filter_map(Weak::upgrade)
        .find(|p| p.verbs == verbs)
    {
        return Some(p);
    }
    let p = Arc::new(DeviceRef::new(verbs, local)?);
    pins.push(Arc::downgrade(&p));
    Some(p)
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
            srq: None,
            srq_set_pd: false,
            channel,
            groups: Mutex::new(Vec::new()),
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

    /// Runs `f` with the lock of the id's channel held: librdmacm then
    /// neither processes an event of the id nor runs another call on it.
    fn locked<R>(&self, f: impl FnOnce() -> R) -> R {
        self.channel.inner.locked(f)
    }

    /// Binds to a local address (port 0: an ephemeral port).
    pub fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        // SAFETY: a live id; a complete socket address; the lock is held.
        rc(
            "rdma_bind_addr",
            self.locked(|| unsafe { cm::rdma_bind_addr(self.as_raw(), a.as_mut_ptr()) }),
        )
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
        // SAFETY: a live id; the lock is held.
        rc(
            "rdma_listen",
            self.locked(|| unsafe { cm::rdma_listen(self.as_raw(), backlog) }),
        )
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
        // SAFETY: a live id; complete socket addresses or NULL; the lock is
        // held.
        rc(
            "rdma_resolve_addr",
            self.locked(|| unsafe {
                cm::rdma_resolve_addr(self.as_raw(), sp, d.as_mut_ptr(), timeout_ms(timeout))
            }),
        )
    }

    /// Starts resolving the route; completes with `RouteResolved` or `RouteError`.
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        // SAFETY: a live id; the lock is held.
        rc(
            "rdma_resolve_route",
            self.locked(|| unsafe { cm::rdma_resolve_route(self.as_raw(), timeout_ms(timeout)) }),
        )
    }

    /// The verbs context of the device the id is bound to (after address
    /// resolution, a bind to a device address, or a connect request).
    ///
    /// librdmacm owns this context and closes it once its device is gone
    /// and nothing uses it: the returned value (and every PD, CQ, MR made
    /// from it) holds a reference on librdmacm's device (an id of its own,
    /// bound to the id's local address, shared by the contexts handed out
    /// for the device) that keeps it open meanwhile, beyond the id.
    ///
    /// Fails with `EINVAL` while the id has no device (before address
    /// resolution or a bind), and with `ENODEV` when its device is being
    /// removed or its address is gone.
    pub fn context(&self) -> Result<Context> {
        const VERB: &str = "rdma_cm_id.verbs";
        // The pin is taken with the lock held, so that `verbs` stays the
        // id's context (held open by the id's own reference) until then.
        self.locked(|| {
            let raw = NonNull::new(self.verbs()).ok_or_else(|| {
                Error::invalid(
                    VERB,
                    "the id has no device yet: resolve an address (or bind to a \
                     device's address) first",
                )
            })?;
            let gone = || {
                Error::new(VERB, libc::ENODEV).with_hint(
                    "the id's device is being removed, or its address is not bound to the device",
                )
            };
            let at = self.local_addr().ok_or_else(gone)?;
            let keep: Arc<dyn Any + Send + Sync> = pin(raw.as_ptr(), at).ok_or_else(gone)?;
            // SAFETY: `keep` holds librdmacm's reference on the device of
            // `raw` (its id has `raw` for context), and librdmacm closes a
            // context only when no reference on its device is left.
            Ok(unsafe { Context::from_rdmacm(raw, keep) })
        })
    }

    /// The id's `verbs` field (NULL until the id has a device).
    fn verbs(&self) -> *mut crate::sys::ibv_context {
        // SAFETY: a live id; the field is written by librdmacm only in calls
        // on the id and in the processing of its events, which the lock
        // (held by every caller) keeps from overlapping this read.
        self.locked(|| unsafe { (*self.as_raw()).verbs })
    }

    /// The port of the device the id is bound to.
    pub fn port_num(&self) -> u8 {
        // SAFETY: a live id; the lock keeps librdmacm's writes of the field
        // from overlapping this read (see `verbs`).
        self.locked(|| unsafe { (*self.as_raw()).port_num })
    }

    /// Moves the id to `channel` (`rdma_migrate_id`): its events are
    /// reported there from now on. Every event of the id read so far was
    /// acknowledged when it was read (see [`CmEvent`]), so librdmacm's wait
    /// for their acknowledgement ends at once.
    pub(crate) fn migrate(&mut self, channel: &EventChannel) -> Result<()> {
        rc(
            "rdma_migrate_id",
            self.locked(|| {
                // rdma_migrate_id waits for the id's events to be
                // acknowledged, one of which this thread may be handing to
                // a callback (as in Drop).
                ack_events_of(self.as_raw());
                // SAFETY: a live id and channel; the old channel's lock
                // keeps every other call on the id and the processing of its
                // events from overlapping the move, and every event read on
                // another thread was acknowledged before that read let the
                // lock go; the new channel is the caller's own, shared with
                // nothing yet, so its lock is not needed.
                unsafe { cm::rdma_migrate_id(self.as_raw(), channel.as_raw()) }
            }),
        )?;
        self.channel = channel.clone();
        Ok(())
    }

    /// Starts connecting (after route resolution); completes with
    /// `Established`, `Rejected`, `Unreachable` or `ConnectError`. On
    /// iWARP a refused TCP connection may fail the call itself, with
    /// `ECONNREFUSED` and the same hint as a `Rejected` event
    /// ([`Error::is_refused`]).
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        let mut p = param.raw()?;
        // SAFETY: a live id; `p` points into `param`, alive during the call;
        // the lock is held.
        rc(
            "rdma_connect",
            self.locked(|| unsafe { cm::rdma_connect(self.as_raw(), &mut p) }),
        )
        .map_err(|e| match e.errno() {
            libc::ECONNREFUSED => e.with_hint(reject_hint(-libc::ECONNREFUSED, 0)),
            _ => e,
        })
    }

    /// Accepts the connect request this id was created by.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let mut p = param.raw()?;
        // SAFETY: as in `connect`.
        rc(
            "rdma_accept",
            self.locked(|| unsafe { cm::rdma_accept(self.as_raw(), &mut p) }),
        )
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
        // SAFETY: a live id; `p` is NULL or `len` readable bytes; the lock is
        // held.
        rc(
            "rdma_reject",
            self.locked(|| unsafe { cm::rdma_reject(self.as_raw(), p, len) }),
        )
    }

    /// Disconnects; both sides then get `Disconnected`.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: a live id; the lock is held (rdma_disconnect moves the QP
        // to ERR).
        rc(
            "rdma_disconnect",
            self.locked(|| unsafe { cm::rdma_disconnect(self.as_raw()) }),
        )
    }

    /// Completes a connection whose QP the id does not hold
    /// (`rdma_establish`): a `connect` that named a QP built outside the CM
    /// (`ConnParam::qp_num`) gets a `ConnectResponse` instead of
    /// `Established`; the caller then moves its QP to RTR and RTS with
    /// [`init_qp_attr`](Self::init_qp_attr) and calls this, and the peer
    /// sees `Established`. iWARP has no such step: its CM moves the QP and
    /// reports `Established` at once.
    pub fn establish(&self) -> Result<()> {
        // SAFETY: a live id; the lock is held.
        rc(
            "rdma_establish",
            self.locked(|| unsafe { cm::rdma_establish(self.as_raw()) }),
        )
    }

    /// The local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: a live id; the route's address storage is large enough;
        // the lock keeps librdmacm's writes of it (bind, resolution, connect
        // requests) from overlapping the read.
        self.locked(|| unsafe { from_raw(cm::rdma_get_local_addr(self.as_raw())) })
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as above.
        self.locked(|| unsafe { from_raw(cm::rdma_get_peer_addr(self.as_raw())) })
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

impl CmId {
    /// Sets the ECE options this side offers in its REQ or REP
    /// (`rdma_set_local_ece`), for a connection whose QP the id does not
    /// hold (`ConnParam::qp_num`); an id with a QP offers what the QP
    /// reports ([`QueuePair::query_ece`](crate::QueuePair::query_ece)).
    /// Errors: `EINVAL` when the id holds a QP (librdmacm's rule, told
    /// here before the call).
    pub fn set_local_ece(&self, ece: crate::Ece) -> Result<()> {
        if self.qp.is_some() {
            return Err(Error::invalid(
                "rdma_set_local_ece",
                "the id holds a QP: its ECE options are the QP's (QueuePair::set_ece)",
            ));
        }
        let mut e = ece.raw();
        // SAFETY: a live id; `e` is complete and lives for the call
        // (librdmacm copies it); the lock is held.
        rc(
            "rdma_set_local_ece",
            self.locked(|| unsafe { cm::rdma_set_local_ece(self.as_raw(), &mut e) }),
        )
    }

    /// The ECE options the peer offered in its REQ or REP
    /// (`rdma_get_remote_ece`), for a connection whose QP the id does not
    /// hold: read it on a connect request's id, or after `ConnectResponse`.
    /// All zero when the peer offered none. Errors: `EINVAL` when the id
    /// holds a QP (librdmacm's rule, told here before the call).
    pub fn remote_ece(&self) -> Result<crate::Ece> {
        if self.qp.is_some() {
            return Err(Error::invalid(
                "rdma_get_remote_ece",
                "the id holds a QP, which applied the peer's ECE options itself",
            ));
        }
        let mut e = crate::Ece::default().raw();
        // SAFETY: a live id; `e` is a local the call fills; the lock is
        // held.
        rc(
            "rdma_get_remote_ece",
            self.locked(|| unsafe { cm::rdma_get_remote_ece(self.as_raw(), &mut e) }),
        )?;
        Ok(crate::Ece::from_raw(&e))
    }

    /// Rejects a connection request because its ECE options are not
    /// supported (`rdma_reject_ece`: the reject's reason is "vendor option
    /// not supported" on InfiniBand and RoCE; iWARP carries no reason),
    /// with up to 255 bytes of private data.
    pub fn reject_ece(&self, private_data: &[u8]) -> Result<()> {
        let len = u8::try_from(private_data.len())
            .map_err(|_| Error::invalid("rdma_reject_ece", "at most 255 bytes of private data"))?;
        let p = if len == 0 {
            ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: a live id; `p` is NULL or `len` readable bytes; the lock
        // is held.
        rc(
            "rdma_reject_ece",
            self.locked(|| unsafe { cm::rdma_reject_ece(self.as_raw(), p, len) }),
        )
    }
}

impl CmId {
    /// Tells the CM that the connection is up (`rdma_notify` with
    /// `IBV_EVENT_COMM_EST`): the passive side calls it when its QP
    /// received data (or got the `CommEstablished` async event) before
    /// the CM's `Established`, which a lost RTU would otherwise delay.
    /// On InfiniBand and RoCE the IB CM then moves to established (an
    /// `Established` event follows); iWARP's CM has nothing to do and
    /// succeeds in any state. Errors: `EINVAL` for an id the kernel's CM
    /// has no connection or listen of (never connected or listening), and
    /// on InfiniBand and RoCE for a listener or a request not answered yet
    /// (before [`accept`](Self::accept)); `EISCONN` on InfiniBand and RoCE
    /// once established.
    pub fn notify_comm_established(&self) -> Result<()> {
        // SAFETY: a live id; the lock is held.
        rc(
            "rdma_notify",
            self.locked(|| unsafe { cm::rdma_notify(self.as_raw(), cm::IBV_EVENT_COMM_EST) }),
        )
    }
}
