//! Thread domains and parent domains on the soft devices: neither has
//! them; each refusal is the typed "not supported" error, with nothing
//! left behind and the PD still of use.

use rdma::{CompletionQueue, MemoryRegion, ProtectionDomain, QpType, QueuePair, ThreadDomain};
use rdma_tests::{Outcome, TestEnv, TestResult};

use crate::fixtures::{open, ACCESS};
use crate::unsupported::{no_leak, not_supported, said};

pub fn thread_and_parent_domains_are_not_supported(env: &TestEnv) -> TestResult {
    let (td, parent) = no_leak(env, || {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let td = not_supported(env, ThreadDomain::new(&ctx), "ibv_alloc_td")?;
        let parent = not_supported(
            env,
            ProtectionDomain::parent_domain(&pd),
            "ibv_alloc_parent_domain",
        )?;
        rdma_tests::check!(!pd.is_parent_domain() && !pd.is_imported());
        // The PD serves as before.
        let cq = CompletionQueue::new(&ctx, 8)?;
        let _qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
        let _mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
        Ok((td, parent))
    })?;
    Ok(Outcome::Skipped(format!(
        "no thread or parent domains: {}, {} (typed errors checked, no kernel object left)",
        said(env, "ibv_alloc_td", td),
        said(env, "ibv_alloc_parent_domain", parent)
    )))
}

rdma_tests::tests!("td": thread_and_parent_domains_are_not_supported);
