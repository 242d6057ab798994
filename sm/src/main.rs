//! `sm`: a subnet manager and SA for an InfiniBand fabric (the library
//! `rdma_sm`), on one port.
//!
//! Usage: `sm [-g GUID | -C CA --Port PORT] [-s SECONDS] [-o] [-p PRIORITY] [-P PARTITIONS]
//! [--maxsmps N] [--sm_key KEY] [--sminfo_polling_timeout MS] [--polling_retry_number N]
//! [-f LOGFILE] [-v]...`, OpenSM's flags (and option names) where they mean
//! the same. It runs
//! until SIGINT or SIGTERM (or, with `--once`, exits after the first sweep
//! has brought the subnet up). The log goes to stdout, or to LOGFILE.

use std::fs::File;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use clap::Parser;
use rdma_sm::Config;
use tracing::Level;

/// Run a subnet manager and SA on a port.
#[derive(Parser, Debug)]
#[command(name = "sm")]
struct Args {
    /// The port to run on, by its port GUID (0x...), as OpenSM's -g.
    #[arg(short = 'g', long = "guid", value_parser = parse_guid, conflicts_with_all = ["ca", "port"])]
    guid: Option<u64>,
    /// The CA (default: the first).
    #[arg(short = 'C', long = "Ca")]
    ca: Option<String>,
    /// The port (default: the CA's first; a switch's is 0).
    #[arg(long = "Port")]
    port: Option<u32>,
    /// Seconds between light sweeps (SwitchInfo of every switch, PortInfo of
    /// every CA port; a heavy sweep follows a change, as it does a trap).
    #[arg(short = 's', long = "sweep", default_value_t = 10)]
    sweep: u64,
    /// Exit once the first sweep has brought the subnet up.
    #[arg(short = 'o', long)]
    once: bool,
    /// The SM priority in SMInfo (0-15).
    #[arg(short = 'p', long = "priority", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=15))]
    priority: u8,
    /// The SM_Key of SMInfo (0x...), as OpenSM's sm_key: SMs with another
    /// non-zero key are ignored and their SMInfo Sets refused.
    #[arg(long = "sm_key", default_value = "0x1", value_parser = parse_guid)]
    sm_key: u64,
    /// Milliseconds between a standby's polls of the master's SMInfo, as
    /// OpenSM's sminfo_polling_timeout.
    #[arg(long = "sminfo_polling_timeout", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    sminfo_polling_timeout: u64,
    /// Polls the master may miss in a row before a standby takes over, as
    /// OpenSM's polling_retry_number.
    #[arg(long = "polling_retry_number", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    polling_retry_number: u32,
    /// The unicast routing engines to try, in order, as OpenSM's -R: minhop
    /// (shortest paths), updn (up/down: no credit loops) and ftree (fat
    /// trees: up/down from the top level), comma-separated.
    #[arg(short = 'R', long = "routing_engine", default_value = "minhop", value_delimiter = ',', value_parser = |s: &str| s.parse::<rdma_sm::RoutingEngine>())]
    routing: Vec<rdma_sm::RoutingEngine>,
    /// A file of the GUIDs of up/down's root switches (one a line), as
    /// OpenSM's -a; without it, the switch in the middle of the subnet.
    #[arg(short = 'a', long = "root_guid_file")]
    root_guid_file: Option<PathBuf>,
    /// The partitions file, as OpenSM's -P (its partitions.conf format:
    /// `Name=PKey[,ipoib][,mtu=N][,rate=N][,sl=N][,defmember=full|limited|both]
    /// : member[=full|limited|both], ... ;`); without it, the default
    /// partition alone, every port a full member.
    #[arg(short = 'P', long = "Pconfig")]
    pconfig: Option<PathBuf>,
    /// The LID Mask Control, as OpenSM's -l: each CA port gets 2^LMC LIDs
    /// (0-7), its paths spread over different links.
    #[arg(short = 'l', long = "lmc", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=7))]
    lmc: u8,
    /// The most SMPs outstanding at once, as OpenSM's --maxsmps (0: no
    /// limit).
    #[arg(long = "maxsmps", default_value_t = 4)]
    maxsmps: usize,
    /// Write the log to this file (appended) instead of stdout.
    #[arg(short = 'f', long = "log_file")]
    log_file: Option<PathBuf>,
    /// More log: -v for each sweep's steps, -vv for every SMP.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
}

/// A port GUID as OpenSM's -g takes it: hexadecimal, with or without 0x.
fn parse_guid(s: &str) -> Result<u64, String> {
    let hex = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u64::from_str_radix(hex, 16).map_err(|e| format!("{s:?} is not a GUID: {e}"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let level = match args.verbose {
        0 => Level::INFO,
        1 => Level::DEBUG,
        _ => Level::TRACE,
    };
    let log = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_target(false)
        .with_ansi(false);
    match &args.log_file {
        Some(path) => match File::options().create(true).append(true).open(path) {
            Ok(f) => log.with_writer(Mutex::new(f)).init(),
            Err(e) => {
                eprintln!("sm: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => log.with_writer(std::io::stdout).init(),
    }
    let roots = match &args.root_guid_file {
        None => Vec::new(),
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| rdma_sm::routing::parse_root_guids(&t))
        {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("{}: {e}", path.display());
                eprintln!("sm: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
    };
    let partitions = match &args.pconfig {
        None => rdma_sm::partitions::Partitions::default(),
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| rdma_sm::partitions::parse(&t).map_err(|e| e.to_string()))
        {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("{}: {e}", path.display());
                eprintln!("sm: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
    };
    let config = Config {
        port_guid: args.guid,
        ca: args.ca,
        port: args.port,
        sweep: Duration::from_secs(args.sweep),
        once: args.once,
        priority: args.priority,
        sm_key: args.sm_key,
        sminfo_polling: Duration::from_millis(args.sminfo_polling_timeout),
        polling_retries: args.polling_retry_number,
        routing: args.routing,
        roots,
        max_wire_smps: args.maxsmps,
        partitions,
        lmc: args.lmc,
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
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(rdma_sm::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("sm: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opensm_flags_parse_and_bad_ones_are_usage_errors() {
        let a = Args::try_parse_from([
            "sm",
            "-g",
            "0x0002c90300a0b0c1",
            "-s",
            "5",
            "-o",
            "-p",
            "7",
            "-vv",
        ])
        .unwrap();
        assert_eq!(a.guid, Some(0x0002_c903_00a0_b0c1));
        assert_eq!((a.sweep, a.once, a.priority, a.verbose), (5, true, 7, 2));
        assert_eq!(a.routing, [rdma_sm::RoutingEngine::MinHop]);
        assert_eq!(a.maxsmps, rdma_sm::Config::default().max_wire_smps);
        assert_eq!(a.maxsmps, 4);
        let a = Args::try_parse_from(["sm", "--maxsmps", "0"]).unwrap();
        assert_eq!(a.maxsmps, 0);
        let a = Args::try_parse_from(["sm", "-R", "ftree,updn,minhop", "-a", "roots"]).unwrap();
        assert_eq!(
            a.routing,
            [
                rdma_sm::RoutingEngine::FatTree,
                rdma_sm::RoutingEngine::UpDown,
                rdma_sm::RoutingEngine::MinHop
            ]
        );
        assert_eq!(a.root_guid_file, Some(PathBuf::from("roots")));
        assert_eq!((a.pconfig, a.port), (None, None));
        let a = Args::try_parse_from(["sm", "-P", "p.conf", "--Port", "2"]).unwrap();
        assert_eq!(
            (a.pconfig, a.port),
            (Some(PathBuf::from("p.conf")), Some(2))
        );
        let a = Args::try_parse_from(["sm", "--Pconfig", "q.conf"]).unwrap();
        assert_eq!(a.pconfig, Some(PathBuf::from("q.conf")));
        assert_eq!(
            (a.sm_key, a.sminfo_polling_timeout, a.polling_retry_number),
            (1, 10_000, 4)
        );
        let a = Args::try_parse_from([
            "sm",
            "--sm_key",
            "0xabc",
            "--sminfo_polling_timeout",
            "500",
            "--polling_retry_number",
            "2",
        ])
        .unwrap();
        assert_eq!(
            (a.sm_key, a.sminfo_polling_timeout, a.polling_retry_number),
            (0xabc, 500, 2)
        );
        assert_eq!(Args::try_parse_from(["sm"]).unwrap().lmc, 0);
        assert_eq!(Args::try_parse_from(["sm", "-l", "7"]).unwrap().lmc, 7);
        assert_eq!(Args::try_parse_from(["sm", "--lmc", "2"]).unwrap().lmc, 2);
        assert_eq!(parse_guid("2c90300a0b0c1"), Ok(0x2_c903_00a0_b0c1));
        for bad in [
            &["sm", "-g", "zz"][..],
            &["sm", "-p", "16"],
            &["sm", "-g", "0x1", "-C", "mlx5_0"],
            &["sm", "-s", "-1"],
            &["sm", "-R", "dor"],
            &["sm", "-R", "updn,,minhop"],
            &["sm", "--maxsmps", "-1"],
            &["sm", "--maxsmps", "many"],
            &["sm", "--sminfo_polling_timeout", "0"],
            &["sm", "--polling_retry_number", "0"],
            &["sm", "--sm_key", "key"],
            &["sm", "-P"],
            &["sm", "-l", "8"],
            &["sm", "-l", "-1"],
        ] {
            assert!(Args::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
