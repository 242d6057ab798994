//! Shared receive queues.

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::sys;
use crate::{Error, ProtectionDomain, RecvWr, Result};

/// A shared receive queue (`ibv_srq`): receives that several QPs draw from.
///
/// Cloning shares it; QPs using it keep it alive.
#[derive(Clone)]
pub struct SharedReceiveQueue {
    inner: Arc<SrqInner>,
}

struct SrqInner {
    _pd: ProtectionDomain,
    raw: NonNull<sys::ibv_srq>,
    max_wr: u32,
}

// SAFETY: libibverbs allows posting to an SRQ from any thread (providers
// lock it); the Rust fields are immutable.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: destroyed once, after every QP using it (each holds a clone
        // in its `_srq` field).
        unsafe { sys::ibv_destroy_srq(self.raw.as_ptr()) };
    }
}

impl SharedReceiveQueue {
    /// Creates an SRQ of `max_wr` receives of up to `max_sge` SGEs each.
    pub fn new(pd: &ProtectionDomain, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        // SAFETY: plain data.
        let mut attr: sys::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = max_sge;
        // SAFETY: a live PD; `attr` is complete.
        let raw = unsafe { sys::ibv_create_srq(pd.as_raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("ibv_create_srq"))?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                _pd: pd.clone(),
                raw,
                max_wr: attr.attr.max_wr,
            }),
        })
    }

    /// The number of receives the provider granted.
    pub fn max_wr(&self) -> u32 {
        self.inner.max_wr
    }

    /// The context the SRQ belongs to.
    pub(crate) fn context(&self) -> &crate::Context {
        self.inner._pd.context()
    }

    /// The raw SRQ, valid while this value lives.
    #[inline]
    pub fn as_raw(&self) -> *mut sys::ibv_srq {
        self.inner.raw.as_ptr()
    }

    /// Posts receive work requests with one call to the provider.
    ///
    /// On failure the error says which request was refused; it and the ones
    /// after it were not posted, the ones before it were.
    #[inline]
    pub fn post_recv(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        match wrs {
            // The usual post: one request, linked and posted inline.
            // SAFETY: `link(null)` makes `wr` a NULL-terminated list of one
            // RecvWr, borrowed for the call, as `post` requires.
            [wr] => unsafe { self.post(wr.link(ptr::null_mut()), 1) },
            _ => self.post_recv_list(wrs),
        }
    }

    /// `post_recv` of any list.
    #[inline(never)]
    fn post_recv_list(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        let head = crate::wr::link_list(wrs);
        if head.is_null() {
            return Ok(());
        }
        // SAFETY: `link_list` linked the RecvWrs of `wrs` into a NULL-terminated
        // list at `head`, borrowed for the call, as `post` requires.
        unsafe { self.post(head, wrs.len()) }
    }

    /// Posts the linked list at `head`, the first of `len` requests in a
    /// slice.
    ///
    /// # Safety
    /// `head` must be a valid NULL-terminated list of receives into
    /// registered memory: [`RecvWr`]s linked by `post_recv`, which borrows
    /// them for the call.
    #[inline]
    unsafe fn post(&self, head: *mut sys::ibv_recv_wr, len: usize) -> Result<()> {
        let mut bad = ptr::null_mut();
        // SAFETY: a live SRQ and, per the contract, a valid list (see
        // crate::mr for why receives into registered memory stay sound).
        let rc = unsafe { sys::ibv_post_srq_recv(self.as_raw(), head, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(post_srq_recv_error(rc, head, bad, len))
    }
}

#[cold]
#[inline(never)]
fn post_srq_recv_error(
    rc: i32,
    head: *mut sys::ibv_recv_wr,
    bad: *mut sys::ibv_recv_wr,
    len: usize,
) -> Error {
    // `RecvWr` is a transparent `ibv_recv_wr` and the list was linked in
    // slice order, so the refused request's index is its distance from the
    // head. Addresses only: `bad` is never read.
    let size = std::mem::size_of::<RecvWr<'_>>();
    let off = (bad as usize).wrapping_sub(head as usize);
    let index = (off % size == 0 && off / size < len).then_some(off / size);
    crate::qp::post_error("ibv_post_srq_recv", rc, index)
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("max_wr", &self.max_wr())
            .finish()
    }
}
