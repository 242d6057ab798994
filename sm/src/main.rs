//! `sm`: a subnet manager and SA for an InfiniBand fabric (the library
//! `rdma_sm`), on one port.
//!
//! Usage: `sm [-C CA] [-P PORT] [--sweep SECONDS] [--once] [-p PRIORITY]`.
//! It runs until SIGINT or SIGTERM (or, with `--once`, exits after the first
//! sweep has brought the subnet up).

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rdma_sm::Config;

/// Run a subnet manager and SA on a port.
#[derive(Parser, Debug)]
#[command(name = "sm")]
struct Args {
    /// The CA (default: the first).
    #[arg(short = 'C', long = "Ca")]
    ca: Option<String>,
    /// The port (default: the CA's first; a switch's is 0).
    #[arg(short = 'P', long = "Port")]
    port: Option<u32>,
    /// Seconds between light sweeps (SwitchInfo of every switch, PortInfo of
    /// every CA port; a heavy sweep follows a change, as it does a trap).
    #[arg(long = "sweep", default_value_t = 10)]
    sweep: u64,
    /// Exit once the first sweep has brought the subnet up.
    #[arg(long)]
    once: bool,
    /// The SM priority in SMInfo (0-15).
    #[arg(short = 'p', long = "priority", default_value_t = 0)]
    priority: u8,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = Config {
        ca: args.ca,
        port: args.port,
        sweep: Duration::from_secs(args.sweep),
        once: args.once,
        priority: args.priority,
    };
    // One thread: the SA answers each request where it arrives, without a
    // hand-over between workers (the sweep's SMPs wait on the network, not
    // on a CPU).
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sm: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(rdma_sm::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sm: {e}");
            ExitCode::FAILURE
        }
    }
}
