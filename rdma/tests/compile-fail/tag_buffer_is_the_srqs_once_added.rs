// A tag's buffer belongs to the SRQ from add_tag on: the caller cannot
// read it (the device and the provider write it) until a completion gives
// it back.
use rdma::{TagBuffer, TagMatchingSrq};

fn add_and_peek(srq: &TagMatchingSrq, buffer: TagBuffer) {
    let _ = srq.add_tag(1, u64::MAX, buffer, 7);
    let mut out = [0u8; 8];
    buffer.region().read(0, &mut out).unwrap();
}

fn main() {}
