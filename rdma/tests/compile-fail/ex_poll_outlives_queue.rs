// An extended poll borrows its queue: the queue cannot go while it lives.
use rdma::CompletionQueue;

fn f(cq: CompletionQueue) {
    let poll = cq.start_poll().unwrap();
    drop(cq);
    drop(poll);
}

fn main() {}
