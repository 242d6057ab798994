//! The shared receive queue of a CM id (`rdma_create_srq`,
//! `rdma_create_srq_ex`, `rdma_destroy_srq`): made on the id's device and
//! used by the QP the id creates afterwards.
//!
//! librdmacm stores the SRQ in the id (`id->srq`), and `rdma_create_qp`
//! gives it to the QP it makes; [`CmId::create_qp`] does the same. The SRQ
//! is an ordinary [`SharedReceiveQueue`]: the id holds one handle, every
//! QP using it another, so it outlives all of them whatever the order of
//! the drops. The id destroys it with `rdma_destroy_srq` when its handle is
//! the last; when a QP (of this id or another) or a clone still uses it,
//! the id only forgets it (`id->srq` cleared) and the last handle destroys
//! it with `ibv_destroy_srq`, which is all `rdma_destroy_srq` does for an
//! SRQ whose CQs are not librdmacm's (the only kind made here, see
//! [`CmId::create_srq_ex`]).

use rdmacm_sys as cm;

use super::{rc, CmId};
use crate::{Error, ProtectionDomain, Result, SharedReceiveQueue, SrqBuilder};

impl CmId {
    /// Creates a basic SRQ of `max_wr` receives of up to `max_sge` SGEs
    /// each in `pd`, for the id (`rdma_create_srq`): the QP the id creates
    /// afterwards ([`create_qp`](Self::create_qp)) takes its receives from
    /// it. [`srq`](Self::srq) reaches it; clones of it may serve QPs of
    /// other ids of the device too.
    ///
    /// Errors, before librdmacm is called: `EEXIST` when the id has an SRQ;
    /// `EINVAL` when the id has no device yet, already has a QP (which
    /// would not use the SRQ), is an XRC receive id or holds CQs of
    /// librdmacm's own (as ids of `rdma_create_ep` with a QP do), or when
    /// `pd` is not of the id's context ([`context`](Self::context)); `max_wr`
    /// or `max_sge` of 0 are refused so too. The provider's refusals
    /// follow (siw and rxe make basic SRQs).
    pub fn create_srq(
        &mut self,
        pd: &ProtectionDomain,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<&SharedReceiveQueue> {
        const VERB: &str = "rdma_create_srq";
        if max_wr == 0 || max_sge == 0 {
            return Err(Error::invalid(
                VERB,
                "an SRQ needs at least 1 receive of at least 1 SGE",
            ));
        }
        let id = self.as_raw();
        let (srq, set_pd) = self.locked(|| {
            let set_pd = self.check_srq_target(VERB, pd)?;
            // SAFETY: plain data.
            let mut attr: cm::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
            attr.attr.max_wr = max_wr;
            attr.attr.max_sge = max_sge;
            // SAFETY: a live id with a device whose context is `pd`'s
            // (checked), not an XRC receive id, so librdmacm makes a basic
            // SRQ of `pd` with `ibv_create_srq_ex` and stores it in
            // `id->srq`; `attr` is complete and writable (librdmacm copies
            // the granted sizes back). The lock is held.
            rc(VERB, unsafe {
                cm::rdma_create_srq(id, pd.as_raw(), &mut attr)
            })?;
            // SAFETY: a live id; the lock is held; the call above succeeded
            // and so set `srq`.
            let raw = unsafe { (*id).srq };
            let raw = std::ptr::NonNull::new(raw).ok_or_else(|| Error::new(VERB, libc::EIO))?;
            // SAFETY: `raw` is a new basic SRQ of `pd`, in `pd`'s context, with
            // no XRC domain or CQ; the value returned owns it (the id's
            // `srq` field points to it until `detach_srq` clears it).
            let srq = unsafe { SharedReceiveQueue::from_ex(pd, raw, attr.attr.max_wr, None, None) };
            Ok::<_, Error>((srq, set_pd))
        })?;
        self.srq_set_pd = set_pd;
        Ok(self.srq.insert(srq))
    }

    /// Creates the SRQ `builder` describes for the id
    /// (`rdma_create_srq_ex`), as [`create_srq`](Self::create_srq) does a
    /// basic one: a basic SRQ, an XRC one (whose domain and CQ the builder
    /// names, so librdmacm makes none of its own) or a tag-matching one;
    /// the same errors, and the builder's own ([`SrqBuilder::build`]).
    pub fn create_srq_ex(&mut self, builder: SrqBuilder<'_>) -> Result<&SharedReceiveQueue> {
        const VERB: &str = "rdma_create_srq_ex";
        let id = self.as_raw();
        let pd = builder.pd();
        let (srq, set_pd) = self.locked(|| {
            let set_pd = self.check_srq_target(VERB, pd)?;
            let srq = builder.build_with(VERB, |attr| {
                // SAFETY: a live id with a device whose context is the
                // PD's (checked), not an XRC receive id; `attr` is
                // complete for its mask (type and PD always, an XRC SRQ's
                // domain and CQ, a tag-matching one's CQ), of objects of
                // that context kept alive by the SRQ, so librdmacm creates
                // nothing of its own. The lock is held.
                if unsafe { cm::rdma_create_srq_ex(id, attr) } != 0 {
                    return std::ptr::null_mut();
                }
                // SAFETY: a live id; the lock is held; the call succeeded
                // and so set `srq`.
                unsafe { (*id).srq }
            })?;
            Ok::<_, Error>((srq, set_pd))
        })?;
        self.srq_set_pd = set_pd;
        Ok(self.srq.insert(srq))
    }

    /// The id's SRQ, which the QP it creates uses.
    pub fn srq(&self) -> Option<&SharedReceiveQueue> {
        self.srq.as_ref()
    }

    /// Destroys the id's SRQ (`rdma_destroy_srq`); the id lives on.
    /// Nothing happens when it has none.
    ///
    /// Errors: `EBUSY` when a QP (the id's own, or one of another id) or a
    /// clone still uses the SRQ: destroy them first
    /// ([`destroy_qp`](Self::destroy_qp)). The SRQ stays on the id then.
    pub fn destroy_srq(&mut self) -> Result<()> {
        let Some(srq) = self.srq.take() else {
            return Ok(());
        };
        match self.destroy_srq_if_last(srq) {
            Ok(()) => Ok(()),
            Err(srq) => {
                self.srq = Some(srq);
                Err(Error::new("rdma_destroy_srq", libc::EBUSY).with_hint(
                    "a QP or a clone still uses the SRQ: destroy the QP (CmId::destroy_qp) first",
                ))
            }
        }
    }

    /// Destroys `srq`, the id's, with `rdma_destroy_srq` when its handle is
    /// the last; otherwise gives it back untouched.
    fn destroy_srq_if_last(
        &mut self,
        srq: SharedReceiveQueue,
    ) -> std::result::Result<(), SharedReceiveQueue> {
        let id = self.as_raw();
        let set_pd = std::mem::take(&mut self.srq_set_pd);
        let out = self.locked(|| {
            srq.destroy_with(|raw| {
                // SAFETY: a live id whose `srq` is `raw` (set at creation,
                // cleared only here and in `detach_srq`); no QP or clone
                // uses it (its handle was the last). librdmacm destroys it
                // and clears the field; the id holds no CQs of librdmacm's
                // (checked at creation), so it destroys nothing else. The
                // lock is held.
                unsafe {
                    debug_assert_eq!((*id).srq, raw);
                    cm::rdma_destroy_srq(id);
                }
                if set_pd {
                    // SAFETY: as above; the PD librdmacm stored in the id
                    // is the SRQ's, which goes now.
                    unsafe { (*id).pd = std::ptr::null_mut() };
                }
            })
        });
        if out.is_err() {
            self.srq_set_pd = set_pd;
        }
        out
    }

    /// Releases the id's SRQ before the id goes: destroyed with
    /// `rdma_destroy_srq` when the id's handle is the last, otherwise
    /// forgotten by librdmacm (`id->srq` and the PD it stored cleared,
    /// under the lock) and returned, so that the last handle destroys it.
    pub(super) fn detach_srq(&mut self) -> Option<SharedReceiveQueue> {
        let srq = self.srq.take()?;
        let srq = self.destroy_srq_if_last(srq).err()?;
        let id = self.as_raw();
        let set_pd = std::mem::take(&mut self.srq_set_pd);
        self.locked(|| {
            // SAFETY: a live id; the lock keeps the writes from overlapping
            // librdmacm's reads. From now on librdmacm does not know the
            // SRQ, which the returned handle (and the QPs' clones) keep.
            unsafe {
                (*id).srq = std::ptr::null_mut();
                if set_pd {
                    (*id).pd = std::ptr::null_mut();
                }
            }
        });
        Some(srq)
    }

    /// Whether an SRQ of `pd` may be made on the id; returns whether
    /// librdmacm will store `pd` in the id (it has none). Run with the lock
    /// held.
    fn check_srq_target(&self, verb: &'static str, pd: &ProtectionDomain) -> Result<bool> {
        if self.srq.is_some() {
            return Err(Error::new(verb, libc::EEXIST).with_hint("the id already has an SRQ"));
        }
        let id = self.as_raw();
        // SAFETY: a live id; the caller holds the lock, which keeps
        // librdmacm's writes of these fields from overlapping the reads.
        let (verbs, qp, qp_type, send_cq, recv_cq, id_pd) = unsafe {
            let r = &*id;
            (r.verbs, r.qp, r.qp_type, r.send_cq, r.recv_cq, r.pd)
        };
        if self.qp.is_some() || !qp.is_null() {
            return Err(Error::invalid(
                verb,
                "the id already has a QP, which would not use the SRQ: create the SRQ first",
            ));
        }
        if verbs.is_null() {
            return Err(Error::invalid(verb, "the id is not bound to a device yet"));
        }
        if pd.context().as_raw() != verbs {
            return Err(Error::invalid(
                verb,
                "the PD is not of the id's context: make it in CmId::context()",
            ));
        }
        if qp_type == crate::sys::IBV_QPT_XRC_RECV {
            return Err(Error::invalid(
                verb,
                "an XRC receive id: librdmacm would make CQs of its own for the SRQ",
            ));
        }
        if !send_cq.is_null() || !recv_cq.is_null() {
            return Err(Error::invalid(
                verb,
                "the id holds CQs of librdmacm's, which rdma_destroy_srq would destroy",
            ));
        }
        Ok(id_pd.is_null())
    }
}
