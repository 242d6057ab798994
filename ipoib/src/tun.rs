//! The TUN interface: IP packets without a link layer between the kernel
//! and the program (`/dev/net/tun`, `IFF_TUN | IFF_NO_PI`), its MTU,
//! addresses and up flag set through ioctls on a socket. The interface
//! is not persistent: it goes when its file descriptor is closed.

use std::ffi::CStr;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct in6_ifreq` of `<linux/ipv6.h>`.
#[repr(C)]
struct In6Ifreq {
    addr: libc::in6_addr,
    prefixlen: u32,
    ifindex: libc::c_int,
}

fn check(what: &str, rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: plain data; all zeros is a valid ifreq.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= libc::IFNAMSIZ || name.as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is no interface name (at most 15 bytes, no NUL)"),
        ));
    }
    for (d, s) in r.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    Ok(r)
}

/// A socket for the interface ioctls of `family`.
fn socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a plain system call; the descriptor is owned below.
    let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check("socket", fd)?;
    // SAFETY: `fd` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `ioctl(fd, req, r)` on an ifreq-like struct.
fn ioctl<T>(fd: &OwnedFd, req: libc::c_ulong, r: &mut T, what: &str) -> io::Result<()> {
    // SAFETY: `r` is a live, writable struct of the layout `req` takes (the
    // callers pair each request with its struct).
    check(what, unsafe {
        libc::ioctl(fd.as_raw_fd(), req as _, r as *mut T)
    })
}

/// An open TUN interface, registered with the runtime.
pub struct Tun {
    fd: AsyncFd<OwnedFd>,
    name: String,
}

impl Tun {
    /// Creates interface `name` (a pattern such as `ib%d` names the first
    /// free one), non-blocking; must be called inside the runtime.
    pub fn open(name: &str) -> io::Result<Tun> {
        // SAFETY: a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        check("open /dev/net/tun", fd)?;
        // SAFETY: `fd` is a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut r = ifreq(name)?;
        r.ifr_ifru.ifru_flags = IFF_TUN | IFF_NO_PI;
        ioctl(&fd, TUNSETIFF, &mut r, "TUNSETIFF")?;
        // SAFETY: the kernel wrote a NUL-terminated name into the array.
        let name = unsafe { CStr::from_ptr(r.ifr_name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the AsyncFd owns the descriptor, which stays open, and
        // the same, until the registration goes with it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Tun { fd, name })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's index.
    pub fn index(&self) -> io::Result<u32> {
        let name = std::ffi::CString::new(self.name.as_str())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call,
        // which only reads it.
        match unsafe { libc::if_nametoindex(name.as_ptr()) } {
            0 => Err(io::Error::last_os_error()),
            i => Ok(i),
        }
    }

    /// Sets the MTU, the IPv4 address and prefix, brings the interface up,
    /// then adds the IPv6 address (which needs an MTU of 1,280 at least).
    pub fn configure(
        &self,
        mtu: u32,
        v4: (Ipv4Addr, u8),
        v6: Option<(Ipv6Addr, u8)>,
    ) -> io::Result<()> {
        let s = socket(libc::AF_INET)?;
        let mut r = ifreq(&self.name)?;
        r.ifr_ifru.ifru_mtu = mtu as libc::c_int;
        ioctl(&s, libc::SIOCSIFMTU, &mut r, "SIOCSIFMTU")?;
        let sin = |a: Ipv4Addr| {
            // SAFETY: plain data.
            let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sa.sin_family = libc::AF_INET as libc::sa_family_t;
            sa.sin_addr.s_addr = u32::from(a).to_be();
            // SAFETY: sockaddr_in fits in sockaddr (both 16 bytes).
            unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sa) }
        };
        let mut r = ifreq(&self.name)?;
        r.ifr_ifru.ifru_addr = sin(v4.0);
        ioctl(&s, libc::SIOCSIFADDR, &mut r, "SIOCSIFADDR")?;
        let mut r = ifreq(&self.name)?;
        r.ifr_ifru.ifru_netmask = sin(crate::route::netmask(v4.1));
        ioctl(&s, libc::SIOCSIFNETMASK, &mut r, "SIOCSIFNETMASK")?;
        let mut r = ifreq(&self.name)?;
        ioctl(&s, libc::SIOCGIFFLAGS, &mut r, "SIOCGIFFLAGS")?;
        // SAFETY: SIOCGIFFLAGS filled the flags member.
        let flags = unsafe { r.ifr_ifru.ifru_flags };
        r.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        ioctl(&s, libc::SIOCSIFFLAGS, &mut r, "SIOCSIFFLAGS")?;
        if let Some((a, prefix)) = v6 {
            let mut r = ifreq(&self.name)?;
            ioctl(&s, libc::SIOCGIFINDEX, &mut r, "SIOCGIFINDEX")?;
            // SAFETY: SIOCGIFINDEX filled the index member.
            let ifindex = unsafe { r.ifr_ifru.ifru_ifindex };
            let s6 = socket(libc::AF_INET6)?;
            let mut r6 = In6Ifreq {
                addr: libc::in6_addr {
                    s6_addr: a.octets(),
                },
                prefixlen: u32::from(prefix),
                ifindex,
            };
            ioctl(&s6, libc::SIOCSIFADDR, &mut r6, "SIOCSIFADDR (IPv6)")?;
        }
        Ok(())
    }

    /// Reads one packet into `buf` without waiting: `Ok(None)` when none
    /// is there.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe {
            libc::read(
                self.fd.get_ref().as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(e)
        }
    }

    /// Waits until a packet may be there; then [`try_read`](Self::try_read)
    /// until it gives `None`, and wait again.
    pub async fn readable(&self) -> io::Result<()> {
        let mut g = self.fd.readable().await?;
        g.clear_ready();
        Ok(())
    }

    /// Writes one packet (the kernel takes it whole or not at all).
    pub fn write(&self, p: &[u8]) -> io::Result<()> {
        // SAFETY: `p` is readable for its length.
        let n = unsafe { libc::write(self.fd.get_ref().as_raw_fd(), p.as_ptr().cast(), p.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_fit_the_kernel_s_array() {
        let r = ifreq("ipoib0").unwrap();
        let name: Vec<u8> = r.ifr_name.iter().map(|&c| c as u8).collect();
        assert_eq!(&name[..7], b"ipoib0\0");
        assert!(ifreq("fifteen-bytes-x").is_ok());
        for bad in ["sixteen-bytes-xx", "a\0b"] {
            assert_eq!(
                ifreq(bad).err().map(|e| e.kind()),
                Some(io::ErrorKind::InvalidInput),
                "{bad:?}"
            );
        }
    }
}
