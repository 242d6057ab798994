//! Work completions.

use std::fmt;

use crate::sys;

/// The status of a completion (`IBV_WC_*` status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum WcStatus {
    Success,
    LocalLengthError,
    LocalQpOperationError,
    LocalEecOperationError,
    LocalProtectionError,
    /// The work request was flushed: the queue pair is in the error state.
    WorkRequestFlushed,
    MemoryWindowBindError,
    BadResponse,
    LocalAccessError,
    RemoteInvalidRequest,
    /// The remote side refused the access (wrong rkey, range or rights).
    RemoteAccessError,
    RemoteOperationError,
    /// The transport retry counter was exceeded: the peer does not answer.
    RetryExceeded,
    /// The receiver had no receive posted, for longer than the RNR retries.
    RnrRetryExceeded,
    LocalRddViolation,
    RemoteInvalidRdRequest,
    RemoteAborted,
    InvalidEecn,
    InvalidEecState,
    Fatal,
    ResponseTimeout,
    GeneralError,
    TagMatchingError,
    TagMatchingRndvIncomplete,
    /// A status this crate does not know.
    Other(u32),
}

impl WcStatus {
    /// From the C value.
    pub fn from_raw(s: sys::ibv_wc_status) -> WcStatus {
        use WcStatus::*;
        match s {
            sys::IBV_WC_SUCCESS => Success,
            sys::IBV_WC_LOC_LEN_ERR => LocalLengthError,
            sys::IBV_WC_LOC_QP_OP_ERR => LocalQpOperationError,
            sys::IBV_WC_LOC_EEC_OP_ERR => LocalEecOperationError,
            sys::IBV_WC_LOC_PROT_ERR => LocalProtectionError,
            sys::IBV_WC_WR_FLUSH_ERR => WorkRequestFlushed,
            sys::IBV_WC_MW_BIND_ERR => MemoryWindowBindError,
            sys::IBV_WC_BAD_RESP_ERR => BadResponse,
            sys::IBV_WC_LOC_ACCESS_ERR => LocalAccessError,
            sys::IBV_WC_REM_INV_REQ_ERR => RemoteInvalidRequest,
            sys::IBV_WC_REM_ACCESS_ERR => RemoteAccessError,
            sys::IBV_WC_REM_OP_ERR => RemoteOperationError,
            sys::IBV_WC_RETRY_EXC_ERR => RetryExceeded,
            sys::IBV_WC_RNR_RETRY_EXC_ERR => RnrRetryExceeded,
            sys::IBV_WC_LOC_RDD_VIOL_ERR => LocalRddViolation,
            sys::IBV_WC_REM_INV_RD_REQ_ERR => RemoteInvalidRdRequest,
            sys::IBV_WC_REM_ABORT_ERR => RemoteAborted,
            sys::IBV_WC_INV_EECN_ERR => InvalidEecn,
            sys::IBV_WC_INV_EEC_STATE_ERR => InvalidEecState,
            sys::IBV_WC_FATAL_ERR => Fatal,
            sys::IBV_WC_RESP_TIMEOUT_ERR => ResponseTimeout,
            sys::IBV_WC_GENERAL_ERR => GeneralError,
            sys::IBV_WC_TM_ERR => TagMatchingError,
            sys::IBV_WC_TM_RNDV_INCOMPLETE => TagMatchingRndvIncomplete,
            other => Other(other),
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What a completion completed (`IBV_WC_*` opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (with or without immediate data).
    Send,
    /// An RDMA WRITE.
    RdmaWrite,
    /// An RDMA READ.
    RdmaRead,
    /// An atomic compare-and-swap.
    CompareSwap,
    /// An atomic fetch-and-add.
    FetchAdd,
    /// A memory-window bind.
    BindMw,
    /// A local invalidate.
    LocalInvalidate,
    /// A TSO send.
    Tso,
    /// A receive of a SEND.
    Recv,
    /// A receive of an RDMA WRITE with immediate data.
    RecvRdmaWithImm,
    /// An opcode this crate does not know.
    Other(u32),
}

impl WcOpcode {
    /// From the C value.
    pub fn from_raw(op: sys::ibv_wc_opcode) -> WcOpcode {
        match op {
            sys::IBV_WC_SEND => WcOpcode::Send,
            sys::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            sys::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            sys::IBV_WC_COMP_SWAP => WcOpcode::CompareSwap,
            sys::IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
            sys::IBV_WC_BIND_MW => WcOpcode::BindMw,
            sys::IBV_WC_LOCAL_INV => WcOpcode::LocalInvalidate,
            sys::IBV_WC_TSO => WcOpcode::Tso,
            sys::IBV_WC_RECV => WcOpcode::Recv,
            sys::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Other(other),
        }
    }
}

/// A work completion, as `ibv_poll_cq` fills it.
///
/// Layout-identical to `ibv_wc`: a `&mut [MaybeUninit<WorkCompletion>]` is
/// handed to the provider as is.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct WorkCompletion(pub(crate) sys::ibv_wc);

impl WorkCompletion {
    /// The work request ID given when posting.
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    /// The status.
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.0.status)
    }
    /// Whether the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.0.status == sys::IBV_WC_SUCCESS
    }
    /// The opcode (valid only for successful completions).
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.0.opcode)
    }
    /// The vendor-specific error syndrome.
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }
    /// Bytes received (receives) or transferred.
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// The immediate data, in host byte order, if the completion carries it.
    pub fn imm_data(&self) -> Option<u32> {
        if self.0.wc_flags & sys::IBV_WC_WITH_IMM != 0 {
            // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate data.
            Some(u32::from_be(unsafe { self.0.__bindgen_anon_1.imm_data }))
        } else {
            None
        }
    }
    /// The rkey a SEND with invalidate invalidated, if any.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        if self.0.wc_flags & sys::IBV_WC_WITH_INV != 0 {
            // SAFETY: with IBV_WC_WITH_INV the union holds the rkey.
            Some(unsafe { self.0.__bindgen_anon_1.invalidated_rkey })
        } else {
            None
        }
    }
    /// The local QP number.
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
    /// The remote QP number (UD).
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }
    /// The `IBV_WC_*` flags (`WITH_IMM`, `GRH`, ...).
    pub fn wc_flags(&self) -> u32 {
        self.0.wc_flags
    }
    /// Whether a UD receive starts with a 40-byte GRH.
    pub fn has_grh(&self) -> bool {
        self.0.wc_flags & sys::IBV_WC_GRH != 0
    }
    /// The P_Key index (GSI).
    pub fn pkey_index(&self) -> u16 {
        self.0.pkey_index
    }
    /// The source LID.
    pub fn slid(&self) -> u16 {
        self.0.slid
    }
    /// The service level.
    pub fn sl(&self) -> u8 {
        self.0.sl
    }
    /// The raw completion.
    pub fn as_raw(&self) -> &sys::ibv_wc {
        &self.0
    }
}

impl fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("WorkCompletion");
        d.field("wr_id", &self.wr_id())
            .field("status", &self.status());
        if self.is_success() {
            d.field("opcode", &self.opcode())
                .field("byte_len", &self.byte_len());
        } else {
            d.field("vendor_err", &format_args!("{:#x}", self.vendor_err()));
        }
        d.field("qp_num", &self.qp_num()).finish()
    }
}
