// An open batch holds the provider's send-queue lock: while it exists the QP
// is borrowed mutably, so no post, second batch or bind can reach the lock.
use rdma::{QueuePair, SendWr};

fn post_inside(qp: &mut QueuePair, wr: &mut [SendWr<'_>]) {
    let batch = qp.wr_batch().unwrap();
    qp.post_send(wr).unwrap();
    batch.complete().unwrap();
}

fn second_batch(qp: &mut QueuePair) {
    let batch = qp.wr_batch().unwrap();
    let again = qp.wr_batch().unwrap();
    drop(again);
    batch.complete().unwrap();
}

fn shared(qp: &QueuePair) {
    qp.wr_batch().unwrap().complete().unwrap();
}

fn main() {}
