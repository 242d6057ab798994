//! The data path of verbs.h, ported to `#[inline]` Rust.
//!
//! Each function here does what its `static inline` namesake in verbs.h does:
//! it loads the provider's function pointer from the object (or from its
//! context's op table) and calls it. Nothing else runs, so a call costs what
//! it costs in C. [`crate::shim`] has the C twin of each, and the tests prove
//! that each port and its twin make the same call with the same arguments and
//! return the same result.
//!
//! The one difference from C: where C would jump to a NULL function pointer
//! (a provider that does not implement an op), the port aborts the process
//! with a message naming the op. The check is a predictable branch.

use core::ffi::{c_int, c_uint, c_void};

use crate::*;

/// Aborts because a provider left an op NULL; C would jump to address 0.
#[cold]
#[inline(never)]
fn missing_op(op: &str) -> ! {
    eprintln!("ibverbs-sys: the provider does not implement `{op}` (NULL function pointer)");
    std::process::abort()
}

/// The function in an `Option<fn>` field, or an abort naming the op.
macro_rules! op {
    ($field:expr, $name:expr) => {
        match $field {
            Some(f) => f,
            None => missing_op($name),
        }
    };
}

/// The function in one of the `ibv_context_ops` fields that libibverbs always
/// fills: `verbs_init_context` installs its dummy ops (which return
/// EOPNOTSUPP) in every field before the provider sets its own, for every
/// context that `ibv_open_device` opens (rdma-core since v16). No NULL check,
/// as in C's inline functions.
///
/// Only for `post_send`, `post_recv`, `post_srq_recv`, `poll_cq` and
/// `req_notify_cq`, whose callers' safety contracts require the object's
/// context to have the op set, as every context libibverbs opens has.
macro_rules! filled_op {
    ($field:expr) => {
        match $field {
            Some(f) => f,
            // Sound inside the callers' `unsafe` block: their contracts
            // require the field to be set (see above), so this arm never runs.
            None => core::hint::unreachable_unchecked(),
        }
    };
}

/// Posts a list of send work requests to a queue pair.
///
/// Port of verbs.h `ibv_post_send`: `qp->context->ops.post_send(qp, wr, bad_wr)`.
/// Returns 0 or an errno value; on failure `*bad_wr` names the first request
/// that was not posted.
///
/// # Safety
/// `qp` must point to a live QP whose context has the op set (any QP created
/// by libibverbs), `wr` to a valid, NULL-terminated list of work requests
/// whose SGEs describe registered memory that stays valid until the requests
/// complete, and `bad_wr` must be writable.
#[inline]
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: per the contract, `qp->context` is valid and its `ops.post_send`
    // is set, a function of exactly this C signature.
    unsafe { filled_op!((*(*qp).context).ops.post_send)(qp, wr, bad_wr) }
}

/// Posts a list of receive work requests to a queue pair.
///
/// Port of verbs.h `ibv_post_recv`: `qp->context->ops.post_recv(qp, wr, bad_wr)`.
///
/// # Safety
/// As [`ibv_post_send`]: a live QP whose context has the op set, a valid
/// NULL-terminated list whose buffers stay valid until completion, a
/// writable `bad_wr`.
#[inline]
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: per the contract (that of `ibv_post_send`), `qp->context` is
    // valid and its `ops.post_recv` is set, a function of this C signature.
    unsafe { filled_op!((*(*qp).context).ops.post_recv)(qp, wr, bad_wr) }
}

/// Posts a list of receive work requests to a shared receive queue.
///
/// Port of verbs.h `ibv_post_srq_recv`:
/// `srq->context->ops.post_srq_recv(srq, wr, bad_wr)`.
///
/// # Safety
/// `srq` must point to a live SRQ whose context's `ops.post_srq_recv` is set
/// (any SRQ of a context libibverbs opened); `wr` and `bad_wr` as for
/// [`ibv_post_recv`].
#[inline]
pub unsafe fn ibv_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: per the contract, `srq->context` is valid and its
    // `ops.post_srq_recv` is set, a function of exactly this C signature.
    unsafe { filled_op!((*(*srq).context).ops.post_srq_recv)(srq, wr, bad_wr) }
}

/// Posts a list of receive work requests to a work queue.
///
/// Port of verbs.h `ibv_post_wq_recv`: `wq->post_recv(wq, wr, bad_wr)`.
///
/// # Safety
/// `wq` must point to a live WQ; `wr` and `bad_wr` as for [`ibv_post_recv`].
#[inline]
pub unsafe fn ibv_post_wq_recv(
    wq: *mut ibv_wq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: a live WQ carries the provider's post_recv for it.
    unsafe { op!((*wq).post_recv, "wq post_recv")(wq, wr, bad_wr) }
}

/// Polls up to `num_entries` completions into `wc`.
///
/// Port of verbs.h `ibv_poll_cq`: `cq->context->ops.poll_cq(cq, num_entries, wc)`.
/// Returns the number of completions written (fewer than `num_entries` means
/// the CQ is now empty), or a negative value on error.
///
/// # Safety
/// `cq` must point to a live CQ whose context's `ops.poll_cq` is set (any CQ
/// of a context libibverbs opened), and `wc` to `num_entries` writable
/// `ibv_wc`.
#[inline]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: per the contract, `cq->context` is valid and its `ops.poll_cq`
    // is set, a function of exactly this C signature.
    unsafe { filled_op!((*(*cq).context).ops.poll_cq)(cq, num_entries, wc) }
}

/// Requests a completion event on the CQ's completion channel.
///
/// Port of verbs.h `ibv_req_notify_cq`:
/// `cq->context->ops.req_notify_cq(cq, solicited_only)`.
///
/// # Safety
/// `cq` must point to a live CQ whose context's `ops.req_notify_cq` is set
/// (any CQ of a context libibverbs opened).
#[inline]
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: per the contract, `cq->context` is valid and its
    // `ops.req_notify_cq` is set, a function of exactly this C signature.
    unsafe { filled_op!((*(*cq).context).ops.req_notify_cq)(cq, solicited_only) }
}

/// The classic CQ inside an extended one.
///
/// Port of verbs.h `ibv_cq_ex_to_cq`: a pointer cast, as `ibv_cq_ex` begins
/// with the fields of `ibv_cq`.
#[inline]
pub fn ibv_cq_ex_to_cq(cq: *mut ibv_cq_ex) -> *mut ibv_cq {
    cq.cast()
}

/// Defines the port of a static inline that calls one op of an extended CQ.
macro_rules! cq_ex_op {
    ($(#[$doc:meta])* $name:ident => $field:ident ( $($arg:ident : $ty:ty),* ) $(-> $ret:ty)?) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `cq` must point to a live extended CQ (from `ibv_create_cq_ex`).
        /// Between `ibv_start_poll` and `ibv_end_poll` only; a `read_*` only
        /// for a field requested in `wc_flags` when the CQ was created.
        #[inline]
        pub unsafe fn $name(cq: *mut ibv_cq_ex $(, $arg: $ty)*) $(-> $ret)? {
            // SAFETY: the caller guarantees `cq` is a live extended CQ, so its
            // op fields hold the provider's functions of these signatures.
            unsafe { op!((*cq).$field, stringify!($field))(cq $(, $arg)*) }
        }
    };
}

cq_ex_op!(
    /// Starts polling: fetches the first completion, or returns `ENOENT` when
    /// the CQ is empty (then `ibv_end_poll` must not be called).
    ///
    /// Port of verbs.h `ibv_start_poll`: `cq->start_poll(cq, attr)`.
    ibv_start_poll => start_poll(attr: *mut ibv_poll_cq_attr) -> c_int
);
cq_ex_op!(
    /// Advances to the next completion; `ENOENT` when there is none.
    ///
    /// Port of verbs.h `ibv_next_poll`: `cq->next_poll(cq)`.
    ibv_next_poll => next_poll() -> c_int
);
cq_ex_op!(
    /// Ends a poll started by a successful `ibv_start_poll`.
    ///
    /// Port of verbs.h `ibv_end_poll`: `cq->end_poll(cq)`.
    ibv_end_poll => end_poll()
);
cq_ex_op!(
    /// The opcode of the current completion. Port of verbs.h `ibv_wc_read_opcode`.
    ibv_wc_read_opcode => read_opcode() -> ibv_wc_opcode
);
cq_ex_op!(
    /// The vendor error of the current completion. Port of verbs.h `ibv_wc_read_vendor_err`.
    ibv_wc_read_vendor_err => read_vendor_err() -> u32
);
cq_ex_op!(
    /// The byte count of the current completion. Port of verbs.h `ibv_wc_read_byte_len`.
    ibv_wc_read_byte_len => read_byte_len() -> u32
);
cq_ex_op!(
    /// The immediate data (big endian). Port of verbs.h `ibv_wc_read_imm_data`.
    ibv_wc_read_imm_data => read_imm_data() -> __be32
);
cq_ex_op!(
    /// The local QP number. Port of verbs.h `ibv_wc_read_qp_num`.
    ibv_wc_read_qp_num => read_qp_num() -> u32
);
cq_ex_op!(
    /// The source QP number (UD). Port of verbs.h `ibv_wc_read_src_qp`.
    ibv_wc_read_src_qp => read_src_qp() -> u32
);
cq_ex_op!(
    /// The `IBV_WC_*` flags. Port of verbs.h `ibv_wc_read_wc_flags`.
    ibv_wc_read_wc_flags => read_wc_flags() -> c_uint
);
cq_ex_op!(
    /// The source LID. Port of verbs.h `ibv_wc_read_slid`.
    ibv_wc_read_slid => read_slid() -> u32
);
cq_ex_op!(
    /// The service level. Port of verbs.h `ibv_wc_read_sl`.
    ibv_wc_read_sl => read_sl() -> u8
);
cq_ex_op!(
    /// The DLID path bits. Port of verbs.h `ibv_wc_read_dlid_path_bits`.
    ibv_wc_read_dlid_path_bits => read_dlid_path_bits() -> u8
);
cq_ex_op!(
    /// The device timestamp. Port of verbs.h `ibv_wc_read_completion_ts`.
    ibv_wc_read_completion_ts => read_completion_ts() -> u64
);
cq_ex_op!(
    /// The wall-clock timestamp in ns. Port of verbs.h `ibv_wc_read_completion_wallclock_ns`.
    ibv_wc_read_completion_wallclock_ns => read_completion_wallclock_ns() -> u64
);
cq_ex_op!(
    /// The customer VLAN. Port of verbs.h `ibv_wc_read_cvlan`.
    ibv_wc_read_cvlan => read_cvlan() -> u16
);
cq_ex_op!(
    /// The flow tag. Port of verbs.h `ibv_wc_read_flow_tag`.
    ibv_wc_read_flow_tag => read_flow_tag() -> u32
);
cq_ex_op!(
    /// The tag-matching info, written to `tm_info`. Port of verbs.h `ibv_wc_read_tm_info`.
    ibv_wc_read_tm_info => read_tm_info(tm_info: *mut ibv_wc_tm_info)
);

/// The rkey a SEND with invalidate invalidated.
///
/// Port of verbs.h `ibv_wc_read_invalidated_rkey`, which reads the immediate
/// data field (the two share the completion's storage).
///
/// # Safety
/// As for the other `ibv_wc_read_*`: a live extended CQ inside a poll.
#[inline]
pub unsafe fn ibv_wc_read_invalidated_rkey(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller guarantees a live extended CQ inside a poll.
    unsafe { op!((*cq).read_imm_data, "read_imm_data")(cq) }
}

/// Defines the port of a static inline that calls one op of an extended QP.
macro_rules! qp_ex_op {
    ($(#[$doc:meta])* $name:ident => $field:ident ( $($arg:ident : $ty:ty),* ) $(-> $ret:ty)?) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `qp` must point to a live extended QP (`ibv_qp_to_qp_ex` of a QP
        /// created by `ibv_create_qp_ex` with this operation in
        /// `send_ops_flags`), between `ibv_wr_start` and
        /// `ibv_wr_complete`/`ibv_wr_abort`; pointers passed in must be valid
        /// as the C function requires.
        #[inline]
        pub unsafe fn $name(qp: *mut ibv_qp_ex $(, $arg: $ty)*) $(-> $ret)? {
            // SAFETY: the caller guarantees `qp` is a live extended QP, so its
            // op fields hold the provider's functions of these signatures.
            unsafe { op!((*qp).$field, stringify!($field))(qp $(, $arg)*) }
        }
    };
}

qp_ex_op!(
    /// Starts a batch of work requests. Port of verbs.h `ibv_wr_start`.
    ibv_wr_start => wr_start()
);
qp_ex_op!(
    /// Posts the batch; returns 0 or an errno value. Port of verbs.h `ibv_wr_complete`.
    ibv_wr_complete => wr_complete() -> c_int
);
qp_ex_op!(
    /// Discards the batch. Port of verbs.h `ibv_wr_abort`.
    ibv_wr_abort => wr_abort()
);
qp_ex_op!(
    /// Adds an atomic compare-and-swap. Port of verbs.h `ibv_wr_atomic_cmp_swp`.
    ibv_wr_atomic_cmp_swp => wr_atomic_cmp_swp(rkey: u32, remote_addr: u64, compare: u64, swap: u64)
);
qp_ex_op!(
    /// Adds an atomic fetch-and-add. Port of verbs.h `ibv_wr_atomic_fetch_add`.
    ibv_wr_atomic_fetch_add => wr_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64)
);
qp_ex_op!(
    /// Adds a memory-window bind. Port of verbs.h `ibv_wr_bind_mw`.
    ibv_wr_bind_mw => wr_bind_mw(mw: *mut ibv_mw, rkey: u32, bind_info: *const ibv_mw_bind_info)
);
qp_ex_op!(
    /// Adds a local invalidate. Port of verbs.h `ibv_wr_local_inv`.
    ibv_wr_local_inv => wr_local_inv(invalidate_rkey: u32)
);
qp_ex_op!(
    /// Adds an RDMA READ. Port of verbs.h `ibv_wr_rdma_read`.
    ibv_wr_rdma_read => wr_rdma_read(rkey: u32, remote_addr: u64)
);
qp_ex_op!(
    /// Adds an RDMA WRITE. Port of verbs.h `ibv_wr_rdma_write`.
    ibv_wr_rdma_write => wr_rdma_write(rkey: u32, remote_addr: u64)
);
qp_ex_op!(
    /// Adds an RDMA WRITE with immediate data. Port of verbs.h `ibv_wr_rdma_write_imm`.
    ibv_wr_rdma_write_imm => wr_rdma_write_imm(rkey: u32, remote_addr: u64, imm_data: __be32)
);
qp_ex_op!(
    /// Adds a SEND. Port of verbs.h `ibv_wr_send`.
    ibv_wr_send => wr_send()
);
qp_ex_op!(
    /// Adds a SEND with immediate data. Port of verbs.h `ibv_wr_send_imm`.
    ibv_wr_send_imm => wr_send_imm(imm_data: __be32)
);
qp_ex_op!(
    /// Adds a SEND with invalidate. Port of verbs.h `ibv_wr_send_inv`.
    ibv_wr_send_inv => wr_send_inv(invalidate_rkey: u32)
);
qp_ex_op!(
    /// Adds a TSO send (raw packet QPs). Port of verbs.h `ibv_wr_send_tso`.
    ibv_wr_send_tso => wr_send_tso(hdr: *mut c_void, hdr_sz: u16, mss: u16)
);
qp_ex_op!(
    /// Sets the UD destination of the current request. Port of verbs.h `ibv_wr_set_ud_addr`.
    ibv_wr_set_ud_addr => wr_set_ud_addr(ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32)
);
qp_ex_op!(
    /// Sets the XRC SRQ number of the current request. Port of verbs.h `ibv_wr_set_xrc_srqn`.
    ibv_wr_set_xrc_srqn => wr_set_xrc_srqn(remote_srqn: u32)
);
qp_ex_op!(
    /// Sets inline data for the current request. Port of verbs.h `ibv_wr_set_inline_data`.
    ibv_wr_set_inline_data => wr_set_inline_data(addr: *mut c_void, length: usize)
);
qp_ex_op!(
    /// Sets a list of inline buffers. Port of verbs.h `ibv_wr_set_inline_data_list`.
    ibv_wr_set_inline_data_list => wr_set_inline_data_list(num_buf: usize, buf_list: *const ibv_data_buf)
);
qp_ex_op!(
    /// Sets the one SGE of the current request. Port of verbs.h `ibv_wr_set_sge`.
    ibv_wr_set_sge => wr_set_sge(lkey: u32, addr: u64, length: u32)
);
qp_ex_op!(
    /// Sets the SGE list of the current request. Port of verbs.h `ibv_wr_set_sge_list`.
    ibv_wr_set_sge_list => wr_set_sge_list(num_sge: usize, sg_list: *const ibv_sge)
);
qp_ex_op!(
    /// Adds an atomic write of 8 bytes from `atomic_wr`. Port of verbs.h `ibv_wr_atomic_write`.
    ibv_wr_atomic_write => wr_atomic_write(rkey: u32, remote_addr: u64, atomic_wr: *const c_void)
);

#[cfg(has_ibv_wr_flush)]
qp_ex_op!(
    /// Adds a FLUSH of `len` bytes at `remote_addr` to the placement `type_`
    /// (`IBV_FLUSH_GLOBAL` / `IBV_FLUSH_PERSISTENT`) at the selectivity
    /// `level` (`IBV_FLUSH_RANGE` / `IBV_FLUSH_MR`). Port of verbs.h
    /// `ibv_wr_flush`; only built against headers that have it (not
    /// rdma-core v44's; v56's do).
    ibv_wr_flush => wr_flush(rkey: u32, remote_addr: u64, len: usize, type_: u8, level: u8)
);

/// The list of ported names, with those only some headers have.
macro_rules! ported_functions {
    ($($optional:literal),*) => {
        /// Names of the data-path functions ported in this module (for the
        /// headers this crate was built against).
        pub const PORTED_FUNCTIONS: &[&str] = &[
            $($optional,)*
            "ibv_cq_ex_to_cq",
            "ibv_end_poll",
            "ibv_next_poll",
            "ibv_poll_cq",
            "ibv_post_recv",
            "ibv_post_send",
            "ibv_post_srq_recv",
            "ibv_post_wq_recv",
            "ibv_req_notify_cq",
            "ibv_start_poll",
            "ibv_wc_read_byte_len",
            "ibv_wc_read_completion_ts",
            "ibv_wc_read_completion_wallclock_ns",
            "ibv_wc_read_cvlan",
            "ibv_wc_read_dlid_path_bits",
            "ibv_wc_read_flow_tag",
            "ibv_wc_read_imm_data",
            "ibv_wc_read_invalidated_rkey",
            "ibv_wc_read_opcode",
            "ibv_wc_read_qp_num",
            "ibv_wc_read_sl",
            "ibv_wc_read_slid",
            "ibv_wc_read_src_qp",
            "ibv_wc_read_tm_info",
            "ibv_wc_read_vendor_err",
            "ibv_wc_read_wc_flags",
            "ibv_wr_abort",
            "ibv_wr_atomic_cmp_swp",
            "ibv_wr_atomic_fetch_add",
            "ibv_wr_atomic_write",
            "ibv_wr_bind_mw",
            "ibv_wr_complete",
            "ibv_wr_local_inv",
            "ibv_wr_rdma_read",
            "ibv_wr_rdma_write",
            "ibv_wr_rdma_write_imm",
            "ibv_wr_send",
            "ibv_wr_send_imm",
            "ibv_wr_send_inv",
            "ibv_wr_send_tso",
            "ibv_wr_set_inline_data",
            "ibv_wr_set_inline_data_list",
            "ibv_wr_set_sge",
            "ibv_wr_set_sge_list",
            "ibv_wr_set_ud_addr",
            "ibv_wr_set_xrc_srqn",
            "ibv_wr_start",
        ];
    };
}
#[cfg(has_ibv_wr_flush)]
ported_functions!("ibv_wr_flush");
#[cfg(not(has_ibv_wr_flush))]
ported_functions!();
