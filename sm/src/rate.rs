//! The rate codes of the SA's records (IBA table 205: PathRecord and
//! MCMemberRecord `Rate`) from a link's active width and speed, extended
//! speeds (FDR to NDR) included.

use rdma::mad::{LinkSpeed, LinkSpeedExt, PortInfo};

/// The rate codes and their nominal rates in tenths of Gb/s.
const CODES: [(u8, u32); 23] = [
    (2, 25),
    (3, 100),
    (4, 300),
    (5, 50),
    (6, 200),
    (7, 400),
    (8, 600),
    (9, 800),
    (10, 1200),
    (11, 140),
    (12, 560),
    (13, 1120),
    (14, 1680),
    (15, 250),
    (16, 1000),
    (17, 2000),
    (18, 3000),
    (19, 280),
    (20, 500),
    (21, 4000),
    (22, 6000),
    (23, 8000),
    (24, 12000),
];

/// The nominal rate of a link in tenths of Gb/s: its lanes times the
/// nominal lane rate of its active speed, the extended one where active
/// (FDR 14, EDR 25, HDR 50, NDR 100 Gb/s a lane).
pub(crate) fn link_tenths(pi: &PortInfo) -> u32 {
    let lanes = pi.link_width_active.lanes().unwrap_or(1);
    let lane = match pi.link_speed_ext_active {
        LinkSpeedExt::Fdr => 140,
        LinkSpeedExt::Edr => 250,
        LinkSpeedExt::Hdr => 500,
        LinkSpeedExt::Ndr => 1000,
        _ => match pi.link_speed_active {
            LinkSpeed::Ddr => 50,
            LinkSpeed::Qdr => 100,
            _ => 25,
        },
    };
    lanes * lane
}

/// The rate code of a link: the code of its nominal rate, or of the
/// fastest rate below it where no code has it exactly.
pub(crate) fn rate_code(pi: &PortInfo) -> u8 {
    let tenths = link_tenths(pi);
    CODES
        .iter()
        .filter(|&&(_, t)| t <= tenths)
        .max_by_key(|&&(_, t)| t)
        .map_or(2, |&(c, _)| c)
}

/// The nominal rate of a rate code in tenths of Gb/s (0: no such code).
#[cfg(test)]
pub(crate) fn rate_tenths(code: u8) -> u32 {
    CODES
        .iter()
        .find(|&&(c, _)| c == code)
        .map_or(0, |&(_, t)| t)
}

/// The rate codes from the slowest to the fastest as OpenSM orders them
/// (`ordered_rates` of libopensm): by the rate of the link before its
/// encoding, so that 14, 25 and 28 Gb/s (64b/66b) stand as 17, 31.25 and
/// 35 Gb/s among the 8b/10b rates, after 30 Gb/s and 20 Gb/s.
const ORDER: [u8; 23] = [
    2, 5, 3, 11, 6, 4, 15, 19, 7, 8, 20, 12, 9, 10, 16, 13, 14, 17, 18, 21, 22, 23, 24,
];

/// The rank of a rate code in [`ORDER`], from 1 (0: no such code): what
/// the SA compares rates by, as OpenSM's `ib_path_compare_rates`.
pub(crate) fn rate_rank(code: u8) -> u32 {
    ORDER
        .iter()
        .position(|&c| c == code)
        .map_or(0, |i| i as u32 + 1)
}

/// The rate code ranked just below `code` (OpenSM's
/// `ib_path_rate_get_prev`); `None` below the lowest or for no code.
pub(crate) fn rate_below(code: u8) -> Option<u8> {
    match rate_rank(code) {
        0 | 1 => None,
        r => Some(ORDER[r as usize - 2]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order holds every code once, and agrees with the nominal rates
    /// except where the encoding moves a rate (14, 25, 28 Gb/s).
    #[test]
    fn rates_rank_as_opensm_orders_them() {
        let mut codes: Vec<u8> = CODES.iter().map(|&(c, _)| c).collect();
        codes.sort_unstable();
        let mut order = ORDER.to_vec();
        order.sort_unstable();
        assert_eq!(codes, order);
        assert_eq!((rate_rank(0), rate_rank(1), rate_rank(25)), (0, 0, 0));
        assert_eq!(rate_below(4), Some(6), "below 30 Gb/s: 20");
        assert_eq!(rate_below(6), Some(11), "below 20 Gb/s: 14");
        assert_eq!(rate_below(3), Some(5), "below 10 Gb/s: 5");
        assert_eq!(rate_below(2), None);
        assert_eq!(rate_below(99), None);
        assert!(
            rate_rank(15) > rate_rank(4),
            "25 Gb/s (64b/66b) above 30 (8b/10b)"
        );
        // Within each encoding (8b/10b: codes 2-10; 64b/66b: 11 and up),
        // by the nominal rate.
        for old in [true, false] {
            let v: Vec<u32> = ORDER
                .iter()
                .filter(|&&c| (c <= 10) == old)
                .map(|&c| rate_tenths(c))
                .collect();
            assert!(v.windows(2).all(|w| w[0] < w[1]), "{v:?}");
        }
    }

    use rdma::mad::LinkWidth;

    fn port(width: LinkWidth, speed: LinkSpeed, ext: LinkSpeedExt) -> PortInfo {
        PortInfo {
            link_width_active: width,
            link_speed_active: speed,
            link_speed_ext_active: ext,
            ..PortInfo::default()
        }
    }

    #[test]
    fn every_width_and_speed_has_its_code() {
        use LinkSpeed::{Ddr, Qdr, Sdr};
        use LinkSpeedExt::{Edr, Fdr, Hdr, Ndr, NoExtendedSpeed as No};
        use LinkWidth::{X1, X12, X2, X4, X8};
        let cases = [
            (X1, Sdr, No, 2),
            (X4, Sdr, No, 3),
            (X12, Sdr, No, 4),
            (X1, Ddr, No, 5),
            (X4, Ddr, No, 6),
            (X4, Qdr, No, 7),
            (X12, Qdr, No, 10),
            (X1, Qdr, Fdr, 11),
            (X4, Qdr, Fdr, 12),
            (X4, Sdr, Edr, 16),
            (X12, Sdr, Edr, 18),
            (X2, Sdr, Hdr, 16),
            (X4, Sdr, Hdr, 17),
            (X8, Sdr, Hdr, 21),
            (X4, Sdr, Ndr, 21),
            (X12, Sdr, Ndr, 24),
        ];
        for (w, s, e, code) in cases {
            let p = port(w, s, e);
            assert_eq!(rate_code(&p), code, "{w:?} {s:?} {e:?}");
            assert_eq!(rate_tenths(code), link_tenths(&p), "{w:?} {s:?} {e:?}");
        }
        assert_eq!(rate_tenths(0), 0);
        assert_eq!(rate_tenths(63), 0);
    }
}
