// A batch of extended work requests holds the QP's lock: it stays on its thread.
use rdma::QueuePair;

fn assert_send<T: Send>(_: T) {}

fn f(qp: &mut QueuePair) {
    let batch = qp.wr_batch().unwrap();
    assert_send(batch);
}

fn main() {}
