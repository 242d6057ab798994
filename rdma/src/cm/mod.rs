//! The RDMA connection manager (librdmacm): connection set-up by IP address
//! on InfiniBand, RoCE and iWARP alike, UD address resolution and multicast.
//!
//! - [`EventChannel`]: where the CM reports events; an fd, non-blocking on
//!   request.
//! - [`CmId`]: the CM's socket-like identifier (RAII). It owns the queue pair
//!   it communicates on, created with [`CmId::create_qp`] from the safe verbs
//!   types, so posting and polling are the verbs API's.
//! - [`CmEvent`]: an event, copied out and acknowledged as soon as it is
//!   read. Everything that must outlive the acknowledgement is copied
//!   (private data, connection and UD parameters), and the new id of a
//!   connect request becomes a [`CmId`] the caller owns. Because nothing
//!   holds an unacknowledged event, destroying an id (which waits for its
//!   events to be acknowledged) never deadlocks.
//!
//! With the `tokio` feature, `AsyncCm` routes the events
//! of one channel to many ids and offers `connect(addr).await` and a listener.

mod addr;
mod event;
mod id;
#[cfg(feature = "tokio")]
mod tokio;

#[cfg(feature = "tokio")]
pub use self::tokio::{AsyncCm, AsyncCmId, ConnectRequest, Listener};
pub use event::{CmEvent, CmEventKind, ConnParam, UdParam};
pub use id::{CmId, EventChannel, PortSpace};
