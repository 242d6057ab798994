//! Queue-pair verbs beyond the classic ones: whether data lands in order
//! (`ibv_query_qp_data_in_order`), and packet pacing
//! (`ibv_modify_qp_rate_limit`), which no soft device has.

use rdma::{CompletionQueue, ProtectionDomain, QpType, QueuePair, RateLimit, SendOps};
use rdma_tests::{check, Outcome, TestEnv, TestResult};

use crate::fixtures::{open, refused, ACCESS};
use crate::unsupported::{no_leak, not_supported, said};

pub fn data_in_order_answers_per_operation(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 8)?;
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    let mut answers = Vec::new();
    for op in [
        SendOps::SEND,
        SendOps::SEND_WITH_IMM,
        SendOps::SEND_WITH_INV,
        SendOps::RDMA_WRITE,
        SendOps::RDMA_WRITE_WITH_IMM,
    ] {
        let a = qp.data_in_order(op)?;
        // The answer is the provider's and the QP's: asked again, the same.
        check!(qp.data_in_order(op)? == a, "{op:?} changed its answer");
        answers.push((op, a));
    }
    println!("    {}: data in order: {answers:?}", env.device);
    // Not one operation that writes at the responder: refused before the
    // call.
    for op in [
        SendOps::empty(),
        SendOps::RDMA_READ,
        SendOps::ATOMIC_FETCH_AND_ADD,
        SendOps::SEND | SendOps::RDMA_WRITE,
    ] {
        refused(
            qp.data_in_order(op),
            "ibv_query_qp_data_in_order",
            libc::EINVAL,
            "not one operation",
        )?;
    }
    Ok(Outcome::Passed)
}

pub fn rate_limit_is_not_supported_and_the_qp_goes_on(env: &TestEnv) -> TestResult {
    let errno = no_leak(env, || {
        let ctx = open(env)?;
        let attr = ctx.query_device()?;
        for ty in [QpType::Rc, QpType::Uc, QpType::Ud] {
            check!(
                !attr.packet_pacing_supported(ty),
                "{} reports packet pacing for {ty:?}",
                env.device
            );
        }
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 8)?;
        let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
        let limit = RateLimit {
            rate_kbps: 100_000,
            max_burst_sz: 4096,
            typical_pkt_sz: 1024,
        };
        let errno = not_supported(env, qp.set_rate_limit(&limit), "ibv_modify_qp_rate_limit")?;
        // Removing a limit (rate 0) is the same verb: the same answer.
        let again = not_supported(
            env,
            qp.set_rate_limit(&RateLimit::default()),
            "ibv_modify_qp_rate_limit",
        )?;
        check!(again == errno, "{again} after {errno}");
        // The QP is untouched: it still moves to INIT.
        let mut init = rdma::InitAttr::new(1);
        init.access = ACCESS;
        qp.to_init(&init)?;
        Ok(errno)
    })?;
    Ok(Outcome::Skipped(format!(
        "no packet pacing on {}: {} (typed error checked, the QP goes on, no kernel object left)",
        env.device,
        said(env, "ibv_modify_qp_rate_limit", errno)
    )))
}

rdma_tests::tests!(
    "qp_ext":
    data_in_order_answers_per_operation,
    rate_limit_is_not_supported_and_the_qp_goes_on,
);
