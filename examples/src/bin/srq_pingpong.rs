//! A ping-pong over several RC queue pairs that share one receive queue
//! (SRQ), on the wire the same as rdma-core's `ibv_srq_pingpong`: either
//! side may be the C tool (both must use the same `-q`).
//!
//! ```text
//! srq_pingpong [-d DEV] [-g GIDX] [-q NUM_QP] ...          # server
//! srq_pingpong [-d DEV] [-g GIDX] [-q NUM_QP] ... HOST     # client
//! ```

use std::process::ExitCode;

use clap::Parser;
use rdma::{Mtu, QpType};
use rdma_examples::pingpong::{self, CommonArgs, Connected};

/// Ping-pong over RC queue pairs sharing an SRQ (like ibv_srq_pingpong).
#[derive(Parser, Debug)]
#[command(name = "srq_pingpong")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Size of message to exchange.
    #[arg(short = 's', long = "size", default_value_t = 4096, value_parser = pingpong::size)]
    size: usize,
    /// Path MTU.
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = pingpong::mtu)]
    mtu: Mtu,
    /// Number of queue pairs.
    #[arg(short = 'q', long = "num-qp", value_name = "NUM", default_value_t = 16, value_parser = pingpong::num::<u32>)]
    num_qp: u32,
    /// Use on-demand paging.
    #[arg(short = 'o', long = "odp")]
    odp: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    pingpong::main_with("srq_pingpong", || {
        Connected {
            qp_type: QpType::Rc,
            common: a.common,
            size: a.size,
            mtu: a.mtu,
            odp: a.odp,
            srq_qps: Some(a.num_qp),
        }
        .run()
    })
}
