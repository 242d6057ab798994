//! Safe RDMA for Rust over rdma-core.
//!
//! RAII types for the verbs of libibverbs; the raw bindings are
//! [`ibverbs_sys`] (re-exported as [`sys`]). Every object exposes its raw
//! pointer (`as_raw`) for what the crate does not cover.
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
//! # Threads
//! Contexts, PDs, MRs, CQs, QPs, SRQs and AHs are `Send` and `Sync`:
//! libibverbs allows every verb on them from any thread. An extended poll
//! ([`ExPoll`]) and a batch of extended work requests ([`WrBatch`]) hold a
//! provider lock and are neither.

//!
//! # Bad input
//! Bad input gets a typed [`Error`] (the verb, the errno, the likely cause)
//! and changes nothing. Each row is a device test (`tests/tests/device/`,
//! `bad_input::*`, `verbs::*`, `cm::*`, `faults::*`; MAD cases in `mad`'s unit
//! tests and the fuzzer):
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
//! | illegal transition (RESET -> RTS, INIT -> RTS) | `ibv_modify_qp`, `EINVAL`, "transition Reset -> Rts refused" |
//! | RTR without the remote side | `ibv_modify_qp`, `EINVAL` |
//! | QP deeper than the device allows | `ibv_create_qp`, `EINVAL`, "exceed the device's limits" |
//! | UD send without an address handle | `ibv_post_send`, `EINVAL`, "no address handle" |
//! | more receives than an SRQ holds | `ibv_post_srq_recv`, the provider's errno, which request was not posted |
//! | empty list to `prepare_send`, or a request index past a prepared list | `ibv_post_send`, `EINVAL` |
//! | `poll`, `req_notify` or `start_poll` on a CQ while an [`ExPoll`] of it lives (any clone, any thread) | `ibv_poll_cq`/`ibv_req_notify_cq`/`ibv_start_poll`, `EBUSY`, "an extended poll of this CQ is in progress" (`sound_cq::*`) |
//! | memory window where the provider has none (siw) | `ibv_alloc_mw`, `EOPNOTSUPP` |
//! | wrong rkey, or a region without the remote right | a `RemoteAccessError` completion |
//! | receiver not ready past the RNR retries | an `RnrRetryExceeded` completion |
//! | CM bind to an address no device has | `rdma_bind_addr`, `EADDRNOTAVAIL`/`ENODEV` |
//! | CM bind to a port in use | `rdma_bind_addr`, `EADDRINUSE`, "already bound" |
//! | CM QP before the id has a device | `rdma_create_qp`, `EINVAL`, "not bound to a device" |
//! | CM private data over 255 bytes | `rdma_connect`/`rdma_reject`, `EINVAL` |
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
mod gid;
pub mod mad;
pub mod mr;
mod mw;
mod pd;
mod qp;
mod srq;
pub mod umad;
mod wc;
mod wr;

pub use ah::AddressHandle;
#[cfg(feature = "tokio")]
pub use async_io::{AsyncCompletionQueue, AsyncEvents};
pub use channel::CompletionChannel;
pub use context::{Context, DeviceAttr, PortAttr, PortState};
pub use cq::{CompletionQueue, CqBuilder, ExCompletion, ExPoll};
pub use device::{Device, DeviceList, NodeType, TransportType};
pub use error::{Error, ErrorDetails, Result};
pub use event::{AsyncEvent, AsyncEventElement, AsyncEventFd, AsyncEventKind};
pub use gid::{Gid, GidEntry, GidType};
pub use mr::{AccessFlags, MemoryRegion, RemoteMemory, Sge};
pub use mw::{MemoryWindow, MwType};
pub use pd::ProtectionDomain;

/// The next rkey of a type 2 memory window: the same key with its low byte
/// (the tag) incremented, as `ibv_inc_rkey`.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}
pub use qp::{
    InitAttr, Mtu, Path, PreparedSend, QpBuilder, QpCaps, QpState, QpType, QueuePair, RtrAttr,
    RtsAttr, SendOps, WrBatch,
};
pub use srq::SharedReceiveQueue;
pub use wc::{WcOpcode, WcStatus, WorkCompletion};
pub use wr::{RecvWr, SendFlags, SendWr};
