//! A ping-pong over a reliable connected (RC) queue pair, on the wire the
//! same as rdma-core's `ibv_rc_pingpong`: either side may be the C tool.
//!
//! ```text
//! rc_pingpong [-d DEV] [-g GIDX] ...          # server
//! rc_pingpong [-d DEV] [-g GIDX] ... HOST     # client
//! ```

use std::process::ExitCode;

use clap::Parser;
use rdma::{Mtu, QpType};
use rdma_examples::pingpong::{self, CommonArgs, Connected};

/// Ping-pong over an RC queue pair (like ibv_rc_pingpong).
#[derive(Parser, Debug)]
#[command(name = "rc_pingpong")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Size of message to exchange.
    #[arg(short = 's', long = "size", default_value_t = 4096, value_parser = pingpong::size)]
    size: usize,
    /// Path MTU.
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = pingpong::mtu)]
    mtu: Mtu,
    /// Use on-demand paging.
    #[arg(short = 'o', long = "odp")]
    odp: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    pingpong::main_with("rc_pingpong", || {
        Connected {
            qp_type: QpType::Rc,
            common: a.common,
            size: a.size,
            mtu: a.mtu,
            odp: a.odp,
            srq_qps: None,
        }
        .run()
    })
}
