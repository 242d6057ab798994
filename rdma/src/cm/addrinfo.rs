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

use std::ptr::{self, NonNull};

use rdmacm_sys as cm;

use super::{ep, AddrHints, AddrInfo, CmEventKind, CmId};
use crate::{Error, Result};

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
        let (node_c, service_c) = ep::c_names(VERB, node, service)?;
        let h = hints.to_raw();
        // SAFETY: a live id; NUL-terminated strings or NULL and complete
        // hints, all read during the call only; the channel's lock is held,
        // so no event of the id is processed meanwhile.
        let r = self.channel().inner.locked(|| unsafe {
            cm::rdma_resolve_addrinfo(self.as_raw(), ep::c_ptr(&node_c), ep::c_ptr(&service_c), &h)
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
        ep::gai_reason(code)
    };
    ep::unresolved(verb, &why, node, service)
}
