//! IPv6 neighbour discovery over IPoIB (RFC 4861 with RFC 4391 section
//! 9.1.2's link-layer option: type 1 or 2, length 3, two reserved bytes,
//! the 20-byte [`LinkAddr`]): the solicitations and advertisements the
//! program sends and answers itself, since a TUN interface has no link
//! layer for the kernel to resolve.

use std::net::Ipv6Addr;

use crate::LinkAddr;

/// ICMPv6's next-header number.
pub const ICMPV6: u8 = 58;
/// Neighbour solicitation.
pub const SOLICITATION: u8 = 135;
/// Neighbour advertisement.
pub const ADVERTISEMENT: u8 = 136;
/// The length of the solicitations and advertisements built here: IPv6
/// header, the 24-byte message, one 24-byte link-layer option.
pub const LEN: usize = 40 + 24 + 24;

const OPT_SOURCE: u8 = 1;
const OPT_TARGET: u8 = 2;

/// A neighbour discovery message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nd {
    /// Who has `target`? From `src`, with its link-layer address if given.
    Solicitation {
        /// The IPv6 source (`::` in duplicate address detection).
        src: Ipv6Addr,
        /// The IPv6 destination (the target's solicited-node group, or the
        /// target itself).
        dst: Ipv6Addr,
        /// The address asked for.
        target: Ipv6Addr,
        /// The source link-layer option.
        source: Option<LinkAddr>,
    },
    /// `target` is at `link`.
    Advertisement {
        /// The IPv6 source.
        src: Ipv6Addr,
        /// The IPv6 destination.
        dst: Ipv6Addr,
        /// The address advertised.
        target: Ipv6Addr,
        /// The target link-layer option.
        link: Option<LinkAddr>,
        /// The S flag: an answer to a solicitation.
        solicited: bool,
        /// The O flag: replaces a cached address.
        override_: bool,
    },
}

/// Why an ICMPv6 packet that claims to be neighbour discovery is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NdError {
    /// Shorter than its header and message.
    #[error("neighbour discovery message cut short")]
    Short,
    /// Not from a neighbour: hop limit below 255 (RFC 4861 7.1.1).
    #[error("hop limit {0}, not 255: not from a neighbour")]
    HopLimit(u8),
    /// The ICMPv6 checksum is wrong.
    #[error("ICMPv6 checksum wrong")]
    Checksum,
    /// A code other than 0.
    #[error("ICMPv6 code {0}, not 0")]
    Code(u8),
    /// An option of length 0, one past the end, or a link-layer option of
    /// another size than IPoIB's.
    #[error("bad neighbour discovery option")]
    Option,
    /// The target is a multicast address.
    #[error("multicast target")]
    MulticastTarget,
}

/// The ICMPv6 checksum of `msg` between `src` and `dst`.
pub(crate) fn checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, ICMPV6]);
    add(msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Parses IPv6 packet `p`: `Ok(None)` when it is no neighbour
/// solicitation or advertisement (other traffic, for the TUN interface).
pub fn parse(p: &[u8]) -> Result<Option<Nd>, NdError> {
    if p.len() < 40 || p[0] >> 4 != 6 || p[6] != ICMPV6 {
        return Ok(None);
    }
    let msg = &p[40..];
    let kind = match msg.first() {
        Some(&t @ (SOLICITATION | ADVERTISEMENT)) => t,
        _ => return Ok(None),
    };
    if msg.len() < 24 {
        return Err(NdError::Short);
    }
    if p[7] != 255 {
        return Err(NdError::HopLimit(p[7]));
    }
    let addr = |b: &[u8]| Ipv6Addr::from(<[u8; 16]>::try_from(b).expect("16 bytes"));
    let (src, dst) = (addr(&p[8..24]), addr(&p[24..40]));
    if checksum(src, dst, msg) != 0 {
        return Err(NdError::Checksum);
    }
    if msg[1] != 0 {
        return Err(NdError::Code(msg[1]));
    }
    let target = addr(&msg[8..24]);
    if target.is_multicast() {
        return Err(NdError::MulticastTarget);
    }
    let want = if kind == SOLICITATION {
        OPT_SOURCE
    } else {
        OPT_TARGET
    };
    let mut link = None;
    let mut opts = &msg[24..];
    while !opts.is_empty() {
        let len = usize::from(*opts.get(1).ok_or(NdError::Option)?) * 8;
        if len == 0 || len > opts.len() {
            return Err(NdError::Option);
        }
        if opts[0] == want {
            if len != 24 {
                return Err(NdError::Option);
            }
            link = LinkAddr::from_slice(&opts[4..24]);
        }
        opts = &opts[len..];
    }
    Ok(Some(if kind == SOLICITATION {
        Nd::Solicitation {
            src,
            dst,
            target,
            source: link,
        }
    } else {
        Nd::Advertisement {
            src,
            dst,
            target,
            link,
            solicited: msg[4] & 0x40 != 0,
            override_: msg[4] & 0x20 != 0,
        }
    }))
}

fn build(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    kind: u8,
    flags: u8,
    target: Ipv6Addr,
    opt: u8,
    link: LinkAddr,
) -> [u8; LEN] {
    let mut p = [0u8; LEN];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((LEN - 40) as u16).to_be_bytes());
    p[6] = ICMPV6;
    p[7] = 255;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    let m = &mut p[40..];
    m[0] = kind;
    m[4] = flags;
    m[8..24].copy_from_slice(&target.octets());
    m[24] = opt;
    m[25] = 3;
    m[28..48].copy_from_slice(&link.0);
    let c = checksum(src, dst, m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    p
}

/// A solicitation from `src` at `me` for `target`, to the target's
/// solicited-node group.
pub fn solicitation(src: Ipv6Addr, me: LinkAddr, target: Ipv6Addr) -> [u8; LEN] {
    let dst = crate::mgid::solicited_node(target);
    build(src, dst, SOLICITATION, 0, target, OPT_SOURCE, me)
}

/// The advertisement of `target` at `me` to `dst`: solicited (S) when it
/// answers a solicitation, always overriding (O).
pub fn advertisement(target: Ipv6Addr, me: LinkAddr, dst: Ipv6Addr, solicited: bool) -> [u8; LEN] {
    let flags = 0x20 | if solicited { 0x40 } else { 0 };
    build(target, dst, ADVERTISEMENT, flags, target, OPT_TARGET, me)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma::Gid;

    fn addr(qpn: u32, last: u8) -> LinkAddr {
        let mut g = [0u8; 16];
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        g[15] = last;
        LinkAddr::new(0, qpn, Gid(g))
    }

    #[test]
    fn solicitation_and_advertisement_round_trip() {
        let (a, b): (Ipv6Addr, Ipv6Addr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        let me = addr(0x48, 1);
        let ns = solicitation(a, me, b);
        assert_eq!(
            parse(&ns),
            Ok(Some(Nd::Solicitation {
                src: a,
                dst: "ff02::1:ff00:2".parse().unwrap(),
                target: b,
                source: Some(me)
            }))
        );
        let peer = addr(0x49, 2);
        let na = advertisement(b, peer, a, true);
        assert_eq!(
            parse(&na),
            Ok(Some(Nd::Advertisement {
                src: b,
                dst: a,
                target: b,
                link: Some(peer),
                solicited: true,
                override_: true
            }))
        );
    }

    /// The checksum of a solicitation as RFC 1071 sums it, by a second,
    /// independent sum over the pseudo-header written out.
    #[test]
    fn the_checksum_is_the_ones_complement_sum() {
        let ns = solicitation(
            "fe80::1".parse().unwrap(),
            addr(1, 1),
            "fe80::2".parse().unwrap(),
        );
        let mut pseudo = ns[8..40].to_vec();
        pseudo.extend_from_slice(&[0, 0, 0, 48, 0, 0, 0, 58]);
        pseudo.extend_from_slice(&ns[40..]);
        let mut sum: u64 = pseudo
            .chunks(2)
            .map(|c| u64::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff, "a packet with its checksum sums to all ones");
    }

    #[test]
    fn other_traffic_is_none_and_hostile_messages_are_typed() {
        let a: Ipv6Addr = "fd00::1".parse().unwrap();
        let ns = solicitation(a, addr(1, 1), "fd00::2".parse().unwrap());
        // A UDP packet, and an ICMPv6 echo request: not ours to handle.
        let mut udp = ns;
        udp[6] = 17;
        assert_eq!(parse(&udp), Ok(None));
        let mut echo = ns;
        echo[40] = 128;
        assert_eq!(parse(&echo), Ok(None));
        let with = |i: usize, v: u8| {
            let mut p = ns;
            p[i] = v;
            parse(&p)
        };
        assert_eq!(with(7, 64), Err(NdError::HopLimit(64)));
        assert_eq!(with(60, 0x77), Err(NdError::Checksum));
        assert_eq!(parse(&ns[..60]), Err(NdError::Short));
        // A link-layer option of Ethernet's size (length 1), re-summed.
        let mut eth = ns;
        eth[65] = 1;
        let fix = |p: &mut [u8; LEN]| {
            p[42..44].copy_from_slice(&[0, 0]);
            let src = Ipv6Addr::from(<[u8; 16]>::try_from(&p[8..24]).unwrap());
            let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&p[24..40]).unwrap());
            let c = checksum(src, dst, &p[40..]);
            p[42..44].copy_from_slice(&c.to_be_bytes());
        };
        fix(&mut eth);
        assert_eq!(parse(&eth), Err(NdError::Option));
        let mut zero = ns;
        zero[65] = 0;
        fix(&mut zero);
        assert_eq!(parse(&zero), Err(NdError::Option));
        let mut mc = ns;
        mc[48] = 0xff;
        fix(&mut mc);
        assert_eq!(parse(&mc), Err(NdError::MulticastTarget));
        // Every prefix and every one-byte change: an answer, never a panic.
        for n in 0..=LEN {
            let _ = parse(&ns[..n]);
            for v in [0u8, 1, 3, 0xff] {
                let mut p = ns;
                if n < LEN {
                    p[n] = v;
                }
                let _ = parse(&p);
            }
        }
    }
}
