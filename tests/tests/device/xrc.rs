//! XRC on the soft devices: neither has XRC domains, XRC SRQs or XRC QPs,
//! and each refusal is the typed "not supported" error with nothing left
//! behind; the basic extended SRQ (`ibv_create_srq_ex`) runs on both, and
//! the XRC setter of a batch is refused on a QP that is not XRC.

use std::os::fd::AsFd;

use rdma::{
    CompletionQueue, MemoryRegion, ProtectionDomain, QpType, QueuePair, RecvWr, SendFlags, SendOps,
    SendWr, SharedReceiveQueue, WcOpcode, XrcDomain, XrcdOpen,
};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{self, open, refused, wait, ACCESS};
use crate::unsupported::{no_leak, not_supported, said};

pub fn xrc_domain_is_not_supported_and_leaves_nothing(env: &TestEnv) -> TestResult {
    let errno = no_leak(env, || {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let errno = not_supported(env, XrcDomain::new(&ctx), "ibv_open_xrcd")?;
        // A domain tied to a file: the same answer, for each way of opening.
        let dir = std::env::temp_dir().join(format!("rdma-xrcd-{}", std::process::id()));
        let file = std::fs::File::create(&dir)?;
        for how in [XrcdOpen::Create, XrcdOpen::CreateNew, XrcdOpen::Existing] {
            let e = not_supported(
                env,
                XrcDomain::open(&ctx, file.as_fd(), how),
                "ibv_open_xrcd",
            )?;
            check!(e == errno, "{how:?}: {e}, without a file: {errno}");
        }
        drop(file);
        std::fs::remove_file(&dir)?;
        // The context and PD still work after the refusals.
        let _mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
        Ok(errno)
    })?;
    Ok(Outcome::Skipped(format!(
        "no XRC on {}: {} (typed error checked, no kernel object left)",
        env.device,
        said(env, "ibv_open_xrcd", errno)
    )))
}

pub fn xrc_send_qp_is_refused(env: &TestEnv) -> TestResult {
    let seen = no_leak(env, || {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        let mut seen = Vec::new();
        for ops in [SendOps::empty(), SendOps::SEND] {
            let r = QueuePair::builder(&pd, QpType::XrcSend, &cq)
                .send_ops(ops)
                .build();
            let e = match r {
                Ok(qp) => rdma_tests::fail!("an XRC send QP on {}: {qp:?}", env.device),
                Err(e) => e,
            };
            check!(
                e.is_unsupported() || e.errno() == libc::EINVAL,
                "XRC send QP ({ops:?}): {e}"
            );
            seen.push(format!("{}: {}", e.verb(), e.io_error()));
        }
        // The CQ and PD serve an RC QP as before.
        let _qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
        Ok(seen)
    })?;
    Ok(Outcome::Skipped(format!(
        "no XRC send QPs on {}: {} (no kernel object left)",
        env.device,
        seen.join("; ")
    )))
}

pub fn srq_ex_basic_receives_and_tells_its_number(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    refused(
        SharedReceiveQueue::builder(&pd).max_wr(0).build(),
        "ibv_create_srq_ex",
        libc::EINVAL,
        "at least 1",
    )?;
    refused(
        SharedReceiveQueue::builder(&pd).max_sge(0).build(),
        "ibv_create_srq_ex",
        libc::EINVAL,
        "at least 1",
    )?;
    let srq = SharedReceiveQueue::builder(&pd)
        .max_wr(16)
        .max_sge(1)
        .build()?;
    check!(srq.max_wr() >= 16, "granted {}", srq.max_wr());
    let number = match srq.srq_num() {
        Ok(n) => format!("ibv_get_srq_num gives {n}"),
        Err(e) => {
            let errno = not_supported(env, Err::<(), _>(e), "ibv_get_srq_num")?;
            said(env, "ibv_get_srq_num", errno)
        }
    };
    if env.provider == Provider::Siw {
        // Posting works; a receive needs an RC connection through rdma_cm.
        let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
        let s = [mr.sge(0..64)?];
        srq.post_recv(&mut [RecvWr::new(1, &s)])?;
        return Ok(Outcome::Skipped(format!(
            "the builder's SRQ made and posted to on siw; a receive through it needs two hand-connected QPs, which iWARP has not; {number}"
        )));
    }
    // A SEND between two RC QPs lands in the builder's SRQ.
    let cq = CompletionQueue::new(&ctx, 16)?;
    let a = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    let b = QueuePair::builder(&pd, QpType::Rc, &cq).srq(&srq).build()?;
    let _c = fixtures::connect_rc(env, &ctx, &a, &b)?;
    let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let r = [mr.sge(2048..2112)?];
    srq.post_recv(&mut [RecvWr::new(7, &r)])?;
    mr.write(0, b"through srq_ex")?;
    let s = [mr.sge(0..14)?];
    a.post_send(&mut [SendWr::send(8, &s).signaled()])?;
    let wcs = wait(&cq, 2)?;
    let recv = wcs.iter().find(|w| w.opcode() == WcOpcode::Recv);
    check!(
        recv.is_some_and(|w| w.is_success() && w.wr_id() == 7 && w.qp_num() == b.qp_num()),
        "{wcs:?}"
    );
    check!(mr.to_vec(2048..2062)? == b"through srq_ex", "data differs");
    println!("    {}: {number}", env.device);
    Ok(Outcome::Passed)
}

pub fn xrc_srqn_is_refused_on_a_qp_that_is_not_xrc(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let mut qp = QueuePair::builder(&pd, QpType::Rc, &cq)
        .send_ops(SendOps::SEND)
        .build()?;
    if !qp.is_extended() {
        return Ok(Outcome::Skipped(format!(
            "{} has no extended QPs (ibv_create_qp_ex), so no batch to set an SRQ number in",
            env.device
        )));
    }
    let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let s = mr.sge(0..8)?;
    // After a request of an RC QP.
    let mut b = qp.wr_batch()?;
    b.send(1, SendFlags::SIGNALED, &s).set_xrc_srqn(5);
    refused(
        b.complete(),
        "ibv_wr_set_xrc_srqn",
        libc::EINVAL,
        "request 0",
    )?;
    // Before any request.
    let mut b = qp.wr_batch()?;
    b.set_xrc_srqn(5).send(2, SendFlags::SIGNALED, &s);
    refused(
        b.complete(),
        "ibv_wr_set_xrc_srqn",
        libc::EINVAL,
        "XRC send QP",
    )?;
    // Nothing was posted: the QP (still RESET) has no completion.
    let mut wcs = [rdma::WorkCompletion::ZERO; 4];
    let n = cq.poll(&mut wcs)?.len();
    check!(n == 0, "{n} completions of refused batches");
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "xrc":
    xrc_domain_is_not_supported_and_leaves_nothing,
    xrc_send_qp_is_refused,
    srq_ex_basic_receives_and_tells_its_number,
    xrc_srqn_is_refused_on_a_qp_that_is_not_xrc,
);
