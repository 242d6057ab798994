//! Faults: each gives a typed error within a bound, and the survivor stays
//! usable.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use rdma::{
    AccessFlags, AsyncEventElement, AsyncEventKind, CompletionQueue, MemoryRegion,
    ProtectionDomain, QpCaps, QpState, QpType, QueuePair, RecvWr, RtsAttr, SendWr, WcStatus,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::verbs::{connect_rc, connect_rc_with, open, wait, wait_any, ACCESS, R, TIMEOUT};

/// An RC pair with its own CQs and regions, connected with `rts`.
struct Pair {
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    qp_a: QueuePair,
    qp_b: QueuePair,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
    pd: ProtectionDomain,
    _conn: Option<crate::verbs::cm::Connection>,
}

fn pair(env: &TestEnv, rts: Option<RtsAttr>, b_access: AccessFlags) -> R<Pair> {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let (cq_a, cq_b) = (
        CompletionQueue::new(&ctx, 64)?,
        CompletionQueue::new(&ctx, 64)?,
    );
    let qp_a = QueuePair::builder(&pd, QpType::Rc, &cq_a).build()?;
    let qp_b = QueuePair::builder(&pd, QpType::Rc, &cq_b).build()?;
    let mr_a = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let mr_b = MemoryRegion::new(&pd, 4096, b_access)?;
    let conn = match rts {
        Some(rts) => connect_rc_with(env, &ctx, &qp_a, &qp_b, &rts)?,
        None => connect_rc(env, &ctx, &qp_a, &qp_b)?,
    };
    Ok(Pair {
        cq_a,
        cq_b,
        qp_a,
        qp_b,
        mr_a,
        mr_b,
        pd,
        _conn: conn,
    })
}

/// How a refused RDMA WRITE shows: on RoCE the responder NAKs it and the
/// requester's completion is a remote access error. On iWARP the WRITE is
/// unacknowledged (its completion may be a success) and the responder
/// terminates the connection: a SEND posted afterwards never arrives. (siw's
/// `ibv_query_qp` reports RESET for every state, so the state cannot tell.)
fn remote_access_refused(env: &TestEnv, p: &Pair, wc: &rdma::WorkCompletion) -> R<()> {
    match env.provider {
        Provider::Rxe => check!(wc.status() == WcStatus::RemoteAccessError, "{wc:?}"),
        Provider::Siw => {
            let rs = [p.mr_b.sge(2048..2112)?];
            // A receive may be refused already, once the QP is in error.
            let _ = p.qp_b.post_recv(&mut [RecvWr::new(70, &rs)]);
            let ss = [p.mr_a.sge(0..8)?];
            // Its completion, if any, may never come on a terminated
            // stream: only the receiver is watched.
            let _ = p.qp_a.post_send(&mut [SendWr::send(71, &ss).signaled()]);
            let start = Instant::now();
            let mut buf = [MaybeUninit::uninit(); 4];
            while start.elapsed() < Duration::from_secs(2) {
                for w in p.cq_b.poll(&mut buf)? {
                    check!(
                        !w.is_success(),
                        "a SEND after the refused write arrived: the connection survived ({w:?})"
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    Ok(())
}

pub fn error_state_flushes_outstanding_requests(env: &TestEnv) -> TestResult {
    let p = pair(env, None, ACCESS)?;
    let sges: Vec<_> = (0..4)
        .map(|i| p.mr_b.sge(i * 64..i * 64 + 64))
        .collect::<Result<_, _>>()?;
    let mut wrs: Vec<RecvWr> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(i as u64, std::slice::from_ref(s)))
        .collect();
    p.qp_b.post_recv(&mut wrs)?;
    p.qp_b.set_state(QpState::Error)?;
    let start = Instant::now();
    let mut flushed = Vec::new();
    let mut buf = [MaybeUninit::uninit(); 8];
    while flushed.len() < 4 {
        for wc in p.cq_b.poll(&mut buf)? {
            check!(wc.status() == WcStatus::WorkRequestFlushed, "{wc:?}");
            flushed.push(wc.wr_id());
        }
        check!(
            start.elapsed() < TIMEOUT,
            "only {} of 4 receives flushed",
            flushed.len()
        );
    }
    check!(flushed == [0, 1, 2, 3], "flush order {flushed:?}");
    // The survivor: the other side still sends (into a QP in error: the send
    // fails with a typed completion error, not a hang), and the errored QP
    // can be reset.
    p.qp_b.set_state(QpState::Reset)?;
    check!(p.qp_b.state()? == QpState::Reset);
    let _ = &p.cq_a;
    Ok(Outcome::Passed)
}

pub fn receiver_not_ready_exhausts_rnr_retries(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped(
            "iWARP has no RNR NAK: a receiver without receives is a TCP-level error".into(),
        ));
    }
    // rnr_retry 0: the first RNR NAK fails the send.
    let p = pair(
        env,
        Some(RtsAttr {
            rnr_retry: 0,
            ..RtsAttr::default()
        }),
        ACCESS,
    )?;
    let s = [p.mr_a.sge(0..8)?];
    let start = Instant::now();
    p.qp_a.post_send(&mut [SendWr::send(1, &s).signaled()])?;
    let wc = wait_any(&p.cq_a)?;
    check!(wc.status() == WcStatus::RnrRetryExceeded, "{wc:?}");
    check!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    check!(
        p.qp_a.state()? == QpState::Error,
        "sender QP not in error after a fatal completion"
    );
    Ok(Outcome::Passed)
}

pub fn wrong_rkey_is_a_remote_access_error(env: &TestEnv) -> TestResult {
    let p = pair(env, None, ACCESS)?;
    let mut remote = p.mr_b.remote(0..64)?;
    remote.rkey ^= 0x0000_ff00;
    let s = [p.mr_a.sge(0..64)?];
    p.qp_a
        .post_send(&mut [SendWr::rdma_write(1, &s, remote).signaled()])?;
    let wc = wait_any(&p.cq_a)?;
    remote_access_refused(env, &p, &wc)?;
    check!(
        p.mr_b.to_vec(0..64)? == vec![0; 64],
        "the refused write changed the target"
    );
    Ok(Outcome::Passed)
}

pub fn missing_remote_write_right_is_a_remote_access_error(env: &TestEnv) -> TestResult {
    // The target region allows local writes only.
    let p = pair(env, None, AccessFlags::LOCAL_WRITE)?;
    p.mr_a.write(0, &[0xab; 64])?;
    let s = [p.mr_a.sge(0..64)?];
    p.qp_a
        .post_send(&mut [SendWr::rdma_write(1, &s, p.mr_b.remote(0..64)?).signaled()])?;
    let wc = wait_any(&p.cq_a)?;
    remote_access_refused(env, &p, &wc)?;
    check!(
        p.mr_b.to_vec(0..64)? == vec![0; 64],
        "a write without the right changed the target"
    );
    Ok(Outcome::Passed)
}

pub fn cq_overrun_is_reported_as_an_async_event(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let small = CompletionQueue::new(&ctx, 1)?;
    let cqe = small.cqe().max(1) as u32;
    let n = cqe + 8;
    let qp = QueuePair::builder(&pd, QpType::Rc, &small)
        .caps(QpCaps {
            max_recv_wr: n,
            ..QpCaps::default()
        })
        .build()?;
    let mr = MemoryRegion::new(&pd, 64, AccessFlags::LOCAL_WRITE)?;
    qp.to_init(&rdma::InitAttr::new(1))?;
    let s = [mr.sge(0..64)?];
    for i in 0..n {
        qp.post_recv(&mut [RecvWr::new(u64::from(i), &s)])?;
    }
    ctx.set_async_nonblocking(true)?;
    // Flushing more receives than the CQ holds overruns it.
    qp.set_state(QpState::Error)?;
    let start = Instant::now();
    loop {
        if let Some(ev) = ctx.get_async_event()? {
            if ev.kind() == AsyncEventKind::CqError {
                check!(
                    ev.element() == AsyncEventElement::Cq(small.as_raw()),
                    "{ev:?}"
                );
                break;
            }
            continue;
        }
        if start.elapsed() > Duration::from_secs(5) {
            if env.provider == Provider::Siw {
                return Ok(Outcome::Skipped(format!(
                    "siw drops completions of a full CQ ({cqe} entries) without an async event"
                )));
            }
            fail!("no CQ error event within 5 s after overrunning a {cqe}-entry CQ with {n} completions");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Outcome::Passed)
}

pub fn peer_gone_gives_retry_exceeded_and_the_survivor_reconnects(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped(
            "on iWARP a vanished peer is a TCP reset (covered by the CM disconnect tests), not transport retries".into(),
        ));
    }
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let a = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
    // Short timeouts: 4.096 us * 2^10 = 4 ms per try, 2 retries.
    let rts = RtsAttr {
        timeout: 10,
        retry_cnt: 2,
        ..RtsAttr::default()
    };
    {
        let b = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
        connect_rc_with(env, &ctx, &a, &b, &rts)?;
        // The peer disappears.
    }
    let s = [mr.sge(0..8)?];
    let start = Instant::now();
    a.post_send(&mut [SendWr::send(1, &s).signaled()])?;
    let wc = wait_any(&cq)?;
    check!(wc.status() == WcStatus::RetryExceeded, "{wc:?}");
    check!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    // The survivor resets its QP and connects to a new peer.
    a.set_state(QpState::Reset)?;
    let b2 = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    connect_rc_with(env, &ctx, &a, &b2, &RtsAttr::default())?;
    let r = [mr.sge(1024..2048)?];
    b2.post_recv(&mut [RecvWr::new(2, &r)])?;
    mr.write(0, b"again!!!")?;
    a.post_send(&mut [SendWr::send(3, &s).signaled()])?;
    let wcs = wait(&cq, 2)?;
    check!(wcs.iter().any(|w| w.wr_id() == 2), "{wcs:?}");
    check!(
        mr.to_vec(1024..1032)? == b"again!!!",
        "data after reconnect differs"
    );
    Ok(Outcome::Passed)
}

pub fn panic_with_requests_posted_leaks_nothing(env: &TestEnv) -> TestResult {
    let before = rdma_tests::resource_counts(&env.device)?;
    let r = std::panic::catch_unwind(|| {
        let p = pair(env, None, ACCESS).expect("pair");
        let rs = [p.mr_b.sge(0..1024).expect("sge")];
        p.qp_b
            .post_recv(&mut [RecvWr::new(1, &rs)])
            .expect("post_recv");
        let s = [p.mr_a.sge(0..4096).expect("sge")];
        p.qp_a
            .post_send(&mut [
                SendWr::rdma_write(2, &s, p.mr_b.remote(0..4096).expect("remote")).signaled(),
            ])
            .expect("post_send");
        let _ = &p.pd;
        panic!("user code panics with work requests outstanding");
    });
    check!(r.is_err(), "the closure did not panic");
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources leaked by unwinding: before {before:?}, after {after:?}"
    );
    Ok(Outcome::Passed)
}

/// The tests of this module.
pub const TESTS: &[rdma_tests::Test] = &[
    rdma_tests::Test {
        name: "faults::error_state_flushes_outstanding_requests",
        run: error_state_flushes_outstanding_requests,
    },
    rdma_tests::Test {
        name: "faults::receiver_not_ready_exhausts_rnr_retries",
        run: receiver_not_ready_exhausts_rnr_retries,
    },
    rdma_tests::Test {
        name: "faults::wrong_rkey_is_a_remote_access_error",
        run: wrong_rkey_is_a_remote_access_error,
    },
    rdma_tests::Test {
        name: "faults::missing_remote_write_right_is_a_remote_access_error",
        run: missing_remote_write_right_is_a_remote_access_error,
    },
    rdma_tests::Test {
        name: "faults::cq_overrun_is_reported_as_an_async_event",
        run: cq_overrun_is_reported_as_an_async_event,
    },
    rdma_tests::Test {
        name: "faults::peer_gone_gives_retry_exceeded_and_the_survivor_reconnects",
        run: peer_gone_gives_retry_exceeded_and_the_survivor_reconnects,
    },
    rdma_tests::Test {
        name: "faults::panic_with_requests_posted_leaks_nothing",
        run: panic_with_requests_posted_leaks_nothing,
    },
];
