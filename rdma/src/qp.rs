//! Queue pairs: creation, state transitions and posting.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use crate::sys;
use crate::{
    AccessFlags, CompletionQueue, Error, Gid, ProtectionDomain, RecvWr, Result, SendWr,
    SharedReceiveQueue,
};

/// The transport service of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl QpType {
    fn raw(self) -> sys::ibv_qp_type {
        match self {
            QpType::Rc => sys::IBV_QPT_RC,
            QpType::Uc => sys::IBV_QPT_UC,
            QpType::Ud => sys::IBV_QPT_UD,
        }
    }
}

/// The state of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Just created, or reset.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: outstanding work requests are flushed.
    Error,
    /// A state this crate does not know.
    Unknown(u32),
}

impl QpState {
    fn from_raw(s: sys::ibv_qp_state) -> QpState {
        match s {
            sys::IBV_QPS_RESET => QpState::Reset,
            sys::IBV_QPS_INIT => QpState::Init,
            sys::IBV_QPS_RTR => QpState::Rtr,
            sys::IBV_QPS_RTS => QpState::Rts,
            sys::IBV_QPS_SQD => QpState::Sqd,
            sys::IBV_QPS_SQE => QpState::Sqe,
            sys::IBV_QPS_ERR => QpState::Error,
            other => QpState::Unknown(other),
        }
    }
    fn raw(self) -> sys::ibv_qp_state {
        match self {
            QpState::Reset => sys::IBV_QPS_RESET,
            QpState::Init => sys::IBV_QPS_INIT,
            QpState::Rtr => sys::IBV_QPS_RTR,
            QpState::Rts => sys::IBV_QPS_RTS,
            QpState::Sqd => sys::IBV_QPS_SQD,
            QpState::Sqe => sys::IBV_QPS_SQE,
            QpState::Error => sys::IBV_QPS_ERR,
            QpState::Unknown(s) => s,
        }
    }
}

/// Queue sizes of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests.
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// How to create a queue pair; see [`QueuePair::builder`].
pub struct QpBuilder<'a> {
    pd: &'a ProtectionDomain,
    qp_type: QpType,
    send_cq: &'a CompletionQueue,
    recv_cq: &'a CompletionQueue,
    srq: Option<&'a SharedReceiveQueue>,
    caps: QpCaps,
    sq_sig_all: bool,
    send_ops: u64,
}

bitflags::bitflags! {
    /// Operations an extended QP may post (`IBV_QP_EX_WITH_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SendOps: u64 {
        /// RDMA WRITE.
        const RDMA_WRITE = sys::IBV_QP_EX_WITH_RDMA_WRITE as u64;
        /// RDMA WRITE with immediate.
        const RDMA_WRITE_WITH_IMM = sys::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM as u64;
        /// SEND.
        const SEND = sys::IBV_QP_EX_WITH_SEND as u64;
        /// SEND with immediate.
        const SEND_WITH_IMM = sys::IBV_QP_EX_WITH_SEND_WITH_IMM as u64;
        /// RDMA READ.
        const RDMA_READ = sys::IBV_QP_EX_WITH_RDMA_READ as u64;
        /// Atomic compare-and-swap.
        const ATOMIC_CMP_AND_SWP = sys::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP as u64;
        /// Atomic fetch-and-add.
        const ATOMIC_FETCH_AND_ADD = sys::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD as u64;
    }
}

impl<'a> QpBuilder<'a> {
    /// Queue sizes (default: 64 work requests, one SGE each way, no inline).
    pub fn caps(mut self, caps: QpCaps) -> Self {
        self.caps = caps;
        self
    }
    /// A different CQ for receive completions.
    pub fn recv_cq(mut self, cq: &'a CompletionQueue) -> Self {
        self.recv_cq = cq;
        self
    }
    /// Receives come from `srq` instead of the QP's own receive queue.
    pub fn srq(mut self, srq: &'a SharedReceiveQueue) -> Self {
        self.srq = Some(srq);
        self
    }
    /// Every send generates a completion, `SIGNALED` or not.
    pub fn sq_sig_all(mut self, all: bool) -> Self {
        self.sq_sig_all = all;
        self
    }
    /// Creates an extended QP that can post these operations with
    /// [`QueuePair::wr_batch`], where the provider has extended QPs; a classic
    /// QP where it does not (siw): check [`QueuePair::is_extended`].
    pub fn send_ops(mut self, ops: SendOps) -> Self {
        self.send_ops = ops.bits();
        self
    }

    /// Creates the queue pair, in the RESET state.
    pub fn build(self) -> Result<QueuePair> {
        let caps = sys::ibv_qp_cap {
            max_send_wr: self.caps.max_send_wr,
            max_recv_wr: self.caps.max_recv_wr,
            max_send_sge: self.caps.max_send_sge,
            max_recv_sge: self.caps.max_recv_sge,
            max_inline_data: self.caps.max_inline_data,
        };
        let srq = self.srq.map_or(ptr::null_mut(), |s| s.as_raw());
        if self.send_ops != 0 {
            // SAFETY: plain data.
            let mut attr: sys::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
            attr.send_cq = self.send_cq.as_raw();
            attr.recv_cq = self.recv_cq.as_raw();
            attr.srq = srq;
            attr.cap = caps;
            attr.qp_type = self.qp_type.raw();
            attr.sq_sig_all = self.sq_sig_all as i32;
            attr.comp_mask = sys::IBV_QP_INIT_ATTR_PD | sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            attr.pd = self.pd.as_raw();
            attr.send_ops_flags = self.send_ops;
            // SAFETY: a live context; the CQs, SRQ and PD belong to it and
            // are kept alive by the QP.
            let raw = unsafe { sys::ibv_create_qp_ex(self.pd.context().as_raw(), &mut attr) };
            if let Some(raw) = NonNull::new(raw) {
                // SAFETY: a QP created by ibv_create_qp_ex.
                let ex = NonNull::new(unsafe { sys::ibv_qp_to_qp_ex(raw.as_ptr()) });
                return Ok(self.wrap(raw, attr.cap, ex));
            }
            let e = Error::last("ibv_create_qp_ex");
            if !matches!(e.errno(), libc::EOPNOTSUPP | libc::ENOSYS) {
                return Err(e);
            }
        }
        // SAFETY: plain data.
        let mut attr: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = self.send_cq.as_raw();
        attr.recv_cq = self.recv_cq.as_raw();
        attr.srq = srq;
        attr.cap = caps;
        attr.qp_type = self.qp_type.raw();
        attr.sq_sig_all = self.sq_sig_all as i32;
        // SAFETY: a live PD; CQs and SRQ of its context, kept alive by the QP.
        let raw = unsafe { sys::ibv_create_qp(self.pd.as_raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("ibv_create_qp"))?;
        Ok(self.wrap(raw, attr.cap, None))
    }

    fn wrap(
        self,
        raw: NonNull<sys::ibv_qp>,
        cap: sys::ibv_qp_cap,
        ex: Option<NonNull<sys::ibv_qp_ex>>,
    ) -> QueuePair {
        QueuePair {
            raw,
            ex,
            qp_type: self.qp_type,
            unchecked_send_len: match self.qp_type {
                QpType::Ud => usize::MAX,
                QpType::Rc | QpType::Uc => 1,
            },
            caps: QpCaps {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
            },
            _pd: self.pd.clone(),
            _send_cq: self.send_cq.clone(),
            _recv_cq: self.recv_cq.clone(),
            _srq: self.srq.cloned(),
        }
    }
}

/// A queue pair (`ibv_qp`).
///
/// It keeps its PD, CQs and SRQ alive. Dropping it destroys it; work requests
/// still outstanding are discarded and their memory is never touched again
/// (see [`crate::mr`]).
pub struct QueuePair {
    raw: NonNull<sys::ibv_qp>,
    ex: Option<NonNull<sys::ibv_qp_ex>>,
    qp_type: QpType,
    /// The length of a send list that needs no check before it is linked:
    /// 1 on connected QPs. On UD, where each send needs an address handle,
    /// `usize::MAX`, the length of no slice of requests. One compare in
    /// `post_send` then picks the one-request path.
    unchecked_send_len: usize,
    caps: QpCaps,
    _pd: ProtectionDomain,
    _send_cq: CompletionQueue,
    _recv_cq: CompletionQueue,
    _srq: Option<SharedReceiveQueue>,
}

/// A list of send requests checked and linked once by
/// [`QueuePair::prepare_send`], posted with one provider call per
/// [`post`](Self::post).
///
/// It borrows the queue pair and the requests (and through them their SGEs,
/// memory regions and address handles) for as long as it exists.
pub struct PreparedSend<'q, 'w, 'a> {
    qp: NonNull<sys::ibv_qp>,
    /// The first request's C struct, which is the request itself
    /// (`SendWr` is `repr(C)` with the C struct first); the others follow
    /// it in the slice.
    head: *mut sys::ibv_send_wr,
    len: usize,
    _borrows: PhantomData<(&'q QueuePair, &'w mut [SendWr<'a>])>,
}

impl PreparedSend<'_, '_, '_> {
    /// Posts the prepared list again, with one call to the provider.
    ///
    /// On failure the error says which request was refused; it and the ones
    /// after it were not posted, the ones before it were.
    #[inline]
    pub fn post(&mut self) -> Result<()> {
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is borrowed, so live; the list was checked and
        // linked by `prepare_send` and is borrowed mutably since, so it is
        // still valid and NULL-terminated; its SGEs, inline data and address
        // handles are borrowed by the requests. Memory the device reaches
        // later stays valid or unreachable (see crate::mr).
        let rc = unsafe { sys::ibv_post_send(self.qp.as_ptr(), self.head, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(self.post_error(rc, bad))
    }

    #[cold]
    #[inline(never)]
    fn post_error(&self, rc: i32, bad: *mut sys::ibv_send_wr) -> Error {
        let base = self.head.cast::<SendWr<'_>>();
        // Only addresses are compared; nothing is read.
        let index = (0..self.len).position(|i| ptr::eq(base.wrapping_add(i).cast(), bad));
        post_error("ibv_post_send", rc, index)
    }

    /// The number of requests in the list.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: an empty list cannot be prepared.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the id of request `index` for the next posts (it comes back in
    /// their completions). `index` past the end is an error.
    pub fn set_wr_id(&mut self, index: usize, wr_id: u64) -> Result<()> {
        if index >= self.len {
            return Err(Error::invalid(
                "ibv_post_send",
                format!("request {index} of a prepared list of {}", self.len),
            ));
        }
        // SAFETY: `index` is within the slice that `head` starts and that
        // this value borrows mutably; only the id field is written, through
        // a pointer derived from `head`, so the links stay valid.
        unsafe {
            let wr = self.head.cast::<SendWr<'_>>().add(index);
            (*wr.cast::<sys::ibv_send_wr>()).wr_id = wr_id;
        }
        Ok(())
    }
}

impl fmt::Debug for PreparedSend<'_, '_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedSend")
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: libibverbs allows posting to and modifying a QP from any thread;
// providers lock their queues. The Rust fields are immutable.
unsafe impl Send for QueuePair {}
// SAFETY: as above.
unsafe impl Sync for QueuePair {}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: destroyed once; its PD, CQs and SRQ outlive it (held here).
        unsafe { sys::ibv_destroy_qp(self.raw.as_ptr()) };
    }
}

/// Where a connected QP sends, or what an address handle addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// The destination GID, for a global route (required on RoCE).
    pub dgid: Option<Gid>,
    /// The index of the local GID to send from (with `dgid`).
    pub sgid_index: u8,
    /// The hop limit (with `dgid`).
    pub hop_limit: u8,
    /// The traffic class (with `dgid`).
    pub traffic_class: u8,
    /// The flow label (with `dgid`).
    pub flow_label: u32,
    /// The destination LID (InfiniBand).
    pub dlid: u16,
    /// The service level.
    pub sl: u8,
    /// The local port (from 1).
    pub port: u8,
}

impl Path {
    /// A global route to `dgid` from local GID `sgid_index` on `port`.
    pub fn to_gid(dgid: Gid, sgid_index: u8, port: u8) -> Path {
        Path {
            dgid: Some(dgid),
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            dlid: 0,
            sl: 0,
            port,
        }
    }

    pub(crate) fn raw(&self) -> sys::ibv_ah_attr {
        // SAFETY: plain data.
        let mut ah: sys::ibv_ah_attr = unsafe { std::mem::zeroed() };
        ah.dlid = self.dlid;
        ah.sl = self.sl;
        ah.port_num = self.port;
        if let Some(dgid) = self.dgid {
            ah.is_global = 1;
            ah.grh.dgid = dgid.into();
            ah.grh.sgid_index = self.sgid_index;
            ah.grh.hop_limit = self.hop_limit;
            ah.grh.traffic_class = self.traffic_class;
            ah.grh.flow_label = self.flow_label;
        }
        ah
    }
}

/// An MTU of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU of `bytes` (256..=4096, a power of two).
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        Some(match bytes {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The size in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// RESET -> INIT.
#[derive(Debug, Clone, Copy)]
pub struct InitAttr {
    /// The local port (from 1).
    pub port: u8,
    /// The P_Key index.
    pub pkey_index: u16,
    /// Remote access rights (RC, UC).
    pub access: AccessFlags,
    /// The QKey (UD).
    pub qkey: u32,
}

impl InitAttr {
    /// Port `port`, P_Key index 0, no remote access, QKey 0.
    pub fn new(port: u8) -> InitAttr {
        InitAttr {
            port,
            pkey_index: 0,
            access: AccessFlags::empty(),
            qkey: 0,
        }
    }
}

/// INIT -> RTR, for connected QPs: the remote side.
#[derive(Debug, Clone, Copy)]
pub struct RtrAttr {
    /// The remote QP number.
    pub remote_qpn: u32,
    /// The first PSN expected from the remote side.
    pub rq_psn: u32,
    /// The path MTU.
    pub mtu: Mtu,
    /// The path to the remote side.
    pub path: Path,
    /// Incoming RDMA READs and atomics in flight (RC).
    pub max_dest_rd_atomic: u8,
    /// The RNR NAK timer code (RC).
    pub min_rnr_timer: u8,
}

/// RTR -> RTS.
#[derive(Debug, Clone, Copy)]
pub struct RtsAttr {
    /// The first PSN to send.
    pub sq_psn: u32,
    /// The ACK timeout code (RC): 4.096 us * 2^timeout.
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries (RC; 7 = infinite).
    pub rnr_retry: u8,
    /// Outgoing RDMA READs and atomics in flight (RC).
    pub max_rd_atomic: u8,
}

impl Default for RtsAttr {
    fn default() -> Self {
        RtsAttr {
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}

impl QueuePair {
    /// A builder for a QP of `qp_type` in `pd` whose completions go to `cq`.
    pub fn builder<'a>(
        pd: &'a ProtectionDomain,
        qp_type: QpType,
        cq: &'a CompletionQueue,
    ) -> QpBuilder<'a> {
        QpBuilder {
            pd,
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            caps: QpCaps::default(),
            sq_sig_all: false,
            send_ops: 0,
        }
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: a live QP; qp_num is set at creation.
        unsafe { (*self.raw.as_ptr()).qp_num }
    }

    /// The transport service.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The queue sizes the provider granted.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// Whether the QP was created extended (see [`QpBuilder::send_ops`]).
    pub fn is_extended(&self) -> bool {
        self.ex.is_some()
    }

    /// The raw QP, valid while this value lives.
    #[inline]
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.raw.as_ptr()
    }

    /// The current state (`ibv_query_qp`).
    pub fn state(&self) -> Result<QpState> {
        // SAFETY: plain data.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain data.
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live QP; both out-parameters are writable.
        let rc = unsafe {
            sys::ibv_query_qp(
                self.as_raw(),
                &mut attr,
                sys::IBV_QP_STATE as i32,
                &mut init,
            )
        };
        if rc != 0 {
            return Err(Error::from_rc("ibv_query_qp", rc));
        }
        Ok(QpState::from_raw(attr.qp_state))
    }

    /// Modifies the QP with a raw attribute and mask (`ibv_modify_qp`).
    ///
    /// On failure the error names the transition that was refused.
    pub fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32) -> Result<()> {
        let from = self.state().ok();
        // SAFETY: a live QP; `attr` is a complete attribute for `mask`
        // (a wrong one is refused by the provider with EINVAL).
        let rc = unsafe { sys::ibv_modify_qp(self.as_raw(), attr, mask as i32) };
        if rc == 0 {
            return Ok(());
        }
        let e = Error::from_rc("ibv_modify_qp", rc);
        let to = QpState::from_raw(attr.qp_state);
        Err(match from {
            Some(from) if mask & sys::IBV_QP_STATE != 0 => {
                let why = if e.errno() == libc::EINVAL {
                    format!("transition {from:?} -> {to:?} refused: illegal from this state, or a required attribute is missing or invalid")
                } else {
                    format!("transition {from:?} -> {to:?}")
                };
                e.with_hint(why)
            }
            _ => e,
        })
    }

    /// RESET -> INIT.
    pub fn to_init(&self, init: &InitAttr) -> Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_INIT;
        a.pkey_index = init.pkey_index;
        a.port_num = init.port;
        let mut mask = sys::IBV_QP_STATE | sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT;
        match self.qp_type {
            QpType::Ud => {
                a.qkey = init.qkey;
                mask |= sys::IBV_QP_QKEY;
            }
            QpType::Rc | QpType::Uc => {
                a.qp_access_flags = init.access.bits();
                mask |= sys::IBV_QP_ACCESS_FLAGS;
            }
        }
        self.modify(&mut a, mask)
    }

    /// INIT -> RTR. For UD only the state changes (`rtr` is ignored: pass
    /// `None`); connected QPs need the remote side.
    pub fn to_rtr(&self, rtr: Option<&RtrAttr>) -> Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_RTR;
        let mut mask = sys::IBV_QP_STATE;
        if self.qp_type != QpType::Ud {
            let r = rtr.ok_or_else(|| {
                Error::invalid(
                    "ibv_modify_qp",
                    "a connected QP needs the remote side for RTR",
                )
            })?;
            a.path_mtu = r.mtu as u32;
            a.dest_qp_num = r.remote_qpn;
            a.rq_psn = r.rq_psn;
            a.ah_attr = r.path.raw();
            mask |=
                sys::IBV_QP_AV | sys::IBV_QP_PATH_MTU | sys::IBV_QP_DEST_QPN | sys::IBV_QP_RQ_PSN;
            if self.qp_type == QpType::Rc {
                a.max_dest_rd_atomic = r.max_dest_rd_atomic;
                a.min_rnr_timer = r.min_rnr_timer;
                mask |= sys::IBV_QP_MAX_DEST_RD_ATOMIC | sys::IBV_QP_MIN_RNR_TIMER;
            }
        }
        self.modify(&mut a, mask)
    }

    /// RTR -> RTS.
    pub fn to_rts(&self, rts: &RtsAttr) -> Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_RTS;
        a.sq_psn = rts.sq_psn;
        let mut mask = sys::IBV_QP_STATE | sys::IBV_QP_SQ_PSN;
        if self.qp_type == QpType::Rc {
            a.timeout = rts.timeout;
            a.retry_cnt = rts.retry_cnt;
            a.rnr_retry = rts.rnr_retry;
            a.max_rd_atomic = rts.max_rd_atomic;
            mask |= sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_MAX_QP_RD_ATOMIC;
        }
        self.modify(&mut a, mask)
    }

    /// Moves the QP to `state` with no other attribute (RESET, ERROR, SQD).
    pub fn set_state(&self, state: QpState) -> Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = state.raw();
        self.modify(&mut a, sys::IBV_QP_STATE)
    }

    /// Posts send work requests, in order, with one call to the provider.
    ///
    /// On failure the error says which request was refused; it and the ones
    /// after it were not posted, the ones before it were.
    #[inline]
    pub fn post_send(&self, wrs: &mut [SendWr<'_>]) -> Result<()> {
        // The usual post: one request on a connected QP, linked and posted
        // inline after this one compare.
        if wrs.len() == self.unchecked_send_len {
            // SAFETY: `unchecked_send_len` is 1 or `usize::MAX`, and no slice
            // of `SendWr`s (144 bytes each) is `usize::MAX` long: the slice
            // has exactly one element.
            return self.post_send_one(unsafe { wrs.get_unchecked_mut(0) });
        }
        match wrs {
            // One UD send that has its address handle.
            [wr] if wr.has_ud_address() => self.post_send_one(wr),
            // Any other list, checked and linked out of line.
            _ => self.post_send_list(wrs),
        }
    }

    /// `post_send` of one request, already checked (on a UD QP: it has an
    /// address handle).
    #[inline]
    fn post_send_one(&self, wr: &mut SendWr<'_>) -> Result<()> {
        let head = wr.link(ptr::null_mut());
        // `bad` and, beside it, the head: the provider gets the address of
        // `bad`, so the head waits in memory for the error path instead of in
        // a callee-saved register that the `Ok` path would save and restore.
        let mut bad_and_head = [ptr::null_mut(), head];
        // SAFETY: a live QP; a NULL-terminated list of one request, whose
        // SGE names registered memory (Sge) or inline data copied during the
        // call, and whose address handle (if any) is borrowed for the call.
        // Memory the device reaches later stays valid or unreachable (see
        // crate::mr).
        let rc = unsafe { sys::ibv_post_send(self.as_raw(), head, &mut bad_and_head[0]) };
        if rc == 0 {
            return Ok(());
        }
        let [bad, head] = bad_and_head;
        Err(post_error(
            "ibv_post_send",
            rc,
            ptr::eq(bad, head).then_some(0),
        ))
    }

    /// `post_send` of any list.
    #[inline(never)]
    fn post_send_list(&self, wrs: &mut [SendWr<'_>]) -> Result<()> {
        if self.qp_type == QpType::Ud {
            // A UD send without an address handle would make the provider
            // dereference NULL: refuse it here.
            check_ud_addresses(wrs)?;
        }
        let head = crate::wr::link_list(wrs);
        if head.is_null() {
            return Ok(());
        }
        let mut bad = ptr::null_mut();
        // SAFETY: a live QP; the list is valid and NULL-terminated; every SGE
        // names registered memory (Sge) or inline data copied during the call,
        // and any address handle is borrowed for the call. Memory the device
        // reaches later stays valid or unreachable (see crate::mr).
        let rc = unsafe { sys::ibv_post_send(self.as_raw(), head, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(post_send_error(wrs, rc, bad))
    }

    /// Checks and links a list of send requests once, for posting it many
    /// times with [`PreparedSend::post`], as perftest-style loops post the
    /// same requests again and again.
    ///
    /// The checks of [`post_send`](Self::post_send) (on a UD QP: every
    /// request has its address handle) run here, once; the list stays
    /// borrowed, so it can neither move nor change while prepared, except
    /// for the request ids ([`PreparedSend::set_wr_id`]). An empty list is
    /// refused.
    pub fn prepare_send<'q, 'w, 'a>(
        &'q self,
        wrs: &'w mut [SendWr<'a>],
    ) -> Result<PreparedSend<'q, 'w, 'a>> {
        if wrs.is_empty() {
            return Err(Error::invalid(
                "ibv_post_send",
                "an empty list of work requests cannot be prepared",
            ));
        }
        if self.qp_type == QpType::Ud {
            check_ud_addresses(wrs)?;
        }
        let len = wrs.len();
        // `head` is derived from the slice's own pointer and covers all of
        // it; `wrs` is not used again, so the links stay valid.
        let head = crate::wr::link_list(wrs);
        Ok(PreparedSend {
            qp: self.raw,
            head,
            len,
            _borrows: PhantomData,
        })
    }

    /// Posts receive work requests, in order, with one call to the provider.
    ///
    /// On failure the error says which request was refused, as for
    /// [`post_send`](Self::post_send).
    #[inline]
    pub fn post_recv(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        match wrs {
            [wr] => self.post_recv_one(wr),
            _ => self.post_recv_list(wrs),
        }
    }

    /// `post_recv` of one request.
    #[inline]
    fn post_recv_one(&self, wr: &mut RecvWr<'_>) -> Result<()> {
        let head = wr.link(ptr::null_mut());
        // As in `post_send_one`: the head waits beside `bad` in memory.
        let mut bad_and_head = [ptr::null_mut(), head];
        // SAFETY: a live QP; a NULL-terminated list of one receive into
        // registered memory (see crate::mr for why it stays sound).
        let rc = unsafe { sys::ibv_post_recv(self.as_raw(), head, &mut bad_and_head[0]) };
        if rc == 0 {
            return Ok(());
        }
        let [bad, head] = bad_and_head;
        Err(post_error(
            "ibv_post_recv",
            rc,
            ptr::eq(bad, head).then_some(0),
        ))
    }

    /// `post_recv` of any list.
    #[inline(never)]
    fn post_recv_list(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        let head = crate::wr::link_list(wrs);
        if head.is_null() {
            return Ok(());
        }
        let mut bad = ptr::null_mut();
        // SAFETY: a live QP; a valid NULL-terminated list of receives into
        // registered memory (see crate::mr for why it stays sound).
        let rc = unsafe { sys::ibv_post_recv(self.as_raw(), head, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(post_recv_error(wrs, rc, bad))
    }

    /// Posts a raw list of send work requests.
    ///
    /// # Safety
    /// `wr` must be a valid NULL-terminated list whose SGEs name memory that
    /// stays valid (or is deregistered) until the requests complete.
    #[inline]
    pub unsafe fn post_send_raw(&self, wr: *mut sys::ibv_send_wr) -> Result<()> {
        let mut bad = ptr::null_mut();
        // SAFETY: per the caller's contract.
        let rc = unsafe { sys::ibv_post_send(self.as_raw(), wr, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(post_error("ibv_post_send", rc, None))
    }

    /// Starts a batch of extended work requests (`ibv_wr_start`); fails with
    /// `EOPNOTSUPP` on a classic QP.
    pub fn wr_batch(&self) -> Result<WrBatch<'_>> {
        let ex = self.ex.ok_or_else(|| {
            Error::new("ibv_wr_start", libc::EOPNOTSUPP).with_hint("the QP is not extended")
        })?;
        // SAFETY: a live extended QP, not inside a batch: a WrBatch borrows
        // the QP and ends the batch when completed or dropped.
        unsafe { sys::ibv_wr_start(ex.as_ptr()) };
        Ok(WrBatch {
            qp: ex,
            done: false,
            _qp: PhantomData,
        })
    }
}

/// Refuses a UD send without an address handle (see `post_send`).
#[inline]
fn check_ud_addresses(wrs: &[SendWr<'_>]) -> Result<()> {
    match wrs.iter().position(|w| !w.has_ud_address()) {
        None => Ok(()),
        Some(i) => Err(no_address_handle(i)),
    }
}

#[cold]
#[inline(never)]
fn no_address_handle(i: usize) -> Error {
    Error::invalid(
        "ibv_post_send",
        format!("work request {i} on a UD QP has no address handle: use SendWr::ud"),
    )
}

/// The error of a refused `ibv_post_send`, naming the request `bad` points to.
#[cold]
#[inline(never)]
fn post_send_error(wrs: &[SendWr<'_>], rc: i32, bad: *mut sys::ibv_send_wr) -> Error {
    let index = wrs.iter().position(|w| ptr::eq(w.as_raw_ptr(), bad));
    post_error("ibv_post_send", rc, index)
}

/// The error of a refused `ibv_post_recv`, naming the request `bad` points to.
#[cold]
#[inline(never)]
fn post_recv_error(wrs: &[RecvWr<'_>], rc: i32, bad: *mut sys::ibv_recv_wr) -> Error {
    let index = wrs.iter().position(|w| ptr::eq(w.as_raw_ptr(), bad));
    post_error("ibv_post_recv", rc, index)
}

/// The error of a refused post, naming the refused request when known.
#[cold]
#[inline(never)]
pub(crate) fn post_error(verb: &'static str, rc: i32, index: Option<usize>) -> Error {
    let e = Error::from_rc(verb, rc);
    match index {
        Some(i) => {
            let cause = e.hint.clone().unwrap_or_default();
            e.with_hint(format!(
                "work request {i} and the ones after it were not posted; {cause}"
            ))
        }
        None => e,
    }
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &self.qp_num())
            .field("qp_type", &self.qp_type)
            .field("extended", &self.is_extended())
            .finish()
    }
}

/// A batch of extended work requests (`ibv_wr_start` .. `ibv_wr_complete`).
///
/// Each operation starts a new request; the `set_*` calls after it describe
/// its data. Dropping the batch without [`complete`](Self::complete) aborts
/// it. Not `Send`: the provider holds the QP's lock for the batch.
pub struct WrBatch<'qp> {
    qp: NonNull<sys::ibv_qp_ex>,
    done: bool,
    _qp: PhantomData<(&'qp QueuePair, *const ())>,
}

impl<'qp> WrBatch<'qp> {
    fn raw(&self) -> *mut sys::ibv_qp_ex {
        self.qp.as_ptr()
    }

    fn begin(&mut self, wr_id: u64, flags: crate::SendFlags) {
        // SAFETY: inside a batch on a live extended QP; plain fields.
        unsafe {
            (*self.raw()).wr_id = wr_id;
            (*self.raw()).wr_flags = flags.bits();
        }
    }

    /// Adds a SEND of `sge`.
    #[inline]
    pub fn send(&mut self, wr_id: u64, flags: crate::SendFlags, sge: &crate::Sge<'_>) -> &mut Self {
        self.begin(wr_id, flags);
        // SAFETY: inside a batch; SEND was requested at creation or the
        // provider reports an error at complete; the SGE is registered memory.
        unsafe {
            sys::ibv_wr_send(self.raw());
            sys::ibv_wr_set_sge(self.raw(), sge.lkey(), sge.addr(), sge.len());
        }
        self
    }

    /// Adds an RDMA WRITE of `sge` to `remote`.
    #[inline]
    pub fn rdma_write(
        &mut self,
        wr_id: u64,
        flags: crate::SendFlags,
        sge: &crate::Sge<'_>,
        remote: crate::RemoteMemory,
    ) -> &mut Self {
        self.begin(wr_id, flags);
        // SAFETY: as in `send`.
        unsafe {
            sys::ibv_wr_rdma_write(self.raw(), remote.rkey, remote.addr);
            sys::ibv_wr_set_sge(self.raw(), sge.lkey(), sge.addr(), sge.len());
        }
        self
    }

    /// Adds an RDMA READ from `remote` into `sge`.
    #[inline]
    pub fn rdma_read(
        &mut self,
        wr_id: u64,
        flags: crate::SendFlags,
        sge: &crate::Sge<'_>,
        remote: crate::RemoteMemory,
    ) -> &mut Self {
        self.begin(wr_id, flags);
        // SAFETY: as in `send`.
        unsafe {
            sys::ibv_wr_rdma_read(self.raw(), remote.rkey, remote.addr);
            sys::ibv_wr_set_sge(self.raw(), sge.lkey(), sge.addr(), sge.len());
        }
        self
    }

    /// Posts the batch.
    pub fn complete(mut self) -> Result<()> {
        self.done = true;
        // SAFETY: ends the batch begun in `wr_batch`.
        let rc = unsafe { sys::ibv_wr_complete(self.raw()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::from_rc("ibv_wr_complete", rc))
        }
    }
}

impl Drop for WrBatch<'_> {
    fn drop(&mut self) {
        if !self.done {
            // SAFETY: ends the batch begun in `wr_batch` without posting it.
            unsafe { sys::ibv_wr_abort(self.raw()) };
        }
    }
}
