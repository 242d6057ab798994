//! Shared receive queues.

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::srq_tag_table::TagTable;
use crate::sys;
use crate::{Error, ProtectionDomain, RecvWr, Result, TagBuffer};

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
    /// The size granted at creation, or by the last resize.
    max_wr: AtomicU32,
    /// What an XRC or tag-matching SRQ uses besides its PD: its XRC
    /// domain (XRC only) and its CQ.
    _xrc: Option<(Option<crate::XrcDomain>, crate::CompletionQueue)>,
    /// The tags of a tag-matching SRQ (`IBV_SRQT_TM`, the only kind that
    /// takes tag operations) and the buffers they own: dropped after the
    /// SRQ is destroyed (fields drop after `Drop::drop`), leaked if it
    /// could not be.
    tags: Option<Mutex<TagTable<TagBuffer>>>,
    /// Set when the SRQ was destroyed by its owner's own verb
    /// (`rdma_destroy_srq`, [`SharedReceiveQueue::destroy_with`]), so that
    /// the drop destroys it no more.
    destroyed: bool,
}

// SAFETY: libibverbs allows posting to and modifying an SRQ from any thread
// (providers lock it); the Rust fields are immutable but `max_wr`, an atomic.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if self.destroyed {
            return;
        }
        // SAFETY: destroyed once, after every QP using it (each holds a clone
        // in its `_srq` field), before its PD, XRC domain, CQ and the
        // buffers of its tags (fields dropped after this; the buffers only
        // if the destruction succeeded, below).
        let rc = unsafe { sys::ibv_destroy_srq(self.raw.as_ptr()) };
        if rc != 0 {
            // The SRQ lives on: the device may still write the buffers of
            // its tags, and mlx5 copy into them when it polls a match.
            if let Some(tags) = &mut self.tags {
                tags.get_mut().unwrap_or_else(|p| p.into_inner()).leak();
            }
        }
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
                max_wr: AtomicU32::new(attr.attr.max_wr),
                _xrc: None,
                tags: None,
                destroyed: false,
            }),
        })
    }

    /// Wraps an SRQ made by `ibv_create_srq_ex` ([`crate::SrqBuilder`]).
    ///
    /// # Safety
    /// `raw` is a live SRQ of `pd`'s context, owned by the value returned,
    /// whose XRC domain and CQ (if any) are `xrc`, of tag matching with a
    /// table of `max_num_tags` when `tags` is `Some(max_num_tags)`.
    pub(crate) unsafe fn from_ex(
        pd: &ProtectionDomain,
        raw: NonNull<sys::ibv_srq>,
        max_wr: u32,
        xrc: Option<(Option<crate::XrcDomain>, crate::CompletionQueue)>,
        tags: Option<u32>,
    ) -> SharedReceiveQueue {
        SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                _pd: pd.clone(),
                raw,
                max_wr: AtomicU32::new(max_wr),
                _xrc: xrc,
                tags: tags.map(|n| Mutex::new(TagTable::new(n))),
                destroyed: false,
            }),
        }
    }

    /// Destroys the SRQ with `destroy` instead of `ibv_destroy_srq`, when
    /// this is its last handle (no QP uses it, no clone is left); otherwise
    /// gives `self` back untouched. `destroy` gets the raw SRQ and must
    /// destroy it; the PD, XRC domain and CQ go after it.
    pub(crate) fn destroy_with(
        self,
        destroy: impl FnOnce(*mut sys::ibv_srq),
    ) -> std::result::Result<(), SharedReceiveQueue> {
        let mut inner =
            Arc::try_unwrap(self.inner).map_err(|inner| SharedReceiveQueue { inner })?;
        destroy(inner.raw.as_ptr());
        inner.destroyed = true;
        // The tags' buffers drop with `inner`, after the SRQ is gone. (An
        // SRQ destroyed so is a CM id's, whose tags only the `unsafe`
        // post_srq_ops adds: its table is empty.)
        Ok(())
    }

    /// Whether this is a tag-matching SRQ (`IBV_SRQT_TM`).
    pub fn is_tag_matching(&self) -> bool {
        self.inner.tags.is_some()
    }

    /// The tag table of a tag-matching SRQ, or the refusal of `verb` on
    /// any other.
    pub(crate) fn tags(&self, verb: &'static str) -> Result<&Mutex<TagTable<TagBuffer>>> {
        self.inner.tags.as_ref().ok_or_else(|| {
            Error::invalid(
                verb,
                "tag operations need a tag-matching SRQ (SrqBuilder::tag_matching)",
            )
        })
    }

    /// The number of receives the provider granted at creation, or at the
    /// last [`resize`](Self::resize). [`query`](Self::query) may report
    /// more: rxe's ring holds 31 for 16 asked.
    pub fn max_wr(&self) -> u32 {
        self.inner.max_wr.load(Ordering::Relaxed)
    }

    /// The SRQ's size, SGEs per receive and limit, as the provider reports
    /// them (`ibv_query_srq`). The limit reads 0 when none is armed,
    /// including after [`SrqLimitReached`](crate::AsyncEventKind::SrqLimitReached)
    /// fired (rxe disarms it so). siw has no query: `EOPNOTSUPP`.
    pub fn query(&self) -> Result<SrqAttr> {
        // SAFETY: plain data.
        let mut attr: sys::ibv_srq_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live SRQ; `attr` is writable.
        let rc = unsafe { sys::ibv_query_srq(self.as_raw(), &mut attr) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_query_srq", rc));
        }
        Ok(SrqAttr {
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        })
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when
    /// the receives posted to the SRQ fall below `limit`, the context
    /// reports one [`SrqLimitReached`](crate::AsyncEventKind::SrqLimitReached)
    /// async event for it ([`crate::Context::get_async_event`], or
    /// `AsyncEvents` with the `tokio` feature) and the limit is disarmed:
    /// set it again for the next one. 0 disarms it.
    ///
    /// rxe and siw both have it. A limit above the SRQ's size (as
    /// [`query`](Self::query) reports it, else [`max_wr`](Self::max_wr)) is
    /// refused (`EINVAL`) before the provider sees it.
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        let max = self.query().map_or(self.max_wr(), |a| a.max_wr);
        if limit > max {
            return Err(Error::invalid(
                "ibv_modify_srq",
                format!("SRQ limit {limit} is above the SRQ's {max} receives"),
            ));
        }
        // SAFETY: plain data.
        let mut attr: sys::ibv_srq_attr = unsafe { std::mem::zeroed() };
        attr.srq_limit = limit;
        self.modify(&mut attr, sys::IBV_SRQ_LIMIT)
    }

    /// Grows the SRQ to at least `max_wr` receives (`ibv_modify_srq` with
    /// `IBV_SRQ_MAX_WR`); posted receives stay. [`query`](Self::query)
    /// tells the size granted.
    ///
    /// rxe resizes; siw has no SRQ resize and fails with `EOPNOTSUPP`, as do
    /// providers without it. rxe refuses (`EINVAL`) a size above the
    /// device's `max_srq_wr`, below the armed limit, or below the receives
    /// posted; 0 is refused (`EINVAL`) before the provider sees it.
    pub fn resize(&self, max_wr: u32) -> Result<()> {
        if max_wr == 0 {
            return Err(Error::invalid(
                "ibv_modify_srq",
                "an SRQ needs at least 1 receive",
            ));
        }
        // SAFETY: plain data.
        let mut attr: sys::ibv_srq_attr = unsafe { std::mem::zeroed() };
        attr.max_wr = max_wr;
        self.modify(&mut attr, sys::IBV_SRQ_MAX_WR)?;
        // The size granted, where the provider tells it; at least the size
        // asked where it has no query.
        let granted = self.query().map_or(max_wr, |a| a.max_wr);
        self.inner.max_wr.store(granted, Ordering::Relaxed);
        Ok(())
    }

    fn modify(&self, attr: &mut sys::ibv_srq_attr, mask: sys::ibv_srq_attr_mask) -> Result<()> {
        // SAFETY: a live SRQ; `attr` holds the fields `mask` names.
        let rc = unsafe { sys::ibv_modify_srq(self.as_raw(), attr, mask as i32) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_modify_srq", rc));
        }
        Ok(())
    }

    /// The PD the SRQ is made in.
    pub(crate) fn pd(&self) -> &ProtectionDomain {
        &self.inner._pd
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
    crate::wr::post_error("ibv_post_srq_recv", rc, index)
}

/// What [`SharedReceiveQueue::query`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// The receives the SRQ holds (the provider may have rounded up).
    pub max_wr: u32,
    /// SGEs per receive.
    pub max_sge: u32,
    /// The armed limit ([`SharedReceiveQueue::set_limit`]); 0 when none.
    pub srq_limit: u32,
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("max_wr", &self.max_wr())
            .finish()
    }
}
