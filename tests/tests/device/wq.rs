//! WQs and RSS tables on the soft devices: neither has them; creation is
//! the typed "not supported" error and leaves nothing behind, and bad
//! arguments are refused before the provider sees them.

use rdma::{CompletionQueue, ProtectionDomain, RwqIndTable, WorkQueue};
use rdma_tests::{Outcome, TestEnv, TestResult};

use crate::fixtures::{open, refused};
use crate::unsupported::{no_leak, not_supported, said};

pub fn work_queues_are_not_supported(env: &TestEnv) -> TestResult {
    let errno = no_leak(env, || {
        let ctx = open(env)?;
        let other = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        let other_cq = CompletionQueue::new(&other, 16)?;
        refused(
            WorkQueue::new(&pd, &other_cq, 16, 1),
            "ibv_create_wq",
            libc::EINVAL,
            "different contexts",
        )?;
        refused(
            WorkQueue::new(&pd, &cq, 0, 1),
            "ibv_create_wq",
            libc::EINVAL,
            "at least 1",
        )?;
        refused(
            RwqIndTable::new(&[]),
            "ibv_create_rwq_ind_table",
            libc::EINVAL,
            "power of two",
        )?;
        let errno = not_supported(env, WorkQueue::new(&pd, &cq, 16, 1), "ibv_create_wq")?;
        Ok(errno)
    })?;
    Ok(Outcome::Skipped(format!(
        "no WQs (so no RSS table to make of them): {} (typed error checked, no kernel object left)",
        said(env, "ibv_create_wq", errno)
    )))
}

rdma_tests::tests!("wq": work_queues_are_not_supported);
