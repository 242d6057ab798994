//! The Rust twin of `ci/post_poll.c`, for instruction counts: `ITERS`
//! signalled 64-byte RDMA WRITEs over a queue pair connected to itself,
//! each posted (`post_one`) and its completion polled (`poll_one`) through
//! the safe API. The wait between the two is a sleep outside both, so the
//! counted poll finds the completion and the counts are deterministic.
//! `ci/perf.sh` runs both under callgrind with `--toggle-collect` on the
//! two functions.
//!
//! With `prepared` the request is checked and linked once
//! ([`QueuePair::prepare_send`]) and each iteration posts it with
//! [`PreparedSend::post`] (`post_one_prepared`). With `port` the loop
//! bypasses the safe API and calls the `#[inline]` ibverbs-sys ports it is
//! built on (`post_one_port`, `poll_one_port`): the difference is the cost of
//! the safe layer.

use std::time::Duration;

use rdma::{
    sys, AccessFlags, CompletionQueue, InitAttr, MemoryRegion, Mtu, Path, PreparedSend,
    ProtectionDomain, QpCaps, QpType, QueuePair, RtrAttr, RtsAttr, SendWr, WorkCompletion,
};

use super::Args;
use crate::pingpong::{self, Result};

/// Posts one list (here: one request).
#[inline(never)]
pub fn post_one(qp: &QueuePair, wr: &mut [SendWr<'_>]) -> rdma::Result<()> {
    qp.post_send(wr)
}

/// Posts a prepared list (here: one request) again.
#[inline(never)]
pub fn post_one_prepared(wr: &mut PreparedSend<'_, '_, '_>) -> rdma::Result<()> {
    wr.post()
}

/// Polls at most one completion, as C's `ibv_poll_cq(cq, 1, wc)`: 1, 0
/// (empty) or -1 (a failed completion). `isize`, so that the `Result` comes
/// back in registers.
#[inline(never)]
pub fn poll_one(cq: &CompletionQueue, wcs: &mut [WorkCompletion; 1]) -> rdma::Result<isize> {
    Ok(match cq.poll(wcs)? {
        [] => 0,
        [wc, ..] if !wc.is_success() => -1,
        _ => 1,
    })
}

/// Posts one raw request through the ibverbs-sys port, as C's inline does.
///
/// # Safety
/// `qp` must be a live QP and `wr` a valid request list for it.
#[inline(never)]
pub unsafe fn post_one_port(qp: *mut sys::ibv_qp, wr: *mut sys::ibv_send_wr) -> i32 {
    let mut bad = std::ptr::null_mut();
    // SAFETY: per the caller's contract.
    unsafe { sys::ibv_post_send(qp, wr, &mut bad) }
}

/// Polls at most one completion through the ibverbs-sys port.
///
/// # Safety
/// `cq` must be a live CQ and `wc` writable.
#[inline(never)]
pub unsafe fn poll_one_port(cq: *mut sys::ibv_cq, wc: *mut sys::ibv_wc) -> i32 {
    // SAFETY: per the caller's contract.
    let n = unsafe { sys::ibv_poll_cq(cq, 1, wc) };
    // SAFETY: the provider filled `*wc` when it returned 1.
    if n > 0 && unsafe { (*wc).status } != sys::IBV_WC_SUCCESS {
        return -1;
    }
    n
}

/// How the loop posts and polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostPollPath {
    /// `QueuePair::post_send` and `CompletionQueue::poll`.
    Safe,
    /// `PreparedSend::post` and `CompletionQueue::poll`.
    Prepared,
    /// The ibverbs-sys ports, as C.
    Port,
}

/// Runs the loop on the device and port of `args` along `path`.
pub fn run(args: &Args, iters: usize, path: PostPollPath) -> Result<()> {
    let port_path = path == PostPollPath::Port;
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
    let mut wcs = [WorkCompletion::ZERO; 1];
    let mut misses = 0u64;
    // SAFETY: the raw request is only posted by `post_one_port` below, while
    // `sge`, `mr` and `qp` live; nothing in it is changed.
    let raw_wr: *mut sys::ibv_send_wr = unsafe { wr[0].as_raw_mut() };
    let mut wr2 = [SendWr::rdma_write(0, &sge, remote).signaled()];
    let mut prepared = qp.prepare_send(&mut wr2).map_err(e)?;
    for _ in 0..iters {
        if path == PostPollPath::Prepared {
            post_one_prepared(&mut prepared).map_err(e)?;
        } else if port_path {
            // SAFETY: a live QP; `raw_wr` is a complete, NULL-terminated
            // request (next is NULL) naming registered memory of `mr`.
            if unsafe { post_one_port(qp.as_raw(), raw_wr) } != 0 {
                return Err("ibv_post_send failed".into());
            }
        } else {
            post_one(&qp, &mut wr).map_err(e)?;
        }
        loop {
            std::thread::sleep(Duration::from_millis(1));
            let got = if port_path {
                // SAFETY: a live CQ; `wcs[0]` is room for one completion
                // (WorkCompletion is a transparent ibv_wc).
                unsafe {
                    poll_one_port(cq.as_raw(), std::ptr::from_mut(&mut wcs[0]).cast()) as isize
                }
            } else {
                poll_one(&cq, &mut wcs).map_err(e)?
            };
            match got {
                1 => break,
                0 => misses += 1,
                _ => return Err("a completion failed".into()),
            }
        }
    }
    println!("post_poll: {iters} iterations, {misses} empty polls");
    Ok(())
}
