//! RDMA READ bandwidth and message rate (like perftest's ib_read_bw).
//!
//! ```text
//! read_bw [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ...          # server
//! read_bw [-d DEV] [-s SIZE | -a] [-n ITERS] [-R] ... SERVER   # client
//! ```
//!
//! See `rdma_examples::perf` for what is measured and how.

use std::process::ExitCode;

use clap::Parser;
use rdma_examples::perf::{self, Kind, Verb};

/// RDMA READ bandwidth and message rate (like perftest's ib_read_bw).
#[derive(Parser, Debug)]
#[command(name = "read_bw")]
struct Cli {
    #[command(flatten)]
    args: perf::Args,
}

fn main() -> ExitCode {
    perf::main("read_bw", Verb::Read, Kind::Bw, Cli::parse().args)
}
