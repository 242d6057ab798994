//! Load: many queue pairs, many messages, every payload verified.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use rdma::{
    CompletionQueue, ProtectionDomain, QpCaps, QpType, QueuePair, RecvWr, SendWr, WorkCompletion,
};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{open, RcPair};

pub fn thousand_queue_pairs(env: &TestEnv) -> TestResult {
    const N: usize = 1000;
    let before = rdma_tests::resource_counts(&env.device)?;
    // Where the provider refused to create more (siw in this VM), and why.
    let mut limit = None;
    {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 256)?;
        let start = Instant::now();
        let mut qps = Vec::with_capacity(N);
        let caps = QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            ..QpCaps::default()
        };
        while qps.len() < N {
            match QueuePair::builder(&pd, QpType::Rc, &cq).caps(caps).build() {
                Ok(qp) => {
                    qp.to_init(&rdma::InitAttr::new(1))?;
                    qps.push(qp);
                }
                Err(e)
                    if env.provider == Provider::Siw
                        && matches!(e.errno(), libc::ENOSPC | libc::ENOMEM) =>
                {
                    limit = Some((qps.len(), e));
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut nums: Vec<u32> = qps.iter().map(|q| q.qp_num()).collect();
        nums.sort_unstable();
        nums.dedup();
        check!(nums.len() == qps.len(), "QP numbers are not unique");
        let during = rdma_tests::resource_counts(&env.device)?;
        check!(
            during.get("qp").copied().unwrap_or(0) >= qps.len() as u64,
            "kernel counts {during:?}"
        );
        println!(
            "  {} QPs created and moved to INIT in {:?}",
            qps.len(),
            start.elapsed()
        );
    }
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources leaked: before {before:?}, after {after:?}"
    );
    if let Some((k, e)) = limit {
        check!(k >= 64, "siw refused after only {k} QPs: {e}");
        return Ok(Outcome::Skipped(format!(
            "siw refuses QPs past {k} in this VM ({e}); the refusal was typed and nothing leaked"
        )));
    }
    Ok(Outcome::Passed)
}

/// The number of messages: RDMA_TEST_LOAD_MESSAGES, default 100,000.
fn message_count() -> u64 {
    std::env::var("RDMA_TEST_LOAD_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

const SLOT: usize = 64;
const WINDOW: usize = 64;
const RECV_SLOTS: usize = 128;

/// The payload of message `seq`: its number, then bytes derived from it.
fn payload(seq: u64) -> [u8; SLOT] {
    let mut p = [0u8; SLOT];
    p[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in p[8..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    p
}

pub fn messages_over_rc_arrive_intact_and_in_order(env: &TestEnv) -> TestResult {
    let n = message_count();
    let p = RcPair::options()
        .cqe(256)
        .caps(QpCaps {
            max_send_wr: WINDOW as u32,
            max_recv_wr: RECV_SLOTS as u32,
            ..QpCaps::default()
        })
        .mr_len(SLOT * WINDOW)
        .mr_len_b(SLOT * RECV_SLOTS)
        .build(env)?;
    let (a, b, scq, rcq, src, dst) = (&p.qp_a, &p.qp_b, &p.cq_a, &p.cq_b, &p.mr_a, &p.mr_b);

    let recv_sges: Vec<_> = (0..RECV_SLOTS)
        .map(|i| dst.sge(i * SLOT..(i + 1) * SLOT))
        .collect::<Result<_, _>>()?;
    for (i, s) in recv_sges.iter().enumerate() {
        b.post_recv(&mut [RecvWr::new(i as u64, std::slice::from_ref(s))])?;
    }
    let send_sges: Vec<_> = (0..WINDOW)
        .map(|i| src.sge(i * SLOT..(i + 1) * SLOT))
        .collect::<Result<_, _>>()?;
    let (mut sent, mut acked, mut received) = (0u64, 0u64, 0u64);
    let mut wcs = [MaybeUninit::<WorkCompletion>::uninit(); 32];
    let mut got = [0u8; SLOT];
    let start = Instant::now();
    let mut last_progress = Instant::now();
    while received < n {
        // Fill the send window; each slot is rewritten only after its send completed.
        while sent < n
            && sent - acked < WINDOW as u64
            && sent - received < (RECV_SLOTS - WINDOW) as u64
        {
            let slot = (sent % WINDOW as u64) as usize;
            src.write(slot * SLOT, &payload(sent))?;
            a.post_send(&mut [
                SendWr::send(sent, std::slice::from_ref(&send_sges[slot])).signaled()
            ])?;
            sent += 1;
        }
        for wc in scq.poll(&mut wcs)? {
            check!(wc.is_success(), "send {} failed: {wc:?}", wc.wr_id());
            check!(
                wc.wr_id() == acked,
                "send completion {} out of order (expected {acked})",
                wc.wr_id()
            );
            acked += 1;
            last_progress = Instant::now();
        }
        for wc in rcq.poll(&mut wcs)? {
            check!(
                wc.is_success(),
                "receive failed after {received} messages: {wc:?}"
            );
            let slot = wc.wr_id() as usize;
            dst.read(slot * SLOT, &mut got)?;
            check!(
                wc.byte_len() as usize == SLOT,
                "message {received}: {} bytes",
                wc.byte_len()
            );
            check!(
                got == payload(received),
                "message {received} lost or corrupted"
            );
            received += 1;
            b.post_recv(&mut [RecvWr::new(
                slot as u64,
                std::slice::from_ref(&recv_sges[slot]),
            )])?;
            last_progress = Instant::now();
        }
        check!(
            last_progress.elapsed() < Duration::from_secs(20),
            "stalled: sent {sent}, acked {acked}, received {received}"
        );
    }
    let took = start.elapsed();
    println!(
        "  {n} messages of {SLOT} bytes verified in {took:?} ({:.0} msg/s)",
        n as f64 / took.as_secs_f64()
    );
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "load":
    thousand_queue_pairs,
    messages_over_rc_arrive_intact_and_in_order,
);
