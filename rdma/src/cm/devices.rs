//! The verbs contexts of librdmacm's devices (`rdma_get_devices`).

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use rdmacm_sys as cm;

use crate::{Context, Error, Result};

/// librdmacm's list of device contexts, with the reference on each device
/// that `rdma_get_devices` takes; `rdma_free_devices` on drop.
struct List {
    raw: NonNull<*mut cm::ibv_context>,
    len: usize,
}

// SAFETY: the list is an array librdmacm allocated for this value alone,
// read only, and freed once (on drop); librdmacm's calls on it take its own
// lock.
unsafe impl Send for List {}
// SAFETY: as for Send: nothing writes the array while it is shared.
unsafe impl Sync for List {}

impl Drop for List {
    fn drop(&mut self) {
        // SAFETY: the array rdma_get_devices returned, freed only here.
        unsafe { cm::rdma_free_devices(self.raw.as_ptr()) };
    }
}

/// The verbs contexts librdmacm has opened, one per RDMA device
/// (`rdma_get_devices`): the contexts its ids use, so that objects made from
/// one of them (a PD, CQs, MRs) can serve a [`CmId`](super::CmId) of that
/// device.
///
/// Each [`Context`] it gives keeps the list, and with it librdmacm's
/// reference on every device of it, alive: librdmacm closes a device's
/// context only when no reference is left.
#[derive(Clone)]
pub struct CmDevices {
    list: Arc<List>,
}

impl CmDevices {
    /// librdmacm's devices now. Fails (`ENODEV`) when there is no RDMA
    /// device, or librdmacm cannot reach the kernel's CM.
    pub fn new() -> Result<CmDevices> {
        let mut n: i32 = 0;
        // SAFETY: `n` is writable; the array returned is ours to free.
        let raw = unsafe { cm::rdma_get_devices(&mut n) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last("rdma_get_devices")
                .with_hint("no RDMA device, or the kernel's CM is not loaded (modprobe rdma_ucm)")
        })?;
        let len = usize::try_from(n).unwrap_or(0);
        Ok(CmDevices {
            list: Arc::new(List { raw, len }),
        })
    }

    /// The number of devices.
    pub fn len(&self) -> usize {
        self.list.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.list.len == 0
    }

    /// The context of each device, in librdmacm's order.
    pub fn iter(&self) -> impl Iterator<Item = Context> + '_ {
        (0..self.list.len).filter_map(move |i| self.get(i))
    }

    /// The context of the device named `name` (`rxe0`).
    pub fn find(&self, name: &str) -> Option<Context> {
        self.iter().find(|c| c.name() == name)
    }

    fn get(&self, i: usize) -> Option<Context> {
        // SAFETY: i < len, the count rdma_get_devices wrote for its array.
        let raw = NonNull::new(unsafe { *self.list.raw.as_ptr().add(i) })?;
        let keep: Arc<dyn Any + Send + Sync> = self.list.clone();
        // SAFETY: `keep` holds the list, and the list librdmacm's reference
        // on the device of `raw` (taken by rdma_get_devices, dropped by
        // rdma_free_devices); librdmacm closes a context only when no
        // reference on its device is left.
        Some(unsafe { Context::from_rdmacm(raw, keep) })
    }
}

impl std::fmt::Debug for CmDevices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|c| c.name().to_owned()))
            .finish()
    }
}
