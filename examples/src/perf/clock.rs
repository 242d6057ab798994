//! Cycle timestamps, as perftest takes them (`get_cycles`): the time stamp
//! counter on x86-64, a monotonic clock in nanoseconds elsewhere.

use std::time::{Duration, Instant};

/// The current timestamp, in cycles.
#[inline(always)]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU and only reads the counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Cycles per microsecond, chosen as perftest's `get_cpu_mhz` does: the
/// frequency `/proc/cpuinfo` reports, unless a measurement against the
/// monotonic clock differs from it by more than 2%, then the measured one.
pub fn cycles_per_us() -> f64 {
    let sample = sample_mhz();
    if cfg!(not(target_arch = "x86_64")) {
        return sample;
    }
    match proc_mhz() {
        Some(p) if ((p - sample).abs() / p) <= 0.02 => p,
        _ => sample,
    }
}

/// Measures cycles per microsecond over about 20 ms.
fn sample_mhz() -> f64 {
    let (t0, c0) = (Instant::now(), cycles());
    while t0.elapsed() < Duration::from_millis(20) {
        std::hint::spin_loop();
    }
    let (c1, dt) = (cycles(), t0.elapsed());
    (c1 - c0) as f64 / (dt.as_nanos() as f64 / 1000.0)
}

/// The first `cpu MHz` of /proc/cpuinfo.
fn proc_mhz() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    s.lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&v: &f64| v > 0.0)
}
