//! The edges of the verbs that rdma-core's own tests (pyverbs) probe:
//! atomics that miss or fault, memory windows revoked every way verbs
//! offers, registrations verbs forbids, receives posted before a QP is
//! ready or past its queue, and zero-length operations. Each answer is a
//! typed error or a completion whose status names the fault.

use rdma::{
    AccessFlags, MemoryRegion, MemoryWindow, MwType, QpCaps, QueuePair, RecvWr, RemoteMemory,
    SendFlags, SendOps, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::verbs::{self, Pair, ACCESS, R};

const T: std::time::Duration = std::time::Duration::from_secs(10);

/// The one completion of a request on `qp`'s CQ `cq`, success or not.
fn completion(cq: &rdma::CompletionQueue) -> R<WorkCompletion> {
    Ok(cq.wait_one(T)?)
}

/// Checks that `wc` failed with `status`, naming `what`.
fn failed_with(wc: &WorkCompletion, status: WcStatus, what: &str) -> R<()> {
    check!(
        wc.status() == status,
        "{what}: {:?}, expected {status:?} ({wc:?})",
        wc.status()
    );
    Ok(())
}

/// An RDMA WRITE of 8 bytes of `p.mr_a` to `remote` from `p.qp_a`, and its
/// completion.
fn write_to(p: &Pair, remote: RemoteMemory, wr_id: u64) -> R<WorkCompletion> {
    let s = [p.mr_a.sge(0..8)?];
    p.qp_a
        .post_send(&mut [SendWr::rdma_write(wr_id, &s, remote).signaled()])?;
    completion(&p.cq_a)
}

fn atomic(p: &Pair, remote: RemoteMemory, compare: u64, swap: u64) -> R<WorkCompletion> {
    let res = [p.mr_a.sge(64..72)?];
    p.qp_a
        .post_send(&mut [SendWr::atomic_cmp_swp(9, &res, remote, compare, swap).signaled()])?;
    completion(&p.cq_a)
}

pub fn atomics_that_miss_or_fault(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        // iWARP has no atomics: the post itself is refused, typed.
        let p = Pair::new(env, false, QpCaps::default())?;
        let res = [p.mr_a.sge(64..72)?];
        let target = p.mr_b.remote(0..8)?;
        return match p
            .qp_a
            .post_send(&mut [SendWr::atomic_fetch_add(1, &res, target, 1).signaled()])
        {
            Err(e) => {
                check!(
                    matches!(e.errno(), libc::EINVAL | libc::EOPNOTSUPP),
                    "siw's refusal of an atomic: {e}"
                );
                Ok(Outcome::Passed)
            }
            Ok(()) => {
                let wc = completion(&p.cq_a)?;
                check!(!wc.is_success(), "siw executed an atomic: {wc:?}");
                Ok(Outcome::Passed)
            }
        };
    }

    // A compare that does not match: the old value comes back, the target
    // stays.
    let p = Pair::new(env, false, QpCaps::default())?;
    p.mr_b.write(0, &100u64.to_ne_bytes())?;
    p.mr_a.write(64, &[0xee; 8])?;
    let wc = atomic(&p, p.mr_b.remote(0..8)?, 5, 7)?;
    check!(
        wc.is_success() && wc.opcode() == WcOpcode::CompareSwap,
        "{wc:?}"
    );
    check!(
        p.mr_a.to_vec(64..72)? == 100u64.to_ne_bytes(),
        "a missed compare returned {:?}",
        p.mr_a.to_vec(64..72)?
    );
    check!(
        p.mr_b.to_vec(0..8)? == 100u64.to_ne_bytes(),
        "a missed compare changed the target"
    );

    // Each fault ends its QP's life (the QP goes to ERROR): a pair each.
    let p = Pair::new(env, false, QpCaps::default())?;
    let mut bad_key = p.mr_b.remote(0..8)?;
    bad_key.rkey ^= 0x80;
    failed_with(
        &atomic(&p, bad_key, 0, 1)?,
        WcStatus::RemoteAccessError,
        "an atomic with a bad rkey",
    )?;

    let p = Pair::new(env, false, QpCaps::default())?;
    let no_atomic = MemoryRegion::new(
        &p.pd,
        64,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )?;
    no_atomic.write(0, &3u64.to_ne_bytes())?;
    failed_with(
        &atomic(&p, no_atomic.remote(0..8)?, 3, 4)?,
        WcStatus::RemoteAccessError,
        "an atomic on a region without REMOTE_ATOMIC",
    )?;
    check!(
        no_atomic.to_vec(0..8)? == 3u64.to_ne_bytes(),
        "a refused atomic changed the target"
    );

    // An unaligned target: refused at the post (rxe's library checks) or
    // by the responder.
    let p = Pair::new(env, false, QpCaps::default())?;
    p.mr_b.write(0, &[0; 16])?;
    let res = [p.mr_a.sge(64..72)?];
    let unaligned = p.mr_b.remote(4..12)?;
    match p
        .qp_a
        .post_send(&mut [SendWr::atomic_cmp_swp(10, &res, unaligned, 0, u64::MAX).signaled()])
    {
        Err(e) => check!(e.errno() == libc::EINVAL, "an unaligned atomic: {e}"),
        Ok(()) => {
            let wc = completion(&p.cq_a)?;
            check!(!wc.is_success(), "an unaligned atomic succeeded: {wc:?}");
        }
    }
    check!(
        p.mr_b.to_vec(0..16)? == [0; 16],
        "an unaligned atomic changed the target"
    );
    // A bad lkey cannot be built from safe code: an SGE comes only from a
    // live region's `sge`.
    Ok(Outcome::Passed)
}

pub fn remote_writes_need_local_write(env: &TestEnv) -> TestResult {
    let ctx = verbs::open(env)?;
    let pd = rdma::ProtectionDomain::new(&ctx)?;
    for access in [
        AccessFlags::REMOTE_WRITE,
        AccessFlags::REMOTE_ATOMIC,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    ] {
        match MemoryRegion::new(&pd, 4096, access) {
            Ok(_) => fail!("{access:?} without LOCAL_WRITE was registered"),
            Err(e) => {
                check!(e.errno() == libc::EINVAL, "{access:?}: {e}");
                check!(
                    e.to_string().contains("need LOCAL_WRITE"),
                    "{access:?}: no hint in {e}"
                );
            }
        }
    }
    // Relaxed ordering is an optional flag: taken, and traffic flows.
    let p = Pair::new(env, false, QpCaps::default())?;
    let relaxed = MemoryRegion::new(&p.pd, 4096, ACCESS | AccessFlags::RELAXED_ORDERING)?;
    p.mr_a.write(0, b"relaxed!")?;
    let wc = write_to(&p, relaxed.remote(100..108)?, 1)?;
    check!(wc.is_success(), "a write into a relaxed region: {wc:?}");
    check!(
        relaxed.to_vec(100..108)? == b"relaxed!",
        "the write differs"
    );
    let _ = &ctx;
    Ok(Outcome::Passed)
}

/// A fresh pair and a region of `qp_b`'s side that windows can bind.
fn mw_pair(env: &TestEnv) -> R<(Pair, MemoryRegion)> {
    let p = Pair::new(env, false, QpCaps::default())?;
    let mr = MemoryRegion::new(&p.pd, 4096, ACCESS | AccessFlags::MW_BIND)?;
    Ok((p, mr))
}

/// Binds type 2 window `mw` to `mr[0..1024]` with `access` on `p.qp_b`.
fn bind2(p: &Pair, mw: &MemoryWindow, mr: &MemoryRegion, access: AccessFlags) -> R<RemoteMemory> {
    let (bind, remote) = SendWr::bind_mw(70, mw, rdma::inc_rkey(mw.rkey()), mr, 0..1024, access)?;
    p.qp_b.post_send(&mut [bind.signaled()])?;
    let wc = completion(&p.cq_b)?;
    check!(
        wc.is_success() && wc.opcode() == WcOpcode::BindMw,
        "bind: {wc:?}"
    );
    Ok(remote)
}

pub fn memory_windows_revoked_every_way(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        let (p, mr) = mw_pair(env)?;
        // siw has no windows, but iWARP's SEND with invalidate revokes a
        // region's STag.
        let e = MemoryWindow::new(&p.pd, MwType::Type2)
            .err()
            .ok_or("siw allocated a memory window")?;
        check!(
            matches!(e.errno(), libc::EOPNOTSUPP | libc::ENOSYS),
            "siw's window allocation: {e}"
        );
        let remote = mr.remote(0..1024)?;
        check!(write_to(&p, remote, 1)?.is_success(), "write before");
        let rs = [p.mr_b.sge(0..64)?];
        p.qp_b.post_recv(&mut [RecvWr::new(2, &rs)])?;
        let s = [p.mr_a.sge(0..8)?];
        p.qp_a
            .post_send(&mut [SendWr::send_with_invalidate(3, &s, mr.rkey()).signaled()])?;
        check!(completion(&p.cq_a)?.is_success(), "send with invalidate");
        // siw of kernel 6.1 invalidates no STag of a region from
        // ibv_reg_mr: the receive fails (a Terminate ends the connection).
        // Either the key is revoked or the receive fails, typed.
        let wc = completion(&p.cq_b)?;
        if wc.is_success() {
            check!(
                wc.invalidated_rkey() == Some(mr.rkey()),
                "the receive of a send with invalidate: {wc:?}"
            );
            let wc = write_to(&p, remote, 4)?;
            check!(
                !wc.is_success(),
                "a write after the STag was invalidated: {wc:?}"
            );
        } else {
            // Kernel 6.1: RemoteInvalidRequest.
            println!(
                "    siw0: a SEND with invalidate of a region's STag: {:?}",
                wc.status()
            );
        }
        return Ok(Outcome::Passed);
    }
    let remote_rw = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;

    // A SEND with invalidate from the peer revokes a type 2 window.
    let (p, mr) = mw_pair(env)?;
    let mw = MemoryWindow::new(&p.pd, MwType::Type2)?;
    let remote = bind2(&p, &mw, &mr, remote_rw)?;
    check!(write_to(&p, remote, 1)?.is_success(), "write before");
    let rs = [p.mr_b.sge(0..64)?];
    p.qp_b.post_recv(&mut [RecvWr::new(2, &rs)])?;
    p.mr_a.write(0, b"revoke")?;
    let s = [p.mr_a.sge(0..6)?];
    p.qp_a
        .post_send(&mut [SendWr::send_with_invalidate(3, &s, remote.rkey).signaled()])?;
    check!(completion(&p.cq_a)?.is_success(), "send with invalidate");
    let wc = completion(&p.cq_b)?;
    // rxe of kernel 6.1 does not name the key in the completion; the
    // invalidation itself is proved by the write below.
    check!(
        wc.is_success() && wc.invalidated_rkey().is_none_or(|k| k == remote.rkey),
        "the receive of a send with invalidate of {:#x}: {wc:?}, flags {:#x}, invalidated {:?}",
        remote.rkey,
        wc.wc_flags(),
        wc.invalidated_rkey()
    );
    check!(p.mr_b.to_vec(0..6)? == b"revoke", "its data differs");
    failed_with(
        &write_to(&p, remote, 4)?,
        WcStatus::RemoteAccessError,
        "a write after a send with invalidate",
    )?;

    // A local invalidate revokes it too.
    let (p, mr) = mw_pair(env)?;
    let mw = MemoryWindow::new(&p.pd, MwType::Type2)?;
    let remote = bind2(&p, &mw, &mr, remote_rw)?;
    p.qp_b
        .post_send(&mut [SendWr::local_invalidate(5, remote.rkey).signaled()])?;
    check!(completion(&p.cq_b)?.is_success(), "local invalidate");
    failed_with(
        &write_to(&p, remote, 6)?,
        WcStatus::RemoteAccessError,
        "a write after a local invalidate",
    )?;

    // A window bound for reading only: reads pass, writes fail.
    let (p, mr) = mw_pair(env)?;
    let mw = MemoryWindow::new(&p.pd, MwType::Type2)?;
    let remote = bind2(&p, &mw, &mr, AccessFlags::REMOTE_READ)?;
    mr.write(0, b"readable")?;
    let s = [p.mr_a.sge(200..208)?];
    p.qp_a
        .post_send(&mut [SendWr::rdma_read(7, &s, remote.slice(0, 8)?).signaled()])?;
    check!(completion(&p.cq_a)?.is_success(), "a read through it");
    check!(p.mr_a.to_vec(200..208)? == b"readable", "the read differs");
    failed_with(
        &write_to(&p, remote, 8)?,
        WcStatus::RemoteAccessError,
        "a write through a read-only window",
    )?;
    check!(mr.to_vec(0..8)? == b"readable", "the refused write landed");

    // A type 1 window unbound (a zero-length bind).
    let (p, mr) = mw_pair(env)?;
    let mut mw1 = MemoryWindow::new(&p.pd, MwType::Type1)?;
    let remote = mw1.bind(&p.qp_b, 9, true, &mr, 0..1024, remote_rw)?;
    check!(completion(&p.cq_b)?.is_success(), "type 1 bind");
    check!(
        write_to(&p, remote, 10)?.is_success(),
        "write before unbind"
    );
    mw1.unbind(&p.qp_b, 11, true, &mr)?;
    let wc = completion(&p.cq_b)?;
    check!(
        wc.is_success() && wc.opcode() == WcOpcode::BindMw,
        "unbind: {wc:?}"
    );
    failed_with(
        &write_to(&p, remote, 12)?,
        WcStatus::RemoteAccessError,
        "a write after the window was unbound",
    )?;
    // A type 2 window is not unbound this way.
    let mut mw2 = MemoryWindow::new(&p.pd, MwType::Type2)?;
    let e = mw2
        .unbind(&p.qp_b, 13, true, &mr)
        .err()
        .ok_or("a type 2 window unbound by ibv_bind_mw")?;
    check!(e.errno() == libc::EINVAL, "{e}");

    // A type 1 window freed while bound.
    let (p, mr) = mw_pair(env)?;
    let mut mw1 = MemoryWindow::new(&p.pd, MwType::Type1)?;
    let remote = mw1.bind(&p.qp_b, 14, true, &mr, 0..1024, remote_rw)?;
    check!(completion(&p.cq_b)?.is_success(), "type 1 bind");
    drop(mw1);
    failed_with(
        &write_to(&p, remote, 15)?,
        WcStatus::RemoteAccessError,
        "a write after the window was freed",
    )?;
    Ok(Outcome::Passed)
}

pub fn receive_queue_edges_and_zero_length(env: &TestEnv) -> TestResult {
    let ctx = verbs::open(env)?;
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
    let p = Pair::new(env, false, QpCaps::default())?;
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
    let mut p = Pair::with_ops(env, SendOps::all(), caps)?;
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

    let sent: Vec<_> = verbs::wait(&p.cq_a, 8)?
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
    let got = verbs::wait(&p.cq_b, 5)?;
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
    let ops: Vec<_> = verbs::wait(&p.cq_b, 2)?
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
    let other = verbs::open(env)?;
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
    let mut q = Pair::new(env, true, QpCaps::default())?;
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

pub fn ud_extended_and_event_driven(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    let ctx = verbs::open(env)?;
    let pd = rdma::ProtectionDomain::new(&ctx)?;
    let (gid, idx) = verbs::roce_gid(&ctx, env)?;
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
    let cq = rdma::CompletionQueue::builder(&ctx)
        .cqe(16)
        .extended(true)
        .channel(&ch)
        .build()?;
    let qkey = 0x1111_2222;
    let build = || {
        QueuePair::builder(&pd, rdma::QpType::Ud, &cq)
            .send_ops(SendOps::SEND | SendOps::SEND_WITH_IMM)
            .build()
    };
    let (mut a, b) = (build()?, build()?);
    check!(
        a.is_extended() && cq.is_extended(),
        "rxe gave no extended QP or CQ"
    );
    for qp in [&a, &b] {
        qp.to_init(&rdma::InitAttr {
            qkey,
            ..rdma::InitAttr::new(1)
        })?;
        qp.to_rtr(None)?;
        qp.to_rts(&rdma::RtsAttr::default())?;
    }
    let ah = rdma::AddressHandle::new(&pd, &rdma::Path::to_gid(gid, idx, 1))?;
    let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
    let rs = [mr.sge(1024..2048)?];
    b.post_recv(&mut [RecvWr::new(1, &rs)])?;
    mr.write(0, b"extended datagram")?;
    let s = mr.sge(0..17)?;
    cq.req_notify(false)?;
    let mut batch = a.wr_batch()?;
    batch.send_ud(2, SendFlags::SIGNALED, &s, &ah, b.qp_num(), qkey);
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
        seen[0].0 == WcOpcode::Send && seen[1] == (WcOpcode::Recv, 40 + 17, a.qp_num(), b.qp_num()),
        "completions {seen:?}"
    );
    check!(
        mr.to_vec(1064..1081)? == b"extended datagram",
        "the datagram differs"
    );
    Ok(Outcome::Passed)
}

pub fn extended_cq_fields_chosen_by_the_caller(env: &TestEnv) -> TestResult {
    use rdma::WcFlags;
    let ctx = verbs::open(env)?;
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
    let cq = rdma::CompletionQueue::builder(&ctx)
        .cqe(8)
        .wc_flags(few)
        .build()?;
    check!(
        cq.is_extended() && cq.wc_flags() == Some(few),
        "flags {:?}",
        cq.wc_flags()
    );
    let pd = rdma::ProtectionDomain::new(&ctx)?;
    let qkey = 0x2222_3333;
    let build = || QueuePair::builder(&pd, rdma::QpType::Ud, &cq).build();
    let (a, b) = (build()?, build()?);
    for qp in [&a, &b] {
        qp.to_init(&rdma::InitAttr {
            qkey,
            ..rdma::InitAttr::new(1)
        })?;
        qp.to_rtr(None)?;
        qp.to_rts(&rdma::RtsAttr::default())?;
    }
    let (gid, idx) = verbs::roce_gid(&ctx, env)?;
    let ah = rdma::AddressHandle::new(&pd, &rdma::Path::to_gid(gid, idx, 1))?;
    let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
    let rs = [mr.sge(1024..2048)?];
    b.post_recv(&mut [RecvWr::new(1, &rs)])?;
    let ss = [mr.sge(0..9)?];
    a.post_send(&mut [SendWr::send_with_imm(2, &ss, 7)
        .ud(&ah, b.qp_num(), qkey)
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

rdma_tests::tests!(
    "verbs_edge":
    atomics_that_miss_or_fault,
    remote_writes_need_local_write,
    memory_windows_revoked_every_way,
    extended_batch_every_operation,
    ud_extended_and_event_driven,
    extended_cq_fields_chosen_by_the_caller,
    receive_queue_edges_and_zero_length,
);
