//! Queue pairs: RC and UC sends, writes, reads, immediates and atomics, the
//! extended post batch, receive-queue edges, and what a query reports.

use std::time::{Duration, Instant};

use rdma::{
    AccessFlags, CompletionQueue, InitAttr, MemoryRegion, MemoryWindow, Mtu, MwType, Path,
    ProtectionDomain, QpCaps, QpState, QpType, QueuePair, RecvWr, RemoteMemory, RtrAttr, RtsAttr,
    SendFlags, SendOps, SendWr, WcOpcode, WorkCompletion,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{
    self, at_least, completion, open, roce_gid, send_one, wait, RcPair, ACCESS, R, TIMEOUT,
};

/// A list prepared once (`QueuePair::prepare_send`) is posted three times,
/// with new request ids and new data each time, and every post lands; an
/// empty list and a request index past the end are typed errors.
pub fn prepared_send_posts_again(env: &TestEnv) -> TestResult {
    let p = RcPair::new(env)?;
    match p.qp_a.prepare_send(&mut []) {
        Err(e) if e.errno() == libc::EINVAL => {}
        other => fail!("preparing an empty list: {:?}", other.map(|_| ())),
    }
    let sges = [p.mr_a.sge(0..512)?, p.mr_a.sge(512..1024)?];
    let mut list = [
        SendWr::rdma_write(0, &sges[..1], p.mr_b.remote(0..512)?).signaled(),
        SendWr::rdma_write(0, &sges[1..], p.mr_b.remote(4096..4608)?).signaled(),
    ];
    let mut prepared = p.qp_a.prepare_send(&mut list)?;
    check!(prepared.len() == 2);
    check!(
        prepared.set_wr_id(2, 1).is_err(),
        "request 2 of a list of 2 was accepted"
    );
    for round in 0..3u64 {
        let fill: Vec<u8> = (0..1024u32).map(|i| (i as u64 * 3 + round) as u8).collect();
        p.mr_a.write(0, &fill)?;
        prepared.set_wr_id(0, 100 + round * 2)?;
        prepared.set_wr_id(1, 101 + round * 2)?;
        prepared.post()?;
        let ids: Vec<u64> = wait(&p.cq_a, 2)?.iter().map(|wc| wc.wr_id()).collect();
        check!(
            ids == [100 + round * 2, 101 + round * 2],
            "round {round}: completions {ids:?}"
        );
        check!(
            p.mr_b.to_vec(0..512)? == fill[..512],
            "round {round}: first WRITE differs"
        );
        check!(
            p.mr_b.to_vec(4096..4608)? == fill[512..],
            "round {round}: second WRITE differs"
        );
    }
    Ok(Outcome::Passed)
}

pub fn rc_send_write_read_and_list(env: &TestEnv) -> TestResult {
    let p = RcPair::options()
        .caps(QpCaps {
            max_inline_data: 64,
            max_send_sge: 2,
            ..QpCaps::default()
        })
        .build(env)?;
    let msg = b"hello over RC through the safe API";
    p.mr_a.write(0, msg)?;
    let recv_sge = [p.mr_b.sge(0..256)?];
    p.qp_b.post_recv(&mut [RecvWr::new(1, &recv_sge)])?;
    let send_sge = [p.mr_a.sge(0..msg.len())?];
    p.qp_a
        .post_send(&mut [SendWr::send(2, &send_sge).signaled()])?;
    check!(wait(&p.cq_a, 1)?[0].opcode() == WcOpcode::Send);
    let wc = wait(&p.cq_b, 1)?[0];
    check!(
        wc.opcode() == WcOpcode::Recv && wc.byte_len() == msg.len() as u32,
        "{wc:?}"
    );
    check!(p.mr_b.to_vec(0..msg.len())? == msg, "SEND data differs");

    // RDMA WRITE into b, then RDMA READ it back into a at another offset.
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
    p.mr_a.write(4096, &data)?;
    let w_sge = [p.mr_a.sge(4096..5096)?];
    p.qp_a
        .post_send(&mut [SendWr::rdma_write(3, &w_sge, p.mr_b.remote(8192..9192)?).signaled()])?;
    check!(wait(&p.cq_a, 1)?[0].opcode() == WcOpcode::RdmaWrite);
    check!(p.mr_b.to_vec(8192..9192)? == data, "WRITE data differs");
    let r_sge = [p.mr_a.sge(12288..13288)?];
    p.qp_a
        .post_send(&mut [SendWr::rdma_read(4, &r_sge, p.mr_b.remote(8192..9192)?).signaled()])?;
    let wc = wait(&p.cq_a, 1)?[0];
    check!(wc.opcode() == WcOpcode::RdmaRead, "{wc:?}");
    check!(p.mr_a.to_vec(12288..13288)? == data, "READ data differs");

    // Inline SEND from ordinary memory, and a list of three requests in one post.
    let recv_sges: Vec<_> = (0..3)
        .map(|i| p.mr_b.sge(i * 256..(i + 1) * 256))
        .collect::<Result<_, _>>()?;
    let mut rwrs: Vec<RecvWr> = recv_sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(10 + i as u64, std::slice::from_ref(s)))
        .collect();
    let inline_msg = b"inline bytes, no memory region";
    let mut rwr4 = [RecvWr::new(20, &recv_sge)];
    p.qp_b.post_recv(&mut rwr4)?;
    p.qp_a
        .post_send(&mut [SendWr::send_inline(21, inline_msg).signaled()])?;
    wait(&p.cq_a, 1)?;
    let wc = wait(&p.cq_b, 1)?[0];
    check!(
        wc.wr_id() == 20 && wc.byte_len() == inline_msg.len() as u32,
        "{wc:?}"
    );
    check!(
        p.mr_b.to_vec(0..inline_msg.len())? == inline_msg,
        "inline data differs"
    );

    p.qp_b.post_recv(&mut rwrs)?;
    for i in 0..3u8 {
        p.mr_a
            .fill(usize::from(i) * 100..usize::from(i) * 100 + 100, b'a' + i)?;
    }
    let s: Vec<_> = (0..3)
        .map(|i| p.mr_a.sge(i * 100..i * 100 + 100))
        .collect::<Result<_, _>>()?;
    let mut list: Vec<SendWr> = s
        .iter()
        .enumerate()
        .map(|(i, sge)| SendWr::send(30 + i as u64, std::slice::from_ref(sge)).signaled())
        .collect();
    p.qp_a.post_send(&mut list)?;
    let sent: Vec<u64> = wait(&p.cq_a, 3)?.iter().map(|w| w.wr_id()).collect();
    check!(
        sent == [30, 31, 32],
        "send completions out of order: {sent:?}"
    );
    let got: Vec<u64> = wait(&p.cq_b, 3)?.iter().map(|w| w.wr_id()).collect();
    check!(
        got == [10, 11, 12],
        "receive completions out of order: {got:?}"
    );
    for i in 0..3usize {
        check!(
            p.mr_b.to_vec(i * 256..i * 256 + 100)? == vec![b'a' + i as u8; 100],
            "list message {i} differs"
        );
    }
    let _ = (&p.ctx, &p.pd);
    Ok(Outcome::Passed)
}

pub fn rc_immediate_data_and_atomics(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped(
            "iWARP (siw) has no immediate data and no atomics".into(),
        ));
    }
    let p = RcPair::new(env)?;
    let rs = [p.mr_b.sge(0..64)?];
    p.qp_b
        .post_recv(&mut [RecvWr::new(1, &rs), RecvWr::new(2, &rs)])?;
    let ss = [p.mr_a.sge(0..8)?];
    p.qp_a
        .post_send(&mut [SendWr::send_with_imm(3, &ss, 0xdead_beef).signaled()])?;
    wait(&p.cq_a, 1)?;
    let wc = wait(&p.cq_b, 1)?[0];
    check!(wc.imm_data() == Some(0xdead_beef), "SEND imm: {wc:?}");
    let ws = [p.mr_a.sge(0..16)?];
    p.qp_a.post_send(&mut [
        SendWr::rdma_write_with_imm(4, &ws, p.mr_b.remote(1024..1040)?, 42).signaled(),
    ])?;
    wait(&p.cq_a, 1)?;
    let wc = wait(&p.cq_b, 1)?[0];
    check!(
        wc.opcode() == WcOpcode::RecvRdmaWithImm && wc.imm_data() == Some(42),
        "WRITE imm: {wc:?}"
    );

    p.mr_b.write(2048, &100u64.to_ne_bytes())?;
    let res = [p.mr_a.sge(64..72)?];
    let target = p.mr_b.remote(2048..2056)?;
    p.qp_a
        .post_send(&mut [SendWr::atomic_fetch_add(5, &res, target, 5).signaled()])?;
    check!(wait(&p.cq_a, 1)?[0].opcode() == WcOpcode::FetchAdd);
    check!(
        p.mr_a.to_vec(64..72)? == 100u64.to_ne_bytes(),
        "fetch-add returned the wrong old value"
    );
    check!(
        p.mr_b.to_vec(2048..2056)? == 105u64.to_ne_bytes(),
        "fetch-add did not add"
    );
    p.qp_a
        .post_send(&mut [SendWr::atomic_cmp_swp(6, &res, target, 105, 7).signaled()])?;
    check!(wait(&p.cq_a, 1)?[0].opcode() == WcOpcode::CompareSwap);
    check!(
        p.mr_b.to_vec(2048..2056)? == 7u64.to_ne_bytes(),
        "compare-swap did not swap"
    );
    Ok(Outcome::Passed)
}

pub fn uc_send_and_write(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UC queue pairs".into()));
    }
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let a = QueuePair::builder(&pd, QpType::Uc, &cq).build()?;
    let b = QueuePair::builder(&pd, QpType::Uc, &cq).build()?;
    let mr = MemoryRegion::new(
        &pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )?;
    let (gid, idx) = roce_gid(&ctx, env)?;
    for (qp, remote) in [(&a, b.qp_num()), (&b, a.qp_num())] {
        qp.to_init(&InitAttr {
            access: AccessFlags::REMOTE_WRITE,
            ..InitAttr::new(1)
        })?;
        qp.to_rtr(Some(&RtrAttr {
            remote_qpn: remote,
            rq_psn: 0,
            mtu: Mtu::Mtu1024,
            path: Path::to_gid(gid, idx, 1),
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
        }))?;
        qp.to_rts(&RtsAttr::default())?;
    }
    check!(a.state()? == QpState::Rts && b.state()? == QpState::Rts);
    mr.write(0, b"unreliable connected")?;
    let rs = [mr.sge(1024..2048)?];
    b.post_recv(&mut [RecvWr::new(1, &rs)])?;
    let ss = [mr.sge(0..20)?];
    a.post_send(&mut [SendWr::send(2, &ss).signaled()])?;
    let wcs = wait(&cq, 2)?;
    check!(
        wcs.iter()
            .any(|w| w.opcode() == WcOpcode::Recv && w.byte_len() == 20),
        "{wcs:?}"
    );
    check!(
        mr.to_vec(1024..1044)? == b"unreliable connected",
        "UC SEND data differs"
    );
    a.post_send(&mut [SendWr::rdma_write(3, &ss, mr.remote(3000..3020)?).signaled()])?;
    check!(wait(&cq, 1)?[0].opcode() == WcOpcode::RdmaWrite);
    // UC has no acknowledgements: the write is complete at the sender when
    // sent; wait (bounded) until the bytes land.
    let start = Instant::now();
    while mr.to_vec(3000..3020)? != b"unreliable connected" {
        check!(start.elapsed() < TIMEOUT, "UC WRITE data never arrived");
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(Outcome::Passed)
}

/// The attributes the rxe pair of [`qp_query_reports_what_was_set`] is
/// connected with: none of them a default, each side's PSNs its own.
const RTS: RtsAttr = RtsAttr {
    sq_psn: 0x12_3456,
    timeout: 17,
    retry_cnt: 5,
    rnr_retry: 6,
    max_rd_atomic: 2,
};

const PEER_SQ_PSN: u32 = 0x65_4321;

const MIN_RNR_TIMER: u8 = 9;

const MAX_DEST_RD_ATOMIC: u8 = 3;

const CAPS: QpCaps = QpCaps {
    max_send_wr: 32,
    max_recv_wr: 16,
    max_send_sge: 2,
    max_recv_sge: 2,
    max_inline_data: 64,
};

/// Connects `a` and `b` by hand (RoCE), with [`RTS`] and distinct PSNs each
/// way, `mtu` and `path`.
fn connect_by_hand(a: &QueuePair, b: &QueuePair, mtu: Mtu, path: Path) -> R<()> {
    for (qp, remote, rq_psn, sq_psn) in [
        (a, b.qp_num(), PEER_SQ_PSN, RTS.sq_psn),
        (b, a.qp_num(), RTS.sq_psn, PEER_SQ_PSN),
    ] {
        qp.to_init(&InitAttr {
            access: ACCESS,
            ..InitAttr::new(1)
        })?;
        qp.to_rtr(Some(&RtrAttr {
            remote_qpn: remote,
            rq_psn,
            mtu,
            path,
            max_dest_rd_atomic: MAX_DEST_RD_ATOMIC,
            min_rnr_timer: MIN_RNR_TIMER,
        }))?;
        qp.to_rts(&RtsAttr { sq_psn, ..RTS })?;
    }
    Ok(())
}

pub fn qp_query_reports_what_was_set(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq_a = CompletionQueue::new(&ctx, 64)?;
    let cq_b = CompletionQueue::new(&ctx, 64)?;
    let build = |cq| {
        QueuePair::builder(&pd, QpType::Rc, cq)
            .caps(CAPS)
            .sq_sig_all(true)
            .build()
    };
    let a = build(&cq_a)?;
    let b = build(&cq_b)?;
    let mr_a = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let mr_b = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let report = fixtures::state_report(env, &pd, &cq_a)?;

    // A new QP: its state and the queue sizes granted at creation.
    let q = a.query()?;
    check!(q.state == report.new_qp(), "a new QP reports {q:?}");
    check!(
        at_least(q.caps, a.caps()),
        "caps {:?}, granted {:?}",
        q.caps,
        a.caps()
    );
    check!(
        q.caps.max_send_wr >= CAPS.max_send_wr
            && q.caps.max_recv_wr >= CAPS.max_recv_wr
            && q.caps.max_send_sge >= CAPS.max_send_sge
            && q.caps.max_recv_sge >= CAPS.max_recv_sge
            && q.caps.max_inline_data >= CAPS.max_inline_data,
        "caps {:?} below those asked, {CAPS:?}",
        q.caps
    );

    let _cm = match env.provider {
        Provider::Rxe => {
            let (gid, idx) = fixtures::roce_gid(&ctx, env)?;
            let mtu = Mtu::from_bytes(ctx.query_port(1)?.active_mtu()).unwrap_or(Mtu::Mtu1024);
            let path = Path::to_gid(gid, idx, 1);
            connect_by_hand(&a, &b, mtu, path)?;
            for (qp, peer, sq_psn, rq_psn) in [
                (&a, &b, RTS.sq_psn, PEER_SQ_PSN),
                (&b, &a, PEER_SQ_PSN, RTS.sq_psn),
            ] {
                let q = qp.query()?;
                check!(q.state == QpState::Rts, "{q:?}");
                check!(
                    at_least(q.caps, qp.caps()),
                    "caps {:?} after connecting",
                    q.caps
                );
                check!(
                    q.sq_psn == sq_psn && q.rq_psn == rq_psn,
                    "PSNs sq {:#x} rq {:#x}, set {sq_psn:#x} {rq_psn:#x}",
                    q.sq_psn,
                    q.rq_psn
                );
                check!(
                    q.path_mtu == Some(mtu),
                    "path MTU {:?}, set {mtu:?}",
                    q.path_mtu
                );
                check!(q.dest_qp_num == peer.qp_num(), "dest QP {}", q.dest_qp_num);
                check!(
                    (q.timeout, q.retry_cnt, q.rnr_retry)
                        == (RTS.timeout, RTS.retry_cnt, RTS.rnr_retry),
                    "timeout {} retry {} rnr retry {}, set {RTS:?}",
                    q.timeout,
                    q.retry_cnt,
                    q.rnr_retry
                );
                check!(
                    q.min_rnr_timer == MIN_RNR_TIMER,
                    "min RNR timer {}",
                    q.min_rnr_timer
                );
                // rxe rounds both depths up to a power of two (3 -> 4).
                check!(
                    q.max_rd_atomic == RTS.max_rd_atomic.next_power_of_two()
                        && q.max_dest_rd_atomic == MAX_DEST_RD_ATOMIC.next_power_of_two(),
                    "rd atomic {} / dest {}, set {} / {MAX_DEST_RD_ATOMIC}",
                    q.max_rd_atomic,
                    q.max_dest_rd_atomic,
                    RTS.max_rd_atomic
                );
                check!(
                    q.port == 1 && q.pkey_index == 0,
                    "port {} pkey index {}",
                    q.port,
                    q.pkey_index
                );
                check!(q.access == ACCESS, "access {:?}, set {ACCESS:?}", q.access);
                check!(
                    q.path.dgid == Some(gid) && q.path.sgid_index == idx && q.path.port == 1,
                    "path {:?}, set {path:?}",
                    q.path
                );
                check!(q.sq_sig_all, "sq_sig_all lost");
            }
            None
        }
        Provider::Siw => {
            let conn = fixtures::connect_rc(env, &ctx, &a, &b)?;
            for qp in [&a, &b] {
                let q = qp.query()?;
                // What siw reports, for the table in QpAttr's docs.
                eprintln!("siw QP {} connected by the CM: {q:?}", qp.qp_num());
                let want = match report {
                    fixtures::StateReport::Unset => QpState::Reset,
                    _ => QpState::Rts,
                };
                check!(q.state == want, "a connected siw QP reports {:?}", q.state);
                check!(
                    at_least(q.caps, qp.caps()),
                    "caps {:?}, granted {:?}",
                    q.caps,
                    qp.caps()
                );
                // What siw of Linux 6.1 reports (QpAttr's table): the
                // netdev's MTU (1500) as an IB MTU, its access rights
                // whatever was set, the CM's depths (4 and 4, fixtures::iwarp).
                check!(
                    q.path_mtu == Some(Mtu::Mtu1024),
                    "path MTU {:?}",
                    q.path_mtu
                );
                check!(
                    q.access
                        == AccessFlags::LOCAL_WRITE
                            | AccessFlags::REMOTE_WRITE
                            | AccessFlags::REMOTE_READ,
                    "access {:?}",
                    q.access
                );
                check!(
                    (q.max_rd_atomic, q.max_dest_rd_atomic) == (4, 4),
                    "rd atomic {} / dest {}",
                    q.max_rd_atomic,
                    q.max_dest_rd_atomic
                );
                check!(q.sq_sig_all, "sq_sig_all lost");
                check!(
                    (q.qkey, q.sq_psn, q.rq_psn, q.dest_qp_num, q.port) == (0, 0, 0, 0, 0),
                    "siw reports connection fields it does not keep: {q:?}"
                );
            }
            conn
        }
    };
    send_one(
        (&a, &cq_a, &mr_a),
        (&b, &cq_b, &mr_b),
        b"queried and still working",
    )?;
    a.set_state(QpState::Error)?;
    let q = a.query()?;
    check!(
        q.state == QpState::Error || report == fixtures::StateReport::Unset,
        "after ERROR: {:?}",
        q.state
    );
    Ok(Outcome::Passed)
}

pub fn receive_queue_edges_and_zero_length(env: &TestEnv) -> TestResult {
    let ctx = fixtures::open(env)?;
    let pd = rdma::ProtectionDomain::new(&ctx)?;
    let cq = rdma::CompletionQueue::new(&ctx, 64)?;
    let caps = QpCaps {
        max_recv_wr: 4,
        ..QpCaps::default()
    };
    let qp = QueuePair::builder(&pd, rdma::QpType::Rc, &cq)
        .caps(caps)
        .build()?;
    let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let depth = qp.caps().max_recv_wr as usize;
    let s = [mr.sge(0..64)?];

    // A receive on a QP in RESET: what the provider does, typed.
    let in_reset = qp.post_recv(&mut [RecvWr::new(0, &s)]);
    let mut posted = match &in_reset {
        Ok(()) => 1,
        Err(e) => {
            check!(e.errno() == libc::EINVAL, "a receive in RESET: {e}");
            0
        }
    };
    if env.provider == Provider::Rxe {
        // In INIT every provider takes receives (siw's QPs reach INIT only
        // through the CM, and take them in RESET).
        qp.to_init(&rdma::InitAttr {
            access: ACCESS,
            ..rdma::InitAttr::new(1)
        })?;
    }
    // Fill the queue: it holds at least what was granted (rxe: its whole
    // ring, more); the request past it is refused, typed and named.
    let refused = loop {
        match qp.post_recv(&mut [RecvWr::new(posted as u64, &s)]) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
        check!(
            posted <= 64 * depth,
            "{posted} receives taken, {depth} granted"
        );
    };
    check!(
        posted >= depth && refused.errno() == libc::ENOMEM,
        "receive {posted} of a queue of {depth}: {refused}"
    );
    let e = qp
        .post_recv(&mut [RecvWr::new(99, &s), RecvWr::new(100, &s)])
        .err()
        .ok_or("a list past a full queue was taken")?;
    check!(
        e.errno() == libc::ENOMEM && e.to_string().contains("work request 0 "),
        "the error does not name the first refused request: {e}"
    );
    drop(qp);
    let in_reset = match in_reset {
        Ok(()) => "taken",
        Err(_) => "refused (EINVAL)",
    };

    // Zero-length SEND, RDMA WRITE and READ complete with 0 bytes.
    let p = RcPair::new(env)?;
    let rs = [p.mr_b.sge(0..64)?];
    p.qp_b.post_recv(&mut [RecvWr::new(20, &rs)])?;
    p.qp_a.post_send(&mut [SendWr::send(21, &[]).signaled()])?;
    let wc = completion(&p.cq_a)?;
    check!(wc.is_success(), "a zero-length SEND: {wc:?}");
    let wc = completion(&p.cq_b)?;
    check!(
        wc.is_success() && wc.opcode() == WcOpcode::Recv && wc.byte_len() == 0,
        "the receive of a zero-length SEND: {wc:?}"
    );
    let target = p.mr_b.remote(0..0)?;
    p.qp_a
        .post_send(&mut [SendWr::rdma_write(22, &[], target).signaled()])?;
    let wc = completion(&p.cq_a)?;
    check!(
        wc.is_success() && wc.opcode() == WcOpcode::RdmaWrite,
        "a zero-length WRITE: {wc:?}"
    );
    let read = match p
        .qp_a
        .post_send(&mut [SendWr::rdma_read(23, &[], target).signaled()])
    {
        Ok(()) => {
            let wc = completion(&p.cq_a)?;
            check!(
                wc.is_success() && wc.opcode() == WcOpcode::RdmaRead,
                "a zero-length READ: {wc:?}"
            );
            "completes"
        }
        Err(e) => {
            check!(e.errno() == libc::EINVAL, "a zero-length READ: {e}");
            "is refused (EINVAL)"
        }
    };
    println!(
        "    {}: a receive in RESET {in_reset}; {posted} receives held, {depth} granted; a zero-length READ {read}",
        env.device
    );
    Ok(Outcome::Passed)
}

pub fn extended_batch_every_operation(env: &TestEnv) -> TestResult {
    let caps = QpCaps {
        max_send_sge: 2,
        max_inline_data: 64,
        ..QpCaps::default()
    };
    // Every operation but those a device offers only with a capability no
    // soft device has on every kernel (TSO, atomic write, flush): the
    // `wr_ext::` tests run those where the device has them.
    #[allow(unused_mut)]
    let mut ops = SendOps::all() - SendOps::TSO - SendOps::ATOMIC_WRITE;
    #[cfg(has_ibv_wr_flush)]
    {
        ops -= SendOps::FLUSH;
    }
    let mut p = RcPair::options()
        .send_ops(ops)
        .extended_cqs()
        .caps(caps)
        .build(env)?;
    if !p.qp_a.is_extended() {
        return Ok(Outcome::Skipped(format!(
            "{} has no extended QP (ibv_create_qp_ex): the builder fell back to the classic one",
            env.provider.name()
        )));
    }
    let mr = MemoryRegion::new(&p.pd, 4096, ACCESS | AccessFlags::MW_BIND)?;
    let mut mw = MemoryWindow::new(&p.pd, MwType::Type2)?;
    let window = RemoteMemory {
        rkey: rdma::inc_rkey(mw.rkey()),
        ..mr.remote(0..1024)?
    };
    let mut bind = p.qp_b.wr_batch()?;
    bind.bind_mw(
        40,
        SendFlags::SIGNALED,
        &mut mw,
        window.rkey,
        &mr,
        0..1024,
        AccessFlags::REMOTE_WRITE,
    );
    bind.complete()?;
    let wc = completion(&p.cq_b)?;
    check!(
        wc.is_success() && wc.opcode() == WcOpcode::BindMw,
        "a batch's bind: {wc:?}"
    );

    for i in 0..5u64 {
        let rs = [p.mr_b.sge(i as usize * 64..i as usize * 64 + 64)?];
        p.qp_b.post_recv(&mut [RecvWr::new(10 + i, &rs)])?;
    }
    p.mr_a.write(0, b"abcdefgh")?;
    p.mr_a.write(8, b"12345678")?;
    p.mr_b.write(2048, &100u64.to_ne_bytes())?;
    let s = p.mr_a.sge(0..8)?;
    let two = [p.mr_a.sge(0..4)?, p.mr_a.sge(8..12)?];
    let (add_res, swap_res) = (p.mr_a.sge(64..72)?, p.mr_a.sge(72..80)?);
    let target = p.mr_b.remote(2048..2056)?;
    let f = SendFlags::SIGNALED;
    let mut batch = p.qp_a.wr_batch()?;
    batch
        .send_imm(1, f, &s, 0x1234)
        .rdma_write_imm(2, f, &s, p.mr_b.remote(1024..1032)?, 77)
        .atomic_fetch_add(3, f, &add_res, target, 5)
        .atomic_cmp_swp(4, f, &swap_res, target, 105, 9)
        .send(5, f, &s)
        .set_sge_list(&two)
        .send_inline(6, f, b"inline!")
        .rdma_write_inline(7, f, b"abcdefgh", window.slice(100, 8)?)
        .send_inv(8, f, &s, window.rkey);
    batch.complete()?;

    let sent: Vec<_> = fixtures::wait(&p.cq_a, 8)?
        .iter()
        .map(|c| (c.wr_id(), c.opcode()))
        .collect();
    let want = [
        (1, WcOpcode::Send),
        (2, WcOpcode::RdmaWrite),
        (3, WcOpcode::FetchAdd),
        (4, WcOpcode::CompareSwap),
        (5, WcOpcode::Send),
        (6, WcOpcode::Send),
        (7, WcOpcode::RdmaWrite),
        (8, WcOpcode::Send),
    ];
    check!(sent == want, "the batch's completions {sent:?}");
    let got = fixtures::wait(&p.cq_b, 5)?;
    let imm: Vec<_> = got.iter().map(|c| c.imm_data()).collect();
    check!(
        imm == [Some(0x1234), Some(77), None, None, None],
        "immediate data {imm:?}"
    );
    check!(
        got[1].opcode() == WcOpcode::RecvRdmaWithImm,
        "write with immediate: {:?}",
        got[1]
    );
    // As in `memory_windows_revoked_every_way`: rxe of 6.1 names no key.
    check!(
        got[4].invalidated_rkey().is_none_or(|k| k == window.rkey),
        "send with invalidate: {:?}, flags {:#x}",
        got[4],
        got[4].wc_flags()
    );
    let lens: Vec<_> = got.iter().map(|c| c.byte_len()).collect();
    // A write with immediate reports the bytes written.
    check!(lens == [8, 8, 8, 7, 8], "received lengths {lens:?}");
    check!(p.mr_b.to_vec(0..8)? == b"abcdefgh", "send with immediate");
    check!(
        p.mr_b.to_vec(1024..1032)? == b"abcdefgh",
        "write with immediate"
    );
    check!(
        p.mr_b.to_vec(128..136)? == b"abcd1234",
        "the SGE list's send"
    );
    check!(p.mr_b.to_vec(192..199)? == b"inline!", "the inline send");
    check!(
        mr.to_vec(100..108)? == b"abcdefgh",
        "the write through the window"
    );
    check!(
        p.mr_a.to_vec(64..72)? == 100u64.to_ne_bytes()
            && p.mr_a.to_vec(72..80)? == 105u64.to_ne_bytes()
            && p.mr_b.to_vec(2048..2056)? == 9u64.to_ne_bytes(),
        "the atomics"
    );

    // The window the peer invalidated binds again (the batch keeps its key
    // current), and a local invalidate in the same batch ends that binding.
    let state = p.qp_b.query()?.state;
    check!(
        state == rdma::QpState::Rts,
        "the receiving QP is {state:?} after the batch"
    );
    check!(
        mw.rkey() == window.rkey,
        "the batch left the window's key behind"
    );
    let key2 = rdma::inc_rkey(mw.rkey());
    let mut b = p.qp_b.wr_batch()?;
    b.bind_mw(41, f, &mut mw, key2, &mr, 0..64, AccessFlags::REMOTE_WRITE)
        .local_inv(42, f, key2);
    b.complete()?;
    let ops: Vec<_> = fixtures::wait(&p.cq_b, 2)?
        .iter()
        .map(|c| c.opcode())
        .collect();
    check!(
        ops == [WcOpcode::BindMw, WcOpcode::LocalInvalidate],
        "{ops:?}"
    );

    // SGE lists of different lengths: sent whole, or refused where rxe's
    // library miscounts them (before rdma-core v64).
    let rs = [p.mr_b.sge(512..576)?];
    p.qp_b.post_recv(&mut [RecvWr::new(30, &rs)])?;
    let unequal = [p.mr_a.sge(0..4)?, p.mr_a.sge(8..14)?];
    let mut b = p.qp_a.wr_batch()?;
    b.send(31, f, &s).set_sge_list(&unequal);
    match b.complete() {
        Ok(()) => {
            check!(completion(&p.cq_a)?.is_success(), "the unequal list's send");
            let wc = completion(&p.cq_b)?.result()?;
            check!(
                wc.byte_len() == 10 && p.mr_b.to_vec(512..522)? == b"abcd123456",
                "an unequal SGE list arrived as {:?}",
                p.mr_b.to_vec(512..512 + wc.byte_len() as usize)?
            );
        }
        Err(e) => check!(
            e.errno() == libc::EOPNOTSUPP && e.to_string().contains("v64"),
            "{e}"
        ),
    }

    // Refused before the provider, naming the request; nothing posted.
    let mut b = p.qp_a.wr_batch()?;
    b.send(50, f, &s)
        .send_inline(51, f, b"no")
        .set_sge_list(&two);
    let e = b
        .complete()
        .err()
        .ok_or("SGEs for an inline send were taken")?;
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("request 1 "),
        "{e}"
    );
    let mut b = p.qp_a.wr_batch()?;
    b.set_sge_list(&two);
    let e = b.complete().err().ok_or("an SGE list before any request")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    let mut b = p.qp_a.wr_batch()?;
    b.send(55, f, &s).set_sge_list(&two).set_sge_list(&two);
    let e = b.complete().err().ok_or("two SGE lists for one request")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    let mut t1 = MemoryWindow::new(&p.pd, MwType::Type1)?;
    let mut b = p.qp_b.wr_batch()?;
    b.bind_mw(56, f, &mut t1, 0x99, &mr, 0..8, AccessFlags::REMOTE_WRITE);
    let e = b
        .complete()
        .err()
        .ok_or("a type 1 window bound by a batch")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    let mut b = p.qp_b.wr_batch()?;
    b.bind_mw(
        52,
        f,
        &mut mw,
        key2,
        &mr,
        0..8192,
        AccessFlags::REMOTE_WRITE,
    );
    let e = b.complete().err().ok_or("a bind past its region")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    let other = fixtures::open(env)?;
    let other_pd = rdma::ProtectionDomain::new(&other)?;
    let other_mr = MemoryRegion::new(&other_pd, 4096, ACCESS | AccessFlags::MW_BIND)?;
    let mut b = p.qp_b.wr_batch()?;
    b.bind_mw(
        53,
        f,
        &mut mw,
        key2,
        &other_mr,
        0..8,
        AccessFlags::REMOTE_WRITE,
    );
    let e = b
        .complete()
        .err()
        .ok_or("a bind of another context's region")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    // A QP created without an operation refuses it.
    let mut q = RcPair::extended(env)?;
    let mut b = q.qp_a.wr_batch()?;
    b.atomic_fetch_add(54, f, &add_res, target, 1);
    let e = b.complete().err().ok_or("an atomic outside send_ops")?;
    check!(e.errno() == libc::EOPNOTSUPP, "{e}");
    check!(
        p.cq_a.poll(&mut [WorkCompletion::ZERO; 4])?.is_empty()
            && p.cq_b.poll(&mut [WorkCompletion::ZERO; 4])?.is_empty(),
        "a refused batch posted something"
    );
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "qp":
    rc_send_write_read_and_list,
    prepared_send_posts_again,
    rc_immediate_data_and_atomics,
    uc_send_and_write,
    qp_query_reports_what_was_set,
    extended_batch_every_operation,
    receive_queue_edges_and_zero_length,
);
