//! The UD side: one UD queue pair, its completion queues (awaited through
//! the runtime), and registered slots for the datagrams in both
//! directions, allocated once.

use rdma::{
    AccessFlags, AddressHandle, AsyncCompletionQueue, Context, InitAttr, MemoryRegion,
    ProtectionDomain, QpCaps, QpType, QueuePair, RecvWr, RtsAttr, SendWr, WorkCompletion,
};

use rdma_ipoib::encap;

/// The 40 bytes in front of every UD receive.
pub const GRH: usize = 40;
/// Send slots (datagrams in flight).
pub const SENDS: u32 = 128;
/// Receive slots.
pub const RECVS: u32 = 256;

/// The queue pair and its buffers.
pub struct Ud {
    pub pd: ProtectionDomain,
    pub qp: QueuePair,
    pub scq: AsyncCompletionQueue,
    pub rcq: AsyncCompletionQueue,
    smr: MemoryRegion,
    rmr: MemoryRegion,
    /// The port's MTU: the largest datagram, header included.
    mtu: usize,
    /// The free send slots, and whether each slot is in flight (so that a
    /// completion frees its slot once, in constant time).
    free: Vec<u32>,
    busy: Vec<bool>,
    qkey: u32,
}

impl Ud {
    /// The QP (still in RESET) and its buffers, for datagrams of `mtu`
    /// bytes. Inside the runtime.
    pub fn new(ctx: &Context, mtu: u32) -> rdma::Result<Ud> {
        let pd = ProtectionDomain::new(ctx)?;
        let scq = AsyncCompletionQueue::create(ctx, SENDS as i32)?;
        let rcq = AsyncCompletionQueue::create(ctx, RECVS as i32)?;
        let qp = QueuePair::builder(&pd, QpType::Ud, scq.cq())
            .recv_cq(rcq.cq())
            .caps(QpCaps {
                max_send_wr: SENDS,
                max_recv_wr: RECVS,
                max_send_sge: 1,
                max_recv_sge: 1,
                ..QpCaps::default()
            })
            .build()?;
        let mtu = mtu as usize;
        let smr = MemoryRegion::new(&pd, SENDS as usize * mtu, AccessFlags::LOCAL_WRITE)?;
        let rmr = MemoryRegion::new(&pd, RECVS as usize * (GRH + mtu), AccessFlags::LOCAL_WRITE)?;
        Ok(Ud {
            pd,
            qp,
            scq,
            rcq,
            smr,
            rmr,
            mtu,
            free: (0..SENDS).rev().collect(),
            busy: vec![false; SENDS as usize],
            qkey: 0,
        })
    }

    /// Brings the QP to RTS with `qkey` on P_Key index `pkey_index` of
    /// `port`, and posts every receive slot.
    pub fn start(&mut self, port: u8, pkey_index: u16, qkey: u32) -> rdma::Result<()> {
        self.qp.to_init(&InitAttr {
            qkey,
            pkey_index,
            ..InitAttr::new(port)
        })?;
        self.qp.to_rtr(None)?;
        self.qp.to_rts(&RtsAttr::default())?;
        self.qkey = qkey;
        for slot in 0..RECVS {
            self.post_recv(u64::from(slot))?;
        }
        Ok(())
    }

    /// The largest payload after the encapsulation header.
    pub fn max_payload(&self) -> usize {
        self.mtu - encap::HEADER_LEN
    }

    /// Whether a send slot is free.
    pub fn can_send(&self) -> bool {
        !self.free.is_empty()
    }

    /// Sends `payload` of `ether_type` to QP `qpn` through `ah`. `Ok(false)`:
    /// no slot free, or a payload longer than the MTU allows; nothing sent.
    pub fn send(
        &mut self,
        ah: &AddressHandle,
        qpn: u32,
        ether_type: u16,
        payload: &[u8],
    ) -> rdma::Result<bool> {
        if payload.len() > self.max_payload() {
            return Ok(false);
        }
        let Some(slot) = self.free.pop() else {
            return Ok(false);
        };
        let off = slot as usize * self.mtu;
        self.smr.write(off, &encap::header(ether_type))?;
        self.smr.write(off + encap::HEADER_LEN, payload)?;
        let len = encap::HEADER_LEN + payload.len();
        let sge = [self.smr.sge(off..off + len)?];
        let r = self.qp.post_send(&mut [SendWr::send(u64::from(slot), &sge)
            .ud(ah, qpn, self.qkey)
            .signaled()]);
        if r.is_err() {
            self.free.push(slot);
        } else {
            self.busy[slot as usize] = true;
        }
        r.map(|()| true)
    }

    /// A send completed: its slot is free again.
    pub fn sent(&mut self, wc: &WorkCompletion) {
        let slot = wc.wr_id();
        if let Some(b) = usize::try_from(slot)
            .ok()
            .and_then(|i| self.busy.get_mut(i))
        {
            if std::mem::take(b) {
                self.free.push(slot as u32);
            }
        }
    }

    /// Copies receive `wc`'s GRH and datagram into `grh` and `out` (which
    /// holds the MTU); the datagram's length. Then posts the slot again.
    pub fn received(
        &self,
        wc: &WorkCompletion,
        grh: &mut [u8; GRH],
        out: &mut [u8],
    ) -> rdma::Result<usize> {
        let slot = wc.wr_id();
        let off = slot as usize * (GRH + self.mtu);
        let len = (wc.byte_len() as usize)
            .saturating_sub(GRH)
            .min(self.mtu)
            .min(out.len());
        self.rmr.read(off, grh)?;
        self.rmr.read(off + GRH, &mut out[..len])?;
        self.post_recv(slot)?;
        Ok(len)
    }

    /// Posts receive slot `slot` again (after a failed completion).
    pub fn post_recv(&self, slot: u64) -> rdma::Result<()> {
        let off = slot as usize * (GRH + self.mtu);
        let sge = [self.rmr.sge(off..off + GRH + self.mtu)?];
        self.qp.post_recv(&mut [RecvWr::new(slot, &sge)])
    }
}
