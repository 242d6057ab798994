//! Where a packet from the TUN interface goes, and who sent a datagram:
//! the pure parts of the data path.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rdma::Gid;
use rdma_ipoib::{encap, mgid};

/// The IPv4 netmask of a prefix length (at most 32).
pub fn netmask(prefix: u8) -> Ipv4Addr {
    let p = u32::from(prefix.min(32));
    Ipv4Addr::from(u32::MAX.checked_shl(32 - p).unwrap_or(0))
}

/// An `ADDR/PREFIX` argument.
pub fn parse_cidr<A: std::str::FromStr>(s: &str, max: u8) -> Result<(A, u8), String> {
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: no /PREFIX"))?;
    let a = a
        .parse()
        .map_err(|_| format!("{s:?}: {a:?} is no address"))?;
    let p: u8 = p
        .parse()
        .ok()
        .filter(|p| *p <= max)
        .ok_or_else(|| format!("{s:?}: the prefix is 0 to {max}"))?;
    Ok((a, p))
}

/// The interface's own addresses, and the partition.
#[derive(Clone, Copy, Debug)]
pub struct Me {
    pub v4: Ipv4Addr,
    pub prefix4: u8,
    pub v6: Option<Ipv6Addr>,
    pub pkey: u16,
}

impl Me {
    fn directed_broadcast(&self) -> Option<Ipv4Addr> {
        (self.prefix4 < 31)
            .then(|| Ipv4Addr::from(u32::from(self.v4) | !u32::from(netmask(self.prefix4))))
    }
}

/// Where an IP packet read from the TUN interface goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// To a multicast group (its MGID), with this EtherType.
    Group(Gid, u16),
    /// To the neighbour with this address.
    Neighbour(IpAddr),
}

/// Why a packet from the TUN interface goes nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unroutable {
    /// Neither IPv4 nor IPv6, or shorter than its header.
    Malformed,
    /// IPv6 on an interface without an IPv6 address.
    NoIpv6,
}

/// The destination of `p`, an IP packet from the TUN interface.
pub fn dest(p: &[u8], me: &Me) -> Result<Dest, Unroutable> {
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => {
            let d = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
            if d.is_broadcast() || Some(d) == me.directed_broadcast() {
                Ok(Dest::Group(
                    mgid::ipv4_broadcast(me.pkey, mgid::LINK_LOCAL),
                    encap::ETHERTYPE_IPV4,
                ))
            } else if let Some(g) = mgid::ipv4(d, me.pkey, mgid::LINK_LOCAL) {
                Ok(Dest::Group(g, encap::ETHERTYPE_IPV4))
            } else {
                Ok(Dest::Neighbour(IpAddr::V4(d)))
            }
        }
        Some(6) if p.len() >= 40 => {
            if me.v6.is_none() {
                return Err(Unroutable::NoIpv6);
            }
            let d = Ipv6Addr::from(<[u8; 16]>::try_from(&p[24..40]).expect("16 bytes"));
            match mgid::ipv6(d, me.pkey, mgid::LINK_LOCAL) {
                Some(g) => Ok(Dest::Group(g, encap::ETHERTYPE_IPV6)),
                None => Ok(Dest::Neighbour(IpAddr::V6(d))),
            }
        }
        _ => Err(Unroutable::Malformed),
    }
}

/// The sender's GID from the 40 bytes in front of a UD receive: an IPv6
/// header (InfiniBand's GRH, or RoCE v2 over IPv6) has it at bytes 8 to
/// 24; RoCE v2 over IPv4 leaves 20 bytes and then the IPv4 header, whose
/// source address is the IPv4-mapped GID. `None` for anything else.
pub fn grh_source(grh: &[u8; 40]) -> Option<Gid> {
    if grh[0] >> 4 == 6 {
        let mut g = [0u8; 16];
        g.copy_from_slice(&grh[8..24]);
        return Some(Gid(g));
    }
    if grh[20] >> 4 == 4 {
        let v4 = Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]);
        return Some(Gid(v4.to_ipv6_mapped().octets()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(v6: bool) -> Me {
        Me {
            v4: Ipv4Addr::new(10, 77, 0, 1),
            prefix4: 24,
            v6: v6.then(|| "fd77::1".parse().unwrap()),
            pkey: 0xffff,
        }
    }

    fn v4_to(d: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 20, 0, 0, 0, 0, 64, 1, 0, 0, 10, 77, 0, 1];
        p.extend_from_slice(&d);
        p
    }

    fn v6_to(d: &str) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[24..40].copy_from_slice(&d.parse::<Ipv6Addr>().unwrap().octets());
        p
    }

    #[test]
    fn unicast_goes_to_a_neighbour_and_groups_to_their_mgid() {
        let m = me(true);
        assert_eq!(
            dest(&v4_to([10, 77, 0, 2]), &m),
            Ok(Dest::Neighbour("10.77.0.2".parse().unwrap()))
        );
        let bcast = Dest::Group(mgid::ipv4_broadcast(0xffff, 2), encap::ETHERTYPE_IPV4);
        assert_eq!(dest(&v4_to([255; 4]), &m), Ok(bcast));
        assert_eq!(dest(&v4_to([10, 77, 0, 255]), &m), Ok(bcast));
        assert_eq!(
            dest(&v4_to([224, 0, 0, 1]), &m),
            Ok(Dest::Group(
                mgid::ipv4("224.0.0.1".parse().unwrap(), 0xffff, 2).unwrap(),
                encap::ETHERTYPE_IPV4
            ))
        );
        assert_eq!(
            dest(&v6_to("fd77::2"), &m),
            Ok(Dest::Neighbour("fd77::2".parse().unwrap()))
        );
        match dest(&v6_to("ff02::1"), &m) {
            Ok(Dest::Group(g, encap::ETHERTYPE_IPV6)) => {
                assert_eq!(g.to_ipv6().to_string(), "ff12:601b:ffff::1")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn short_or_unknown_packets_and_ipv6_without_an_address_go_nowhere() {
        let m = me(false);
        assert_eq!(dest(&[], &m), Err(Unroutable::Malformed));
        assert_eq!(
            dest(&v4_to([10, 77, 0, 2])[..19], &m),
            Err(Unroutable::Malformed)
        );
        assert_eq!(dest(&[0x50; 60], &m), Err(Unroutable::Malformed));
        assert_eq!(
            dest(&v6_to("fd77::2")[..39], &m),
            Err(Unroutable::Malformed)
        );
        assert_eq!(dest(&v6_to("fd77::2"), &m), Err(Unroutable::NoIpv6));
        // A /31 or /32 has no directed broadcast: .255 of a /31 is unicast.
        let p31 = Me { prefix4: 31, ..m };
        assert_eq!(
            dest(&v4_to([10, 77, 0, 255]), &p31),
            Ok(Dest::Neighbour("10.77.0.255".parse().unwrap()))
        );
    }

    #[test]
    fn netmasks_and_cidr_arguments() {
        assert_eq!(netmask(0), Ipv4Addr::new(0, 0, 0, 0));
        assert_eq!(netmask(24), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(netmask(32), Ipv4Addr::new(255, 255, 255, 255));
        assert_eq!(netmask(200), Ipv4Addr::new(255, 255, 255, 255));
        assert_eq!(
            parse_cidr::<Ipv4Addr>("10.77.0.1/24", 32),
            Ok((Ipv4Addr::new(10, 77, 0, 1), 24))
        );
        for bad in [
            "10.77.0.1",
            "10.77.0.1/33",
            "10.77.0/24",
            "x/1",
            "10.77.0.1/-1",
        ] {
            assert!(parse_cidr::<Ipv4Addr>(bad, 32).is_err(), "{bad}");
        }
        assert_eq!(
            parse_cidr::<Ipv6Addr>("fd77::1/64", 128),
            Ok(("fd77::1".parse().unwrap(), 64))
        );
        assert!(parse_cidr::<Ipv6Addr>("fd77::1/129", 128).is_err());
    }

    #[test]
    fn the_sender_gid_comes_from_an_ipv6_or_an_ipv4_header() {
        let mut grh = [0u8; 40];
        grh[0] = 0x60;
        let sgid: Ipv6Addr = "fd00:3::2".parse().unwrap();
        grh[8..24].copy_from_slice(&sgid.octets());
        assert_eq!(grh_source(&grh), Some(Gid(sgid.octets())));
        let mut grh = [0u8; 40];
        grh[20] = 0x45;
        grh[32..36].copy_from_slice(&[203, 0, 113, 2]);
        assert_eq!(
            grh_source(&grh).map(|g| g.to_ipv6().to_string()),
            Some("::ffff:203.0.113.2".to_string())
        );
        assert_eq!(grh_source(&[0u8; 40]), None);
    }
}
