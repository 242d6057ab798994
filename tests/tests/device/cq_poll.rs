//! Polling a completion queue: the classic poll into caller storage, the
//! extended poll (batches, the fields a caller chooses, re-entry) and its
//! fall-back where the provider lacks it.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use rdma::{
    AccessFlags, CompletionQueue, MemoryRegion, QpCaps, QueuePair, RecvWr, SendFlags, SendWr,
    WcOpcode, WorkCompletion,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{self, open, wait, RcPair, UdPair, R, T, TIMEOUT};

pub fn extended_cq_falls_back_where_missing(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let cq = CompletionQueue::builder(&ctx).extended(true).build()?;
    match env.provider {
        Provider::Rxe => check!(cq.is_extended(), "rxe CQ should be extended"),
        Provider::Siw => {
            check!(
                !cq.is_extended(),
                "siw has no extended CQ, yet the CQ claims to be"
            );
            let e = cq.start_poll().err();
            check!(
                e.as_ref().map(|e| e.errno()) == Some(libc::EOPNOTSUPP),
                "start_poll on classic CQ: {e:?}"
            );
        }
    }
    // The classic poll works on both kinds.
    let mut buf = [MaybeUninit::uninit(); 4];
    check!(cq.poll(&mut buf)?.is_empty(), "new CQ not empty");
    Ok(Outcome::Passed)
}

pub fn extended_batch_and_lending_poll(env: &TestEnv) -> TestResult {
    let mut p = RcPair::extended(env)?;
    if !p.qp_a.is_extended() || !p.cq_a.is_extended() {
        return Ok(Outcome::Skipped(format!(
            "{} has no extended QP/CQ: the builder fell back to the classic ones",
            env.provider.name()
        )));
    }
    p.mr_a.write(0, b"batched")?;
    let rs = [p.mr_b.sge(0..64)?];
    p.qp_b.post_recv(&mut [RecvWr::new(1, &rs)])?;
    let s = p.mr_a.sge(0..7)?;
    let mut batch = p.qp_a.wr_batch()?;
    batch.send(2, SendFlags::SIGNALED, &s).rdma_write(
        3,
        SendFlags::SIGNALED,
        &s,
        p.mr_b.remote(512..519)?,
    );
    batch.complete()?;
    // An aborted batch posts nothing.
    let mut aborted = p.qp_a.wr_batch()?;
    aborted.send(99, SendFlags::SIGNALED, &s);
    drop(aborted);

    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.len() < 2 {
        if let Some(mut poll) = p.cq_a.start_poll()? {
            while let Some(c) = poll.next() {
                check!(c.is_success(), "{c:?}");
                seen.push((c.wr_id(), c.opcode()));
            }
        }
        check!(
            start.elapsed() < TIMEOUT,
            "extended completions missing: {seen:?}"
        );
    }
    check!(
        seen == [(2, WcOpcode::Send), (3, WcOpcode::RdmaWrite)],
        "{seen:?}"
    );
    let wc = wait(&p.cq_b, 1)?[0];
    check!(wc.byte_len() == 7, "{wc:?}");
    check!(p.mr_b.to_vec(0..7)? == b"batched" && p.mr_b.to_vec(512..519)? == b"batched");
    // Polling an empty queue many times loses nothing afterwards (rdma-core
    // v44's rxe mishandles next_poll on an empty queue; the crate avoids it).
    for _ in 0..50 {
        check!(p.cq_a.start_poll()?.is_none(), "completion out of nowhere");
    }
    for round in 0..20u64 {
        p.qp_a.post_send(&mut [SendWr::rdma_write(
            100 + round,
            std::slice::from_ref(&s),
            p.mr_b.remote(0..7)?,
        )
        .signaled()])?;
        let start = Instant::now();
        loop {
            if let Some(mut poll) = p.cq_a.start_poll()? {
                let c = poll.next().expect("a started poll has a completion");
                check!(
                    c.is_success() && c.wr_id() == 100 + round,
                    "round {round}: {c:?}"
                );
                check!(
                    poll.next().is_none(),
                    "round {round}: a second completion appeared"
                );
                break;
            }
            check!(start.elapsed() < TIMEOUT, "round {round}: completion lost");
        }
    }
    Ok(Outcome::Passed)
}

pub fn extended_cq_fields_chosen_by_the_caller(env: &TestEnv) -> TestResult {
    use rdma::WcFlags;
    let ctx = fixtures::open(env)?;
    let few = WcFlags::BYTE_LEN | WcFlags::QP_NUM;
    if env.provider == Provider::Siw {
        // No extended CQ: the classic one, whose completions carry all.
        let cq = rdma::CompletionQueue::builder(&ctx).wc_flags(few).build()?;
        check!(
            !cq.is_extended() && cq.wc_flags().is_none(),
            "siw made an extended CQ"
        );
        return Ok(Outcome::Passed);
    }
    // A field rxe's CQs do not carry is refused, typed.
    let e = rdma::CompletionQueue::builder(&ctx)
        .wc_flags(WcFlags::STANDARD | WcFlags::COMPLETION_TIMESTAMP)
        .build()
        .err()
        .ok_or("rxe made a CQ with completion timestamps")?;
    check!(
        e.errno() == libc::EOPNOTSUPP && e.to_string().contains("carry no"),
        "{e}"
    );
    // Fewer fields than the standard ones: those asked for are read, the
    // others read nothing.
    let p = UdPair::options()
        .on(&rdma::ProtectionDomain::new(&ctx)?)
        .cqe(8)
        .wc_flags(few)
        .qkey(0x2222_3333)
        .build(env)?;
    let (cq, a, b, mr, ah, qkey) = (&p.cq, &p.qp_a, &p.qp_b, &p.mr, &p.ah, p.qkey);
    check!(
        cq.is_extended() && cq.wc_flags() == Some(few),
        "flags {:?}",
        cq.wc_flags()
    );
    let rs = [mr.sge(1024..2048)?];
    b.post_recv(&mut [RecvWr::new(1, &rs)])?;
    let ss = [mr.sge(0..9)?];
    a.post_send(&mut [SendWr::send_with_imm(2, &ss, 7)
        .ud(ah, b.qp_num(), qkey)
        .signaled()])?;
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + T;
    while seen.len() < 2 && std::time::Instant::now() < deadline {
        while let Some(mut poll) = cq.start_poll()? {
            while let Some(c) = poll.next() {
                check!(c.is_success(), "{:?}", c.status());
                seen.push((
                    c.opcode(),
                    c.byte_len(),
                    c.qp_num(),
                    c.src_qp(),
                    c.imm_data(),
                    c.completion_ts(),
                ));
            }
        }
    }
    let recv = seen
        .iter()
        .find(|s| s.0 == WcOpcode::Recv)
        .ok_or(format!("no receive: {seen:?}"))?;
    check!(
        *recv == (WcOpcode::Recv, 40 + 9, b.qp_num(), 0, None, None),
        "the receive read {recv:?} (byte_len and qp_num only)"
    );
    Ok(Outcome::Passed)
}

/// An extended CQ made with the standard fields reads a UD receive's
/// source LID, SL and DLID path bits (`ExCompletion::slid`, `sl`,
/// `dlid_path_bits`) as a classic CQ's completion of the same exchange
/// carries them; one made without those fields reads 0 for each.
pub fn extended_cq_reads_lid_sl_and_path_bits_as_the_classic_one(env: &TestEnv) -> TestResult {
    use rdma::WcFlags;
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("siw has no extended CQ and no UD".into()));
    }
    let ctx = fixtures::open(env)?;
    let pd = rdma::ProtectionDomain::new(&ctx)?;
    let classic = rdma::CompletionQueue::new(&ctx, 8)?;
    let standard = rdma::CompletionQueue::builder(&ctx)
        .cqe(8)
        .wc_flags(WcFlags::STANDARD)
        .build()?;
    let few = rdma::CompletionQueue::builder(&ctx)
        .cqe(8)
        .wc_flags(WcFlags::BYTE_LEN | WcFlags::QP_NUM)
        .build()?;
    check!(
        standard.is_extended() && few.is_extended(),
        "rxe made a classic CQ"
    );
    let qkey = 0x2222_4444;
    let ud = |rcq: &rdma::CompletionQueue| -> R<QueuePair> {
        let qp = QueuePair::builder(&pd, rdma::QpType::Ud, &classic)
            .recv_cq(rcq)
            .build()?;
        fixtures::ud::to_rts(&qp, qkey)?;
        Ok(qp)
    };
    let (sender, to_classic, to_standard, to_few) =
        (ud(&classic)?, ud(&classic)?, ud(&standard)?, ud(&few)?);
    let (gid, idx) = fixtures::roce_gid(&ctx, env)?;
    let ah = rdma::AddressHandle::new(&pd, &rdma::Path::to_gid(gid, idx, 1))?;
    let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
    let ss = [mr.sge(0..9)?];
    for (i, qp) in [&to_classic, &to_standard, &to_few].into_iter().enumerate() {
        let at = 1024 + 256 * i;
        let rs = [mr.sge(at..at + 256)?];
        qp.post_recv(&mut [RecvWr::new(10 + i as u64, &rs)])?;
        sender.post_send(&mut [SendWr::send(i as u64, &ss)
            .ud(&ah, qp.qp_num(), qkey)
            .signaled()])?;
    }
    // The sends' completions and the classic receive, on the classic CQ.
    let got = fixtures::wait(&classic, 4)?;
    let recv = got
        .iter()
        .find(|wc| wc.opcode() == WcOpcode::Recv)
        .ok_or(format!("no receive on the classic CQ: {got:?}"))?;
    let want = (recv.slid(), recv.sl(), recv.dlid_path_bits());
    let read = |cq: &rdma::CompletionQueue| -> R<(u16, u8, u8)> {
        let deadline = std::time::Instant::now() + T;
        while std::time::Instant::now() < deadline {
            if let Some(mut poll) = cq.start_poll()? {
                if let Some(c) = poll.next() {
                    check!(c.is_success(), "{:?}", c.status());
                    return Ok((c.slid(), c.sl(), c.dlid_path_bits()));
                }
            }
        }
        fail!("no receive within {T:?}")
    };
    let standard_read = read(&standard)?;
    let few_read = read(&few)?;
    println!("    classic {want:?}, standard fields {standard_read:?}, without them {few_read:?}");
    check!(
        standard_read == want,
        "the extended CQ read (slid, sl, path bits) {standard_read:?}, the classic {want:?}"
    );
    check!(
        few_read == (0, 0, 0),
        "fields not asked for read {few_read:?}"
    );
    Ok(Outcome::Passed)
}

/// What a stack slot may hold before a poll.
const POISON: u8 = 0xa5;

const POISON_U32: u32 = 0xa5a5_a5a5;

/// Two connected RC QPs: `qp_a` sends on `cq_a` (extended where
/// `extended` and the provider has them), `qp_b` receives on `cq_b`.
fn pair(env: &TestEnv, extended: bool) -> R<RcPair> {
    let o = RcPair::options()
        .cqe(32)
        .caps(QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            ..QpCaps::default()
        })
        .mr_len(4096);
    if extended { o.extended_cq_a() } else { o }.build(env)
}

/// One signalled SEND of 16 bytes from `qp_a` to a receive posted on `qp_b`.
fn send(p: &RcPair, wr_id: u64) -> R<()> {
    let rs = [p.mr_b.sge(0..64)?];
    p.qp_b.post_recv(&mut [RecvWr::new(wr_id, &rs)])?;
    let ss = [p.mr_a.sge(0..16)?];
    p.qp_a
        .post_send(&mut [SendWr::send(wr_id, &ss).signaled()])?;
    Ok(())
}

/// Polls `cq` until one completion arrives, into `buf`.
fn poll_one<B: rdma::CompletionBuf + ?Sized>(
    cq: &CompletionQueue,
    buf: &mut B,
) -> R<WorkCompletion> {
    let start = Instant::now();
    loop {
        if let Some(wc) = cq.poll(buf)?.first() {
            return Ok(*wc);
        }
        check!(
            start.elapsed() < TIMEOUT,
            "no completion within {TIMEOUT:?}"
        );
        std::thread::yield_now();
    }
}

/// The fields siw never writes (`copy_cqe`), of a receive completion.
fn skipped(wc: &WorkCompletion) -> [u32; 5] {
    [
        wc.src_qp(),
        u32::from(wc.slid()),
        u32::from(wc.sl()),
        u32::from(wc.pkey_index()),
        u32::from(wc.dlid_path_bits()),
    ]
}

/// A receive polled into `MaybeUninit` storage that held a poison pattern:
/// the fields the provider skips read as zero (siw), or as what the
/// provider wrote (rxe copies the kernel's whole entry), never as the
/// poison. Before, the storage was handed out as initialised as it was.
pub fn poll_into_poisoned_storage_reads_no_garbage(env: &TestEnv) -> TestResult {
    let p = pair(env, false)?;
    send(&p, 1)?;
    wait(&p.cq_a, 1)?;
    let mut buf = [MaybeUninit::<WorkCompletion>::uninit(); 4];
    // SAFETY: writes bytes into the 4-entry storage.
    unsafe { std::ptr::write_bytes(buf.as_mut_ptr(), POISON, buf.len()) };
    let wc = poll_one(&p.cq_b, &mut buf)?;
    check!(wc.is_success() && wc.wr_id() == 1, "{wc:?}");
    check!(wc.byte_len() == 16, "byte_len {}", wc.byte_len());
    let got = skipped(&wc);
    match env.provider {
        Provider::Siw => check!(
            got == [0; 5],
            "siw skips these fields; they read {got:x?} (src_qp, slid, sl, pkey_index, dlid_path_bits)"
        ),
        Provider::Rxe => check!(
            got.iter().all(|&f| f != POISON_U32 && f != 0xa5a5 && f != 0xa5),
            "rxe writes these fields; they read {got:x?}"
        ),
    }
    check!(
        wc.imm_data().is_none() && wc.invalidated_rkey().is_none(),
        "flags from nowhere: {:#x}",
        wc.wc_flags()
    );
    // Storage never written at all: under valgrind, a branch on any
    // accessor would be reported if a field were still undefined.
    send(&p, 3)?;
    wait(&p.cq_a, 1)?;
    let mut fresh = [MaybeUninit::<WorkCompletion>::uninit(); 4];
    let wc = poll_one(&p.cq_b, &mut fresh)?;
    check!(
        wc.is_success() && wc.wr_id() == 3 && wc.opcode() == rdma::WcOpcode::Recv,
        "{wc:?}"
    );
    let all = [
        wc.wr_id() as u32,
        wc.as_raw().status,
        wc.as_raw().opcode,
        wc.vendor_err(),
        wc.byte_len(),
        wc.qp_num(),
        wc.wc_flags(),
        wc.imm_data().unwrap_or(0),
        wc.invalidated_rkey().unwrap_or(0),
    ];
    check!(
        all.iter().chain(&skipped(&wc)).all(|&f| f != POISON_U32),
        "{all:x?}"
    );
    if env.provider == Provider::Siw {
        check!(skipped(&wc) == [0; 5], "siw: {:x?}", skipped(&wc));
    }
    Ok(Outcome::Passed)
}

/// Initialised storage is handed to the provider as it is: a field the
/// provider skips keeps the value the storage held (siw), and the fields
/// it writes are the completion's.
pub fn poll_into_initialised_storage_keeps_skipped_fields(env: &TestEnv) -> TestResult {
    let p = pair(env, false)?;
    send(&p, 2)?;
    wait(&p.cq_a, 1)?;
    let mut marked = WorkCompletion::ZERO;
    // SAFETY: WorkCompletion is a transparent ibv_wc (plain data); only the
    // marker fields change.
    unsafe {
        let raw = std::ptr::from_mut(&mut marked).cast::<rdma::sys::ibv_wc>();
        (*raw).src_qp = 0x5a5a;
        (*raw).wr_id = 99;
    }
    let mut buf = [marked; 2];
    let wc = poll_one(&p.cq_b, &mut buf)?;
    check!(wc.is_success() && wc.wr_id() == 2, "{wc:?}");
    if env.provider == Provider::Siw {
        check!(
            wc.src_qp() == 0x5a5a,
            "siw skips src_qp, yet it reads {:#x}",
            wc.src_qp()
        );
    }
    Ok(Outcome::Passed)
}

fn skip_unless_extended(env: &TestEnv, cq: &CompletionQueue) -> Option<Outcome> {
    (!cq.is_extended()).then(|| {
        Outcome::Skipped(format!(
            "{} has no extended CQ (ibv_create_cq_ex): nothing holds a CQ lock across calls",
            env.provider.name()
        ))
    })
}

/// Starts an extended poll of `cq`, waiting until it has a completion.
fn started(cq: &CompletionQueue) -> R<rdma::ExPoll<'_>> {
    let start = Instant::now();
    loop {
        if let Some(poll) = cq.start_poll()? {
            return Ok(poll);
        }
        check!(
            start.elapsed() < TIMEOUT,
            "no completion within {TIMEOUT:?}"
        );
        std::thread::yield_now();
    }
}

fn busy<T>(r: rdma::Result<T>, verb: &str, what: &str) -> R<()> {
    match r {
        Ok(_) => fail!("{what} inside an extended poll was accepted"),
        Err(e) => check!(
            e.errno() == libc::EBUSY && e.verb() == verb,
            "{what}: {e} (wanted {verb}, EBUSY)"
        ),
    }
    Ok(())
}

/// While an extended poll holds the provider's CQ lock, another
/// start_poll, a classic poll (also through a clone, and from another
/// thread) and an arm of the CQ fail with EBUSY; before, the first two
/// waited forever for the lock their own thread held. Afterwards the CQ
/// polls normally and nothing was lost.
pub fn ex_poll_refuses_reentry_with_ebusy(env: &TestEnv) -> TestResult {
    let p = pair(env, true)?;
    if let Some(skip) = skip_unless_extended(env, &p.cq_a) {
        return Ok(skip);
    }
    send(&p, 1)?;
    send(&p, 2)?;
    wait(&p.cq_b, 2)?;
    let clone = p.cq_a.clone();
    let mut buf = [WorkCompletion::ZERO; 4];
    let mut seen = Vec::new();
    {
        let mut poll = started(&p.cq_a)?;
        busy(p.cq_a.start_poll(), "ibv_start_poll", "a second start_poll")?;
        busy(
            clone.start_poll(),
            "ibv_start_poll",
            "start_poll of a clone",
        )?;
        busy(p.cq_a.poll(&mut buf), "ibv_poll_cq", "a classic poll")?;
        busy(
            clone.poll(&mut buf),
            "ibv_poll_cq",
            "a classic poll of a clone",
        )?;
        busy(p.cq_a.req_notify(false), "ibv_req_notify_cq", "an arm")?;
        let other = std::thread::scope(|s| {
            s.spawn(|| {
                let mut b = [WorkCompletion::ZERO; 4];
                clone.poll(&mut b).map(|c| c.len())
            })
            .join()
        });
        match other {
            Ok(r) => busy(r, "ibv_poll_cq", "a poll from another thread")?,
            Err(_) => fail!("the other thread panicked"),
        }
        let c = poll.next().expect("a started poll has a completion");
        check!(c.is_success(), "{c:?}");
        seen.push(c.wr_id());
        while let Some(c) = poll.next() {
            seen.push(c.wr_id());
        }
    }
    // The lock is free again: the rest comes by either API.
    let start = Instant::now();
    while seen.len() < 2 {
        for wc in p.cq_a.poll(&mut buf)? {
            seen.push(wc.wr_id());
        }
        check!(start.elapsed() < TIMEOUT, "completions lost: {seen:?}");
    }
    check!(seen == [1, 2], "completions {seen:?}");
    p.cq_a.req_notify(false)?;
    check!(p.cq_a.start_poll()?.is_none(), "completion out of nowhere");
    Ok(Outcome::Passed)
}

/// An extended poll held across an await on a current-thread runtime:
/// another task's poll of the CQ fails with EBUSY rather than spinning
/// forever on the lock the first task holds (it never gets to run again).
pub fn ex_poll_across_tasks_gives_ebusy(env: &TestEnv) -> TestResult {
    let p = pair(env, true)?;
    if let Some(skip) = skip_unless_extended(env, &p.cq_a) {
        return Ok(skip);
    }
    send(&p, 1)?;
    wait(&p.cq_b, 1)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let cq = &p.cq_a;
    let (wr, other) = local.block_on(&rt, async {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let holder = async {
            let mut poll = started(cq)?;
            // Hold the poll (and the provider's lock) across an await.
            let _ = rx.await;
            let id = poll.next().map(|c| c.wr_id());
            R::Ok(id)
        };
        let poller = async {
            tokio::task::yield_now().await;
            let mut b = [WorkCompletion::ZERO; 2];
            let r = cq.poll(&mut b).map(|c| c.len());
            let _ = tx.send(());
            r
        };
        let (h, o) = tokio::time::timeout(Duration::from_secs(20), async {
            tokio::join!(holder, poller)
        })
        .await?;
        R::Ok((h?, o))
    })?;
    busy(other, "ibv_poll_cq", "a poll from another task")?;
    check!(wr == Some(1), "the holder's completion: {wr:?}");
    Ok(Outcome::Passed)
}

/// Dropping an extended poll consumes the completion it started at (which
/// `start_poll` returned; the first `next` yields it) and the ones
/// yielded, never a later one.
pub fn ex_poll_drop_consumes_only_what_it_returned(env: &TestEnv) -> TestResult {
    let p = pair(env, true)?;
    if let Some(skip) = skip_unless_extended(env, &p.cq_a) {
        return Ok(skip);
    }
    for id in 1..=3 {
        send(&p, id)?;
    }
    wait(&p.cq_b, 3)?;
    // Dropped before `next`: the first completion is consumed.
    drop(started(&p.cq_a)?);
    // One yielded, then dropped: the third stays.
    {
        let mut poll = started(&p.cq_a)?;
        let c = poll.next().expect("a started poll has a completion");
        check!(c.wr_id() == 2, "second poll started at {}", c.wr_id());
    }
    let mut poll = started(&p.cq_a)?;
    let c = poll.next().expect("a started poll has a completion");
    check!(c.wr_id() == 3, "third poll started at {}", c.wr_id());
    check!(poll.next().is_none(), "a fourth completion appeared");
    Ok(Outcome::Passed)
}

/// The release in a libibverbs file name, `libibverbs.so.1.ABI.RELEASE.P`.
fn mapped_libibverbs_release() -> R<u32> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    for line in maps.lines() {
        let name = line.rsplit('/').next().unwrap_or("");
        if let Some(rest) = name.strip_prefix("libibverbs.so.") {
            if let Some(r) = rest.split('.').nth(2).and_then(|r| r.parse().ok()) {
                return Ok(r);
            }
        }
    }
    fail!("no libibverbs.so.1.A.R.P in /proc/self/maps")
}

/// On rxe the CQ avoids `ibv_next_poll` exactly when the libibverbs loaded
/// at run time is older than v61 (the VM's v44: on), whatever the headers
/// the crate was built with; with it on, a poll yields one completion even
/// when more are queued.
pub fn rxe_next_poll_workaround_follows_loaded_rdma_core(env: &TestEnv) -> TestResult {
    let p = pair(env, true)?;
    if let Some(skip) = skip_unless_extended(env, &p.cq_a) {
        return Ok(skip);
    }
    let release = mapped_libibverbs_release()?;
    let want = env.provider == Provider::Rxe && release < 61;
    check!(
        p.cq_a.one_per_poll() == want,
        "one_per_poll {} with rdma-core {release} loaded",
        p.cq_a.one_per_poll()
    );
    check!(
        !p.cq_b.one_per_poll(),
        "a classic queue never avoids next_poll"
    );
    send(&p, 1)?;
    send(&p, 2)?;
    wait(&p.cq_b, 2)?;
    // Time for the acknowledgements, so both send completions are queued.
    std::thread::sleep(Duration::from_millis(500));
    let mut poll = started(&p.cq_a)?;
    let mut n = 0;
    while poll.next().is_some() {
        n += 1;
    }
    drop(poll);
    if want {
        check!(n == 1, "{n} completions in one poll with the workaround on");
        let mut poll = started(&p.cq_a)?;
        check!(
            poll.next().map(|c| c.wr_id()) == Some(2),
            "second completion"
        );
    }
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cq::poll":
    extended_cq_falls_back_where_missing,
    extended_batch_and_lending_poll,
    extended_cq_fields_chosen_by_the_caller,
    extended_cq_reads_lid_sl_and_path_bits_as_the_classic_one,
    poll_into_poisoned_storage_reads_no_garbage,
    poll_into_initialised_storage_keeps_skipped_fields,
    ex_poll_refuses_reentry_with_ebusy,
    ex_poll_across_tasks_gives_ebusy,
    ex_poll_drop_consumes_only_what_it_returned,
    rxe_next_poll_workaround_follows_loaded_rdma_core,
);
