//! Latency: perftest's `run_iter_lat_send`, `run_iter_lat_write` and
//! `run_iter_lat` (READ), on the safe API.
//!
//! Work requests are built once per size and posted again and again: a
//! post only relinks them, as perftest reuses its prepared `ibv_send_wr`.

use std::sync::atomic::{compiler_fence, Ordering};

use rdma::{CompletionQueue, RecvWr, SendWr, WorkCompletion};

use super::clock::cycles;
use super::conn::Conn;
use super::report::{LatResult, RunResult};
use super::{Config, Verb};
use crate::pingpong::Result;

/// How many completions one poll asks for.
pub const POLL_BATCH: usize = 16;

/// Polls `cq` until it returns at least one completion (sleeping on the
/// queue's channel in event mode), checks each and returns how many.
#[inline]
pub fn wait_completions(
    cq: &CompletionQueue,
    events: bool,
    wcs: &mut [WorkCompletion],
) -> Result<usize> {
    loop {
        let done = cq.poll(wcs).map_err(|e| format!("poll CQ failed: {e}"))?;
        if !done.is_empty() {
            for wc in done.iter() {
                if !wc.is_success() {
                    return Err(format!(
                        "Completion with error: {:?} (vendor error {:#x})",
                        wc.status(),
                        wc.vendor_err()
                    ));
                }
            }
            return Ok(done.len());
        }
        if events {
            cq.get_event()
                .map_err(|e| format!("Failed to get CQ event: {e}"))?;
            cq.req_notify(false)
                .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
        }
    }
}

/// Runs one size; returns the client's result (and the server's for the
/// ping-pongs, which measure on both sides, as perftest does).
pub fn run(cfg: &Config, conn: &mut Conn, size: usize) -> Result<Option<RunResult>> {
    let stamps = match cfg.verb {
        Verb::Send => send(cfg, conn, size)?,
        Verb::Write if cfg.args.write_with_imm => write_with_imm(cfg, conn, size)?,
        Verb::Write => write(cfg, conn, size)?,
        Verb::Read => {
            if !cfg.is_client() {
                return Ok(None);
            }
            read(cfg, conn, size)?
        }
    };
    let rtt_factor = if cfg.verb == Verb::Read { 1 } else { 2 };
    Ok(Some(RunResult::Lat(LatResult::from_stamps(
        size, cfg.iters, &stamps, rtt_factor,
    ))))
}

/// The signalled and the unsignalled form of a request.
fn variants<'a>(wr: impl Fn() -> SendWr<'a>, inline: bool) -> [[SendWr<'a>; 1]; 2] {
    let with = |w: SendWr<'a>| if inline { w.inline() } else { w };
    [[with(wr().signaled())], [with(wr())]]
}

fn send(cfg: &Config, conn: &mut Conn, size: usize) -> Result<Vec<u64>> {
    let err = |e: rdma::Error| e.to_string();
    let mr = &conn.mr;
    let half = mr.len() / 2;
    let sge = [mr.sge(0..size).map_err(err)?];
    let rsge = [mr.sge(half..).map_err(err)?];
    let inline = size <= conn.inline_size as usize;
    let wrs = variants(|| SendWr::send(0, &sge), inline);
    ping_pong(cfg, conn, wrs, &rsge)
}

/// WRITE with immediate: the ping-pong of [`send`], each message an RDMA
/// WRITE into the peer's region that also completes one of its receives
/// (which has no buffer: the data goes where the WRITE says).
fn write_with_imm(cfg: &Config, conn: &mut Conn, size: usize) -> Result<Vec<u64>> {
    let err = |e: rdma::Error| e.to_string();
    if conn.transport == rdma::TransportType::Iwarp {
        return Err("RDMA WRITE with immediate is not part of iWARP".into());
    }
    let sge = [conn.mr.sge(0..size).map_err(err)?];
    let remote = conn.remote.slice(0, size as u64).map_err(err)?;
    let inline = size <= conn.inline_size as usize;
    let wrs = variants(|| SendWr::rdma_write_with_imm(0, &sge, remote, 0), inline);
    ping_pong(cfg, conn, wrs, &[])
}

/// Each side waits for the peer's message (a receive's completion) and
/// answers; the client begins. `rsge`: where a receive places a SEND.
fn ping_pong(
    cfg: &Config,
    conn: &Conn,
    [mut signaled, mut unsignaled]: [[SendWr<'_>; 1]; 2],
    rsge: &[rdma::Sge<'_>],
) -> Result<Vec<u64>> {
    let qp = conn.qp();
    let mut recv = [RecvWr::new(0, rsge)];
    let mut wcs = [WorkCompletion::ZERO; 1];
    let iters = cfg.iters;
    let mut stamps = vec![0u64; iters];
    let (mut scnt, mut rcnt) = (0, 0);
    let client = cfg.is_client();
    while scnt < iters || rcnt < iters {
        if rcnt < iters && !(scnt == 0 && client) {
            rcnt += wait_completions(&conn.recv_cq, cfg.events, &mut wcs)?;
            qp.post_recv(&mut recv)
                .map_err(|e| format!("Couldn't post receive: {e}"))?;
        }
        if scnt < iters {
            let signal = (scnt + 1) % cfg.cq_mod == 0 || scnt + 1 == iters;
            stamps[scnt] = cycles();
            let wr = if signal {
                &mut signaled
            } else {
                &mut unsignaled
            };
            qp.post_send(wr)
                .map_err(|e| format!("Couldn't post send: scnt={scnt}: {e}"))?;
            scnt += 1;
            if signal {
                wait_completions(&conn.send_cq, cfg.events, &mut wcs)?;
            }
        }
    }
    Ok(stamps)
}

/// Spins until the byte at `offset` of the region is `want`: the last byte
/// of the peer's RDMA WRITE (the order of a WRITE's bytes is not defined,
/// but rxe and siw place the last byte last, and perftest relies on it).
#[inline]
fn wait_byte(mr: &rdma::MemoryRegion, offset: usize, want: u8) -> Result<()> {
    let mut b = [0u8; 1];
    loop {
        mr.read(offset, &mut b).map_err(|e| e.to_string())?;
        if b[0] == want {
            return Ok(());
        }
        // The device writes the memory behind the compiler's back: read it
        // again on every round.
        compiler_fence(Ordering::SeqCst);
        std::hint::spin_loop();
    }
}

fn write(cfg: &Config, conn: &mut Conn, size: usize) -> Result<Vec<u64>> {
    let err = |e: rdma::Error| e.to_string();
    let (qp, mr) = (conn.qp(), &conn.mr);
    let half = mr.len() / 2;
    let sge = [mr.sge(0..size).map_err(err)?];
    let remote = conn.remote.slice(0, size as u64).map_err(err)?;
    let inline = size <= conn.inline_size as usize;
    let [mut signaled, mut unsignaled] = variants(|| SendWr::rdma_write(0, &sge, remote), inline);
    let mut wcs = [WorkCompletion::ZERO; 1];
    let iters = cfg.iters;
    let mut stamps = vec![0u64; iters];
    let (mut scnt, mut rcnt) = (0, 0);
    let client = cfg.is_client();
    while scnt < iters || rcnt < iters {
        if rcnt < iters && !(scnt == 0 && client) {
            rcnt += 1;
            wait_byte(mr, half + size - 1, rcnt as u8)?;
        }
        if scnt < iters {
            let signal = (scnt + 1) % cfg.cq_mod == 0 || scnt + 1 == iters;
            stamps[scnt] = cycles();
            mr.write(size - 1, &[(scnt + 1) as u8]).map_err(err)?;
            let wr = if signal {
                &mut signaled
            } else {
                &mut unsignaled
            };
            qp.post_send(wr)
                .map_err(|e| format!("Couldn't post send: scnt={scnt}: {e}"))?;
            scnt += 1;
            if signal {
                wait_completions(&conn.send_cq, false, &mut wcs)?;
            }
        }
    }
    Ok(stamps)
}

fn read(cfg: &Config, conn: &mut Conn, size: usize) -> Result<Vec<u64>> {
    let err = |e: rdma::Error| e.to_string();
    let (qp, mr) = (conn.qp(), &conn.mr);
    let sge = [mr.sge(0..size).map_err(err)?];
    let remote = conn.remote.slice(0, size as u64).map_err(err)?;
    let mut wr = [SendWr::rdma_read(0, &sge, remote).signaled()];
    let mut wcs = [WorkCompletion::ZERO; 1];
    let mut stamps = vec![0u64; cfg.iters];
    for stamp in stamps.iter_mut() {
        *stamp = cycles();
        qp.post_send(&mut wr)
            .map_err(|e| format!("Couldn't post send: {e}"))?;
        wait_completions(&conn.send_cq, cfg.events, &mut wcs)?;
    }
    Ok(stamps)
}
