//! Completion queues: classic (`ibv_poll_cq`) and extended (`ibv_cq_ex`).
//!
//! This file holds the queue and its classic data path (poll, arm, resize);
//! `builder` makes queues, `ex` is the extended poll, `wait` holds the
//! blocking waits and the channel's events. The provider and release
//! checks they need are asked of `crate::provider`.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;

use crate::sys;
use crate::{CompletionBuf, CompletionChannel, Context, Error, Result, WorkCompletion};

mod builder;
mod ex;
mod wait;

pub use builder::CqBuilder;
pub use ex::{ExCompletion, ExPoll, WcFlags};

/// A completion queue (`ibv_cq`, or `ibv_cq_ex` when created extended).
///
/// Cloning shares it; queue pairs using it keep it alive.
#[derive(Clone)]
pub struct CompletionQueue {
    /// The CQ of `inner`, copied here for `as_raw`. Polls load it from
    /// `inner.poll_raw`, which also says whether an extended poll is on.
    raw: NonNull<sys::ibv_cq>,
    pub(crate) inner: Arc<CqInner>,
}

// SAFETY: `raw` is the CQ `inner` owns (which is Send and Sync, see below)
// and lives as long as this handle's `Arc`; verbs on it may be called from
// any thread.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above; `raw` is never changed.
unsafe impl Sync for CompletionQueue {}

pub(crate) struct CqInner {
    ctx: Context,
    channel: Option<CompletionChannel>,
    raw: NonNull<sys::ibv_cq>,
    ex: Option<NonNull<sys::ibv_cq_ex>>,
    /// Whether `ibv_next_poll` must be avoided (see [`ExPoll`]).
    one_per_poll: bool,
    /// The fields the extended CQ was created with (the provider filled
    /// only their `read_*` ops).
    wc_flags: WcFlags,
    /// `raw`, or the stand-in [`busy_cq`] while an [`ExPoll`] of this CQ
    /// lives: the provider holds the CQ's lock until it ends, so a poll,
    /// another start or an arm of this CQ before then would wait for a lock
    /// its own thread holds. `poll` and `req_notify` call whatever CQ they
    /// load from here; the stand-in's ops refuse, so the check costs the
    /// data path nothing.
    poll_raw: AtomicPtr<sys::ibv_cq>,
    unacked: AtomicU32,
}

// SAFETY: verbs on a CQ may be called from any thread; providers lock their
// CQs internally. The Rust state is atomics.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        let n = self.unacked.swap(0, Ordering::AcqRel);
        if n > 0 {
            // SAFETY: acknowledges events this CQ received and counted;
            // ibv_destroy_cq would wait for them otherwise.
            unsafe { sys::ibv_ack_cq_events(self.raw.as_ptr(), n) };
        }
        // SAFETY: destroyed once, after every QP using it (they hold this Arc).
        unsafe { sys::ibv_destroy_cq(self.raw.as_ptr()) };
    }
}

impl CompletionQueue {
    /// The context of the queue.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The fields the extended queue's completions carry; `None` for a
    /// classic queue.
    pub fn wc_flags(&self) -> Option<WcFlags> {
        self.inner.ex.map(|_| self.inner.wc_flags)
    }

    /// The number of entries the provider allocated.
    pub fn cqe(&self) -> i32 {
        // SAFETY: a live CQ; `cqe` is set at creation.
        unsafe { (*self.raw.as_ptr()).cqe }
    }

    /// Resizes the queue to at least `cqe` entries (`ibv_resize_cq`); the
    /// completions in it stay, in order, and [`cqe`](Self::cqe) reports the
    /// new size.
    ///
    /// rxe resizes (and refuses, `EINVAL`, a size below the completions
    /// the queue holds); siw has no resize and fails with `EOPNOTSUPP`, as
    /// do other providers without it. Refused before the provider sees it:
    /// `cqe` below 1 or above the device's `max_cqe` (`EINVAL`), and a
    /// resize while an [`ExPoll`] of the queue lives (`EBUSY`: the provider
    /// holds the queue's lock for the poll). A failed resize leaves the
    /// queue as it was.
    ///
    /// Polls on other threads wait for the resize on the provider's lock
    /// (rxe, mlx5). `cqe` is a plain read of the size the provider writes
    /// during the resize: call it on the resizing thread, or after.
    pub fn resize(&self, cqe: i32) -> Result<()> {
        if cqe < 1 {
            return Err(Error::invalid(
                "ibv_resize_cq",
                format!("a CQ needs at least 1 entry, not {cqe}"),
            ));
        }
        let max = self.inner.ctx.query_device()?.max_cqe();
        if cqe > max {
            return Err(Error::invalid(
                "ibv_resize_cq",
                format!("{cqe} entries exceed the device's max_cqe of {max}"),
            ));
        }
        // Relaxed, as in `poll`: only an ExPoll of this thread must be seen.
        let cq = self.inner.poll_raw.load(Ordering::Relaxed);
        if cq != self.inner.raw.as_ptr() {
            return Err(busy_error("ibv_resize_cq"));
        }
        // SAFETY: a live CQ, not inside an extended poll of this thread
        // (checked just above; only this thread could start one, and it is
        // here), so the provider's lock, which rxe's resize takes, is free
        // or held by another thread that releases it. The CQ is not
        // destroyed during the call (`self` holds it).
        let rc = unsafe { sys::ibv_resize_cq(self.inner.raw.as_ptr(), cqe) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_resize_cq", rc));
        }
        Ok(())
    }

    /// Sets the queue's completion moderation (`ibv_modify_cq` with
    /// `IBV_CQ_ATTR_MODERATE`): the completion event fires once `count`
    /// completions have arrived or `period_us` microseconds have passed
    /// since the first of them, whichever comes first. Moderation delays
    /// events only; polls see every completion as soon as it arrives.
    ///
    /// Refused before the provider sees it (`EINVAL`): a `count` or
    /// `period_us` above the device's moderation limits (`cq_mod_caps`),
    /// where it states any. Providers without moderation (rxe and siw
    /// among them) fail with `EOPNOTSUPP`; the queue is unchanged then.
    pub fn modify(&self, count: u16, period_us: u16) -> Result<()> {
        let attr = self.inner.ctx.query_device()?;
        let caps = attr.as_raw().cq_mod_caps;
        if caps.max_cq_count != 0 && (count > caps.max_cq_count || period_us > caps.max_cq_period) {
            return Err(Error::invalid(
                "ibv_modify_cq",
                format!(
                    "moderation of {count} completions / {period_us} us exceeds the device's \
                     {} / {} us",
                    caps.max_cq_count, caps.max_cq_period
                ),
            ));
        }
        let mut m = sys::ibv_modify_cq_attr {
            attr_mask: sys::IBV_CQ_ATTR_MODERATE,
            moderate: sys::ibv_moderate_cq {
                cq_count: count,
                cq_period: period_us,
            },
        };
        // SAFETY: a live CQ (`self` holds it); `m` is complete for its mask
        // and lives for the call. Moderation takes none of the queue's
        // locks, so an extended poll of this thread does not matter.
        let rc = unsafe { sys::ibv_modify_cq(self.inner.raw.as_ptr(), &mut m) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_modify_cq", rc));
        }
        Ok(())
    }

    /// Whether the queue is extended (see [`CqBuilder::extended`]).
    pub fn is_extended(&self) -> bool {
        self.inner.ex.is_some()
    }

    /// The raw CQ, valid while this value lives.
    #[inline]
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        self.raw.as_ptr()
    }

    /// Polls up to `out.len()` completions into caller-owned storage; returns
    /// the filled part (empty when the queue is empty). Allocates nothing.
    ///
    /// Poll into initialised storage made once (`[WorkCompletion::ZERO; 16]`):
    /// `MaybeUninit` storage is zeroed before every poll (see
    /// [`CompletionBuf`]). Fails with `EBUSY` while an [`ExPoll`] of this
    /// queue is alive.
    #[inline]
    pub fn poll<'a, B: CompletionBuf + ?Sized>(
        &self,
        out: &'a mut B,
    ) -> Result<&'a mut [WorkCompletion]> {
        let out = out.as_completions();
        // Relaxed: only an ExPoll of this thread must be seen; one on
        // another thread, unseen, makes the provider wait for its lock.
        let cq = self.inner.poll_raw.load(Ordering::Relaxed);
        // SAFETY: `cq` is this live CQ, not inside an extended poll of this
        // thread, or the stand-in, which only refuses (an ExPoll puts it in
        // `poll_raw` while it lives).
        unsafe { poll_into(cq, out) }
    }

    /// Asks for a completion event on the queue's channel at the next
    /// completion (only solicited ones when `solicited_only`). Fails with
    /// `EBUSY` while an [`ExPoll`] of this queue is alive.
    #[inline]
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let cq = self.inner.poll_raw.load(Ordering::Relaxed);
        // SAFETY: this live CQ, not inside an extended poll of this thread,
        // or the stand-in (as in `poll`; some providers take the CQ's lock
        // to arm it).
        let rc = unsafe { sys::ibv_req_notify_cq(cq, solicited_only as i32) };
        if rc != 0 {
            return Err(req_notify_error(cq, rc));
        }
        Ok(())
    }

    /// The channel the queue reports events on.
    pub fn channel(&self) -> Option<&CompletionChannel> {
        self.inner.channel.as_ref()
    }
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("cqe", &self.cqe())
            .field("extended", &self.is_extended())
            .finish()
    }
}

/// `ibv_poll_cq` into `out`; the filled part.
///
/// # Safety
/// `cq` must be a live CQ that this thread is not polling with the extended
/// API.
#[inline(always)]
unsafe fn poll_into(
    cq: *mut sys::ibv_cq,
    out: &mut [WorkCompletion],
) -> Result<&mut [WorkCompletion]> {
    let n = out.len().min(i32::MAX as usize) as i32;
    // SAFETY: per the contract; `out` is `n` writable, initialised entries
    // of a type layout-identical to ibv_wc, so what the provider leaves
    // unwritten stays initialised.
    let rc = unsafe { sys::ibv_poll_cq(cq, n, out.as_mut_ptr().cast()) };
    if rc < 0 {
        return Err(poll_error(rc));
    }
    // SAFETY: a provider returns at most `n`, the entries it filled.
    Ok(unsafe { out.get_unchecked_mut(..rc as usize) })
}

/// The error of a failed `ibv_poll_cq` (a negative count; no errno is set).
#[cold]
#[inline(never)]
fn poll_error(rc: i32) -> Error {
    if rc == BUSY_POLL {
        return busy_error("ibv_poll_cq");
    }
    Error::new("ibv_poll_cq", libc::EIO)
}

#[cold]
#[inline(never)]
fn req_notify_error(cq: *mut sys::ibv_cq, rc: i32) -> Error {
    if cq == busy_cq() {
        return busy_error("ibv_req_notify_cq");
    }
    Error::from_rc("ibv_req_notify_cq", rc)
}

/// What the stand-in CQ's `poll_cq` returns: a negative count no provider
/// returns (they return -1 or a negated errno), so that the cold path tells
/// it from a provider's failure without keeping the CQ pointer around.
const BUSY_POLL: i32 = i32::MIN;

/// The stand-in CQ that [`CompletionQueue::poll`] and `req_notify` call
/// while an [`ExPoll`] of the queue lives: a CQ of a context of its own
/// whose `poll_cq` and `req_notify_cq` refuse ([`BUSY_POLL`] and `EBUSY`) and touch
/// nothing. One per process, never freed.
fn busy_cq() -> *mut sys::ibv_cq {
    struct Busy(*mut sys::ibv_cq);
    // SAFETY: the stand-in is written once, in `get_or_init`, and only read
    // after; its ops read no state.
    unsafe impl Send for Busy {}
    // SAFETY: as above.
    unsafe impl Sync for Busy {}
    unsafe extern "C" fn poll_busy(_: *mut sys::ibv_cq, _: i32, _: *mut sys::ibv_wc) -> i32 {
        BUSY_POLL
    }
    unsafe extern "C" fn notify_busy(_: *mut sys::ibv_cq, _: i32) -> i32 {
        libc::EBUSY
    }
    static BUSY: std::sync::OnceLock<Busy> = std::sync::OnceLock::new();
    BUSY.get_or_init(|| {
        // SAFETY: ibv_context and ibv_cq are C structs of integers, pointers,
        // optional function pointers and pthread objects, for which all zero
        // bytes are valid values.
        let mut ctx: Box<sys::ibv_context> = Box::new(unsafe { std::mem::zeroed() });
        ctx.ops.poll_cq = Some(poll_busy);
        ctx.ops.req_notify_cq = Some(notify_busy);
        // SAFETY: as above.
        let mut cq: Box<sys::ibv_cq> = Box::new(unsafe { std::mem::zeroed() });
        cq.context = Box::into_raw(ctx);
        Busy(Box::into_raw(cq))
    })
    .0
}

/// The error of a verb called on a CQ while an [`ExPoll`] of it lives.
#[cold]
#[inline(never)]
fn busy_error(verb: &'static str) -> Error {
    Error::new(verb, libc::EBUSY)
        .with_hint("an extended poll of this CQ is in progress: drop the ExPoll first")
}

#[cfg(test)]
mod tests {
    use std::ffi::c_int;
    use std::mem::MaybeUninit;
    use std::ptr;

    use super::*;
    use crate::WcOpcode;

    #[test]
    fn the_stand_in_cq_refuses_polls_and_arms_with_ebusy() {
        let mut wcs = [WorkCompletion::ZERO; 4];
        // SAFETY: the stand-in's ops read nothing.
        let e = unsafe { poll_into(busy_cq(), &mut wcs) }.unwrap_err();
        assert_eq!(e.errno(), libc::EBUSY, "{e}");
        assert!(wcs.iter().all(|w| w.wr_id() == 0));
        // SAFETY: as above.
        let rc = unsafe { sys::ibv_req_notify_cq(busy_cq(), 0) };
        assert_eq!(rc, libc::EBUSY);
        assert_eq!(req_notify_error(busy_cq(), rc).errno(), libc::EBUSY);
        assert_eq!(busy_cq(), busy_cq());
    }

    /// Writes what siw's `copy_cqe` writes into the first slot, and nothing
    /// of `src_qp`, `slid`, `sl`, `pkey_index` and `dlid_path_bits`.
    unsafe extern "C" fn siw_like_poll(
        _cq: *mut sys::ibv_cq,
        n: c_int,
        wc: *mut sys::ibv_wc,
    ) -> c_int {
        if n < 1 {
            return 0;
        }
        // SAFETY: the caller passes `n` >= 1 writable entries; only fields
        // are written, never the whole entry.
        unsafe {
            (*wc).wr_id = 7;
            (*wc).byte_len = 64;
            (*wc).wc_flags = 0;
            (*wc).__bindgen_anon_1.imm_data = 0;
            (*wc).vendor_err = 0;
            (*wc).opcode = sys::IBV_WC_RECV;
            (*wc).status = sys::IBV_WC_SUCCESS;
            (*wc).qp_num = 0x11;
        }
        1
    }

    /// A CQ whose context's poll_cq is `siw_like_poll`; raw pointers, so
    /// that nothing moves the objects the CQ points to.
    struct FakeCq {
        ctx: *mut sys::ibv_context,
        cq: *mut sys::ibv_cq,
    }

    impl FakeCq {
        fn new() -> FakeCq {
            // SAFETY: plain C data; all zero is every pointer NULL, every
            // op None.
            let ctx: *mut sys::ibv_context = Box::into_raw(Box::new(unsafe { std::mem::zeroed() }));
            // SAFETY: as above.
            let cq: *mut sys::ibv_cq = Box::into_raw(Box::new(unsafe { std::mem::zeroed() }));
            // SAFETY: both were just allocated and are owned here.
            unsafe {
                (*ctx).ops.poll_cq = Some(siw_like_poll);
                (*cq).context = ctx;
            }
            FakeCq { ctx, cq }
        }
    }

    impl Drop for FakeCq {
        fn drop(&mut self) {
            // SAFETY: allocated by `new` with Box, freed once.
            unsafe {
                drop(Box::from_raw(self.cq));
                drop(Box::from_raw(self.ctx));
            }
        }
    }

    const POISON: u8 = 0xa5;

    #[test]
    fn fields_a_provider_skips_read_as_zero_from_uninit_storage() {
        let fake = FakeCq::new();
        let mut buf = [MaybeUninit::<WorkCompletion>::uninit(); 2];
        // What a stack slot may hold: the poll must not hand it out.
        // SAFETY: writes bytes into the storage, 2 entries long.
        unsafe { ptr::write_bytes(buf.as_mut_ptr(), POISON, buf.len()) };
        // SAFETY: the fake CQ's poll_cq is siw_like_poll, which reads nothing.
        let got = unsafe { poll_into(fake.cq, buf.as_completions()) }.unwrap();
        assert_eq!(got.len(), 1);
        let wc = got[0];
        assert_eq!((wc.wr_id(), wc.qp_num(), wc.byte_len()), (7, 0x11, 64));
        assert_eq!(wc.opcode(), WcOpcode::Recv);
        assert_eq!(wc.src_qp(), 0);
        assert_eq!(wc.slid(), 0);
        assert_eq!(wc.sl(), 0);
        assert_eq!(wc.pkey_index(), 0);
        assert_eq!(wc.dlid_path_bits(), 0);
        assert_eq!(wc.imm_data(), None);
        // Never written at all: Miri reports any read of a byte nobody wrote.
        let mut fresh = [MaybeUninit::<WorkCompletion>::uninit(); 2];
        // SAFETY: as above.
        let got = unsafe { poll_into(fake.cq, fresh.as_completions()) }.unwrap();
        let wc = got[0];
        let skipped = (
            wc.src_qp(),
            wc.slid(),
            wc.sl(),
            wc.pkey_index(),
            wc.dlid_path_bits(),
        );
        assert_eq!(skipped, (0, 0, 0, 0, 0));
        assert!(format!("{wc:?}").contains("wr_id: 7"));
    }

    #[test]
    fn fields_a_provider_skips_keep_the_initialised_storage() {
        let fake = FakeCq::new();
        let mut buf = [WorkCompletion::ZERO; 2];
        buf[0].0.src_qp = 0x42;
        buf[0].0.slid = 3;
        // SAFETY: as above.
        let got = unsafe { poll_into(fake.cq, buf.as_completions()) }.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].wr_id(), got[0].src_qp(), got[0].slid()),
            (7, 0x42, 3)
        );
        assert_eq!(got[0].sl(), 0);
    }

    #[test]
    fn failed_completions_report_no_immediate_or_grh() {
        let mut wc = WorkCompletion::ZERO;
        wc.0.status = sys::IBV_WC_WR_FLUSH_ERR;
        wc.0.wc_flags = sys::IBV_WC_WITH_IMM | sys::IBV_WC_WITH_INV | sys::IBV_WC_GRH;
        assert_eq!(wc.imm_data(), None);
        assert_eq!(wc.invalidated_rkey(), None);
        assert!(!wc.has_grh());
        wc.0.status = sys::IBV_WC_SUCCESS;
        wc.0.wc_flags = sys::IBV_WC_WITH_IMM | sys::IBV_WC_GRH;
        wc.0.__bindgen_anon_1.imm_data = 5u32.to_be();
        assert_eq!(wc.imm_data(), Some(5));
        assert!(wc.has_grh());
    }
}
