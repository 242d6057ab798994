//! A set of a switch's ports, as its multicast forwarding table holds them.

use std::ops::BitOrAssign;

/// A set of ports 0-255 of a switch (a switch has at most 255 ports and
/// port 0, itself). Its multicast forwarding table holds the set of each
/// MLID in positions of sixteen ports: [`PortMask::position`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PortMask([u64; 4]);

impl PortMask {
    /// The set of `port` alone.
    pub(crate) fn of(port: u8) -> PortMask {
        let mut m = PortMask::default();
        m.insert(port);
        m
    }

    pub(crate) fn insert(&mut self, port: u8) {
        self.0[usize::from(port / 64)] |= 1 << (port % 64);
    }

    pub(crate) fn contains(&self, port: u8) -> bool {
        self.0[usize::from(port / 64)] & 1 << (port % 64) != 0
    }

    /// The ports of position `pos` of a multicast forwarding table: bit
    /// `i` is port `16 * pos + i`. Positions past the last (15) are empty.
    pub(crate) fn position(&self, pos: u8) -> u16 {
        let Some(word) = self.0.get(usize::from(pos / 4)) else {
            return 0;
        };
        (word >> (16 * u32::from(pos % 4))) as u16
    }
}

impl BitOrAssign for PortMask {
    fn bitor_assign(&mut self, other: PortMask) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_port_lands_in_its_position_and_bit() {
        for port in 0..=255u8 {
            let m = PortMask::of(port);
            assert!(m.contains(port));
            for pos in 0..=16u8 {
                let want = if pos == port / 16 {
                    1u16 << (port % 16)
                } else {
                    0
                };
                assert_eq!(m.position(pos), want, "port {port} position {pos}");
            }
        }
        let mut m = PortMask::of(3);
        m |= PortMask::of(200);
        assert!(m.contains(3) && m.contains(200) && !m.contains(4));
        assert_eq!(m.position(12), 1 << 8);
        assert_eq!(m.position(255), 0);
    }
}
