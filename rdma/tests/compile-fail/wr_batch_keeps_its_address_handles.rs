// A batch's UD send is queued when the batch completes: the address handle
// it names stays borrowed until then, so it cannot be dropped in between
// (its drop hands it to its PD only once every post naming it returned).
use rdma::{AddressHandle, QueuePair, SendFlags, Sge};

fn dropped_before_complete(qp: &mut QueuePair, sge: &Sge<'_>, ah: AddressHandle) {
    let mut batch = qp.wr_batch().unwrap();
    batch.send_ud(1, SendFlags::SIGNALED, sge, &ah, 1, 1);
    drop(ah);
    batch.complete().unwrap();
}

fn main() {}
