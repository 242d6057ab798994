//! Safe RDMA for Rust over rdma-core.
//!
//! RAII types for the verbs of libibverbs, the connection manager of
//! librdmacm ([`cm`]) and the userspace management datagrams of libibumad
//! ([`umad`], [`mad`]). The raw bindings are [`ibverbs_sys`] (re-exported
//! as [`sys`]); every object exposes its raw pointer (`as_raw`) for what
//! the crate does not cover.
//!
//! # What a program does
//! 1. **Open a device.** [`DeviceList::new`] lists the devices, and
//!    [`Device::open`] (or [`DeviceList::open`] by name) gives a
//!    [`Context`], whose queries ([`Context::query_device`],
//!    [`Context::query_port`]) say what the device offers.
//! 2. **Register memory.** A [`ProtectionDomain`] groups the objects that
//!    may work together. [`MemoryRegion::new`] allocates and registers
//!    memory, which safe code fills and reads by copying
//!    ([`MemoryRegion::write`], [`MemoryRegion::read`]): the device shares
//!    it (see [`mr`]).
//! 3. **Make the queues.** A [`CompletionQueue`], then a [`QueuePair`]
//!    ([`QueuePair::builder`]), connected by hand ([`QueuePair::to_init`],
//!    [`to_rtr`](QueuePair::to_rtr) and [`to_rts`](QueuePair::to_rts) with
//!    the peer's QP number, PSN and GID) or through the connection manager
//!    ([`cm`]).
//! 4. **Post and poll.** Name registered memory by [`Sge`]s
//!    ([`MemoryRegion::sge`]), post [`RecvWr`]s and [`SendWr`]s
//!    ([`QueuePair::post_recv`], [`QueuePair::post_send`]), and poll the CQ
//!    into a buffer of [`WorkCompletion`]s ([`CompletionQueue::poll`];
//!    [`CompletionQueue::wait`] blocks until completions come).
//!
//! ```no_run
//! use rdma::*;
//!
//! let ctx = DeviceList::new()?.open("rxe0")?;
//! let pd = ProtectionDomain::new(&ctx)?;
//! let cq = CompletionQueue::new(&ctx, 64)?;
//! let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
//! let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
//! // ... qp.to_init / to_rtr / to_rts with the peer's QPN, PSN and GID ...
//! let recv = [mr.sge(1024..2048)?];
//! qp.post_recv(&mut [RecvWr::new(2, &recv)])?;
//! mr.write(0, b"hello")?;
//! let send = [mr.sge(0..5)?];
//! qp.post_send(&mut [SendWr::send(1, &send).signaled()])?;
//! let mut wcs = [WorkCompletion::ZERO; 16]; // initialised once, polled into again and again
//! for wc in cq.poll(&mut wcs)? {
//!     assert!(wc.is_success(), "{wc:?}");
//! }
//! # Ok::<(), rdma::Error>(())
//! ```
//!
//! Listing the devices and their ports:
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
//! Beyond the verbs:
//! - **The connection manager**, [`cm`]: connection set-up by IP address
//!   on InfiniBand, RoCE and iWARP alike. A [`cm::CmId`] owns the QP it
//!   communicates on; with feature `tokio`, `cm::AsyncCm` offers
//!   `connect(addr).await` and a listener; [`cm::Endpoint`] is the
//!   blocking face of rdma-core's `rdma_server.c` and `rdma_client.c`.
//! - **Streams**, [`stream`] (feature `stream`, which implies `tokio`): `RdmaListener` and
//!   `RdmaStream` shaped like tokio's TCP, whole messages, one-sided reads
//!   and writes of a peer's advertised memory, and a blocking face.
//! - **uMAD**, [`umad`]: a port, agents registered for a management class,
//!   MADs sent and received with timeouts and matched to their requests;
//!   [`mad`] builds and parses them (`mad::sa` the subnet administrator's
//!   records). With feature `tokio`, `umad::sa` is a client of the subnet
//!   administrator. The subnet manager built on them is the package
//!   `rdma-sm`.
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
//! A tokio echo server over [`stream`] (feature `stream`), and concurrent
//! clients (`echo`):
#![cfg_attr(feature = "stream", doc = "```no_run")]
#![cfg_attr(not(feature = "stream"), doc = "```ignore")]
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
//! reference into it, and a region is deregistered before its memory (a
//! mapping of its own) is unmapped, so no write the device still makes
//! reaches memory the process can use, on any provider: [`mr`] states the
//! whole model.
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
//! | [`ProtectionDomain`], [`AddressHandle`] | creating objects in it, use in work requests | neither changes after creation, but for the PD's list of UD QPs and dropped handles it keeps (a mutex, taken at a UD QP's creation and destruction and a used handle's drop, never on the data path) and a handle's flag that a send was given it (an atomic) |
//! | [`MemoryRegion`] | `read`, `write`, `fill`, `to_vec`, `sge`, `remote` | copies are relaxed atomics (below); `ibv_mr` is written only by `ibv_reg_mr`; the views take `&mut` |
//! | [`CompletionQueue`] | `poll`, `wait`, `wait_one`, `req_notify`, `get_event` | `ibv_poll_cq` takes the CQ's lock (`cq->lock` in rxe, siw and mlx5); arming is a command (rxe), an atomic store (siw), a doorbell (mlx5); `ibv_ack_cq_events` takes the CQ's mutex |
//! | [`CompletionChannel`] | waiting, reading events | a file descriptor |
//! | [`QueuePair`] | `post_send`, `post_recv`, `modify`, `state` | `post_send` takes the SQ's lock, `post_recv` the RQ's (rxe `sq.lock`/`rq.lock`, siw `sq_lock`/`rq_lock`, mlx5 `sq.lock`/`rq.lock`); modify is a command (siw also takes both locks); a UD QP's send counts are atomics |
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
//! `as_raw`, or in a parent domain made with a thread domain (the
//! `unsafe` [`ProtectionDomain::parent_domain_with_td`]), have none.
//!
//! Memory the device or a peer may write is reached by safe code only
//! through copies made of relaxed atomic loads and stores ([`mr`]), as
//! vm-memory treats guest memory: never through a reference. Copies from
//! several threads do not race, and a device write that meets a copy counts
//! as another thread's atomic store: each byte (each aligned 8-byte word)
//! reads as its old or its new value.
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
//! # Errors
//! A call that fails returns a typed [`Error`]: the verb, the errno and the
//! likely cause, with questions such as [`Error::is_refused`] and
//! [`Error::is_timeout`]. Bad input gets such an error and changes nothing;
//! every bad-input case, its error and the device test that proves it are
//! listed in the repository's `docs/testing.md`.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub use ibverbs_sys as sys;

mod ah;
#[cfg(feature = "tokio")]
mod async_io;
mod channel;
pub mod cm;
#[cfg(has_ibv_create_comp_cntr)]
mod comp_cntr;
mod context;
mod cq;
mod device;
mod dm;
#[cfg(has_ibv_alloc_dmah)]
mod dmah;
mod error;
mod event;
mod flow;
mod flow_action;
mod fork;
mod gid;
mod import;
pub mod mad;
mod mlx5;
pub mod mr;
#[doc(hidden)]
pub use mlx5::abi as mlx5dv_abi;
mod mw;
mod os;
mod pd;
#[cfg(has_ibv_query_port_speed)]
mod port_speed;
mod provider;
mod qp;
mod rate;
mod retire;
mod srq;
mod srq_ex;
mod srq_ops;
mod srq_tag_table;
mod srq_tm;
mod td;
// The stream's protocol (its wire format) builds with no feature, so that
// its host tests run in every build; its types come with feature `stream`.
pub mod stream;
pub mod umad;
mod wc;
mod wq;
mod wr;
mod wr_opcode;
mod xrc;

pub use ah::{AddressHandle, Path};
#[cfg(feature = "tokio")]
pub use async_io::{AsyncCompletionQueue, AsyncEvents};
pub use channel::CompletionChannel;
#[cfg(has_ibv_create_comp_cntr)]
pub use comp_cntr::{CompCntrCaps, CompCntrKind, CompCntrOps, CompletionCounter};
pub use context::{Context, DeviceAttr, PortAttr, PortState, RawClock};
pub use context::{PortSpeed, PortWidth};
pub use cq::{CompletionQueue, CqBuilder, ExCompletion, ExPoll, WcFlags};
pub use device::{Device, DeviceList, NodeType, TransportType};
pub use dm::{DeviceMemory, DmMemoryRegion};
#[cfg(has_ibv_alloc_dmah)]
pub use dmah::{DmaHandle, DmaHandleBuilder, TphMemType};
pub use error::{Error, Result};
pub use event::{AsyncEvent, AsyncEventElement, AsyncEventFd, AsyncEventKind};
pub use flow::{
    CounterKind, Counters, EthFilter, Flow, FlowBuilder, FlowSpec, Ipv4Filter, Ipv6Filter,
    PortFilter,
};
pub use flow_action::{AesGcmKey, EspAttr, EspDirection, EspMode, FlowActionEsp};
pub use fork::{fork_init, is_fork_initialized, ForkStatus};
pub use gid::{flow_label_to_udp_sport, Gid, GidEntry, GidType, IpFamily};
pub use import::ImportedMr;
pub use mr::{AccessFlags, MemoryRegion, RemoteMemory, Sge};
pub use mr::{Advice, AdviseFlags, DmaBuf, DmaBufRegion, MrBuilder, NullMemoryRegion, Rereg};
#[cfg(has_ibv_alloc_buf)]
pub use mr::{BufMemoryRegion, LibBuffer};
pub use mr::{OdpCaps, OdpGeneralCaps, OdpTransportCaps};
pub use mw::{inc_rkey, MemoryWindow, MwType};
pub use pd::ProtectionDomain;
#[cfg(has_ibv_query_port_speed)]
pub use port_speed::PortBandwidth;
pub use qp::{
    Ece, InitAttr, Mtu, PreparedSend, QpAttr, QpBuilder, QpCaps, QpState, QpType, QueuePair,
    RateLimit, RtrAttr, RtsAttr, SendOps, WrBatch,
};
#[cfg(has_ibv_wr_flush)]
pub use qp::{FlushLevel, FlushType};
pub use rate::Rate;
pub use srq::{SharedReceiveQueue, SrqAttr};
pub use srq_ex::{SrqBuilder, TmCap};
pub use srq_ops::SrqOp;
pub use srq_tm::{AddTagError, TagBuffer, TagEvent, TagHandle, TagMatchingSrq, TmCompletion};
pub use td::ThreadDomain;
pub use wc::{CompletionBuf, WcOpcode, WcStatus, WorkCompletion};
pub use wq::{RwqIndTable, WorkQueue, WqState};
pub use wr::{RecvWr, SendFlags, SendWr};
pub use wr_opcode::WrOpcode;
pub use xrc::{XrcDomain, XrcRecvQp, XrcdOpen};
