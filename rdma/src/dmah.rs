//! DMA handles (`ibv_dmah`, rdma-core v65 and newer): how the device's DMA
//! to a memory region is steered, by PCIe TLP processing hints (the CPU
//! that will read the data, a processing hint, volatile or persistent
//! memory). A region registered with one
//! ([`MrBuilder::dma_handle`](crate::MrBuilder::dma_handle)) carries its
//! hints.
//!
//! Neither soft device has them: rxe's and siw's providers have no
//! `alloc_dmah`, so libibverbs answers `EOPNOTSUPP` ("not supported by
//! rxe0", [`Error::is_unsupported`]). mlx5 has them.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::sys;
use crate::{Context, Error, Result};

/// Whether the memory a DMA handle steers to is volatile or persistent
/// (`ibv_tph_mem_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TphMemType {
    /// Volatile memory (`IBV_TPH_MEM_TYPE_VM`).
    Volatile,
    /// Persistent memory (`IBV_TPH_MEM_TYPE_PM`).
    Persistent,
}

/// A DMA handle (`ibv_dmah`). Cloning shares it; it is freed
/// (`ibv_dealloc_dmah`) with the last clone. Drop the regions registered
/// with it first: the kernel refuses to free a handle in use, which then
/// stays until the context closes.
#[derive(Clone)]
pub struct DmaHandle {
    inner: Arc<DmahInner>,
}

struct DmahInner {
    ctx: Context,
    raw: NonNull<sys::ibv_dmah>,
    attr: DmaHandleBuilder,
}

// SAFETY: the handle is a kernel object this crate never writes after its
// allocation; allocation and release are commands on the uverbs file.
unsafe impl Send for DmahInner {}
// SAFETY: as above.
unsafe impl Sync for DmahInner {}

impl Drop for DmahInner {
    fn drop(&mut self) {
        // SAFETY: freed once, by the last clone. A failure (a region still
        // registered with it) cannot be handled here; the kernel frees the
        // handle with the context.
        unsafe { sys::ibv_dealloc_dmah(self.raw.as_ptr()) };
    }
}

/// The hints of a new [`DmaHandle`] (`ibv_dmah_init_attr`); a hint not set
/// is left out of the attribute's mask. Made by [`DmaHandle::builder`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use = "a builder does nothing until `build`"]
pub struct DmaHandleBuilder {
    cpu_id: Option<u32>,
    ph: Option<u8>,
    mem_type: Option<TphMemType>,
}

impl DmaHandleBuilder {
    /// The CPU that will read the data (its steering tag).
    pub fn cpu_id(mut self, cpu: u32) -> Self {
        self.cpu_id = Some(cpu);
        self
    }

    /// The TLP processing hint (PCIe's 2-bit PH: 0 bidirectional, 1
    /// requester, 2 target, 3 target with priority); above 3 is refused
    /// (`EINVAL`) by [`build`](Self::build).
    pub fn processing_hint(mut self, ph: u8) -> Self {
        self.ph = Some(ph);
        self
    }

    /// Whether the memory is volatile or persistent.
    pub fn mem_type(mut self, mem_type: TphMemType) -> Self {
        self.mem_type = Some(mem_type);
        self
    }

    /// Allocates the handle on `ctx` (`ibv_alloc_dmah`). A builder with no
    /// hint, or a processing hint above 3, is refused (`EINVAL`) before the
    /// provider sees it; [`Error::is_unsupported`] where the provider has
    /// no DMA handles (rxe, siw).
    pub fn build(self, ctx: &Context) -> Result<DmaHandle> {
        const VERB: &str = "ibv_alloc_dmah";
        let mut attr = self.raw()?;
        // SAFETY: an open context; `attr` is complete for its mask and read
        // during the call only.
        let raw = unsafe { sys::ibv_alloc_dmah(ctx.as_raw(), &mut attr) };
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::last(VERB).unsupported_on(ctx.name(), "DMA handles"))?;
        Ok(DmaHandle {
            inner: Arc::new(DmahInner {
                ctx: ctx.clone(),
                raw,
                attr: self,
            }),
        })
    }

    /// The C attribute, with the mask of the hints set.
    fn raw(&self) -> Result<sys::ibv_dmah_init_attr> {
        const VERB: &str = "ibv_alloc_dmah";
        let mut attr = sys::ibv_dmah_init_attr {
            comp_mask: 0,
            cpu_id: 0,
            ph: 0,
            tph_mem_type: 0,
        };
        if let Some(cpu) = self.cpu_id {
            attr.comp_mask |= sys::IBV_DMAH_INIT_ATTR_MASK_CPU_ID;
            attr.cpu_id = cpu;
        }
        if let Some(ph) = self.ph {
            if ph > 3 {
                return Err(Error::invalid(
                    VERB,
                    format!("processing hint {ph}: PCIe's hint has 2 bits (0 to 3)"),
                ));
            }
            attr.comp_mask |= sys::IBV_DMAH_INIT_ATTR_MASK_PH;
            attr.ph = ph;
        }
        if let Some(m) = self.mem_type {
            attr.comp_mask |= sys::IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE;
            attr.tph_mem_type = match m {
                TphMemType::Volatile => sys::IBV_TPH_MEM_TYPE_VM,
                TphMemType::Persistent => sys::IBV_TPH_MEM_TYPE_PM,
            } as u8;
        }
        if attr.comp_mask == 0 {
            return Err(Error::invalid(
                VERB,
                "a DMA handle without a hint (set a CPU, a processing hint or a memory type)",
            ));
        }
        Ok(attr)
    }
}

impl DmaHandle {
    /// The hints of a new handle.
    ///
    /// ```no_run
    /// # fn f(ctx: &rdma::Context, pd: &rdma::ProtectionDomain) -> rdma::Result<()> {
    /// use rdma::{AccessFlags, DmaHandle, MemoryRegion};
    /// let dmah = DmaHandle::builder().cpu_id(3).processing_hint(0).build(ctx)?;
    /// let mr = MemoryRegion::builder(pd, 4096)
    ///     .access(AccessFlags::LOCAL_WRITE)
    ///     .dma_handle(&dmah)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder() -> DmaHandleBuilder {
        DmaHandleBuilder::default()
    }

    /// The context the handle belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The hints it was allocated with.
    pub fn hints(&self) -> DmaHandleBuilder {
        self.inner.attr
    }

    /// The raw handle, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_dmah {
        self.inner.raw.as_ptr()
    }
}

impl fmt::Debug for DmaHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaHandle")
            .field("device", &self.inner.ctx.name())
            .field("hints", &self.inner.attr)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_hint_sets_its_mask_bit_and_none_is_refused() {
        let e = DmaHandle::builder().raw().unwrap_err();
        assert_eq!((e.errno(), e.verb()), (libc::EINVAL, "ibv_alloc_dmah"));
        let a = DmaHandle::builder().cpu_id(7).raw().unwrap();
        assert_eq!(
            (a.comp_mask, a.cpu_id),
            (sys::IBV_DMAH_INIT_ATTR_MASK_CPU_ID, 7)
        );
        let a = DmaHandle::builder()
            .processing_hint(2)
            .mem_type(TphMemType::Persistent)
            .raw()
            .unwrap();
        assert_eq!(
            a.comp_mask,
            sys::IBV_DMAH_INIT_ATTR_MASK_PH | sys::IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE
        );
        assert_eq!(
            (a.ph, u32::from(a.tph_mem_type)),
            (2, sys::IBV_TPH_MEM_TYPE_PM)
        );
        let e = DmaHandle::builder().processing_hint(4).raw().unwrap_err();
        assert!(e.hint().unwrap().contains("2 bits"), "{e}");
    }
}
