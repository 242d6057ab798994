//! A ping-pong over a unreliable connected (UC) queue pair, on the wire the
//! same as rdma-core's `ibv_uc_pingpong`: either side may be the C tool.
//!
//! ```text
//! uc_pingpong [-d DEV] [-g GIDX] ...          # server
//! uc_pingpong [-d DEV] [-g GIDX] ... HOST     # client
//! ```

use std::process::ExitCode;

use clap::Parser;
use rdma::{Mtu, QpType};
use rdma_examples::pingpong::{self, CommonArgs, Connected};

/// Ping-pong over a UC queue pair (like ibv_uc_pingpong).
#[derive(Parser, Debug)]
#[command(name = "uc_pingpong")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Size of message to exchange.
    #[arg(short = 's', long = "size", default_value_t = 4096, value_parser = pingpong::size)]
    size: usize,
    /// Path MTU.
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = pingpong::mtu)]
    mtu: Mtu,
}

fn main() -> ExitCode {
    let a = Args::parse();
    pingpong::main_with("uc_pingpong", || {
        Connected {
            qp_type: QpType::Uc,
            common: a.common,
            size: a.size,
            mtu: a.mtu,
            odp: false,
            srq_qps: None,
        }
        .run()
    })
}
