//! Event channels and CM ids.

use std::any::Any;
use std::cell::Cell;
use std::ffi::CStr;
use std::fmt;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
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
    pub(crate) fn raw(self) -> cm::rdma_port_space {
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
    /// The channel's lock. librdmacm processes an event inside
    /// `rdma_get_cm_event`, before returning it: it reads and writes the
    /// event's id (`qp`: moved to RTR and RTS on a connect response, to ERR
    /// on a reject, attached to a group on a join; `verbs`, the addresses,
    /// the route on resolution and connect requests). Every read of the
    /// channel holds this lock from `rdma_get_cm_event` to the
    /// acknowledgement, and so does every call on an id of the channel and
    /// every read of an id's fields: none of them overlaps librdmacm's
    /// processing of an event, nor another of them. Reentrant per thread
    /// (see [`locked`](Self::locked)).
    lock: Mutex<()>,
    /// Whether `get_event` returns `Ok(None)` instead of waiting. The fd
    /// itself is non-blocking at all times, so that a read never waits in
    /// the kernel with the lock held.
    nonblocking: AtomicBool,
}

// SAFETY: an event channel is an fd; librdmacm allows its use from any
// thread. The lock and the flag are Send and Sync.
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: destroyed once, after every id on it (they hold this Arc).
        unsafe { cm::rdma_destroy_event_channel(self.raw.as_ptr()) };
    }
}

/// What a thread holds of a channel: the channel's lock, and the event a
/// read is handing to its callback (not acknowledged yet). Frames live on
/// the stack of the thread that holds them, linked from [`TOP`].
struct Frame {
    /// The channel (its `ChannelInner`'s address).
    channel: usize,
    /// The event being handed to a callback; null when there is none, or
    /// when it has been acknowledged.
    event: Cell<*mut cm::rdma_cm_event>,
    /// The id whose events the acknowledgement completes (what
    /// `rdma_destroy_id` of that id waits for): the listener of a connect
    /// request, the id of any other event.
    waits: Cell<*mut cm::rdma_cm_id>,
    prev: *const Frame,
}

impl Frame {
    /// A frame of channel `key` with no event, above this thread's top.
    fn new(key: usize) -> Frame {
        Frame {
            channel: key,
            event: Cell::new(ptr::null_mut()),
            waits: Cell::new(ptr::null_mut()),
            prev: TOP.with(Cell::get),
        }
    }
}

thread_local! {
    /// The innermost frame of this thread.
    static TOP: Cell<*const Frame> = const { Cell::new(ptr::null()) };
}

/// Links a frame as this thread's innermost one, and unlinks it when
/// dropped (on unwind too), before the frame itself goes.
struct Linked<'a>(&'a Frame);

impl<'a> Linked<'a> {
    fn new(frame: &'a Frame) -> Linked<'a> {
        TOP.with(|t| t.set(frame));
        Linked(frame)
    }
}

impl Drop for Linked<'_> {
    fn drop(&mut self) {
        // Frames are linked and unlinked in stack order on one thread.
        TOP.with(|t| t.set(self.0.prev));
    }
}

/// Calls `f` on each frame of this thread, innermost first.
fn each_frame(mut f: impl FnMut(&Frame)) {
    let mut p = TOP.with(Cell::get);
    while !p.is_null() {
        // SAFETY: a linked frame is alive: it is unlinked (by `Linked`'s
        // drop) before its stack slot goes, and only this thread links
        // frames in its own list.
        let frame = unsafe { &*p };
        f(frame);
        p = frame.prev;
    }
}

/// Whether this thread holds the lock of `channel`.
fn holds(channel: usize) -> bool {
    let mut held = false;
    each_frame(|f| held |= f.channel == channel);
    held
}

/// Acknowledges, now, the events this thread is handing to callbacks that
/// `rdma_destroy_id` (or `rdma_leave_multicast`) of `id` would wait for:
/// they are copied already, and the wait would otherwise never end.
fn ack_events_of(id: *mut cm::rdma_cm_id) {
    each_frame(|f| {
        let ev = f.event.get();
        if !ev.is_null() && f.waits.get() == id {
            f.event.set(ptr::null_mut());
            // SAFETY: an event read and not acknowledged yet (`event` is
            // cleared as it is acknowledged, once); its contents were copied.
            unsafe { cm::rdma_ack_cm_event(ev) };
        }
    });
}

/// Acknowledges the event of a frame when dropped, unless that was done
/// already: on return and on unwind of the callback alike.
struct AckOnDrop<'a>(&'a Frame);

impl Drop for AckOnDrop<'_> {
    fn drop(&mut self) {
        let ev = self.0.event.replace(ptr::null_mut());
        if !ev.is_null() {
            // SAFETY: as in `ack_events_of`: read, not yet acknowledged.
            unsafe { cm::rdma_ack_cm_event(ev) };
        }
    }
}

impl ChannelInner {
    fn key(&self) -> usize {
        self as *const ChannelInner as usize
    }

    /// Runs `f` with the channel's lock held. Reentrant: a thread that
    /// holds it already (inside the callback of `get_event_with`, say) runs
    /// `f` at once, which is sound since nothing else can hold it then.
    pub(crate) fn locked<R>(&self, f: impl FnOnce() -> R) -> R {
        let key = self.key();
        if holds(key) {
            return f();
        }
        // The lock guards no data; a panic under it leaves nothing broken.
        let _lock = crate::os::lock(&self.lock);
        let frame = Frame::new(key);
        let _linked = Linked::new(&frame);
        f()
    }
}

/// Waits until `fd` is readable, up to `ms` milliseconds (-1: no limit);
/// whether it is.
fn wait_readable(fd: RawFd, ms: i32) -> Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = Error::last("poll");
        if e.errno() != libc::EINTR {
            return Err(e);
        }
    }
}

impl EventChannel {
    /// Creates an event channel.
    pub fn new() -> Result<EventChannel> {
        // SAFETY: no arguments; NULL on failure.
        let raw = unsafe { cm::rdma_create_event_channel() };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("rdma_create_event_channel"))?;
        let channel = EventChannel {
            inner: Arc::new(ChannelInner {
                raw,
                lock: Mutex::new(()),
                nonblocking: AtomicBool::new(false),
            }),
        };
        crate::channel::set_nonblocking(channel.as_raw_fd(), true)?;
        Ok(channel)
    }

    /// The raw channel, valid while this value lives.
    pub fn as_raw(&self) -> *mut cm::rdma_event_channel {
        self.inner.raw.as_ptr()
    }

    /// Makes [`get_event`](Self::get_event) return `Ok(None)` instead of
    /// blocking when no event is pending. (The fd is non-blocking either
    /// way; a blocking read waits with `poll`. Do not clear `O_NONBLOCK` on
    /// it: a read would then wait in the kernel holding the channel's lock,
    /// and every call on its ids with it.)
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        self.inner.nonblocking.store(nonblocking, Ordering::Relaxed);
        Ok(())
    }

    /// The next event, copied and acknowledged; `Ok(None)` when non-blocking
    /// and none is pending.
    pub fn get_event(&self) -> Result<Option<CmEvent>> {
        self.get_event_with(|event| event)
    }

    /// The next event, copied, handed to `f` before it is acknowledged (so
    /// that destroying its id waits until `f` has returned: a router can
    /// route it to its id without the id going meanwhile); `f`'s result, or
    /// `Ok(None)` when non-blocking and none is pending.
    ///
    /// The event is acknowledged when `f` returns or panics. `f` may drop
    /// ids, the event's own id (or listener) too: that acknowledges the
    /// event first, since its destruction would wait for it.
    pub fn get_event_with<R>(&self, f: impl FnOnce(CmEvent) -> R) -> Result<Option<R>> {
        let mut f = Some(f);
        loop {
            let blocking = !self.inner.nonblocking.load(Ordering::Relaxed);
            if blocking {
                wait_readable(self.as_raw_fd(), -1)?;
            }
            if let Some(r) = self.try_event_with(&mut f)? {
                return Ok(Some(r));
            }
            if !blocking {
                return Ok(None);
            }
            // Another reader took the event: wait for the next one.
        }
    }

    /// One non-blocking read: `f`'s result, or `Ok(None)` when no event is
    /// pending (then `f` is left).
    fn try_event_with<R>(&self, f: &mut Option<impl FnOnce(CmEvent) -> R>) -> Result<Option<R>> {
        let inner = &*self.inner;
        let key = inner.key();
        let _lock = (!holds(key)).then(|| crate::os::lock(&inner.lock));
        let frame = Frame::new(key);
        let _linked = Linked::new(&frame);
        let mut ev = ptr::null_mut();
        // SAFETY: a live channel; `ev` is writable. The lock is held (here
        // or by an outer frame of this thread), so librdmacm's processing
        // of the event overlaps no access of this crate to its id.
        if unsafe { cm::rdma_get_cm_event(self.as_raw(), &mut ev) } != 0 {
            let e = Error::last("rdma_get_cm_event");
            return if e.errno() == libc::EAGAIN {
                Ok(None)
            } else {
                Err(e)
            };
        }
        frame.event.set(ev);
        let _ack = AckOnDrop(&frame);
        // SAFETY: `ev` is a live event until acknowledged, which happens
        // only through `frame` (below, or in `ack_events_of`), after this.
        let mut event = unsafe { CmEvent::copy(ev) };
        let waits = if event.kind == CmEventKind::ConnectRequest {
            event.listen_id
        } else {
            event.id
        };
        frame.waits.set(waits);
        if event.kind == CmEventKind::ConnectRequest {
            // The new id belongs to the application from now on.
            if let Some(raw) = NonNull::new(event.id) {
                event.new_id = Some(CmId::from_new(raw, self.clone()));
            }
        }
        let f = f.take().expect("an event is handed to the callback once");
        Ok(Some(f(event)))
    }

    /// Waits up to `timeout` for the next event (`Ok(None)` on timeout).
    pub fn wait_event(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            if !wait_readable(self.as_raw_fd(), ms)? {
                return Ok(None);
            }
            let mut f = Some(|event| event);
            if let Some(ev) = self.try_event_with(&mut f)? {
                return Ok(Some(ev));
            }
            if left.is_zero() {
                return Ok(None);
            }
        }
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
    let hint = match ev.kind {
        CmEventKind::Rejected => reject_hint(ev.status, ev.private_data().len()),
        _ => format!("{:?} (status {}) instead of {wanted:?}", ev.kind, ev.status),
    };
    Error::new(verb, errno).with_hint(hint)
}

/// IB CM reject reasons (IBTA 12.6.7.2) a connect meets most.
const IB_REJ_INVALID_SERVICE_ID: i32 = 8;
const IB_REJ_CONSUMER: i32 = 28;

/// What a `Rejected` event means, in one shape on every transport: on the
/// IB CM (InfiniBand, RoCE) its status is the reject reason, on iWARP a
/// negative errno (`-ECONNREFUSED` both when no one listens, as TCP
/// answers, and for an MPA reject).
pub(crate) fn reject_hint(status: i32, private_data_len: usize) -> String {
    let nobody = "nothing listens at that address and port, or the listener rejected the request";
    match status {
        IB_REJ_INVALID_SERVICE_ID => {
            "connection refused: nothing listens at that address and port \
             (IB CM reject reason 8, invalid service ID)"
                .to_string()
        }
        IB_REJ_CONSUMER => format!(
            "connection refused: the listener rejected the request \
             (IB CM reject reason 28, with {private_data_len} bytes of private data)"
        ),
        s if s == -libc::ECONNREFUSED && private_data_len > 0 => format!(
            "connection refused: the listener rejected the request \
             (with {private_data_len} bytes of private data)"
        ),
        s if s == -libc::ECONNREFUSED => format!("connection refused: {nobody}"),
        s if s > 0 => format!("connection refused: IB CM reject reason {s}"),
        s => format!("connection refused: {nobody} (status {s})"),
    }
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
            let gone =
                || Error::new(VERB, libc::ENODEV).with_hint("the id's device is being removed");
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
        self.check_qp_target(pd.context().name())?;
        let qp = QueuePair::builder(pd, qp_type, send_cq)
            .recv_cq(recv_cq)
            .caps(caps)
            .build()?;
        self.attach_qp(qp)
    }

    /// Attaches `qp`, built by the caller on the id's device (with an SRQ,
    /// say, or signalling every send), as [`create_qp`](Self::create_qp)
    /// attaches the QP it builds: a connected QP is moved to INIT with the
    /// CM's attributes, a UD QP to RTS. The id owns the QP from now on.
    ///
    /// `qp` must be new (in RESET; siw reports INIT from kernel 6.12 on):
    /// the kernel refuses the move to INIT otherwise (`EINVAL`), and a QP of
    /// another device, or on an id that has one, is refused before that
    /// (`EINVAL`). A QP whose type does not fit the id's port space (a UD QP
    /// on a TCP id) is refused by the kernel. On a refusal the QP is
    /// dropped.
    pub fn attach_qp(&mut self, qp: QueuePair) -> Result<&QueuePair> {
        self.check_qp_target(qp.context().name())?;
        let qp_type = qp.qp_type();
        let (mut attr, mask) = self.init_qp_attr(crate::sys::IBV_QPS_INIT)?;
        // RESET -> INIT with the CM's attributes, as rdma_create_qp does: one
        // ibv_modify_qp with the attributes librdmacm chose.
        // SAFETY: a live QP; `attr` is complete for `mask`.
        let rc = unsafe { crate::sys::ibv_modify_qp(qp.as_raw(), &mut attr, mask as i32) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_modify_qp", rc).with_hint(
                "RESET -> INIT with the CM's attributes: the QP must be new, of a type that fits the id's port space",
            ));
        }
        if qp_type == QpType::Ud {
            qp.set_state(crate::QpState::Rtr)?;
            qp.to_rts(&crate::RtsAttr::default())?;
        }
        // SAFETY: a live id; the lock keeps this write from overlapping
        // librdmacm's reads of the field (event processing, calls on the
        // id). The QP lives as long as the id holds it: `detach_qp` clears
        // the field, under the lock, before the QP goes.
        self.locked(|| unsafe { (*self.as_raw()).qp = qp.as_raw() });
        Ok(self.qp.insert(qp))
    }

    /// Whether a QP of device `name` may be attached to the id: it has none
    /// yet, and has a device, of that name.
    fn check_qp_target(&self, name_of_qp: &str) -> Result<()> {
        if self.qp.is_some() {
            return Err(Error::invalid("rdma_create_qp", "the id already has a QP"));
        }
        let verbs = self.verbs();
        if verbs.is_null() {
            return Err(Error::invalid(
                "rdma_create_qp",
                "the id is not bound to a device yet",
            ));
        }
        // SAFETY: the id's context, kept open by the id; its device holds
        // its name.
        let name = unsafe { CStr::from_ptr(crate::sys::ibv_get_device_name((*verbs).device)) };
        let name = name.to_str().unwrap_or("?");
        if name != name_of_qp {
            return Err(Error::invalid(
                "rdma_create_qp",
                format!("the QP's device is {name_of_qp}, the id's {name}"),
            ));
        }
        Ok(())
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

    /// The attributes the CM prescribes for moving the id's QP to `state`.
    pub fn init_qp_attr(
        &self,
        state: crate::sys::ibv_qp_state,
    ) -> Result<(crate::sys::ibv_qp_attr, u32)> {
        // SAFETY: plain data.
        let mut attr: crate::sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state;
        let mut mask = 0;
        // SAFETY: a live id; writable out-parameters; the lock is held.
        rc(
            "rdma_init_qp_attr",
            self.locked(|| unsafe { cm::rdma_init_qp_attr(self.as_raw(), &mut attr, &mut mask) }),
        )?;
        Ok((attr, mask as u32))
    }

    /// The id's queue pair.
    pub fn qp(&self) -> Option<&QueuePair> {
        self.qp.as_ref()
    }

    /// Detaches the id's queue pair and destroys it, as `rdma_destroy_qp`
    /// does (after [`disconnect`](Self::disconnect), say); the id lives on.
    /// The multicast groups the id joined are left first (a QP attached to
    /// a group cannot be destroyed). Its CQs and PD go when nothing else
    /// holds them. Nothing happens when the id has no QP.
    pub fn destroy_qp(&mut self) {
        drop(self.detach_qp());
    }

    /// Leaves the id's groups and clears its `qp` field, with the lock
    /// held: librdmacm touches the QP no more (its event processing and the
    /// calls on the id read the field under the same lock), and the caller
    /// may destroy it.
    fn detach_qp(&mut self) -> Option<QueuePair> {
        let raw = self.as_raw();
        let groups = std::mem::take(
            self.groups
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let qp = self.qp.take();
        self.channel.inner.locked(|| {
            if !groups.is_empty() {
                // rdma_leave_multicast waits for the group's events, one of
                // which this thread may be handing to a callback.
                ack_events_of(raw);
            }
            for addr in groups {
                let mut a = RawAddr::new(addr);
                // SAFETY: a live id; a complete address; the lock is held.
                // Detaches the QP from the group (when its join was
                // processed, which happens under the lock too) and waits for
                // the group's events to be acknowledged, which every read
                // does before it lets go of the lock. A failure leaves
                // nothing to undo.
                unsafe { cm::rdma_leave_multicast(raw, a.as_mut_ptr()) };
            }
            if qp.is_some() {
                // SAFETY: a live id; the lock is held.
                unsafe { (*raw).qp = ptr::null_mut() };
            }
        });
        qp
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

    /// Joins the multicast group `addr`; completes with `MulticastJoin`
    /// (whose UD parameters address the group) or `MulticastError`.
    pub fn join_multicast(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        self.locked(|| {
            // SAFETY: a live id; a complete address; no context pointer; the
            // lock is held.
            rc("rdma_join_multicast", unsafe {
                cm::rdma_join_multicast(self.as_raw(), a.as_mut_ptr(), ptr::null_mut())
            })?;
            crate::os::lock(&self.groups).push(addr);
            Ok(())
        })
    }

    /// Joins multicast group `addr` as a send-only full member
    /// (`rdma_join_multicast_ex` with `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`):
    /// the id may send to the group (the `MulticastJoin` event brings its
    /// address), but its QP is not attached and receives nothing the group
    /// carries. Left as [`leave_multicast`](Self::leave_multicast) leaves.
    pub fn join_multicast_send_only(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        let mut attr = cm::rdma_cm_join_mc_attr_ex {
            comp_mask: cm::RDMA_CM_JOIN_MC_ATTR_ADDRESS | cm::RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
            join_flags: cm::RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
            addr: a.as_mut_ptr(),
        };
        self.locked(|| {
            // SAFETY: a live id; `attr` is complete for its mask and its
            // address lives for the call (librdmacm copies it); no context
            // pointer; the lock is held.
            rc("rdma_join_multicast_ex", unsafe {
                cm::rdma_join_multicast_ex(self.as_raw(), &mut attr, ptr::null_mut())
            })?;
            crate::os::lock(&self.groups).push(addr);
            Ok(())
        })
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

    /// Leaves the multicast group `addr`.
    pub fn leave_multicast(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        self.locked(|| {
            // librdmacm forgets the group whatever the outcome, once it
            // finds it (EADDRNOTAVAIL: it did not).
            let mut groups = crate::os::lock(&self.groups);
            if let Some(i) = groups.iter().position(|g| *g == addr) {
                groups.remove(i);
            }
            drop(groups);
            // rdma_leave_multicast waits for the group's events, one of
            // which this thread may be handing to a callback.
            ack_events_of(self.as_raw());
            // SAFETY: a live id; a complete address; the lock is held, and
            // every read acknowledges its event before it lets go of it, so
            // the wait for the group's events ends.
            rc("rdma_leave_multicast", unsafe {
                cm::rdma_leave_multicast(self.as_raw(), a.as_mut_ptr())
            })
        })
    }

    /// Sets one `RDMA_OPTION_ID` option to the plain value `value`, whose
    /// type is the one the kernel expects for it (`rdma_set_option`).
    fn set_id_option<T: Copy>(&self, name: u32, value: T, einval: &'static str) -> Result<()> {
        let mut v = value;
        // SAFETY: a live id; `v` is a readable value of the size passed,
        // which is the size the kernel checks for option `name` (an `int`
        // for REUSEADDR and AFONLY, a `u8` for TOS and ACK_TIMEOUT); the
        // lock is held.
        rc(
            "rdma_set_option",
            self.locked(|| unsafe {
                cm::rdma_set_option(
                    self.as_raw(),
                    cm::RDMA_OPTION_ID as i32,
                    name as i32,
                    (&mut v as *mut T).cast(),
                    std::mem::size_of::<T>(),
                )
            }),
        )
        .map_err(|e| {
            if e.errno() == libc::EINVAL {
                e.with_hint(einval)
            } else {
                e
            }
        })
    }

    /// Lets the id's address be reused (`RDMA_OPTION_ID_REUSEADDR`): `true`
    /// before the id listens, `false` only on a new id (else `EINVAL`).
    pub fn set_reuseaddr(&self, on: bool) -> Result<()> {
        self.set_id_option(
            cm::RDMA_OPTION_ID_REUSEADDR,
            on as i32,
            "REUSEADDR is turned on before the id listens, off only on a new id",
        )
    }

    /// Whether an IPv6 listener takes only IPv6 connections
    /// (`RDMA_OPTION_ID_AFONLY`, as `IPV6_V6ONLY`); while the id is new or
    /// only bound: once it listens or resolves, `EINVAL`. Without it a
    /// listener on `[::]` takes IPv4 connections too.
    pub fn set_afonly(&self, on: bool) -> Result<()> {
        self.set_id_option(
            cm::RDMA_OPTION_ID_AFONLY,
            on as i32,
            "AFONLY is set before the id listens or resolves an address",
        )
    }

    /// The type of service of the id's connection (`RDMA_OPTION_ID_TOS`):
    /// on RoCE the traffic class of its GRH, on InfiniBand the path's
    /// service level is chosen by it; before
    /// [`resolve_route`](Self::resolve_route), which uses it.
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        self.set_id_option(
            cm::RDMA_OPTION_ID_TOS,
            tos,
            "rdma_set_option refused the type of service",
        )
    }

    /// The local ACK timeout of the id's QP (`RDMA_OPTION_ID_ACK_TIMEOUT`):
    /// 4.096 µs · 2^`timeout`, at most 31; what [`init_qp_attr`] and the
    /// QP's move to RTS use instead of the path's packet lifetime; before
    /// connect or accept. iWARP has no such timeout: the option is kept but
    /// unused.
    ///
    /// [`init_qp_attr`]: Self::init_qp_attr
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        if timeout > 31 {
            return Err(Error::invalid(
                "rdma_set_option",
                format!("ACK timeout {timeout}: at most 31 (4.096 us * 2^31)"),
            ));
        }
        self.set_id_option(
            cm::RDMA_OPTION_ID_ACK_TIMEOUT,
            timeout,
            "an ACK timeout is for an id of a connected port space (TCP or IB), not UDP or IPoIB",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reject_reads_the_same_on_every_transport() {
        // IB CM (rxe): no listener, and a consumer's reject.
        assert!(reject_hint(8, 0).contains("nothing listens"));
        assert!(reject_hint(28, 3).contains("the listener rejected the request"));
        assert!(reject_hint(28, 3).contains("3 bytes"));
        // iWARP (siw): a refused TCP connection, and an MPA reject with data.
        let iw = reject_hint(-libc::ECONNREFUSED, 0);
        assert!(iw.contains("nothing listens") && iw.contains("or the listener rejected"));
        assert!(reject_hint(-libc::ECONNREFUSED, 5).contains("the listener rejected"));
        for s in [8, 28, 12, -libc::ECONNREFUSED, -libc::ETIMEDOUT] {
            assert!(reject_hint(s, 0).starts_with("connection refused"), "{s}");
        }
    }
}
