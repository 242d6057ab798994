// A completion of an extended poll is valid only until the next `next`.
use rdma::CompletionQueue;

fn f(cq: &CompletionQueue) {
    if let Some(mut poll) = cq.start_poll().unwrap() {
        let first = poll.next().unwrap();
        let _second = poll.next();
        let _ = first.wr_id();
    }
}

fn main() {}
