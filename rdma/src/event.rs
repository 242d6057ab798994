//! Asynchronous events of a device: port changes, QP and CQ errors.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use crate::sys;
use crate::{Context, Error, Result};

/// What an asynchronous event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEventKind {
    /// A CQ overran or failed: its completions can no longer be trusted.
    CqError,
    /// A QP hit a fatal error and moved to the error state.
    QpFatal,
    /// A QP's peer sent an invalid request.
    QpRequestError,
    /// A QP's peer violated access rights.
    QpAccessError,
    /// The first packet arrived on a QP in RTR.
    CommunicationEstablished,
    /// A QP's send queue drained (SQD).
    SqDrained,
    /// A path migration completed.
    PathMigrated,
    /// A path migration failed.
    PathMigrationError,
    /// The device failed.
    DeviceFatal,
    /// A port became active.
    PortActive,
    /// A port went down.
    PortError,
    /// A port's LID changed.
    LidChange,
    /// A port's P_Key table changed.
    PkeyChange,
    /// The subnet manager changed.
    SmChange,
    /// An SRQ failed.
    SrqError,
    /// The receives posted to an SRQ fell below the limit armed with
    /// [`SharedReceiveQueue::set_limit`](crate::SharedReceiveQueue::set_limit),
    /// which disarms it; the element is [`AsyncEventElement::Srq`] of the
    /// SRQ's [`as_raw`](crate::SharedReceiveQueue::as_raw).
    SrqLimitReached,
    /// The last WQE of a QP attached to an SRQ was consumed.
    QpLastWqeReached,
    /// The SM asks clients to re-register.
    ClientReregister,
    /// A port's GID table changed.
    GidChange,
    /// A WQ failed.
    WqFatal,
    /// An event this crate does not know.
    Other(u32),
}

impl AsyncEventKind {
    fn from_raw(t: sys::ibv_event_type) -> AsyncEventKind {
        use AsyncEventKind::*;
        match t {
            sys::IBV_EVENT_CQ_ERR => CqError,
            sys::IBV_EVENT_QP_FATAL => QpFatal,
            sys::IBV_EVENT_QP_REQ_ERR => QpRequestError,
            sys::IBV_EVENT_QP_ACCESS_ERR => QpAccessError,
            sys::IBV_EVENT_COMM_EST => CommunicationEstablished,
            sys::IBV_EVENT_SQ_DRAINED => SqDrained,
            sys::IBV_EVENT_PATH_MIG => PathMigrated,
            sys::IBV_EVENT_PATH_MIG_ERR => PathMigrationError,
            sys::IBV_EVENT_DEVICE_FATAL => DeviceFatal,
            sys::IBV_EVENT_PORT_ACTIVE => PortActive,
            sys::IBV_EVENT_PORT_ERR => PortError,
            sys::IBV_EVENT_LID_CHANGE => LidChange,
            sys::IBV_EVENT_PKEY_CHANGE => PkeyChange,
            sys::IBV_EVENT_SM_CHANGE => SmChange,
            sys::IBV_EVENT_SRQ_ERR => SrqError,
            sys::IBV_EVENT_SRQ_LIMIT_REACHED => SrqLimitReached,
            sys::IBV_EVENT_QP_LAST_WQE_REACHED => QpLastWqeReached,
            sys::IBV_EVENT_CLIENT_REREGISTER => ClientReregister,
            sys::IBV_EVENT_GID_CHANGE => GidChange,
            sys::IBV_EVENT_WQ_FATAL => WqFatal,
            other => Other(other),
        }
    }

    /// The `ibv_event_type` value.
    pub fn raw(self) -> sys::ibv_event_type {
        use AsyncEventKind::*;
        match self {
            CqError => sys::IBV_EVENT_CQ_ERR,
            QpFatal => sys::IBV_EVENT_QP_FATAL,
            QpRequestError => sys::IBV_EVENT_QP_REQ_ERR,
            QpAccessError => sys::IBV_EVENT_QP_ACCESS_ERR,
            CommunicationEstablished => sys::IBV_EVENT_COMM_EST,
            SqDrained => sys::IBV_EVENT_SQ_DRAINED,
            PathMigrated => sys::IBV_EVENT_PATH_MIG,
            PathMigrationError => sys::IBV_EVENT_PATH_MIG_ERR,
            DeviceFatal => sys::IBV_EVENT_DEVICE_FATAL,
            PortActive => sys::IBV_EVENT_PORT_ACTIVE,
            PortError => sys::IBV_EVENT_PORT_ERR,
            LidChange => sys::IBV_EVENT_LID_CHANGE,
            PkeyChange => sys::IBV_EVENT_PKEY_CHANGE,
            SmChange => sys::IBV_EVENT_SM_CHANGE,
            SrqError => sys::IBV_EVENT_SRQ_ERR,
            SrqLimitReached => sys::IBV_EVENT_SRQ_LIMIT_REACHED,
            QpLastWqeReached => sys::IBV_EVENT_QP_LAST_WQE_REACHED,
            ClientReregister => sys::IBV_EVENT_CLIENT_REREGISTER,
            GidChange => sys::IBV_EVENT_GID_CHANGE,
            WqFatal => sys::IBV_EVENT_WQ_FATAL,
            Other(n) => n,
        }
    }
}

/// libibverbs' name of the event (`ibv_event_type_str`: `port active`,
/// `local work queue catastrophic error`, ...).
impl fmt::Display for AsyncEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: takes any value; returns a string constant of the library.
        f.write_str(unsafe { crate::os::static_c_str(sys::ibv_event_type_str(self.raw())) })
    }
}

/// The object an asynchronous event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEventElement {
    /// A completion queue (its raw pointer, comparable with `as_raw`).
    Cq(*mut sys::ibv_cq),
    /// A queue pair, by number.
    Qp(u32),
    /// A shared receive queue (its raw pointer).
    Srq(*mut sys::ibv_srq),
    /// A work queue (its raw pointer).
    Wq(*mut sys::ibv_wq),
    /// A port, by number.
    Port(u8),
    /// The whole device.
    Device,
}

/// An asynchronous event, acknowledged when dropped.
///
/// Destroying the object an event names waits until the event is
/// acknowledged, so drop events promptly.
pub struct AsyncEvent {
    raw: sys::ibv_async_event,
    /// The event's element, read while the event pins the object.
    element: AsyncEventElement,
}

// SAFETY: besides plain data, the event holds the pointer to the object it
// names, which ibv_destroy_* waits to free until the event is acked; the ack only
// takes that object's pthread mutex, which any thread may do.
unsafe impl Send for AsyncEvent {}

impl AsyncEvent {
    /// What happened.
    pub fn kind(&self) -> AsyncEventKind {
        AsyncEventKind::from_raw(self.raw.event_type)
    }

    /// What it happened to.
    pub fn element(&self) -> AsyncEventElement {
        self.element
    }

    fn element_of(raw: &sys::ibv_async_event) -> AsyncEventElement {
        use AsyncEventKind::*;
        // SAFETY: the union member read matches the event type, as verbs.h
        // documents; the object it points to lives until the event is acked.
        unsafe {
            match AsyncEventKind::from_raw(raw.event_type) {
                CqError => AsyncEventElement::Cq(raw.element.cq),
                QpFatal
                | QpRequestError
                | QpAccessError
                | CommunicationEstablished
                | SqDrained
                | PathMigrated
                | PathMigrationError
                | QpLastWqeReached => AsyncEventElement::Qp(if raw.element.qp.is_null() {
                    0
                } else {
                    (*raw.element.qp).qp_num
                }),
                SrqError | SrqLimitReached => AsyncEventElement::Srq(raw.element.srq),
                WqFatal => AsyncEventElement::Wq(raw.element.wq),
                PortActive | PortError | LidChange | PkeyChange | SmChange | ClientReregister
                | GidChange => AsyncEventElement::Port(raw.element.port_num as u8),
                DeviceFatal | Other(_) => AsyncEventElement::Device,
            }
        }
    }
}

impl Drop for AsyncEvent {
    fn drop(&mut self) {
        // SAFETY: acknowledges an event returned by ibv_get_async_event, once.
        unsafe { sys::ibv_ack_async_event(&mut self.raw) };
    }
}

impl fmt::Debug for AsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEvent")
            .field("kind", &self.kind())
            .field("element", &self.element)
            .finish()
    }
}

impl Context {
    /// The next asynchronous event: blocks, or returns `Ok(None)` when
    /// [`set_async_nonblocking`](Self::set_async_nonblocking) is set and none
    /// is pending.
    pub fn get_async_event(&self) -> Result<Option<AsyncEvent>> {
        // SAFETY: plain data.
        let mut raw: sys::ibv_async_event = unsafe { std::mem::zeroed() };
        // SAFETY: an open context; `raw` is writable.
        let rc = unsafe { sys::ibv_get_async_event(self.as_raw(), &mut raw) };
        if rc != 0 {
            let e = Error::last("ibv_get_async_event");
            return if e.errno() == libc::EAGAIN {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let element = AsyncEvent::element_of(&raw);
        Ok(Some(AsyncEvent { raw, element }))
    }

    /// Makes [`get_async_event`](Self::get_async_event) non-blocking.
    pub fn set_async_nonblocking(&self, nonblocking: bool) -> Result<()> {
        crate::os::set_nonblocking(self.async_fd(), nonblocking)
    }

    fn async_fd(&self) -> RawFd {
        // SAFETY: an open context; async_fd is set at open.
        unsafe { (*self.as_raw()).async_fd }
    }

    /// The file descriptor that becomes readable when an asynchronous event
    /// is pending.
    pub fn async_event_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open while the context lives.
        unsafe { BorrowedFd::borrow_raw(self.async_fd()) }
    }
}

/// The asynchronous-event file descriptor of a context, as an owned handle
/// that keeps the context open.
#[derive(Debug, Clone)]
pub struct AsyncEventFd(pub(crate) Context);

impl AsRawFd for AsyncEventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.async_fd()
    }
}

impl AsFd for AsyncEventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.async_event_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event type of libibverbs' range and past it: the kind keeps
    /// its value, and prints libibverbs' own name of it.
    #[test]
    #[cfg_attr(miri, ignore = "calls libibverbs")]
    fn event_kinds_keep_their_value_and_print_libibverbs_names() {
        for v in 0..40 {
            let k = AsyncEventKind::from_raw(v);
            assert_eq!(k.raw(), v, "{k:?}");
            // SAFETY: takes any value; returns a string constant.
            let c = unsafe { crate::os::static_c_str(sys::ibv_event_type_str(v)) };
            assert_eq!(k.to_string(), c, "{k:?}");
        }
        assert_eq!(AsyncEventKind::PortActive.to_string(), "port active");
        assert_eq!(AsyncEventKind::Other(1000).to_string(), "unknown");
    }
}
