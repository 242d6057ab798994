//! Thread domains and parent domains.
//!
//! A thread domain (`ibv_td`) tells the provider that the objects made
//! with it are used by one thread at a time, so that it may drop their
//! locks and give them a doorbell of their own (mlx5 does both). A parent
//! domain (`ibv_alloc_parent_domain`) is a PD that carries such a thread
//! domain (or none), and is used wherever a PD is: this crate gives it as
//! a [`ProtectionDomain`].
//!
//! Neither soft device has them: rxe's and siw's providers answer
//! `ibv_alloc_td` and `ibv_alloc_parent_domain` with `EOPNOTSUPP`
//! ("not supported by rxe0", [`Error::is_unsupported`]).

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::pd::PdKind;
use crate::sys;
use crate::{Context, Error, ProtectionDomain, Result};

/// A thread domain (`ibv_td`).
///
/// Cloning shares it; parent domains made with it keep it alive.
#[derive(Clone)]
pub struct ThreadDomain {
    inner: Arc<TdInner>,
}

struct TdInner {
    ctx: Context,
    raw: NonNull<sys::ibv_td>,
}

// SAFETY: the thread domain itself is a handle this crate never mutates
// after creation; its allocation and release are commands on the uverbs
// file. What it promises the provider (one thread at a time) concerns the
// objects made in a parent domain with it, which only an `unsafe`
// constructor makes (`ProtectionDomain::parent_domain_with_td`).
unsafe impl Send for TdInner {}
// SAFETY: as above.
unsafe impl Sync for TdInner {}

impl Drop for TdInner {
    fn drop(&mut self) {
        // SAFETY: released once, after every parent domain made with it
        // (each holds this Arc).
        unsafe { sys::ibv_dealloc_td(self.raw.as_ptr()) };
    }
}

impl ThreadDomain {
    /// Allocates a thread domain on `ctx` (`ibv_alloc_td`).
    pub fn new(ctx: &Context) -> Result<ThreadDomain> {
        let mut attr = sys::ibv_td_init_attr { comp_mask: 0 };
        // SAFETY: a live context; `attr` is complete (no optional field).
        // ibv_alloc_td is verbs.h's static inline (the C shim), which
        // answers EOPNOTSUPP where the provider has no thread domains.
        let raw = unsafe { sys::ibv_alloc_td(ctx.as_raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last("ibv_alloc_td").unsupported_on(ctx.name(), "thread domains")
        })?;
        Ok(ThreadDomain {
            inner: Arc::new(TdInner {
                ctx: ctx.clone(),
                raw,
            }),
        })
    }

    /// The context the domain belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw thread domain, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_td {
        self.inner.raw.as_ptr()
    }
}

impl fmt::Debug for ThreadDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadDomain")
            .field("device", &self.inner.ctx.name())
            .finish()
    }
}

impl ProtectionDomain {
    /// A parent domain over `pd` without a thread domain
    /// (`ibv_alloc_parent_domain`), usable wherever `pd` is; it keeps `pd`
    /// alive. Objects made in it keep their locks.
    pub fn parent_domain(pd: &ProtectionDomain) -> Result<ProtectionDomain> {
        Self::alloc_parent(pd, None)
    }

    /// A parent domain over `pd` with the thread domain `td`: the provider
    /// may make the QPs, CQs, SRQs and WQs created in it without locks
    /// (mlx5 does).
    ///
    /// # Safety
    /// The crate's verbs objects are `Sync` because providers lock them
    /// (see the crate's threading table). The caller makes sure that no
    /// two threads use an object created in the returned domain (posting,
    /// polling, binding) at the same time.
    pub unsafe fn parent_domain_with_td(
        pd: &ProtectionDomain,
        td: &ThreadDomain,
    ) -> Result<ProtectionDomain> {
        Self::alloc_parent(pd, Some(td))
    }

    fn alloc_parent(pd: &ProtectionDomain, td: Option<&ThreadDomain>) -> Result<ProtectionDomain> {
        const VERB: &str = "ibv_alloc_parent_domain";
        let ctx = pd.context();
        if let Some(td) = td {
            crate::pd::same_context(VERB, "PD", ctx, "thread domain", td.context())?;
        }
        let mut attr = parent_init_attr(pd.as_raw(), td.map_or(ptr::null_mut(), |t| t.as_raw()));
        // SAFETY: a live context; `attr` names a live PD (and TD) of it
        // (checked above), kept alive by the parent domain; no allocators
        // (comp_mask 0). ibv_alloc_parent_domain is verbs.h's static
        // inline, EOPNOTSUPP where the provider has none.
        let raw = unsafe { sys::ibv_alloc_parent_domain(ctx.as_raw(), &mut attr) };
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::last(VERB).unsupported_on(ctx.name(), "parent domains"))?;
        // SAFETY: a parent domain of `ctx` made just now over `pd` and `td`,
        // which the kind holds until after it is released.
        Ok(unsafe {
            ProtectionDomain::from_raw(
                ctx,
                raw,
                PdKind::Parent {
                    _pd: pd.clone(),
                    _td: td.cloned(),
                },
            )
        })
    }
}

/// The `ibv_parent_domain_init_attr` of a parent domain over `pd` and `td`
/// (NULL for none), without custom allocators.
pub(crate) fn parent_init_attr(
    pd: *mut sys::ibv_pd,
    td: *mut sys::ibv_td,
) -> sys::ibv_parent_domain_init_attr {
    sys::ibv_parent_domain_init_attr {
        pd,
        td,
        comp_mask: 0,
        alloc: None,
        free: None,
        pd_context: ptr::null_mut(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_domain_without_allocators_has_no_mask() {
        let pd = 0x10 as *mut sys::ibv_pd;
        let a = parent_init_attr(pd, ptr::null_mut());
        assert_eq!(a.pd, pd);
        assert!(a.td.is_null() && a.pd_context.is_null());
        assert!(a.alloc.is_none() && a.free.is_none());
        assert_eq!(a.comp_mask, 0);
    }
}
