//! Shared receive queues: two QPs fed by one, the limit event, query and resize.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use rdma::{
    AsyncEventElement, AsyncEventKind, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    QpType, QueuePair, RecvWr, SendWr, SharedReceiveQueue, WcOpcode,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{connect_rc, open, refused, wait, RcPair, ACCESS, R};

pub fn srq_feeds_two_queue_pairs(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped(
            "needs two hand-connected QP pairs on one SRQ; iWARP connects only through rdma_cm"
                .into(),
        ));
    }
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 64)?;
    let srq = SharedReceiveQueue::new(&pd, 16, 1)?;
    let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let senders: Vec<QueuePair> = (0..2)
        .map(|_| QueuePair::builder(&pd, QpType::Rc, &cq).build())
        .collect::<Result<_, _>>()?;
    let receivers: Vec<QueuePair> = (0..2)
        .map(|_| QueuePair::builder(&pd, QpType::Rc, &cq).srq(&srq).build())
        .collect::<Result<_, _>>()?;
    let mut _conns = Vec::new();
    for (s, r) in senders.iter().zip(&receivers) {
        _conns.push(connect_rc(env, &ctx, s, r)?);
    }
    let sges: Vec<_> = (0..2)
        .map(|i| mr.sge(2048 + i * 512..2048 + (i + 1) * 512))
        .collect::<Result<_, _>>()?;
    let mut rwrs: Vec<RecvWr> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(i as u64, std::slice::from_ref(s)))
        .collect();
    srq.post_recv(&mut rwrs)?;
    mr.write(0, b"from sender 0")?;
    mr.write(100, b"from sender 1")?;
    let s0 = [mr.sge(0..13)?];
    let s1 = [mr.sge(100..113)?];
    senders[0].post_send(&mut [SendWr::send(100, &s0).signaled()])?;
    senders[1].post_send(&mut [SendWr::send(101, &s1).signaled()])?;
    let wcs = wait(&cq, 4)?;
    let recv_qps: Vec<u32> = wcs
        .iter()
        .filter(|w| w.opcode() == WcOpcode::Recv)
        .map(|w| w.qp_num())
        .collect();
    check!(recv_qps.len() == 2, "{wcs:?}");
    check!(
        recv_qps.contains(&receivers[0].qp_num()) && recv_qps.contains(&receivers[1].qp_num()),
        "SRQ receives not on both QPs: {wcs:?}"
    );
    let bodies = [mr.to_vec(2048..2061)?, mr.to_vec(2560..2573)?];
    check!(
        bodies.contains(&b"from sender 0".to_vec()) && bodies.contains(&b"from sender 1".to_vec()),
        "SRQ data differs"
    );
    Ok(Outcome::Passed)
}

/// The next async event of `ctx` within `timeout` (`ctx` is non-blocking).
fn next_event(ctx: &Context, timeout: Duration) -> R<Option<rdma::AsyncEvent>> {
    let mut pfd = libc::pollfd {
        fd: ctx.async_event_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    if n < 0 {
        fail!("poll: {}", std::io::Error::last_os_error());
    }
    Ok(ctx.get_async_event()?)
}

pub fn srq_query_limit_event_and_resize(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    ctx.set_async_nonblocking(true)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let srq = SharedReceiveQueue::new(&pd, 16, 2)?;
    // siw has no ibv_query_srq: the size is the one creation granted.
    let query = |srq: &SharedReceiveQueue| -> R<Option<rdma::SrqAttr>> {
        match (srq.query(), env.provider) {
            (Ok(q), _) => Ok(Some(q)),
            (Err(e), Provider::Siw) if e.errno() == libc::EOPNOTSUPP => Ok(None),
            (Err(e), _) => Err(e.into()),
        }
    };
    let first = query(&srq)?;
    check!(
        first.is_some() == (env.provider == Provider::Rxe),
        "ibv_query_srq on {}: {first:?}",
        env.provider.name()
    );
    let size = first.map_or(srq.max_wr(), |q| q.max_wr);
    if let Some(q) = first {
        check!(
            q.max_wr >= 16 && q.max_wr >= srq.max_wr() && q.max_sge >= 2 && q.srq_limit == 0,
            "a new SRQ: {q:?} (granted {})",
            srq.max_wr()
        );
    }
    refused(
        srq.set_limit(size + 1),
        "ibv_modify_srq",
        libc::EINVAL,
        "above the SRQ",
    )?;
    refused(srq.resize(0), "ibv_modify_srq", libc::EINVAL, "at least 1")?;
    srq.set_limit(4)?;
    if let Some(q) = query(&srq)? {
        check!(q.srq_limit == 4, "after set_limit(4): {q:?}");
    }

    let p = RcPair::options()
        .on(&pd)
        .cqe(32)
        .srq_b(&srq)
        .mr_len(8192)
        .build(env)?;
    let (a, cq_a, cq_b, mr) = (&p.qp_a, &p.cq_a, &p.cq_b, &p.mr_b);
    let rs: Vec<_> = (0..8)
        .map(|i| mr.sge(4096 + i * 256..4096 + (i + 1) * 256))
        .collect::<Result<_, _>>()?;
    let mut rwrs: Vec<RecvWr> = rs
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(i as u64, std::slice::from_ref(s)))
        .collect();
    srq.post_recv(&mut rwrs)?;
    mr.write(0, b"limit")?;
    let ss = [mr.sge(0..5)?];
    let send = |i: u64| -> R<()> {
        a.post_send(&mut [SendWr::send(100 + i, &ss).signaled()])?;
        wait(cq_a, 1)?;
        let wcs = wait(cq_b, 1)?;
        check!(wcs[0].opcode() == WcOpcode::Recv, "{wcs:?}");
        Ok(())
    };
    let other = |e: &rdma::AsyncEvent| e.kind() != AsyncEventKind::SrqLimitReached;
    // Four consumed: four remain, not below the limit of 4.
    for i in 0..4 {
        send(i)?;
    }
    let mut seen = Vec::new();
    while let Some(e) = next_event(&ctx, Duration::from_millis(200))? {
        check!(other(&e), "SRQ limit event with 4 receives left: {e:?}");
        seen.push(format!("{e:?}"));
    }
    // The fifth leaves three.
    send(4)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let event = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        check!(
            !left.is_zero(),
            "no SrqLimitReached within 5 s (other events: {seen:?})"
        );
        match next_event(&ctx, left)? {
            Some(e) if !other(&e) => break e,
            Some(e) => seen.push(format!("{e:?}")),
            None => {}
        }
    };
    check!(
        event.element() == AsyncEventElement::Srq(srq.as_raw()),
        "{event:?} names another SRQ than {:?}",
        srq.as_raw()
    );
    drop(event);
    if let Some(after) = query(&srq)? {
        // rxe disarms by zeroing the limit.
        check!(after.srq_limit == 0, "after the limit event: {after:?}");
    }
    // Disarmed: the sixth brings no second event.
    send(5)?;
    if let Some(e) = next_event(&ctx, Duration::from_millis(200))? {
        check!(other(&e), "a second limit event without re-arming: {e:?}");
    }
    match env.provider {
        Provider::Rxe => {
            srq.resize(64)?;
            let q = srq.query()?;
            check!(q.max_wr >= 64, "after a resize to 64: {q:?}");
            // The two receives posted before the resize are still there.
            send(6)?;
            send(7)?;
            Ok(Outcome::Passed)
        }
        Provider::Siw => {
            let e = refused(srq.resize(64), "ibv_modify_srq", libc::EOPNOTSUPP, "")?;
            // The two receives left are still posted.
            send(6)?;
            send(7)?;
            Ok(Outcome::Skipped(format!(
                "siw has no SRQ query or resize: {e} (the limit and its event checked)"
            )))
        }
    }
}

rdma_tests::tests!(
    "srq":
    srq_feeds_two_queue_pairs,
    srq_query_limit_event_and_resize,
);
