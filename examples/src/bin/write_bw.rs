//! RDMA WRITE bandwidth and message rate (like perftest's ib_write_bw).
//!
//! ```text
//! write_bw [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ...          # server
//! write_bw [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ... SERVER   # client
//! ```
//!
//! See `rdma_examples::perf` for what is measured and how.

use std::process::ExitCode;

use clap::Parser;
use rdma_examples::perf::{self, Kind, Verb};

/// RDMA WRITE bandwidth and message rate (like perftest's ib_write_bw).
#[derive(Parser, Debug)]
#[command(name = "write_bw")]
struct Cli {
    #[command(flatten)]
    args: perf::Args,
}

fn main() -> ExitCode {
    perf::main("write_bw", Verb::Write, Kind::Bw, Cli::parse().args)
}
