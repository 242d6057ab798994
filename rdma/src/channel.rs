//! Completion channels: how a thread sleeps until a CQ has completions.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;

pub(crate) use crate::os::set_nonblocking;

use crate::sys;
use crate::{Context, Error, Result};

/// A completion channel (`ibv_comp_channel`): a file descriptor that becomes
/// readable when a CQ attached to it, armed with
/// [`CompletionQueue::req_notify`](crate::CompletionQueue::req_notify), gets
/// a completion.
///
/// Cloning shares it; CQs attached to it keep it alive.
#[derive(Clone)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

pub(crate) struct ChannelInner {
    ctx: Context,
    pub(crate) raw: NonNull<sys::ibv_comp_channel>,
}

// SAFETY: a completion channel is an fd plus its context; libibverbs allows
// its use from any thread.
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: destroyed once, after every CQ attached to it (each holds a
        // clone in its `channel` field), and before `ctx` closes the context.
        unsafe { sys::ibv_destroy_comp_channel(self.raw.as_ptr()) };
    }
}

impl CompletionChannel {
    /// Creates a completion channel on `ctx`.
    pub fn new(ctx: &Context) -> Result<CompletionChannel> {
        // SAFETY: an open context.
        let raw = unsafe { sys::ibv_create_comp_channel(ctx.as_raw()) };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("ibv_create_comp_channel"))?;
        Ok(CompletionChannel {
            inner: Arc::new(ChannelInner {
                ctx: ctx.clone(),
                raw,
            }),
        })
    }

    /// Makes [`CompletionQueue::get_event`](crate::CompletionQueue::get_event)
    /// return `Ok(false)` instead of blocking when no event is pending.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        crate::os::set_nonblocking(self.as_raw_fd(), nonblocking)
    }

    /// The context the channel was created on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw channel, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_comp_channel {
        self.inner.raw.as_ptr()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: a live channel; `fd` is set at creation.
        unsafe { (*self.inner.raw.as_ptr()).fd }
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open while the channel (and so `self`) lives.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}
