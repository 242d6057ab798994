//! Work completions.

use std::fmt;
use std::mem::MaybeUninit;
use std::ptr;

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

/// `IBV_WC_FLUSH` (verbs.h of rdma-core v45 on; the kernel's
/// `IB_UVERBS_WC_FLUSH`).
const WC_FLUSH: sys::ibv_wc_opcode = 8;

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
    /// A flush (`WrBatch::flush`, built against rdma-core v45 headers on).
    Flush,
    /// An atomic write
    /// ([`WrBatch::atomic_write`](crate::WrBatch::atomic_write)).
    AtomicWrite,
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
            WC_FLUSH => WcOpcode::Flush,
            sys::IBV_WC_ATOMIC_WRITE => WcOpcode::AtomicWrite,
            sys::IBV_WC_RECV => WcOpcode::Recv,
            sys::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Other(other),
        }
    }
}

/// A work completion, as `ibv_poll_cq` fills it.
///
/// Layout-identical to `ibv_wc`. Providers write only some fields (siw never
/// writes `src_qp`, `slid`, `sl`, `pkey_index` and `dlid_path_bits`; mlx5
/// writes only `wr_id`, `status`, `qp_num`, `vendor_err` and `wc_flags` for
/// a failed completion), so polling needs initialised storage: see
/// [`CompletionBuf`]. A field the provider skipped keeps what the storage
/// held: zero, or the value of an earlier completion polled into that slot.
/// Each accessor says when its value is meaningful; `wr_id`, `status`,
/// `qp_num` and `vendor_err` always are.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct WorkCompletion(pub(crate) sys::ibv_wc);

impl WorkCompletion {
    /// A completion of all zero bytes: storage to poll into,
    /// `[WorkCompletion::ZERO; N]`.
    // SAFETY: ibv_wc is plain integers and a union of integers; all zero
    // bytes is a valid value of each.
    pub const ZERO: WorkCompletion = WorkCompletion(unsafe { std::mem::zeroed() });

    /// The work request ID given when posting.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    /// The status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.0.status)
    }
    /// Whether the work request succeeded.
    #[inline]
    pub fn is_success(&self) -> bool {
        self.0.status == sys::IBV_WC_SUCCESS
    }
    /// The completion when it succeeded, else an error (`EIO`) that names
    /// the work request, its status and the vendor's error syndrome:
    /// `cq.wait_one(timeout)?.result()?`.
    pub fn result(self) -> crate::Result<WorkCompletion> {
        if self.is_success() {
            return Ok(self);
        }
        Err(
            crate::Error::new("work completion", libc::EIO).with_hint(format!(
                "work request {} failed: {:?} (vendor error {:#x})",
                self.wr_id(),
                self.status(),
                self.vendor_err()
            )),
        )
    }
    /// The opcode; meaningful only for successful completions.
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.0.opcode)
    }
    /// The vendor-specific error syndrome (0 on success).
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }
    /// The bytes a receive received, including the 40-byte GRH of a UD
    /// receive (see [`has_grh`](Self::has_grh)); for RDMA READ and atomics
    /// the bytes read. Meaningful only for successful completions.
    #[inline]
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// The immediate data, in host byte order, if the completion succeeded
    /// and carries it.
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        if self.is_success() && self.0.wc_flags & sys::IBV_WC_WITH_IMM != 0 {
            // SAFETY: both union fields are u32, so any bytes are a valid
            // value; with IBV_WC_WITH_IMM the provider wrote the immediate.
            Some(u32::from_be(unsafe { self.0.__bindgen_anon_1.imm_data }))
        } else {
            None
        }
    }
    /// The rkey a successful SEND with invalidate invalidated, if any.
    #[inline]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        if self.is_success() && self.0.wc_flags & sys::IBV_WC_WITH_INV != 0 {
            // SAFETY: as in `imm_data`; with IBV_WC_WITH_INV the provider
            // wrote the rkey.
            Some(unsafe { self.0.__bindgen_anon_1.invalidated_rkey })
        } else {
            None
        }
    }
    /// The local QP number.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
    /// The remote QP number; meaningful only for a successful UD receive
    /// (siw, RC only, leaves it as the storage held).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }
    /// The `IBV_WC_*` flags (`WITH_IMM`, `GRH`, ...); meaningful only for
    /// successful completions.
    #[inline]
    pub fn wc_flags(&self) -> u32 {
        self.0.wc_flags
    }
    /// Whether a successful UD receive starts with a 40-byte GRH.
    #[inline]
    pub fn has_grh(&self) -> bool {
        self.is_success() && self.0.wc_flags & sys::IBV_WC_GRH != 0
    }
    /// The P_Key index; meaningful only for a successful receive on a GSI
    /// (QP1) queue pair.
    #[inline]
    pub fn pkey_index(&self) -> u16 {
        self.0.pkey_index
    }
    /// The source LID; meaningful only for a successful UD receive on
    /// InfiniBand (RoCE and iWARP have no LIDs).
    #[inline]
    pub fn slid(&self) -> u16 {
        self.0.slid
    }
    /// The service level; meaningful only for a successful UD receive on
    /// InfiniBand.
    #[inline]
    pub fn sl(&self) -> u8 {
        self.0.sl
    }
    /// The destination LID path bits; meaningful only for a successful UD
    /// receive on InfiniBand.
    #[inline]
    pub fn dlid_path_bits(&self) -> u8 {
        self.0.dlid_path_bits
    }
    /// The raw completion.
    #[inline]
    pub fn as_raw(&self) -> &sys::ibv_wc {
        &self.0
    }
}

impl Default for WorkCompletion {
    /// [`WorkCompletion::ZERO`].
    fn default() -> Self {
        WorkCompletion::ZERO
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Storage that [`CompletionQueue::poll`](crate::CompletionQueue::poll)
/// fills: a slice, array or `Vec` of [`WorkCompletion`] or of
/// `MaybeUninit<WorkCompletion>`.
///
/// Initialised storage (`[WorkCompletion::ZERO; 16]`, made once and polled
/// into again and again) costs nothing per poll: the provider overwrites
/// what it writes, and every other field stays initialised.
/// `MaybeUninit` storage is zeroed before each poll (48 bytes a slot, the
/// whole storage whether or not completions arrive), because providers do
/// not write every field and Rust may not read a field nobody wrote.
pub trait CompletionBuf: sealed::Sealed {
    /// The storage as initialised completions (zeroed first if it is
    /// `MaybeUninit`).
    fn as_completions(&mut self) -> &mut [WorkCompletion];
}

/// Zeroes `slots` and hands them out as completions.
#[inline(always)]
fn zeroed(slots: &mut [MaybeUninit<WorkCompletion>]) -> &mut [WorkCompletion] {
    let len = slots.len();
    let p = slots.as_mut_ptr().cast::<WorkCompletion>();
    // SAFETY: `p` is `len` writable slots (MaybeUninit<T> has T's layout);
    // all zero bytes is a valid WorkCompletion (see `ZERO`), so afterwards
    // all `len` are initialised, exclusively borrowed for `slots`' lifetime.
    unsafe {
        ptr::write_bytes(p, 0, len);
        std::slice::from_raw_parts_mut(p, len)
    }
}

macro_rules! completion_buf {
    ($([$($gen:tt)*] $ty:ty => |$s:ident| $body:expr;)*) => {$(
        impl<$($gen)*> sealed::Sealed for $ty {}
        impl<$($gen)*> CompletionBuf for $ty {
            #[inline(always)]
            fn as_completions(&mut self) -> &mut [WorkCompletion] {
                let $s = self;
                $body
            }
        }
    )*};
}

completion_buf! {
    [] [WorkCompletion] => |s| s;
    [const N: usize] [WorkCompletion; N] => |s| s;
    [] Vec<WorkCompletion> => |s| s;
    [] [MaybeUninit<WorkCompletion>] => |s| zeroed(s);
    [const N: usize] [MaybeUninit<WorkCompletion>; N] => |s| zeroed(s);
    [] Vec<MaybeUninit<WorkCompletion>> => |s| zeroed(s);
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
