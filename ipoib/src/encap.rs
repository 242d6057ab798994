//! The IPoIB encapsulation (RFC 4391 section 6): a 4-byte header, the
//! EtherType of the payload and two reserved bytes, before every IPv4,
//! IPv6 or ARP packet; and what a receiver makes of a datagram: the packet
//! to deliver, or the reason to drop it, counted.

use rdma::Gid;

use crate::arp::{Arp, ArpError};
use crate::LinkAddr;

/// The header's length.
pub const HEADER_LEN: usize = 4;
/// IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// The header of a payload of `ether_type`.
pub fn header(ether_type: u16) -> [u8; HEADER_LEN] {
    let t = ether_type.to_be_bytes();
    [t[0], t[1], 0, 0]
}

/// A received datagram worth handling.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// An IPv4 packet (its header's length and version checked), the
    /// bytes of its total length.
    Ipv4(&'a [u8]),
    /// An IPv6 packet (version and payload length checked).
    Ipv6(&'a [u8]),
    /// An ARP packet whose sender is the datagram's sender.
    Arp(Arp),
}

/// Why a received datagram is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Drop {
    /// Shorter than the encapsulation header.
    #[error("datagram of {0} bytes, shorter than the IPoIB header")]
    Short(usize),
    /// An EtherType that IPoIB does not carry.
    #[error("unknown EtherType {0:#06x}")]
    EtherType(u16),
    /// An IPv4 or IPv6 packet whose header does not fit what arrived.
    #[error("malformed IP packet: {0}")]
    Ip(&'static str),
    /// A malformed ARP packet.
    #[error(transparent)]
    Arp(#[from] ArpError),
    /// Sent by this interface's own QP (a multicast looped back).
    #[error("sent by this interface's own QP")]
    Own,
    /// A link-layer address in the packet that is not the sender's: the
    /// QPN (or the GID, where the datagram had a GRH) differs from what
    /// the completion says sent it.
    #[error("claims QPN {claimed:#08x}, sent from QPN {actual:#08x}")]
    Forged {
        /// The QPN in the packet.
        claimed: u32,
        /// The QPN of the completion.
        actual: u32,
    },
}

/// Where a datagram came from, as its completion and GRH say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// The sending QP's number (the completion's `src_qp`).
    pub qpn: u32,
    /// The sender's GID, from the GRH; `None` without one.
    pub gid: Option<Gid>,
}

/// Checks that link-layer address `claimed`, found in a packet, is the
/// sender's own.
pub fn check_sender(claimed: &LinkAddr, from: &Source) -> Result<(), Drop> {
    let qp_ok = claimed.qpn() == from.qpn & 0xff_ffff;
    let gid_ok = from.gid.is_none_or(|g| g == claimed.gid());
    if qp_ok && gid_ok {
        Ok(())
    } else {
        Err(Drop::Forged {
            claimed: claimed.qpn(),
            actual: from.qpn,
        })
    }
}

/// Classifies datagram `d` (the bytes after the GRH, starting with the
/// encapsulation header) from `from`, received by the interface `me`.
pub fn classify<'a>(d: &'a [u8], from: &Source, me: &LinkAddr) -> Result<Frame<'a>, Drop> {
    if d.len() < HEADER_LEN {
        return Err(Drop::Short(d.len()));
    }
    if from.qpn & 0xff_ffff == me.qpn() && from.gid.is_none_or(|g| g == me.gid()) {
        return Err(Drop::Own);
    }
    let p = &d[HEADER_LEN..];
    match u16::from_be_bytes([d[0], d[1]]) {
        ETHERTYPE_IPV4 => {
            let (&vihl, _) = p.split_first().ok_or(Drop::Ip("empty IPv4 packet"))?;
            if vihl >> 4 != 4 {
                return Err(Drop::Ip("IPv4 EtherType, other IP version"));
            }
            let ihl = usize::from(vihl & 0x0f) * 4;
            let total = p
                .get(2..4)
                .map(|t| usize::from(u16::from_be_bytes([t[0], t[1]])))
                .ok_or(Drop::Ip("IPv4 header cut short"))?;
            if ihl < 20 || total < ihl || total > p.len() {
                return Err(Drop::Ip("IPv4 lengths do not fit"));
            }
            Ok(Frame::Ipv4(&p[..total]))
        }
        ETHERTYPE_IPV6 => {
            if p.len() < 40 {
                return Err(Drop::Ip("IPv6 header cut short"));
            }
            if p[0] >> 4 != 6 {
                return Err(Drop::Ip("IPv6 EtherType, other IP version"));
            }
            let total = 40 + usize::from(u16::from_be_bytes([p[4], p[5]]));
            if total > p.len() {
                return Err(Drop::Ip("IPv6 payload length past the datagram"));
            }
            Ok(Frame::Ipv6(&p[..total]))
        }
        ETHERTYPE_ARP => {
            let arp = Arp::parse(p)?;
            check_sender(&arp.sender, from)?;
            Ok(Frame::Arp(arp))
        }
        t => Err(Drop::EtherType(t)),
    }
}

/// Counts of the datagrams dropped, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    /// [`Drop::Short`].
    pub short: u64,
    /// [`Drop::EtherType`].
    pub ether_type: u64,
    /// [`Drop::Ip`].
    pub ip: u64,
    /// [`Drop::Arp`].
    pub arp: u64,
    /// [`Drop::Own`].
    pub own: u64,
    /// [`Drop::Forged`].
    pub forged: u64,
}

impl Drops {
    /// Counts `d`.
    pub fn count(&mut self, d: &Drop) {
        let c = match d {
            Drop::Short(_) => &mut self.short,
            Drop::EtherType(_) => &mut self.ether_type,
            Drop::Ip(_) => &mut self.ip,
            Drop::Arp(_) => &mut self.arp,
            Drop::Own => &mut self.own,
            Drop::Forged { .. } => &mut self.forged,
        };
        *c += 1;
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.short + self.ether_type + self.ip + self.arp + self.own + self.forged
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn addr(qpn: u32, last: u8) -> LinkAddr {
        let mut g = [0u8; 16];
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        g[15] = last;
        LinkAddr::new(0, qpn, Gid(g))
    }

    fn datagram(ether_type: u16, payload: &[u8]) -> Vec<u8> {
        let mut d = header(ether_type).to_vec();
        d.extend_from_slice(payload);
        d
    }

    /// A 28-byte IPv4 packet (an ICMP echo header), with `pad` bytes after.
    fn ipv4(pad: usize) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        p.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
        p.extend(std::iter::repeat_n(0xee, pad));
        p
    }

    #[test]
    fn ip_and_arp_are_delivered_as_their_lengths_say() {
        let me = addr(0x48, 1);
        let peer = addr(0x49, 2);
        let from = Source {
            qpn: 0x49,
            gid: Some(peer.gid()),
        };
        // Padding after the IP packet (a UD minimum, a sender's slack) is cut.
        let d = datagram(ETHERTYPE_IPV4, &ipv4(6));
        assert_eq!(classify(&d, &from, &me), Ok(Frame::Ipv4(&ipv4(0)[..])));
        let mut v6 = vec![0x60, 0, 0, 0, 0, 8, 58, 255];
        v6.extend_from_slice(&[0; 32]);
        v6.extend_from_slice(&[1; 8]);
        let d = datagram(ETHERTYPE_IPV6, &v6);
        assert_eq!(classify(&d, &from, &me), Ok(Frame::Ipv6(&v6[..])));
        let arp = Arp::request(peer, Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
        let d = datagram(ETHERTYPE_ARP, &arp.to_bytes());
        assert_eq!(classify(&d, &from, &me), Ok(Frame::Arp(arp)));
    }

    /// The bad inputs of a hostile sender, each dropped with its reason and
    /// counted.
    #[test]
    fn bad_datagrams_are_dropped_and_counted_by_reason() {
        let me = addr(0x48, 1);
        let peer = addr(0x49, 2);
        let from = Source {
            qpn: 0x49,
            gid: Some(peer.gid()),
        };
        let arp = |sender: LinkAddr| {
            datagram(
                ETHERTYPE_ARP,
                &Arp::request(
                    sender,
                    Ipv4Addr::new(10, 0, 0, 9),
                    Ipv4Addr::new(10, 0, 0, 1),
                )
                .to_bytes(),
            )
        };
        let mut eth_arp = arp(peer);
        eth_arp[HEADER_LEN + 4] = 6; // an Ethernet ARP's hardware length
        let mut long_ip = datagram(ETHERTYPE_IPV4, &ipv4(0));
        long_ip[HEADER_LEN + 3] = 200; // total length past the datagram
        let cases: Vec<(Vec<u8>, Source, Drop)> = vec![
            (vec![0x08, 0x00, 0], from, Drop::Short(3)),
            (datagram(0x88b5, &[0; 40]), from, Drop::EtherType(0x88b5)),
            (eth_arp, from, Drop::Arp(ArpError::HardwareLen(6))),
            (long_ip, from, Drop::Ip("IPv4 lengths do not fit")),
            (
                datagram(ETHERTYPE_IPV6, &ipv4(20)),
                from,
                Drop::Ip("IPv6 EtherType, other IP version"),
            ),
            // Our own multicast, looped back.
            (
                arp(me),
                Source {
                    qpn: 0x48,
                    gid: Some(me.gid()),
                },
                Drop::Own,
            ),
            // An ARP that names another QP than the one that sent it.
            (
                arp(addr(0x77, 2)),
                from,
                Drop::Forged {
                    claimed: 0x77,
                    actual: 0x49,
                },
            ),
            // The right QPN from another port's GID.
            (
                arp(addr(0x49, 3)),
                from,
                Drop::Forged {
                    claimed: 0x49,
                    actual: 0x49,
                },
            ),
        ];
        let mut drops = Drops::default();
        for (d, src, want) in &cases {
            let got = classify(d, src, &me);
            assert_eq!(got, Err(*want));
            drops.count(&got.unwrap_err());
        }
        assert_eq!(
            drops,
            Drops {
                short: 1,
                ether_type: 1,
                ip: 2,
                arp: 1,
                own: 1,
                forged: 2
            }
        );
        assert_eq!(drops.total(), cases.len() as u64);
    }

    /// No prefix of a good datagram, and no byte changed in one, panics.
    #[test]
    fn no_byte_string_panics() {
        let me = addr(0x48, 1);
        let from = Source {
            qpn: 0x49,
            gid: None,
        };
        let peer = addr(0x49, 2);
        for d in [
            datagram(ETHERTYPE_IPV4, &ipv4(0)),
            datagram(
                ETHERTYPE_ARP,
                &Arp::request(peer, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST).to_bytes(),
            ),
        ] {
            for n in 0..=d.len() {
                let _ = classify(&d[..n], &from, &me);
                for i in 0..n {
                    for v in [0u8, 0x0f, 0x40, 0x60, 0xff] {
                        let mut e = d[..n].to_vec();
                        e[i] = v;
                        let _ = classify(&e, &from, &me);
                    }
                }
            }
        }
    }
}
