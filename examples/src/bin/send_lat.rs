//! SEND latency: a ping-pong of SENDs (like perftest's ib_send_lat).
//!
//! ```text
//! send_lat [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ...          # server
//! send_lat [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ... SERVER   # client
//! ```
//!
//! See `rdma_examples::perf` for what is measured and how.

use std::process::ExitCode;

use clap::Parser;
use rdma_examples::perf::{self, Kind, Verb};

/// SEND latency: a ping-pong of SENDs (like perftest's ib_send_lat).
#[derive(Parser, Debug)]
#[command(name = "send_lat")]
struct Cli {
    #[command(flatten)]
    args: perf::Args,
}

fn main() -> ExitCode {
    perf::main("send_lat", Verb::Send, Kind::Lat, Cli::parse().args)
}
