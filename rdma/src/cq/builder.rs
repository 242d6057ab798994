//! Making completion queues: [`CqBuilder`] and the checks of its arguments.

use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU32};
use std::sync::Arc;

use super::{CompletionQueue, CqInner, WcFlags};
use crate::sys;
use crate::{CompletionChannel, Context, Error, Result};

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
    /// accessor of [`ExCompletion`](crate::ExCompletion) whose field was
    /// not asked for reads nothing: it returns 0 or `None`.
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
        let one_per_poll = ex.is_some() && crate::provider::rxe_next_poll_is_broken(self.ctx);
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
}
