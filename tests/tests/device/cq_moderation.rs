//! Completion moderation (`ibv_modify_cq`): applied where the device states
//! moderation limits, the typed "not supported" error where it does not,
//! and a queue that delivers as before either way.

use rdma_tests::{check, Outcome, TestEnv, TestResult};

use crate::fixtures::{refused, send_one, RcPair};

pub fn modify_moderation_or_not_supported(env: &TestEnv) -> TestResult {
    let mut outcome = String::new();
    for extended in [false, true] {
        let p = if extended {
            RcPair::extended(env)?
        } else {
            RcPair::new(env)?
        };
        let caps = p.ctx.query_device()?.as_raw().cq_mod_caps;
        let cqe = p.cq_b.cqe();
        if caps.max_cq_count == 0 {
            // No moderation limits: the provider has no moderation.
            refused(
                p.cq_b.modify(4, 10),
                "ibv_modify_cq",
                libc::EOPNOTSUPP,
                "does not support",
            )?;
            outcome = format!("{} has no moderation: EOPNOTSUPP", env.device);
        } else {
            p.cq_b.modify(1, 0)?;
            p.cq_b.modify(caps.max_cq_count, caps.max_cq_period)?;
            if caps.max_cq_count < u16::MAX {
                refused(
                    p.cq_b.modify(caps.max_cq_count + 1, 0),
                    "ibv_modify_cq",
                    libc::EINVAL,
                    "exceeds the device's",
                )?;
            }
            // Back to an event per completion, so the send below completes
            // at once.
            p.cq_b.modify(1, 0)?;
            outcome = format!(
                "{} moderates up to {} completions / {} us",
                env.device, caps.max_cq_count, caps.max_cq_period
            );
        }
        // The queue is as it was and delivers (extended and classic).
        check!(p.cq_b.cqe() == cqe, "cqe {cqe} -> {}", p.cq_b.cqe());
        send_one(
            (&p.qp_a, &p.cq_a, &p.mr_a),
            (&p.qp_b, &p.cq_b, &p.mr_b),
            b"after modify",
        )?;
    }
    println!("cq_moderation: {outcome}");
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cq_moderation":
    modify_moderation_or_not_supported,
);
