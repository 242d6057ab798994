//! DMA handles (rdma-core v65 and newer) and the regions registered with
//! one (`MrBuilder::dma_handle`, through `ibv_reg_mr_ex`). Neither soft
//! device has them: bad hints are refused before the provider, and the
//! allocation is the typed "not supported" error with nothing left
//! behind. Where a provider has them, a region is registered with one and
//! a handle of another context is refused.

use rdma_tests::{Outcome, TestEnv, TestResult};

rdma_tests::tests!("dmah": dma_handles_steer_a_region_or_are_refused_typed);

#[cfg(all(has_ibv_alloc_dmah, has_ibv_reg_mr_ex))]
pub fn dma_handles_steer_a_region_or_are_refused_typed(env: &TestEnv) -> TestResult {
    use rdma::{DmaHandle, MemoryRegion, ProtectionDomain, TphMemType};

    use crate::fixtures::{open, refused, ACCESS};
    use crate::unsupported::{no_leak, not_supported, said};

    let skipped = no_leak(env, || {
        let ctx = open(env)?;
        refused(
            DmaHandle::builder().build(&ctx),
            "ibv_alloc_dmah",
            libc::EINVAL,
            "without a hint",
        )?;
        refused(
            DmaHandle::builder().processing_hint(4).build(&ctx),
            "ibv_alloc_dmah",
            libc::EINVAL,
            "2 bits",
        )?;
        let handle = DmaHandle::builder()
            .cpu_id(0)
            .mem_type(TphMemType::Volatile)
            .build(&ctx);
        let dmah = match handle {
            Ok(h) => h,
            Err(e) => {
                let errno = not_supported(env, Err::<(), _>(e), "ibv_alloc_dmah")?;
                return Ok(Some(format!(
                    "no DMA handles: {} (bad hints refused before it, typed error checked, no kernel object left); MrBuilder::dma_handle's ibv_reg_mr_ex needs one",
                    said(env, "ibv_alloc_dmah", errno)
                )));
            }
        };
        let pd = ProtectionDomain::new(&ctx)?;
        let mr = MemoryRegion::builder(&pd, 8192)
            .access(ACCESS)
            .dma_handle(&dmah)
            .build()?;
        mr.write(100, b"steered")?;
        rdma_tests::check!(mr.to_vec(100..107)? == b"steered");
        let other = open(env)?;
        let pd2 = ProtectionDomain::new(&other)?;
        refused(
            MemoryRegion::builder(&pd2, 4096).dma_handle(&dmah).build(),
            "ibv_reg_mr_ex",
            libc::EINVAL,
            "different contexts",
        )?;
        drop(mr);
        Ok(None)
    })?;
    Ok(skipped.map_or(Outcome::Passed, Outcome::Skipped))
}

#[cfg(not(all(has_ibv_alloc_dmah, has_ibv_reg_mr_ex)))]
pub fn dma_handles_steer_a_region_or_are_refused_typed(_env: &TestEnv) -> TestResult {
    Ok(Outcome::Skipped(crate::unsupported::headers_lack(
        "ibv_alloc_dmah",
        65,
    )))
}
