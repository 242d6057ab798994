//! Code shared by the example programs.
//!
//! [`pingpong`] is what the four `*_pingpong` programs have in common with
//! each other and with rdma-core's `ibv_*_pingpong`: the TCP exchange of
//! queue pair addresses, the command line and the ping-pong loop.

pub mod discover;
pub mod ep_msg;
pub mod fabric_cache;
pub mod fts;
pub mod ibdiag;
pub mod linkinfo;
pub mod net;
pub mod netlist;
pub mod perf;
pub mod pingpong;
pub mod ud;
