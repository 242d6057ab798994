//! The event channel and its lock: where the CM reports events, and what
//! keeps librdmacm's processing of an event from overlapping any call on
//! its id.

use std::cell::Cell;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdmacm_sys as cm;

use super::event::{event_error, CmEvent, CmEventKind};
use super::CmId;
use crate::{Error, Result};

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
pub(super) fn holds(channel: usize) -> bool {
    let mut held = false;
    each_frame(|f| held |= f.channel == channel);
    held
}

/// Acknowledges, now, the events this thread is handing to callbacks that
/// `rdma_destroy_id` (or `rdma_leave_multicast`) of `id` would wait for:
/// they are copied already, and the wait would otherwise never end.
pub(super) fn ack_events_of(id: *mut cm::rdma_cm_id) {
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
                crate::os::wait_readable(self.as_raw_fd(), None)?;
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
        // A timeout too long for an Instant waits forever.
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !crate::os::wait_readable(self.as_raw_fd(), left)? {
                return Ok(None);
            }
            let mut f = Some(|event| event);
            if let Some(ev) = self.try_event_with(&mut f)? {
                return Ok(Some(ev));
            }
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(None);
            }
            // Another reader took the event: wait for the next one, for
            // what is left of the timeout.
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
