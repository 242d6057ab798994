// An extended poll holds the provider's CQ lock: it cannot move to another thread.
use rdma::CompletionQueue;

fn assert_send<T: Send>(_: T) {}

fn f(cq: &CompletionQueue) {
    if let Some(poll) = cq.start_poll().unwrap() {
        assert_send(poll);
    }
}

fn main() {}
