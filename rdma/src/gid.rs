//! GIDs and GID table entries.

use std::ffi::CStr;
use std::fmt;
use std::net::Ipv6Addr;

use crate::sys;

/// A 128-bit global identifier, in network byte order. On RoCE it is an IPv6
/// address (IPv4-mapped for IPv4), and it prints as one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of subnet prefix `prefix` and interface ID `interface_id`
    /// (host byte order): an InfiniBand port's GID from its subnet prefix
    /// and port GUID.
    pub fn from_parts(prefix: u64, interface_id: u64) -> Gid {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&prefix.to_be_bytes());
        b[8..].copy_from_slice(&interface_id.to_be_bytes());
        Gid(b)
    }
    /// The GID as an IPv6 address.
    pub fn to_ipv6(self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }
    /// The IPv4 address of an IPv4-mapped GID.
    pub fn to_ipv4_mapped(self) -> Option<std::net::Ipv4Addr> {
        self.to_ipv6().to_ipv4_mapped()
    }
    /// The subnet prefix (upper 64 bits), host byte order.
    pub fn subnet_prefix(self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
    /// The interface ID (lower 64 bits), host byte order.
    pub fn interface_id(self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
}

impl From<sys::ibv_gid> for Gid {
    fn from(g: sys::ibv_gid) -> Gid {
        // SAFETY: every bit pattern of the 16-byte union is a valid `raw`.
        Gid(unsafe { g.raw })
    }
}

impl From<Gid> for sys::ibv_gid {
    fn from(g: Gid) -> sys::ibv_gid {
        sys::ibv_gid { raw: g.0 }
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Gid {
        Gid(a.octets())
    }
}

impl fmt::Display for Gid {
    /// The usual colon-separated form of `ibv_devinfo -v` (`fe80:0000:...`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", self.to_ipv6())
    }
}

/// The type of a GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, no IP header).
    RoceV1,
    /// RoCE v2 (UDP/IP).
    RoceV2,
    /// iWARP: the port's MAC address in a link-local form (the kernel
    /// reports it as of type IB; the crate tells it by the device's
    /// transport).
    Iwarp,
    /// A value this crate does not know.
    Other(u32),
}

/// The address family of a RoCE GID: an IPv4-mapped address or an IPv6 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    /// IPv4 (`::ffff:a.b.c.d`).
    V4,
    /// IPv6.
    V6,
}

/// One valid entry of a port's GID table.
///
/// The index and the port are `u8`, as the address vectors that name them
/// take them ([`Path`](crate::Path)`::sgid_index`, the port of an
/// [`InitAttr`](crate::InitAttr)): a GRH's source GID index is 8 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the port's table.
    pub index: u8,
    /// The port (from 1).
    pub port: u8,
    /// Its type.
    pub gid_type: GidType,
    /// The interface index of the netdev it belongs to (0 for none).
    pub ndev_ifindex: u32,
}

impl GidEntry {
    /// The entry, or `None` for one past index 255 (which no address
    /// vector can name). `iwarp`: the device's transport is iWARP.
    pub(crate) fn from_raw(e: &sys::ibv_gid_entry, iwarp: bool) -> Option<GidEntry> {
        Some(GidEntry {
            gid: Gid::from(e.gid),
            index: u8::try_from(e.gid_index).ok()?,
            port: u8::try_from(e.port_num).ok()?,
            gid_type: match e.gid_type {
                sys::IBV_GID_TYPE_IB if iwarp => GidType::Iwarp,
                sys::IBV_GID_TYPE_IB => GidType::Ib,
                sys::IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
                sys::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
                other => GidType::Other(other),
            },
            ndev_ifindex: e.ndev_ifindex,
        })
    }

    /// The IP family of a RoCE entry's address (`None` for InfiniBand and
    /// iWARP GIDs, which are no IP addresses).
    pub fn ip_family(&self) -> Option<IpFamily> {
        match self.gid_type {
            GidType::RoceV1 | GidType::RoceV2 => Some(match self.gid.to_ipv4_mapped() {
                Some(_) => IpFamily::V4,
                None => IpFamily::V6,
            }),
            _ => None,
        }
    }

    /// The name of the entry's netdev (`rd0`), if it has one.
    pub fn netdev(&self) -> Option<String> {
        if self.ndev_ifindex == 0 {
            return None;
        }
        let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
        // SAFETY: `buf` has IF_NAMESIZE bytes, as if_indextoname requires.
        let p = unsafe { libc::if_indextoname(self.ndev_ifindex, buf.as_mut_ptr()) };
        if p.is_null() {
            return None;
        }
        // SAFETY: on success `buf` holds a NUL-terminated name.
        Some(
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// The UDP source port RoCE v2 uses for a GRH flow label
/// (`ibv_flow_label_to_udp_sport`): the label's 20 bits folded into the
/// 14 low bits of a port in 0xC000..=0xFFFF, so that the flows of one QP
/// pair spread over ECMP paths as their labels do. Bits above the 20 of a
/// flow label are ignored.
pub fn flow_label_to_udp_sport(flow_label: u32) -> u16 {
    // SAFETY: a pure function of its argument (bit operations).
    unsafe { sys::ibv_flow_label_to_udp_sport(flow_label) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_prints_like_ibv_devinfo_and_converts_to_ip() {
        let g = Gid::from("::ffff:192.0.2.1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:c000:0201");
        assert_eq!(g.to_ipv4_mapped(), Some("192.0.2.1".parse().unwrap()));
        let ll = Gid::from("fe80::1:2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ll.subnet_prefix(), 0xfe80_0000_0000_0000);
        assert_eq!(ll.interface_id(), 0x0001_0002);
        let raw: sys::ibv_gid = ll.into();
        assert_eq!(Gid::from(raw), ll);
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls the C shim of ibv_flow_label_to_udp_sport")]
    fn every_flow_label_gives_a_roce_port_and_every_port_as_often() {
        let mut hits = vec![0u32; 1 << 14];
        for label in 0..1u32 << 20 {
            let port = super::flow_label_to_udp_sport(label);
            assert!(port >= 0xC000, "{label:#x} -> {port:#x}");
            hits[usize::from(port - 0xC000)] += 1;
            // Only the 20 bits of a flow label count.
            assert_eq!(super::flow_label_to_udp_sport(label | 0xFFF0_0000), port);
        }
        // 2^20 labels over 2^14 ports: the fold is a bijection for each
        // value of the 6 high bits.
        assert!(hits.iter().all(|&h| h == 64), "uneven: {:?}", &hits[..8]);
    }
}
