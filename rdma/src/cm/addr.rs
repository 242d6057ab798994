//! Socket addresses to and from the C structs librdmacm takes.

use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// A socket address in C form, large enough for IPv4 and IPv6.
pub(crate) struct RawAddr(libc::sockaddr_storage);

impl RawAddr {
    pub(crate) fn new(addr: SocketAddr) -> RawAddr {
        // SAFETY: all-zero bytes are a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                let sin = unsafe {
                    &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
                };
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = a.port().to_be();
                sin.sin_addr = libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                };
            }
            SocketAddr::V6(a) => {
                // SAFETY: as above, for sockaddr_in6.
                let sin6 = unsafe {
                    &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
                };
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_addr = libc::in6_addr {
                    s6_addr: a.ip().octets(),
                };
                sin6.sin6_flowinfo = a.flowinfo();
                sin6.sin6_scope_id = a.scope_id();
            }
        }
        RawAddr(ss)
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
        (&mut self.0 as *mut libc::sockaddr_storage).cast()
    }
}

/// Reads a C socket address; `None` for an unset or non-IP one.
///
/// # Safety
/// `sa` must be NULL or point to a socket address of at least the size its
/// family implies.
pub(crate) unsafe fn from_raw(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees a readable socket address.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in.
            let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6.
            let sin6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

const _: () = assert!(size_of::<libc::sockaddr_storage>() >= size_of::<libc::sockaddr_in6>());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_through_c_form() {
        for a in ["192.0.2.1:7471", "[fd00:1::1]:18515", "0.0.0.0:0"] {
            let addr: SocketAddr = a.parse().unwrap();
            let mut raw = RawAddr::new(addr);
            // SAFETY: `raw` holds a complete socket address.
            assert_eq!(unsafe { from_raw(raw.as_mut_ptr()) }, Some(addr));
        }
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { from_raw(std::ptr::null()) }, None);
    }
}
