//! ARP over IPoIB (RFC 4391 section 8): hardware type 32, 20-byte
//! hardware addresses ([`LinkAddr`]), IPv4 protocol addresses; 56 bytes.

use std::net::Ipv4Addr;

use crate::LinkAddr;

/// ARP's hardware type of IPoIB.
pub const HTYPE_IPOIB: u16 = 32;
/// The EtherType of IPv4, ARP's protocol type here.
pub const PTYPE_IPV4: u16 = 0x0800;
/// The length of an IPoIB ARP packet.
pub const LEN: usize = 8 + 2 * (20 + 4);

/// A request or a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Who has `target_ip`? (1)
    Request,
    /// `sender_ip` is at `sender`. (2)
    Reply,
}

/// An IPoIB ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arp {
    /// Request or reply.
    pub op: Op,
    /// The sender's link-layer address.
    pub sender: LinkAddr,
    /// The sender's IPv4 address.
    pub sender_ip: Ipv4Addr,
    /// The target's link-layer address (zero in a request).
    pub target: LinkAddr,
    /// The target's IPv4 address.
    pub target_ip: Ipv4Addr,
}

/// Why bytes are no IPoIB ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArpError {
    /// Fewer than [`LEN`] bytes.
    #[error("ARP packet of {0} bytes, shorter than IPoIB's {LEN}")]
    Short(usize),
    /// A hardware type other than 32.
    #[error("ARP hardware type {0}, not IPoIB's {HTYPE_IPOIB}")]
    HardwareType(u16),
    /// A protocol other than IPv4.
    #[error("ARP protocol type {0:#06x}, not IPv4")]
    Protocol(u16),
    /// A hardware address length other than 20.
    #[error("ARP hardware address length {0}, not IPoIB's 20")]
    HardwareLen(u8),
    /// A protocol address length other than 4.
    #[error("ARP protocol address length {0}, not IPv4's 4")]
    ProtocolLen(u8),
    /// An operation other than request and reply.
    #[error("ARP operation {0}, neither request (1) nor reply (2)")]
    Op(u16),
}

impl Arp {
    /// Parses an ARP packet (the bytes after the encapsulation header;
    /// bytes past [`LEN`] are padding and ignored).
    pub fn parse(b: &[u8]) -> Result<Arp, ArpError> {
        if b.len() < LEN {
            return Err(ArpError::Short(b.len()));
        }
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let ip_at = |i: usize| Ipv4Addr::new(b[i], b[i + 1], b[i + 2], b[i + 3]);
        if u16_at(0) != HTYPE_IPOIB {
            return Err(ArpError::HardwareType(u16_at(0)));
        }
        if u16_at(2) != PTYPE_IPV4 {
            return Err(ArpError::Protocol(u16_at(2)));
        }
        if b[4] != 20 {
            return Err(ArpError::HardwareLen(b[4]));
        }
        if b[5] != 4 {
            return Err(ArpError::ProtocolLen(b[5]));
        }
        let op = match u16_at(6) {
            1 => Op::Request,
            2 => Op::Reply,
            o => return Err(ArpError::Op(o)),
        };
        Ok(Arp {
            op,
            sender: LinkAddr::from_slice(&b[8..28]).expect("20 bytes"),
            sender_ip: ip_at(28),
            target: LinkAddr::from_slice(&b[32..52]).expect("20 bytes"),
            target_ip: ip_at(52),
        })
    }

    /// The packet's bytes.
    pub fn to_bytes(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0..2].copy_from_slice(&HTYPE_IPOIB.to_be_bytes());
        b[2..4].copy_from_slice(&PTYPE_IPV4.to_be_bytes());
        b[4] = 20;
        b[5] = 4;
        let op: u16 = match self.op {
            Op::Request => 1,
            Op::Reply => 2,
        };
        b[6..8].copy_from_slice(&op.to_be_bytes());
        b[8..28].copy_from_slice(&self.sender.0);
        b[28..32].copy_from_slice(&self.sender_ip.octets());
        b[32..52].copy_from_slice(&self.target.0);
        b[52..56].copy_from_slice(&self.target_ip.octets());
        b
    }

    /// A request from `me` at `my_ip` for `target_ip`.
    pub fn request(me: LinkAddr, my_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Arp {
        Arp {
            op: Op::Request,
            sender: me,
            sender_ip: my_ip,
            target: LinkAddr([0; 20]),
            target_ip,
        }
    }

    /// The reply of `me` to this request (the target address is mine).
    pub fn reply(&self, me: LinkAddr) -> Arp {
        Arp {
            op: Op::Reply,
            sender: me,
            sender_ip: self.target_ip,
            target: self.sender,
            target_ip: self.sender_ip,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma::Gid;

    fn addr(qpn: u32, last: u8) -> LinkAddr {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = last;
        LinkAddr::new(0, qpn, Gid(g))
    }

    /// The bytes of a request as Linux's ib_ipoib sends it (`arping -I ib0`
    /// from 10.0.0.1, QPN 0x48, to 10.0.0.2), written out field by field.
    #[test]
    fn a_request_has_the_bytes_of_the_rfc_and_a_reply_answers_it() {
        let me = addr(0x48, 1);
        let req = Arp::request(me, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let b = req.to_bytes();
        let mut want = vec![0x00, 0x20, 0x08, 0x00, 20, 4, 0x00, 0x01];
        want.extend_from_slice(&me.0);
        want.extend_from_slice(&[10, 0, 0, 1]);
        want.extend_from_slice(&[0; 20]);
        want.extend_from_slice(&[10, 0, 0, 2]);
        assert_eq!(b.to_vec(), want);
        assert_eq!(Arp::parse(&b), Ok(req));
        let peer = addr(0x49, 2);
        let rep = Arp::parse(&b).unwrap().reply(peer);
        assert_eq!(
            (rep.op, rep.sender, rep.sender_ip, rep.target, rep.target_ip),
            (
                Op::Reply,
                peer,
                Ipv4Addr::new(10, 0, 0, 2),
                me,
                Ipv4Addr::new(10, 0, 0, 1)
            )
        );
        // Padding past 56 bytes is ignored.
        let mut padded = rep.to_bytes().to_vec();
        padded.extend_from_slice(&[0xee; 8]);
        assert_eq!(Arp::parse(&padded), Ok(rep));
    }

    /// Every field that makes a packet no IPoIB ARP is named, and no byte
    /// string, however short or wrong, panics.
    #[test]
    fn hostile_bytes_are_typed_errors() {
        let good = Arp::request(addr(1, 1), Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST).to_bytes();
        let with = |i: usize, v: u8| {
            let mut b = good;
            b[i] = v;
            Arp::parse(&b)
        };
        assert_eq!(Arp::parse(&good[..55]), Err(ArpError::Short(55)));
        assert_eq!(with(1, 1), Err(ArpError::HardwareType(1))); // Ethernet
        assert_eq!(with(2, 0x86), Err(ArpError::Protocol(0x8600)));
        assert_eq!(with(4, 6), Err(ArpError::HardwareLen(6)));
        assert_eq!(with(5, 16), Err(ArpError::ProtocolLen(16)));
        assert_eq!(with(7, 3), Err(ArpError::Op(3)));
        // Every prefix and every one-byte change: an answer, never a panic.
        for n in 0..good.len() {
            let _ = Arp::parse(&good[..n]);
            for v in [0u8, 1, 0x7f, 0xff] {
                let _ = with(n, v);
            }
        }
    }
}
