//! tokio integration (feature `tokio`): awaiting completions and
//! asynchronous events without blocking a runtime thread.
//!
//! Each type registers an rdma-core file descriptor with tokio's reactor
//! ([`AsyncFd`]), sets it non-blocking, and on readiness drains it until
//! `EAGAIN` before clearing the readiness, so no wake-up is lost. The
//! blocking API stays available on the wrapped objects.

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::event::AsyncEventFd;
use crate::os::{io_error, FdOwner};
use crate::{
    AsyncEvent, CompletionBuf, CompletionChannel, CompletionQueue, Context, Error, Result,
    WorkCompletion,
};

/// A completion channel as the reactor's fd owner: it keeps the fd open.
type ChannelFd = FdOwner<CompletionChannel>;

/// A completion queue whose completions can be awaited.
///
/// The queue needs a completion channel of its own: a channel's fd can be
/// registered with the reactor only once.
pub struct AsyncCompletionQueue {
    fd: AsyncFd<ChannelFd>,
    cq: CompletionQueue,
}

impl AsyncCompletionQueue {
    /// Wraps `cq`, which must have been created with a channel. Must be
    /// called inside a tokio runtime.
    pub fn new(cq: CompletionQueue) -> Result<AsyncCompletionQueue> {
        let ch = cq.channel().ok_or_else(|| {
            Error::invalid(
                "AsyncCompletionQueue::new",
                "the CQ has no completion channel",
            )
        })?;
        ch.set_nonblocking(true)?;
        // SAFETY: the channel's fd stays open, and the same, for as long as
        // the ChannelFd (which owns a handle to the channel) lives.
        let fd =
            unsafe { AsyncFd::register_with_interest(FdOwner(ch.clone()), Interest::READABLE) }
                .map_err(|e| io_error("AsyncFd::register", e.into()))?;
        Ok(AsyncCompletionQueue { fd, cq })
    }

    /// A new queue of at least `cqe` entries on `ctx`, with a completion
    /// channel of its own: [`new`](Self::new) without the set-up. Must be
    /// called inside a tokio runtime.
    ///
    /// ```no_run
    /// # async fn demo(ctx: &rdma::Context) -> rdma::Result<()> {
    /// let cq = rdma::AsyncCompletionQueue::create(ctx, 64)?;
    /// // cq.cq() goes to the QP; completions are awaited with cq.wait(..).
    /// # Ok(()) }
    /// ```
    pub fn create(ctx: &Context, cqe: i32) -> Result<AsyncCompletionQueue> {
        let channel = CompletionChannel::new(ctx)?;
        let cq = CompletionQueue::builder(ctx)
            .cqe(cqe)
            .channel(&channel)
            .build()?;
        AsyncCompletionQueue::new(cq)
    }

    /// The wrapped queue, for polling without waiting
    /// ([`CompletionQueue::poll`]).
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// Waits until at least one completion is available and polls up to
    /// `out.len()` of them into caller-owned storage (initialised, or
    /// `MaybeUninit` zeroed once per call: see [`CompletionBuf`]): the
    /// blocking [`CompletionQueue::wait`] with `min` 1 and no timeout
    /// (`tokio::time::timeout` gives one). Fails with `EBUSY` while an
    /// [`ExPoll`](crate::ExPoll) of the queue lives. To take what is there
    /// without waiting, poll [`cq`](Self::cq).
    ///
    /// Cancellation-safe (a `tokio::select!` branch may drop it): the
    /// completions are taken from the queue and returned in one step, with
    /// no wait between, so a dropped future has taken none.
    pub async fn wait<'a, B: CompletionBuf + ?Sized>(
        &self,
        out: &'a mut B,
    ) -> Result<&'a mut [WorkCompletion]> {
        // Initialised once here, so the polls below cost nothing more.
        let out = out.as_completions();
        let n = loop {
            let n = self.cq.poll(out)?.len();
            if n > 0 {
                break n;
            }
            // Arm, then look again: a completion that arrived before the arm
            // raises no event.
            self.cq.req_notify(false)?;
            let n = self.cq.poll(out)?.len();
            if n > 0 {
                break n;
            }
            self.wait_event().await?;
        };
        // The last poll filled the first `n` (at most `out.len()`).
        Ok(&mut out[..n])
    }

    /// Waits for the queue's next completion event and consumes the events
    /// there are, taking no completion: for a caller that polls the queue
    /// itself, under a lock of its own. The caller arms the queue
    /// ([`CompletionQueue::req_notify`]) and then polls it empty before it
    /// waits, as [`wait`](Self::wait) does, else a completion that came
    /// before the arm raises no event. Cancellation-safe: the events are
    /// consumed in one step after the wait, with no wait between.
    pub(crate) async fn wait_event(&self) -> Result<()> {
        let mut guard = self
            .fd
            .readable()
            .await
            .map_err(|e| io_error("AsyncFd::readable", e))?;
        // Drain every pending event, then clear the readiness; tokio keeps
        // a readiness that arrived meanwhile.
        while self.cq.get_event()? {}
        guard.clear_ready();
        Ok(())
    }
}

/// The asynchronous events of a context, awaitable.
pub struct AsyncEvents {
    fd: AsyncFd<AsyncEventFd>,
}

impl AsyncEvents {
    /// Registers the context's event fd. Must be called inside a tokio runtime.
    pub fn new(ctx: &Context) -> Result<AsyncEvents> {
        ctx.set_async_nonblocking(true)?;
        // SAFETY: the context's async fd stays open, and the same, for as
        // long as the AsyncEventFd (which owns a handle to the context) lives.
        let fd = unsafe {
            AsyncFd::register_with_interest(AsyncEventFd(ctx.clone()), Interest::READABLE)
        }
        .map_err(|e| io_error("AsyncFd::register", e.into()))?;
        Ok(AsyncEvents { fd })
    }

    /// The next event.
    pub async fn next(&self) -> Result<AsyncEvent> {
        loop {
            let mut guard = self
                .fd
                .readable()
                .await
                .map_err(|e| io_error("AsyncFd::readable", e))?;
            match self.fd.get_ref().0.get_async_event()? {
                Some(event) => return Ok(event),
                None => guard.clear_ready(),
            }
        }
    }
}
