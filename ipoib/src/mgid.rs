//! The multicast GIDs of IPoIB (RFC 4391 section 4): a group per IPv4 or
//! IPv6 multicast address of a partition, and the broadcast group.
//!
//! An IPoIB MGID is `ff1S:SIGN:PKEY:...`: `S` the scope, `SIGN` the IPoIB
//! signature (0x401b for IPv4, 0x601b for IPv6), then the P_Key; IPv4 puts
//! the low 28 bits of the group address in the last 32 bits, IPv6 the low
//! 80 bits of its address in the last 80.

use std::net::{Ipv4Addr, Ipv6Addr};

use rdma::Gid;

/// The IPv4 signature.
pub const IPV4_SIGNATURE: u16 = 0x401b;
/// The IPv6 signature.
pub const IPV6_SIGNATURE: u16 = 0x601b;
/// Link-local scope, the default of IPoIB interfaces.
pub const LINK_LOCAL: u8 = 2;

fn head(scope: u8, signature: u16, pkey: u16) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xff;
    g[1] = 0x10 | (scope & 0x0f);
    g[2..4].copy_from_slice(&signature.to_be_bytes());
    // The full-membership bit is set in the MGID's P_Key, as Linux does.
    g[4..6].copy_from_slice(&(pkey | 0x8000).to_be_bytes());
    g
}

/// The IPv4 broadcast group of partition `pkey`: `ff1S:401b:PKEY::ffff:ffff`.
/// It also carries ARP and the IPv4 limited broadcast.
pub fn ipv4_broadcast(pkey: u16, scope: u8) -> Gid {
    let mut g = head(scope, IPV4_SIGNATURE, pkey);
    g[12..].copy_from_slice(&[0xff; 4]);
    Gid(g)
}

/// The group of IPv4 multicast address `addr` (224.0.0.0/4); `None` for a
/// unicast address. 255.255.255.255 is the broadcast group.
pub fn ipv4(addr: Ipv4Addr, pkey: u16, scope: u8) -> Option<Gid> {
    if addr.is_broadcast() {
        return Some(ipv4_broadcast(pkey, scope));
    }
    if !addr.is_multicast() {
        return None;
    }
    let mut g = head(scope, IPV4_SIGNATURE, pkey);
    g[12..].copy_from_slice(&(u32::from(addr) & 0x0fff_ffff).to_be_bytes());
    Some(Gid(g))
}

/// The group of IPv6 multicast address `addr` (ff00::/8); `None` for any
/// other. The all-nodes address ff02::1 maps to `ff1S:601b:PKEY::1`, the
/// IPv6 counterpart of the broadcast group.
pub fn ipv6(addr: Ipv6Addr, pkey: u16, scope: u8) -> Option<Gid> {
    if !addr.is_multicast() {
        return None;
    }
    let mut g = head(scope, IPV6_SIGNATURE, pkey);
    g[6..].copy_from_slice(&addr.octets()[6..]);
    Some(Gid(g))
}

/// The solicited-node multicast address of `addr` (RFC 4291 2.7.1):
/// ff02::1:ffXX:XXXX with its low 24 bits, where neighbour solicitations
/// for it are sent.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(g: Gid) -> String {
        g.to_ipv6().to_string()
    }

    /// The groups Linux's ib_ipoib joins (`ip maddr` on an ib0 of P_Key
    /// 0xffff): the broadcast group, the IPv4 all-hosts group and the IPv6
    /// all-nodes and solicited-node groups.
    #[test]
    fn groups_are_those_of_the_kernel() {
        assert_eq!(
            text(ipv4_broadcast(0xffff, LINK_LOCAL)),
            "ff12:401b:ffff::ffff:ffff"
        );
        assert_eq!(
            text(ipv4(Ipv4Addr::new(224, 0, 0, 1), 0xffff, LINK_LOCAL).unwrap()),
            "ff12:401b:ffff::1"
        );
        // The low 28 bits of the group address: all but 224/4's prefix.
        assert_eq!(
            text(ipv4(Ipv4Addr::new(239, 1, 2, 3), 0xffff, LINK_LOCAL).unwrap()),
            "ff12:401b:ffff::f01:203"
        );
        assert_eq!(
            text(ipv6("ff02::1".parse().unwrap(), 0xffff, LINK_LOCAL).unwrap()),
            "ff12:601b:ffff::1"
        );
        let sn = solicited_node("fe80::2c9:300:a0b:c0d".parse().unwrap());
        assert_eq!(sn.to_string(), "ff02::1:ff0b:c0d");
        assert_eq!(
            text(ipv6(sn, 0xffff, LINK_LOCAL).unwrap()),
            "ff12:601b:ffff::1:ff0b:c0d"
        );
    }

    #[test]
    fn partitions_and_scopes_are_in_the_mgid() {
        // A limited member's P_Key 0x7fff names the same group as 0xffff.
        assert_eq!(
            ipv4_broadcast(0x7fff, LINK_LOCAL),
            ipv4_broadcast(0xffff, LINK_LOCAL)
        );
        assert_eq!(text(ipv4_broadcast(0x8001, 5)), "ff15:401b:8001::ffff:ffff");
        assert_eq!(ipv4(Ipv4Addr::new(10, 0, 0, 1), 0xffff, 2), None);
        assert_eq!(ipv6("fe80::1".parse().unwrap(), 0xffff, 2), None);
        assert_eq!(
            ipv4(Ipv4Addr::BROADCAST, 0xffff, 2),
            Some(ipv4_broadcast(0xffff, 2))
        );
    }
}
