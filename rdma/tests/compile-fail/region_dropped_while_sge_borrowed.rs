// A region cannot be dropped while an SGE of it is alive.
use rdma::{AccessFlags, MemoryRegion, ProtectionDomain};

fn f(pd: &ProtectionDomain) {
    let mr = MemoryRegion::new(pd, 64, AccessFlags::LOCAL_WRITE).unwrap();
    let sge = mr.sge(0..8).unwrap();
    drop(mr);
    let _ = sge.len();
}

fn main() {}
