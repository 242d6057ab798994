//! RDMA READ latency: one READ at a time (like perftest's ib_read_lat).
//!
//! ```text
//! read_lat [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ...          # server
//! read_lat [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ... SERVER   # client
//! ```
//!
//! See `rdma_examples::perf` for what is measured and how.

use std::process::ExitCode;

use clap::Parser;
use rdma_examples::perf::{self, Kind, Verb};

/// RDMA READ latency: one READ at a time (like perftest's ib_read_lat).
#[derive(Parser, Debug)]
#[command(name = "read_lat")]
struct Cli {
    #[command(flatten)]
    args: perf::Args,
}

fn main() -> ExitCode {
    perf::main("read_lat", Verb::Read, Kind::Lat, Cli::parse().args)
}
