//! Posting work requests, one list at a time or prepared once.

use std::fmt;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::ptr::{self, NonNull};

use super::{QpType, QueuePair};
use crate::sys;
use crate::wr::{post_error, UdFault};
use crate::{AccessFlags, Error, MemoryRegion, MemoryWindow, RecvWr, RemoteMemory, Result, SendWr};

/// A list of send requests checked and linked once by
/// [`QueuePair::prepare_send`], posted with one provider call per
/// [`post`](Self::post).
///
/// It borrows the queue pair and the requests (and through them their SGEs,
/// memory regions and address handles) for as long as it exists.
pub struct PreparedSend<'q, 'w, 'a> {
    qp: NonNull<sys::ibv_qp>,
    /// The first request's C struct, which is the request itself
    /// (`SendWr` is `repr(C)` with the C struct first); the others follow
    /// it in the slice.
    head: *mut sys::ibv_send_wr,
    len: usize,
    _borrows: PhantomData<(&'q QueuePair, &'w mut [SendWr<'a>])>,
}

impl PreparedSend<'_, '_, '_> {
    /// Posts the prepared list again, with one call to the provider.
    ///
    /// On failure the error says which request was refused; it and the ones
    /// after it were not posted, the ones before it were.
    #[inline]
    pub fn post(&mut self) -> Result<()> {
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is borrowed, so live; the list was checked and
        // linked by `prepare_send` and is borrowed mutably since, so it is
        // still valid and NULL-terminated, and an inline request's `sg_list`
        // still points at its own SGE (the list cannot have moved); its SGEs,
        // inline data and address handles are borrowed by the requests, and
        // on UD each is a send through an AH of this PD (checked there).
        // Memory the device reaches later stays valid or unreachable (see
        // crate::mr).
        let rc = unsafe { sys::ibv_post_send(self.qp.as_ptr(), self.head, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(self.post_error(rc, bad))
    }

    #[cold]
    #[inline(never)]
    fn post_error(&self, rc: i32, bad: *mut sys::ibv_send_wr) -> Error {
        let base = self.head.cast::<SendWr<'_>>();
        // Only addresses are compared; nothing is read.
        let index = (0..self.len).position(|i| ptr::eq(base.wrapping_add(i).cast(), bad));
        post_error("ibv_post_send", rc, index)
    }

    /// The number of requests in the list.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: an empty list cannot be prepared.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the id of request `index` for the next posts (it comes back in
    /// their completions). `index` past the end is an error.
    pub fn set_wr_id(&mut self, index: usize, wr_id: u64) -> Result<()> {
        if index >= self.len {
            return Err(Error::invalid(
                "ibv_post_send",
                format!("request {index} of a prepared list of {}", self.len),
            ));
        }
        // SAFETY: `index` is within the slice that `head` starts and that
        // this value borrows mutably; only the id field is written, through
        // a pointer derived from `head`, so the links stay valid.
        unsafe {
            let wr = self.head.cast::<SendWr<'_>>().add(index);
            (*wr.cast::<sys::ibv_send_wr>()).wr_id = wr_id;
        }
        Ok(())
    }
}

impl fmt::Debug for PreparedSend<'_, '_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedSend")
            .field("len", &self.len)
            .finish()
    }
}

impl QueuePair {
    /// Posts send work requests, in order, with one call to the provider.
    ///
    /// On failure the error says which request was refused; it and the ones
    /// after it were not posted, the ones before it were. On a UD QP only
    /// SENDs (with or without immediate data) through an address handle of
    /// the QP's protection domain are posted; any other request is refused
    /// (`EINVAL`) before the provider sees the list. The address handles may
    /// be dropped once this returned (see [`AddressHandle`](crate::AddressHandle)).
    #[inline]
    pub fn post_send(&self, wrs: &mut [SendWr<'_>]) -> Result<()> {
        // The usual post: one request on a connected QP, linked and posted
        // inline after this one compare.
        if wrs.len() == self.unchecked_send_len {
            // SAFETY: `unchecked_send_len` is 1 or `usize::MAX`, and no slice
            // of `SendWr`s (over 100 bytes each) is `usize::MAX` long: the slice
            // has exactly one element.
            return self.post_send_one(unsafe { wrs.get_unchecked_mut(0) });
        }
        match wrs {
            // One UD send through an address handle of this PD.
            [wr] if wr.ud_fault(self.raw_pd()).is_none() => self.post_send_ud_one(wr),
            // Any other list, checked and linked out of line.
            _ => self.post_send_list(wrs),
        }
    }

    /// `post_send` of one checked UD send, counted for the PD's address
    /// handles (`crate::retire`). Out of line, so that the connected QPs'
    /// inlined `post_send` carries none of it.
    #[inline(never)]
    fn post_send_ud_one(&self, wr: &mut SendWr<'_>) -> Result<()> {
        // A UD QP always has its counts; a post left uncounted would only
        // delay a release.
        let count = self.ud_count.as_deref();
        if let Some(c) = count {
            c.start(1);
        }
        let r = self.post_send_one(wr);
        if let Some(c) = count {
            match r {
                Ok(()) => c.posted(1),
                Err(_) => c.refused(1),
            }
        }
        r
    }

    /// `post_send` of one request, already checked (on a UD QP: a send with
    /// an address handle of this PD).
    #[inline]
    fn post_send_one(&self, wr: &mut SendWr<'_>) -> Result<()> {
        let head = wr.link(ptr::null_mut());
        // `bad` and, beside it, the head: the provider gets the address of
        // `bad`, so the head waits in memory for the error path instead of in
        // a callee-saved register that the `Ok` path would save and restore.
        let mut bad_and_head = [ptr::null_mut(), head];
        // SAFETY: a live QP; a NULL-terminated list of one request, just
        // linked (an inline request's `sg_list` points at its own SGE where
        // it is now), whose SGE names registered memory (Sge) or inline data
        // copied during the call; on UD it is a send whose address handle,
        // of this PD, is borrowed for the call (`post_send` checked).
        // Memory the device reaches later stays valid or unreachable (see
        // crate::mr).
        let rc = unsafe { sys::ibv_post_send(self.as_raw(), head, &mut bad_and_head[0]) };
        if rc == 0 {
            return Ok(());
        }
        let [bad, head] = bad_and_head;
        Err(post_error(
            "ibv_post_send",
            rc,
            ptr::eq(bad, head).then_some(0),
        ))
    }

    /// `post_send` of any list.
    #[inline(never)]
    fn post_send_list(&self, wrs: &mut [SendWr<'_>]) -> Result<()> {
        let mut ud_count = None;
        if self.qp_type == QpType::Ud {
            // The provider reads every UD request's address handle: refuse
            // what has none (a NULL or a remote address in its place) or one
            // of another PD or provider instance, here.
            check_ud_sends(wrs, self.raw_pd())?;
            ud_count = self.ud_count.as_deref();
        }
        let head = crate::wr::link_list(wrs);
        if head.is_null() {
            return Ok(());
        }
        // Counted for the PD's address handles (`crate::retire`).
        if let Some(c) = ud_count {
            c.start(wrs.len());
        }
        let mut bad = ptr::null_mut();
        // SAFETY: a live QP; the list is valid and NULL-terminated, just
        // linked (inline requests point at their own SGEs where they are
        // now); every SGE names registered memory (Sge) or inline data copied
        // during the call; on UD every request is a send whose address
        // handle, of this PD, is borrowed for the call (checked above).
        // Memory the device reaches later stays valid or unreachable (see
        // crate::mr).
        let rc = unsafe { sys::ibv_post_send(self.as_raw(), head, &mut bad) };
        if let Some(c) = ud_count {
            if rc == 0 {
                c.posted(wrs.len());
            } else {
                c.refused(wrs.len());
            }
        }
        if rc == 0 {
            return Ok(());
        }
        Err(post_send_error(wrs, rc, bad))
    }

    /// Checks and links a list of send requests once, for posting it many
    /// times with [`PreparedSend::post`], as perftest-style loops post the
    /// same requests again and again.
    ///
    /// The checks of [`post_send`](Self::post_send) (on a UD QP: every
    /// request is a send with an address handle of the QP's PD) run
    /// here, once; the list stays
    /// borrowed, so it can neither move nor change while prepared, except
    /// for the request ids ([`PreparedSend::set_wr_id`]). An empty list is
    /// refused.
    pub fn prepare_send<'q, 'w, 'a>(
        &'q self,
        wrs: &'w mut [SendWr<'a>],
    ) -> Result<PreparedSend<'q, 'w, 'a>> {
        if wrs.is_empty() {
            return Err(Error::invalid(
                "ibv_post_send",
                "an empty list of work requests cannot be prepared",
            ));
        }
        if self.qp_type == QpType::Ud {
            check_ud_sends(wrs, self.raw_pd())?;
            // Its posts are not counted: handles they name are kept by
            // the PD until this QP's counted posts or its end release them.
            if let Some(c) = self.ud_count.as_deref() {
                c.prepared();
            }
        }
        let len = wrs.len();
        // `head` is derived from the slice's own pointer and covers all of
        // it; `wrs` is not used again, so the links stay valid.
        let head = crate::wr::link_list(wrs);
        Ok(PreparedSend {
            qp: self.raw,
            head,
            len,
            _borrows: PhantomData,
        })
    }

    /// Posts receive work requests, in order, with one call to the provider.
    ///
    /// On failure the error says which request was refused, as for
    /// [`post_send`](Self::post_send).
    #[inline]
    pub fn post_recv(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        match wrs {
            [wr] => self.post_recv_one(wr),
            _ => self.post_recv_list(wrs),
        }
    }

    /// `post_recv` of one request.
    #[inline]
    fn post_recv_one(&self, wr: &mut RecvWr<'_>) -> Result<()> {
        let head = wr.link(ptr::null_mut());
        // As in `post_send_one`: the head waits beside `bad` in memory.
        let mut bad_and_head = [ptr::null_mut(), head];
        // SAFETY: a live QP; a NULL-terminated list of one receive into
        // registered memory (see crate::mr for why it stays sound).
        let rc = unsafe { sys::ibv_post_recv(self.as_raw(), head, &mut bad_and_head[0]) };
        if rc == 0 {
            return Ok(());
        }
        let [bad, head] = bad_and_head;
        Err(post_error(
            "ibv_post_recv",
            rc,
            ptr::eq(bad, head).then_some(0),
        ))
    }

    /// `post_recv` of any list.
    #[inline(never)]
    fn post_recv_list(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        let head = crate::wr::link_list(wrs);
        if head.is_null() {
            return Ok(());
        }
        let mut bad = ptr::null_mut();
        // SAFETY: a live QP; a valid NULL-terminated list of receives into
        // registered memory (see crate::mr for why it stays sound).
        let rc = unsafe { sys::ibv_post_recv(self.as_raw(), head, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(post_recv_error(wrs, rc, bad))
    }

    /// Posts a raw list of send work requests.
    ///
    /// # Safety
    /// `wr` must be a valid NULL-terminated list whose SGEs name memory that
    /// stays valid (or is deregistered) until the requests complete. On a UD
    /// QP the address handles the requests name must stay alive until they
    /// complete too: a post here does not hand them to their PD (see
    /// [`AddressHandle`](crate::AddressHandle)). A request through a handle
    /// of another PD than the QP's fails on rxe.
    #[inline]
    pub unsafe fn post_send_raw(&self, wr: *mut sys::ibv_send_wr) -> Result<()> {
        let mut bad = ptr::null_mut();
        // SAFETY: per the caller's contract.
        let rc = unsafe { sys::ibv_post_send(self.as_raw(), wr, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(post_error("ibv_post_send", rc, None))
    }
}

/// Refuses, on a UD QP of PD `pd`, any request but a send through an
/// address handle of `pd` (see `SendWr::ud_fault`).
#[inline]
fn check_ud_sends(wrs: &[SendWr<'_>], pd: *mut sys::ibv_pd) -> Result<()> {
    for (i, wr) in wrs.iter().enumerate() {
        if let Some(fault) = wr.ud_fault(pd) {
            return Err(ud_refusal(i, wr, fault.of_other_pd(wr.ud_ah(), pd)));
        }
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn ud_refusal(i: usize, wr: &SendWr<'_>, fault: UdFault) -> Error {
    let why = match fault {
        UdFault::NotASend => format!(
            "work request {i} is {} and a UD QP posts only SEND and SEND with immediate",
            wr.opcode_name()
        ),
        UdFault::NoAddress => {
            format!("work request {i} on a UD QP has no address handle: use SendWr::ud")
        }
        UdFault::OtherContext => format!(
            "the address handle of work request {i} belongs to a different context than the UD QP: create it on the QP's device (and context)"
        ),
        UdFault::OtherPd => format!(
            "the address handle of work request {i} belongs to a different protection domain than the UD QP: create it in the QP's PD"
        ),
    };
    Error::invalid("ibv_post_send", format!("{why}; nothing was posted"))
}

/// The error of a refused `ibv_post_send`, naming the request `bad` points to.
#[cold]
#[inline(never)]
fn post_send_error(wrs: &[SendWr<'_>], rc: i32, bad: *mut sys::ibv_send_wr) -> Error {
    let index = wrs.iter().position(|w| ptr::eq(w.as_raw_ptr(), bad));
    post_error("ibv_post_send", rc, index)
}

/// The error of a refused `ibv_post_recv`, naming the request `bad` points to.
#[cold]
#[inline(never)]
fn post_recv_error(wrs: &[RecvWr<'_>], rc: i32, bad: *mut sys::ibv_recv_wr) -> Error {
    let index = wrs.iter().position(|w| ptr::eq(w.as_raw_ptr(), bad));
    post_error("ibv_post_recv", rc, index)
}

/// The classic bind of a type 1 window (`ibv_bind_mw`): a work request
/// posted on a QP.
impl MemoryWindow {
    /// Binds a type 1 window to `range` of `mr` with remote `access`, by a
    /// work request posted on `qp` (`ibv_bind_mw`; its completion carries
    /// `wr_id` when signaled). The window's rkey changes; the returned
    /// [`RemoteMemory`] carries the new one.
    ///
    /// The window, `qp` and `mr` must belong to one context (else `EINVAL`):
    /// `ibv_bind_mw` runs the window's provider on the QP.
    pub fn bind(
        &mut self,
        qp: &QueuePair,
        wr_id: u64,
        signaled: bool,
        mr: &MemoryRegion,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
    ) -> Result<RemoteMemory> {
        // ibv_bind_mw calls the window's provider, which takes the QP (and
        // the region) for its own structures: they must be of its context.
        let ctx = self.context();
        crate::pd::same_context(
            "ibv_bind_mw",
            "memory window",
            ctx,
            "queue pair",
            qp.context(),
        )?;
        crate::pd::same_context(
            "ibv_bind_mw",
            "memory window",
            ctx,
            "memory region",
            mr.pd().context(),
        )?;
        let remote = mr.remote(range)?;
        let mut bind = sys::ibv_mw_bind {
            wr_id,
            send_flags: if signaled { sys::IBV_SEND_SIGNALED } else { 0 },
            bind_info: sys::ibv_mw_bind_info {
                mr: mr.as_raw(),
                addr: remote.addr,
                length: remote.len,
                mw_access_flags: access.bits(),
            },
        };
        // SAFETY: a live QP, window and region, of one context (checked
        // above), so the window's provider gets its own objects; of one PD,
        // or the provider refuses the bind (EPERM/EINVAL); the bind
        // describes a range inside the region.
        let rc = unsafe { sys::ibv_bind_mw(qp.as_raw(), self.as_raw(), &mut bind) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_bind_mw", rc));
        }
        Ok(RemoteMemory {
            rkey: self.rkey(),
            ..remote
        })
    }

    /// Unbinds a type 1 window (`ibv_bind_mw` of length 0), by a work
    /// request posted on `qp`: once it completes, RDMA through any key the
    /// window had fails. The window's rkey changes, as on every bind.
    ///
    /// `mr` is any region of the window's PD (the one it was bound to,
    /// say): verbs allows an unbind without one, but rxe's library reads the
    /// region's key even for an unbind and crashes on none. The kernel
    /// ignores it for a length of 0.
    ///
    /// `qp` and `mr` must belong to the window's context (else `EINVAL`);
    /// a type 2 window is unbound by a [`SendWr::local_invalidate`] or a
    /// peer's [`SendWr::send_with_invalidate`] instead (`EINVAL` here).
    ///
    /// [`SendWr::local_invalidate`]: crate::SendWr::local_invalidate
    /// [`SendWr::send_with_invalidate`]: crate::SendWr::send_with_invalidate
    pub fn unbind(
        &mut self,
        qp: &QueuePair,
        wr_id: u64,
        signaled: bool,
        mr: &MemoryRegion,
    ) -> Result<()> {
        if self.is_type2() {
            return Err(Error::invalid(
                "ibv_bind_mw",
                "only a type 1 window is unbound by ibv_bind_mw; a type 2 window by an invalidate",
            ));
        }
        self.bind(qp, wr_id, signaled, mr, 0..0, AccessFlags::empty())
            .map(|_| ())
    }
}
