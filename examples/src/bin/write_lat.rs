//! RDMA WRITE latency: a ping-pong of WRITEs, each side polling the last byte (like perftest's ib_write_lat).
//!
//! ```text
//! write_lat [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ...          # server
//! write_lat [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ... SERVER   # client
//! ```
//!
//! See `rdma_examples::perf` for what is measured and how.

use std::process::ExitCode;

use clap::Parser;
use rdma_examples::perf::{self, Kind, Verb};

/// RDMA WRITE latency: a ping-pong of WRITEs, each side polling the last byte (like perftest's ib_write_lat).
#[derive(Parser, Debug)]
#[command(name = "write_lat")]
struct Cli {
    #[command(flatten)]
    args: perf::Args,
}

fn main() -> ExitCode {
    perf::main("write_lat", Verb::Write, Kind::Lat, Cli::parse().args)
}
