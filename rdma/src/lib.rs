//! Safe RDMA for Rust over rdma-core.
//!
//! RAII types for the verbs of libibverbs; the raw bindings are
//! [`ibverbs_sys`] (re-exported as [`sys`]). Every object exposes its raw
//! pointer (`as_raw`) for what the crate does not cover.
//! The module `stream` (feature `tokio`) carries byte streams over RC
//! connections; the connection manager is [`cm`].
//!
//! ```no_run
//! for dev in rdma::DeviceList::new()?.iter() {
//!     let ctx = dev.open()?;
//!     let attr = ctx.query_device()?;
//!     println!("{}: {} port(s)", dev.name(), attr.phys_port_cnt());
//!     for port in 1..=attr.phys_port_cnt() {
//!         println!("  port {port}: {:?}", ctx.query_port(port)?.state());
//!     }
//! }
//! # Ok::<(), rdma::Error>(())
//! ```
//!
//! # Three programs to start from
//! Each is a whole program, in the crate's `examples/` (`cargo run -p rdma
//! --example NAME -- server ADDR:PORT`, then `-- client ADDR:PORT` with the
//! server's RDMA address; the CI runs all three on rxe and the first two on
//! siw).
//!
//! A blocking RC connection through the connection manager, with the
//! peer's buffer advertised as a [`RemoteMemory`] and written with RDMA
//! WRITE (`hello_rc`):
//! ```no_run
#![doc = include_str!("../examples/hello_rc.rs")]
//! ```
//! A tokio echo server over [`stream`] (feature `tokio`), and concurrent
//! clients (`echo`):
#![cfg_attr(feature = "tokio", doc = "```no_run")]
#![cfg_attr(not(feature = "tokio"), doc = "```ignore")]
#![doc = include_str!("../examples/echo.rs")]
//! ```
//! A UD datagram through the connection manager, which resolves the
//! server's QP number and QKey (`hello_ud`; RoCE and InfiniBand):
//! ```no_run
#![doc = include_str!("../examples/hello_ud.rs")]
//! ```
//!
//! # Ownership
//! A child keeps its parent alive: a [`MemoryRegion`] holds its
//! [`ProtectionDomain`], which holds its [`Context`]; a [`QueuePair`] holds
//! its PD, CQs and SRQ. Objects can be dropped in any order. Drop releases the
//! kernel object and never panics.
//!
//! # Posted buffers
//! Registered memory is shared with the device, so safe code never holds a
//! reference into it, and a region is deregistered before its memory is
//! freed: see [`mr`] for the whole model.
//!
//! # Threads and memory
//! The verbs objects are `Send` and `Sync`. Each `unsafe impl` rests on
//! libibverbs and its providers locking where two threads can meet; for the
//! data path that is the provider's own code (rdma-core's `providers/rxe`,
//! `providers/siw` and `providers/mlx5` are the ones checked):
//!
//! | type | at once from several threads | what makes it sound |
//! |---|---|---|
//! | [`DeviceList`] | reading it, `open` | an array no call changes |
//! | [`Context`] | queries, creating objects, async events | commands on the uverbs file; libibverbs' context mutex for its lists |
//! | [`ProtectionDomain`], [`AddressHandle`] | creating objects in it, use in work requests | neither changes after creation |
//! | [`MemoryRegion`] | `read`, `write`, `fill`, `to_vec`, `sge`, `remote` | copies are relaxed atomics (below); `ibv_mr` is written only by `ibv_reg_mr`; the views take `&mut` |
//! | [`CompletionQueue`] | `poll`, `wait`, `wait_one`, `req_notify`, `get_event` | `ibv_poll_cq` takes the CQ's lock (`cq->lock` in rxe, siw and mlx5); arming is a command (rxe), an atomic store (siw), a doorbell (mlx5); `ibv_ack_cq_events` takes the CQ's mutex |
//! | [`CompletionChannel`] | waiting, reading events | a file descriptor |
//! | [`QueuePair`] | `post_send`, `post_recv`, `modify`, `state` | `post_send` takes the SQ's lock, `post_recv` the RQ's (rxe `sq.lock`/`rq.lock`, siw `sq_lock`/`rq_lock`, mlx5 `sq.lock`/`rq.lock`); modify is a command (siw also takes both locks) |
//! | [`SharedReceiveQueue`] | `post_recv` | the SRQ's lock (rxe `srq->rq.lock`, siw and mlx5 `srq->lock`) |
//! | [`MemoryWindow`] | `rkey`, binds posted as work requests | a posted bind takes the SQ's lock; [`MemoryWindow::bind`] takes `&mut` |
//! | [`cm::CmId`] | every method | the crate holds the event channel's lock around each librdmacm call on the id and each read of its fields |
//! | [`AsyncEvent`], [`cm::CmEvent`] (`Send` only) | acknowledged on another thread | `ibv_ack_async_event`, `rdma_ack_cm_event` take the library's locks |
//!
//! An extended poll ([`ExPoll`]) and a batch of extended work requests
//! ([`WrBatch`]) hold the provider's CQ or SQ spinlock from start to end
//! (`start_poll`..`end_poll`, `wr_start`..`wr_complete` in each provider),
//! so they are neither `Send` nor `Sync`: the thread that took the lock
//! releases it. Two settings void the table: mlx5 with
//! `MLX5_SINGLE_THREADED=1` drops its locks, and objects made through
//! `as_raw` with a thread domain (`ibv_alloc_td`) have none.
//!
//! Memory the device or a peer may write is reached by safe code only
//! through copies made of relaxed atomic loads and stores ([`mr`]), as
//! vm-memory treats guest memory: never through a reference. Copies from
//! several threads do not race, and a device write that meets a copy counts
//! as another thread's atomic store: each byte (each aligned 8-byte word)
//! reads as its old or its new value.
//!
//! The posted-buffer model (a region is deregistered before its memory is
//! freed) assumes that `ibv_dereg_mr` fences the device. rxe removes the key
//! and waits until no packet holds the region; mlx5 destroys the key in
//! firmware; siw invalidates the key, so every later placement fails, but
//! does not wait for one already past its check: a frame being placed into
//! a region at the moment it is dropped (a receive, or a peer's RDMA WRITE)
//! may still land in its freed pages. Drop a region only when no work
//! request on it is outstanding and no peer still holds its rkey. If
//! deregistration fails (a memory window still bound), the memory is leaked
//! rather than freed.
//!
//! Fork: a child inherits the verbs file descriptors but must not use the
//! parent's objects (in Rust `fork` is `unsafe`; a child should exec or
//! `_exit`). Kernels that copy DMA-pinned pages at fork (Linux 5.13 and
//! later report it: `ibv_is_fork_initialized` returns `IBV_FORK_UNNEEDED`)
//! give the child a copy and leave the parent the pages the device uses. On
//! older kernels those pages become copy-on-write, and the parent's next
//! write moves it off the page the device accesses, unless `ibv_fork_init`
//! (or `RDMAV_FORK_SAFE`) makes registration mark them `MADV_DONTFORK`: then
//! the child has no mapping there at all. That is why a region's own memory
//! is whole pages: no heap object shares a page with it and vanishes from
//! the child.

//!
//! # Bad input
//! Bad input gets a typed [`Error`] (the verb, the errno, the likely cause)
//! and changes nothing. Each row is a device test (`tests/tests/device/`,
//! `bad_input::*`, `verbs::*`, `verbs_more::*`, `cm::*`, `faults::*`; MAD
//! cases in `mad`'s unit tests and the fuzzer):
//!
//! | input | error |
//! |---|---|
//! | unknown device name | `ibv_open_device`, `ENODEV`, lists the devices there are |
//! | port 0, or past the last port | `ibv_query_port`, `EINVAL`, "past the device's last port" |
//! | GID index past the table | `ibv_query_gid`, `EINVAL`/`ENODATA`, "no GID at that index" |
//! | zero-length memory region | `ibv_reg_mr`, `EINVAL`, "a memory region cannot be empty" |
//! | huge memory region (memlock) | `ibv_reg_mr`, `ENOMEM`, "raise it with `ulimit -l`" |
//! | SGE or copy outside its region | `MemoryRegion::sge`/`write`/`read`, `EINVAL`, the range and the size |
//! | too many SGEs | `ibv_post_recv`/`ibv_post_send`, `EINVAL`, which request was not posted |
//! | inline data over the limit | `ibv_post_send`, `EINVAL`/`ENOMEM` |
//! | post on a QP in RESET | `ibv_post_send`, `EINVAL`, "its state" |
//! | illegal transition (RESET -> RTS, INIT -> RTS) | `ibv_modify_qp`, `EINVAL`, "transition Reset -> Rts refused" (the state the kernel reports: siw, which has no RESET, reports a new QP as Init from kernel 6.12 on) |
//! | RTR without the remote side | `ibv_modify_qp`, `EINVAL` |
//! | QP deeper than the device allows | `ibv_create_qp`, `EINVAL`, "exceed the device's limits" |
//! | UD send without an address handle | `ibv_post_send`, `EINVAL`, "no address handle" |
//! | UD QP: any request but a SEND or SEND with immediate (WRITE, READ, atomic, local invalidate, bind) | `ibv_post_send`, `EINVAL`, "a UD QP posts only SEND", which request; nothing posted (`sound_post::*`) |
//! | UD send through an address handle of another context | `ibv_post_send`, `EINVAL`, "belongs to a different context" |
//! | QP on a PD with a CQ or SRQ of another context (another device, or another open of it) | `ibv_create_qp`, `EINVAL`, "belong to different contexts" |
//! | memory window bound through a QP, or over a region, of another context | `ibv_bind_mw` / `SendWr::bind_mw`, `EINVAL`, "belong to different contexts" |
//! | batch operation the QP was not created with (`send_ops`) | `ibv_wr_*`, `EOPNOTSUPP` from `WrBatch::complete`, which request; nothing posted |
//! | UD batch send without its address, `send_ud` on a connected QP, or an AH of another context | `ibv_wr_send` / `ibv_wr_set_ud_addr`, `EINVAL` from `WrBatch::complete` |
//! | a second batch, a post or a bind while a batch is open | does not compile: `wr_batch` borrows the QP mutably |
//! | more receives than an SRQ holds | `ibv_post_srq_recv`, the provider's errno, which request was not posted |
//! | empty list to `prepare_send`, or a request index past a prepared list | `ibv_post_send`, `EINVAL` |
//! | `poll`, `req_notify` or `start_poll` on a CQ while an [`ExPoll`] of it lives (any clone, any thread) | `ibv_poll_cq`/`ibv_req_notify_cq`/`ibv_start_poll`, `EBUSY`, "an extended poll of this CQ is in progress" (`sound_cq::*`) |
//! | memory window where the provider has none (siw) | `ibv_alloc_mw`, `EOPNOTSUPP` |
//! | CQ of fewer than 1 or more than the device's `max_cqe` entries, created or resized | `ibv_create_cq` / `ibv_resize_cq`, `EINVAL`, "exceed the device's max_cqe" (before the provider) |
//! | completion vector outside `0..num_comp_vectors` | `ibv_create_cq`, `EINVAL`, "completion vector" (before the provider) |
//! | CQ resize where the provider has none (siw) | `ibv_resize_cq`, `EOPNOTSUPP` |
//! | CQ resize below the completions it holds (rxe) | `ibv_resize_cq`, `EINVAL`; the queue is unchanged |
//! | CQ resize while an [`ExPoll`] of it lives | `ibv_resize_cq`, `EBUSY`, "an extended poll of this CQ is in progress" |
//! | SRQ limit above the SRQ's size | `ibv_modify_srq`, `EINVAL`, "above the SRQ's" (before the provider) |
//! | SRQ resized to 0, or where the provider cannot resize (siw) | `ibv_modify_srq`, `EINVAL` "at least 1" / `EOPNOTSUPP` |
//! | P_Key index at or past the port's `pkey_tbl_len` | `ibv_query_pkey`, `EINVAL`, "past the port's P_Key table" (before sysfs is read) |
//! | P_Key index of a P_Key on a port without a P_Key table (siw: `pkey_tbl_len` 0) | `ibv_get_pkey_index`, `EINVAL`, "no P_Key table" (before sysfs is read) |
//! | SRQ query where the provider has none (siw) | `ibv_query_srq`, `EOPNOTSUPP` |
//! | wrong rkey, or a region without the remote right | a `RemoteAccessError` completion |
//! | `REMOTE_WRITE` or `REMOTE_ATOMIC` without `LOCAL_WRITE` | `ibv_reg_mr`, `EINVAL`, "need LOCAL_WRITE" (`verbs_edge::*`) |
//! | receive past a full receive queue (rxe holds its whole ring, more than granted) | `ibv_post_recv`, `ENOMEM`, which request was not posted |
//! | receive on a QP in RESET | rxe: `ibv_post_recv`, `EINVAL`; siw takes it |
//! | atomic at an unaligned address | rxe: `ibv_post_send`, `EINVAL` (its library checks); elsewhere an error completion |
//! | atomic with a bad rkey, or on a region without `REMOTE_ATOMIC` | a `RemoteAccessError` completion; the target unchanged |
//! | atomic where the provider has none (siw) | refused at the post (`EINVAL`/`EOPNOTSUPP`) or an error completion |
//! | RDMA through a window after a local invalidate, a SEND with invalidate, an unbind or its drop, or a write through a window bound without `REMOTE_WRITE` | a `RemoteAccessError` completion |
//! | SEND with invalidate of a region's STag on siw | the receive completes with `RemoteInvalidRequest` (siw invalidates no STag of `ibv_reg_mr`) |
//! | [`MemoryWindow::unbind`] of a type 2 window | `ibv_bind_mw`, `EINVAL`, "only a type 1 window" (before the provider) |
//! | batch `set_sge_list` before any request, or after an inline request, a bind or a local invalidate | `ibv_wr_set_sge_list`, `EINVAL` from `WrBatch::complete`, which request; nothing posted |
//! | batch bind of a region or window of another context, or a range outside the region | `ibv_wr_bind_mw`, `EINVAL` from `WrBatch::complete`; nothing posted |
//! | receiver not ready past the RNR retries | an `RnrRetryExceeded` completion |
//! | CM bind to an address no device has | `rdma_bind_addr`, `EADDRNOTAVAIL`/`ENODEV` |
//! | CM bind to a port in use | `rdma_bind_addr`, `EADDRINUSE`, "already bound" |
//! | CM QP before the id has a device | `rdma_create_qp`, `EINVAL`, "not bound to a device" |
//! | CM private data over 255 bytes | `rdma_connect`/`rdma_reject`, `EINVAL` |
//! | CM ACK timeout code past 31, or on a UDP id | `rdma_set_option`, `EINVAL` ("at most 31", before the kernel; "connected port space") |
//! | CM AF-only changed on a listening id | `rdma_set_option`, `EINVAL`, "before the id listens" |
//! | IPv4 connect to an AF-only `[::]` listener (and on siw to any `[::]` listener) | [`Error::is_refused`] (`cm_options::*`) |
//! | a name `rdma_getaddrinfo` cannot resolve (or a name with `numeric_host`) | [`cm::AddrInfo::resolve`], `EADDRNOTAVAIL`, the resolver's reason; a NUL byte `EINVAL` |
//! | an [`cm::Endpoint`]'s verbs helpers on one made without `EpAttr` | `EINVAL`, "the endpoint has no QP" |
//! | `get_request`, `connect` or `accept` of an endpoint with nothing coming | `ETIMEDOUT` at its timeout ([`Error::is_timeout`]); a connect to nothing or to a dropped request is [`Error::is_refused`] (`cm_ep::*`) |
//! | a second QP for a CM id ([`cm::CmId::attach_qp`]), or one of another device | `rdma_create_qp`, `EINVAL` (before the kernel); a QP that is not new: `ibv_modify_qp`, `EINVAL` |
//! | address handle without a GRH on RoCE | `ibv_create_ah`, `EINVAL`, "no destination GID" |
//! | extended CQ fields the provider's CQs lack ([`CqBuilder::wc_flags`]; rxe: any past the standard ones) | `ibv_create_cq_ex`, `EOPNOTSUPP`, "carry no"; an [`ExCompletion`] field not asked for reads 0 or `None` |
//! | address without a route | an `AddrError` event, or `rdma_resolve_addr` failing |
//! | malformed, short or long MAD bytes | [`mad`]'s decoders: a typed `mad::Error` |
//! | `umad::AsyncPort::new` on a port with agents registered | `EBUSY`, "a port with registered agents" (`sound_umad::*`) |

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub use ibverbs_sys as sys;

mod ah;
#[cfg(feature = "tokio")]
mod async_io;
mod channel;
pub mod cm;
mod context;
mod cq;
mod device;
mod error;
mod event;
mod fork;
mod gid;
pub mod mad;
pub mod mr;
mod mw;
mod os;
mod pd;
mod provider;
mod qp;
#[cfg(feature = "tokio")]
pub mod sa;
mod srq;
pub mod stream;
pub mod subnet;
pub mod umad;
mod wc;
mod wr;

pub use ah::{AddressHandle, Path};
#[cfg(feature = "tokio")]
pub use async_io::{AsyncCompletionQueue, AsyncEvents};
pub use channel::CompletionChannel;
pub use context::{Context, DeviceAttr, PortAttr, PortState};
pub use context::{PortSpeed, PortWidth};
pub use cq::{CompletionQueue, CqBuilder, ExCompletion, ExPoll, WcFlags};
pub use device::{Device, DeviceList, NodeType, TransportType};
pub use error::{Error, ErrorDetails, Result};
pub use event::{AsyncEvent, AsyncEventElement, AsyncEventFd, AsyncEventKind};
pub use fork::{fork_init, is_fork_initialized, ForkStatus};
pub use gid::{Gid, GidEntry, GidType, IpFamily};
pub use mr::{AccessFlags, MemoryRegion, RemoteMemory, Sge};
pub use mw::{inc_rkey, MemoryWindow, MwType};
pub use pd::ProtectionDomain;
pub use qp::{
    InitAttr, Mtu, PreparedSend, QpAttr, QpBuilder, QpCaps, QpState, QpType, QueuePair, RtrAttr,
    RtsAttr, SendOps, WrBatch,
};
pub use srq::{SharedReceiveQueue, SrqAttr};
pub use wc::{CompletionBuf, WcOpcode, WcStatus, WorkCompletion};
pub use wr::{RecvWr, SendFlags, SendWr};
