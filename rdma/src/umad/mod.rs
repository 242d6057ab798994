//! Userspace management datagrams (uMAD) over libibumad: discovery of CAs
//! and ports, a [`Port`] (an open `/dev/infiniband/umadN`), [`Agent`]
//! registrations for a management class, sending and receiving MADs with
//! timeouts, and request/response matching by transaction ID. The MADs
//! themselves are built and parsed with [`crate::mad`].
//!
//! On RoCE (rxe) only the GSI (QP1) exists: subnet management classes are
//! refused, every MAD needs a GRH ([`Grh`]), the Q_Key must be set to
//! [`GSI_QKEY`] (also on replies: the kernel reports 0 on receive), and
//! responses are matched to requests only when the GIDs are IPv6 (not
//! IPv4-mapped). The kernel rewrites the upper 32 bits of a request's TID;
//! this module matches responses on the lower 32.
//!
//! It also runs, with no change in the caller, under ibsim's umad2sim (the
//! `LD_PRELOAD` shim of the InfiniBand fabric simulator, which
//! `ci/fabric.sh` runs with OpenSM): its fds are fake (fcntl refuses them,
//! epoll too, so an `AsyncPort` (feature `tokio`) reads such a port from a thread of its
//! own), its read of an empty queue fails without errno (ports read only
//! after poll(2)), and MADs are at most 256 bytes there (no RMPP).
//!
//! ```no_run
//! use rdma::mad::{Mad, MadHeader, Method, Oui, VendorHeader};
//! use rdma::umad::{Address, Port, Registration};
//! use std::time::Duration;
//!
//! let port = Port::open("rxe0", 1)?;
//! let agent = port.register(&Registration::new(0x32, 1).oui(Oui::OPENIB))?;
//! let gid = "fd00:1::1".parse::<std::net::Ipv6Addr>().unwrap().into();
//! let gid_index = rdma::umad::gid_index("rxe0", 1, gid)?.expect("local GID");
//! let mut ping = Mad::new(&MadHeader::request(0x32, 1, Method::GET, agent.next_tid(), 0));
//! ping.set_vendor_header(&VendorHeader::new(Oui::OPENIB))?;
//! let reply = agent.request(&ping, &Address::gsi(gid, gid_index), Duration::from_millis(500), 2)?;
//! println!("{:?}", reply.mad.header());
//! # Ok::<(), rdma::umad::Error>(())
//! ```

use std::io;
use std::time::Duration;

use crate::mad::sa::{SaError, SaStatusCode};

mod addr;
mod agent;
#[cfg(feature = "tokio")]
mod async_port;
mod ca;
mod issm;
mod port;
#[cfg(feature = "tokio")]
pub mod sa;
#[cfg(all(has_umad_get_smi_gsi_pairs, has_umad_get_smi_gsi_pair_by_ca_name))]
mod smi;
mod wire;

pub use addr::{Address, Grh, GSI_QKEY};
pub use agent::{Agent, AgentView, Registration};
#[cfg(feature = "tokio")]
pub use async_port::{AsyncAgent, AsyncPort, AsyncResponder};
pub use ca::{
    ca_device_names, ca_names, ca_port_guids, cas, gid_index, node_type_name, Ca, CaPort,
};
#[allow(deprecated)]
pub use ca::{phys_state_name, port_state_name};
pub use issm::IsSm;
pub use port::{Port, PortView};
#[cfg(feature = "tokio")]
pub use sa::SaClient;
#[cfg(all(has_umad_get_smi_gsi_pairs, has_umad_get_smi_gsi_pair_by_ca_name))]
pub use smi::{smi_gsi_pair, smi_gsi_pairs, SmiGsiPair};
pub use wire::Received;

/// What went wrong with a umad operation: a MAD exchange, and the SA
/// client's requests over one (`umad::sa`, feature `tokio`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A libibumad call or a read/write of the umad device failed.
    #[error("{op} failed: {source}")]
    Io {
        /// The operation (`umad_open_port`, `write`).
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The kernel refused to register an agent for the class.
    #[error(
        "management class {class:#04x} cannot be registered on this port: {reason} ({source})"
    )]
    ClassRefused {
        /// The class.
        class: u8,
        /// Why, in words.
        reason: &'static str,
        /// The errno (EPROTONOSUPPORT for SMI on RoCE, EINVAL for methods
        /// another agent owns).
        #[source]
        source: io::Error,
    },
    /// A registration that makes no sense (an OUI outside vendor range 2,
    /// none inside it).
    #[error("invalid registration: {0}")]
    InvalidRegistration(&'static str),
    /// A request got no response within its timeout and retries.
    #[error("request with TID {tid:#018x} timed out")]
    Timeout {
        /// The TID of the request as the kernel sent it (upper 32 bits
        /// rewritten).
        tid: u64,
    },
    /// A request with the same TID is still outstanding on this agent.
    #[error("a request with TID {tid:#x} is already outstanding on this agent")]
    DuplicateTid {
        /// The TID.
        tid: u64,
    },
    /// The kernel reported that a send failed (a status other than a
    /// timeout).
    #[error("send of TID {tid:#x} failed: {source}")]
    SendFailed {
        /// The TID.
        tid: u64,
        /// The status.
        #[source]
        source: io::Error,
    },
    /// A MAD longer than 256 bytes that cannot go as one RMPP transfer; or
    /// a received RMPP transfer longer than the largest read (64 MiB), which
    /// was dropped (see [`PortView::too_long_mads`]), returned by the
    /// receive that waited for it.
    #[error("a MAD of {len} bytes is too long: {reason}")]
    MadTooLong {
        /// Its length.
        len: usize,
        /// Why, in words.
        reason: &'static str,
    },
    /// A MAD to a RoCE port needs a GRH: MADs are routed by GID there.
    #[error("a MAD on an Ethernet (RoCE) port needs a GRH (GID and GID index)")]
    GrhRequired,
    /// Nothing arrived within the receive timeout.
    #[error("no MAD arrived within {0:?}")]
    RecvTimeout(Duration),
    /// No umad device of that name.
    #[error("no umad device {0:?}")]
    NoDevice(String),
    /// A MAD did not encode or decode.
    #[error("bad MAD: {0}")]
    Mad(#[from] crate::mad::Error),
    /// A verbs query (the GID table) failed.
    #[error(transparent)]
    Verbs(crate::Error),
    /// The SA answered with an error status (no records, a request it
    /// refused, ...), or an SA answer that does not decode.
    #[error(transparent)]
    Sa(#[from] crate::mad::sa::SaError),
    /// The port has no subnet manager (its SM LID is 0): the subnet is not
    /// up, or this is not InfiniBand.
    #[error("port {ca}/{port} knows no subnet manager (SM LID 0)")]
    NoSubnetManager {
        /// The CA.
        ca: String,
        /// The port.
        port: u32,
    },
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(op: &'static str, errno: i32) -> Error {
        Error::Io {
            op,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// The errno of the error, as [`crate::Error::errno`] gives it: the
    /// OS's for a failed call, and for a failure of no call the errno that
    /// names its kind: `ETIMEDOUT` for a request or receive that timed out,
    /// `EINVAL` for a registration or an address this crate refuses,
    /// `EBUSY` for a TID already in flight, `EMSGSIZE` for a MAD too long
    /// to send, `ENODEV` for no such device, `EBADMSG` for a MAD that does
    /// not decode or encode, `EREMOTEIO` for an SA's error status,
    /// `ENETUNREACH` for a port without a subnet manager.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io { source, .. }
            | Error::ClassRefused { source, .. }
            | Error::SendFailed { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Timeout { .. } | Error::RecvTimeout(_) => libc::ETIMEDOUT,
            Error::InvalidRegistration(_) | Error::GrhRequired => libc::EINVAL,
            Error::DuplicateTid { .. } => libc::EBUSY,
            Error::MadTooLong { .. } => libc::EMSGSIZE,
            Error::NoDevice(_) => libc::ENODEV,
            Error::Mad(_) => libc::EBADMSG,
            Error::Verbs(e) => e.errno(),
            Error::Sa(SaError::Status { .. }) => libc::EREMOTEIO,
            Error::Sa(_) => libc::EBADMSG,
            Error::NoSubnetManager { .. } => libc::ENETUNREACH,
        }
    }

    /// The SA status code of an SA's error status, if that is what this is.
    pub fn sa_status(&self) -> Option<SaStatusCode> {
        match self {
            Error::Sa(e) => e.code(),
            _ => None,
        }
    }

    /// Whether the SA answered that no record matched.
    pub fn is_no_records(&self) -> bool {
        self.sa_status() == Some(SaStatusCode::NoRecords)
    }
}
