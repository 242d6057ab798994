//! Protection domains.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::retire::UdRegistry;
use crate::sys;
use crate::{Context, Error, Result};

/// A protection domain (`ibv_pd`): the scope in which memory regions, queue
/// pairs and address handles may be used together.
///
/// Cloning shares it. Every object created in the domain keeps it alive, so
/// it is deallocated only after all of them are gone.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    raw: NonNull<sys::ibv_pd>,
    /// Its UD QPs' send counts and the address handles dropped while those
    /// may still name them (see `crate::retire`).
    pub(crate) ud: UdRegistry,
    kind: PdKind,
}

/// How a PD came to this process, which decides how it is released.
pub(crate) enum PdKind {
    /// `ibv_alloc_pd`: deallocated with `ibv_dealloc_pd`.
    Allocated,
    /// `ibv_alloc_parent_domain` over a PD (and a thread domain): released
    /// with `ibv_dealloc_pd`, before the PD and TD it holds.
    Parent {
        _pd: ProtectionDomain,
        _td: Option<crate::ThreadDomain>,
    },
    /// `ibv_import_pd`: another process's PD, which this one does not own:
    /// released with `ibv_unimport_pd`, which leaves it to its owner.
    Imported,
}

// SAFETY: verbs on a PD may be called from any thread; the PD itself is not
// mutated by this crate after creation.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // Every QP of the PD is gone (each held this Arc): the retired
        // address handles are destroyed before the PD.
        self.ud.close();
        match self.kind {
            // SAFETY: the PD (or parent domain, which holds its PD and TD
            // until after this) is deallocated once, after every object
            // created in it (they hold this Arc) and after the retired
            // address handles (destroyed just now). A failure cannot be
            // handled here.
            PdKind::Allocated | PdKind::Parent { .. } => unsafe {
                sys::ibv_dealloc_pd(self.raw.as_ptr());
            },
            // SAFETY: imported once by `ibv_import_pd`, released once after
            // every object created in it and the retired address handles;
            // the kernel object stays its
            // owner's.
            PdKind::Imported => unsafe { sys::ibv_unimport_pd(self.raw.as_ptr()) },
        }
    }
}

impl ProtectionDomain {
    /// Allocates a protection domain on `ctx`.
    pub fn new(ctx: &Context) -> Result<ProtectionDomain> {
        // SAFETY: `ctx` is an open context.
        let raw = unsafe { sys::ibv_alloc_pd(ctx.as_raw()) };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("ibv_alloc_pd"))?;
        // SAFETY: allocated just now by ibv_alloc_pd, owned by the value.
        Ok(unsafe { ProtectionDomain::from_raw(ctx, raw, PdKind::Allocated) })
    }

    /// Wraps a PD of `ctx` released as `kind` says.
    ///
    /// # Safety
    /// `raw` is a live PD of `ctx`, made as `kind` says, and released by
    /// nothing else.
    pub(crate) unsafe fn from_raw(
        ctx: &Context,
        raw: NonNull<sys::ibv_pd>,
        kind: PdKind,
    ) -> ProtectionDomain {
        ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                raw,
                ud: UdRegistry::default(),
                kind,
            }),
        }
    }

    /// Whether this is a parent domain ([`ProtectionDomain::parent_domain`]).
    pub fn is_parent_domain(&self) -> bool {
        matches!(self.inner.kind, PdKind::Parent { .. })
    }

    /// Whether this is another process's PD, imported
    /// ([`ProtectionDomain::import`]): dropping it unimports it.
    pub fn is_imported(&self) -> bool {
        matches!(self.inner.kind, PdKind::Imported)
    }

    /// The context the domain belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw PD, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.inner.raw.as_ptr()
    }
}

/// Refuses objects of two different contexts used together: each context is
/// its own provider instance (its own structures, its own kernel handle
/// table), so a provider handed another context's object would run on
/// memory it does not own. The contexts are compared by their `ibv_context`
/// pointers: two opens of one device are two contexts too.
#[inline]
pub(crate) fn same_context(
    verb: &'static str,
    a_what: &str,
    a: &Context,
    b_what: &str,
    b: &Context,
) -> Result<()> {
    if a.as_raw() == b.as_raw() {
        return Ok(());
    }
    Err(other_context(verb, a_what, a, b_what, b))
}

#[cold]
#[inline(never)]
fn other_context(
    verb: &'static str,
    a_what: &str,
    a: &Context,
    b_what: &str,
    b: &Context,
) -> Error {
    Error::invalid(
        verb,
        format!(
            "the {a_what} (of {}) and the {b_what} (of {}) belong to different contexts: objects used together must come from one opened device",
            a.name(),
            b.name()
        ),
    )
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.inner.ctx.name())
            .field("retired_address_handles", &self.inner.ud.retired())
            .finish()
    }
}
