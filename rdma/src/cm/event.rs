//! CM events, copied out of librdmacm.

use std::fmt;

use rdmacm_sys as cm;

use super::CmId;
use crate::{Error, Gid, Path};

/// The type of a CM event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum CmEventKind {
    AddrResolved,
    AddrError,
    RouteResolved,
    RouteError,
    ConnectRequest,
    ConnectResponse,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    DeviceRemoval,
    MulticastJoin,
    MulticastError,
    AddrChange,
    TimewaitExit,
    /// An address resolution of the id's channel finished
    /// (`CmId::resolve_addrinfo`; rdma-core v65 and newer).
    #[cfg(has_rdma_resolve_addrinfo)]
    AddrInfoResolved,
    /// An address resolution of the id's channel failed (rdma-core v65 and
    /// newer).
    #[cfg(has_rdma_resolve_addrinfo)]
    AddrInfoError,
    /// An event the program wrote (`CmId::write_user_event`; rdma-core v65
    /// and newer), with its value in [`CmEvent::user_arg`].
    #[cfg(has_rdma_write_cm_event)]
    User,
    /// A type this crate does not know.
    Other(u32),
}

impl CmEventKind {
    pub(crate) fn from_raw(e: cm::rdma_cm_event_type) -> CmEventKind {
        use CmEventKind::*;
        match e {
            cm::RDMA_CM_EVENT_ADDR_RESOLVED => AddrResolved,
            cm::RDMA_CM_EVENT_ADDR_ERROR => AddrError,
            cm::RDMA_CM_EVENT_ROUTE_RESOLVED => RouteResolved,
            cm::RDMA_CM_EVENT_ROUTE_ERROR => RouteError,
            cm::RDMA_CM_EVENT_CONNECT_REQUEST => ConnectRequest,
            cm::RDMA_CM_EVENT_CONNECT_RESPONSE => ConnectResponse,
            cm::RDMA_CM_EVENT_CONNECT_ERROR => ConnectError,
            cm::RDMA_CM_EVENT_UNREACHABLE => Unreachable,
            cm::RDMA_CM_EVENT_REJECTED => Rejected,
            cm::RDMA_CM_EVENT_ESTABLISHED => Established,
            cm::RDMA_CM_EVENT_DISCONNECTED => Disconnected,
            cm::RDMA_CM_EVENT_DEVICE_REMOVAL => DeviceRemoval,
            cm::RDMA_CM_EVENT_MULTICAST_JOIN => MulticastJoin,
            cm::RDMA_CM_EVENT_MULTICAST_ERROR => MulticastError,
            cm::RDMA_CM_EVENT_ADDR_CHANGE => AddrChange,
            cm::RDMA_CM_EVENT_TIMEWAIT_EXIT => TimewaitExit,
            #[cfg(has_rdma_resolve_addrinfo)]
            cm::RDMA_CM_EVENT_ADDRINFO_RESOLVED => AddrInfoResolved,
            #[cfg(has_rdma_resolve_addrinfo)]
            cm::RDMA_CM_EVENT_ADDRINFO_ERROR => AddrInfoError,
            #[cfg(has_rdma_write_cm_event)]
            cm::RDMA_CM_EVENT_USER => User,
            other => Other(other),
        }
    }

    /// The `rdma_cm_event_type` value.
    pub fn raw(self) -> cm::rdma_cm_event_type {
        use CmEventKind::*;
        match self {
            AddrResolved => cm::RDMA_CM_EVENT_ADDR_RESOLVED,
            AddrError => cm::RDMA_CM_EVENT_ADDR_ERROR,
            RouteResolved => cm::RDMA_CM_EVENT_ROUTE_RESOLVED,
            RouteError => cm::RDMA_CM_EVENT_ROUTE_ERROR,
            ConnectRequest => cm::RDMA_CM_EVENT_CONNECT_REQUEST,
            ConnectResponse => cm::RDMA_CM_EVENT_CONNECT_RESPONSE,
            ConnectError => cm::RDMA_CM_EVENT_CONNECT_ERROR,
            Unreachable => cm::RDMA_CM_EVENT_UNREACHABLE,
            Rejected => cm::RDMA_CM_EVENT_REJECTED,
            Established => cm::RDMA_CM_EVENT_ESTABLISHED,
            Disconnected => cm::RDMA_CM_EVENT_DISCONNECTED,
            DeviceRemoval => cm::RDMA_CM_EVENT_DEVICE_REMOVAL,
            MulticastJoin => cm::RDMA_CM_EVENT_MULTICAST_JOIN,
            MulticastError => cm::RDMA_CM_EVENT_MULTICAST_ERROR,
            AddrChange => cm::RDMA_CM_EVENT_ADDR_CHANGE,
            TimewaitExit => cm::RDMA_CM_EVENT_TIMEWAIT_EXIT,
            #[cfg(has_rdma_resolve_addrinfo)]
            AddrInfoResolved => cm::RDMA_CM_EVENT_ADDRINFO_RESOLVED,
            #[cfg(has_rdma_resolve_addrinfo)]
            AddrInfoError => cm::RDMA_CM_EVENT_ADDRINFO_ERROR,
            #[cfg(has_rdma_write_cm_event)]
            User => cm::RDMA_CM_EVENT_USER,
            Other(n) => n,
        }
    }

    /// Whether the event reports a failure of the step it answers.
    pub fn is_error(self) -> bool {
        use CmEventKind::*;
        matches!(
            self,
            AddrError
                | RouteError
                | ConnectError
                | Unreachable
                | Rejected
                | MulticastError
                | DeviceRemoval
        ) || self.is_addrinfo_error()
    }

    #[cfg(has_rdma_resolve_addrinfo)]
    fn is_addrinfo_error(self) -> bool {
        self == CmEventKind::AddrInfoError
    }

    #[cfg(not(has_rdma_resolve_addrinfo))]
    fn is_addrinfo_error(self) -> bool {
        false
    }

    /// Whether the event's parameters are neither a connection's nor a
    /// datagram's (address information, the program's own events): their
    /// union holds nothing of either.
    fn has_no_params(self) -> bool {
        #[cfg(has_rdma_resolve_addrinfo)]
        if matches!(
            self,
            CmEventKind::AddrInfoResolved | CmEventKind::AddrInfoError
        ) {
            return true;
        }
        #[cfg(has_rdma_write_cm_event)]
        if self == CmEventKind::User {
            return true;
        }
        false
    }
}

/// librdmacm's name of the event (`rdma_event_str`:
/// `RDMA_CM_EVENT_ESTABLISHED`, ...).
impl fmt::Display for CmEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: takes any value; returns a string constant of the library.
        f.write_str(unsafe { crate::os::static_c_str(cm::rdma_event_str(self.raw())) })
    }
}

/// Connection parameters: what `connect` and `accept` send, and what a
/// connect request or an established connection reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data for the peer (at most 56 bytes on a connect over IB/RoCE,
    /// 196 on accept; iWARP allows more).
    pub private_data: Vec<u8>,
    /// Incoming RDMA READs and atomics this side accepts in flight.
    pub responder_resources: u8,
    /// Outgoing RDMA READs and atomics this side issues in flight.
    pub initiator_depth: u8,
    /// Whether hardware flow control is used.
    pub flow_control: u8,
    /// Transport retries (connect only).
    pub retry_count: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry_count: u8,
    /// The remote QP number (reported by events).
    pub qp_num: u32,
}

impl ConnParam {
    /// Sensible defaults: one RDMA READ each way, 7 retries, infinite RNR retries.
    pub fn new() -> ConnParam {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: 0,
        }
    }

    /// The same, with `data` as private data.
    pub fn with_private_data(mut self, data: &[u8]) -> ConnParam {
        self.private_data = data.to_vec();
        self
    }

    /// The C struct, pointing into `self.private_data`.
    pub(crate) fn raw(&self) -> crate::Result<cm::rdma_conn_param> {
        let len = u8::try_from(self.private_data.len()).map_err(|_| {
            crate::Error::invalid(
                "rdma_connect",
                format!(
                    "{} bytes of private data: at most 255",
                    self.private_data.len()
                ),
            )
        })?;
        // SAFETY: plain data.
        let mut p: cm::rdma_conn_param = unsafe { std::mem::zeroed() };
        p.private_data = if len == 0 {
            std::ptr::null()
        } else {
            self.private_data.as_ptr().cast()
        };
        p.private_data_len = len;
        p.responder_resources = self.responder_resources;
        p.initiator_depth = self.initiator_depth;
        p.flow_control = self.flow_control;
        p.retry_count = self.retry_count;
        p.rnr_retry_count = self.rnr_retry_count;
        p.qp_num = self.qp_num;
        Ok(p)
    }
}

/// UD parameters of an event: where datagrams to the peer (or group) go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdParam {
    /// The remote QP number (0xFFFFFF for a multicast group).
    pub qp_num: u32,
    /// The QKey to send with.
    pub qkey: u32,
    /// The path, for an [`AddressHandle`](crate::AddressHandle).
    pub path: Path,
    /// Private data of the peer.
    pub private_data: Vec<u8>,
}

/// A CM event, copied out of librdmacm and already acknowledged.
pub struct CmEvent {
    /// What happened.
    pub kind: CmEventKind,
    /// The status: 0, or a negative errno / a reject reason for errors.
    pub status: i32,
    pub(crate) id: *mut cm::rdma_cm_id,
    pub(crate) listen_id: *mut cm::rdma_cm_id,
    /// Connection parameters (connect request, established, reject...).
    pub conn: Option<ConnParam>,
    /// UD parameters (UD connect request and response, multicast join).
    pub ud: Option<UdParam>,
    /// The new id of a connect request, owned by whoever takes it.
    pub(crate) new_id: Option<CmId>,
    /// The value of a [`User`](CmEventKind::User) event.
    #[cfg(has_rdma_write_cm_event)]
    user_arg: Option<u64>,
}

// SAFETY: the raw id pointers are only compared (never dereferenced) after
// the event is built; the new CmId is Send.
unsafe impl Send for CmEvent {}

impl CmEvent {
    /// Private data the peer sent with this event.
    pub fn private_data(&self) -> &[u8] {
        match (&self.conn, &self.ud) {
            (Some(c), _) => &c.private_data,
            (_, Some(u)) => &u.private_data,
            _ => &[],
        }
    }

    /// The value a [`User`](CmEventKind::User) event was written with
    /// (`CmId::write_user_event`); `None` for every other event.
    #[cfg(has_rdma_write_cm_event)]
    pub fn user_arg(&self) -> Option<u64> {
        self.user_arg
    }

    /// The new id of a connect request (the first call takes it).
    pub fn take_new_id(&mut self) -> Option<CmId> {
        self.new_id.take()
    }

    /// Whether the event is about `id` (for a connect request: its listener).
    pub fn is_for(&self, id: &CmId) -> bool {
        let me = id.as_raw();
        self.id == me || (self.kind == CmEventKind::ConnectRequest && self.listen_id == me)
    }

    /// The raw id the event names (for routing); only compare it.
    pub fn raw_id(&self) -> *mut cm::rdma_cm_id {
        self.id
    }

    /// The raw listening id of a connect request; only compare it.
    pub fn raw_listen_id(&self) -> *mut cm::rdma_cm_id {
        self.listen_id
    }

    /// Copies a raw event. The caller acknowledges it afterwards.
    ///
    /// # Safety
    /// `ev` must be a live event from `rdma_get_cm_event`.
    pub(crate) unsafe fn copy(ev: *const cm::rdma_cm_event) -> CmEvent {
        // SAFETY: the caller guarantees a live event.
        let ev = unsafe { &*ev };
        let kind = CmEventKind::from_raw(ev.event);
        let port_space_udp = {
            // SAFETY: a live event names a live id, whose `ps` is set when
            // it is created and never written after.
            let ps = unsafe { (*ev.id).ps };
            ps == cm::RDMA_PS_UDP || ps == cm::RDMA_PS_IPOIB
        };
        let (mut conn, mut ud) = (None, None);
        if kind.has_no_params() {
            // Nothing to copy: the union holds a value of the program's or
            // nothing.
        } else if port_space_udp || kind == CmEventKind::MulticastJoin {
            // SAFETY: UD ids report UD parameters in the union.
            let u = unsafe { ev.param.ud.as_ref() };
            // SAFETY: private data is valid until the event is acked.
            let data = unsafe { copy_data(u.private_data, u.private_data_len) };
            let g = u.ah_attr.grh;
            ud = Some(UdParam {
                qp_num: u.qp_num,
                qkey: u.qkey,
                path: Path {
                    dgid: (u.ah_attr.is_global != 0).then(|| Gid::from(g.dgid)),
                    sgid_index: g.sgid_index,
                    hop_limit: g.hop_limit,
                    traffic_class: g.traffic_class,
                    flow_label: g.flow_label,
                    dlid: u.ah_attr.dlid,
                    sl: u.ah_attr.sl,
                    port: u.ah_attr.port_num,
                },
                private_data: data,
            });
        } else {
            // SAFETY: connected ids report connection parameters.
            let c = unsafe { ev.param.conn.as_ref() };
            // SAFETY: private data is valid until the event is acked.
            let data = unsafe { copy_data(c.private_data, c.private_data_len) };
            conn = Some(ConnParam {
                private_data: data,
                responder_resources: c.responder_resources,
                initiator_depth: c.initiator_depth,
                flow_control: c.flow_control,
                retry_count: c.retry_count,
                rnr_retry_count: c.rnr_retry_count,
                qp_num: c.qp_num,
            });
        }
        CmEvent {
            kind,
            status: ev.status,
            id: ev.id,
            listen_id: ev.listen_id,
            conn,
            ud,
            new_id: None,
            #[cfg(has_rdma_write_cm_event)]
            // SAFETY: a User event's union holds the value it was written
            // with (librdmacm copies it there).
            user_arg: (kind == CmEventKind::User).then(|| unsafe { *ev.param.arg.as_ref() }),
        }
    }
}

/// # Safety
/// `p` must be NULL or point to `len` readable bytes.
unsafe fn copy_data(p: *const std::ffi::c_void, len: u8) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: per the caller.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)) }.to_vec()
}

impl fmt::Debug for CmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmEvent")
            .field("kind", &self.kind)
            .field("status", &self.status)
            .field("private_data_len", &self.private_data().len())
            .finish()
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

#[cfg(test)]
mod tests {

    /// CM event types over librdmacm's range and past it: each keeps its
    /// value and prints librdmacm's own name of it.
    #[test]
    #[cfg_attr(miri, ignore = "calls librdmacm")]
    fn event_kinds_keep_their_value_and_print_librdmacm_names() {
        for v in 0..24 {
            let k = CmEventKind::from_raw(v);
            assert_eq!(k.raw(), v, "{k:?}");
            // SAFETY: takes any value; returns a string constant.
            let c = unsafe { crate::os::static_c_str(cm::rdma_event_str(v)) };
            assert_eq!(k.to_string(), c, "{k:?}");
        }
        assert_eq!(
            CmEventKind::Established.to_string(),
            "RDMA_CM_EVENT_ESTABLISHED"
        );
        assert_eq!(CmEventKind::Other(99).to_string(), "UNKNOWN EVENT");
    }

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
