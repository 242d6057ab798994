// A tag-matching SRQ's receives go through TagMatchingSrq::post_recv, which
// refuses the tags' IDs: safe code cannot reach the SRQ itself to post one
// past it.
use rdma::{RecvWr, TagMatchingSrq};

fn post_a_tag_id(tm: &TagMatchingSrq) {
    let srq = tm.srq().clone();
    let _ = srq.post_recv(&mut [RecvWr::new(1 << 63, &[])]);
}

fn main() {}
