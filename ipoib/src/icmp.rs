//! The answer to a packet too long for the path it must take: an ICMP
//! "fragmentation needed" (IPv4, RFC 1191) or ICMPv6 "packet too big"
//! (RFC 4443), as Linux's IPoIB sends one when a connected-mode packet
//! must go as a datagram (`ipoib_cm_skb_too_long`), so that the sender's
//! kernel lowers its path MTU to the peer and sends smaller packets.
//!
//! A TUN interface cannot hand its kernel a packet from the kernel's own
//! address (the input path drops it as a martian), so the answer comes from
//! the too-long packet's destination: the kernel takes the path MTU from
//! the quoted header, whoever sent the message.
//!
//! [`too_big`] writes into the caller's buffer and allocates nothing.

use std::net::Ipv6Addr;

use crate::nd;

/// The longest answer: IPv6's minimum MTU (an ICMPv6 error quotes as much
/// of the packet as fits in it); IPv4's answers are shorter.
pub const MAX_LEN: usize = 1280;

/// How much of an IPv4 packet an answer quotes: its header and 8 bytes
/// (RFC 792).
const QUOTE4: usize = 8;

/// The ones' complement sum of `b`, folded (RFC 1071), from `sum`.
fn sum16(mut sum: u32, b: &[u8]) -> u32 {
    for c in b.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// Writes into `out` the answer to `p` (an IP packet, from the TUN
/// interface, too long for a path of `mtu` bytes); its length. `None`
/// when no answer is due or possible: no IP packet, a packet cut short,
/// an ICMP error (never answered with another), a later IPv4 fragment, a
/// multicast destination, or `out` shorter than the answer.
pub fn too_big(p: &[u8], mtu: u32, out: &mut [u8]) -> Option<usize> {
    match p.first()? >> 4 {
        4 => too_big4(p, mtu, out),
        6 => too_big6(p, mtu, out),
        _ => None,
    }
}

fn too_big4(p: &[u8], mtu: u32, out: &mut [u8]) -> Option<usize> {
    let ihl = usize::from(p[0] & 0x0f) * 4;
    if ihl < 20 || p.len() < ihl {
        return None;
    }
    let frag_offset = u16::from_be_bytes([p[6], p[7]]) & 0x1fff;
    let (src, dst) = (&p[12..16], &p[16..20]);
    if frag_offset != 0 || dst[0] >= 224 || dst == [255; 4] {
        return None;
    }
    // An ICMP error (not an echo, a timestamp, ...) gets no answer.
    if p[9] == 1 && matches!(p.get(ihl), Some(3 | 4 | 5 | 11 | 12)) {
        return None;
    }
    let quote = p.len().min(ihl + QUOTE4);
    let len = 20 + 8 + quote;
    let out = out.get_mut(..len)?;
    out.fill(0);
    // The IP header: from the packet's destination to its source.
    out[0] = 0x45;
    out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    out[8] = 64;
    out[9] = 1;
    out[12..16].copy_from_slice(dst);
    out[16..20].copy_from_slice(src);
    let c = !(sum16(0, &out[..20]) as u16);
    out[10..12].copy_from_slice(&c.to_be_bytes());
    // Destination unreachable, fragmentation needed, the next hop's MTU.
    let m = &mut out[20..];
    m[0] = 3;
    m[1] = 4;
    m[6..8].copy_from_slice(&(mtu.min(0xffff) as u16).to_be_bytes());
    m[8..].copy_from_slice(&p[..quote]);
    let c = !(sum16(0, m) as u16);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

fn too_big6(p: &[u8], mtu: u32, out: &mut [u8]) -> Option<usize> {
    if p.len() < 40 {
        return None;
    }
    let addr = |b: &[u8]| Ipv6Addr::from(<[u8; 16]>::try_from(b).expect("16 bytes"));
    let (src, dst) = (addr(&p[8..24]), addr(&p[24..40]));
    if dst.is_multicast() || src.is_unspecified() || src.is_multicast() {
        return None;
    }
    // An ICMPv6 error (types below 128) right after the header gets none.
    if p[6] == 58 && p.get(40).is_some_and(|&t| t < 128) {
        return None;
    }
    let quote = p.len().min(MAX_LEN - 48);
    let len = 48 + quote;
    let out = out.get_mut(..len)?;
    out.fill(0);
    out[0] = 0x60;
    out[4..6].copy_from_slice(&((8 + quote) as u16).to_be_bytes());
    out[6] = 58;
    out[7] = 64;
    out[8..24].copy_from_slice(&dst.octets());
    out[24..40].copy_from_slice(&src.octets());
    let m = &mut out[40..];
    m[0] = 2;
    m[4..8].copy_from_slice(&mtu.to_be_bytes());
    m[8..].copy_from_slice(&p[..quote]);
    let c = nd::checksum(dst, src, m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 packet of `len` bytes from 10.0.0.1 to `dst`, protocol
    /// `proto`, its first payload byte `first`.
    fn ip4(len: usize, dst: [u8; 4], proto: u8, first: u8) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&dst);
        p[20] = first;
        p
    }

    fn ip6(len: usize, dst: Ipv6Addr, next: u8, first: u8) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        p[6] = next;
        p[7] = 64;
        p[8..24].copy_from_slice(&"fd77::1".parse::<Ipv6Addr>().unwrap().octets());
        p[24..40].copy_from_slice(&dst.octets());
        p[40] = first;
        p
    }

    #[test]
    fn an_ipv4_packet_gets_fragmentation_needed_from_its_destination() {
        let p = ip4(8028, [10, 0, 0, 2], 1, 8);
        let mut out = [0u8; MAX_LEN];
        let n = too_big(&p, 4092, &mut out).unwrap();
        let a = &out[..n];
        assert_eq!(n, 20 + 8 + 28);
        assert_eq!((a[0], a[9]), (0x45, 1));
        assert_eq!(usize::from(u16::from_be_bytes([a[2], a[3]])), n);
        assert_eq!(
            (&a[12..16], &a[16..20]),
            (&[10, 0, 0, 2][..], &[10, 0, 0, 1][..])
        );
        assert_eq!(sum16(0, &a[..20]), 0xffff, "header checksum");
        assert_eq!((a[20], a[21]), (3, 4));
        assert_eq!(u16::from_be_bytes([a[26], a[27]]), 4092);
        assert_eq!(&a[28..], &p[..28]);
        assert_eq!(sum16(0, &a[20..]), 0xffff, "ICMP checksum");
    }

    #[test]
    fn an_ipv6_packet_gets_packet_too_big_quoting_what_fits() {
        let peer: Ipv6Addr = "fd77::2".parse().unwrap();
        let p = ip6(8048, peer, 58, 128);
        let mut out = [0u8; MAX_LEN];
        let n = too_big(&p, 4092, &mut out).unwrap();
        assert_eq!(n, MAX_LEN);
        let a = &out[..n];
        assert_eq!((a[0], a[6]), (0x60, 58));
        assert_eq!(usize::from(u16::from_be_bytes([a[4], a[5]])), n - 40);
        assert_eq!(&a[8..24], &peer.octets());
        assert_eq!(&a[24..40], &p[8..24]);
        assert_eq!(a[40], 2);
        assert_eq!(u32::from_be_bytes([a[44], a[45], a[46], a[47]]), 4092);
        assert_eq!(&a[48..], &p[..MAX_LEN - 48]);
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&a[8..24]).unwrap());
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&a[24..40]).unwrap());
        assert_eq!(nd::checksum(src, dst, &a[40..]), 0, "checksum");
    }

    #[test]
    fn errors_fragments_multicast_and_garbage_get_no_answer() {
        let mut out = [0u8; MAX_LEN];
        let peer: Ipv6Addr = "fd77::2".parse().unwrap();
        let mut later = ip4(5000, [10, 0, 0, 2], 17, 0);
        later[7] = 1;
        let none: [Vec<u8>; 9] = [
            vec![],
            vec![0x45; 19],
            vec![0x4f; 30],
            vec![0x20; 100],
            ip4(5000, [10, 0, 0, 2], 1, 3),
            later,
            ip4(5000, [239, 1, 2, 3], 17, 0),
            ip6(5000, peer, 58, 1),
            ip6(5000, "ff02::1".parse().unwrap(), 17, 0),
        ];
        for p in &none {
            assert_eq!(
                too_big(p, 4092, &mut out),
                None,
                "{:?}",
                &p[..p.len().min(24)]
            );
        }
        // No room: nothing written past the buffer, no answer.
        let mut small = [0u8; 40];
        assert_eq!(
            too_big(&ip4(5000, [10, 0, 0, 2], 17, 0), 4092, &mut small),
            None
        );
        // An echo request is answered; so is a 1-byte-shorter-than-header
        // quote of a short packet.
        assert!(too_big(&ip4(5000, [10, 0, 0, 2], 1, 8), 4092, &mut out).is_some());
        assert_eq!(
            too_big(&ip4(24, [10, 0, 0, 2], 6, 0), 4092, &mut out),
            Some(52)
        );
    }
}
