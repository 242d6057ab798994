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
pub(crate) fn rate_tenths(code: u8) -> u32 {
    CODES
        .iter()
        .find(|&&(c, _)| c == code)
        .map_or(0, |&(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;
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
