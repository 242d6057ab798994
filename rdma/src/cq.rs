//! Completion queues: classic (`ibv_poll_cq`) and extended (`ibv_cq_ex`).

use std::fmt;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::sys;
use crate::{CompletionChannel, Context, Error, Result, WcOpcode, WcStatus, WorkCompletion};

/// The rdma-core release this crate was built against (0 if unknown).
const RDMA_CORE_RELEASE: u32 = match u32::from_str_radix(env!("RDMA_CORE_RELEASE"), 10) {
    Ok(r) => r,
    Err(_) => 0,
};

/// The vendor ID of soft-RoCE devices.
const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

/// Events are acknowledged in batches of this many (ack takes a lock).
const ACK_BATCH: u32 = 32;

/// A completion queue (`ibv_cq`, or `ibv_cq_ex` when created extended).
///
/// Cloning shares it; queue pairs using it keep it alive.
#[derive(Clone)]
pub struct CompletionQueue {
    /// The CQ of `inner`, copied here so that a poll reaches the provider
    /// without going through the `Arc`.
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
    unacked: AtomicU32,
}

// SAFETY: verbs on a CQ may be called from any thread; providers lock their
// CQs internally. The only Rust state is an atomic counter.
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

/// How to create a completion queue.
#[derive(Debug, Clone)]
pub struct CqBuilder<'a> {
    ctx: &'a Context,
    cqe: i32,
    channel: Option<&'a CompletionChannel>,
    comp_vector: i32,
    extended: bool,
}

impl<'a> CqBuilder<'a> {
    /// At least `cqe` entries (the provider may round up).
    pub fn cqe(mut self, cqe: i32) -> Self {
        self.cqe = cqe;
        self
    }
    /// Reports completion events on `channel`.
    pub fn channel(mut self, channel: &'a CompletionChannel) -> Self {
        self.channel = Some(channel);
        self
    }
    /// The completion vector (interrupt) to use.
    pub fn comp_vector(mut self, v: i32) -> Self {
        self.comp_vector = v;
        self
    }
    /// Creates an extended CQ (`ibv_create_cq_ex`) where the provider has one,
    /// and a classic one where it does not (siw): check
    /// [`CompletionQueue::is_extended`].
    pub fn extended(mut self, extended: bool) -> Self {
        self.extended = extended;
        self
    }

    /// Creates the queue.
    pub fn build(self) -> Result<CompletionQueue> {
        let ch = self.channel.map_or(ptr::null_mut(), |c| c.as_raw());
        if self.extended {
            if let Some(cq) = self.create_ex(ch)? {
                return Ok(cq);
            }
        }
        // SAFETY: an open context; `ch` is NULL or a live channel of it.
        let raw = unsafe {
            sys::ibv_create_cq(
                self.ctx.as_raw(),
                self.cqe,
                ptr::null_mut(),
                ch,
                self.comp_vector,
            )
        };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("ibv_create_cq"))?;
        Ok(self.wrap(raw, None))
    }

    /// An extended CQ, or `None` where the provider has none.
    fn create_ex(&self, ch: *mut sys::ibv_comp_channel) -> Result<Option<CompletionQueue>> {
        // SAFETY: plain data; zero is valid for every field.
        let mut attr: sys::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        attr.cqe = self.cqe as u32;
        attr.channel = ch;
        attr.comp_vector = self.comp_vector as u32;
        attr.wc_flags = u64::from(sys::IBV_WC_STANDARD_FLAGS);
        // SAFETY: an open context; `attr` is complete.
        let raw = unsafe { sys::ibv_create_cq_ex(self.ctx.as_raw(), &mut attr) };
        match NonNull::new(raw) {
            Some(ex) => Ok(Some(self.wrap(ex.cast(), Some(ex)))),
            None => {
                let e = Error::last("ibv_create_cq_ex");
                if matches!(e.errno(), libc::EOPNOTSUPP | libc::ENOSYS) {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    fn wrap(
        &self,
        raw: NonNull<sys::ibv_cq>,
        ex: Option<NonNull<sys::ibv_cq_ex>>,
    ) -> CompletionQueue {
        let one_per_poll = ex.is_some() && next_poll_is_broken(self.ctx);
        CompletionQueue {
            raw,
            inner: Arc::new(CqInner {
                ctx: self.ctx.clone(),
                channel: self.channel.cloned(),
                raw,
                ex,
                one_per_poll,
                unacked: AtomicU32::new(0),
            }),
        }
    }
}

/// rdma-core before v55: rxe's `next_poll` on an empty queue publishes the
/// consumer index and unlocks, and the `end_poll` that must follow advances
/// the index again and unlocks twice; completions are lost.
fn next_poll_is_broken(ctx: &Context) -> bool {
    let is_rxe = ctx
        .query_device()
        .map(|a| a.vendor_id() == RXE_VENDOR_ID)
        .unwrap_or(true);
    is_rxe && RDMA_CORE_RELEASE < 55
}

impl CompletionQueue {
    /// A builder for a queue on `ctx` (default: 64 entries, no channel, classic).
    pub fn builder(ctx: &Context) -> CqBuilder<'_> {
        CqBuilder {
            ctx,
            cqe: 64,
            channel: None,
            comp_vector: 0,
            extended: false,
        }
    }

    /// A classic queue of at least `cqe` entries.
    pub fn new(ctx: &Context, cqe: i32) -> Result<CompletionQueue> {
        Self::builder(ctx).cqe(cqe).build()
    }

    /// The context of the queue.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The number of entries the provider allocated.
    pub fn cqe(&self) -> i32 {
        // SAFETY: a live CQ; `cqe` is set at creation.
        unsafe { (*self.raw.as_ptr()).cqe }
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
    #[inline]
    pub fn poll<'a>(
        &self,
        out: &'a mut [MaybeUninit<WorkCompletion>],
    ) -> Result<&'a mut [WorkCompletion]> {
        let n = out.len().min(i32::MAX as usize) as i32;
        // SAFETY: a live CQ; `out` has room for `n` entries of a type
        // layout-identical to ibv_wc. The port calls the provider directly.
        let rc = unsafe { sys::ibv_poll_cq(self.as_raw(), n, out.as_mut_ptr().cast()) };
        if rc < 0 {
            return Err(poll_error());
        }
        // SAFETY: the provider initialised the first `rc` entries.
        Ok(unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), rc as usize) })
    }

    /// Asks for a completion event on the queue's channel at the next
    /// completion (only solicited ones when `solicited_only`).
    #[inline]
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: a live CQ.
        let rc = unsafe { sys::ibv_req_notify_cq(self.as_raw(), solicited_only as i32) };
        if rc != 0 {
            return Err(req_notify_error(rc));
        }
        Ok(())
    }

    /// The channel the queue reports events on.
    pub fn channel(&self) -> Option<&CompletionChannel> {
        self.inner.channel.as_ref()
    }

    /// Waits for a completion event on the queue's channel and acknowledges
    /// it (in batches). Returns `Ok(false)` when the channel is non-blocking
    /// and no event is pending. Re-arm with [`req_notify`](Self::req_notify)
    /// and poll afterwards.
    ///
    /// With a channel shared by several queues, an event of another queue is
    /// acknowledged too and reported as `Ok(true)`: poll every queue then.
    pub fn get_event(&self) -> Result<bool> {
        let ch = self.inner.channel.as_ref().ok_or_else(|| {
            Error::invalid("ibv_get_cq_event", "the CQ has no completion channel")
        })?;
        let mut cq = ptr::null_mut();
        let mut cq_ctx = ptr::null_mut();
        // SAFETY: a live channel; the out-parameters are writable.
        let rc = unsafe { sys::ibv_get_cq_event(ch.as_raw(), &mut cq, &mut cq_ctx) };
        if rc != 0 {
            // Checked before an Error is built: EAGAIN is the usual end of a
            // non-blocking drain, not a failure.
            let errno = crate::error::last_errno();
            if errno == libc::EAGAIN {
                return Ok(false);
            }
            return Err(Error::new("ibv_get_cq_event", errno));
        }
        if cq == self.as_raw() {
            self.count_event();
        } else {
            // SAFETY: the event's CQ cannot be destroyed before its events are
            // acknowledged (ibv_destroy_cq waits), so the pointer is live.
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
        }
        Ok(true)
    }

    fn count_event(&self) {
        let n = self.inner.unacked.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= ACK_BATCH {
            let n = self.inner.unacked.swap(0, Ordering::AcqRel);
            if n > 0 {
                // SAFETY: acknowledges events this CQ received.
                unsafe { sys::ibv_ack_cq_events(self.as_raw(), n) };
            }
        }
    }

    /// Starts an extended poll: `Ok(None)` when the queue is empty, else a
    /// lending iterator over the completions, which ends the poll when
    /// dropped. Fails with `EOPNOTSUPP` on a classic queue.
    ///
    /// On rxe of rdma-core before v55 each poll yields one completion: that
    /// provider loses completions when `ibv_next_poll` finds the queue empty.
    pub fn start_poll(&self) -> Result<Option<ExPoll<'_>>> {
        let ex = self.inner.ex.ok_or_else(|| {
            Error::new("ibv_start_poll", libc::EOPNOTSUPP).with_hint("the CQ is not extended")
        })?;
        // SAFETY: plain data.
        let mut attr: sys::ibv_poll_cq_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live extended CQ, not inside a poll (an `ExPoll` borrows
        // the queue for the poll's length and ends it on drop).
        let rc = unsafe { sys::ibv_start_poll(ex.as_ptr(), &mut attr) };
        match rc {
            0 => Ok(Some(ExPoll {
                cq: ex,
                pending: true,
                one_per_poll: self.inner.one_per_poll,
                _cq: PhantomData,
            })),
            libc::ENOENT => Ok(None),
            e => Err(Error::new("ibv_start_poll", e)),
        }
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

/// The error of a failed `ibv_poll_cq` (a negative count; no errno is set).
#[cold]
#[inline(never)]
fn poll_error() -> Error {
    Error::new("ibv_poll_cq", libc::EIO)
}

#[cold]
#[inline(never)]
fn req_notify_error(rc: i32) -> Error {
    Error::from_rc("ibv_req_notify_cq", rc)
}

/// An extended poll in progress: a lending iterator over completions.
///
/// Dropping it ends the poll (`ibv_end_poll`). It is neither `Send` nor
/// `Sync`: the provider holds the CQ's lock for the poll's length.
pub struct ExPoll<'cq> {
    cq: NonNull<sys::ibv_cq_ex>,
    /// Whether the current completion has not been yielded yet.
    pending: bool,
    one_per_poll: bool,
    _cq: PhantomData<(&'cq CompletionQueue, *const ())>,
}

impl ExPoll<'_> {
    /// The next completion, or `None` at the end of this poll.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Option<ExCompletion<'_>> {
        if !self.pending {
            if self.one_per_poll {
                return None;
            }
            // SAFETY: inside a successful poll on a live extended CQ.
            if unsafe { sys::ibv_next_poll(self.cq.as_ptr()) } != 0 {
                self.one_per_poll = true; // ended: never call next_poll again
                return None;
            }
        }
        self.pending = false;
        Some(ExCompletion {
            cq: self.cq,
            _poll: PhantomData,
        })
    }
}

impl Drop for ExPoll<'_> {
    fn drop(&mut self) {
        // SAFETY: ends the poll that a successful start_poll began.
        unsafe { sys::ibv_end_poll(self.cq.as_ptr()) };
    }
}

/// The current completion of an [`ExPoll`]; valid until the next `next`.
pub struct ExCompletion<'p> {
    cq: NonNull<sys::ibv_cq_ex>,
    _poll: PhantomData<&'p mut ()>,
}

impl ExCompletion<'_> {
    fn raw(&self) -> *mut sys::ibv_cq_ex {
        self.cq.as_ptr()
    }
    /// The work request ID.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        // SAFETY: inside a poll; wr_id is set by start/next_poll.
        unsafe { (*self.raw()).wr_id }
    }
    /// The status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        // SAFETY: as above.
        WcStatus::from_raw(unsafe { (*self.raw()).status })
    }
    /// Whether the work request succeeded.
    #[inline]
    pub fn is_success(&self) -> bool {
        // SAFETY: as above.
        unsafe { (*self.raw()).status == sys::IBV_WC_SUCCESS }
    }
    /// The opcode.
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        // SAFETY: inside a poll; read_opcode is always provided.
        WcOpcode::from_raw(unsafe { sys::ibv_wc_read_opcode(self.raw()) })
    }
    /// The byte count.
    #[inline]
    pub fn byte_len(&self) -> u32 {
        // SAFETY: inside a poll; BYTE_LEN is among the standard flags the
        // queue was created with.
        unsafe { sys::ibv_wc_read_byte_len(self.raw()) }
    }
    /// The local QP number.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        // SAFETY: as above (QP_NUM).
        unsafe { sys::ibv_wc_read_qp_num(self.raw()) }
    }
    /// The source QP number (UD).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        // SAFETY: as above (SRC_QP).
        unsafe { sys::ibv_wc_read_src_qp(self.raw()) }
    }
    /// The `IBV_WC_*` flags.
    #[inline]
    pub fn wc_flags(&self) -> u32 {
        // SAFETY: inside a poll; read_wc_flags is always provided.
        unsafe { sys::ibv_wc_read_wc_flags(self.raw()) }
    }
    /// The immediate data, host byte order, if the completion carries it.
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        if self.wc_flags() & sys::IBV_WC_WITH_IMM != 0 {
            // SAFETY: inside a poll (IMM is a standard flag).
            Some(u32::from_be(unsafe {
                sys::ibv_wc_read_imm_data(self.raw())
            }))
        } else {
            None
        }
    }
    /// The vendor error syndrome.
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        // SAFETY: inside a poll; read_vendor_err is always provided.
        unsafe { sys::ibv_wc_read_vendor_err(self.raw()) }
    }
}

impl fmt::Debug for ExCompletion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .finish()
    }
}
