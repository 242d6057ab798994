//! Sharing verbs objects between processes: a process hands another the
//! command file of its context (a duplicate, over a Unix socket with
//! `SCM_RIGHTS`) and the handles of its objects; the other imports the
//! context ([`Context::import`]) and, in it, the PD
//! ([`ProtectionDomain::import`]), memory regions ([`ImportedMr`]) and
//! device memory ([`DeviceMemory::import`]).
//!
//! The safety model: an imported object is not owned. Both processes name
//! one kernel object; dropping the imported value unimports it
//! (`ibv_unimport_pd`, `ibv_unimport_mr`, `ibv_unimport_dm`), which frees
//! this process's handle and leaves the object to its owner. An imported
//! region's memory lives in the owner's address space, so it is never read
//! or written here: an [`ImportedMr`] gives its keys and bounds, for work
//! requests that peers (or the owner) carry out. If the owner destroys an
//! object first, later verbs on the imported one fail in the kernel
//! (`EINVAL`: the handle no longer resolves); this process's memory is
//! not touched.
//!
//! Neither soft device imports: libibverbs answers `ibv_import_device`
//! with `EOPNOTSUPP` where the provider has no `import_context` (rxe and
//! siw), and their contexts have no `import_pd`/`import_mr`/`import_dm`
//! (`EOPNOTSUPP`). mlx5 has all four.

use std::fmt;
use std::os::fd::{BorrowedFd, IntoRawFd, OwnedFd};
use std::ptr::NonNull;

use crate::pd::PdKind;
use crate::sys;
use crate::{Context, DeviceMemory, Error, ProtectionDomain, RemoteMemory, Result};

impl Context {
    /// The context's command file (`cmd_fd`), which another process
    /// imports the context by: hand it a duplicate
    /// ([`BorrowedFd::try_clone_to_owned`], then `SCM_RIGHTS`).
    pub fn command_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: a live context's `cmd_fd` is open until the context is
        // closed, which the borrow of `self` outlasts.
        unsafe { BorrowedFd::borrow_raw((*self.as_raw()).cmd_fd) }
    }

    /// Imports the context whose command file `cmd_fd` is a duplicate of
    /// (`ibv_import_device`). The context takes the file: closing the
    /// context closes it. On failure the file is closed, except where the
    /// provider itself refused it (it may have closed it already): then it
    /// is left open rather than risk closing another file that took its
    /// number.
    pub fn import(cmd_fd: OwnedFd) -> Result<Context> {
        const VERB: &str = "ibv_import_device";
        let fd = cmd_fd.into_raw_fd();
        // SAFETY: `fd` is an open file this call owns; ibv_import_device
        // checks it is a verbs character device before using it.
        let raw = unsafe { sys::ibv_import_device(fd) };
        match NonNull::new(raw) {
            // SAFETY: a context made just now, which nothing else closes.
            Some(raw) => Ok(unsafe { Context::from_raw(raw) }),
            None => {
                let e = Error::last(VERB);
                // libibverbs' own refusals, made before a provider saw the
                // file: not a character device (EINVAL), no device of that
                // number (ENODEV), no import in the provider (EOPNOTSUPP).
                if matches!(e.errno(), libc::EINVAL | libc::ENODEV | libc::EOPNOTSUPP) {
                    // SAFETY: still this call's file: nothing took it.
                    unsafe { libc::close(fd) };
                }
                Err(import_error(e))
            }
        }
    }
}

#[cold]
fn import_error(e: Error) -> Error {
    match e.errno() {
        libc::EOPNOTSUPP => e.with_hint(
            "not supported by this device: its provider has no import_context (EOPNOTSUPP)",
        ),
        libc::EINVAL => e.with_hint("the file is not an RDMA device's command file"),
        libc::ENODEV => e.with_hint("no RDMA device of this command file is present"),
        _ => e,
    }
}

impl ProtectionDomain {
    /// The kernel's handle of the PD, which a process sharing the context
    /// imports it by.
    pub fn handle(&self) -> u32 {
        // SAFETY: a live PD; the handle is plain data set at creation.
        unsafe { (*self.as_raw()).handle }
    }

    /// Imports the PD of handle `handle` in `ctx` (`ibv_import_pd`), a PD
    /// another process made in the context `ctx` imports. Dropping it
    /// unimports it (`ibv_unimport_pd`); the PD stays its owner's.
    pub fn import(ctx: &Context, handle: u32) -> Result<ProtectionDomain> {
        // SAFETY: a live context; the kernel resolves `handle` in the
        // context's own object table and refuses one that names no PD.
        let raw = unsafe { sys::ibv_import_pd(ctx.as_raw(), handle) };
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::last("ibv_import_pd").unsupported_on(ctx.name(), "PD import"))?;
        // SAFETY: imported just now in `ctx`, released only by this value.
        Ok(unsafe { ProtectionDomain::from_raw(ctx, raw, PdKind::Imported) })
    }
}

impl DeviceMemory {
    /// Imports the device memory of handle `handle` in `ctx`
    /// (`ibv_import_dm`). Dropping it unimports it (`ibv_unimport_dm`).
    ///
    /// # Safety
    /// `len` must not exceed the memory's true length: copies are checked
    /// against it, and `ibv_dm` does not carry its length (the owner
    /// tells it, with the handle).
    pub unsafe fn import(ctx: &Context, handle: u32, len: usize) -> Result<DeviceMemory> {
        // SAFETY: a live context; the kernel resolves `handle` in the
        // context's object table and refuses one that names no DM.
        let raw = unsafe { sys::ibv_import_dm(ctx.as_raw(), handle) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last("ibv_import_dm").unsupported_on(ctx.name(), "device memory import")
        })?;
        // SAFETY: imported just now, at least `len` bytes (the caller's
        // promise), released only by this value.
        Ok(unsafe { DeviceMemory::from_raw(ctx, raw, len, true) })
    }
}

/// A memory region another process registered, imported
/// ([`ImportedMr::import`]). Its memory is in the owner's address space:
/// this value gives the keys and bounds only. Dropping it unimports it
/// (`ibv_unimport_mr`); the region stays registered by its owner.
pub struct ImportedMr {
    raw: NonNull<sys::ibv_mr>,
    _pd: ProtectionDomain,
}

// SAFETY: the `ibv_mr` is written only by the import; this value only
// reads plain fields of it.
unsafe impl Send for ImportedMr {}
// SAFETY: as above.
unsafe impl Sync for ImportedMr {}

impl Drop for ImportedMr {
    fn drop(&mut self) {
        // SAFETY: imported once, unimported once, before its PD (held here).
        unsafe { sys::ibv_unimport_mr(self.raw.as_ptr()) };
    }
}

impl ImportedMr {
    /// Imports the region of handle `handle` in `pd` (`ibv_import_mr`);
    /// `pd` is the region's PD, imported too ([`ProtectionDomain::import`]).
    pub fn import(pd: &ProtectionDomain, handle: u32) -> Result<ImportedMr> {
        // SAFETY: a live PD; the kernel resolves `handle` in the context's
        // object table and refuses one that names no MR.
        let raw = unsafe { sys::ibv_import_mr(pd.as_raw(), handle) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last("ibv_import_mr").unsupported_on(pd.context().name(), "MR import")
        })?;
        Ok(ImportedMr {
            raw,
            _pd: pd.clone(),
        })
    }

    fn mr(&self) -> &sys::ibv_mr {
        // SAFETY: a live `ibv_mr`, written only by the import.
        unsafe { self.raw.as_ref() }
    }

    /// The region's start, in the owner's address space.
    pub fn addr(&self) -> u64 {
        self.mr().addr as u64
    }

    /// The region's length.
    pub fn len(&self) -> usize {
        self.mr().length
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.mr().lkey
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.mr().rkey
    }

    /// The whole region as a peer's RDMA target.
    pub fn remote(&self) -> RemoteMemory {
        RemoteMemory {
            addr: self.addr(),
            len: self.len() as u64,
            rkey: self.rkey(),
        }
    }

    /// The raw region, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.raw.as_ptr()
    }
}

impl fmt::Debug for ImportedMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportedMr")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .finish()
    }
}
