//! The multicast groups of a CM id: joined, remembered, and left (before
//! the id's QP goes).

use std::net::SocketAddr;
use std::ptr;

use rdmacm_sys as cm;

use super::super::addr::RawAddr;
use super::super::channel::ack_events_of;
use super::{rc, CmId};
use crate::Result;

impl CmId {
    /// Joins the multicast group `addr`; completes with `MulticastJoin`
    /// (whose UD parameters address the group) or `MulticastError`.
    pub fn join_multicast(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        self.locked(|| {
            // SAFETY: a live id; a complete address; no context pointer; the
            // lock is held.
            rc("rdma_join_multicast", unsafe {
                cm::rdma_join_multicast(self.as_raw(), a.as_mut_ptr(), ptr::null_mut())
            })?;
            crate::os::lock(&self.groups).push(addr);
            Ok(())
        })
    }

    /// Joins multicast group `addr` as a send-only full member
    /// (`rdma_join_multicast_ex` with `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`):
    /// the id may send to the group (the `MulticastJoin` event brings its
    /// address), but its QP is not attached and receives nothing the group
    /// carries. Left as [`leave_multicast`](Self::leave_multicast) leaves.
    pub fn join_multicast_send_only(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        let mut attr = cm::rdma_cm_join_mc_attr_ex {
            comp_mask: cm::RDMA_CM_JOIN_MC_ATTR_ADDRESS | cm::RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
            join_flags: cm::RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
            addr: a.as_mut_ptr(),
        };
        self.locked(|| {
            // SAFETY: a live id; `attr` is complete for its mask and its
            // address lives for the call (librdmacm copies it); no context
            // pointer; the lock is held.
            rc("rdma_join_multicast_ex", unsafe {
                cm::rdma_join_multicast_ex(self.as_raw(), &mut attr, ptr::null_mut())
            })?;
            crate::os::lock(&self.groups).push(addr);
            Ok(())
        })
    }

    /// Leaves the multicast group `addr`.
    pub fn leave_multicast(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(addr);
        self.locked(|| {
            // librdmacm forgets the group whatever the outcome, once it
            // finds it (EADDRNOTAVAIL: it did not).
            let mut groups = crate::os::lock(&self.groups);
            if let Some(i) = groups.iter().position(|g| *g == addr) {
                groups.remove(i);
            }
            drop(groups);
            // rdma_leave_multicast waits for the group's events, one of
            // which this thread may be handing to a callback.
            ack_events_of(self.as_raw());
            // SAFETY: a live id; a complete address; the lock is held, and
            // every read acknowledges its event before it lets go of it, so
            // the wait for the group's events ends.
            rc("rdma_leave_multicast", unsafe {
                cm::rdma_leave_multicast(self.as_raw(), a.as_mut_ptr())
            })
        })
    }
}
