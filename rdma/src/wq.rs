//! Work queues and RSS: receive work queues (`ibv_wq`) that are not part
//! of a QP, and the indirection tables (`ibv_rwq_ind_table`) that spread
//! incoming packets over them for receive-side scaling (an RSS raw-packet
//! QP hashes each packet to one WQ of its table).
//!
//! Neither soft device has them: rxe's and siw's providers answer
//! `ibv_create_wq` and `ibv_create_rwq_ind_table` with `EOPNOTSUPP`
//! ("not supported by rxe0", [`Error::is_unsupported`]). mlx5 has both.

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::sys;
use crate::{CompletionQueue, Error, ProtectionDomain, RecvWr, Result};

/// The state of a work queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WqState {
    /// Just created, or reset: receives are not taken.
    Reset,
    /// Ready: receives are taken and filled.
    Ready,
    /// Error: outstanding receives are flushed.
    Error,
}

impl WqState {
    fn raw(self) -> sys::ibv_wq_state {
        match self {
            WqState::Reset => sys::IBV_WQS_RESET,
            WqState::Ready => sys::IBV_WQS_RDY,
            WqState::Error => sys::IBV_WQS_ERR,
        }
    }
}

/// A receive work queue (`ibv_wq` of type `IBV_WQT_RQ`).
///
/// Cloning shares it; indirection tables holding it keep it alive. It
/// keeps its PD and CQ alive.
#[derive(Clone)]
pub struct WorkQueue {
    inner: Arc<WqInner>,
}

struct WqInner {
    raw: NonNull<sys::ibv_wq>,
    pd: ProtectionDomain,
    _cq: CompletionQueue,
}

// SAFETY: posting to a WQ takes the provider's lock on it (mlx5
// `rwq->rq.lock`); modify and destroy are commands on the uverbs file.
// The Rust fields never change.
unsafe impl Send for WqInner {}
// SAFETY: as above.
unsafe impl Sync for WqInner {}

impl Drop for WqInner {
    fn drop(&mut self) {
        // SAFETY: destroyed once, after every table holding it (they hold
        // this Arc), before its PD and CQ (fields dropped after this).
        unsafe { sys::ibv_destroy_wq(self.raw.as_ptr()) };
    }
}

impl WorkQueue {
    /// Creates a receive WQ of `max_wr` receives of up to `max_sge` SGEs
    /// in `pd`, completing to `cq` (`ibv_create_wq`), in the RESET state.
    /// The PD and CQ must be of one context, and the sizes at least 1
    /// (else `EINVAL`, before the provider sees them).
    pub fn new(
        pd: &ProtectionDomain,
        cq: &CompletionQueue,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<WorkQueue> {
        const VERB: &str = "ibv_create_wq";
        crate::pd::same_context(VERB, "PD", pd.context(), "CQ", cq.context())?;
        if max_wr == 0 || max_sge == 0 {
            return Err(Error::invalid(
                VERB,
                "a WQ needs at least 1 receive of at least 1 SGE",
            ));
        }
        let mut attr = init_attr(pd.as_raw(), cq.as_raw(), max_wr, max_sge);
        // SAFETY: a live context; `attr` is complete (no optional field) and
        // names a live PD and CQ of it (checked above), kept alive by the WQ.
        // ibv_create_wq is verbs.h's static inline, EOPNOTSUPP where the
        // provider has no WQs.
        let raw = unsafe { sys::ibv_create_wq(pd.context().as_raw(), &mut attr) };
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::last(VERB).unsupported_on(pd.context().name(), "work queues"))?;
        Ok(WorkQueue {
            inner: Arc::new(WqInner {
                raw,
                pd: pd.clone(),
                _cq: cq.clone(),
            }),
        })
    }

    /// The WQ's number.
    pub fn wq_num(&self) -> u32 {
        // SAFETY: a live WQ; plain data set at creation.
        unsafe { (*self.as_raw()).wq_num }
    }

    /// Moves the WQ to `state` (`ibv_modify_wq`).
    pub fn modify(&self, state: WqState) -> Result<()> {
        let mut attr = state_attr(state);
        // SAFETY: a live WQ; `attr` is complete for its mask and read during
        // the call only.
        let rc = unsafe { sys::ibv_modify_wq(self.as_raw(), &mut attr) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_modify_wq", rc));
        }
        Ok(())
    }

    /// Posts receive work requests (`ibv_post_wq_recv`). On failure the
    /// error says which request was refused; it and the ones after it were
    /// not posted, the ones before it were.
    pub fn post_recv(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        const VERB: &str = "ibv_post_wq_recv";
        let head = crate::wr::link_list(wrs);
        if head.is_null() {
            return Ok(());
        }
        let mut bad = ptr::null_mut();
        // SAFETY: a live WQ; `link_list` linked the RecvWrs of `wrs` into a
        // NULL-terminated list at `head`, borrowed for the call, whose SGEs
        // name registered memory (see crate::mr for why receives into it
        // stay sound).
        let rc = unsafe { sys::ibv_post_wq_recv(self.as_raw(), head, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let size = std::mem::size_of::<RecvWr<'_>>();
        let off = (bad as usize).wrapping_sub(head as usize);
        let index = (off % size == 0 && off / size < wrs.len()).then_some(off / size);
        Err(crate::wr::post_error(VERB, rc, index))
    }

    /// The raw WQ, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_wq {
        self.inner.raw.as_ptr()
    }

    fn context(&self) -> &crate::Context {
        self.inner.pd.context()
    }
}

/// The `ibv_wq_init_attr` of a receive WQ.
pub(crate) fn init_attr(
    pd: *mut sys::ibv_pd,
    cq: *mut sys::ibv_cq,
    max_wr: u32,
    max_sge: u32,
) -> sys::ibv_wq_init_attr {
    sys::ibv_wq_init_attr {
        wq_context: ptr::null_mut(),
        wq_type: sys::IBV_WQT_RQ,
        max_wr,
        max_sge,
        pd,
        cq,
        comp_mask: 0,
        create_flags: 0,
    }
}

/// The `ibv_wq_attr` that moves a WQ to `state`.
pub(crate) fn state_attr(state: WqState) -> sys::ibv_wq_attr {
    sys::ibv_wq_attr {
        attr_mask: sys::IBV_WQ_ATTR_STATE,
        wq_state: state.raw(),
        curr_wq_state: 0,
        flags: 0,
        flags_mask: 0,
    }
}

impl fmt::Debug for WorkQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("wq_num", &self.wq_num())
            .finish()
    }
}

/// A receive WQ indirection table (`ibv_rwq_ind_table`): 2^n WQs an RSS
/// QP spreads packets over. It keeps its WQs alive.
pub struct RwqIndTable {
    raw: NonNull<sys::ibv_rwq_ind_table>,
    _wqs: Vec<WorkQueue>,
}

// SAFETY: a table is a kernel handle, never mutated after creation.
unsafe impl Send for RwqIndTable {}
// SAFETY: as above.
unsafe impl Sync for RwqIndTable {}

impl Drop for RwqIndTable {
    fn drop(&mut self) {
        // SAFETY: destroyed once, before its WQs (held here).
        unsafe { sys::ibv_destroy_rwq_ind_table(self.raw.as_ptr()) };
    }
}

impl RwqIndTable {
    /// Creates a table of `wqs` (`ibv_create_rwq_ind_table`): a power of
    /// two of them (1, 2, 4, ...), of one context (else `EINVAL`, before
    /// the provider sees them). A WQ may appear more than once.
    pub fn new(wqs: &[&WorkQueue]) -> Result<RwqIndTable> {
        const VERB: &str = "ibv_create_rwq_ind_table";
        let log = log_size(wqs.len()).ok_or_else(|| {
            Error::invalid(
                VERB,
                format!(
                    "an indirection table holds a power of two of WQs, not {}",
                    wqs.len()
                ),
            )
        })?;
        let ctx = wqs[0].context();
        for wq in &wqs[1..] {
            crate::pd::same_context(VERB, "first WQ", ctx, "WQ", wq.context())?;
        }
        let mut raws: Vec<*mut sys::ibv_wq> = wqs.iter().map(|w| w.as_raw()).collect();
        let mut attr = sys::ibv_rwq_ind_table_init_attr {
            log_ind_tbl_size: log,
            ind_tbl: raws.as_mut_ptr(),
            comp_mask: 0,
        };
        // SAFETY: a live context; `attr` names 2^log live WQs of it (checked
        // above), read during the call; the table keeps the WQs alive.
        let raw = unsafe { sys::ibv_create_rwq_ind_table(ctx.as_raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last(VERB).unsupported_on(ctx.name(), "RSS indirection tables")
        })?;
        Ok(RwqIndTable {
            raw,
            _wqs: wqs.iter().map(|w| (*w).clone()).collect(),
        })
    }

    /// The raw table, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_rwq_ind_table {
        self.raw.as_ptr()
    }
}

/// log2 of `n` if `n` is a power of two (of at least 1).
fn log_size(n: usize) -> Option<u32> {
    n.is_power_of_two().then(|| n.trailing_zeros())
}

impl fmt::Debug for RwqIndTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwqIndTable")
            .field("wqs", &self._wqs.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_hold_a_power_of_two() {
        assert_eq!(log_size(0), None);
        assert_eq!(log_size(1), Some(0));
        assert_eq!(log_size(3), None);
        assert_eq!(log_size(64), Some(6));
        let e = RwqIndTable::new(&[]).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert_eq!(e.verb(), "ibv_create_rwq_ind_table");
    }

    #[test]
    fn attrs_name_what_they_set() {
        let a = state_attr(WqState::Ready);
        assert_eq!(
            (a.attr_mask, a.wq_state),
            (sys::IBV_WQ_ATTR_STATE, sys::IBV_WQS_RDY)
        );
        let i = init_attr(ptr::null_mut(), ptr::null_mut(), 8, 2);
        assert_eq!(
            (i.wq_type, i.max_wr, i.max_sge, i.comp_mask),
            (sys::IBV_WQT_RQ, 8, 2, 0)
        );
    }
}
