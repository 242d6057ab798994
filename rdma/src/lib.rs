//! Safe RDMA for Rust over rdma-core.
//!
//! This crate wraps the verbs of libibverbs in RAII types; the raw bindings
//! are [`ibverbs_sys`] (re-exported as [`sys`]). So far it covers device
//! discovery and queries:
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

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub use ibverbs_sys as sys;

mod context;
mod device;
mod error;
mod gid;

pub use context::{Context, DeviceAttr, PortAttr, PortState};
pub use device::{Device, DeviceList, NodeType, TransportType};
pub use error::{Error, Result};
pub use gid::{Gid, GidEntry, GidType};
