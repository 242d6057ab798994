// A raw `ibv_modify_qp` can undo what the CM did to a QP: it takes `unsafe`.
use rdma::QueuePair;

fn f(qp: &QueuePair) {
    // SAFETY-less: refused without an `unsafe` block.
    let mut attr: rdma::sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
    let _ = qp.modify(&mut attr, rdma::sys::IBV_QP_STATE);
}

fn main() {}
