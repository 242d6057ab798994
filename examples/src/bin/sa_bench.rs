//! Measures how fast the subnet administrator answers PathRecord queries
//! when many are in flight: `sa_bench --guid2lid FILE [-n QUERIES] [-k
//! IN_FLIGHT]` asks for the paths from each LID of the subnet (the SM's
//! `guid2lid`) to the next ones in turn, `-k` at once (as many tasks on one
//! [`SaClient`]), checks that each answer is the one path between the LIDs
//! asked for, and prints `sa_bench: N PathRecords in T ms: R/s (K in
//! flight)`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use rdma::umad::SaClient;
use rdma::umad::{AsyncPort, Port};

/// Time PathRecord queries to the SA, many in flight.
#[derive(Parser, Debug)]
#[command(name = "sa_bench")]
struct Args {
    /// The LIDs of the subnet: OpenSM's guid2lid format (`0xGUID 0xLID
    /// 0xLID` a line).
    #[arg(long)]
    guid2lid: std::path::PathBuf,
    /// Queries in all.
    #[arg(short = 'n', long, default_value_t = 1000)]
    queries: usize,
    /// Queries in flight at once.
    #[arg(short = 'k', long, default_value_t = 32)]
    in_flight: usize,
    /// The CA (default: the first).
    #[arg(short = 'C', long = "Ca")]
    ca: Option<String>,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

fn lids(text: &str) -> Vec<u16> {
    let mut v: Vec<u16> = text
        .lines()
        .filter_map(|l| {
            let w = l.split_whitespace().nth(1)?;
            u16::from_str_radix(w.strip_prefix("0x")?, 16).ok()
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

async fn run(a: Args) -> Result<(), Error> {
    let lids = lids(&std::fs::read_to_string(&a.guid2lid)?);
    if lids.len() < 2 {
        return Err(format!("{}: fewer than 2 LIDs", a.guid2lid.display()).into());
    }
    let ca = match a.ca {
        Some(c) => c,
        None => rdma::umad::ca_names()?.into_iter().next().ok_or("no CA")?,
    };
    let port_num = rdma::umad::Ca::get(&ca)?
        .ports
        .first()
        .map(|p| p.port_num)
        .ok_or("the CA has no port")?;
    let port = AsyncPort::new(Port::open(&ca, port_num)?)?;
    let sa = Arc::new(SaClient::new(&port)?);
    let pairs: Vec<(u16, u16)> = (0..a.queries)
        .map(|i| {
            let s = lids[i % lids.len()];
            let d = lids[(i / lids.len() + 1 + i) % lids.len()];
            (s, d)
        })
        .collect();
    let start = Instant::now();
    let mut next = 0;
    let mut tasks = tokio::task::JoinSet::new();
    let mut done = 0;
    while done < pairs.len() {
        while tasks.len() < a.in_flight.max(1) && next < pairs.len() {
            let (s, d) = pairs[next];
            next += 1;
            let sa = sa.clone();
            tasks.spawn(async move {
                let p = sa.paths_between_lids(s, d).await?;
                match p.as_slice() {
                    [one] if one.slid == s && one.dlid == d => Ok::<(), Error>(()),
                    _ => Err(format!("LID {s} to {d}: {p:?}").into()),
                }
            });
        }
        match tasks.join_next().await {
            Some(r) => r??,
            None => break,
        }
        done += 1;
    }
    let t = start.elapsed();
    println!(
        "sa_bench: {} PathRecords in {:.1} ms: {:.0}/s ({} in flight)",
        pairs.len(),
        t.as_secs_f64() * 1e3,
        pairs.len() as f64 / t.as_secs_f64(),
        a.in_flight
    );
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sa_bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sa_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
