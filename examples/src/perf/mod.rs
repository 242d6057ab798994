//! Code shared by the perftest-like benchmarks: `send_lat`, `write_lat`,
//! `read_lat`, `send_bw`, `write_bw` and `read_bw`.
//!
//! They measure what perftest's `ib_*` tools measure, with the same main
//! flags and output columns, on the safe `rdma` API only:
//!
//! - latency (`*_lat`): a ping-pong of SENDs or RDMA WRITEs (half the round
//!   trip), or one RDMA READ at a time (the whole round trip); the table
//!   gives the minimum, maximum, median (`t_typical`), mean, standard
//!   deviation and the 99% and 99.9% percentiles, in microseconds;
//! - bandwidth (`*_bw`): the client keeps `tx_depth` requests in flight,
//!   signals one in `cq_mod`, and reports peak and average bandwidth
//!   (MB/s, 2^20 bytes) and the message rate (millions per second).
//!
//! Time is read from the CPU's time stamp counter as perftest does
//! ([`clock`]). The connection is made either through rdma_cm (`-R`,
//! required on iWARP) or with a small TCP exchange of queue pair number,
//! PSN, GID, address and rkey ([`conn`]); that exchange is this program's
//! own, not perftest's, so each side must be one of these programs.

use std::path::PathBuf;
use std::process::ExitCode;

pub mod bw;
pub mod clock;
pub mod conn;
pub mod count;
pub mod lat;
pub mod report;

use crate::pingpong::{self, Result};

/// The operation a benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// SEND, received into posted receives.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
}

/// What a benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One operation at a time: latency.
    Lat,
    /// Many in flight: bandwidth and message rate.
    Bw,
}

/// The command line, shared by all six programs (perftest's option letters).
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Use IB device DEV (default: the first one; with -R, the one rdma_cm picks).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Use port PORT of the IB device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Size of message to exchange (default: 2 for latency, 65536 for bandwidth).
    #[arg(short = 's', long = "size", value_parser = pingpong::size)]
    pub size: Option<usize>,
    /// Number of exchanges (default: 1000 for latency, 5000 for bandwidth).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<usize>,
    /// Run sizes from 2 till 2^23.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// GID index (default: the port's first IPv4-mapped RoCE v2 GID, else 0).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u32>,
    /// Connect through rdma_cm (required on iWARP).
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// Max size of message to be sent inline (default 0, as perftest on
    /// rxe and siw).
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Post a list of N work requests with one call.
    #[arg(short = 'l', long = "post_list", default_value_t = 1)]
    pub post_list: usize,
    /// Generate a completion only every N work requests (default 100, at
    /// most tx-depth; 1 for messages over 8 KiB).
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<usize>,
    /// Sleep on completion events instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Listen on / connect to port PORT (TCP, or rdma_cm with -R).
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Do not warn when the CPU frequency looks wrong (accepted for
    /// compatibility; this program never fails on it).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Size of the send queue (default: 1 for latency, 128 for bandwidth).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<usize>,
    /// Size of the receive queue of SEND tests (default: 512, at most iters).
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<usize>,
    /// Path MTU (default: the port's active MTU).
    #[arg(short = 'm', long = "mtu", value_parser = pingpong::mtu)]
    pub mtu: Option<rdma::Mtu>,
    /// Instead of a benchmark: N signalled 64-byte RDMA WRITEs over a QP
    /// connected to itself, each posted and polled once (the Rust twin of
    /// ci/post_poll.c, for instruction counts under callgrind).
    #[arg(long = "post-poll-loop", value_name = "N")]
    pub post_poll_loop: Option<usize>,
    /// With --post-poll-loop: post and poll through the safe API (`safe`),
    /// post a list prepared once (`prepared`), or go straight through the
    /// ibverbs-sys ports underneath (`port`).
    #[arg(long = "post-poll-path", value_name = "PATH", default_value = "safe",
          value_parser = ["safe", "prepared", "port"])]
    pub post_poll_path: String,
    /// WRITE latency: RDMA WRITE with immediate data, each taken by the
    /// peer from a posted receive's completion rather than by polling the
    /// last byte (perftest's option of the same name).
    #[arg(long = "write_with_imm")]
    pub write_with_imm: bool,
    /// Also write the results as JSON to PATH.
    #[arg(long = "json", value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// The server's address (absent: be the server).
    pub server: Option<String>,
}

/// Everything a run needs, defaults resolved.
#[derive(Debug, Clone)]
pub struct Config {
    /// The program's name.
    pub name: &'static str,
    /// The operation.
    pub verb: Verb,
    /// Latency or bandwidth.
    pub kind: Kind,
    /// The message sizes, in order.
    pub sizes: Vec<usize>,
    /// Iterations per size.
    pub iters: usize,
    /// Inline messages up to this size.
    pub inline_size: u32,
    /// Work requests per post call.
    pub post_list: usize,
    /// One completion per this many work requests.
    pub cq_mod: usize,
    /// Send requests in flight.
    pub tx_depth: usize,
    /// Receives kept posted (SEND tests).
    pub rx_depth: usize,
    /// Wait for completion events.
    pub events: bool,
    /// The command line.
    pub args: Args,
}

impl Config {
    /// Resolves perftest's defaults for `verb` and `kind`.
    pub fn new(name: &'static str, verb: Verb, kind: Kind, args: Args) -> Result<Config> {
        let (def_size, def_iters, def_tx, def_cq_mod) = match kind {
            Kind::Lat => (2, 1000, 1, 100),
            Kind::Bw => (65536, 5000, 128, 100),
        };
        let iters = args.iters.unwrap_or(def_iters);
        if iters < 5 {
            return Err("iterations must be at least 5".into());
        }
        let sizes = if args.all {
            (1..=23).map(|p| 1usize << p).collect()
        } else {
            vec![args.size.unwrap_or(def_size)]
        };
        // perftest inlines by default only on some Mellanox devices; on
        // every other device (rxe and siw among them) its default is 0.
        let inline_size = args.inline_size.unwrap_or(0);
        if verb == Verb::Read && args.inline_size.unwrap_or(0) > 0 {
            return Err("RDMA READ cannot be inline".into());
        }
        let post_list = args.post_list.max(1);
        if iters % post_list != 0 {
            return Err(format!(
                "iters ({iters}) must be a multiple of the post list ({post_list})"
            ));
        }
        let tx_depth = args.tx_depth.unwrap_or(def_tx).max(post_list).min(iters);
        // As perftest: moderation is off by default for messages over 8 KiB
        // (except with -a or events), and at most the send queue's depth.
        let large = sizes[0] > 8192 && !args.all && !args.events;
        let def_cq_mod = if large { 1 } else { def_cq_mod };
        let cq_mod = args.cq_mod.unwrap_or(def_cq_mod).clamp(1, tx_depth);
        // A completion closes a whole post list.
        let cq_mod = cq_mod.div_ceil(post_list) * post_list;
        let rx_depth = args.rx_depth.unwrap_or(512).min(iters).max(1);
        if args.write_with_imm && (verb != Verb::Write || kind != Kind::Lat) {
            return Err("--write_with_imm is supported by WRITE latency only".into());
        }
        if args.events && verb == Verb::Write && kind == Kind::Lat && !args.write_with_imm {
            return Err("events are not supported by WRITE latency (it polls memory)".into());
        }
        Ok(Config {
            name,
            verb,
            kind,
            sizes,
            iters,
            inline_size,
            post_list,
            cq_mod,
            tx_depth,
            rx_depth,
            events: args.events,
            args,
        })
    }

    /// Whether this side is the client.
    pub fn is_client(&self) -> bool {
        self.args.server.is_some()
    }

    /// The largest message size.
    pub fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(2)
    }

    /// Whether this side posts receives (both sides of SEND latency and of
    /// WRITE-with-immediate latency, the server of SEND bandwidth).
    pub fn receives(&self) -> bool {
        (self.verb == Verb::Send && (self.kind == Kind::Lat || !self.is_client()))
            || self.args.write_with_imm
    }

    /// The RDMA READs in flight each way (READ tests; 1 otherwise).
    pub fn reads_in_flight(&self, device_max: u32) -> u8 {
        if self.verb != Verb::Read {
            return 1;
        }
        let want = if self.kind == Kind::Lat {
            1
        } else {
            self.tx_depth
        };
        want.clamp(1, device_max.clamp(1, 255) as usize) as u8
    }
}

/// Runs one of the six programs: parses nothing itself (the binary does,
/// to carry its own name), prints the table and exits.
pub fn main(name: &'static str, verb: Verb, kind: Kind, args: Args) -> ExitCode {
    pingpong::main_with(name, || {
        if let Some(n) = args.post_poll_loop {
            let path = match args.post_poll_path.as_str() {
                "port" => count::PostPollPath::Port,
                "prepared" => count::PostPollPath::Prepared,
                _ => count::PostPollPath::Safe,
            };
            return count::run(&args, n, path);
        }
        let cfg = Config::new(name, verb, kind, args)?;
        let mut conn = conn::Conn::establish(&cfg)?;
        report::print_header(&cfg, &conn);
        let mut results = Vec::new();
        for &size in &cfg.sizes {
            let r = match kind {
                Kind::Lat => lat::run(&cfg, &mut conn, size)?,
                Kind::Bw => bw::run(&cfg, &mut conn, size)?,
            };
            if let Some(r) = r {
                report::print_row(&r);
                results.push(r);
            }
            conn.barrier()?;
        }
        report::print_footer(&cfg);
        conn.finish(&cfg)?;
        if let Some(path) = &cfg.args.json {
            report::write_json(path, &cfg, &conn, &results)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn config(verb: Verb, kind: Kind, argv: &[&str]) -> Result<Config> {
        let cli = Cli::try_parse_from(std::iter::once("t").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        Config::new("t", verb, kind, cli.args)
    }

    #[test]
    fn write_with_imm_is_a_write_latency_option_whose_sides_both_receive() {
        let server = config(Verb::Write, Kind::Lat, &["--write_with_imm"]).unwrap();
        let client = config(Verb::Write, Kind::Lat, &["--write_with_imm", "peer"]).unwrap();
        assert!(server.receives() && client.receives());
        // Events are allowed: the receiver waits on its CQ, not on memory.
        assert!(config(Verb::Write, Kind::Lat, &["--write_with_imm", "-e"]).is_ok());
        // Plain WRITE latency polls memory: no receives, no events.
        let plain = config(Verb::Write, Kind::Lat, &["peer"]).unwrap();
        assert!(!plain.receives());
        assert!(config(Verb::Write, Kind::Lat, &["-e"]).is_err());
        for (verb, kind) in [
            (Verb::Send, Kind::Lat),
            (Verb::Read, Kind::Lat),
            (Verb::Write, Kind::Bw),
        ] {
            let e = config(verb, kind, &["--write_with_imm"]).unwrap_err();
            assert!(e.contains("WRITE latency only"), "{verb:?} {kind:?}: {e}");
        }
    }
}
