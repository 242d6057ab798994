//! What posting refuses or keeps: inline data, operations the QP was not
//! created with, objects of two contexts, UD sends without an address, and
//! the state query a refused modify makes.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use rdma::{
    AccessFlags, AddressHandle, CompletionQueue, Context, DeviceList, Error, InitAttr,
    MemoryRegion, MemoryWindow, MwType, Path, ProtectionDomain, QpCaps, QpType, QueuePair, RecvWr,
    RtsAttr, SendFlags, SendOps, SendWr, SharedReceiveQueue,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::ud::ud_qp;
use crate::fixtures::{connect_rc, open, roce_gid, state_report, wait, RcPair, UdPair, ACCESS, R};

/// The error of `r`, or a failure naming what was wrongly accepted.
fn refused<T>(r: rdma::Result<T>, what: &str) -> R<Error> {
    match r {
        Ok(_) => Err(format!("{what} was accepted").into()),
        Err(e) => Ok(e),
    }
}

/// Waits for the completions of `slots.len()` sends on `send_cq` and as many
/// receives on `recv_cq`, and checks that the receive of each slot (64
/// bytes each in `mr`, the slot's number as its id) holds `want`.
fn received(
    send_cq: &CompletionQueue,
    recv_cq: &CompletionQueue,
    mr: &MemoryRegion,
    slots: std::ops::Range<usize>,
    want: &[u8],
    what: &str,
) -> R<()> {
    let n = slots.len();
    wait(send_cq, n).map_err(|e| format!("{what}: the sends: {e}"))?;
    let wcs = wait(recv_cq, n).map_err(|e| format!("{what}: the receives: {e}"))?;
    check!(wcs.len() == n, "{what}: {wcs:?}");
    for (wc, slot) in wcs.iter().zip(slots) {
        check!(
            wc.wr_id() == slot as u64 && wc.byte_len() as usize == want.len(),
            "{what}: {wc:?}"
        );
        let got = mr.to_vec(slot * 64..slot * 64 + want.len())?;
        check!(
            got == want,
            "{what}: slot {slot} received {:?}, sent {:?}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want)
        );
    }
    Ok(())
}

pub fn inline_send_moved_after_a_post_sends_its_own_bytes(env: &TestEnv) -> TestResult {
    let p = RcPair::options()
        .cqe(16)
        .caps(QpCaps {
            max_inline_data: 32,
            max_recv_wr: 8,
            ..QpCaps::default()
        })
        .mr_len(4096)
        .build(env)?;
    let (a, b, cq_a, cq_b, mr) = (&p.qp_a, &p.qp_b, &p.cq_a, &p.cq_b, &p.mr_b);
    let rs = (0..6)
        .map(|i| mr.sge(i * 64..(i + 1) * 64))
        .collect::<rdma::Result<Vec<_>>>()?;
    for (i, s) in rs.chunks(1).enumerate() {
        b.post_recv(&mut [RecvWr::new(i as u64, s)])?;
    }
    let data = *b"inline, moved";
    let decoy = *b"STALE! STALE!";

    // Posted, moved out of its Vec, and another request put where it was.
    let mut v = Vec::with_capacity(1);
    v.push(SendWr::send_inline(1, &data).signaled());
    a.post_send(&mut v)?;
    received(cq_a, cq_b, mr, 0..1, &data, "first post")?;
    let mut moved = Vec::with_capacity(4);
    moved.push(v.pop().unwrap());
    v.push(SendWr::send_inline(99, &decoy));
    a.post_send(&mut moved)?;
    received(cq_a, cq_b, mr, 1..2, &data, "post after the move")?;

    // A list posted through a PreparedSend, which is dropped; the list moves.
    let mut list = Vec::with_capacity(2);
    list.push(SendWr::send_inline(2, &data).signaled());
    list.push(SendWr::send_inline(3, &data).signaled());
    a.prepare_send(&mut list)?.post()?;
    received(cq_a, cq_b, mr, 2..4, &data, "prepared post")?;
    let mut moved_list = Vec::with_capacity(8);
    moved_list.append(&mut list);
    list.push(SendWr::send_inline(98, &decoy));
    list.push(SendWr::send_inline(97, &decoy));
    a.prepare_send(&mut moved_list)?.post()?;
    received(
        cq_a,
        cq_b,
        mr,
        4..6,
        &data,
        "prepared post of the moved list",
    )?;
    drop(list);
    Ok(Outcome::Passed)
}

pub fn ud_qp_refuses_all_but_addressed_sends(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    let p = UdPair::options().qkey(0x4242).access(ACCESS).build(env)?;
    let (cq, a, b, mr, ah, qkey) = (&p.cq, &p.qp_a, &p.qp_b, &p.mr, &p.ah, p.qkey);
    let s = [mr.sge(0..8)?];
    let remote = mr.remote(0..8)?;
    let bad = || {
        [
            ("an RDMA WRITE", SendWr::rdma_write(1, &s, remote)),
            (
                "an RDMA WRITE with an address",
                SendWr::rdma_write(1, &s, remote).ud(ah, b.qp_num(), qkey),
            ),
            ("an RDMA READ", SendWr::rdma_read(1, &s, remote)),
            (
                "an atomic fetch-and-add",
                SendWr::atomic_fetch_add(1, &s, remote, 1),
            ),
            (
                "an atomic compare-and-swap",
                SendWr::atomic_cmp_swp(1, &s, remote, 0, 1),
            ),
            ("a local invalidate", SendWr::local_invalidate(1, 0x1234)),
            ("a SEND without an address handle", SendWr::send(1, &s)),
        ]
    };
    for (what, wr) in bad() {
        let e = refused(a.post_send(&mut [wr]), what)?;
        check!(
            e.verb() == "ibv_post_send"
                && e.errno() == libc::EINVAL
                && e.to_string().contains("work request 0"),
            "{what}: {e}"
        );
    }
    for (what, wr) in bad() {
        let good = SendWr::send(2, &s).ud(ah, b.qp_num(), qkey);
        let e = refused(a.post_send(&mut [good, wr]), what)?;
        check!(
            e.errno() == libc::EINVAL && e.to_string().contains("work request 1"),
            "{what} second in a list: {e}"
        );
    }
    for (what, wr) in bad() {
        let e = refused(a.prepare_send(&mut [wr]), what)?;
        check!(e.errno() == libc::EINVAL, "{what} prepared: {e}");
    }
    // Nothing was posted, and the QP still sends.
    let rs = [mr.sge(1024..2048)?];
    b.post_recv(&mut [RecvWr::new(7, &rs)])?;
    mr.write(0, b"still ok")?;
    a.post_send(&mut [SendWr::send(8, &s).ud(ah, b.qp_num(), qkey).signaled()])?;
    let wcs = wait(cq, 2)?;
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id()).collect();
    check!(ids.contains(&7) && ids.contains(&8), "{wcs:?}");
    check!(mr.to_vec(1064..1072)? == b"still ok", "UD payload differs");
    Ok(Outcome::Passed)
}

/// The other soft-RDMA device of the VM (siw0 beside rxe0 and the other way
/// round), opened; None if there is none. With the device-set lock, held
/// as long as the context: no scratch device of the other suite comes or
/// goes meanwhile, so the one found is not one about to be removed, and its
/// removal never waits for this context.
fn other_device(env: &TestEnv) -> R<Option<(rdma_tests::DeviceSet, Context)>> {
    let set = rdma_tests::DeviceSet::lock(false)?;
    let list = DeviceList::new()?;
    let other = list.iter().find(|d| d.name() != env.device);
    Ok(match other {
        Some(d) => Some((set, d.open()?)),
        None => None,
    })
}

/// Checks that `e` refuses objects of two contexts.
fn mixed(e: &Error, what: &str) -> R<()> {
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("different contexts"),
        "{what}: {e}"
    );
    Ok(())
}

/// The mixes of `ctx`'s objects with `other`'s that must be refused, for
/// any two contexts (of one device or of two).
fn refuse_mixes(env: &TestEnv, ctx: &Context, other: &Context, label: &str) -> R<()> {
    let pd = ProtectionDomain::new(ctx)?;
    let cq = CompletionQueue::new(ctx, 16)?;
    let other_pd = ProtectionDomain::new(other)?;
    let other_cq = CompletionQueue::new(other, 16)?;
    let e = refused(
        QueuePair::builder(&pd, QpType::Rc, &other_cq).build(),
        "a QP on a PD of one context with a CQ of another",
    )?;
    mixed(&e, &format!("{label}: send CQ"))?;
    let e = refused(
        QueuePair::builder(&pd, QpType::Rc, &cq)
            .recv_cq(&other_cq)
            .build(),
        "a receive CQ of another context",
    )?;
    mixed(&e, &format!("{label}: receive CQ"))?;
    let other_srq = SharedReceiveQueue::new(&other_pd, 16, 1)?;
    let e = refused(
        QueuePair::builder(&pd, QpType::Rc, &cq)
            .srq(&other_srq)
            .build(),
        "an SRQ of another context",
    )?;
    mixed(&e, &format!("{label}: SRQ"))?;
    // The same builds with objects of one context work.
    QueuePair::builder(&other_pd, QpType::Rc, &other_cq)
        .srq(&other_srq)
        .build()?;

    // A memory window, bound through a QP or over a region of another
    // context: the window's provider would run on the other's structures.
    let (mw_pd, qp_pd) = if env.provider == Provider::Rxe {
        (&pd, &other_pd)
    } else {
        (&other_pd, &pd)
    };
    let mw_ctx = mw_pd.context();
    let mw_cq = CompletionQueue::new(mw_ctx, 16)?;
    let qp_cq = CompletionQueue::new(qp_pd.context(), 16)?;
    let mut mw = match MemoryWindow::new(mw_pd, MwType::Type1) {
        Ok(mw) => mw,
        Err(e) if e.errno() == libc::EOPNOTSUPP => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let foreign_qp = QueuePair::builder(qp_pd, QpType::Rc, &qp_cq).build()?;
    let own_mr = MemoryRegion::new(mw_pd, 4096, ACCESS | AccessFlags::MW_BIND)?;
    let foreign_mr = MemoryRegion::new(qp_pd, 4096, ACCESS | AccessFlags::MW_BIND)?;
    let own_qp = QueuePair::builder(mw_pd, QpType::Rc, &mw_cq).build()?;
    let e = refused(
        mw.bind(
            &foreign_qp,
            1,
            true,
            &own_mr,
            0..64,
            AccessFlags::REMOTE_WRITE,
        ),
        "a memory window bound through a QP of another context",
    )?;
    mixed(&e, &format!("{label}: window through a QP"))?;
    let e = refused(
        mw.bind(
            &own_qp,
            1,
            true,
            &foreign_mr,
            0..64,
            AccessFlags::REMOTE_WRITE,
        ),
        "a memory window bound over a region of another context",
    )?;
    mixed(&e, &format!("{label}: window over a region"))?;
    let mw2 = MemoryWindow::new(mw_pd, MwType::Type2)?;
    let e = refused(
        SendWr::bind_mw(
            1,
            &mw2,
            rdma::inc_rkey(mw2.rkey()),
            &foreign_mr,
            0..64,
            AccessFlags::REMOTE_WRITE,
        ),
        "a type 2 bind over a region of another context",
    )?;
    mixed(&e, &format!("{label}: type 2 bind"))?;
    Ok(())
}

pub fn objects_of_two_contexts_are_not_mixed(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    // Two opens of one device are two contexts: nothing passes between them.
    let again = open(env)?;
    refuse_mixes(env, &ctx, &again, "two contexts of one device")?;
    if env.provider == Provider::Rxe {
        // An address handle of another context on a UD QP.
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        let qp = ud_qp(&pd, &cq, SendOps::empty(), 1)?;
        let (gid, idx) = roce_gid(&ctx, env)?;
        let other_pd = ProtectionDomain::new(&again)?;
        let other_ah = AddressHandle::new(&other_pd, &Path::to_gid(gid, idx, 1))?;
        let mr = MemoryRegion::new(&pd, 64, ACCESS)?;
        let s = [mr.sge(0..8)?];
        let e = refused(
            qp.post_send(&mut [SendWr::send(1, &s).ud(&other_ah, qp.qp_num(), 1)]),
            "an address handle of another context",
        )?;
        check!(
            e.errno() == libc::EINVAL && e.to_string().contains("different context"),
            "{e}"
        );
        let e = refused(
            qp.prepare_send(&mut [SendWr::send(1, &s).ud(&other_ah, qp.qp_num(), 1)]),
            "a prepared send through an address handle of another context",
        )?;
        check!(e.errno() == libc::EINVAL, "{e}");
    }
    let Some((_set, other)) = other_device(env)? else {
        return Ok(Outcome::Skipped(format!(
            "only {} exists: objects of two devices cannot be mixed here (two contexts of it were refused)",
            env.device
        )));
    };
    refuse_mixes(
        env,
        &ctx,
        &other,
        &format!("{} and {}", env.device, other.name()),
    )?;
    Ok(Outcome::Passed)
}

pub fn batch_refuses_ops_the_qp_was_not_created_with(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped(
            "siw has no extended QPs (the builder falls back to classic ones)".into(),
        ));
    }
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let (cq_a, cq_b) = (
        CompletionQueue::new(&ctx, 16)?,
        CompletionQueue::new(&ctx, 16)?,
    );
    let mut a = QueuePair::builder(&pd, QpType::Rc, &cq_a)
        .send_ops(SendOps::SEND)
        .build()?;
    let b = QueuePair::builder(&pd, QpType::Rc, &cq_b).build()?;
    if !a.is_extended() {
        fail!("rxe gave no extended QP");
    }
    check!(a.send_ops() == SendOps::SEND, "{:?}", a.send_ops());
    let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let _cm = connect_rc(env, &ctx, &a, &b)?;
    let s = mr.sge(0..5)?;
    let remote = mr.remote(2048..2053)?;

    let mut batch = a.wr_batch()?;
    batch
        .send(1, SendFlags::SIGNALED, &s)
        .rdma_write(2, SendFlags::SIGNALED, &s, remote)
        .rdma_read(3, SendFlags::SIGNALED, &s, remote);
    let e = refused(
        batch.complete(),
        "an RDMA WRITE the QP was not created with",
    )?;
    check!(
        e.verb() == "ibv_wr_rdma_write"
            && e.errno() == libc::EOPNOTSUPP
            && e.to_string().contains("request 1"),
        "{e}"
    );
    let mut batch = a.wr_batch()?;
    batch.rdma_read(3, SendFlags::SIGNALED, &s, remote);
    let e = refused(batch.complete(), "an RDMA READ the QP was not created with")?;
    check!(e.errno() == libc::EOPNOTSUPP, "{e}");
    // A UD send on a connected QP is refused too.
    let (gid, idx) = roce_gid(&ctx, env)?;
    let ah = AddressHandle::new(&pd, &Path::to_gid(gid, idx, 1))?;
    let mut batch = a.wr_batch()?;
    batch.send_ud(4, SendFlags::SIGNALED, &s, &ah, 1, 1);
    let e = refused(batch.complete(), "send_ud on an RC QP")?;
    check!(e.errno() == libc::EINVAL, "{e}");

    // Nothing of those batches was posted; a batch of SENDs works.
    let rs = [mr.sge(1024..1088)?];
    b.post_recv(&mut [RecvWr::new(10, &rs)])?;
    mr.write(0, b"batch")?;
    let mut batch = a.wr_batch()?;
    batch.send(11, SendFlags::SIGNALED, &s);
    batch.complete()?;
    let wc = wait(&cq_a, 1)?[0];
    check!(wc.wr_id() == 11, "{wc:?} (an aborted request was posted?)");
    let wc = wait(&cq_b, 1)?[0];
    check!(wc.wr_id() == 10 && wc.byte_len() == 5, "{wc:?}");
    check!(mr.to_vec(1024..1029)? == b"batch");

    // UD: a send needs its address (send_ud), of the QP's context.
    let qkey = 0x77;
    let mut u = ud_qp(&pd, &cq_a, SendOps::SEND, qkey)?;
    let v = ud_qp(&pd, &cq_b, SendOps::empty(), qkey)?;
    if !u.is_extended() {
        fail!("rxe gave no extended UD QP");
    }
    let mut batch = u.wr_batch()?;
    batch.send(20, SendFlags::SIGNALED, &s);
    let e = refused(batch.complete(), "a UD batch send without an address")?;
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("send_ud"),
        "{e}"
    );
    // A TSO send cannot carry an address either: refused as a UD send,
    // before the QP's missing TSO op is looked at.
    let mut batch = u.wr_batch()?;
    batch.send_tso(20, SendFlags::SIGNALED, &[0; 14], 1024, &s);
    let e = refused(batch.complete(), "a UD TSO send")?;
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("send_ud"),
        "{e}"
    );
    let again = open(env)?;
    let other_ah = AddressHandle::new(&ProtectionDomain::new(&again)?, &Path::to_gid(gid, idx, 1))?;
    let mut batch = u.wr_batch()?;
    batch.send_ud(21, SendFlags::SIGNALED, &s, &other_ah, v.qp_num(), qkey);
    let e = refused(
        batch.complete(),
        "a UD batch send through another context's AH",
    )?;
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("different context"),
        "{e}"
    );
    let rs = [mr.sge(2048..3072)?];
    v.post_recv(&mut [RecvWr::new(22, &rs)])?;
    let mut batch = u.wr_batch()?;
    batch.send_ud(23, SendFlags::SIGNALED, &s, &ah, v.qp_num(), qkey);
    batch.complete()?;
    let wc = wait(&cq_a, 1)?[0];
    check!(wc.wr_id() == 23, "{wc:?}");
    let wc = wait(&cq_b, 1)?[0];
    check!(wc.wr_id() == 22 && wc.byte_len() == 45, "{wc:?}");
    check!(
        mr.to_vec(2088..2093)? == b"batch",
        "UD batch payload differs"
    );
    Ok(Outcome::Passed)
}

/// `ibv_query_qp` calls of this process so far (see the definition below).
static QP_QUERIES: AtomicUsize = AtomicUsize::new(0);

/// Counts the process's `ibv_query_qp` calls and forwards each to
/// libibverbs: a definition in the executable interposes the library's for
/// every caller, so the count sees what `QueuePair::modify` calls.
///
/// # Safety
/// As `ibv_query_qp`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut rdma::sys::ibv_qp,
    attr: *mut rdma::sys::ibv_qp_attr,
    mask: c_int,
    init: *mut rdma::sys::ibv_qp_init_attr,
) -> c_int {
    type Query = unsafe extern "C" fn(
        *mut rdma::sys::ibv_qp,
        *mut rdma::sys::ibv_qp_attr,
        c_int,
        *mut rdma::sys::ibv_qp_init_attr,
    ) -> c_int;
    QP_QUERIES.fetch_add(1, Ordering::Relaxed);
    // SAFETY: a NUL-terminated name; RTLD_NEXT finds libibverbs' definition.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, c"ibv_query_qp".as_ptr()) };
    if next.is_null() {
        return libc::ENOSYS;
    }
    // SAFETY: libibverbs' ibv_query_qp has this signature; the arguments are
    // the caller's, passed on unchanged.
    unsafe { std::mem::transmute::<*mut std::ffi::c_void, Query>(next)(qp, attr, mask, init) }
}

pub fn modify_queries_the_state_only_when_refused(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    // Probed before any query is counted.
    let report = state_report(env, &pd, &cq)?;
    // The counter sees the crate's queries.
    let before = QP_QUERIES.load(Ordering::Relaxed);
    qp.state()?;
    check!(
        QP_QUERIES.load(Ordering::Relaxed) == before + 1,
        "the ibv_query_qp counter missed QueuePair::state"
    );
    let before = QP_QUERIES.load(Ordering::Relaxed);
    qp.to_init(&InitAttr::new(1))?;
    let queries = QP_QUERIES.load(Ordering::Relaxed) - before;
    check!(
        queries == 0,
        "a successful to_init made {queries} ibv_query_qp calls"
    );
    // A refused transition still names it, from the state queried then
    // (6.1's siw reports INIT as RESET: see `StateReport`).
    let before = QP_QUERIES.load(Ordering::Relaxed);
    let e = refused(qp.to_rts(&RtsAttr::default()), "INIT -> RTS")?;
    let from = report.init();
    check!(
        e.to_string()
            .contains(&format!("transition {from:?} -> Rts refused")),
        "{e}"
    );
    check!(
        QP_QUERIES.load(Ordering::Relaxed) == before + 1,
        "a refused transition made no query to name its state"
    );
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "qp::post":
    inline_send_moved_after_a_post_sends_its_own_bytes,
    ud_qp_refuses_all_but_addressed_sends,
    objects_of_two_contexts_are_not_mixed,
    batch_refuses_ops_the_qp_was_not_created_with,
    modify_queries_the_state_only_when_refused,
);
