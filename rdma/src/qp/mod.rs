//! Queue pairs: creation, state transitions and posting.

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::retire::UdSendCount;
use crate::sys;
use crate::{CompletionQueue, Error, ProtectionDomain, Result, SharedReceiveQueue};

mod attr;
mod batch;
mod ece;
mod mcast;
mod order;
mod post;
mod query;
mod rate_limit;

pub use attr::{InitAttr, Mtu, RtrAttr, RtsAttr};
pub use batch::WrBatch;
#[cfg(has_ibv_wr_flush)]
pub use batch::{FlushLevel, FlushType};
pub use ece::Ece;
pub use post::PreparedSend;
pub use query::QpAttr;
pub use rate_limit::RateLimit;

/// The transport service of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// XRC send (the XRC initiator, `IBV_QPT_XRC_SEND`): connected to an
    /// [`XrcRecvQp`](crate::XrcRecvQp), it reaches every XRC SRQ of the
    /// remote domain; each request names its SRQ
    /// ([`WrBatch::set_xrc_srqn`]). It has no receive queue. Providers
    /// with XRC only (mlx5; rxe and siw refuse it).
    XrcSend,
}

impl QpType {
    pub(crate) fn raw(self) -> sys::ibv_qp_type {
        match self {
            QpType::Rc => sys::IBV_QPT_RC,
            QpType::Uc => sys::IBV_QPT_UC,
            QpType::Ud => sys::IBV_QPT_UD,
            QpType::XrcSend => sys::IBV_QPT_XRC_SEND,
        }
    }
}

/// The state of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Just created, or reset. (siw has no RESET: from kernel 6.12 on it
    /// reports a new QP as [`QpState::Init`]; 6.1 leaves the state unset,
    /// which reads as RESET whatever the state.)
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
    pub(crate) fn from_raw(s: sys::ibv_qp_state) -> QpState {
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
    max_tso_header: u16,
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
        /// Local invalidate.
        const LOCAL_INV = sys::IBV_QP_EX_WITH_LOCAL_INV as u64;
        /// Memory-window bind.
        const BIND_MW = sys::IBV_QP_EX_WITH_BIND_MW as u64;
        /// SEND with invalidate.
        const SEND_WITH_INV = sys::IBV_QP_EX_WITH_SEND_WITH_INV as u64;
        /// TCP segmentation offload send ([`WrBatch::send_tso`]): raw
        /// packet QPs of devices with TSO only (no soft device has it).
        const TSO = sys::IBV_QP_EX_WITH_TSO as u64;
        /// Atomic write of 8 bytes ([`WrBatch::atomic_write`]): devices
        /// whose [`DeviceAttr::atomic_write_supported`] (rxe from kernel
        /// 6.2 on).
        ///
        /// [`DeviceAttr::atomic_write_supported`]: crate::DeviceAttr::atomic_write_supported
        const ATOMIC_WRITE = sys::IBV_QP_EX_WITH_ATOMIC_WRITE as u64;
        /// FLUSH of remote memory to a placement type
        /// ([`WrBatch::flush`]): devices with a
        /// [`DeviceAttr::flush_supported`] type (rxe from kernel 6.2 on). Built against rdma-core headers that have `ibv_wr_flush`
        /// (v45 on).
        ///
        /// [`DeviceAttr::flush_supported`]: crate::DeviceAttr::flush_supported
        #[cfg(has_ibv_wr_flush)]
        const FLUSH = sys::IBV_QP_EX_WITH_FLUSH as u64;
    }
}

impl SendOps {
    /// The operations a classic QP posts as well (`ibv_post_send`): a QP
    /// asking for these alone is created classic where the provider has no
    /// extended QPs.
    const CLASSIC: SendOps = SendOps::RDMA_WRITE
        .union(SendOps::RDMA_WRITE_WITH_IMM)
        .union(SendOps::SEND)
        .union(SendOps::SEND_WITH_IMM)
        .union(SendOps::RDMA_READ)
        .union(SendOps::ATOMIC_CMP_AND_SWP)
        .union(SendOps::ATOMIC_FETCH_AND_ADD)
        .union(SendOps::LOCAL_INV)
        .union(SendOps::BIND_MW)
        .union(SendOps::SEND_WITH_INV);
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
    /// Receives come from the tag-matching SRQ `srq` (whose messages are
    /// matched against its tags) instead of the QP's own receive queue.
    pub fn tag_matching_srq(mut self, srq: &'a crate::TagMatchingSrq) -> Self {
        self.srq = Some(srq.srq());
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
    ///
    /// Operations only a batch posts ([`SendOps::TSO`],
    /// [`SendOps::ATOMIC_WRITE`], `SendOps::FLUSH`) are not given up that
    /// way: where the provider or the device lacks one, [`build`](Self::build)
    /// fails with `EOPNOTSUPP`.
    pub fn send_ops(mut self, ops: SendOps) -> Self {
        self.send_ops = ops.bits();
        self
    }

    /// The longest header a [`WrBatch::send_tso`] of the QP may take
    /// (`max_tso_header`; default 0: none). Only with [`SendOps::TSO`].
    pub fn max_tso_header(mut self, len: u16) -> Self {
        self.max_tso_header = len;
        self
    }

    /// Creates the queue pair, in the RESET state.
    ///
    /// The PD, the CQs and the SRQ must belong to one context (else
    /// `EINVAL`): the kernel resolves them by handle in the PD's context.
    pub fn build(self) -> Result<QueuePair> {
        self.check_contexts()?;
        let caps = sys::ibv_qp_cap {
            max_send_wr: self.caps.max_send_wr,
            max_recv_wr: self.caps.max_recv_wr,
            max_send_sge: self.caps.max_send_sge,
            max_recv_sge: self.caps.max_recv_sge,
            max_inline_data: self.caps.max_inline_data,
        };
        let srq = self.srq.map_or(ptr::null_mut(), |s| s.as_raw());
        let batch_only = !SendOps::from_bits_retain(self.send_ops)
            .difference(SendOps::CLASSIC)
            .is_empty();
        if batch_only {
            self.check_device_ops()?;
        }
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
            if self.max_tso_header != 0 {
                attr.comp_mask |= sys::IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
                attr.max_tso_header = self.max_tso_header;
            }
            // SAFETY: a live context; the CQs, SRQ and PD belong to it
            // (`check_contexts`) and are kept alive by the QP. On mlx5 it
            // is made with scatter to CQE off (`crate::mlx5`).
            let e = match unsafe { crate::mlx5::create_qp_ex(self.pd.context(), &mut attr) } {
                Ok(raw) => {
                    // SAFETY: a QP created with send ops, by
                    // ibv_create_qp_ex or mlx5dv_create_qp.
                    let ex = NonNull::new(unsafe { sys::ibv_qp_to_qp_ex(raw.as_ptr()) });
                    return Ok(self.wrap(raw, attr.cap, ex));
                }
                Err(e) => e,
            };
            let unsupported = matches!(e.errno(), libc::EOPNOTSUPP | libc::ENOSYS);
            if !unsupported {
                return Err(e);
            }
            if batch_only {
                // No classic QP posts these ops: the caller learns that
                // the provider has none of them, typed.
                return Err(
                    Error::new("ibv_create_qp_ex", libc::EOPNOTSUPP).with_hint(format!(
                        "the provider created no extended {:?} QP with the send ops {:?} ({})",
                        self.qp_type,
                        SendOps::from_bits_retain(self.send_ops),
                        e
                    )),
                );
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
        // SAFETY: a live PD; CQs and SRQ of its context (`check_contexts`),
        // kept alive by the QP. On mlx5 it is made with scatter to CQE off
        // (`crate::mlx5`).
        let raw =
            unsafe { crate::mlx5::create_qp(self.pd.context(), self.pd.as_raw(), &mut attr) }?;
        Ok(self.wrap(raw, attr.cap, None))
    }

    /// Refuses (`EOPNOTSUPP`) an atomic write or a flush the device does
    /// not offer: libibverbs of rxe creates such a QP whatever its kernel
    /// driver does, and a kernel without them fails the request only when
    /// it executes it.
    fn check_device_ops(&self) -> Result<()> {
        let ops = SendOps::from_bits_retain(self.send_ops);
        let mut missing = Vec::new();
        let needs_caps = ops.contains(SendOps::ATOMIC_WRITE) || {
            #[cfg(has_ibv_wr_flush)]
            {
                ops.contains(SendOps::FLUSH)
            }
            #[cfg(not(has_ibv_wr_flush))]
            {
                false
            }
        };
        if !needs_caps {
            return Ok(());
        }
        let attr = self.pd.context().query_device()?;
        if ops.contains(SendOps::ATOMIC_WRITE) && !attr.atomic_write_supported() {
            missing.push("ATOMIC_WRITE");
        }
        #[cfg(has_ibv_wr_flush)]
        if ops.contains(SendOps::FLUSH)
            && !attr.flush_supported(batch::FlushType::Global)
            && !attr.flush_supported(batch::FlushType::Persistent)
        {
            missing.push("FLUSH");
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(
            Error::new("ibv_create_qp_ex", libc::EOPNOTSUPP).with_hint(format!(
                "the device does not offer {} (device_cap_flags_ex {:#x})",
                missing.join(" nor "),
                attr.as_raw().device_cap_flags_ex
            )),
        )
    }

    /// Refuses a CQ or SRQ of another context than the PD's.
    fn check_contexts(&self) -> Result<()> {
        let verb = if self.send_ops != 0 {
            "ibv_create_qp_ex"
        } else {
            "ibv_create_qp"
        };
        let ctx = self.pd.context();
        crate::pd::same_context(verb, "PD", ctx, "send CQ", self.send_cq.context())?;
        crate::pd::same_context(verb, "PD", ctx, "receive CQ", self.recv_cq.context())?;
        if let Some(srq) = self.srq {
            crate::pd::same_context(verb, "PD", ctx, "SRQ", srq.context())?;
        }
        Ok(())
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
            send_ops: if ex.is_some() {
                SendOps::from_bits_retain(self.send_ops)
            } else {
                SendOps::empty()
            },
            qp_type: self.qp_type,
            unchecked_send_len: match self.qp_type {
                QpType::Ud => usize::MAX,
                QpType::Rc | QpType::Uc | QpType::XrcSend => 1,
            },
            caps: QpCaps {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
            },
            sge_list_lengths_equal: ex.is_some()
                && crate::provider::rxe_sge_list_is_broken(self.pd.context()),
            inline_list_copied: ex.is_some()
                && crate::provider::rxe_inline_list_is_broken(self.pd.context()),
            max_tso_header: self.max_tso_header,
            ud_count: (self.qp_type == QpType::Ud)
                .then(|| self.pd.inner.ud.add_qp(cap.max_send_wr)),
            _pd: self.pd.clone(),
            _send_cq: self.send_cq.clone(),
            _recv_cq: self.recv_cq.clone(),
            _srq: self.srq.cloned(),
            mcast: std::sync::Mutex::new(Vec::new()),
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
    /// The operations the extended QP was created with: providers fill only
    /// these `ibv_qp_ex` ops, and a batch calls no other (empty when classic).
    send_ops: SendOps,
    qp_type: QpType,
    /// The length of a send list that needs no check before it is linked:
    /// 1 on connected QPs. On UD, where each send needs an address handle,
    /// `usize::MAX`, the length of no slice of requests. One compare in
    /// `post_send` then picks the one-request path.
    unchecked_send_len: usize,
    caps: QpCaps,
    /// Whether the provider's `ibv_wr_set_sge_list` counts a list's length
    /// as its SGE count times the first SGE's (rxe before rdma-core v64):
    /// batches then take lists of equal lengths only.
    sge_list_lengths_equal: bool,
    /// Whether the provider's `ibv_wr_set_inline_data_list` sends no bytes
    /// and bounds each buffer alone, not their sum (rxe before rdma-core
    /// v64): batches then copy the list into one buffer and set that.
    inline_list_copied: bool,
    /// The longest header of a TSO send (the builder's `max_tso_header`).
    max_tso_header: u16,
    /// A UD QP's send counts, by which its PD tells when a dropped address
    /// handle can no longer be named by a queued request (`crate::retire`).
    ud_count: Option<Arc<UdSendCount>>,
    _pd: ProtectionDomain,
    _send_cq: CompletionQueue,
    _recv_cq: CompletionQueue,
    _srq: Option<SharedReceiveQueue>,
    /// The multicast groups the QP is attached to (GID, LID), detached
    /// before the QP is destroyed: the kernel refuses to destroy an
    /// attached QP (`EBUSY`).
    mcast: std::sync::Mutex<Vec<(crate::Gid, u16)>>,
}

// SAFETY: libibverbs allows posting to and modifying a QP from any thread;
// providers lock their queues. A batch of extended requests, whose lock is
// held across calls, needs `&mut QueuePair`, so it never overlaps another
// use. The Rust fields are immutable, but for a UD QP's send counts,
// which are atomics.
unsafe impl Send for QueuePair {}
// SAFETY: as above.
unsafe impl Sync for QueuePair {}

impl Drop for QueuePair {
    fn drop(&mut self) {
        self.detach_all_mcast();
        // SAFETY: destroyed once; its PD, CQs and SRQ outlive it (held here).
        let rc = unsafe { sys::ibv_destroy_qp(self.raw.as_ptr()) };
        if let Some(count) = self.ud_count.take() {
            if rc == 0 {
                // The QP reads none of its requests again: the address
                // handles its PD kept for it may go.
                drop(count);
                self._pd.inner.ud.sweep();
            } else {
                // The QP lives on in the kernel, its requests with it: the
                // handles its requests may name are never destroyed.
                std::mem::forget(count);
            }
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
            max_tso_header: 0,
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

    /// The operations a batch may post (see [`QpBuilder::send_ops`]); empty
    /// on a classic QP.
    pub fn send_ops(&self) -> SendOps {
        self.send_ops
    }

    /// The context the QP belongs to.
    pub(crate) fn context(&self) -> &crate::Context {
        self._pd.context()
    }

    /// The QP's `ibv_context`, as the provider set it: one load, for the
    /// checks on the data path.
    #[inline]
    pub(crate) fn raw_context(&self) -> *mut sys::ibv_context {
        // SAFETY: a live QP; `context` is set at creation and never changes.
        unsafe { (*self.raw.as_ptr()).context }
    }

    /// The QP's `ibv_pd`, as the provider set it: one load, for the checks
    /// on the UD data path.
    #[inline]
    pub(crate) fn raw_pd(&self) -> *mut sys::ibv_pd {
        // SAFETY: a live QP; `pd` is set at creation and never changes.
        unsafe { (*self.raw.as_ptr()).pd }
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

    /// `ibv_query_qp` of the attributes `mask` selects.
    fn query_raw(&self, mask: u32) -> Result<(sys::ibv_qp_attr, sys::ibv_qp_init_attr)> {
        // SAFETY: plain data.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain data.
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live QP; both out-parameters are writable and of the
        // types ibv_query_qp fills.
        let rc = unsafe { sys::ibv_query_qp(self.as_raw(), &mut attr, mask as i32, &mut init) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_query_qp", rc));
        }
        Ok((attr, init))
    }

    /// The current state, as the provider reports it (`ibv_query_qp`).
    pub fn state(&self) -> Result<QpState> {
        let (attr, _) = self.query_raw(sys::IBV_QP_STATE)?;
        Ok(QpState::from_raw(attr.qp_state))
    }

    /// Every attribute the provider reports (`ibv_query_qp`): state, queue
    /// sizes, QKey, PSNs, path MTU and path, timeout, retry counts, RNR
    /// timer, RDMA READ depths, destination QP, port, P_Key index and
    /// access rights.
    ///
    /// On rxe each reads back as it was set (a UD QP's QKey, an RC QP's
    /// whole connection). siw, connected by the CM, reports its own
    /// constants and zeros for most: see [`QpAttr`] for the table.
    pub fn query(&self) -> Result<QpAttr> {
        let (attr, init) = self.query_raw(query::QUERY_MASK)?;
        Ok(QpAttr::from_raw(&attr, &init))
    }

    /// Modifies the QP with a raw attribute and mask (`ibv_modify_qp`),
    /// for what the typed transitions ([`to_init`](Self::to_init),
    /// [`to_rtr`](Self::to_rtr), [`to_rts`](Self::to_rts),
    /// [`set_state`](Self::set_state)) do not set.
    ///
    /// On failure the error names the transition that was refused.
    ///
    /// # Safety
    /// The provider applies `attr` and `mask` as they are, and this crate
    /// cannot tell what the change means to the QP's other users. The
    /// caller makes sure it leaves intact what they rely on:
    /// - a QP whose connection the CM drives (one made by
    ///   [`CmId::create_qp`](crate::cm::CmId::create_qp), attached with
    ///   `attach_qp`, or moved by [`CmId::init_qp_attr`](crate::cm::CmId::init_qp_attr)'s
    ///   attributes on the CM's schedule) is changed only in ways the CM's
    ///   next step expects: a raw modify can move it back to a state the CM
    ///   does not, or give it a path, PSN or destination its peer never
    ///   agreed to, so that its traffic goes to another QP;
    /// - moving a QP to RESET drops its outstanding work requests without
    ///   completions: code that waits for those completions before reusing
    ///   or releasing what it posted must not depend on them.
    pub unsafe fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32) -> Result<()> {
        self.modify_raw(attr, mask)
    }

    /// [`modify`](Self::modify) for the typed transitions, whose
    /// attributes are complete for their masks.
    fn modify_raw(&self, attr: &mut sys::ibv_qp_attr, mask: u32) -> Result<()> {
        // SAFETY: a live QP; `attr` is plain data the provider reads during
        // the call only (an incomplete one is refused with EINVAL).
        let rc = unsafe { sys::ibv_modify_qp(self.as_raw(), attr, mask as i32) };
        if rc == 0 {
            return Ok(());
        }
        Err(self.modify_error(rc, attr.qp_state, mask))
    }

    /// The error of a refused `ibv_modify_qp`, naming the transition: a
    /// refused modify changes nothing, so the state queried now is the
    /// state it started from (only failures pay for the query).
    #[cold]
    #[inline(never)]
    fn modify_error(&self, rc: i32, to: sys::ibv_qp_state, mask: u32) -> Error {
        // Read errno before the query can change it.
        let e = Error::from_rc("ibv_modify_qp", rc);
        if mask & sys::IBV_QP_STATE == 0 {
            return e;
        }
        let Ok(from) = self.state() else {
            return e;
        };
        let to = QpState::from_raw(to);
        let why = if e.errno() == libc::EINVAL {
            format!("transition {from:?} -> {to:?} refused: illegal from this state, or a required attribute is missing or invalid")
        } else {
            format!("transition {from:?} -> {to:?}")
        };
        e.with_hint(why)
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
            QpType::Rc | QpType::Uc | QpType::XrcSend => {
                a.qp_access_flags = init.access.bits();
                mask |= sys::IBV_QP_ACCESS_FLAGS;
            }
        }
        self.modify_raw(&mut a, mask)
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
        self.modify_raw(&mut a, mask)
    }

    /// RTR -> RTS.
    pub fn to_rts(&self, rts: &RtsAttr) -> Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_RTS;
        a.sq_psn = rts.sq_psn;
        let mut mask = sys::IBV_QP_STATE | sys::IBV_QP_SQ_PSN;
        if matches!(self.qp_type, QpType::Rc | QpType::XrcSend) {
            a.timeout = rts.timeout;
            a.retry_cnt = rts.retry_cnt;
            a.rnr_retry = rts.rnr_retry;
            a.max_rd_atomic = rts.max_rd_atomic;
            mask |= sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_MAX_QP_RD_ATOMIC;
        }
        self.modify_raw(&mut a, mask)
    }

    /// Moves the QP to `state` with no other attribute (RESET, ERROR, SQD).
    pub fn set_state(&self, state: QpState) -> Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = state.raw();
        self.modify_raw(&mut a, sys::IBV_QP_STATE)
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
