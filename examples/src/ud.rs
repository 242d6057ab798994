//! The UD endpoint that `udaddy` and `mckey` share: a CM id that owns a UD
//! queue pair, its PD, CQ and message buffer, and where its datagrams go.
//!
//! The buffer holds the 40-byte GRH that precedes every UD receive, then
//! the payload (a byte pattern: rdma-core's tools send whatever is in
//! memory).

use std::time::Instant;

use rdma::cm::CmId;
use rdma::{
    AccessFlags, AddressHandle, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType,
    RecvWr, SendWr, WorkCompletion,
};

/// The GRH in front of every UD receive.
pub const GRH: usize = 40;

type Error = Box<dyn std::error::Error>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// Where datagrams go: an address handle, the remote QP number and QKey.
pub type Dest = (AddressHandle, u32, u32);

/// The verbs resources of one endpoint; the QP belongs to the CM id.
pub struct UdRes {
    pub pd: ProtectionDomain,
    pub cq: CompletionQueue,
    /// GRH, then `size` bytes of payload.
    pub mr: MemoryRegion,
    size: usize,
}

impl UdRes {
    /// Creates the PD, one CQ for `count` sends and `count` receives, the
    /// id's UD QP (on its device) and a buffer for a GRH and `size` bytes,
    /// the payload set to a byte pattern; then posts `recvs` receives of a
    /// whole datagram with its GRH.
    pub fn new(id: &mut CmId, count: u32, size: u32, recvs: u32) -> Result<UdRes> {
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let n = count.max(1);
        let cq = CompletionQueue::new(&ctx, 2 * n as i32)?;
        let caps = QpCaps {
            max_send_wr: n,
            max_recv_wr: n,
            ..QpCaps::default()
        };
        id.create_qp(&pd, QpType::Ud, &cq, &cq, caps)?;
        let size = size as usize;
        let mr = MemoryRegion::new(&pd, GRH + size.max(1), AccessFlags::LOCAL_WRITE)?;
        let pattern: Vec<u8> = (0..size).map(|i| i as u8).collect();
        mr.write(GRH, &pattern)?;
        if recvs > 0 {
            let qp = id.qp().ok_or("the CM id has no QP")?;
            let sge = [mr.sge(..GRH + size)?];
            for _ in 0..recvs {
                qp.post_recv(&mut [RecvWr::new(0, &sge)])?;
            }
        }
        Ok(UdRes { pd, cq, mr, size })
    }

    /// Posts `count` datagrams of the payload to `to` on `id`'s QP: SEND
    /// with the QP's own number as immediate data, as rdma-core's tools do.
    pub fn post_sends(&self, id: &CmId, to: &Dest, count: u32, signaled: bool) -> Result<()> {
        let qp = id.qp().ok_or("the CM id has no QP")?;
        let (ah, qpn, qkey) = to;
        let sge = [self.mr.sge(GRH..GRH + self.size)?];
        for _ in 0..count {
            let wr = SendWr::send_with_imm(1, &sge, qp.qp_num()).ud(ah, *qpn, *qkey);
            let wr = if signaled { wr.signaled() } else { wr };
            qp.post_send(&mut [wr])?;
        }
        Ok(())
    }

    /// Waits until `deadline` for `n` completions; every one must succeed.
    /// `what` names them in the error.
    pub fn poll(&self, n: u32, deadline: Instant, what: &str) -> Result<Vec<WorkCompletion>> {
        let n = n as usize;
        let mut buf = vec![WorkCompletion::ZERO; n];
        let left = deadline.saturating_duration_since(Instant::now());
        let got = self.cq.wait(&mut buf[..], n, left)?;
        if let Some(wc) = got.iter().find(|wc| !wc.is_success()) {
            return Err(format!("completion failed: {wc:?}").into());
        }
        if got.len() < n {
            return Err(format!("{} of {n} {what} completed in time", got.len()).into());
        }
        Ok(got.to_vec())
    }
}

/// One connection of `udaddy` or `mckey`: the id (owning its UD QP), its
/// resources once its address is resolved, and where its datagrams go once
/// known (the peer, or the multicast group).
pub struct UdNode {
    pub id: CmId,
    pub res: Option<UdRes>,
    pub dest: Option<Dest>,
}

impl UdNode {
    /// A node of `id`, nothing set up yet.
    pub fn new(id: CmId) -> UdNode {
        UdNode {
            id,
            res: None,
            dest: None,
        }
    }

    /// The resources, once set up.
    pub fn res(&self) -> Result<&UdRes> {
        Ok(self.res.as_ref().ok_or("no resources")?)
    }

    /// Posts `count` datagrams to the node's destination (nothing before
    /// it is known).
    pub fn post_sends(&self, count: u32, signaled: bool) -> Result<()> {
        match (&self.res, &self.dest) {
            (Some(res), Some(to)) => res.post_sends(&self.id, to, count, signaled),
            _ => Ok(()),
        }
    }
}
