// A tag handle comes only from add_tag: safe code cannot make one that
// names a provider entry of its choice.
use rdma::TagHandle;

fn forge() -> TagHandle {
    TagHandle {
        srq: 0,
        token: 1 << 63,
        handle: 3,
    }
}

fn main() {}
