//! Registered memory across `fork(2)`: `ibv_fork_init` and its status.

use crate::sys;
use crate::{Error, Result};

/// What [`is_fork_initialized`] reports: how registered memory behaves in
/// a child of `fork(2)` (`ibv_fork_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForkStatus {
    /// Fork protection is off and the kernel does not copy registered
    /// pages on fork: after a fork, a parent's write to such a page may
    /// move it off the page the device accesses. Call [`fork_init`]
    /// before registering memory, or set `RDMAV_FORK_SAFE`.
    Disabled,
    /// [`fork_init`] (or `RDMAV_FORK_SAFE`) is in effect: registered
    /// memory is `MADV_DONTFORK`, absent from children.
    Enabled,
    /// The kernel copies pinned pages into the child on fork (Linux 5.13
    /// and later): fork is safe with no protection, and [`fork_init`]
    /// changes nothing.
    Unneeded,
    /// A status this crate does not know.
    Other(u32),
}

/// Prepares the process to `fork(2)` while it has memory registered
/// (`ibv_fork_init`): on kernels that do not copy pinned pages on fork,
/// later registrations mark their pages `MADV_DONTFORK`, so that a parent's
/// write cannot move them off the pages the device accesses (the child then
/// has no mapping there; see "Fork" in the crate docs). Call it
/// before the first registration (before opening a device is simplest);
/// regions registered earlier are not protected. On kernels that copy
/// pinned pages (Linux 5.13 and later, [`ForkStatus::Unneeded`]) it does
/// nothing and succeeds. Setting `RDMAV_FORK_SAFE` in the environment has
/// the same effect at the first device open.
///
/// It fails with the errno libibverbs reports (`ENOMEM` when it cannot
/// allocate its page tracking).
pub fn fork_init() -> Result<()> {
    // SAFETY: no arguments and no precondition: called late, it only leaves
    // the regions registered before it unprotected (ibv_fork_init(3)).
    let rc = unsafe { sys::ibv_fork_init() };
    if rc != 0 {
        return Err(Error::from_rc("ibv_fork_init", rc));
    }
    Ok(())
}

/// Whether fork protection is in effect, or unneeded on this kernel
/// (`ibv_is_fork_initialized`).
pub fn is_fork_initialized() -> ForkStatus {
    // SAFETY: no arguments; it reads libibverbs' state and the kernel's
    // copy-on-fork capability.
    match unsafe { sys::ibv_is_fork_initialized() } {
        sys::IBV_FORK_DISABLED => ForkStatus::Disabled,
        sys::IBV_FORK_ENABLED => ForkStatus::Enabled,
        sys::IBV_FORK_UNNEEDED => ForkStatus::Unneeded,
        other => ForkStatus::Other(other),
    }
}
