//! Completion counters (rdma-core v65 and newer). Neither soft device has
//! them: the capability query and each creation are the typed "not
//! supported" error with nothing left behind. Where a provider has them,
//! the counts are set, raised and read back, and an attach is checked.

use rdma_tests::{Outcome, TestEnv, TestResult};

rdma_tests::tests!("comp_cntr": completion_counters_count_or_are_refused_typed);

#[cfg(has_ibv_create_comp_cntr)]
pub fn completion_counters_count_or_are_refused_typed(env: &TestEnv) -> TestResult {
    use rdma::{CompCntrKind, CompletionCounter};

    use crate::fixtures::open;
    use crate::unsupported::{no_leak, not_supported, said};

    let skipped = no_leak(env, || {
        let ctx = open(env)?;
        let caps = ctx.comp_cntr_caps();
        let created = CompletionCounter::new(&ctx, CompCntrKind::WorkRequests);
        if let (Ok(caps), Ok(counter)) = (&caps, &created) {
            counts(env, &ctx, caps, counter)?;
            return Ok(None);
        }
        let q = not_supported(env, caps, "ibv_query_comp_cntr_caps")?;
        let c = not_supported(env, created, "ibv_create_comp_cntr")?;
        let b = not_supported(
            env,
            CompletionCounter::new(&ctx, CompCntrKind::Bytes),
            "ibv_create_comp_cntr",
        )?;
        Ok(Some(format!(
            "no completion counters: {}, {} (work requests), {b} (bytes); typed errors checked, no kernel object left",
            said(env, "ibv_query_comp_cntr_caps", q),
            said(env, "ibv_create_comp_cntr", c)
        )))
    })?;
    Ok(skipped.map_or(Outcome::Passed, Outcome::Skipped))
}

/// Sets, raises and reads both counts, attaches the counter to a QP of its
/// context and is refused one of another context.
#[cfg(has_ibv_create_comp_cntr)]
fn counts(
    env: &TestEnv,
    ctx: &rdma::Context,
    caps: &rdma::CompCntrCaps,
    c: &rdma::CompletionCounter,
) -> crate::fixtures::R<()> {
    use rdma::{CompCntrOps, CompletionQueue, ProtectionDomain, QpType, QueuePair};
    use rdma_tests::check;

    use crate::fixtures::{open, refused};

    check!(caps.max_counters > 0, "{caps:?}");
    c.set(5)?;
    c.inc(3)?;
    check!(c.read()? == 8, "completions {}", c.read()?);
    c.set_errors(1)?;
    c.inc_errors(2)?;
    check!(c.read_errors()? == 3, "errors {}", c.read_errors()?);
    let pd = ProtectionDomain::new(ctx)?;
    let cq = CompletionQueue::new(ctx, 8)?;
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    refused(
        c.attach(&qp, CompCntrOps::empty()),
        "ibv_qp_attach_comp_cntr",
        libc::EINVAL,
        "no operation",
    )?;
    let ops = caps.supported_ops & (CompCntrOps::SEND | CompCntrOps::RECV);
    if !ops.is_empty() {
        c.attach(&qp, ops)?;
    }
    let other = open(env)?;
    let pd2 = ProtectionDomain::new(&other)?;
    let cq2 = CompletionQueue::new(&other, 8)?;
    let qp2 = QueuePair::builder(&pd2, QpType::Rc, &cq2).build()?;
    refused(
        c.attach(&qp2, CompCntrOps::SEND),
        "ibv_qp_attach_comp_cntr",
        libc::EINVAL,
        "different contexts",
    )?;
    Ok(())
}

#[cfg(not(has_ibv_create_comp_cntr))]
pub fn completion_counters_count_or_are_refused_typed(_env: &TestEnv) -> TestResult {
    Ok(Outcome::Skipped(crate::unsupported::headers_lack(
        "ibv_create_comp_cntr",
        65,
    )))
}
