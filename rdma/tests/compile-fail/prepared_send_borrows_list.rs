// A prepared list borrows its requests: they cannot change or move while it exists.
use rdma::{QueuePair, SendWr};

fn f(qp: &QueuePair, mut list: [SendWr<'_>; 1]) {
    let mut prepared = qp.prepare_send(&mut list).unwrap();
    let moved = list;
    prepared.post().unwrap();
    drop(moved);
}

fn main() {}
