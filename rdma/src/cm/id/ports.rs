//! The ports of a CM id's addresses, as librdmacm reads them
//! (`rdma_get_src_port`, `rdma_get_dst_port`).

use rdmacm_sys as cm;

use super::CmId;

impl CmId {
    /// The local port (`rdma_get_src_port`): the port of
    /// [`local_addr`](Self::local_addr), for IPv4, IPv6 and InfiniBand
    /// (`AF_IB`) addresses alike. 0 while the id has no local address (not
    /// bound, not resolved): what librdmacm returns for an address of no
    /// family.
    pub fn local_port(&self) -> u16 {
        // SAFETY: a live id; librdmacm reads the route's source address,
        // whose writes (bind, resolution, connect requests) the lock keeps
        // from overlapping the read.
        u16::from_be(self.locked(|| unsafe { cm::rdma_get_src_port(self.as_raw()) }))
    }

    /// The peer's port (`rdma_get_dst_port`): the port of
    /// [`peer_addr`](Self::peer_addr); 0 while the id has no peer address
    /// (before address resolution, or a listener).
    pub fn peer_port(&self) -> u16 {
        // SAFETY: as in `local_port`, for the route's destination address.
        u16::from_be(self.locked(|| unsafe { cm::rdma_get_dst_port(self.as_raw()) }))
    }
}
