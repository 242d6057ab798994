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

rdma_tests::tests!("dm": device_memory_is_not_supported);
