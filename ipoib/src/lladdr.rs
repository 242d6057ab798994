//! The IPoIB link-layer address (RFC 4391 section 9.1.1): one octet of
//! flags, the 24-bit QPN of the interface's UD QP, and the port's GID.

use std::fmt;
use std::str::FromStr;

use rdma::Gid;

/// A 20-byte IPoIB link-layer address.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkAddr(pub [u8; 20]);

impl LinkAddr {
    /// The flag of the first octet that says the interface accepts
    /// connected mode (RFC 4755), as Linux sets it.
    pub const CONNECTED: u8 = 0x80;
    /// The QPN of a multicast destination (all ones).
    pub const MULTICAST_QPN: u32 = 0xff_ffff;

    /// The address of QPN `qpn` (its low 24 bits) at `gid`, flags `flags`.
    pub fn new(flags: u8, qpn: u32, gid: Gid) -> LinkAddr {
        let mut a = [0u8; 20];
        a[0] = flags;
        a[1..4].copy_from_slice(&qpn.to_be_bytes()[1..]);
        a[4..].copy_from_slice(&gid.0);
        LinkAddr(a)
    }

    /// The flags octet.
    pub fn flags(&self) -> u8 {
        self.0[0]
    }

    /// The QPN.
    pub fn qpn(&self) -> u32 {
        u32::from_be_bytes([0, self.0[1], self.0[2], self.0[3]])
    }

    /// The GID.
    pub fn gid(&self) -> Gid {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.0[4..]);
        Gid(g)
    }

    /// Whether the peer accepts connected mode.
    pub fn connected(&self) -> bool {
        self.flags() & Self::CONNECTED != 0
    }

    /// The address from 20 bytes of a packet; `None` when shorter.
    pub fn from_slice(b: &[u8]) -> Option<LinkAddr> {
        Some(LinkAddr(b.get(..20)?.try_into().ok()?))
    }
}

/// As `ip link` prints it: 20 hexadecimal octets separated by colons.
impl fmt::Display for LinkAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for LinkAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LinkAddr {{ flags: {:#04x}, qpn: {:#08x}, gid: {} }}",
            self.flags(),
            self.qpn(),
            self.gid()
        )
    }
}

/// Why a text is no link-layer address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is no IPoIB link-layer address (20 hexadecimal octets separated by colons)")]
pub struct ParseLinkAddrError(pub String);

impl FromStr for LinkAddr {
    type Err = ParseLinkAddrError;
    fn from_str(s: &str) -> Result<LinkAddr, ParseLinkAddrError> {
        let err = || ParseLinkAddrError(s.to_string());
        let mut a = [0u8; 20];
        let mut parts = s.split(':');
        for b in a.iter_mut() {
            let p = parts.next().ok_or_else(err)?;
            if p.is_empty() || p.len() > 2 {
                return Err(err());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(LinkAddr(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_print_as_ip_link_does() {
        let gid: Gid = "fe80::2c9:300:a0b:c0d"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .into();
        let a = LinkAddr::new(LinkAddr::CONNECTED, 0x48, gid);
        assert_eq!((a.flags(), a.qpn(), a.gid()), (0x80, 0x48, gid));
        assert!(a.connected());
        let text = a.to_string();
        assert_eq!(
            text,
            "80:00:00:48:fe:80:00:00:00:00:00:00:02:c9:03:00:0a:0b:0c:0d"
        );
        assert_eq!(text.parse(), Ok(a));
        // Only the low 24 bits of a QPN fit.
        assert_eq!(LinkAddr::new(0, 0x1234_5678, gid).qpn(), 0x34_5678);
    }

    #[test]
    fn bad_text_and_short_bytes_are_refused() {
        let good = "80:00:00:48:fe:80:00:00:00:00:00:00:02:c9:03:00:0a:0b:0c:0d";
        for bad in [
            "",
            &good[3..],                // 19 octets
            &format!("{good}:00"),     // 21
            &good.replace("48", "4g"), // not hex
            &good.replace(":48:", ":048:"),
            &good.replace(":48:", "::"),
        ] {
            assert!(bad.parse::<LinkAddr>().is_err(), "{bad:?}");
        }
        assert_eq!(LinkAddr::from_slice(&[0; 19]), None);
        assert!(LinkAddr::from_slice(&[0; 21]).is_some());
    }
}
