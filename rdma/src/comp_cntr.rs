//! Completion counters (`ibv_comp_cntr`, rdma-core v65 and newer): a pair
//! of counts the device raises as the operations of the queue pairs
//! attached to it complete, one of successes and one of errors, which a
//! program reads instead of polling a completion queue.
//!
//! Neither soft device has them: rxe's and siw's providers have no
//! `create_comp_cntr` nor `query_comp_cntr_caps`, so libibverbs answers
//! `EOPNOTSUPP` ("not supported by rxe0", [`Error::is_unsupported`]). EFA's
//! provider has them.

use std::fmt;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use bitflags::bitflags;

use crate::sys;
use crate::{Context, Error, QueuePair, Result};

bitflags! {
    /// The operations of a queue pair a counter counts
    /// (`IBV_QP_ATTACH_COMP_CNTR_OP_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CompCntrOps: u32 {
        /// Sends the queue pair posts.
        const SEND = sys::IBV_QP_ATTACH_COMP_CNTR_OP_SEND;
        /// Receives the queue pair posts.
        const RECV = sys::IBV_QP_ATTACH_COMP_CNTR_OP_RECV;
        /// RDMA READs the queue pair posts.
        const RDMA_READ = sys::IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ;
        /// RDMA READs a peer makes of this side's memory.
        const REMOTE_RDMA_READ = sys::IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ;
        /// RDMA WRITEs the queue pair posts.
        const RDMA_WRITE = sys::IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE;
        /// RDMA WRITEs a peer makes into this side's memory.
        const REMOTE_RDMA_WRITE = sys::IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE;
    }
}

/// What a counter counts (`ibv_comp_cntr_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompCntrKind {
    /// Work requests (`IBV_COMP_CNTR_TYPE_WRS`).
    WorkRequests,
    /// Bytes (`IBV_COMP_CNTR_TYPE_BYTES`).
    Bytes,
}

impl CompCntrKind {
    fn raw(self) -> sys::ibv_comp_cntr_type {
        match self {
            CompCntrKind::WorkRequests => sys::IBV_COMP_CNTR_TYPE_WRS,
            CompCntrKind::Bytes => sys::IBV_COMP_CNTR_TYPE_BYTES,
        }
    }
}

/// What a device offers of completion counters
/// ([`Context::comp_cntr_caps`], `ibv_query_comp_cntr_caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompCntrCaps {
    /// The largest value a counter holds.
    pub max_value: u64,
    /// How many counters the device makes.
    pub max_counters: u32,
    /// The operations a counter can be attached for.
    pub supported_ops: CompCntrOps,
}

impl Context {
    /// What the device offers of completion counters
    /// (`ibv_query_comp_cntr_caps`); [`Error::is_unsupported`] where the
    /// provider has none (rxe, siw).
    pub fn comp_cntr_caps(&self) -> Result<CompCntrCaps> {
        const VERB: &str = "ibv_query_comp_cntr_caps";
        let mut caps = MaybeUninit::<sys::ibv_comp_cntr_caps>::zeroed();
        // SAFETY: an open context; `caps` is a whole ibv_comp_cntr_caps,
        // whose size verbs.h's static inline passes on.
        let rc = unsafe { sys::ibv_query_comp_cntr_caps(self.as_raw(), caps.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::from_rc(VERB, rc).unsupported_on(self.name(), "completion counters"));
        }
        // SAFETY: zero-initialised plain data, filled by the query.
        let caps = unsafe { caps.assume_init() };
        Ok(CompCntrCaps {
            max_value: caps.max_value,
            max_counters: caps.max_counters,
            supported_ops: CompCntrOps::from_bits_retain(caps.supported_qp_attach_ops),
        })
    }
}

/// A completion counter (`ibv_comp_cntr`): a count of completions and one
/// of errors, raised by the device for the queue pairs attached to it
/// ([`attach`](Self::attach)), and read, set or raised by the program.
///
/// Cloning shares it; it is destroyed (`ibv_destroy_comp_cntr`) with the
/// last clone. Drop the queue pairs attached to it first: the kernel
/// refuses to destroy a counter in use, which then stays until the
/// context closes.
#[derive(Clone)]
pub struct CompletionCounter {
    inner: Arc<CntrInner>,
}

struct CntrInner {
    ctx: Context,
    raw: NonNull<sys::ibv_comp_cntr>,
    kind: CompCntrKind,
}

// SAFETY: the counter is a kernel object this crate never writes after its
// creation; each operation on it is one command of the provider (EFA's
// reads an mmapped count the device writes), which libibverbs allows from
// any thread.
unsafe impl Send for CntrInner {}
// SAFETY: as above.
unsafe impl Sync for CntrInner {}

impl Drop for CntrInner {
    fn drop(&mut self) {
        // SAFETY: destroyed once, by the last clone. A failure (a queue
        // pair still attached) cannot be handled here; the kernel frees the
        // counter with the context.
        unsafe { sys::ibv_destroy_comp_cntr(self.raw.as_ptr()) };
    }
}

impl CompletionCounter {
    /// Creates a counter of `kind` on `ctx` (`ibv_create_comp_cntr`);
    /// [`Error::is_unsupported`] where the provider has none (rxe, siw).
    pub fn new(ctx: &Context, kind: CompCntrKind) -> Result<CompletionCounter> {
        const VERB: &str = "ibv_create_comp_cntr";
        let mut attr = init_attr(kind);
        // SAFETY: an open context; `attr` is complete (no optional field),
        // read during the call only.
        let raw = unsafe { sys::ibv_create_comp_cntr(ctx.as_raw(), &mut attr) };
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::last(VERB).unsupported_on(ctx.name(), "completion counters"))?;
        Ok(CompletionCounter {
            inner: Arc::new(CntrInner {
                ctx: ctx.clone(),
                raw,
                kind,
            }),
        })
    }

    /// What it counts.
    pub fn kind(&self) -> CompCntrKind {
        self.inner.kind
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw counter, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_comp_cntr {
        self.inner.raw.as_ptr()
    }

    /// The count of completions (`ibv_read_comp_cntr`).
    pub fn read(&self) -> Result<u64> {
        self.read_with("ibv_read_comp_cntr", sys::ibv_read_comp_cntr)
    }

    /// The count of errors (`ibv_read_err_comp_cntr`).
    pub fn read_errors(&self) -> Result<u64> {
        self.read_with("ibv_read_err_comp_cntr", sys::ibv_read_err_comp_cntr)
    }

    /// Sets the count of completions (`ibv_set_comp_cntr`).
    pub fn set(&self, value: u64) -> Result<()> {
        self.write_with("ibv_set_comp_cntr", sys::ibv_set_comp_cntr, value)
    }

    /// Sets the count of errors (`ibv_set_err_comp_cntr`).
    pub fn set_errors(&self, value: u64) -> Result<()> {
        self.write_with("ibv_set_err_comp_cntr", sys::ibv_set_err_comp_cntr, value)
    }

    /// Raises the count of completions by `amount` (`ibv_inc_comp_cntr`).
    pub fn inc(&self, amount: u64) -> Result<()> {
        self.write_with("ibv_inc_comp_cntr", sys::ibv_inc_comp_cntr, amount)
    }

    /// Raises the count of errors by `amount` (`ibv_inc_err_comp_cntr`).
    pub fn inc_errors(&self, amount: u64) -> Result<()> {
        self.write_with("ibv_inc_err_comp_cntr", sys::ibv_inc_err_comp_cntr, amount)
    }

    /// Attaches the counter to `qp` for the operations `ops`
    /// (`ibv_qp_attach_comp_cntr`): from then on the device counts them.
    /// A queue pair of another context, or no operation, is refused
    /// (`EINVAL`) before the provider sees it.
    pub fn attach(&self, qp: &QueuePair, ops: CompCntrOps) -> Result<()> {
        const VERB: &str = "ibv_qp_attach_comp_cntr";
        crate::pd::same_context(VERB, "counter", self.context(), "QP", qp.context())?;
        if ops.is_empty() {
            return Err(Error::invalid(VERB, "no operation to count"));
        }
        let mut attr = sys::ibv_qp_attach_comp_cntr_attr {
            comp_mask: 0,
            op_mask: ops.bits(),
        };
        // SAFETY: a live QP and counter of one context (checked above);
        // `attr` is complete and read during the call only.
        let rc = unsafe { sys::ibv_qp_attach_comp_cntr(qp.as_raw(), self.as_raw(), &mut attr) };
        if rc != 0 {
            return Err(Error::from_rc(VERB, rc)
                .unsupported_on(self.context().name(), "completion counters"));
        }
        Ok(())
    }

    fn read_with(
        &self,
        verb: &'static str,
        f: unsafe extern "C" fn(*mut sys::ibv_comp_cntr, *mut u64) -> i32,
    ) -> Result<u64> {
        let mut value = 0u64;
        // SAFETY: a live counter; `value` is writable for the call.
        let rc = unsafe { f(self.as_raw(), &mut value) };
        if rc != 0 {
            return Err(Error::from_rc(verb, rc));
        }
        Ok(value)
    }

    fn write_with(
        &self,
        verb: &'static str,
        f: unsafe extern "C" fn(*mut sys::ibv_comp_cntr, u64) -> i32,
        value: u64,
    ) -> Result<()> {
        // SAFETY: a live counter; plain value.
        let rc = unsafe { f(self.as_raw(), value) };
        if rc != 0 {
            return Err(Error::from_rc(verb, rc));
        }
        Ok(())
    }
}

/// The `ibv_comp_cntr_init_attr` of a counter of `kind`.
fn init_attr(kind: CompCntrKind) -> sys::ibv_comp_cntr_init_attr {
    sys::ibv_comp_cntr_init_attr {
        comp_mask: 0,
        type_: kind.raw(),
        flags: 0,
    }
}

impl fmt::Debug for CompletionCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionCounter")
            .field("device", &self.inner.ctx.name())
            .field("kind", &self.inner.kind)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_attr_names_the_kind_and_no_optional_field() {
        let a = init_attr(CompCntrKind::Bytes);
        assert_eq!(
            (a.comp_mask, a.type_, a.flags),
            (0, sys::IBV_COMP_CNTR_TYPE_BYTES, 0)
        );
        assert_eq!(
            init_attr(CompCntrKind::WorkRequests).type_,
            sys::IBV_COMP_CNTR_TYPE_WRS
        );
    }

    #[test]
    fn counter_ops_are_the_c_bits() {
        assert_eq!(CompCntrOps::all().bits(), 0x3f);
        assert_eq!(CompCntrOps::REMOTE_RDMA_WRITE.bits(), 1 << 5);
    }
}
