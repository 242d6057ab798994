//! The directed-route sweep of the C ibnetdiscover against ours: run by
//! `ci/fabric.sh --speed` (`RDMA_FABRIC_SPEED` set), not by the suite. It
//! prints the times of `RDMA_COMPARE_RUNS` (5) runs of each in
//! alternation, their medians and the ratio ours / C's, and where our time
//! goes (`RDMA_IBNETDISCOVER_STATS`: SMPs sent, time to open the port, time
//! of the sweep itself) beside the C tool's MAD count. It checks only that
//! every run succeeded: the host is shared, so times are printed, never
//! asserted.

use std::time::{Duration, Instant};

use rdma_tests::fabric::{output_within, Fabric, FabricTest};
use rdma_tests::{check, Outcome, TestResult};

/// The tests of `ci/fabric.sh --speed`.
pub const TESTS: &[FabricTest] = &[FabricTest {
    name: "speed::ibnetdiscover",
    run: ibnetdiscover,
}];

const LIMIT: Duration = Duration::from_secs(120);

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn ibnetdiscover(f: &Fabric) -> TestResult {
    let ours = rdma_tests::example("ibnetdiscover")?;
    let runs: usize = std::env::var("RDMA_COMPARE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let time = |program: &std::ffi::OsStr| -> Result<f64, Box<dyn std::error::Error>> {
        let t0 = Instant::now();
        let out = output_within(f.command(program, None), LIMIT)?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        check!(
            out.status.success() && !out.stdout.is_empty(),
            "{program:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(ms)
    };
    let (mut c, mut r) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        c.push(time("ibnetdiscover".as_ref())?);
        r.push(time(ours.as_os_str())?);
    }
    let show = |v: &[f64]| {
        v.iter()
            .map(|t| format!("{t:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!();
    println!("  speed {}: ibnetdiscover C ms: {}", f.name, show(&c));
    println!("  speed {}: ibnetdiscover ours ms: {}", f.name, show(&r));
    let mut stats = f.command(&ours, None);
    stats.env("RDMA_IBNETDISCOVER_STATS", "1");
    let out = output_within(stats, LIMIT)?;
    for l in String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("ibnetdiscover:"))
    {
        println!("  speed {}: ours: {l}", f.name);
    }
    let mut mads = f.command("ibnetdiscover", None);
    mads.arg("-m");
    let out = output_within(mads, LIMIT)?;
    for l in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("Total MADs"))
    {
        println!("  speed {}: C: {l}", f.name);
    }
    let (mc, mr) = (median(&mut c), median(&mut r));
    println!(
        "  speed {}: ibnetdiscover median C {mc:.0} ms, ours {mr:.0} ms, ratio ours/C {:.2}",
        f.name,
        mr / mc
    );
    Ok(Outcome::Passed)
}
