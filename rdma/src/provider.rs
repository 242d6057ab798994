//! What this crate must know of the provider and the rdma-core release
//! under it: the bugs of a provider's library that a release fixed, asked
//! of the libibverbs loaded at run time (whose providers are of its own
//! release).

use std::sync::OnceLock;

use crate::sys;
use crate::Context;

/// The first rdma-core release whose rxe `ibv_next_poll` is right on an
/// empty queue: v55 stopped it from moving the consumer index past the
/// producer (completions lost), v61 from unlocking the CQ that the
/// following `ibv_end_poll` unlocks again.
const RXE_NEXT_POLL_FIXED: u32 = 61;

/// The vendor ID of soft-RoCE devices.
const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

/// The first rdma-core release whose rxe sums an SGE list's lengths in
/// `ibv_wr_set_sge_list` (commit 406cd2ad0, "rxe: Fix dma.length
/// computation in wr_set_sge_list").
const RXE_SGE_LIST_FIXED: u32 = 64;

/// The first rdma-core release whose rxe sums the buffers of
/// `ibv_wr_set_inline_data_list` (commit 1e8ed0aff, "providers/rxe: Fix
/// missing length accumulation in wr_set_inline_data_list"): before it the
/// request's length stays 0 and only each buffer alone is bounded by the
/// inline size, so that a list longer than it overruns the queue entry.
const RXE_INLINE_LIST_FIXED: u32 = 64;

/// rdma-core before v61: rxe's `next_poll` on an empty queue unlocks the CQ
/// (and before v55 also publishes a consumer index past the last
/// completion), and the `end_poll` that must follow unlocks it again;
/// completions are lost, or another thread's poll races this one. Decided
/// by the libibverbs loaded at run time (whose providers are of its own
/// release); an unknown release counts as broken.
pub(crate) fn rxe_next_poll_is_broken(ctx: &Context) -> bool {
    rxe_before(ctx, RXE_NEXT_POLL_FIXED)
}

/// rdma-core before v64: rxe's `ibv_wr_set_sge_list` counts a list's
/// length as its SGE count times the first SGE's, so that the lists of a
/// batch must be of equal lengths (see [`RXE_SGE_LIST_FIXED`]); an unknown
/// release counts as broken.
pub(crate) fn rxe_sge_list_is_broken(ctx: &Context) -> bool {
    rxe_before(ctx, RXE_SGE_LIST_FIXED)
}

/// rdma-core before v64: rxe's `ibv_wr_set_inline_data_list` sends none of
/// the list's bytes (see [`RXE_INLINE_LIST_FIXED`]); an unknown release
/// counts as broken.
pub(crate) fn rxe_inline_list_is_broken(ctx: &Context) -> bool {
    rxe_before(ctx, RXE_INLINE_LIST_FIXED)
}

/// Whether `ctx` is an rxe device (or one that cannot be told from rxe)
/// served by an rdma-core release before `fixed` (or one that cannot be
/// told): where a bug of rxe's library, fixed in `fixed`, must be avoided.
fn rxe_before(ctx: &Context, fixed: u32) -> bool {
    let is_rxe = ctx
        .query_device()
        .map(|a| a.vendor_id() == RXE_VENDOR_ID)
        .unwrap_or(true);
    is_rxe && release_before(loaded_rdma_core_release(), fixed)
}

/// Whether rdma-core `release` (`None`: unknown, taken as old) comes
/// before `fixed`.
fn release_before(release: Option<u32>, fixed: u32) -> bool {
    release.is_none_or(|r| r < fixed)
}

/// The rdma-core release of the libibverbs this process loaded, from its
/// file name (`libibverbs.so.1.14.44.0`: soname 1, ABI 14, release 44);
/// `None` where it cannot be told (linked statically, renamed).
fn loaded_rdma_core_release() -> Option<u32> {
    static RELEASE: OnceLock<Option<u32>> = OnceLock::new();
    *RELEASE.get_or_init(|| {
        // The object that defines a libibverbs function is libibverbs, as
        // the dynamic linker resolved it for this process.
        let f: unsafe extern "C" fn(*mut i32) -> *mut *mut sys::ibv_device =
            sys::ibv_get_device_list;
        // SAFETY: plain data, filled by dladdr.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the address; `info` is writable.
        if unsafe { libc::dladdr(f as *const libc::c_void, &mut info) } == 0
            || info.dli_fname.is_null()
        {
            return None;
        }
        // SAFETY: dladdr set dli_fname to a NUL-terminated path that stays
        // valid while the object is loaded (libibverbs is never unloaded).
        let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
        let path = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes()),
        );
        // dli_fname is the name it was opened by (the soname link,
        // libibverbs.so.1): the file it points to carries the release.
        let real = std::fs::canonicalize(path).ok()?;
        release_from_file_name(real.file_name()?.to_str()?)
    })
}

/// The release in a libibverbs file name, `libibverbs.so.SONAME.ABI.RELEASE[.PATCH]`.
fn release_from_file_name(name: &str) -> Option<u32> {
    let mut parts = name.strip_prefix("libibverbs.so.")?.split('.');
    let (_soname, _abi) = (parts.next()?, parts.next()?);
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_is_read_from_the_libibverbs_file_name() {
        assert_eq!(release_from_file_name("libibverbs.so.1.14.44.0"), Some(44));
        assert_eq!(release_from_file_name("libibverbs.so.1.15.61.0"), Some(61));
        assert_eq!(release_from_file_name("libibverbs.so.1.18.65"), Some(65));
        assert_eq!(release_from_file_name("libibverbs.so.1"), None);
        assert_eq!(release_from_file_name("libibverbs.so.1.14"), None);
        assert_eq!(release_from_file_name("libibverbs.so"), None);
        assert_eq!(release_from_file_name("libibverbs.so.1.14.x.0"), None);
        assert_eq!(release_from_file_name("librdmacm.so.1.3.44.0"), None);
        assert_eq!(release_from_file_name("librxe-rdmav34.so"), None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls dladdr")]
    fn loaded_release_is_that_of_the_mapped_libibverbs() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mapped = maps
            .lines()
            .filter_map(|l| l.rsplit('/').next())
            .find_map(release_from_file_name);
        assert!(mapped.is_some(), "no libibverbs.so.1.A.R.P mapped");
        assert_eq!(loaded_rdma_core_release(), mapped);
    }

    #[test]
    fn rxe_next_poll_is_avoided_before_v61_and_when_unknown() {
        assert!(release_before(Some(44), RXE_NEXT_POLL_FIXED));
        assert!(release_before(Some(55), RXE_NEXT_POLL_FIXED));
        assert!(release_before(Some(60), RXE_NEXT_POLL_FIXED));
        assert!(!release_before(Some(61), RXE_NEXT_POLL_FIXED));
        assert!(!release_before(Some(65), RXE_NEXT_POLL_FIXED));
        assert!(release_before(None, RXE_NEXT_POLL_FIXED));
    }
}
