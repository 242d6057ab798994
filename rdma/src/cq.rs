//! Completion queues: classic (`ibv_poll_cq`) and extended (`ibv_cq_ex`).

use std::fmt;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::sys;
use crate::{
    CompletionBuf, CompletionChannel, Context, Error, Result, WcOpcode, WcStatus, WorkCompletion,
};

/// The first rdma-core release whose rxe `ibv_next_poll` is right on an
/// empty queue: v55 stopped it from moving the consumer index past the
/// producer (completions lost), v61 from unlocking the CQ that the
/// following `ibv_end_poll` unlocks again.
const RXE_NEXT_POLL_FIXED: u32 = 61;

/// The vendor ID of soft-RoCE devices.
const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

/// Events are acknowledged in batches of this many (ack takes a lock).
const ACK_BATCH: u32 = 32;

/// Empty polls a [`CompletionQueue::wait`] without a channel spins
/// through, then as many yields, before it sleeps between polls.
const WAIT_SPINS: u32 = 64;
/// The first sleep between the polls of a wait without a channel; each
/// doubles, up to [`WAIT_SLEEP_MAX`].
const WAIT_SLEEP_MIN: Duration = Duration::from_micros(10);
/// The longest sleep between the polls of a wait without a channel: what
/// such a wait may lag behind a completion.
const WAIT_SLEEP_MAX: Duration = Duration::from_millis(1);

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

bitflags::bitflags! {
    /// The fields an extended CQ's completions carry (`IBV_WC_EX_WITH_*`,
    /// [`CqBuilder::wc_flags`]); the provider reads out only these.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct WcFlags: u64 {
        /// [`ExCompletion::byte_len`].
        const BYTE_LEN = sys::IBV_WC_EX_WITH_BYTE_LEN as u64;
        /// [`ExCompletion::imm_data`].
        const IMM = sys::IBV_WC_EX_WITH_IMM as u64;
        /// [`ExCompletion::qp_num`].
        const QP_NUM = sys::IBV_WC_EX_WITH_QP_NUM as u64;
        /// [`ExCompletion::src_qp`].
        const SRC_QP = sys::IBV_WC_EX_WITH_SRC_QP as u64;
        /// The source LID.
        const SLID = sys::IBV_WC_EX_WITH_SLID as u64;
        /// The service level.
        const SL = sys::IBV_WC_EX_WITH_SL as u64;
        /// The DLID path bits.
        const DLID_PATH_BITS = sys::IBV_WC_EX_WITH_DLID_PATH_BITS as u64;
        /// [`ExCompletion::completion_ts`] (the device's clock).
        const COMPLETION_TIMESTAMP = sys::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP as u64;
        /// [`ExCompletion::completion_wallclock_ns`].
        const COMPLETION_TIMESTAMP_WALLCLOCK =
            sys::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK as u64;
    }
}

impl WcFlags {
    /// The fields of a classic completion (`IBV_WC_STANDARD_FLAGS`): the
    /// default.
    pub const STANDARD: WcFlags = WcFlags::from_bits_truncate(sys::IBV_WC_STANDARD_FLAGS as u64);
}

/// How to create a completion queue.
#[derive(Debug, Clone)]
pub struct CqBuilder<'a> {
    ctx: &'a Context,
    cqe: i32,
    channel: Option<&'a CompletionChannel>,
    comp_vector: i32,
    extended: bool,
    wc_flags: WcFlags,
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

    /// The fields an extended queue's completions carry (default
    /// [`WcFlags::STANDARD`]); implies [`extended`](Self::extended). An
    /// accessor of [`ExCompletion`] whose field was not asked for reads
    /// nothing: it returns 0 or `None`.
    ///
    /// Fields the provider cannot give are refused by [`build`](Self::build)
    /// (`EOPNOTSUPP`; rxe gives the standard ones only); a provider without
    /// extended CQs (siw) gets a classic one, as with `extended`.
    pub fn wc_flags(mut self, flags: WcFlags) -> Self {
        self.wc_flags = flags;
        self.extended = true;
        self
    }

    /// Creates the queue. A channel of another context is refused
    /// (`EINVAL`), as are, before the provider sees them, a `cqe` below 1
    /// or above the device's `max_cqe` and a completion vector outside
    /// `0..num_comp_vectors` (`EINVAL`, saying which).
    pub fn build(self) -> Result<CompletionQueue> {
        check_cq_args(self.ctx, self.cqe, self.comp_vector)?;
        if let Some(c) = self.channel {
            crate::pd::same_context(
                "ibv_create_cq",
                "CQ",
                self.ctx,
                "completion channel",
                c.context(),
            )?;
        }
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
        attr.wc_flags = self.wc_flags.bits();
        // SAFETY: an open context; `attr` is complete.
        let raw = unsafe { sys::ibv_create_cq_ex(self.ctx.as_raw(), &mut attr) };
        match NonNull::new(raw) {
            Some(ex) => Ok(Some(self.wrap(ex.cast(), Some(ex)))),
            None => {
                let e = Error::last("ibv_create_cq_ex");
                if !matches!(e.errno(), libc::EOPNOTSUPP | libc::ENOSYS) {
                    Err(e)
                } else if self.wc_flags != WcFlags::STANDARD && self.has_ex_cq(ch) {
                    Err(e.with_hint(format!(
                        "the provider's extended CQs carry no {:?}",
                        self.wc_flags
                    )))
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// Whether the provider makes extended CQs of the standard fields: a
    /// probe, destroyed at once.
    fn has_ex_cq(&self, ch: *mut sys::ibv_comp_channel) -> bool {
        // SAFETY: plain data; zero is valid for every field.
        let mut attr: sys::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        attr.cqe = self.cqe as u32;
        attr.channel = ch;
        attr.comp_vector = self.comp_vector as u32;
        attr.wc_flags = WcFlags::STANDARD.bits();
        // SAFETY: an open context; `attr` is complete.
        let raw = unsafe { sys::ibv_create_cq_ex(self.ctx.as_raw(), &mut attr) };
        if raw.is_null() {
            return false;
        }
        // SAFETY: the CQ just made, unused, destroyed once.
        unsafe { sys::ibv_destroy_cq(sys::ibv_cq_ex_to_cq(raw)) };
        true
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
                wc_flags: self.wc_flags,
                poll_raw: AtomicPtr::new(raw.as_ptr()),
                unacked: AtomicU32::new(0),
            }),
        }
    }
}

/// Refuses the arguments of a CQ that no provider accepts: `cqe` below 1 or
/// above the device's `max_cqe` (one `ibv_query_device_ex`), and a
/// completion vector outside `0..num_comp_vectors`, which the kernel
/// refuses too.
fn check_cq_args(ctx: &Context, cqe: i32, comp_vector: i32) -> Result<()> {
    if cqe < 1 {
        return Err(Error::invalid(
            "ibv_create_cq",
            format!("a CQ needs at least 1 entry, not {cqe}"),
        ));
    }
    let max = ctx.query_device()?.max_cqe();
    if cqe > max {
        return Err(Error::invalid(
            "ibv_create_cq",
            format!("{cqe} entries exceed the device's max_cqe of {max}"),
        ));
    }
    let vectors = ctx.num_comp_vectors();
    if !(0..vectors).contains(&comp_vector) {
        return Err(Error::invalid(
            "ibv_create_cq",
            format!("completion vector {comp_vector} is outside the device's 0..{vectors}"),
        ));
    }
    Ok(())
}

/// rdma-core before v61: rxe's `next_poll` on an empty queue unlocks the CQ
/// (and before v55 also publishes a consumer index past the last
/// completion), and the `end_poll` that must follow unlocks it again;
/// completions are lost, or another thread's poll races this one. Decided
/// by the libibverbs loaded at run time (whose providers are of its own
/// release); an unknown release counts as broken.
fn next_poll_is_broken(ctx: &Context) -> bool {
    rxe_before(ctx, RXE_NEXT_POLL_FIXED)
}

/// Whether `ctx` is an rxe device (or one that cannot be told from rxe)
/// served by an rdma-core release before `fixed` (or one that cannot be
/// told): where a bug of rxe's library, fixed in `fixed`, must be avoided.
pub(crate) fn rxe_before(ctx: &Context, fixed: u32) -> bool {
    let is_rxe = ctx
        .query_device()
        .map(|a| a.vendor_id() == RXE_VENDOR_ID)
        .unwrap_or(true);
    is_rxe && release_before(loaded_rdma_core_release(), fixed)
}

/// Whether rdma-core `release` (`None`: unknown, taken as old) comes
/// before `fixed`.
fn release_before(release: Option<u32>, fixed: u32) -> bool {
    release.is_none_or(|r| r < fixed)
}

/// The rdma-core release of the libibverbs this process loaded, from its
/// file name (`libibverbs.so.1.14.44.0`: soname 1, ABI 14, release 44);
/// `None` where it cannot be told (linked statically, renamed).
fn loaded_rdma_core_release() -> Option<u32> {
    static RELEASE: OnceLock<Option<u32>> = OnceLock::new();
    *RELEASE.get_or_init(|| {
        // The object that defines a libibverbs function is libibverbs, as
        // the dynamic linker resolved it for this process.
        let f: unsafe extern "C" fn(*mut i32) -> *mut *mut sys::ibv_device =
            sys::ibv_get_device_list;
        // SAFETY: plain data, filled by dladdr.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the address; `info` is writable.
        if unsafe { libc::dladdr(f as *const libc::c_void, &mut info) } == 0
            || info.dli_fname.is_null()
        {
            return None;
        }
        // SAFETY: dladdr set dli_fname to a NUL-terminated path that stays
        // valid while the object is loaded (libibverbs is never unloaded).
        let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
        let path = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes()),
        );
        // dli_fname is the name it was opened by (the soname link,
        // libibverbs.so.1): the file it points to carries the release.
        let real = std::fs::canonicalize(path).ok()?;
        release_from_file_name(real.file_name()?.to_str()?)
    })
}

/// The release in a libibverbs file name, `libibverbs.so.SONAME.ABI.RELEASE[.PATCH]`.
fn release_from_file_name(name: &str) -> Option<u32> {
    let mut parts = name.strip_prefix("libibverbs.so.")?.split('.');
    let (_soname, _abi) = (parts.next()?, parts.next()?);
    parts.next()?.parse().ok()
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
            wc_flags: WcFlags::STANDARD,
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

    /// Blocks until at least `min` completions have been polled into `out`,
    /// or `timeout` has passed; returns the filled part, as
    /// [`poll`](Self::poll) does. What the C API's `rdma_get_send_comp` and
    /// `rdma_get_recv_comp` do, with a timeout.
    ///
    /// A timeout is not an error: the wait returns what completed before
    /// it, fewer than `min` (none, possibly), and the caller compares the
    /// length with `min`. [`wait_one`](Self::wait_one) makes a timeout an
    /// `ETIMEDOUT` error. `Duration::MAX` waits without a limit, `min` 0
    /// or a zero `timeout` polls once. More than `min` may come back (up
    /// to `out.len()`); failed completions count like the others, so check
    /// each one's status. `min` larger than `out` fails with `EINVAL`.
    ///
    /// With a completion channel ([`CqBuilder::channel`]) the thread
    /// sleeps in the kernel: poll, arm ([`req_notify`](Self::req_notify)),
    /// poll again (a completion that came before the arm raises no event),
    /// then `poll(2)` on the channel's fd until the deadline, take the
    /// event ([`get_event`](Self::get_event), which acknowledges it) and
    /// start again. The queue may be left armed, and an event may be left
    /// on the channel for a later wait or `get_event` to take. Only one
    /// thread should read the channel meanwhile: on a blocking channel, an
    /// event another reader takes between `poll(2)` and the read makes the
    /// read wait for the next one. With a channel shared by several queues,
    /// an event of another queue is taken (and acknowledged) too.
    ///
    /// Without a channel it polls: a short spin, then yields, then sleeps
    /// growing from 10 µs to 1 ms between polls, so that a long wait costs
    /// little CPU and lags a completion by at most about 1 ms.
    ///
    /// ```no_run
    /// # use rdma::{CompletionQueue, WorkCompletion};
    /// # use std::time::Duration;
    /// # fn f(cq: &CompletionQueue) -> rdma::Result<()> {
    /// let mut wcs = [WorkCompletion::ZERO; 16];
    /// let done = cq.wait(&mut wcs, 2, Duration::from_secs(5))?;
    /// if done.len() < 2 {
    ///     eprintln!("timed out with {} of 2", done.len());
    /// }
    /// for wc in done.iter() {
    ///     assert!(wc.is_success(), "{wc:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait<'a, B: CompletionBuf + ?Sized>(
        &self,
        out: &'a mut B,
        min: usize,
        timeout: Duration,
    ) -> Result<&'a mut [WorkCompletion]> {
        let out = out.as_completions();
        let deadline = Instant::now().checked_add(timeout);
        let n = wait_loop(&mut CqWait(self), out, min, deadline)?;
        Ok(&mut out[..n])
    }

    /// Blocks until one completion arrives (successful or not: check its
    /// status) and returns it, as [`wait`](Self::wait) with `min` 1; fails
    /// with `ETIMEDOUT` ([`Error::is_timeout`]) when none came within
    /// `timeout`.
    pub fn wait_one(&self, timeout: Duration) -> Result<WorkCompletion> {
        let mut wc = [WorkCompletion::ZERO; 1];
        match self.wait(&mut wc, 1, timeout)?.first() {
            Some(wc) => Ok(*wc),
            None => Err(Error::new("CompletionQueue::wait_one", libc::ETIMEDOUT)
                .with_hint(format!("no completion within {timeout:?}"))),
        }
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
            let errno = crate::os::errno();
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
    /// The poll starts at the first completion, which the first
    /// [`next`](ExPoll::next) yields: dropping the poll consumes the
    /// completions it started at or yielded, and no others, so drop it only
    /// after `next`. One poll of a queue at a time: while it lives,
    /// `start_poll`, [`poll`](Self::poll) and [`req_notify`](Self::req_notify)
    /// on the queue (any clone, any thread) fail with `EBUSY` instead of
    /// waiting for the lock the provider holds for the poll.
    ///
    /// On rxe of rdma-core before v61 (the libibverbs loaded at run time)
    /// each poll yields one completion: that provider unlocks the queue
    /// when `ibv_next_poll` finds it empty; see
    /// [`one_per_poll`](Self::one_per_poll).
    pub fn start_poll(&self) -> Result<Option<ExPoll<'_>>> {
        let ex = self.inner.ex.ok_or_else(|| {
            Error::new("ibv_start_poll", libc::EOPNOTSUPP).with_hint("the CQ is not extended")
        })?;
        let busy = &self.inner.poll_raw;
        let raw = self.inner.raw.as_ptr();
        if busy
            .compare_exchange(raw, busy_cq(), Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(busy_error("ibv_start_poll"));
        }
        // SAFETY: plain data.
        let mut attr: sys::ibv_poll_cq_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live extended CQ, not inside a poll: `poll_raw` was not
        // the stand-in, and only a live ExPoll (which restores it on drop, after
        // ibv_end_poll) leaves the stand-in there.
        let rc = unsafe { sys::ibv_start_poll(ex.as_ptr(), &mut attr) };
        match rc {
            0 => Ok(Some(ExPoll {
                cq: ex,
                busy,
                raw,
                pending: true,
                one_per_poll: self.inner.one_per_poll,
                flags: self.inner.wc_flags,
            })),
            e => {
                // No poll began (the provider unlocked before returning).
                busy.store(raw, Ordering::Release);
                match e {
                    libc::ENOENT => Ok(None),
                    e => Err(Error::new("ibv_start_poll", e)),
                }
            }
        }
    }

    /// Whether each extended poll yields at most one completion, avoiding
    /// `ibv_next_poll`: on rxe of an rdma-core before v61, or of one whose
    /// release cannot be told, as loaded at run time. Always false on a
    /// classic queue.
    pub fn one_per_poll(&self) -> bool {
        self.inner.one_per_poll
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

/// The steps of a [`CompletionQueue::wait`], apart from its loop
/// ([`wait_loop`]), which tests drive with steps of their own.
trait WaitSteps {
    /// Polls into `out`; how many came.
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize>;
    /// Arms the queue for an event: `false` when it has no channel (the
    /// wait then backs off between polls instead).
    fn arm(&mut self) -> Result<bool>;
    /// Sleeps until an event arrives, and takes it (`true`), or until
    /// `deadline` (`false`).
    fn sleep(&mut self, deadline: Option<Instant>) -> Result<bool>;
}

struct CqWait<'a>(&'a CompletionQueue);

impl WaitSteps for CqWait<'_> {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize> {
        Ok(self.0.poll(out)?.len())
    }

    fn arm(&mut self) -> Result<bool> {
        if self.0.channel().is_none() {
            return Ok(false);
        }
        self.0.req_notify(false)?;
        Ok(true)
    }

    fn sleep(&mut self, deadline: Option<Instant>) -> Result<bool> {
        let Some(ch) = self.0.channel() else {
            return Ok(false);
        };
        if !crate::channel::wait_readable(ch.as_raw_fd(), deadline)? {
            return Ok(false);
        }
        // Readable, so a blocking read returns at once (unless another
        // reader took the event meanwhile); a non-blocking one finds it,
        // or says so (`false`), and the loop polls again either way.
        self.0.get_event()?;
        Ok(true)
    }
}

/// Whether `deadline` has passed.
fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// The pause between the polls of a wait without a channel: spins, then
/// yields, then sleeps that double up to [`WAIT_SLEEP_MAX`], never past
/// the deadline.
struct Backoff {
    empty: u32,
    sleep: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            empty: 0,
            sleep: WAIT_SLEEP_MIN,
        }
    }

    fn pause(&mut self, deadline: Option<Instant>) {
        self.empty = self.empty.saturating_add(1);
        if self.empty <= WAIT_SPINS {
            std::hint::spin_loop();
        } else if self.empty <= 2 * WAIT_SPINS {
            std::thread::yield_now();
        } else {
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            std::thread::sleep(self.sleep.min(left));
            self.sleep = (self.sleep * 2).min(WAIT_SLEEP_MAX);
        }
    }
}

/// The loop of [`CompletionQueue::wait`]: fills `out` until `min`
/// completions came or `deadline` passed; how many came.
fn wait_loop(
    steps: &mut impl WaitSteps,
    out: &mut [WorkCompletion],
    min: usize,
    deadline: Option<Instant>,
) -> Result<usize> {
    if min > out.len() {
        return Err(Error::invalid(
            "CompletionQueue::wait",
            format!(
                "min {min} is more than the {} completions `out` holds",
                out.len()
            ),
        ));
    }
    let mut filled = 0;
    let mut backoff = Backoff::new();
    loop {
        filled += steps.poll(&mut out[filled..])?;
        if filled >= min || past(deadline) {
            return Ok(filled);
        }
        if steps.arm()? {
            // A completion that came before the arm raises no event.
            filled += steps.poll(&mut out[filled..])?;
            if filled >= min {
                return Ok(filled);
            }
            if !steps.sleep(deadline)? {
                // Timed out: what came at the last moment still counts.
                filled += steps.poll(&mut out[filled..])?;
                return Ok(filled);
            }
        } else {
            backoff.pause(deadline);
        }
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

/// An extended poll in progress: a lending iterator over completions.
///
/// Dropping it ends the poll (`ibv_end_poll`), which consumes the
/// completion it started at (the first [`next`](Self::next) yields it) and
/// those yielded, never one after. It is neither `Send` nor `Sync`: the
/// provider holds the CQ's lock for the poll's length, and the thread that
/// took it must release it.
#[must_use = "dropping the poll without `next` consumes the completion it started at"]
pub struct ExPoll<'cq> {
    /// The raw pointers keep it from being Send or Sync.
    cq: NonNull<sys::ibv_cq_ex>,
    /// The queue's `poll_raw`, the stand-in from `start_poll`, `raw` again
    /// on drop.
    busy: &'cq AtomicPtr<sys::ibv_cq>,
    raw: *mut sys::ibv_cq,
    /// Whether the current completion has not been yielded yet.
    pending: bool,
    one_per_poll: bool,
    flags: WcFlags,
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
            // SAFETY: inside a successful poll on a live extended CQ that
            // has not ended (a failed next_poll sets `one_per_poll`), on a
            // provider whose next_poll is sound (else `one_per_poll` is set
            // from the start).
            if unsafe { sys::ibv_next_poll(self.cq.as_ptr()) } != 0 {
                self.one_per_poll = true; // ended: never call next_poll again
                return None;
            }
        }
        self.pending = false;
        Some(ExCompletion {
            cq: self.cq,
            flags: self.flags,
            _poll: PhantomData,
        })
    }
}

impl Drop for ExPoll<'_> {
    fn drop(&mut self) {
        // SAFETY: ends the poll that a successful start_poll began, on the
        // thread that began it (ExPoll is not Send), once.
        unsafe { sys::ibv_end_poll(self.cq.as_ptr()) };
        // After end_poll: the lock is free, so the queue may be used again.
        self.busy.store(self.raw, Ordering::Release);
    }
}

/// The current completion of an [`ExPoll`]; valid until the next `next`.
pub struct ExCompletion<'p> {
    cq: NonNull<sys::ibv_cq_ex>,
    /// The fields the CQ carries: the provider filled only their readers.
    flags: WcFlags,
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
    /// The opcode; meaningful only for successful completions.
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        // SAFETY: inside a poll; read_opcode is always provided.
        WcOpcode::from_raw(unsafe { sys::ibv_wc_read_opcode(self.raw()) })
    }
    /// The bytes a receive received (with the 40-byte GRH of a UD
    /// receive) or an RDMA READ or atomic read; meaningful only for
    /// successful completions; 0 on a CQ without [`WcFlags::BYTE_LEN`].
    #[inline]
    pub fn byte_len(&self) -> u32 {
        if !self.flags.contains(WcFlags::BYTE_LEN) {
            return 0;
        }
        // SAFETY: inside a poll, on a CQ created with BYTE_LEN (checked
        // above), whose reader the provider filled.
        unsafe { sys::ibv_wc_read_byte_len(self.raw()) }
    }
    /// The local QP number; 0 on a CQ without [`WcFlags::QP_NUM`].
    #[inline]
    pub fn qp_num(&self) -> u32 {
        if !self.flags.contains(WcFlags::QP_NUM) {
            return 0;
        }
        // SAFETY: as above (QP_NUM).
        unsafe { sys::ibv_wc_read_qp_num(self.raw()) }
    }
    /// The source QP number; meaningful only for a successful UD receive;
    /// 0 on a CQ without [`WcFlags::SRC_QP`].
    #[inline]
    pub fn src_qp(&self) -> u32 {
        if !self.flags.contains(WcFlags::SRC_QP) {
            return 0;
        }
        // SAFETY: as above (SRC_QP).
        unsafe { sys::ibv_wc_read_src_qp(self.raw()) }
    }
    /// The `IBV_WC_*` flags; meaningful only for successful completions.
    #[inline]
    pub fn wc_flags(&self) -> u32 {
        // SAFETY: inside a poll; read_wc_flags is always provided.
        unsafe { sys::ibv_wc_read_wc_flags(self.raw()) }
    }
    /// The immediate data, host byte order, if the completion succeeded
    /// and carries it (and the CQ has [`WcFlags::IMM`]).
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        if self.flags.contains(WcFlags::IMM)
            && self.is_success()
            && self.wc_flags() & sys::IBV_WC_WITH_IMM != 0
        {
            // SAFETY: inside a poll, on a CQ created with IMM (checked).
            Some(u32::from_be(unsafe {
                sys::ibv_wc_read_imm_data(self.raw())
            }))
        } else {
            None
        }
    }
    /// The completion's time on the device's clock, on a CQ with
    /// [`WcFlags::COMPLETION_TIMESTAMP`].
    #[inline]
    pub fn completion_ts(&self) -> Option<u64> {
        if !self.flags.contains(WcFlags::COMPLETION_TIMESTAMP) {
            return None;
        }
        // SAFETY: inside a poll, on a CQ created with the flag (checked).
        Some(unsafe { sys::ibv_wc_read_completion_ts(self.raw()) })
    }
    /// The completion's time in nanoseconds of the wall clock, on a CQ
    /// with [`WcFlags::COMPLETION_TIMESTAMP_WALLCLOCK`].
    #[inline]
    pub fn completion_wallclock_ns(&self) -> Option<u64> {
        if !self.flags.contains(WcFlags::COMPLETION_TIMESTAMP_WALLCLOCK) {
            return None;
        }
        // SAFETY: inside a poll, on a CQ created with the flag (checked).
        Some(unsafe { sys::ibv_wc_read_completion_wallclock_ns(self.raw()) })
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

#[cfg(test)]
mod wait_tests {
    use super::*;

    /// What a fake wait did, in order.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Step {
        /// A poll, and how many it returned.
        Poll(usize),
        Arm,
        /// A sleep on the channel, and whether an event woke it.
        Sleep(bool),
    }

    /// A queue whose completions come at given times after the start
    /// (`wr_id` numbering them), with or without a channel; a sleep on the
    /// channel ends at the next completion's time or at the deadline.
    struct Fake {
        start: Instant,
        arrivals: Vec<Duration>,
        taken: usize,
        channel: bool,
        armed: bool,
        log: Vec<Step>,
    }

    impl Fake {
        fn new(channel: bool, arrivals: &[u64]) -> Fake {
            Fake {
                start: Instant::now(),
                arrivals: arrivals
                    .iter()
                    .map(|&ms| Duration::from_millis(ms))
                    .collect(),
                taken: 0,
                channel,
                armed: false,
                log: Vec::new(),
            }
        }

        fn arrived(&self) -> usize {
            let now = self.start.elapsed();
            self.arrivals.iter().filter(|&&t| t <= now).count()
        }
    }

    impl WaitSteps for Fake {
        fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize> {
            let n = (self.arrived() - self.taken).min(out.len());
            for wc in &mut out[..n] {
                self.taken += 1;
                wc.0.wr_id = self.taken as u64;
            }
            self.log.push(Step::Poll(n));
            Ok(n)
        }

        fn arm(&mut self) -> Result<bool> {
            if self.channel {
                self.armed = true;
                self.log.push(Step::Arm);
            }
            Ok(self.channel)
        }

        fn sleep(&mut self, deadline: Option<Instant>) -> Result<bool> {
            assert!(self.armed, "slept on a queue that was not armed");
            let next = self.arrivals.get(self.taken).map(|&t| self.start + t);
            let woken = match (next, deadline) {
                (Some(n), Some(d)) => n <= d,
                (Some(_), None) => true,
                (None, _) => false,
            };
            let until = if woken { next } else { deadline };
            let until = until.expect("a sleep with neither an event nor a deadline");
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
            self.armed = !woken;
            self.log.push(Step::Sleep(woken));
            Ok(woken)
        }
    }

    fn deadline(ms: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(ms))
    }

    #[test]
    fn a_wait_with_a_channel_polls_arms_polls_sleeps_and_polls_again() {
        let mut cq = Fake::new(true, &[20, 20, 40]);
        let mut out = [WorkCompletion::ZERO; 8];
        let n = wait_loop(&mut cq, &mut out, 3, deadline(5_000)).unwrap();
        assert_eq!(n, 3);
        let ids: Vec<u64> = out[..n].iter().map(|w| w.wr_id()).collect();
        assert_eq!(ids, [1, 2, 3]);
        use Step::*;
        assert_eq!(
            cq.log,
            [
                Poll(0),
                Arm,
                Poll(0),
                Sleep(true),
                Poll(2),
                Arm,
                Poll(0),
                Sleep(true),
                Poll(1)
            ]
        );
    }

    #[test]
    fn a_completion_before_the_arm_is_found_by_the_poll_after_it() {
        /// A queue whose one completion lands as it is armed: it raises
        /// no event, so a wait that slept now would sleep for ever.
        struct Late(Fake);
        impl WaitSteps for Late {
            fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize> {
                self.0.poll(out)
            }
            fn arm(&mut self) -> Result<bool> {
                self.0.arrivals.push(self.0.start.elapsed());
                self.0.arm()
            }
            fn sleep(&mut self, _: Option<Instant>) -> Result<bool> {
                panic!("slept although a completion was waiting");
            }
        }
        let mut late = Late(Fake::new(true, &[]));
        let mut out = [WorkCompletion::ZERO; 1];
        assert_eq!(wait_loop(&mut late, &mut out, 1, None).unwrap(), 1);
        assert_eq!(late.0.log, [Step::Poll(0), Step::Arm, Step::Poll(1)]);
    }

    #[test]
    fn a_timeout_returns_what_came_before_it_and_does_not_hang() {
        for channel in [true, false] {
            let mut cq = Fake::new(channel, &[10, 5_000]);
            let mut out = [WorkCompletion::ZERO; 4];
            let start = Instant::now();
            let n = wait_loop(&mut cq, &mut out, 2, deadline(100)).unwrap();
            let took = start.elapsed();
            assert_eq!(n, 1, "channel {channel}: {:?}", cq.log);
            assert_eq!(out[0].wr_id(), 1);
            assert!(took >= Duration::from_millis(100), "{took:?}");
            assert!(took < Duration::from_secs(2), "channel {channel}: {took:?}");
            if channel {
                assert_eq!(cq.log.last(), Some(&Step::Poll(0)));
                assert!(cq.log.contains(&Step::Sleep(false)));
            } else {
                assert!(!cq
                    .log
                    .iter()
                    .any(|s| matches!(s, Step::Arm | Step::Sleep(_))));
            }
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "counts polls per real time; Miri's clock runs with the instructions executed"
    )]
    fn without_a_channel_the_polls_back_off_to_sleeps() {
        let mut cq = Fake::new(false, &[300]);
        let mut out = [WorkCompletion::ZERO; 1];
        let n = wait_loop(&mut cq, &mut out, 1, None).unwrap();
        assert_eq!(n, 1);
        // 300 ms of spinning would be millions of polls; the spins, the
        // yields and then sleeps of at least 10 µs (up to 1 ms) leave at
        // most 2 * WAIT_SPINS + 300 ms / 10 µs polls, and in practice far
        // fewer.
        let polls = cq.log.len();
        assert!(polls > 2 * WAIT_SPINS as usize, "{polls} polls");
        assert!(polls < 2 * WAIT_SPINS as usize + 30_000, "{polls} polls");
    }

    #[test]
    fn a_zero_timeout_or_min_polls_once() {
        for (min, ms) in [(1, 0), (0, 5_000)] {
            let mut cq = Fake::new(true, &[1_000]);
            let mut out = [WorkCompletion::ZERO; 2];
            assert_eq!(wait_loop(&mut cq, &mut out, min, deadline(ms)).unwrap(), 0);
            assert_eq!(cq.log, [Step::Poll(0)]);
        }
        // More than asked for comes back, up to the room there is.
        let mut cq = Fake::new(false, &[0, 0, 0]);
        let mut out = [WorkCompletion::ZERO; 2];
        assert_eq!(wait_loop(&mut cq, &mut out, 1, deadline(0)).unwrap(), 2);
    }

    #[test]
    fn min_beyond_the_storage_is_einval() {
        let mut cq = Fake::new(false, &[0]);
        let mut out = [WorkCompletion::ZERO; 2];
        let e = wait_loop(&mut cq, &mut out, 3, None).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert_eq!(e.verb, "CompletionQueue::wait");
        assert!(cq.log.is_empty());
    }
}

#[cfg(test)]
mod tests {
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

    use std::ffi::c_int;
    use std::mem::MaybeUninit;

    use super::*;

    #[test]
    fn release_is_read_from_the_libibverbs_file_name() {
        assert_eq!(release_from_file_name("libibverbs.so.1.14.44.0"), Some(44));
        assert_eq!(release_from_file_name("libibverbs.so.1.15.61.0"), Some(61));
        assert_eq!(release_from_file_name("libibverbs.so.1.18.65"), Some(65));
        assert_eq!(release_from_file_name("libibverbs.so.1"), None);
        assert_eq!(release_from_file_name("libibverbs.so.1.14"), None);
        assert_eq!(release_from_file_name("libibverbs.so"), None);
        assert_eq!(release_from_file_name("libibverbs.so.1.14.x.0"), None);
        assert_eq!(release_from_file_name("librdmacm.so.1.3.44.0"), None);
        assert_eq!(release_from_file_name("librxe-rdmav34.so"), None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls dladdr")]
    fn loaded_release_is_that_of_the_mapped_libibverbs() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mapped = maps
            .lines()
            .filter_map(|l| l.rsplit('/').next())
            .find_map(release_from_file_name);
        assert!(mapped.is_some(), "no libibverbs.so.1.A.R.P mapped");
        assert_eq!(loaded_rdma_core_release(), mapped);
    }

    #[test]
    fn rxe_next_poll_is_avoided_before_v61_and_when_unknown() {
        assert!(release_before(Some(44), RXE_NEXT_POLL_FIXED));
        assert!(release_before(Some(55), RXE_NEXT_POLL_FIXED));
        assert!(release_before(Some(60), RXE_NEXT_POLL_FIXED));
        assert!(!release_before(Some(61), RXE_NEXT_POLL_FIXED));
        assert!(!release_before(Some(65), RXE_NEXT_POLL_FIXED));
        assert!(release_before(None, RXE_NEXT_POLL_FIXED));
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
