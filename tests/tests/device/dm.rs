//! Device memory on the soft devices: neither has it; allocation is the
//! typed "not supported" error and leaves nothing behind, and bad sizes
//! are refused before the provider sees them.

use rdma::DeviceMemory;
use rdma_tests::{Outcome, TestEnv, TestResult};

use crate::fixtures::{open, refused};
use crate::unsupported::{no_leak, not_supported, said};

pub fn device_memory_is_not_supported(env: &TestEnv) -> TestResult {
    let errno = no_leak(env, || {
        let ctx = open(env)?;
        refused(
            DeviceMemory::new(&ctx, 0, 0),
            "ibv_alloc_dm",
            libc::EINVAL,
            "0 bytes",
        )?;
        refused(
            DeviceMemory::new(&ctx, 64, 64),
            "ibv_alloc_dm",
            libc::EINVAL,
            "alignment",
        )?;
        let errno = not_supported(env, DeviceMemory::new(&ctx, 4096, 0), "ibv_alloc_dm")?;
        let attr = ctx.query_device()?;
        rdma_tests::check!(
            attr.as_raw().max_dm_size == 0,
            "{} reports {} bytes of device memory",
            env.device,
            attr.as_raw().max_dm_size
        );
        Ok(errno)
    })?;
    Ok(Outcome::Skipped(format!(
        "no device memory (max_dm_size 0): {} (typed error checked, no kernel object left)",
        said(env, "ibv_alloc_dm", errno)
    )))
}

/// `DeviceMemory::export_dmabuf_fd` (rdma-core v65 and newer): the soft
/// devices have no device memory to export; where a device has some, the
/// export is a descriptor or the typed "not supported" error.
#[cfg(has_ibv_dm_export_dmabuf_fd)]
pub fn device_memory_exports_as_dmabuf_or_is_refused_typed(env: &TestEnv) -> TestResult {
    let skipped = no_leak(env, || {
        let ctx = open(env)?;
        let dm = match DeviceMemory::new(&ctx, 4096, 0) {
            Ok(dm) => dm,
            Err(e) => {
                let errno = not_supported(env, Err::<(), _>(e), "ibv_alloc_dm")?;
                return Ok(Some(format!(
                    "no device memory to export: {} (typed error checked, no kernel object left)",
                    said(env, "ibv_alloc_dm", errno)
                )));
            }
        };
        match dm.export_dmabuf_fd() {
            Ok(fd) => {
                use std::os::fd::AsRawFd;
                rdma_tests::check!(fd.as_raw_fd() >= 0);
                Ok(None)
            }
            Err(e) => {
                let errno = not_supported(env, Err::<(), _>(e), "ibv_dm_export_dmabuf_fd")?;
                Ok(Some(said(env, "ibv_dm_export_dmabuf_fd", errno)))
            }
        }
    })?;
    Ok(skipped.map_or(Outcome::Passed, Outcome::Skipped))
}

#[cfg(not(has_ibv_dm_export_dmabuf_fd))]
pub fn device_memory_exports_as_dmabuf_or_is_refused_typed(_env: &TestEnv) -> TestResult {
    Ok(Outcome::Skipped(crate::unsupported::headers_lack(
        "ibv_dm_export_dmabuf_fd",
        65,
    )))
}

rdma_tests::tests!(
    "dm":
    device_memory_is_not_supported,
    device_memory_exports_as_dmabuf_or_is_refused_typed,
);
