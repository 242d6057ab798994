// A work request borrows its SGE list: the list cannot be dropped first.
use rdma::{MemoryRegion, SendWr};

fn make(mr: &MemoryRegion) -> SendWr<'_> {
    let sges = [mr.sge(0..8).unwrap()];
    SendWr::send(1, &sges)
}

fn main() {}
