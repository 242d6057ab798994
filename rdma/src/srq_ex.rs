//! Making shared receive queues through `ibv_create_srq_ex`: basic, XRC
//! and tag-matching SRQs ([`SrqBuilder`]), and the SRQ number a sender
//! names ([`SharedReceiveQueue::srq_num`]).

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
    kind: Kind<'a>,
}

/// The type of SRQ a builder makes, and what that type needs.
#[derive(Debug, Clone, Copy)]
enum Kind<'a> {
    Basic,
    Xrc(&'a XrcDomain, &'a CompletionQueue),
    TagMatching(&'a CompletionQueue, TmCap),
}

/// The tag-matching capacity asked of a tag-matching SRQ (`ibv_tm_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmCap {
    /// The tags the SRQ's matching list holds.
    pub max_num_tags: u32,
    /// The tag operations ([`SharedReceiveQueue::post_srq_ops`]) in
    /// flight at once.
    pub max_ops: u32,
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
            kind: Kind::Basic,
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
        self.kind = Kind::Xrc(xrcd, cq);
        self
    }
    /// A tag-matching SRQ (`IBV_SRQT_TM`, with `IBV_SRQ_INIT_ATTR_TM`) of
    /// `cap`, whose completions (of receives and of tag operations) go to
    /// `cq`; the SRQ keeps it alive. Tags are added and removed with
    /// [`SharedReceiveQueue::post_srq_ops`]. Only devices with tag
    /// matching make one (mlx5, which wants `cq` extended:
    /// [`CqBuilder::extended`](crate::CqBuilder::extended), and reports
    /// its limits in `ibv_device_attr_ex.tm_caps`); rxe and siw have none
    /// and refuse it with `EOPNOTSUPP`.
    pub fn tag_matching(mut self, cq: &'a CompletionQueue, cap: TmCap) -> Self {
        self.kind = Kind::TagMatching(cq, cap);
        self
    }

    /// This builder, made tag-matching with `cq` and `cap` (for
    /// [`build_tag_matching`](Self::build_tag_matching), whose CQ lives
    /// shorter than the PD's borrow).
    pub(crate) fn with_tag_matching<'b>(self, cq: &'b CompletionQueue, cap: TmCap) -> SrqBuilder<'b>
    where
        'a: 'b,
    {
        SrqBuilder {
            pd: self.pd,
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            srq_limit: self.srq_limit,
            kind: Kind::TagMatching(cq, cap),
        }
    }

    /// Creates the SRQ (`ibv_create_srq_ex`). The PD, XRC domain and CQ
    /// must be of one context (else `EINVAL`, before the provider sees
    /// them); `max_wr` and `max_sge` of 0 are refused so too. A basic SRQ
    /// is made by every provider with SRQs (libibverbs passes it on as
    /// `ibv_create_srq`); an XRC SRQ by providers with XRC only, a
    /// tag-matching one by providers with tag matching only (rxe and siw:
    /// "not supported", `EOPNOTSUPP`).
    pub fn build(self) -> Result<SharedReceiveQueue> {
        let ctx = self.pd.context().as_raw();
        self.build_with("ibv_create_srq_ex", |attr| {
            // SAFETY: a live context; `attr` is complete for its mask, and
            // what it points to (PD, domain, CQ) is live and of this
            // context (checked by `build_with`), kept alive by the SRQ.
            unsafe { sys::ibv_create_srq_ex(ctx, attr) }
        })
    }

    /// The PD the SRQ is made in.
    pub(crate) fn pd(&self) -> &'a ProtectionDomain {
        self.pd
    }

    /// Checks the builder, fills the `ibv_srq_init_attr_ex` and makes the
    /// SRQ with `create` (`ibv_create_srq_ex`, or `rdma_create_srq_ex` on a
    /// CM id), which returns the new SRQ or NULL with errno set.
    pub(crate) fn build_with(
        self,
        verb: &'static str,
        create: impl FnOnce(&mut sys::ibv_srq_init_attr_ex) -> *mut sys::ibv_srq,
    ) -> Result<SharedReceiveQueue> {
        if self.max_wr == 0 || self.max_sge == 0 {
            return Err(Error::invalid(
                verb,
                "an SRQ needs at least 1 receive of at least 1 SGE",
            ));
        }
        let ctx = self.pd.context();
        let kind = match self.kind {
            Kind::Basic => Raw::Basic,
            Kind::Xrc(xrcd, cq) => {
                crate::pd::same_context(verb, "PD", ctx, "XRC domain", xrcd.context())?;
                crate::pd::same_context(verb, "PD", ctx, "CQ", cq.context())?;
                Raw::Xrc(xrcd.as_raw(), cq.as_raw())
            }
            Kind::TagMatching(cq, cap) => {
                crate::pd::same_context(verb, "PD", ctx, "CQ", cq.context())?;
                Raw::TagMatching(cq.as_raw(), cap)
            }
        };
        let mut attr = init_attr_ex(
            self.pd.as_raw(),
            self.max_wr,
            self.max_sge,
            self.srq_limit,
            kind,
        );
        let raw = NonNull::new(create(&mut attr)).ok_or_else(|| {
            let what = match self.kind {
                Kind::Basic => "extended SRQs",
                Kind::Xrc(..) => "XRC SRQs",
                Kind::TagMatching(..) => "tag-matching SRQs",
            };
            Error::last(verb).unsupported_on(ctx.name(), what)
        })?;
        let (extra, tm) = match self.kind {
            Kind::Basic => (None, None),
            Kind::Xrc(x, c) => (Some((Some(x.clone()), c.clone())), None),
            // The table as large as the provider's: mlx5 sizes its own by
            // what the attribute holds after the call.
            Kind::TagMatching(c, cap) => (
                Some((None, c.clone())),
                Some(cap.max_num_tags.max(attr.tm_cap.max_num_tags)),
            ),
        };
        // SAFETY: `raw` was just created in the PD's context with this
        // domain and CQ, of this type, and is owned by the value returned.
        Ok(unsafe { SharedReceiveQueue::from_ex(self.pd, raw, attr.attr.max_wr, extra, tm) })
    }
}

/// What an SRQ's type adds to its `ibv_srq_init_attr_ex`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Raw {
    Basic,
    Xrc(*mut sys::ibv_xrcd, *mut sys::ibv_cq),
    TagMatching(*mut sys::ibv_cq, TmCap),
}

/// The `ibv_srq_init_attr_ex` of an SRQ of type `kind`: a basic one, an
/// XRC one of its domain and CQ, a tag-matching one of its CQ and capacity.
pub(crate) fn init_attr_ex(
    pd: *mut sys::ibv_pd,
    max_wr: u32,
    max_sge: u32,
    srq_limit: u32,
    kind: Raw,
) -> sys::ibv_srq_init_attr_ex {
    // SAFETY: plain data.
    let mut attr: sys::ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.srq_context = ptr::null_mut();
    attr.attr.max_wr = max_wr;
    attr.attr.max_sge = max_sge;
    attr.attr.srq_limit = srq_limit;
    attr.pd = pd;
    attr.comp_mask = sys::IBV_SRQ_INIT_ATTR_TYPE | sys::IBV_SRQ_INIT_ATTR_PD;
    match kind {
        Raw::Basic => attr.srq_type = sys::IBV_SRQT_BASIC,
        Raw::Xrc(xrcd, cq) => {
            attr.srq_type = sys::IBV_SRQT_XRC;
            attr.xrcd = xrcd;
            attr.cq = cq;
            attr.comp_mask |= sys::IBV_SRQ_INIT_ATTR_XRCD | sys::IBV_SRQ_INIT_ATTR_CQ;
        }
        Raw::TagMatching(cq, cap) => {
            attr.srq_type = sys::IBV_SRQT_TM;
            attr.cq = cq;
            attr.tm_cap = sys::ibv_tm_cap {
                max_num_tags: cap.max_num_tags,
                max_ops: cap.max_ops,
            };
            attr.comp_mask |= sys::IBV_SRQ_INIT_ATTR_CQ | sys::IBV_SRQ_INIT_ATTR_TM;
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
        let a = init_attr_ex(ptr::null_mut(), 16, 2, 3, Raw::Basic);
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
        let a = init_attr_ex(ptr::null_mut(), 1, 1, 0, Raw::Xrc(x, c));
        assert_eq!(a.srq_type, sys::IBV_SRQT_XRC);
        assert_eq!((a.xrcd, a.cq), (x, c));
        assert_eq!(a.comp_mask, 0xf);
    }

    #[test]
    fn a_tag_matching_srq_names_its_cq_and_capacity() {
        let c = 0x2000 as *mut sys::ibv_cq;
        let cap = TmCap {
            max_num_tags: 64,
            max_ops: 8,
        };
        let a = init_attr_ex(ptr::null_mut(), 4, 1, 0, Raw::TagMatching(c, cap));
        assert_eq!(a.srq_type, sys::IBV_SRQT_TM);
        assert_eq!(a.cq, c);
        assert!(a.xrcd.is_null());
        assert_eq!((a.tm_cap.max_num_tags, a.tm_cap.max_ops), (64, 8));
        assert_eq!(
            a.comp_mask,
            sys::IBV_SRQ_INIT_ATTR_TYPE
                | sys::IBV_SRQ_INIT_ATTR_PD
                | sys::IBV_SRQ_INIT_ATTR_CQ
                | sys::IBV_SRQ_INIT_ATTR_TM
        );
    }
}
