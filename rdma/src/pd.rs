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
        // SAFETY: the PD is deallocated once, after every object created in
        // it (they hold this Arc, and the retired address handles were
        // destroyed just now). A failure cannot be handled here.
        unsafe { sys::ibv_dealloc_pd(self.raw.as_ptr()) };
    }
}

impl ProtectionDomain {
    /// Allocates a protection domain on `ctx`.
    pub fn new(ctx: &Context) -> Result<ProtectionDomain> {
        // SAFETY: `ctx` is an open context.
        let raw = unsafe { sys::ibv_alloc_pd(ctx.as_raw()) };
        let raw = NonNull::new(raw).ok_or_else(|| Error::last("ibv_alloc_pd"))?;
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                raw,
                ud: UdRegistry::default(),
            }),
        })
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
