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
//! - [`Endpoint`] and [`AddrInfo`]: the blocking face C programs know from
//!   rdma-core's `rdma_server.c` and `rdma_client.c` (`rdma_getaddrinfo`,
//!   `rdma_create_ep`, `rdma_get_request`, the `rdma_verbs.h` helpers), a
//!   [`CmId`] on a channel of its own with its PD, CQs and QP, every wait
//!   bounded by a timeout.
//!
//! With the `tokio` feature, `AsyncCm` routes the events of one channel to
//! many ids, each with its own queue, and offers `connect(addr).await` (and
//! `connect_from` with a source address) and a `Listener` whose connect
//! requests are a `futures_core::Stream` (or `accept().await`). An id's
//! `poll_event` lets one task wait on many ids without a task per id.
//! Dropping any of these futures part-way leaks nothing: the id goes with
//! it and the channel stays usable.
//!
//! # A connection, step by step
//! The active side resolves the address (`AddrResolved`: the id now has a
//! device, [`CmId::context`]) and the route (`RouteResolved`), creates its
//! QP on the id ([`CmId::create_qp`], which leaves an RC QP in INIT), posts
//! its first receives, and connects. The passive side binds and listens,
//! and each `ConnectRequest` brings a new id, already on the device the
//! request came in on: it creates its QP there, posts receives and
//! accepts. **The CM takes both QPs to RTR and RTS** (from the parameters
//! of the exchange: the path, the PSNs, the peer's QP number); both sides
//! may send once they see `Established`. Private data (up to 56 bytes on
//! an RC connect, 196 on an accept, over the IB CM; more on iWARP) rides
//! along: an accept's private data is the usual place for a
//! [`RemoteMemory`](crate::RemoteMemory)'s wire form.
//!
//! The blocking form of both sides is the crate docs' `hello_rc` program
//! (and `hello_ud` for UD). The same with tokio, each side in a task:
//!
//! ```no_run
//! # #[cfg(feature = "tokio")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use rdma::cm::{AsyncCm, CmId, ConnParam};
//! use rdma::{AccessFlags, AsyncCompletionQueue, MemoryRegion, ProtectionDomain};
//! use rdma::{QpCaps, QpType, RecvWr, SendWr, WorkCompletion};
//! use std::time::Duration;
//!
//! const T: Duration = Duration::from_secs(5);
//! type Side = (ProtectionDomain, AsyncCompletionQueue, MemoryRegion);
//! /// What one side needs: a PD, a CQ to await, a region and the id's RC QP.
//! fn setup(id: &mut CmId) -> rdma::Result<Side> {
//!     let ctx = id.context()?;
//!     let pd = ProtectionDomain::new(&ctx)?;
//!     let cq = AsyncCompletionQueue::create(&ctx, 8)?;
//!     let mr = MemoryRegion::new(&pd, 64, AccessFlags::LOCAL_WRITE)?;
//!     id.create_qp(&pd, QpType::Rc, cq.cq(), cq.cq(), QpCaps::default())?;
//!     Ok((pd, cq, mr))
//! }
//! /// The next completion, which must have succeeded.
//! async fn next(cq: &AsyncCompletionQueue) -> rdma::Result<WorkCompletion> {
//!     let mut wc = [WorkCompletion::ZERO; 1];
//!     cq.wait(&mut wc).await?[0].result()
//! }
//!
//! let cm = AsyncCm::new()?;
//! let addr = "192.0.2.1:7471".parse()?;
//! let mut listener = cm.listen(addr, 8)?;
//! let server = tokio::spawn(async move {
//!     let mut req = listener.accept().await?;
//!     let (_pd, cq, mr) = setup(req.id_mut())?;
//!     let qp = req.id().qp().ok_or("no QP")?;
//!     qp.post_recv(&mut [RecvWr::new(1, &[mr.sge(..)?])])?; // before the accept
//!     let (mut id, _) = req.accept(&ConnParam::new(), T).await?;
//!     let wc = next(&cq).await?;
//!     println!("{:?}", mr.to_vec(..wc.byte_len() as usize)?);
//!     id.disconnect(T).await?; // returns at once when the client left first
//!     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//! });
//!
//! let (mut id, _established, (_pd, cq, mr)) =
//!     cm.connect(addr, T, &ConnParam::new(), setup).await?;
//! mr.write(0, b"hello")?;
//! let sge = [mr.sge(0..5)?];
//! id.id().qp().ok_or("no QP")?.post_send(&mut [SendWr::send(2, &sge).signaled()])?;
//! next(&cq).await?;
//! id.disconnect(T).await?;
//! server.await??;
//! # Ok(()) }
//! ```
//!
//! For a byte stream with tokio's traits, without any of the above, see
//! [`stream`](crate::stream).

mod addr;
#[cfg(all(
    has_rdma_resolve_addrinfo,
    has_rdma_query_addrinfo,
    has_rdma_write_cm_event
))]
mod addrinfo;
#[cfg(feature = "tokio")]
mod async_cm;
mod channel;
mod devices;
mod ep;
mod event;
mod ib_path;
mod id;

#[cfg(feature = "tokio")]
pub use self::async_cm::{AsyncCm, AsyncCmId, ConnectRequest, Listener};
pub use channel::EventChannel;
pub use devices::CmDevices;
pub use ep::{AddrEntry, AddrHints, AddrInfo, Endpoint, EpAttr, Request};
pub use event::{CmEvent, CmEventKind, ConnParam, UdParam};
pub use ib_path::{IbPath, IbPathFlags};
pub use id::{CmId, PortSpace};
