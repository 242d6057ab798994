//! The busy-poll settings: the connection's busy-poll time and how often
//! the driver and a waiting read poll the CQ and look at the clock.

use std::time::Duration;

/// The process's default busy-poll time ([`DEFAULT_BUSY_POLL`](super::DEFAULT_BUSY_POLL), or
/// `RDMA_STREAM_SPIN_US` microseconds from the environment, read once; 0
/// turns polling off), in [`Shared::busy_poll`](super::shared::Shared::busy_poll)'s units.
pub(super) fn default_busy_poll() -> u64 {
    static SPIN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        std::env::var("RDMA_STREAM_SPIN_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(busy_poll_micros(super::DEFAULT_BUSY_POLL), |us| {
                busy_poll_micros(Duration::from_micros(us))
            })
    })
}

/// `d` in whole microseconds, rounded up; [`BUSY_POLL_FOREVER`] for
/// `Duration::MAX` and anything that does not fit.
pub(super) fn busy_poll_micros(d: Duration) -> u64 {
    if d == Duration::MAX {
        return BUSY_POLL_FOREVER;
    }
    u64::try_from(d.as_nanos().div_ceil(1000)).unwrap_or(BUSY_POLL_FOREVER)
}

/// [`Shared::busy_poll`](super::shared::Shared::busy_poll)'s value for "never sleep".
pub(super) const BUSY_POLL_FOREVER: u64 = u64::MAX;

/// Passes (of up to [`SPIN_POLLS`] CQ polls each) between two looks at
/// the clock while a driver busy-polls (a clock read is a system call
/// where the clock source is not the TSC).
pub(super) const CLOCK_EVERY: u32 = 2;

/// CQ polls per pass of a busy-polling driver while nothing comes: a
/// pass is a poll of its task, and a runtime turns its I/O and timer
/// drivers (a system call and a clock read) after every so many polls of
/// tasks (61 by default), so each pass polls the CQ more than once.
pub(super) const SPIN_POLLS: u32 = 16;

/// [`Shared::half_polling`](super::shared::Shared::half_polling): a half polls the CQ.
pub(super) const HALF_POLLS: u8 = 1;
/// [`Shared::half_polling`](super::shared::Shared::half_polling): a half's busy poll ran out.
pub(super) const HALF_DONE: u8 = 2;

/// CQ polls of a busy-polling read per poll of its task (see [`Spin`](super::split::Spin)):
/// some microseconds of empty polls. Each 61 polls of tasks (tokio's
/// default event interval) the runtime turns its I/O and timer drivers:
/// an `epoll_wait` and three or four clock reads, system calls where the
/// clock source is not the TSC (1.2 to 1.8 us each in the TCG guest).
/// With 64 polls per turn a 64-byte ping-pong on rxe made 0.8 to 0.9 of
/// these calls per round trip on each side; with 256, 0.1.
pub(super) const READ_POLLS: u32 = 256;

/// Polls of a waiting read's task between two looks at the clock (see
/// [`Spin`](super::split::Spin)).
pub(super) const HALF_CLOCK_EVERY: u32 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_poll_times_round_up_to_microseconds_and_saturate_to_forever() {
        assert_eq!(busy_poll_micros(Duration::ZERO), 0);
        assert_eq!(busy_poll_micros(Duration::from_nanos(1)), 1);
        assert_eq!(busy_poll_micros(Duration::from_nanos(1500)), 2);
        assert_eq!(busy_poll_micros(Duration::from_micros(50)), 50);
        assert_eq!(busy_poll_micros(Duration::MAX), BUSY_POLL_FOREVER);
        assert_eq!(
            busy_poll_micros(Duration::from_secs(u64::MAX)),
            BUSY_POLL_FOREVER
        );
        assert_eq!(
            busy_poll_micros(Duration::from_micros(u64::MAX - 1)),
            u64::MAX - 1
        );
    }
}
