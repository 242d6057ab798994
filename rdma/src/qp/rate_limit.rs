//! Packet pacing: the rate limit of a queue pair's sends
//! (`ibv_modify_qp_rate_limit`).

use super::QueuePair;
use crate::sys;
use crate::{Error, Result};

/// The pace of a queue pair's sends ([`QueuePair::set_rate_limit`]),
/// as `ibv_qp_rate_limit_attr` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateLimit {
    /// The rate in kbit/s; 0 removes the limit.
    pub rate_kbps: u32,
    /// The largest burst, in bytes; 0: the device's default.
    pub max_burst_sz: u32,
    /// The typical packet size, in bytes; 0: the device's default.
    pub typical_pkt_sz: u16,
}

impl RateLimit {
    /// The `ibv_qp_rate_limit_attr` of this limit.
    pub(crate) fn raw(&self) -> sys::ibv_qp_rate_limit_attr {
        sys::ibv_qp_rate_limit_attr {
            rate_limit: self.rate_kbps,
            max_burst_sz: self.max_burst_sz,
            typical_pkt_sz: self.typical_pkt_sz,
            comp_mask: 0,
        }
    }
}

impl QueuePair {
    /// Paces the QP's sends to `limit` (`ibv_modify_qp_rate_limit`).
    ///
    /// Only devices with packet pacing do it, for the QP types that
    /// [`DeviceAttr::packet_pacing_supported`](crate::DeviceAttr::packet_pacing_supported)
    /// names, and within their `packet_pacing_caps` rates (mlx5: a QP in
    /// RTS); rxe and siw have no such verb, and libibverbs answers
    /// `EOPNOTSUPP` ("not supported by rxe0") without a kernel call. A
    /// rate outside the device's range is `EINVAL`.
    pub fn set_rate_limit(&self, limit: &RateLimit) -> Result<()> {
        let mut attr = limit.raw();
        // SAFETY: a live QP; `attr` is complete (no extension bits) and
        // lives for the call, which only reads it.
        let rc = unsafe { sys::ibv_modify_qp_rate_limit(self.as_raw(), &mut attr) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_modify_qp_rate_limit", rc)
                .unsupported_on(self.context().name(), "packet pacing"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_fills_each_field_and_no_extension() {
        let r = RateLimit {
            rate_kbps: 1_000_000,
            max_burst_sz: 4096,
            typical_pkt_sz: 1024,
        }
        .raw();
        assert_eq!(
            (r.rate_limit, r.max_burst_sz, r.typical_pkt_sz, r.comp_mask),
            (1_000_000, 4096, 1024, 0)
        );
    }
}
