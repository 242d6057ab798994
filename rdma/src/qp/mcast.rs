//! The multicast groups of a UD queue pair through verbs alone
//! (`ibv_attach_mcast`, `ibv_detach_mcast`): attached, remembered, and
//! detached before the QP is destroyed.

use super::{QpType, QueuePair};
use crate::{sys, Error, Gid, Result};

/// Whether `gid` names a multicast group: an IPv6 multicast address
/// (`ff00::/8`, which holds the InfiniBand multicast GIDs) or an
/// IPv4-mapped multicast address (`::ffff:224.0.0.0/100`, RoCE's for IPv4
/// groups), as the kernel's `rdma_is_multicast_addr` reads it.
pub(crate) fn is_multicast(gid: Gid) -> bool {
    let ip = gid.to_ipv6();
    ip.is_multicast() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_multicast())
}

impl QueuePair {
    /// Attaches this UD QP to the multicast group `gid` with multicast LID
    /// `lid` (`ibv_attach_mcast`): the QP then receives the datagrams sent
    /// to the group (destination QPN `0xFFFFFF`, the group's GID in the
    /// GRH). On RoCE the LID is unused (give 0), and the datagrams reach
    /// this host's stack only where its netdev is a member of the IP group.
    /// [`CmId::join_multicast`](crate::cm::CmId::join_multicast) makes it
    /// one for IPv4 groups; for IPv6 groups on RoCE v2 the kernel refuses
    /// the CM's join (`ENOTSUPP`), and the program joins the netdev to the
    /// group itself (a socket's IPv6 group membership on the netdev's
    /// interface index, as `rdma-ipoib` does).
    ///
    /// The QP stays attached until [`detach_mcast`](Self::detach_mcast) or
    /// until it is dropped, which detaches it first. Attaching to a group it
    /// is attached to already does nothing. Errors: `EINVAL` without a call
    /// when the QP is not UD or `gid` is not a multicast GID; the
    /// provider's `EOPNOTSUPP` where it has no multicast.
    pub fn attach_mcast(&self, gid: Gid, lid: u16) -> Result<()> {
        self.check_mcast("ibv_attach_mcast", gid)?;
        let mut groups = crate::os::lock(&self.mcast);
        if groups.contains(&(gid, lid)) {
            return Ok(());
        }
        let raw: sys::ibv_gid = gid.into();
        // SAFETY: a live QP; `raw` lives for the call (the kernel copies
        // it). The list's lock is held, so the list and the kernel's
        // attachments agree.
        let rc = unsafe { sys::ibv_attach_mcast(self.raw.as_ptr(), &raw, lid) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_attach_mcast", rc));
        }
        groups.push((gid, lid));
        Ok(())
    }

    /// Detaches this QP from the multicast group `gid` with LID `lid`
    /// (`ibv_detach_mcast`); no datagram of the group reaches it afterwards.
    /// Errors: `EINVAL` without a call when the QP is not attached to
    /// that group (or is not UD, or `gid` is not multicast).
    pub fn detach_mcast(&self, gid: Gid, lid: u16) -> Result<()> {
        self.check_mcast("ibv_detach_mcast", gid)?;
        let mut groups = crate::os::lock(&self.mcast);
        let Some(i) = groups.iter().position(|g| *g == (gid, lid)) else {
            return Err(Error::invalid(
                "ibv_detach_mcast",
                "the queue pair is not attached to that group (GID and LID)",
            ));
        };
        let raw: sys::ibv_gid = gid.into();
        // SAFETY: a live QP; `raw` lives for the call; the lock is held.
        let rc = unsafe { sys::ibv_detach_mcast(self.raw.as_ptr(), &raw, lid) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_detach_mcast", rc));
        }
        groups.remove(i);
        Ok(())
    }

    /// The multicast groups (GID, LID) the QP is attached to.
    pub fn mcast_groups(&self) -> Vec<(Gid, u16)> {
        crate::os::lock(&self.mcast).clone()
    }

    fn check_mcast(&self, verb: &'static str, gid: Gid) -> Result<()> {
        if self.qp_type != QpType::Ud {
            return Err(Error::invalid(
                verb,
                "only unreliable datagram (UD) queue pairs join multicast groups",
            ));
        }
        if !is_multicast(gid) {
            return Err(Error::invalid(
                verb,
                format!("{} is not a multicast GID", gid.to_ipv6()),
            ));
        }
        Ok(())
    }

    /// Detaches every group before the QP is destroyed. A detach that fails
    /// leaves the QP attached: its destroy then fails too, and `Drop`
    /// keeps what the QP may still read (see `crate::retire`).
    pub(super) fn detach_all_mcast(&mut self) {
        let groups = std::mem::take(self.mcast.get_mut().unwrap_or_else(|e| e.into_inner()));
        for (gid, lid) in groups {
            let raw: sys::ibv_gid = gid.into();
            // SAFETY: a live QP (not destroyed yet: called first in drop);
            // `raw` lives for the call.
            unsafe { sys::ibv_detach_mcast(self.raw.as_ptr(), &raw, lid) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_gids_are_told_from_unicast() {
        let v6: std::net::Ipv6Addr = "ff0e::1234".parse().unwrap();
        assert!(is_multicast(Gid(v6.octets())));
        let v4 = std::net::Ipv4Addr::new(239, 1, 2, 3).to_ipv6_mapped();
        assert!(is_multicast(Gid(v4.octets())));
        let uni = std::net::Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped();
        assert!(!is_multicast(Gid(uni.octets())));
        let link: std::net::Ipv6Addr = "fe80::1".parse().unwrap();
        assert!(!is_multicast(Gid(link.octets())));
        assert!(!is_multicast(Gid([0; 16])));
    }
}
