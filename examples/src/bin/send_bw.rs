//! SEND bandwidth and message rate (like perftest's ib_send_bw).
//!
//! ```text
//! send_bw [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ...          # server
//! send_bw [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ... SERVER   # client
//! ```
//!
//! See `rdma_examples::perf` for what is measured and how.

use std::process::ExitCode;

use clap::Parser;
use rdma_examples::perf::{self, Kind, Verb};

/// SEND bandwidth and message rate (like perftest's ib_send_bw).
#[derive(Parser, Debug)]
#[command(name = "send_bw")]
struct Cli {
    #[command(flatten)]
    args: perf::Args,
}

fn main() -> ExitCode {
    perf::main("send_bw", Verb::Send, Kind::Bw, Cli::parse().args)
}
