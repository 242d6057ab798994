//! The Rust twin of `ci/post_poll.c`, for instruction counts: `ITERS`
//! signalled 64-byte RDMA WRITEs over a queue pair connected to itself,
//! each posted (`post_one`) and its completion polled (`poll_one`) through
//! the safe API. The wait between the two is a sleep outside both, so the
//! counted poll finds the completion and the counts are deterministic.
//! `ci/perf.sh` runs both under callgrind with `--toggle-collect` on the
//! two functions.

use std::mem::MaybeUninit;
use std::time::Duration;

use rdma::{
    AccessFlags, CompletionQueue, InitAttr, MemoryRegion, Mtu, Path, ProtectionDomain, QpCaps,
    QpType, QueuePair, RtrAttr, RtsAttr, SendWr, WorkCompletion,
};

use super::Args;
use crate::pingpong::{self, Result};

/// Posts one list (here: one request).
#[inline(never)]
pub fn post_one(qp: &QueuePair, wr: &mut [SendWr<'_>]) -> rdma::Result<()> {
    qp.post_send(wr)
}

/// Polls at most one completion: 1, 0 (empty) or -1 (a failed completion).
#[inline(never)]
pub fn poll_one(
    cq: &CompletionQueue,
    wcs: &mut [MaybeUninit<WorkCompletion>],
) -> rdma::Result<i32> {
    let done = cq.poll(wcs)?;
    match done.first() {
        Some(wc) if !wc.is_success() => Ok(-1),
        _ => Ok(done.len() as i32),
    }
}

/// Runs the loop on the device and port of `args`.
pub fn run(args: &Args, iters: usize) -> Result<()> {
    let e = |err: rdma::Error| err.to_string();
    let ctx = pingpong::open_device(args.ib_dev.as_deref())?;
    let port = args.ib_port;
    let gid_index = args
        .gid_index
        .unwrap_or_else(|| super::conn::default_gid_index(&ctx, port));
    let gid = ctx.query_gid(port, gid_index).map_err(e)?;
    let pd = ProtectionDomain::new(&ctx).map_err(e)?;
    let cq = CompletionQueue::new(&ctx, 16).map_err(e)?;
    let mr = MemoryRegion::new(
        &pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )
    .map_err(e)?;
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq)
        .caps(QpCaps {
            max_send_wr: 16,
            max_recv_wr: 1,
            ..QpCaps::default()
        })
        .build()
        .map_err(e)?;
    let mut init = InitAttr::new(port);
    init.access = AccessFlags::REMOTE_WRITE;
    qp.to_init(&init).map_err(e)?;
    qp.to_rtr(Some(&RtrAttr {
        remote_qpn: qp.qp_num(),
        rq_psn: 0,
        mtu: Mtu::Mtu1024,
        path: Path::to_gid(gid, gid_index as u8, port),
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
    }))
    .map_err(e)?;
    qp.to_rts(&RtsAttr::default()).map_err(e)?;
    let sge = [mr.sge(0..64).map_err(e)?];
    let remote = mr.remote(2048..2048 + 64).map_err(e)?;
    let mut wr = [SendWr::rdma_write(0, &sge, remote).signaled()];
    let mut wcs = [MaybeUninit::uninit(); 1];
    let mut misses = 0u64;
    for _ in 0..iters {
        post_one(&qp, &mut wr).map_err(e)?;
        loop {
            std::thread::sleep(Duration::from_millis(1));
            match poll_one(&cq, &mut wcs).map_err(e)? {
                1 => break,
                0 => misses += 1,
                _ => return Err("a completion failed".into()),
            }
        }
    }
    println!("post_poll: {iters} iterations, {misses} empty polls");
    Ok(())
}
