//! Address resolution through a CM id's event channel, and events of the
//! program's own on that channel (librdmacm of rdma-core v65 and newer).
//!
//! [`CmId::resolve_addrinfo`] (`rdma_resolve_addrinfo`) answers what
//! [`AddrInfo::resolve`] answers, but on the id's channel: an
//! [`AddrInfoResolved`](CmEventKind::AddrInfoResolved) event (or
//! [`AddrInfoError`](CmEventKind::AddrInfoError)) arrives there, and
//! [`CmId::query_addrinfo`] (`rdma_query_addrinfo`) takes the result. A
//! name lookup (DNS, librdmacm's only resolution besides the InfiniBand SA,
//! which this crate does not ask for) runs inside the call, so a name
//! that is not numeric may block it; a numeric one does not.
//!
//! [`CmId::write_user_event`] (`rdma_write_cm_event`) puts a
//! [`User`](CmEventKind::User) event with a status and a value of the
//! program's on the id's channel, for example to wake a thread that waits
//! there. Both need the kernel's `RDMA_USER_CM_CMD_WRITE_CM_EVENT` (the
//! resolution delivers its event through it).

use std::ffi::{CStr, CString};
use std::ptr::{self, NonNull};

use rdmacm_sys as cm;

use super::{AddrHints, AddrInfo, CmEventKind, CmId, PortSpace};
use crate::{Error, IpFamily, Result};

impl CmId {
    /// Starts resolving `node` (a host name or numeric address) and
    /// `service` (a port number or service name) as [`AddrInfo::resolve`]
    /// does (`rdma_resolve_addrinfo`); the result comes as an
    /// [`AddrInfoResolved`](CmEventKind::AddrInfoResolved) event on the
    /// id's channel, taken by [`query_addrinfo`](Self::query_addrinfo).
    ///
    /// A host name that is not numeric is looked up inside the call, with
    /// the channel's lock held: other calls on the channel's ids wait for
    /// it. Use numeric addresses (or `numeric_host`) where that matters.
    ///
    /// A resolution whose result has not been taken yet makes a second one
    /// fail with `EBUSY`; a name that does not resolve gives
    /// `EADDRNOTAVAIL` with the resolver's reason (and no event); a NUL
    /// byte `EINVAL`.
    pub fn resolve_addrinfo(
        &self,
        node: Option<&str>,
        service: Option<&str>,
        hints: &AddrHints,
    ) -> Result<()> {
        const VERB: &str = "rdma_resolve_addrinfo";
        let c = |s: Option<&str>, what: &str| -> Result<Option<CString>> {
            s.map(CString::new)
                .transpose()
                .map_err(|_| Error::invalid(VERB, format!("the {what} holds a NUL byte")))
        };
        let (node_c, service_c) = (c(node, "node")?, c(service, "service")?);
        let h = raw_hints(hints);
        let as_ptr = |s: &Option<CString>| s.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        // SAFETY: a live id; NUL-terminated strings or NULL and complete
        // hints, all read during the call only; the channel's lock is held,
        // so no event of the id is processed meanwhile.
        let r = self.channel().inner.locked(|| unsafe {
            cm::rdma_resolve_addrinfo(self.as_raw(), as_ptr(&node_c), as_ptr(&service_c), &h)
        });
        if r == 0 {
            return Ok(());
        }
        Err(resolve_error(VERB, node, service))
    }

    /// Takes the address information a resolution
    /// ([`resolve_addrinfo`](Self::resolve_addrinfo)) found, once its
    /// [`AddrInfoResolved`](CmEventKind::AddrInfoResolved) event has been
    /// read (`rdma_query_addrinfo`). Without one (none started, not
    /// finished, failed, or taken already): `ENOENT`.
    pub fn query_addrinfo(&self) -> Result<AddrInfo> {
        const VERB: &str = "rdma_query_addrinfo";
        let mut raw = ptr::null_mut();
        // SAFETY: a live id; `raw` is writable and set on success only; the
        // channel's lock is held.
        let r = self
            .channel()
            .inner
            .locked(|| unsafe { cm::rdma_query_addrinfo(self.as_raw(), &mut raw) });
        if r != 0 {
            let e = Error::last(VERB);
            return Err(if e.errno() == libc::ENOENT {
                e.with_hint(
                    "no resolved address information: start resolve_addrinfo and read its AddrInfoResolved event first",
                )
            } else {
                e
            });
        }
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::new(VERB, libc::ENOENT).with_hint("an empty list"))?;
        // SAFETY: librdmacm handed the list over (it no longer holds it);
        // the value frees it with rdma_freeaddrinfo, as its man page asks.
        Ok(unsafe { AddrInfo::from_raw(raw) })
    }

    /// Puts a [`User`](CmEventKind::User) event about this id, with
    /// `status` and `arg`, on its channel (`rdma_write_cm_event`): whoever
    /// reads the channel gets it ([`CmEvent::user_arg`](super::CmEvent::user_arg)).
    /// A kernel without the command answers `EINVAL` or `ENOSYS`.
    pub fn write_user_event(&self, status: i32, arg: u64) -> Result<()> {
        const VERB: &str = "rdma_write_cm_event";
        // SAFETY: a live id on a live channel; plain values.
        let r =
            unsafe { cm::rdma_write_cm_event(self.as_raw(), CmEventKind::User.raw(), status, arg) };
        if r != 0 {
            return Err(Error::last(VERB));
        }
        Ok(())
    }
}

/// The C hints of `hints`, as [`AddrInfo::resolve`] makes them.
fn raw_hints(hints: &AddrHints) -> cm::rdma_addrinfo {
    // SAFETY: plain data; zero is valid for every field.
    let mut h: cm::rdma_addrinfo = unsafe { std::mem::zeroed() };
    let mut flags = 0;
    if hints.passive {
        flags |= cm::RAI_PASSIVE;
    }
    if hints.numeric_host {
        flags |= cm::RAI_NUMERICHOST;
    }
    h.ai_flags = flags as i32;
    h.ai_family = match hints.family {
        None => 0,
        Some(IpFamily::V4) => libc::AF_INET,
        Some(IpFamily::V6) => libc::AF_INET6,
    };
    h.ai_port_space = hints.port_space.raw() as i32;
    h.ai_qp_type = match hints.port_space {
        PortSpace::Udp | PortSpace::IpoIb => crate::sys::IBV_QPT_UD,
        PortSpace::Tcp | PortSpace::Ib => crate::sys::IBV_QPT_RC,
    } as i32;
    h
}

/// The error of a resolution that did not start. librdmacm reports the
/// resolver's failures as a negative `getaddrinfo` code in errno.
fn resolve_error(verb: &'static str, node: Option<&str>, service: Option<&str>) -> Error {
    let code = crate::error::errno();
    if code >= 0 {
        let e = Error::last(verb);
        return if e.errno() == libc::EBUSY {
            e.with_hint(
                "a resolution of this id is in progress: take its result (query_addrinfo) first",
            )
        } else {
            e
        };
    }
    // librdmacm sets errno to what rdma_getaddrinfo returned: a
    // getaddrinfo code, or -1 for its own failures, which is also
    // EAI_BADFLAGS's value.
    let why = if code == -1 {
        "the resolver failed".into()
    } else {
        // SAFETY: gai_strerror returns a static NUL-terminated string for
        // any code.
        unsafe { CStr::from_ptr(libc::gai_strerror(code)) }.to_string_lossy()
    };
    Error::new(verb, libc::EADDRNOTAVAIL).with_hint(format!(
        "{} {}: {why}",
        node.unwrap_or("(any)"),
        service.unwrap_or("(any)")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_carry_flags_family_and_port_space() {
        let h = raw_hints(&AddrHints {
            passive: true,
            numeric_host: true,
            family: Some(IpFamily::V6),
            port_space: PortSpace::Udp,
        });
        assert_eq!(h.ai_flags, (cm::RAI_PASSIVE | cm::RAI_NUMERICHOST) as i32);
        assert_eq!(h.ai_family, libc::AF_INET6);
        assert_eq!(h.ai_port_space, cm::RDMA_PS_UDP as i32);
        assert_eq!(h.ai_qp_type, crate::sys::IBV_QPT_UD as i32);
        let h = raw_hints(&AddrHints::default());
        assert_eq!((h.ai_flags, h.ai_family), (0, 0));
        assert_eq!(h.ai_qp_type, crate::sys::IBV_QPT_RC as i32);
    }
}
