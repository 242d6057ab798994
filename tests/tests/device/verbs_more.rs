//! The verbs rdma-core's own tests (pyverbs) exercise beyond the data path:
//! QP and SRQ queries, CQ and SRQ resizes, the SRQ limit event, P_Keys and
//! port attributes, create/destroy loops against the kernel's resource
//! counts, and fork protection.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use rdma::{
    AccessFlags, AsyncEventElement, AsyncEventKind, CompletionQueue, Context, ForkStatus, InitAttr,
    MemoryRegion, Mtu, Path, PortSpeed, PortWidth, ProtectionDomain, QpCaps, QpState, QpType,
    QueuePair, RecvWr, RtrAttr, RtsAttr, SendWr, SharedReceiveQueue, WcOpcode, WorkCompletion,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::verbs::{self, open, wait, ACCESS, R};

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

/// Sends `msg` from `a` (whose send CQ is `cq_a`) to `b` (receives into
/// `recv` of `mr_b`, completions on `cq_b`), and checks that it arrived.
fn send_one(
    a: (&QueuePair, &CompletionQueue, &MemoryRegion),
    b: (&QueuePair, &CompletionQueue, &MemoryRegion),
    msg: &[u8],
) -> R<()> {
    let (qa, cqa, mra) = a;
    let (qb, cqb, mrb) = b;
    let rs = [mrb.sge(0..1024)?];
    qb.post_recv(&mut [RecvWr::new(7, &rs)])?;
    mra.write(0, msg)?;
    let ss = [mra.sge(0..msg.len())?];
    qa.post_send(&mut [SendWr::send(8, &ss).signaled()])?;
    wait(cqa, 1)?;
    let wcs = wait(cqb, 1)?;
    check!(
        wcs[0].opcode() == WcOpcode::Recv && wcs[0].byte_len() as usize == msg.len(),
        "{wcs:?}"
    );
    check!(mrb.to_vec(0..msg.len())? == msg, "the message differs");
    Ok(())
}

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

/// Whether queue sizes `q` are each at least those of `granted`: a query
/// reports the queues the provider has, which may be larger than what
/// creation granted (rxe: the full ring, 63 for 32; siw: inline data
/// rounded up to 80 bytes).
fn at_least(q: QpCaps, granted: QpCaps) -> bool {
    q.max_send_wr >= granted.max_send_wr
        && q.max_recv_wr >= granted.max_recv_wr
        && q.max_send_sge >= granted.max_send_sge
        && q.max_recv_sge >= granted.max_recv_sge
        && q.max_inline_data >= granted.max_inline_data
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
    let report = verbs::state_report(env, &pd, &cq_a)?;

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
            let (gid, idx) = verbs::roce_gid(&ctx, env)?;
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
            let conn = verbs::connect_rc(env, &ctx, &a, &b)?;
            for qp in [&a, &b] {
                let q = qp.query()?;
                // What siw reports, for the table in QpAttr's docs.
                eprintln!("siw QP {} connected by the CM: {q:?}", qp.qp_num());
                let want = match report {
                    verbs::StateReport::Unset => QpState::Reset,
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
                // whatever was set, the CM's depths (4 and 4, verbs::cm).
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
        q.state == QpState::Error || report == verbs::StateReport::Unset,
        "after ERROR: {:?}",
        q.state
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

/// Checks that `r` failed with `errno` from `verb`, its hint containing
/// `hint`.
fn refused<T: std::fmt::Debug>(
    r: rdma::Result<T>,
    verb: &str,
    errno: i32,
    hint: &str,
) -> R<rdma::Error> {
    match r {
        Ok(v) => fail!("{verb}: accepted ({v:?}), expected errno {errno}"),
        Err(e) => {
            check!(
                e.verb == verb && e.errno() == errno,
                "expected {verb} errno {errno}, got {e}"
            );
            check!(
                e.hint.as_deref().unwrap_or("").contains(hint),
                "hint of {e} lacks {hint:?}"
            );
            Ok(e)
        }
    }
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
    let pd = ProtectionDomain::new(&ctx)?;
    let cq_a = CompletionQueue::new(&ctx, 16)?;
    let cq_b = CompletionQueue::builder(&ctx)
        .cqe(8)
        .extended(true)
        .build()?;
    let a = QueuePair::builder(&pd, QpType::Rc, &cq_a).build()?;
    let b = QueuePair::builder(&pd, QpType::Rc, &cq_b).build()?;
    let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let _cm = verbs::connect_rc(env, &ctx, &a, &b)?;
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
    wait(&cq_a, 3)?;
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
    let mr_a = MemoryRegion::new(&pd, 4096, ACCESS)?;
    send_one((&a, &cq_a, &mr_a), (&b, &cq_b, &mr), b"after two resizes")?;
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

    let cq_a = CompletionQueue::new(&ctx, 32)?;
    let cq_b = CompletionQueue::new(&ctx, 32)?;
    let a = QueuePair::builder(&pd, QpType::Rc, &cq_a).build()?;
    let b = QueuePair::builder(&pd, QpType::Rc, &cq_b)
        .srq(&srq)
        .build()?;
    let mr = MemoryRegion::new(&pd, 8192, ACCESS)?;
    let _cm = verbs::connect_rc(env, &ctx, &a, &b)?;
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
        wait(&cq_a, 1)?;
        let wcs = wait(&cq_b, 1)?;
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

pub fn pkey_table_and_port_attributes(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let dev = ctx.query_device()?;
    let ports = dev.phys_port_cnt();
    check!(ports >= 1, "no port");
    // Both counts agree below 256 ports (rxe and siw have one).
    check!(
        dev.phys_port_cnt_ex() == u32::from(ports)
            && dev.as_raw().phys_port_cnt_ex <= u32::from(ports),
        "phys_port_cnt_ex {} (raw {}), phys_port_cnt {ports}",
        dev.phys_port_cnt_ex(),
        dev.as_raw().phys_port_cnt_ex
    );
    let port = ctx.query_port(1)?;
    eprintln!(
        "{} port 1: width {:?} speed {:?} ({:?} Gb/s) link {} max_msg_sz {:#x} pkey_tbl_len {}",
        env.provider.name(),
        port.width(),
        port.speed(),
        port.rate_gbps(),
        port.link_layer(),
        port.max_msg_sz(),
        port.pkey_tbl_len()
    );
    // What pyverbs checks of a port: width and speed known, a link layer,
    // messages above a page.
    check!(
        !matches!(port.width(), PortWidth::Other(_))
            && !matches!(port.speed(), PortSpeed::Other(_)),
        "width code {} / speed code {} unknown",
        port.active_width(),
        port.active_speed()
    );
    check!(port.rate_gbps().is_some_and(|r| r > 0.0), "no rate");
    check!(
        port.link_layer() == "Ethernet",
        "link layer {}",
        port.link_layer()
    );
    check!(
        port.max_msg_sz() > 0x1000,
        "max_msg_sz {:#x}",
        port.max_msg_sz()
    );
    // rxe has the default P_Key; iWARP has no P_Keys, and siw's table is empty.
    let want_len = match env.provider {
        Provider::Rxe => 1,
        Provider::Siw => 0,
    };
    check!(
        port.pkey_tbl_len() == want_len,
        "pkey_tbl_len {}",
        port.pkey_tbl_len()
    );

    let len = port.pkey_tbl_len();
    refused(
        ctx.query_pkey(1, len),
        "ibv_query_pkey",
        libc::EINVAL,
        "past the port's P_Key table",
    )?;
    refused(
        ctx.query_pkey(ports + 1, 0),
        "ibv_query_port",
        libc::EINVAL,
        "past the device's last port",
    )?;
    refused(
        ctx.pkey_index(ports + 1, 0xffff),
        "ibv_query_port",
        libc::EINVAL,
        "past the device's last port",
    )?;
    match env.provider {
        Provider::Rxe => {
            let pkey = ctx.query_pkey(1, 0)?;
            check!(pkey == 0xffff, "rxe's P_Key 0 is {pkey:#x}");
            check!(ctx.pkey_index(1, 0xffff)? == Some(0));
            let absent = ctx.pkey_index(1, 0x7fff)?;
            check!(absent.is_none(), "P_Key 0x7fff at {absent:?}");
            Ok(Outcome::Passed)
        }
        Provider::Siw => {
            // The refusal of index `len` above was that of index 0.
            let e = refused(
                ctx.pkey_index(1, 0xffff),
                "ibv_get_pkey_index",
                libc::EINVAL,
                "no P_Key table",
            )?;
            Ok(Outcome::Skipped(format!(
                "iWARP (siw) has no P_Key table: {e} (port attributes and refusals checked)"
            )))
        }
    }
}

/// The counts of the kinds of objects the loop creates.
fn counts(env: &TestEnv) -> R<Vec<(String, u64)>> {
    let all = rdma_tests::resource_counts(&env.device)?;
    Ok(["pd", "cq", "qp", "mr", "srq", "ctx"]
        .iter()
        .map(|k| (k.to_string(), all.get(*k).copied().unwrap_or(0)))
        .collect())
}

pub fn create_destroy_loop_leaves_no_resources(env: &TestEnv) -> TestResult {
    const ROUNDS: usize = 300;
    let ctx = open(env)?;
    let before = counts(env)?;
    let count = |v: &[(String, u64)], k: &str| v.iter().find(|(n, _)| n == k).map_or(0, |c| c.1);
    for round in 0..ROUNDS {
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
        let srq = SharedReceiveQueue::new(&pd, 4, 1)?;
        let rc = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
        let with_srq = QueuePair::builder(&pd, QpType::Rc, &cq).srq(&srq).build()?;
        let ud = match env.provider {
            Provider::Rxe => Some(QueuePair::builder(&pd, QpType::Ud, &cq).build()?),
            Provider::Siw => None,
        };
        rc.to_init(&InitAttr::new(1))?;
        if round == 0 {
            // The counts see these objects: the check below can fail.
            let during = counts(env)?;
            let qps = 2 + u64::from(ud.is_some());
            for (kind, more) in [("pd", 1), ("cq", 1), ("mr", 1), ("srq", 1), ("qp", qps)] {
                check!(
                    count(&during, kind) == count(&before, kind) + more,
                    "{kind}: {} with the objects of one round, {} before",
                    count(&during, kind),
                    count(&before, kind)
                );
            }
        }
        // Parents first on odd rounds: each child keeps its parent alive.
        if round % 2 == 1 {
            drop(pd);
            drop(cq);
            drop(srq);
        }
        drop((rc, with_srq, ud, mr));
    }
    let after = counts(env)?;
    check!(
        after == before,
        "after {ROUNDS} rounds: {after:?}, before {before:?}"
    );
    // Contexts too.
    drop(ctx);
    let before = counts(env)?;
    for _ in 0..50 {
        let ctx = open(env)?;
        drop(ProtectionDomain::new(&ctx)?);
    }
    let after = counts(env)?;
    check!(
        after == before,
        "after 50 opens: {after:?}, before {before:?}"
    );
    Ok(Outcome::Passed)
}

/// The kernel's release as (major, minor), from uname.
fn kernel_release() -> Option<(u32, u32)> {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut parts = text.trim().split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

pub fn fork_init_reports_the_kernel(env: &TestEnv) -> TestResult {
    // In a process of its own: fork protection is process-wide and must be
    // set before any registration.
    if let Some(outcome) = rdma_tests::in_own_process()? {
        return Ok(outcome);
    }
    let release = kernel_release();
    let cow = release.is_some_and(|r| r >= (5, 13));
    let first = rdma::is_fork_initialized();
    let env_safe = std::env::var_os("RDMAV_FORK_SAFE").is_some();
    let expect = if cow {
        ForkStatus::Unneeded
    } else if env_safe {
        ForkStatus::Enabled
    } else {
        ForkStatus::Disabled
    };
    check!(
        first == expect,
        "kernel {release:?}: ibv_is_fork_initialized says {first:?} before ibv_fork_init, expected {expect:?}"
    );
    rdma::fork_init()?;
    let after = rdma::is_fork_initialized();
    let expect = if cow {
        ForkStatus::Unneeded
    } else {
        ForkStatus::Enabled
    };
    check!(
        after == expect,
        "after ibv_fork_init: {after:?}, expected {expect:?}"
    );
    // Registered memory and traffic across a fork: the child exits at once,
    // the parent writes its region and sends from it; the peer receives the
    // bytes written after the fork.
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq_a = CompletionQueue::new(&ctx, 16)?;
    let cq_b = CompletionQueue::new(&ctx, 16)?;
    let a = QueuePair::builder(&pd, QpType::Rc, &cq_a).build()?;
    let b = QueuePair::builder(&pd, QpType::Rc, &cq_b).build()?;
    let mr_a = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let mr_b = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let _cm = verbs::connect_rc(env, &ctx, &a, &b)?;
    mr_a.write(0, b"before the fork")?;
    // SAFETY: the child calls only _exit, which is async-signal-safe.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(0) };
    }
    check!(pid > 0, "fork: {}", std::io::Error::last_os_error());
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    check!(
        waited == pid && libc::WIFEXITED(status),
        "child status {status}"
    );
    send_one(
        (&a, &cq_a, &mr_a),
        (&b, &cq_b, &mr_b),
        b"after the fork, new",
    )?;
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "verbs_more":
    qp_query_reports_what_was_set,
    ud_qp_query_reports_its_qkey,
    cq_resize_keeps_completions_and_bad_sizes_are_refused,
    srq_query_limit_event_and_resize,
    pkey_table_and_port_attributes,
    create_destroy_loop_leaves_no_resources,
    fork_init_reports_the_kernel,
);
