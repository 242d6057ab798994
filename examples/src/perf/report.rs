//! Results: perftest's statistics and tables, and a JSON form.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::OnceLock;

use super::conn::Conn;
use super::{clock, Config, Kind, Verb};
use crate::pingpong::Result;

/// perftest drops this many of the largest latency samples.
const LAT_MEASURE_TAIL: usize = 2;
/// MB in perftest's `MB/sec`: 2^20 bytes.
const MB: f64 = 1_048_576.0;
const LINE: &str =
    "---------------------------------------------------------------------------------------";

fn cycles_per_us() -> f64 {
    static MHZ: OnceLock<f64> = OnceLock::new();
    *MHZ.get_or_init(clock::cycles_per_us)
}

/// Latency statistics of one size, in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct LatResult {
    /// Message size.
    pub bytes: usize,
    /// Iterations.
    pub iterations: usize,
    /// Minimum.
    pub t_min: f64,
    /// Maximum (after dropping the largest two, as perftest does).
    pub t_max: f64,
    /// Median.
    pub t_typical: f64,
    /// Mean.
    pub t_avg: f64,
    /// Standard deviation.
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
}

impl LatResult {
    /// perftest's `print_report_lat`: the differences of consecutive post
    /// timestamps, divided by `rtt_factor` (2 for a ping-pong).
    pub fn from_stamps(bytes: usize, iterations: usize, stamps: &[u64], rtt_factor: u32) -> Self {
        let q = cycles_per_us() * f64::from(rtt_factor);
        let mut d: Vec<u64> = stamps.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        d.sort_unstable();
        let n = d.len().saturating_sub(LAT_MEASURE_TAIL).max(1);
        let us = |c: u64| c as f64 / q;
        let median = if n % 2 == 0 {
            (us(d[n / 2 - 1]) + us(d[n / 2])) / 2.0
        } else {
            us(d[n / 2])
        };
        let avg = d[..n].iter().map(|&c| us(c)).sum::<f64>() / n as f64;
        let var = d[..n].iter().map(|&c| (us(c) - avg).powi(2)).sum::<f64>() / n as f64;
        let at = |f: f64| us(d[((n as f64 * f).ceil() as usize).min(d.len() - 1)]);
        LatResult {
            bytes,
            iterations,
            t_min: us(d[0]),
            t_max: us(d[n.min(d.len() - 1)]),
            t_typical: median,
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: at(0.99),
            p99_9: at(0.999),
        }
    }
}

/// Bandwidth of one size.
#[derive(Debug, Clone, PartialEq)]
pub struct BwResult {
    /// Message size.
    pub bytes: usize,
    /// Iterations.
    pub iterations: usize,
    /// The best rate over any stretch from a post to a completion, MB/s.
    pub bw_peak: f64,
    /// From the first post to the last completion, MB/s.
    pub bw_average: f64,
    /// Millions of messages per second (average).
    pub msg_rate: f64,
}

impl BwResult {
    /// perftest's `report_bw`. `posted[i]` is set where a list of `list`
    /// requests starts, `completed[j]` where a completion closes `cq_mod`.
    pub fn from_stamps(
        bytes: usize,
        iterations: usize,
        posted: &[u64],
        completed: &[u64],
        list: usize,
        cq_mod: usize,
    ) -> Self {
        let hz = cycles_per_us() * 1e6;
        let n = iterations;
        let total = completed[n - 1].wrapping_sub(posted[0]).max(1) as f64;
        let seconds = total / hz;
        let bw_average = (bytes * n) as f64 / seconds / MB;
        // The peak: the least time per message over stretches that start at
        // a post and end at a completion.
        let mut best = f64::MAX;
        for i in (0..n).step_by(list) {
            let first = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
            let mut j = first;
            while j < n {
                let t = completed[j].wrapping_sub(posted[i]) as f64 / (j - i + 1) as f64;
                if t > 0.0 && t < best {
                    best = t;
                }
                j += cq_mod;
            }
            if first >= n && n > 0 {
                let t = completed[n - 1].wrapping_sub(posted[i]) as f64 / (n - i) as f64;
                if t > 0.0 && t < best {
                    best = t;
                }
            }
        }
        let bw_peak = if best < f64::MAX {
            bytes as f64 * hz / best / MB
        } else {
            bw_average
        };
        BwResult {
            bytes,
            iterations,
            bw_peak,
            bw_average,
            msg_rate: n as f64 / seconds / 1e6,
        }
    }
}

/// What one size produced.
#[derive(Debug, Clone, PartialEq)]
pub enum RunResult {
    /// A latency test.
    Lat(LatResult),
    /// A bandwidth test.
    Bw(BwResult),
}

fn title(cfg: &Config) -> String {
    let op = match cfg.verb {
        Verb::Send => "Send",
        Verb::Write => "RDMA_Write",
        Verb::Read => "RDMA_Read",
    };
    let what = match cfg.kind {
        Kind::Lat => "Latency",
        Kind::Bw => "BW",
    };
    format!("{op} {what} Test")
}

/// The banner perftest prints before the table.
pub fn print_header(cfg: &Config, conn: &Conn) {
    let qp = conn.qp();
    println!();
    println!("{LINE}");
    println!("                    {}", title(cfg));
    println!(
        " Dual-port       : OFF\t\tDevice         : {}",
        conn.ctx.name()
    );
    let transport = match conn.transport {
        rdma::TransportType::Iwarp => "IW",
        _ => "IB",
    };
    println!(" Number of qps   : 1\t\tTransport type : {transport}");
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    println!(" PCIe relax order: OFF");
    println!(
        " TX depth        : {}\t\tCQ Moderation  : {}",
        cfg.tx_depth, cfg.cq_mod
    );
    println!(" Post List       : {}", cfg.post_list);
    if cfg.receives() {
        println!(" RX depth        : {}", cfg.rx_depth);
    }
    println!(" Mtu             : {}[B]", conn.mtu.bytes());
    println!(
        " Link type       : {}",
        conn.ctx
            .query_port(cfg.args.ib_port)
            .map(|p| p.link_layer())
            .unwrap_or("?")
    );
    if let Some(i) = conn.gid_index {
        println!(" GID index       : {i}");
    }
    println!(" Max inline data : {}[B]", conn.inline_size);
    println!(
        " rdma_cm QPs\t : {}",
        if conn.is_cm() { "ON" } else { "OFF" }
    );
    println!(
        " Data ex. method : {}",
        if conn.is_cm() { "rdma_cm" } else { "Ethernet" }
    );
    println!("{LINE}");
    println!(" local address: QPN {:#06x}", qp.qp_num());
    println!("{LINE}");
    match cfg.kind {
        Kind::Lat => println!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
        ),
        Kind::Bw => println!(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        ),
    }
}

/// One row of the table.
pub fn print_row(r: &RunResult) {
    match r {
        RunResult::Lat(l) => println!(
            " {:<7} {:<13} {:<14.2} {:<12.2} {:<19.2} {:<16.2} {:<15.2} {:<23.2} {:<7.2}",
            l.bytes,
            l.iterations,
            l.t_min,
            l.t_max,
            l.t_typical,
            l.t_avg,
            l.t_stdev,
            l.p99,
            l.p99_9
        ),
        RunResult::Bw(b) => println!(
            " {:<10} {:<10}       {:<7.2}            {:<7.2}\t\t   {:.6}",
            b.bytes, b.iterations, b.bw_peak, b.bw_average, b.msg_rate
        ),
    }
}

/// The closing line.
pub fn print_footer(_cfg: &Config) {
    println!("{LINE}");
}

/// Writes the results as JSON.
pub fn write_json(path: &Path, cfg: &Config, conn: &Conn, results: &[RunResult]) -> Result<()> {
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"test\":\"{}\",\"device\":\"{}\",\"rdma_cm\":{},\"role\":\"{}\",\"iterations\":{},\"tx_depth\":{},\"cq_mod\":{},\"post_list\":{},\"inline_size\":{},\"events\":{},\"cycles_per_us\":{:.3},\"results\":[",
        cfg.name,
        conn.ctx.name(),
        conn.is_cm(),
        if cfg.is_client() { "client" } else { "server" },
        cfg.iters,
        cfg.tx_depth,
        cfg.cq_mod,
        cfg.post_list,
        conn.inline_size,
        cfg.events,
        cycles_per_us(),
    );
    for (i, r) in results.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        match r {
            RunResult::Lat(l) => {
                let _ = write!(
                    s,
                    "{{\"bytes\":{},\"iterations\":{},\"t_min_us\":{:.3},\"t_max_us\":{:.3},\"t_typical_us\":{:.3},\"t_avg_us\":{:.3},\"t_stdev_us\":{:.3},\"p99_us\":{:.3},\"p99_9_us\":{:.3}}}",
                    l.bytes, l.iterations, l.t_min, l.t_max, l.t_typical, l.t_avg, l.t_stdev, l.p99, l.p99_9
                );
            }
            RunResult::Bw(b) => {
                let _ = write!(
                    s,
                    "{{\"bytes\":{},\"iterations\":{},\"bw_peak_mb_s\":{:.3},\"bw_average_mb_s\":{:.3},\"msg_rate_mpps\":{:.6}}}",
                    b.bytes, b.iterations, b.bw_peak, b.bw_average, b.msg_rate
                );
            }
        }
    }
    s.push_str("]}\n");
    std::fs::write(path, s).map_err(|e| format!("Couldn't write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_drops_the_tail_and_halves_round_trips() {
        let mhz = cycles_per_us();
        // 11 stamps, 10 gaps of 2 us round trip, one of 200 us.
        let mut stamps = vec![0u64];
        for i in 0..10 {
            let gap = if i == 5 { 200.0 } else { 2.0 };
            stamps.push(stamps[i] + (gap * mhz) as u64);
        }
        let r = LatResult::from_stamps(2, 11, &stamps, 2);
        assert!((r.t_typical - 1.0).abs() < 0.01, "{r:?}");
        assert!((r.t_min - 1.0).abs() < 0.01, "{r:?}");
        assert!(r.t_stdev < 0.01, "{r:?}");
    }

    #[test]
    fn bandwidth_average_counts_from_first_post_to_last_completion() {
        let mhz = cycles_per_us();
        let n = 100;
        let posted: Vec<u64> = (0..n).map(|i| (i as f64 * mhz) as u64).collect();
        // Each message takes 1 us; completions every 10.
        let completed: Vec<u64> = (0..n).map(|i| ((i + 1) as f64 * mhz) as u64).collect();
        let r = BwResult::from_stamps(1_048_576, n, &posted, &completed, 1, 10);
        assert!((r.msg_rate - 1.0).abs() < 0.01, "{r:?}");
        assert!((r.bw_average - 1e6).abs() / 1e6 < 0.01, "{r:?}");
        assert!(r.bw_peak >= r.bw_average * 0.99, "{r:?}");
    }
}
