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
use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::ptr::NonNull;

use crate::mr::RawMr;
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
    /// context closes it.
    ///
    /// A file that is not a character device (`EINVAL`) or not the
    /// command file of a verbs device present here (`ENODEV`) is refused
    /// before libibverbs sees it, and closed. Once libibverbs has the file,
    /// a failure leaves it open: libibverbs does not say whether the
    /// provider closed it already (mlx5's failed import does), and closing
    /// it again could close another file that took its number. rxe and
    /// siw have no import (`EOPNOTSUPP`), so there the file stays open.
    pub fn import(cmd_fd: OwnedFd) -> Result<Context> {
        const VERB: &str = "ibv_import_device";
        check_command_file(VERB, &cmd_fd)?;
        let fd = cmd_fd.into_raw_fd();
        // SAFETY: `fd` is an open verbs command file that this call hands
        // to libibverbs (which owns it from now on).
        let raw = unsafe { sys::ibv_import_device(fd) };
        match NonNull::new(raw) {
            // SAFETY: a context made just now, which nothing else closes.
            Some(raw) => Ok(unsafe { Context::from_raw(raw) }),
            None => Err(import_error(Error::last(VERB))),
        }
    }
}

/// Refuses a file that is not the command file of a verbs device present
/// here, as libibverbs would, but before it owns the file.
fn check_command_file(verb: &'static str, fd: &OwnedFd) -> Result<()> {
    // SAFETY: plain data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open file; `st` is writable.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Error::last(verb));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return Err(Error::invalid(
            verb,
            "the file is not an RDMA device's command file (not a character device)",
        ));
    }
    let want = format!("{}:{}", libc::major(st.st_rdev), libc::minor(st.st_rdev));
    let known = std::fs::read_dir("/sys/class/infiniband_verbs")
        .into_iter()
        .flatten()
        .flatten()
        .any(|d| std::fs::read_to_string(d.path().join("dev")).is_ok_and(|s| s.trim() == want));
    if !known {
        return Err(Error::new(verb, libc::ENODEV).with_hint(format!(
            "no RDMA device's command file is character device {want}"
        )));
    }
    Ok(())
}

#[cold]
fn import_error(e: Error) -> Error {
    let why = match e.errno() {
        libc::EOPNOTSUPP => "not supported by this device: its provider has no import_context (EOPNOTSUPP); the file stays open",
        _ => "the file stays open: libibverbs does not tell whether the provider closed it",
    };
    e.with_hint(why)
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
    raw: RawMr,
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
            // SAFETY: live until `Drop` unimports it; its fields are written
            // only by the import.
            raw: unsafe { RawMr::new(raw) },
            _pd: pd.clone(),
        })
    }

    /// The region's start, in the owner's address space.
    pub fn addr(&self) -> u64 {
        self.raw.addr() as u64
    }

    /// The region's length.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey()
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.raw.rkey()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether any descriptor of this process is open on `path`.
    fn open_on(path: &std::path::Path) -> bool {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .any(|t| t == path)
    }

    #[test]
    #[cfg_attr(miri, ignore = "opens files and calls fstat")]
    fn files_that_are_no_command_file_are_refused_and_closed() {
        let path = std::env::temp_dir().join(format!("rdma-import-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let path = path.canonicalize().unwrap();
        assert!(open_on(&path));
        let e = Context::import(f.into()).err().unwrap();
        assert_eq!((e.verb(), e.errno()), ("ibv_import_device", libc::EINVAL));
        assert!(e.hint().unwrap().contains("not a character device"), "{e}");
        assert!(!open_on(&path), "the refused file was left open");
        std::fs::remove_file(&path).unwrap();
        // A character device that is no verbs device.
        let f = std::fs::File::open("/dev/null").unwrap();
        let e = Context::import(f.into()).err().unwrap();
        assert_eq!(e.errno(), libc::ENODEV, "{e}");
    }
}
