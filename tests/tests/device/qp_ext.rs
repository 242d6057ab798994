//! Queue-pair queries beyond `ibv_query_qp`: whether data lands in order.

use rdma::{CompletionQueue, ProtectionDomain, QpType, QueuePair, SendOps};
use rdma_tests::{check, Outcome, TestEnv, TestResult};

use crate::fixtures::{open, refused};

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

rdma_tests::tests!(
    "qp_ext":
    data_in_order_answers_per_operation,
);
