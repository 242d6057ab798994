// An SGE borrows its memory region: it cannot outlive it.
use rdma::{AccessFlags, MemoryRegion, ProtectionDomain};

fn sge_of(pd: &ProtectionDomain) -> rdma::Sge<'static> {
    let mr = MemoryRegion::new(pd, 64, AccessFlags::LOCAL_WRITE).unwrap();
    mr.sge(0..8).unwrap()
}

fn main() {}
