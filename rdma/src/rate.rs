//! Static rates (`enum ibv_rate`): what an address handle or a QP's path may
//! be limited to, and libibverbs' conversions to multiples of 2.5 Gb/s and to
//! Mb/s.

use std::fmt;

use crate::sys;

/// A static rate, `enum ibv_rate` (`IBV_RATE_*`).
///
/// A newtype over the C value rather than a Rust enum: newer rdma-core
/// releases add rates, and a value this crate does not know stays usable
/// (its conversions answer `None` where libibverbs does not know it either).
///
/// ```
/// use rdma::Rate;
/// assert_eq!(Rate::GBPS_10.mult(), Some(4));
/// assert_eq!(Rate::from_mult(4), Some(Rate::GBPS_10));
/// assert_eq!(Rate::from_mbps(Rate::GBPS_25.mbps().unwrap()), Some(Rate::GBPS_25));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rate(sys::ibv_rate);

macro_rules! rates {
    ($($name:ident = $c:ident, $doc:literal;)*) => {
        impl Rate {
            $(#[doc = $doc] pub const $name: Rate = Rate(sys::$c);)*
            /// Every rate of `enum ibv_rate` this crate names, [`Rate::PORT_MAX`] first.
            pub const ALL: &'static [Rate] = &[$(Rate::$name),*];
        }
        impl fmt::Debug for Rate {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match *self {
                    $(Rate::$name => f.write_str(concat!("Rate::", stringify!($name))),)*
                    Rate(other) => write!(f, "Rate({other})"),
                }
            }
        }
    };
}

rates! {
    PORT_MAX = IBV_RATE_MAX, "No limit: the port's own rate (`IBV_RATE_MAX`, 0).";
    GBPS_2_5 = IBV_RATE_2_5_GBPS, "2.5 Gb/s.";
    GBPS_5 = IBV_RATE_5_GBPS, "5 Gb/s.";
    GBPS_10 = IBV_RATE_10_GBPS, "10 Gb/s.";
    GBPS_20 = IBV_RATE_20_GBPS, "20 Gb/s.";
    GBPS_30 = IBV_RATE_30_GBPS, "30 Gb/s.";
    GBPS_40 = IBV_RATE_40_GBPS, "40 Gb/s.";
    GBPS_60 = IBV_RATE_60_GBPS, "60 Gb/s.";
    GBPS_80 = IBV_RATE_80_GBPS, "80 Gb/s.";
    GBPS_120 = IBV_RATE_120_GBPS, "120 Gb/s.";
    GBPS_14 = IBV_RATE_14_GBPS, "14 Gb/s (1x FDR).";
    GBPS_56 = IBV_RATE_56_GBPS, "56 Gb/s (4x FDR).";
    GBPS_112 = IBV_RATE_112_GBPS, "112 Gb/s (8x FDR).";
    GBPS_168 = IBV_RATE_168_GBPS, "168 Gb/s (12x FDR).";
    GBPS_25 = IBV_RATE_25_GBPS, "25 Gb/s (1x EDR).";
    GBPS_100 = IBV_RATE_100_GBPS, "100 Gb/s (4x EDR).";
    GBPS_200 = IBV_RATE_200_GBPS, "200 Gb/s (8x EDR).";
    GBPS_300 = IBV_RATE_300_GBPS, "300 Gb/s (12x EDR).";
    GBPS_28 = IBV_RATE_28_GBPS, "28 Gb/s.";
    GBPS_50 = IBV_RATE_50_GBPS, "50 Gb/s.";
    GBPS_400 = IBV_RATE_400_GBPS, "400 Gb/s.";
    GBPS_600 = IBV_RATE_600_GBPS, "600 Gb/s.";
    GBPS_800 = IBV_RATE_800_GBPS, "800 Gb/s.";
    GBPS_1200 = IBV_RATE_1200_GBPS, "1200 Gb/s.";
}

impl Rate {
    /// The rate of a raw `enum ibv_rate` value.
    pub const fn from_raw(raw: sys::ibv_rate) -> Rate {
        Rate(raw)
    }

    /// The raw `enum ibv_rate` value.
    pub const fn as_raw(self) -> sys::ibv_rate {
        self.0
    }

    /// The rate as a multiple of 2.5 Gb/s (`ibv_rate_to_mult`); `None` for
    /// [`Rate::PORT_MAX`] and the rates that are no whole multiple (FDR, EDR).
    pub fn mult(self) -> Option<u32> {
        // SAFETY: ibv_rate_to_mult is a pure function of its argument; any
        // value is accepted (unknown ones give -1).
        let m = unsafe { sys::ibv_rate_to_mult(self.0) };
        u32::try_from(m).ok().filter(|&m| m > 0)
    }

    /// The rate of a multiple of 2.5 Gb/s (`mult_to_ibv_rate`); `None` when
    /// no rate is that multiple.
    pub fn from_mult(mult: u32) -> Option<Rate> {
        let mult = i32::try_from(mult).ok()?;
        // SAFETY: a pure function of its argument (unknown ones give
        // IBV_RATE_MAX).
        let r = unsafe { sys::mult_to_ibv_rate(mult) };
        (r != sys::IBV_RATE_MAX).then_some(Rate(r))
    }

    /// The rate in Mb/s (`ibv_rate_to_mbps`: the data rate after the line
    /// encoding, 14062 for FDR's 14 Gb/s); `None` for [`Rate::PORT_MAX`] and
    /// values libibverbs does not know.
    pub fn mbps(self) -> Option<u32> {
        // SAFETY: a pure function of its argument (unknown ones give -1).
        let m = unsafe { sys::ibv_rate_to_mbps(self.0) };
        u32::try_from(m).ok().filter(|&m| m > 0)
    }

    /// The rate of exactly `mbps` Mb/s as [`mbps`](Self::mbps) gives it
    /// (`mbps_to_ibv_rate`); `None` when no rate has that value.
    pub fn from_mbps(mbps: u32) -> Option<Rate> {
        let mbps = i32::try_from(mbps).ok()?;
        // SAFETY: a pure function of its argument (unknown ones give
        // IBV_RATE_MAX).
        let r = unsafe { sys::mbps_to_ibv_rate(mbps) };
        (r != sys::IBV_RATE_MAX).then_some(Rate(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "calls libibverbs")]
    fn every_rate_goes_to_mbps_and_back() {
        for &r in &Rate::ALL[1..] {
            let mbps = r.mbps().unwrap_or_else(|| panic!("{r:?} has no Mb/s"));
            assert_eq!(Rate::from_mbps(mbps), Some(r), "{r:?}");
        }
        assert_eq!(Rate::PORT_MAX.mbps(), None);
        assert_eq!(Rate::PORT_MAX.mult(), None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls libibverbs")]
    fn multiples_are_of_2500_mbps_and_go_back() {
        let mut with_mult = 0;
        for &r in Rate::ALL {
            if let Some(m) = r.mult() {
                with_mult += 1;
                assert_eq!(Rate::from_mult(m), Some(r), "{r:?}");
                // The whole multiples of 2.5 Gb/s are the 8b/10b-free
                // nominal rates: mbps is exactly mult * 2500 for the SDR to
                // QDR family, and within the 64b/66b encoding gain otherwise.
                let mbps = u64::from(r.mbps().unwrap());
                let nominal = u64::from(m) * 2500;
                assert!(
                    mbps >= nominal && mbps * 32 <= nominal * 34,
                    "{r:?}: {mbps} vs {nominal}"
                );
            }
        }
        assert!(with_mult > 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls libibverbs")]
    fn unknown_values_convert_to_none() {
        // Far above any rate a release defines (v65 ends at 24).
        for raw in 100..=200 {
            let r = Rate::from_raw(raw);
            assert_eq!(r.mbps(), None, "{r:?}");
            assert_eq!(r.mult(), None, "{r:?}");
        }
        for bad in [0, 3, 7, 1_000_000, u32::MAX] {
            assert_eq!(Rate::from_mult(bad), None, "{bad}");
        }
        for bad in [0, 1, 2499, 2501, 14000, u32::MAX] {
            assert_eq!(Rate::from_mbps(bad), None, "{bad}");
        }
        assert_eq!(format!("{:?}", Rate::from_raw(999)), "Rate(999)");
        assert_eq!(format!("{:?}", Rate::GBPS_2_5), "Rate::GBPS_2_5");
    }
}
