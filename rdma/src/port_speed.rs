//! A port's effective bandwidth in one number (`ibv_query_port_speed`,
//! rdma-core v65 and newer): what its width and per-lane speed give
//! together, in units of 100 Mb/s, without decoding
//! [`PortAttr`](crate::PortAttr)'s width and speed codes.
//!
//! Neither soft device answers it: rxe's and siw's providers have no
//! `query_port_speed`, so libibverbs answers `EOPNOTSUPP` ("not supported
//! by rxe0", [`Error::is_unsupported`]). EFA's provider asks the kernel.

use std::fmt;

use crate::{Context, Error, Result};

/// A port's effective bandwidth, as `ibv_query_port_speed` reports it: a
/// count of 100 Mb/s units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortBandwidth(u64);

impl PortBandwidth {
    /// The bandwidth of `units` times 100 Mb/s (the C value).
    pub const fn from_raw(units: u64) -> PortBandwidth {
        PortBandwidth(units)
    }

    /// The C value: a count of 100 Mb/s units.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The bandwidth in Mb/s (saturating at `u64::MAX`).
    pub const fn mbps(self) -> u64 {
        self.0.saturating_mul(100)
    }
}

/// `400 Gb/s`, `2.5 Gb/s`, `100 Mb/s`.
impl fmt::Display for PortBandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (gb, tenths) = (self.0 / 10, self.0 % 10);
        match (gb, tenths) {
            (0, t) => write!(f, "{} Mb/s", t * 100),
            (g, 0) => write!(f, "{g} Gb/s"),
            (g, t) => write!(f, "{g}.{t} Gb/s"),
        }
    }
}

impl Context {
    /// The effective bandwidth of port `port` (numbered from 1;
    /// `ibv_query_port_speed`). Port 0 is refused (`EINVAL`) before the
    /// provider sees it; a port past the device's last is the kernel's to
    /// refuse. Where the provider has no such query (rxe, siw):
    /// [`Error::is_unsupported`].
    pub fn port_speed(&self, port: u32) -> Result<PortBandwidth> {
        const VERB: &str = "ibv_query_port_speed";
        if port == 0 {
            return Err(Error::invalid(VERB, "ports are numbered from 1"));
        }
        let mut units = 0u64;
        // SAFETY: an open context; `units` is writable for the call, and
        // written only on success.
        let rc = unsafe { crate::sys::ibv_query_port_speed(self.as_raw(), port, &mut units) };
        if rc != 0 {
            return Err(Error::from_rc(VERB, rc).unsupported_on(self.name(), "port speed query"));
        }
        Ok(PortBandwidth(units))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_prints_in_gigabits_and_megabits() {
        let cases = [
            (0, "0 Mb/s"),
            (1, "100 Mb/s"),
            (25, "2.5 Gb/s"),
            (1000, "100 Gb/s"),
            (4000, "400 Gb/s"),
        ];
        for (raw, text) in cases {
            assert_eq!(PortBandwidth::from_raw(raw).to_string(), text);
            assert_eq!(PortBandwidth::from_raw(raw).raw(), raw);
        }
        assert_eq!(PortBandwidth::from_raw(25).mbps(), 2500);
        assert_eq!(PortBandwidth::from_raw(u64::MAX).mbps(), u64::MAX);
    }
}
