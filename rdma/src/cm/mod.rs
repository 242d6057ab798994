//! The RDMA connection manager (librdmacm): connection set-up by IP address
//! on InfiniBand, RoCE and iWARP alike, UD address resolution and multicast.
//!
//! - [`EventChannel`]: where the CM reports events; an fd (always
//!   non-blocking; `get_event` waits unless told not to). librdmacm
//!   processes an event, touching its id and the id's QP, inside the read:
//!   the channel's lock, held by every read until the acknowledgement and
//!   by every call on its ids, keeps that from overlapping anything else
//!   done to the id (QP teardown included).
//! - [`CmId`]: the CM's socket-like identifier (RAII). It owns the queue pair
//!   it communicates on, created with [`CmId::create_qp`] from the safe verbs
//!   types, so posting and polling are the verbs API's. Its
//!   [`context`](CmId::context) (librdmacm's) stays open as long as anything
//!   made from it lives, the id gone or not.
//! - [`CmEvent`]: an event, copied out and acknowledged as soon as it is
//!   read. Everything that must outlive the acknowledgement is copied
//!   (private data, connection and UD parameters), and the new id of a
//!   connect request becomes a [`CmId`] the caller owns. Because nothing
//!   holds an unacknowledged event, destroying an id (which waits for its
//!   events to be acknowledged) never deadlocks; in the callback of
//!   [`EventChannel::get_event_with`] (and when it panics) too.
//!
//! With the `tokio` feature, `AsyncCm` routes the events of one channel to
//! many ids, each with its own queue, and offers `connect(addr).await` (and
//! `connect_from` with a source address) and a `Listener` whose connect
//! requests are a `futures_core::Stream` (or `accept().await`). An id's
//! `poll_event` lets one task wait on many ids without a task per id.
//! Dropping any of these futures part-way leaks nothing: the id goes with
//! it and the channel stays usable.

mod addr;
#[cfg(feature = "tokio")]
mod async_cm;
mod event;
mod id;

#[cfg(feature = "tokio")]
pub use self::async_cm::{AsyncCm, AsyncCmId, ConnectRequest, Listener};
pub use event::{CmEvent, CmEventKind, ConnParam, UdParam};
pub use id::{CmId, EventChannel, PortSpace};
