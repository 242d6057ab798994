//! Bandwidth: perftest's `run_iter_bw` (client) and `run_iter_bw_server`
//! (the receiving side of SEND), on the safe API.
//!
//! The client keeps up to `tx_depth` requests in flight, posts them in lists
//! of `post_list` and signals the last request of every `cq_mod`; it stamps
//! each post and each completion, from which [`BwResult`] computes the peak
//! and average bandwidth. On iWARP the SEND client also waits for the
//! server's credits ([`super::conn::Credits`]) before each post.

use rdma::{RecvWr, SendWr, WcStatus, WorkCompletion};

use super::clock::cycles;
use super::conn::{Conn, Credits, CREDIT_WR_ID};
use super::lat::{wait_completions, POLL_BATCH};
use super::report::{BwResult, RunResult};
use super::{Config, Verb};
use crate::pingpong::Result;

/// Runs one size; returns what this side measured (the server of WRITE and
/// READ measures nothing).
pub fn run(cfg: &Config, conn: &mut Conn, size: usize) -> Result<Option<RunResult>> {
    if cfg.is_client() {
        return client(cfg, conn, size).map(|r| Some(RunResult::Bw(r)));
    }
    if cfg.verb == Verb::Send {
        return server(cfg, conn, size).map(|r| Some(RunResult::Bw(r)));
    }
    Ok(None)
}

fn client(cfg: &Config, conn: &mut Conn, size: usize) -> Result<BwResult> {
    let err = |e: rdma::Error| e.to_string();
    let mut credits = conn.credits.take();
    let (qp, mr) = (conn.qp(), &conn.mr);
    let sge = [mr.sge(0..size).map_err(err)?];
    let remote = conn.remote.slice(0, size as u64).map_err(err)?;
    let inline = size <= conn.inline_size as usize;
    let one = || {
        let wr = match cfg.verb {
            Verb::Send => SendWr::send(0, &sge),
            Verb::Write => SendWr::rdma_write(0, &sge, remote),
            Verb::Read => SendWr::rdma_read(0, &sge, remote),
        };
        if inline {
            wr.inline()
        } else {
            wr
        }
    };
    let list = cfg.post_list;
    // A list with its last request signalled, and one with none signalled.
    let mut signaled: Vec<SendWr<'_>> = (0..list)
        .map(|i| {
            if i + 1 == list {
                one().signaled()
            } else {
                one()
            }
        })
        .collect();
    let mut unsignaled: Vec<SendWr<'_>> = (0..list).map(|_| one()).collect();
    // READs in flight are bounded by the connection's read credits.
    let depth = if cfg.verb == Verb::Read {
        cfg.tx_depth.min(usize::from(conn.reads).max(list))
    } else {
        cfg.tx_depth
    };
    let iters = cfg.iters;
    let mut posted = vec![0u64; iters];
    let mut completed = vec![0u64; iters];
    let mut wcs = [WorkCompletion::ZERO; POLL_BATCH];
    let (mut scnt, mut ccnt) = (0usize, 0usize);
    if let Some(c) = &credits {
        if list > c.max_list() {
            return Err(format!(
                "a post list of {list} does not fit the server's credits (rx depth {})",
                c.depth
            ));
        }
    }
    let half = mr.len() / 2;
    while scnt < iters || ccnt < iters {
        // A credit WRITE brings no completion here: while short of credit,
        // poll rather than sleep on the CQ.
        let mut short = false;
        while scnt < iters && scnt + list - ccnt <= depth {
            if let Some(c) = &mut credits {
                if !may_send(c, mr, half, list)? {
                    short = true;
                    break;
                }
            }
            let signal = (scnt + list) % cfg.cq_mod == 0 || scnt + list >= iters;
            posted[scnt] = cycles();
            let wrs = if signal {
                &mut signaled
            } else {
                &mut unsignaled
            };
            qp.post_send(wrs)
                .map_err(|e| format!("Couldn't post send: scnt={scnt}: {e}"))?;
            scnt += list;
            if let Some(c) = &mut credits {
                c.count += list as u64;
            }
        }
        if ccnt < iters {
            let n = if cfg.events && !short {
                wait_completions(&conn.send_cq, true, &mut wcs)?
            } else {
                poll_now(conn, &mut wcs)?
            };
            if n > 0 {
                let now = cycles();
                for _ in 0..n {
                    ccnt = (ccnt + cfg.cq_mod).min(iters);
                    completed[ccnt - 1] = now;
                }
            }
        }
    }
    conn.credits = credits;
    Ok(BwResult::from_stamps(
        size, iters, &posted, &completed, list, cfg.cq_mod,
    ))
}

/// Whether the sender may post `list` more SENDs: the server's last
/// credit (the receives it has posted again, in the first 8 bytes of our
/// target half) plus its depth covers them.
fn may_send(c: &Credits, mr: &rdma::MemoryRegion, half: usize, list: usize) -> Result<bool> {
    let mut word = [0u8; 8];
    mr.read(half, &mut word).map_err(|e| e.to_string())?;
    let granted = u64::from_le_bytes(word) + c.depth as u64;
    Ok(c.count + list as u64 <= granted)
}

/// One poll of the send queue's completions, without waiting.
#[inline]
fn poll_now(conn: &Conn, wcs: &mut [WorkCompletion]) -> Result<usize> {
    let done = conn
        .send_cq
        .poll(wcs)
        .map_err(|e| format!("poll CQ failed: {e}"))?;
    for wc in done.iter() {
        if !wc.is_success() {
            return Err(format!(
                "Completion with error: {:?} (vendor error {:#x})",
                wc.status(),
                wc.vendor_err()
            ));
        }
    }
    Ok(done.len())
}

fn server(cfg: &Config, conn: &mut Conn, size: usize) -> Result<BwResult> {
    let mut credits = conn.credits.take();
    let (qp, mr) = (conn.qp(), &conn.mr);
    let half = mr.len() / 2;
    let sge = [mr.sge(half..).map_err(|e| e.to_string())?];
    let mut recv = [RecvWr::new(0, &sge)];
    let iters = cfg.iters;
    let mut stamps = vec![0u64; iters];
    let mut wcs = [WorkCompletion::ZERO; POLL_BATCH];
    let mut rcnt = 0;
    while rcnt < iters {
        // Never more than this size's share: with rdma_cm the client goes
        // on with the next size without waiting.
        let room = POLL_BATCH.min(iters - rcnt);
        let n = wait_completions(&conn.recv_cq, cfg.events, &mut wcs[..room])?;
        let now = cycles();
        for _ in 0..n {
            // Keep the receive queue full, with what the client still sends.
            qp.post_recv(&mut recv)
                .map_err(|e| format!("Couldn't post receive: rcnt={rcnt}: {e}"))?;
            stamps[rcnt] = now;
            rcnt += 1;
            if let Some(c) = &mut credits {
                c.count += 1;
                if c.should_grant() {
                    grant(conn, c)?;
                }
            }
        }
    }
    if let Some(c) = &mut credits {
        settle(conn, c)?;
    }
    conn.credits = credits;
    // Each receive stands for both its post and its completion; the peak
    // is taken over stretches that end at the last one.
    Ok(BwResult::from_stamps(
        size, iters, &stamps, &stamps, 1, iters,
    ))
}

/// How long a credit WRITE may take to complete.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

/// Writes the count of receives posted again into the sender's credit
/// word. One credit WRITE at a time: its source bytes stay as they are
/// until it completes.
fn grant(conn: &Conn, c: &mut Credits) -> Result<()> {
    settle(conn, c)?;
    let e = |e: rdma::Error| e.to_string();
    conn.mr.write(0, &c.count.to_le_bytes()).map_err(e)?;
    let sge = [conn.mr.sge(0..8).map_err(e)?];
    let to = conn.remote.slice(0, 8).map_err(e)?;
    conn.qp()
        .post_send(&mut [SendWr::rdma_write(CREDIT_WR_ID, &sge, to).signaled()])
        .map_err(|e| format!("Couldn't post the credit WRITE: {e}"))?;
    c.granted = c.count;
    c.in_flight = true;
    Ok(())
}

/// Waits for the credit WRITE in flight, if any. One flushed because the
/// sender, done, has already disconnected is no failure: the receives
/// decide whether the run succeeded.
fn settle(conn: &Conn, c: &mut Credits) -> Result<()> {
    let mut wcs = [WorkCompletion::ZERO; 4];
    let t0 = std::time::Instant::now();
    while c.in_flight {
        if t0.elapsed() > SETTLE {
            return Err("the credit WRITE did not complete".into());
        }
        for wc in conn
            .send_cq
            .poll(&mut wcs)
            .map_err(|e| format!("poll CQ failed: {e}"))?
            .iter()
        {
            if wc.wr_id() == CREDIT_WR_ID {
                c.in_flight = false;
            }
            if !wc.is_success() && wc.status() != WcStatus::WorkRequestFlushed {
                return Err(format!(
                    "Credit WRITE completion with error: {:?} (vendor error {:#x})",
                    wc.status(),
                    wc.vendor_err()
                ));
            }
        }
    }
    Ok(())
}
