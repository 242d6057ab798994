//! Regression tests for the soundness holes of the issue "Sound by
//! construction" (sound_cq): each names the behaviour it proves.
//!
//! Completions polled into storage that held garbage show only what the
//! provider wrote (or zero); an extended poll of a CQ refuses every other use
//! of the CQ while it lives instead of deadlocking on the provider's lock;
//! the rxe `next_poll` workaround follows the rdma-core loaded at run time.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use rdma::{
    CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpCaps, QpType, QueuePair, RecvWr,
    SendWr, WorkCompletion,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::verbs::{cm, connect_rc, open, wait, ACCESS, R, TIMEOUT};

/// What a stack slot may hold before a poll.
const POISON: u8 = 0xa5;
const POISON_U32: u32 = 0xa5a5_a5a5;

/// Two connected RC QPs: `a` sends on `scq`, `b` receives on `rcq`.
struct Pair {
    _ctx: Context,
    _pd: ProtectionDomain,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    a: QueuePair,
    b: QueuePair,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
    _cm: Option<cm::Connection>,
}

fn pair(env: &TestEnv, extended: bool) -> R<Pair> {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = |ext| CompletionQueue::builder(&ctx).cqe(32).extended(ext).build();
    let scq = cq(extended)?;
    let rcq = cq(false)?;
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpCaps::default()
    };
    let a = QueuePair::builder(&pd, QpType::Rc, &scq)
        .recv_cq(&rcq)
        .caps(caps)
        .build()?;
    let b = QueuePair::builder(&pd, QpType::Rc, &rcq)
        .caps(caps)
        .build()?;
    let mr_a = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let mr_b = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let cm = connect_rc(env, &ctx, &a, &b)?;
    Ok(Pair {
        _ctx: ctx,
        _pd: pd,
        scq,
        rcq,
        a,
        b,
        mr_a,
        mr_b,
        _cm: cm,
    })
}

impl Pair {
    /// One signalled SEND of 16 bytes from `a` to a receive posted on `b`.
    fn send(&self, wr_id: u64) -> R<()> {
        let rs = [self.mr_b.sge(0..64)?];
        self.b.post_recv(&mut [RecvWr::new(wr_id, &rs)])?;
        let ss = [self.mr_a.sge(0..16)?];
        self.a
            .post_send(&mut [SendWr::send(wr_id, &ss).signaled()])?;
        Ok(())
    }
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
    p.send(1)?;
    wait(&p.scq, 1)?;
    let mut buf = [MaybeUninit::<WorkCompletion>::uninit(); 4];
    // SAFETY: writes bytes into the 4-entry storage.
    unsafe { std::ptr::write_bytes(buf.as_mut_ptr(), POISON, buf.len()) };
    let wc = poll_one(&p.rcq, &mut buf)?;
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
    p.send(3)?;
    wait(&p.scq, 1)?;
    let mut fresh = [MaybeUninit::<WorkCompletion>::uninit(); 4];
    let wc = poll_one(&p.rcq, &mut fresh)?;
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
    p.send(2)?;
    wait(&p.scq, 1)?;
    let mut marked = WorkCompletion::ZERO;
    // SAFETY: WorkCompletion is a transparent ibv_wc (plain data); only the
    // marker fields change.
    unsafe {
        let raw = std::ptr::from_mut(&mut marked).cast::<rdma::sys::ibv_wc>();
        (*raw).src_qp = 0x5a5a;
        (*raw).wr_id = 99;
    }
    let mut buf = [marked; 2];
    let wc = poll_one(&p.rcq, &mut buf)?;
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
            e.errno() == libc::EBUSY && e.verb == verb,
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
    if let Some(skip) = skip_unless_extended(env, &p.scq) {
        return Ok(skip);
    }
    p.send(1)?;
    p.send(2)?;
    wait(&p.rcq, 2)?;
    let clone = p.scq.clone();
    let mut buf = [WorkCompletion::ZERO; 4];
    let mut seen = Vec::new();
    {
        let mut poll = started(&p.scq)?;
        busy(p.scq.start_poll(), "ibv_start_poll", "a second start_poll")?;
        busy(
            clone.start_poll(),
            "ibv_start_poll",
            "start_poll of a clone",
        )?;
        busy(p.scq.poll(&mut buf), "ibv_poll_cq", "a classic poll")?;
        busy(
            clone.poll(&mut buf),
            "ibv_poll_cq",
            "a classic poll of a clone",
        )?;
        busy(p.scq.req_notify(false), "ibv_req_notify_cq", "an arm")?;
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
        for wc in p.scq.poll(&mut buf)? {
            seen.push(wc.wr_id());
        }
        check!(start.elapsed() < TIMEOUT, "completions lost: {seen:?}");
    }
    check!(seen == [1, 2], "completions {seen:?}");
    p.scq.req_notify(false)?;
    check!(p.scq.start_poll()?.is_none(), "completion out of nowhere");
    Ok(Outcome::Passed)
}

/// An extended poll held across an await on a current-thread runtime:
/// another task's poll of the CQ fails with EBUSY rather than spinning
/// forever on the lock the first task holds (it never gets to run again).
pub fn ex_poll_across_tasks_gives_ebusy(env: &TestEnv) -> TestResult {
    let p = pair(env, true)?;
    if let Some(skip) = skip_unless_extended(env, &p.scq) {
        return Ok(skip);
    }
    p.send(1)?;
    wait(&p.rcq, 1)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let cq = &p.scq;
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
    if let Some(skip) = skip_unless_extended(env, &p.scq) {
        return Ok(skip);
    }
    for id in 1..=3 {
        p.send(id)?;
    }
    wait(&p.rcq, 3)?;
    // Dropped before `next`: the first completion is consumed.
    drop(started(&p.scq)?);
    // One yielded, then dropped: the third stays.
    {
        let mut poll = started(&p.scq)?;
        let c = poll.next().expect("a started poll has a completion");
        check!(c.wr_id() == 2, "second poll started at {}", c.wr_id());
    }
    let mut poll = started(&p.scq)?;
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
    if let Some(skip) = skip_unless_extended(env, &p.scq) {
        return Ok(skip);
    }
    let release = mapped_libibverbs_release()?;
    let want = env.provider == Provider::Rxe && release < 61;
    check!(
        p.scq.one_per_poll() == want,
        "one_per_poll {} with rdma-core {release} loaded",
        p.scq.one_per_poll()
    );
    check!(
        !p.rcq.one_per_poll(),
        "a classic queue never avoids next_poll"
    );
    p.send(1)?;
    p.send(2)?;
    wait(&p.rcq, 2)?;
    // Time for the acknowledgements, so both send completions are queued.
    std::thread::sleep(Duration::from_millis(500));
    let mut poll = started(&p.scq)?;
    let mut n = 0;
    while poll.next().is_some() {
        n += 1;
    }
    drop(poll);
    if want {
        check!(n == 1, "{n} completions in one poll with the workaround on");
        let mut poll = started(&p.scq)?;
        check!(
            poll.next().map(|c| c.wr_id()) == Some(2),
            "second completion"
        );
    }
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "sound_cq":
    poll_into_poisoned_storage_reads_no_garbage,
    poll_into_initialised_storage_keeps_skipped_fields,
    ex_poll_refuses_reentry_with_ebusy,
    ex_poll_across_tasks_gives_ebusy,
    ex_poll_drop_consumes_only_what_it_returned,
    rxe_next_poll_workaround_follows_loaded_rdma_core,
);
