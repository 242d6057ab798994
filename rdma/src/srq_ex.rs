//! Making shared receive queues through `ibv_create_srq_ex`: basic SRQs
//! and XRC SRQs ([`SrqBuilder`]), and the SRQ number a sender names
//! ([`SharedReceiveQueue::srq_num`]).

use std::ptr::{self, NonNull};

use crate::sys;
use crate::{CompletionQueue, Error, ProtectionDomain, Result, SharedReceiveQueue, XrcDomain};

/// How to create a shared receive queue with `ibv_create_srq_ex`; see
/// [`SharedReceiveQueue::builder`].
#[derive(Debug, Clone)]
pub struct SrqBuilder<'a> {
    pd: &'a ProtectionDomain,
    max_wr: u32,
    max_sge: u32,
    srq_limit: u32,
    xrc: Option<(&'a XrcDomain, &'a CompletionQueue)>,
}

impl SharedReceiveQueue {
    /// A builder for an SRQ in `pd` (default: 64 receives of one SGE, no
    /// limit, basic).
    pub fn builder(pd: &ProtectionDomain) -> SrqBuilder<'_> {
        SrqBuilder {
            pd,
            max_wr: 64,
            max_sge: 1,
            srq_limit: 0,
            xrc: None,
        }
    }

    /// The SRQ's number (`ibv_get_srq_num`), which an XRC sender names in
    /// each request ([`WrBatch::set_xrc_srqn`](crate::WrBatch::set_xrc_srqn)).
    /// Providers give it for XRC SRQs; for a basic SRQ the provider decides
    /// (rxe and siw have no such verb: `EOPNOTSUPP`, "not supported by
    /// rxe0").
    pub fn srq_num(&self) -> Result<u32> {
        let mut num = 0;
        // SAFETY: a live SRQ; `num` is writable. ibv_get_srq_num is verbs.h's
        // static inline (the C shim), which answers EOPNOTSUPP where the
        // provider has no such op.
        let rc = unsafe { sys::ibv_get_srq_num(self.as_raw(), &mut num) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_get_srq_num", rc)
                .unsupported_on(self.context().name(), "SRQ numbers"));
        }
        Ok(num)
    }
}

impl<'a> SrqBuilder<'a> {
    /// At least `max_wr` receives (the provider may round up).
    pub fn max_wr(mut self, max_wr: u32) -> Self {
        self.max_wr = max_wr;
        self
    }
    /// SGEs per receive.
    pub fn max_sge(mut self, max_sge: u32) -> Self {
        self.max_sge = max_sge;
        self
    }
    /// Arms the limit event at creation (see
    /// [`SharedReceiveQueue::set_limit`]).
    pub fn srq_limit(mut self, limit: u32) -> Self {
        self.srq_limit = limit;
        self
    }
    /// An XRC SRQ (`IBV_SRQT_XRC`) of `xrcd`, whose receive completions go
    /// to `cq`; the SRQ keeps both alive.
    pub fn xrc(mut self, xrcd: &'a XrcDomain, cq: &'a CompletionQueue) -> Self {
        self.xrc = Some((xrcd, cq));
        self
    }

    /// Creates the SRQ (`ibv_create_srq_ex`). The PD, XRC domain and CQ
    /// must be of one context (else `EINVAL`, before the provider sees
    /// them); `max_wr` and `max_sge` of 0 are refused so too. A basic SRQ
    /// is made by every provider with SRQs (libibverbs passes it on as
    /// `ibv_create_srq`); an XRC SRQ by providers with XRC only (rxe and
    /// siw: "not supported", `EOPNOTSUPP`).
    pub fn build(self) -> Result<SharedReceiveQueue> {
        const VERB: &str = "ibv_create_srq_ex";
        if self.max_wr == 0 || self.max_sge == 0 {
            return Err(Error::invalid(
                VERB,
                "an SRQ needs at least 1 receive of at least 1 SGE",
            ));
        }
        let ctx = self.pd.context();
        if let Some((xrcd, cq)) = self.xrc {
            crate::pd::same_context(VERB, "PD", ctx, "XRC domain", xrcd.context())?;
            crate::pd::same_context(VERB, "PD", ctx, "CQ", cq.context())?;
        }
        let mut attr = init_attr_ex(
            self.pd.as_raw(),
            self.max_wr,
            self.max_sge,
            self.srq_limit,
            self.xrc.map(|(x, c)| (x.as_raw(), c.as_raw())),
        );
        // SAFETY: a live context; `attr` is complete for its mask, and what
        // it points to (PD, domain, CQ) is live and of this context
        // (checked above), kept alive by the SRQ.
        let raw = unsafe { sys::ibv_create_srq_ex(ctx.as_raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            let what = if self.xrc.is_some() {
                "XRC SRQs"
            } else {
                "extended SRQs"
            };
            Error::last(VERB).unsupported_on(ctx.name(), what)
        })?;
        let xrc = self.xrc.map(|(x, c)| (x.clone(), c.clone()));
        // SAFETY: `raw` was just created in the PD's context with this
        // domain and CQ, and is owned by the value returned.
        Ok(unsafe { SharedReceiveQueue::from_ex(self.pd, raw, attr.attr.max_wr, xrc) })
    }
}

/// The `ibv_srq_init_attr_ex` of a basic SRQ, or an XRC one of `xrc`'s
/// domain and CQ.
pub(crate) fn init_attr_ex(
    pd: *mut sys::ibv_pd,
    max_wr: u32,
    max_sge: u32,
    srq_limit: u32,
    xrc: Option<(*mut sys::ibv_xrcd, *mut sys::ibv_cq)>,
) -> sys::ibv_srq_init_attr_ex {
    // SAFETY: plain data.
    let mut attr: sys::ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.srq_context = ptr::null_mut();
    attr.attr.max_wr = max_wr;
    attr.attr.max_sge = max_sge;
    attr.attr.srq_limit = srq_limit;
    attr.pd = pd;
    attr.comp_mask = sys::IBV_SRQ_INIT_ATTR_TYPE | sys::IBV_SRQ_INIT_ATTR_PD;
    match xrc {
        None => attr.srq_type = sys::IBV_SRQT_BASIC,
        Some((xrcd, cq)) => {
            attr.srq_type = sys::IBV_SRQT_XRC;
            attr.xrcd = xrcd;
            attr.cq = cq;
            attr.comp_mask |= sys::IBV_SRQ_INIT_ATTR_XRCD | sys::IBV_SRQ_INIT_ATTR_CQ;
        }
    }
    attr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_basic_srq_names_type_and_pd_only() {
        // libibverbs sends exactly this mask with a basic type to the
        // classic ibv_create_srq, which every provider with SRQs has.
        let a = init_attr_ex(ptr::null_mut(), 16, 2, 3, None);
        assert_eq!(
            a.comp_mask,
            sys::IBV_SRQ_INIT_ATTR_TYPE | sys::IBV_SRQ_INIT_ATTR_PD
        );
        assert_eq!(a.srq_type, sys::IBV_SRQT_BASIC);
        assert_eq!(
            (a.attr.max_wr, a.attr.max_sge, a.attr.srq_limit),
            (16, 2, 3)
        );
        assert!(a.xrcd.is_null() && a.cq.is_null());
    }

    #[test]
    fn an_xrc_srq_names_its_domain_and_cq() {
        let x = 0x1000 as *mut sys::ibv_xrcd;
        let c = 0x2000 as *mut sys::ibv_cq;
        let a = init_attr_ex(ptr::null_mut(), 1, 1, 0, Some((x, c)));
        assert_eq!(a.srq_type, sys::IBV_SRQT_XRC);
        assert_eq!((a.xrcd, a.cq), (x, c));
        assert_eq!(a.comp_mask, 0xf);
    }
}
