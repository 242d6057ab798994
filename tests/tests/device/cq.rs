//! Completion queues: channels and their wake-ups, blocking and async waits,
//! resize, overrun.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use rdma::{
    AccessFlags, AsyncEventElement, AsyncEventKind, CompletionChannel, CompletionQueue, InitAttr,
    MemoryRegion, ProtectionDomain, QpCaps, QpState, QpType, QueuePair, RecvWr, SendWr, WcOpcode,
    WcStatus, WorkCompletion,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{connect_rc, open, refused, send_one, wait, wait_any, RcPair, R, TIMEOUT};

pub fn completion_channel_wakes_on_completion(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let ch = CompletionChannel::new(&ctx)?;
    let cq = CompletionQueue::builder(&ctx).channel(&ch).build()?;
    ch.set_nonblocking(true)?;
    check!(!cq.get_event()?, "event before any completion");
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    cq.req_notify(false)?;
    // Moving a QP with a posted receive to ERROR flushes it: a completion.
    let mr = MemoryRegion::new(&pd, 64, AccessFlags::LOCAL_WRITE)?;
    qp.to_init(&InitAttr::new(1))?;
    let s = [mr.sge(..)?];
    qp.post_recv(&mut [RecvWr::new(7, &s)])?;
    qp.set_state(QpState::Error)?;
    let start = Instant::now();
    while !cq.get_event()? {
        check!(start.elapsed() < TIMEOUT, "no completion event");
        std::thread::sleep(Duration::from_millis(5));
    }
    let wc = wait_any(&cq)?;
    check!(
        wc.wr_id() == 7 && wc.status() == WcStatus::WorkRequestFlushed,
        "{wc:?}"
    );
    Ok(Outcome::Passed)
}

pub fn async_completions_lose_no_wakeup_under_load(env: &TestEnv) -> TestResult {
    const N: u64 = 2000;
    let ctx = open(env)?;
    let ch = CompletionChannel::new(&ctx)?;
    // A pair whose receiver's CQ reports events on `ch`.
    let p = RcPair::options()
        .on(&ProtectionDomain::new(&ctx)?)
        .cqe(256)
        .channel_b(&ch)
        .caps(QpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            ..QpCaps::default()
        })
        .mr_len(8)
        .mr_len_b(128 * 8)
        .build(env)?;
    let (a, b, send_cq, recv_cq) = (&p.qp_a, &p.qp_b, &p.cq_a, &p.cq_b);
    let (mr_a, mr_b) = (&p.mr_a, &p.mr_b);
    let slots: Vec<_> = (0..128)
        .map(|i| mr_b.sge(i * 8..i * 8 + 8))
        .collect::<Result<_, _>>()?;
    for (i, s) in slots.iter().enumerate() {
        b.post_recv(&mut [RecvWr::new(i as u64, std::slice::from_ref(s))])?;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let acq = rt.block_on(async { rdma::AsyncCompletionQueue::new(recv_cq.clone()) })?;
    let send_sge = [mr_a.sge(0..8)?];
    let received = rt.block_on(async {
        let mut received = 0u64;
        let mut sent = 0u64;
        let mut buf = [MaybeUninit::<WorkCompletion>::uninit(); 32];
        let mut sbuf = [MaybeUninit::<WorkCompletion>::uninit(); 32];
        while received < N {
            // Keep up to 64 messages in flight (the receiver has 128 slots).
            while sent < N && sent - received < 64 {
                mr_a.write(0, &sent.to_le_bytes())?;
                a.post_send(&mut [SendWr::send(sent, &send_sge).signaled()])?;
                // Wait for the send so the 8 source bytes can be rewritten.
                wait(send_cq, 1)?;
                sent += 1;
            }
            let wcs = tokio::time::timeout(Duration::from_secs(20), acq.wait(&mut buf))
                .await
                .map_err(|_| {
                    format!("no completion within 20 s after {received} messages: a lost wake-up")
                })??;
            for wc in wcs.iter() {
                check!(wc.is_success(), "{wc:?}");
                let slot = wc.wr_id() as usize;
                let v =
                    u64::from_le_bytes(mr_b.to_vec(slot * 8..slot * 8 + 8)?.try_into().unwrap());
                check!(
                    v == received,
                    "message {received} arrived as {v}: lost or reordered"
                );
                received += 1;
                b.post_recv(&mut [RecvWr::new(slot as u64, std::slice::from_ref(&slots[slot]))])?;
            }
            let _ = send_cq.poll(&mut sbuf)?;
        }
        Ok::<u64, Box<dyn std::error::Error>>(received)
    })?;
    check!(received == N);
    Ok(Outcome::Passed)
}

pub fn cq_resize_keeps_completions_and_bad_sizes_are_refused(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let max = ctx.query_device()?.max_cqe();
    let vectors = ctx.num_comp_vectors();
    refused(
        CompletionQueue::new(&ctx, max.saturating_add(1)),
        "ibv_create_cq",
        libc::EINVAL,
        "max_cqe",
    )?;
    refused(
        CompletionQueue::new(&ctx, 0),
        "ibv_create_cq",
        libc::EINVAL,
        "at least 1",
    )?;
    for v in [vectors, -1] {
        refused(
            CompletionQueue::builder(&ctx).comp_vector(v).build(),
            "ibv_create_cq",
            libc::EINVAL,
            "completion vector",
        )?;
    }
    // The last vector and the largest size are accepted.
    drop(
        CompletionQueue::builder(&ctx)
            .comp_vector(vectors - 1)
            .build()?,
    );
    drop(CompletionQueue::new(&ctx, max)?);

    let cq = CompletionQueue::new(&ctx, 16)?;
    refused(
        cq.resize(max.saturating_add(1)),
        "ibv_resize_cq",
        libc::EINVAL,
        "max_cqe",
    )?;
    refused(cq.resize(0), "ibv_resize_cq", libc::EINVAL, "at least 1")?;
    if env.provider == Provider::Siw {
        let e = refused(
            cq.resize(64),
            "ibv_resize_cq",
            libc::EOPNOTSUPP,
            "does not support",
        )?;
        check!(
            cq.cqe() >= 16,
            "a refused resize changed the size: {}",
            cq.cqe()
        );
        return Ok(Outcome::Skipped(format!(
            "siw has no CQ resize: {e} (refusals checked)"
        )));
    }

    // rxe: three receive completions wait in an extended CQ while it is
    // resized; none is lost and the order holds.
    let p = RcPair::options()
        .on(&ProtectionDomain::new(&ctx)?)
        .cqe(16)
        .cqe_b(8)
        .extended_cq_b()
        .mr_len(4096)
        .build(env)?;
    let (a, b, cq_a, cq_b, mr) = (&p.qp_a, &p.qp_b, &p.cq_a, &p.cq_b, &p.mr_b);
    let rs: Vec<_> = (0..3)
        .map(|i| mr.sge(1024 + i * 256..1024 + (i + 1) * 256))
        .collect::<Result<_, _>>()?;
    for (i, s) in rs.iter().enumerate() {
        b.post_recv(&mut [RecvWr::new(i as u64, std::slice::from_ref(s))])?;
    }
    mr.write(0, b"resize")?;
    let ss = [mr.sge(0..6)?];
    for i in 0..3 {
        a.post_send(&mut [SendWr::send(10 + i, &ss).signaled()])?;
    }
    // rxe's responder completes a receive before it acknowledges the send:
    // once the sends completed, the receives are in cq_b.
    wait(cq_a, 3)?;
    let before = cq_b.cqe();
    // Smaller than what it holds: rxe refuses, and nothing changes.
    let e = cq_b.resize(1);
    check!(
        matches!(&e, Err(e) if e.errno() == libc::EINVAL),
        "resize below the 3 completions held: {e:?}"
    );
    check!(
        cq_b.cqe() == before,
        "{} after a refused resize",
        cq_b.cqe()
    );
    {
        let mut poll = match cq_b.start_poll()? {
            Some(p) => p,
            None => fail!("no completion in the receive CQ after the sends completed"),
        };
        let first = poll.next().map(|c| (c.wr_id(), c.status()));
        refused(
            cq_b.resize(64),
            "ibv_resize_cq",
            libc::EBUSY,
            "extended poll",
        )?;
        check!(
            matches!(first, Some((0, rdma::WcStatus::Success))),
            "first receive: {first:?}"
        );
    }
    cq_b.resize(64)?;
    check!(cq_b.cqe() >= 64, "cqe {} after a resize to 64", cq_b.cqe());
    let mut wcs = [WorkCompletion::ZERO; 8];
    let got = cq_b.poll(&mut wcs)?;
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id()).collect();
    check!(
        ids == [1, 2] && got.iter().all(|w| w.is_success()),
        "after the resize: {got:?}"
    );
    // And the resized queue keeps working, smaller again.
    cq_b.resize(4)?;
    check!(
        cq_b.cqe() >= 4 && cq_b.cqe() < 64,
        "cqe {} after a resize to 4",
        cq_b.cqe()
    );
    send_one((a, cq_a, &p.mr_a), (b, cq_b, mr), b"after two resizes")?;
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

/// How a queue of the wait test is made.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    /// No channel: the wait polls and backs off.
    Polling,
    /// A blocking completion channel.
    Channel,
    /// A non-blocking completion channel.
    NonBlockingChannel,
}

/// How long a wait for nothing is given, and how much later than that it
/// may end under emulation.
const SHORT: Duration = Duration::from_millis(300);

const SLACK: Duration = Duration::from_secs(5);

/// Checks that a wait that found nothing ended at its timeout, not before
/// and not long after.
fn ended_at_the_timeout(took: Duration, what: &str) -> R<()> {
    check!(
        took >= SHORT,
        "{what}: returned after {took:?}, before {SHORT:?}"
    );
    check!(took < SHORT + SLACK, "{what}: returned after {took:?}");
    Ok(())
}

fn wait_on(env: &TestEnv, how: Waiting) -> R<()> {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let ch = CompletionChannel::new(&ctx)?;
    if matches!(how, Waiting::NonBlockingChannel) {
        ch.set_nonblocking(true)?;
    }
    let o = RcPair::options()
        .on(&pd)
        .cqe(32)
        .mr_len(4096)
        .access(AccessFlags::LOCAL_WRITE);
    let p = match how {
        Waiting::Polling => o,
        _ => o.channel(&ch),
    }
    .build(env)?;
    let (qp_a, qp_b, cq_a, cq_b) = (&p.qp_a, &p.qp_b, &p.cq_a, &p.cq_b);
    let (mr_a, mr_b) = (&p.mr_a, &p.mr_b);
    check!(
        cq_a.channel().is_some() == !matches!(how, Waiting::Polling),
        "{how:?}: channel {:?}",
        cq_a.channel()
    );

    // Nothing posted: the wait ends at its timeout, with nothing.
    let mut wcs = [WorkCompletion::ZERO; 16];
    let start = Instant::now();
    let got = cq_b.wait(&mut wcs, 1, SHORT)?.len();
    ended_at_the_timeout(start.elapsed(), &format!("{how:?}: wait"))?;
    check!(got == 0, "{how:?}: {got} completions on an idle queue");
    let start = Instant::now();
    match cq_b.wait_one(SHORT) {
        Err(e) if e.is_timeout() => {}
        other => return Err(format!("{how:?}: wait_one on an idle queue gave {other:?}").into()),
    }
    ended_at_the_timeout(start.elapsed(), &format!("{how:?}: wait_one"))?;

    // Four messages: the wait returns once all four have completed.
    const N: usize = 4;
    for i in 0..N {
        let rs = [mr_b.sge(i * 64..(i + 1) * 64)?];
        qp_b.post_recv(&mut [RecvWr::new(i as u64, &rs)])?;
    }
    for i in 0..N {
        mr_a.write(i * 64, format!("message {i}").as_bytes())?;
        let ss = [mr_a.sge(i * 64..i * 64 + 9)?];
        qp_a.post_send(&mut [SendWr::send(100 + i as u64, &ss).signaled()])?;
    }
    let sent = cq_a.wait(&mut wcs, N, TIMEOUT)?;
    check!(sent.len() == N, "{how:?}: {} of {N} sends", sent.len());
    for (i, wc) in sent.iter().enumerate() {
        check!(
            wc.is_success() && wc.opcode() == WcOpcode::Send && wc.wr_id() == 100 + i as u64,
            "{how:?}: send {i}: {wc:?}"
        );
    }
    let got = cq_b.wait(&mut wcs, N, TIMEOUT)?;
    check!(got.len() == N, "{how:?}: {} of {N} receives", got.len());
    for (i, wc) in got.iter().enumerate() {
        check!(
            wc.is_success() && wc.opcode() == WcOpcode::Recv && wc.byte_len() == 9,
            "{how:?}: receive {i}: {wc:?}"
        );
        let slot = wc.wr_id() as usize;
        let text = mr_b.to_vec(slot * 64..slot * 64 + 9)?;
        check!(
            text == format!("message {slot}").as_bytes(),
            "{how:?}: slot {slot} holds {text:?}"
        );
    }

    // A completion that comes while the thread sleeps in the wait.
    let rs = [mr_b.sge(0..64)?];
    qp_b.post_recv(&mut [RecvWr::new(7, &rs)])?;
    let delay = Duration::from_millis(300);
    let (wc, took) = std::thread::scope(|s| {
        let sender = s.spawn(|| -> rdma::Result<()> {
            std::thread::sleep(delay);
            let ss = [mr_a.sge(0..9)?];
            qp_a.post_send(&mut [SendWr::send(200, &ss).signaled()])
        });
        let start = Instant::now();
        let wc = cq_b.wait_one(TIMEOUT);
        let took = start.elapsed();
        let sent = sender.join().map_err(|_| "the sender panicked");
        (sent.map(|r| r.and(wc)), took)
    });
    let wc = wc??;
    check!(
        wc.is_success() && wc.wr_id() == 7,
        "{how:?}: late receive: {wc:?}"
    );
    check!(
        took >= delay - Duration::from_millis(50) && took < delay + SLACK,
        "{how:?}: the wait for a completion {delay:?} away took {took:?}"
    );
    let sent = cq_a.wait_one(TIMEOUT)?;
    check!(
        sent.is_success() && sent.wr_id() == 200,
        "{how:?}: {sent:?}"
    );
    // `min` 0 polls once: nothing is left over.
    check!(
        cq_a.wait(&mut wcs, 0, TIMEOUT)?.is_empty(),
        "{how:?}: completions left over"
    );
    Ok(())
}

pub fn cq_wait_returns_completions_and_times_out(env: &TestEnv) -> TestResult {
    for how in [
        Waiting::Polling,
        Waiting::Channel,
        Waiting::NonBlockingChannel,
    ] {
        wait_on(env, how)?;
    }
    Ok(Outcome::Passed)
}

/// `AsyncCompletionQueue::create` makes its own channel; a CQ builder
/// refuses a channel of another context.
pub fn an_async_cq_makes_its_own_channel(env: &TestEnv) -> TestResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let r: R<()> = rt.block_on(async {
        let ctx = open(env)?;
        let acq = rdma::AsyncCompletionQueue::create(&ctx, 16)?;
        check!(acq.cq().channel().is_some(), "no channel");
        let pd = ProtectionDomain::new(&ctx)?;
        let qp = || {
            QueuePair::builder(&pd, QpType::Rc, acq.cq())
                .caps(QpCaps::default())
                .build()
        };
        let (a, b) = (qp()?, qp()?);
        let _cm = connect_rc(env, &ctx, &a, &b)?;
        let mr = MemoryRegion::new(&pd, 64, AccessFlags::LOCAL_WRITE)?;
        let rs = [mr.sge(0..32)?];
        b.post_recv(&mut [RecvWr::new(1, &rs)])?;
        let ss = [mr.sge(32..40)?];
        a.post_send(&mut [SendWr::send(2, &ss).signaled()])?;
        let mut got = Vec::new();
        let mut wcs = [WorkCompletion::ZERO; 4];
        while got.len() < 2 {
            let polled = tokio::time::timeout(TIMEOUT, acq.wait(&mut wcs))
                .await
                .map_err(|_| "no completion from the async CQ")??;
            got.extend(
                polled
                    .iter()
                    .map(|wc| (wc.wr_id(), wc.opcode(), wc.status())),
            );
        }
        got.sort_by_key(|g| g.0);
        check!(
            got == [
                (1, WcOpcode::Recv, WcStatus::Success),
                (2, WcOpcode::Send, WcStatus::Success)
            ],
            "{got:?}"
        );
        // A channel of another context (the same device, opened again).
        let other = open(env)?;
        let ch = CompletionChannel::new(&other)?;
        let before = rdma_tests::resource_counts(&env.device)?;
        let e = match CompletionQueue::builder(&ctx).cqe(4).channel(&ch).build() {
            Ok(_) => return Err("a CQ was made with another context's channel".into()),
            Err(e) => e,
        };
        check!(
            e.errno() == libc::EINVAL && e.to_string().contains("different contexts"),
            "another context's channel: {e}"
        );
        let after = rdma_tests::resource_counts(&env.device)?;
        check!(
            before == after,
            "the refused build left objects: before {before:?}, after {after:?}"
        );
        // The same builder with a channel of the CQ's own context works.
        let own = CompletionChannel::new(&ctx)?;
        let cq = CompletionQueue::builder(&ctx)
            .cqe(4)
            .channel(&own)
            .build()?;
        check!(cq.channel().is_some(), "the CQ lost its channel");
        drop((a, b));
        Ok(())
    });
    r.map_err(|e| e.to_string())?;
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cq":
    completion_channel_wakes_on_completion,
    async_completions_lose_no_wakeup_under_load,
    cq_resize_keeps_completions_and_bad_sizes_are_refused,
    cq_overrun_is_reported_as_an_async_event,
    an_async_cq_makes_its_own_channel,
    cq_wait_returns_completions_and_times_out,
);
