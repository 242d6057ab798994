//! Unreliable datagrams: sends through an address handle, the QP's Q_Key,
//! the extended and event-driven paths.

use rdma::{
    AddressHandle, CompletionQueue, InitAttr, ProtectionDomain, QpState, QpType, QueuePair, RecvWr,
    RtsAttr, SendFlags, SendOps, SendWr, WcOpcode,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{self, at_least, open, wait, UdPair, T};

pub fn ud_send_through_address_handle(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    let p = UdPair::options().build(env)?;
    let (cq, a, b, mr, ah, qkey) = (&p.cq, &p.qp_a, &p.qp_b, &p.mr, &p.ah, p.qkey);
    // A UD receive starts with 40 bytes of GRH.
    let rs = [mr.sge(1024..2048)?];
    b.post_recv(&mut [RecvWr::new(1, &rs)])?;
    mr.write(0, b"datagram")?;
    let ss = [mr.sge(0..8)?];
    a.post_send(&mut [SendWr::send(2, &ss).ud(ah, b.qp_num(), qkey).signaled()])?;
    let wcs = wait(cq, 2)?;
    let recv = wcs.iter().find(|w| w.opcode() == WcOpcode::Recv).copied();
    let Some(recv) = recv else {
        fail!("no receive: {wcs:?}")
    };
    check!(
        recv.byte_len() == 48 && recv.has_grh() && recv.src_qp() == a.qp_num(),
        "{recv:?}"
    );
    check!(mr.to_vec(1064..1072)? == b"datagram", "UD payload differs");
    // Reply through an AH built from the receive completion.
    let mut grh = [0u8; 40];
    mr.read(1024, &mut grh)?;
    let back = AddressHandle::from_wc(&p.pd, 1, &recv, &grh)?;
    let rs2 = [mr.sge(2048..3072)?];
    a.post_recv(&mut [RecvWr::new(3, &rs2)])?;
    b.post_send(&mut [SendWr::send(4, &ss)
        .ud(&back, recv.src_qp(), qkey)
        .signaled()])?;
    let wcs = wait(cq, 2)?;
    check!(
        wcs.iter().any(|w| w.wr_id() == 3 && w.byte_len() == 48),
        "reply not received: {wcs:?}"
    );
    Ok(Outcome::Passed)
}

pub fn ud_qp_query_reports_its_qkey(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let qp = QueuePair::builder(&pd, QpType::Ud, &cq).build()?;
    let qkey = 0x8765_4321;
    qp.to_init(&InitAttr {
        qkey,
        pkey_index: 0,
        ..InitAttr::new(1)
    })?;
    let q = qp.query()?;
    check!(
        q.state == QpState::Init && q.qkey == qkey && q.port == 1,
        "{q:?}"
    );
    qp.to_rtr(None)?;
    qp.to_rts(&RtsAttr {
        sq_psn: 0x4242,
        ..RtsAttr::default()
    })?;
    let q = qp.query()?;
    check!(
        q.state == QpState::Rts && q.qkey == qkey && q.sq_psn == 0x4242,
        "{q:?}"
    );
    check!(at_least(q.caps, qp.caps()), "{q:?}");
    Ok(Outcome::Passed)
}

pub fn ud_extended_and_event_driven(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    let ctx = fixtures::open(env)?;
    let pd = rdma::ProtectionDomain::new(&ctx)?;
    let (gid, idx) = fixtures::roce_gid(&ctx, env)?;
    // An address handle without a GRH is refused on RoCE.
    let no_grh = rdma::Path {
        dgid: None,
        dlid: 1,
        ..rdma::Path::to_gid(gid, idx, 1)
    };
    let e = rdma::AddressHandle::new(&pd, &no_grh)
        .err()
        .ok_or("an address handle without a GRH on RoCE")?;
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("GRH"),
        "{e}"
    );

    // UD on an extended QP and CQ, the CQ driven by its completion channel.
    let ch = rdma::CompletionChannel::new(&ctx)?;
    let mut p = UdPair::options()
        .on(&pd)
        .extended_cq()
        .channel(&ch)
        .send_ops(SendOps::SEND | SendOps::SEND_WITH_IMM)
        .build(env)?;
    check!(
        p.qp_a.is_extended() && p.cq.is_extended(),
        "rxe gave no extended QP or CQ"
    );
    let (cq, b, mr, ah, qkey) = (&p.cq, &p.qp_b, &p.mr, &p.ah, p.qkey);
    let rs = [mr.sge(1024..2048)?];
    b.post_recv(&mut [RecvWr::new(1, &rs)])?;
    mr.write(0, b"extended datagram")?;
    let s = mr.sge(0..17)?;
    cq.req_notify(false)?;
    let mut batch = p.qp_a.wr_batch()?;
    batch.send_ud(2, SendFlags::SIGNALED, &s, ah, b.qp_num(), qkey);
    batch.complete()?;

    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + T;
    while seen.len() < 2 {
        // Sleep until the channel reports the CQ, then drain it.
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&ch),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd on the stack, for the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, 10_000) };
        check!(ready == 1, "no completion event within 10 s ({seen:?})");
        check!(cq.get_event()?, "the channel was readable but had no event");
        cq.req_notify(false)?;
        // Drain after arming: what came before the arm raises no event (and
        // rxe before v61 hands out one completion per started poll).
        while let Some(mut poll) = cq.start_poll()? {
            while let Some(c) = poll.next() {
                check!(c.is_success(), "{:?}", c.status());
                seen.push((c.opcode(), c.byte_len(), c.src_qp(), c.qp_num()));
            }
        }
        check!(
            std::time::Instant::now() < deadline,
            "completions missing: {seen:?}"
        );
    }
    seen.sort_by_key(|s| s.0 == WcOpcode::Recv);
    check!(
        seen[0].0 == WcOpcode::Send
            && seen[1] == (WcOpcode::Recv, 40 + 17, p.qp_a.qp_num(), b.qp_num()),
        "completions {seen:?}"
    );
    check!(
        mr.to_vec(1064..1081)? == b"extended datagram",
        "the datagram differs"
    );
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "ud":
    ud_send_through_address_handle,
    ud_qp_query_reports_its_qkey,
    ud_extended_and_event_driven,
);
