//! Completion channels: how a thread sleeps until a CQ has completions.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

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

/// Waits until `fd` is readable or `deadline` passes (`None`: no limit);
/// whether it is readable: [`crate::os::wait_readable`] for the waits of a
/// CQ, which count in deadlines.
pub(crate) fn wait_readable(fd: RawFd, deadline: Option<Instant>) -> Result<bool> {
    crate::os::wait_readable(
        fd,
        deadline.map(|d| d.saturating_duration_since(Instant::now())),
    )
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A pipe: (read end, write end), closed on drop.
    struct Pipe([RawFd; 2]);

    impl Pipe {
        fn new() -> Pipe {
            let mut fds = [0; 2];
            // SAFETY: `fds` is two writable ints.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            Pipe(fds)
        }
    }

    impl Drop for Pipe {
        fn drop(&mut self) {
            for fd in self.0 {
                // SAFETY: the pipe's own fds, closed once.
                unsafe { libc::close(fd) };
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls poll(2)")]
    fn waiting_for_a_readable_fd_ends_at_the_deadline_or_when_readable() {
        let p = Pipe::new();
        let start = Instant::now();
        let limit = Duration::from_millis(30);
        assert!(!wait_readable(p.0[0], Some(start + limit)).unwrap());
        let took = start.elapsed();
        assert!(took >= limit, "woke after {took:?}, before the deadline");
        assert!(took < limit + Duration::from_secs(2), "took {took:?}");
        // A deadline already past: one poll, no wait.
        assert!(!wait_readable(p.0[0], Some(Instant::now())).unwrap());
        // SAFETY: writes one byte from a live buffer into the pipe.
        assert_eq!(unsafe { libc::write(p.0[1], [1u8].as_ptr().cast(), 1) }, 1);
        assert!(wait_readable(p.0[0], None).unwrap());
        assert!(wait_readable(p.0[0], Some(Instant::now())).unwrap());
    }
}
