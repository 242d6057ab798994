//! Memory windows: binds that grant remote writes and every way to revoke them.

use rdma::{
    AccessFlags, MemoryRegion, MemoryWindow, MwType, RecvWr, RemoteMemory, SendWr, WcOpcode,
    WcStatus,
};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{completion, failed_with, wait, write_to, RcPair, ACCESS, R};

pub fn memory_windows_grant_remote_writes(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no memory windows".into()));
    }
    let p = RcPair::new(env)?;
    let mr = MemoryRegion::new(&p.pd, 4096, ACCESS | AccessFlags::MW_BIND)?;
    p.mr_a.write(0, b"through a type 1 window")?;
    p.mr_a.write(100, b"through a type 2 window")?;

    let mut mw1 = match MemoryWindow::new(&p.pd, MwType::Type1) {
        Ok(mw) => mw,
        Err(e) if e.errno() == libc::EOPNOTSUPP => {
            return Ok(Outcome::Skipped(format!("no memory windows: {e}")))
        }
        Err(e) => return Err(e.into()),
    };
    let before = mw1.rkey();
    let remote1 = mw1.bind(&p.qp_b, 50, true, &mr, 0..1024, AccessFlags::REMOTE_WRITE)?;
    let wc = wait(&p.cq_b, 1)?[0];
    check!(
        wc.opcode() == WcOpcode::BindMw && wc.wr_id() == 50,
        "{wc:?}"
    );
    check!(
        remote1.rkey == mw1.rkey() && remote1.rkey != mr.rkey(),
        "type 1 bind rkey {before:#x} -> {:#x}",
        remote1.rkey
    );
    let s1 = [p.mr_a.sge(0..23)?];
    p.qp_a
        .post_send(&mut [SendWr::rdma_write(51, &s1, remote1.slice(10, 23)?).signaled()])?;
    wait(&p.cq_a, 1)?;
    check!(
        mr.to_vec(10..33)? == b"through a type 1 window",
        "write through the type 1 window differs"
    );

    let mw2 = MemoryWindow::new(&p.pd, MwType::Type2)?;
    let (bind, remote2) = SendWr::bind_mw(
        60,
        &mw2,
        rdma::inc_rkey(mw2.rkey()),
        &mr,
        2048..3072,
        AccessFlags::REMOTE_WRITE,
    )?;
    p.qp_b.post_send(&mut [bind.signaled()])?;
    let wc = wait(&p.cq_b, 1)?[0];
    check!(
        wc.opcode() == WcOpcode::BindMw && wc.wr_id() == 60,
        "{wc:?}"
    );
    let s2 = [p.mr_a.sge(100..123)?];
    p.qp_a
        .post_send(&mut [SendWr::rdma_write(61, &s2, remote2.slice(0, 23)?).signaled()])?;
    wait(&p.cq_a, 1)?;
    check!(
        mr.to_vec(2048..2071)? == b"through a type 2 window",
        "write through the type 2 window differs"
    );
    // Invalidating the type 2 window's key locally succeeds.
    p.qp_b
        .post_send(&mut [SendWr::local_invalidate(62, remote2.rkey).signaled()])?;
    let wc = wait(&p.cq_b, 1)?[0];
    check!(wc.opcode() == WcOpcode::LocalInvalidate, "{wc:?}");
    Ok(Outcome::Passed)
}

/// A fresh pair and a region of `qp_b`'s side that windows can bind.
fn mw_pair(env: &TestEnv) -> R<(RcPair, MemoryRegion)> {
    let p = RcPair::new(env)?;
    let mr = MemoryRegion::new(&p.pd, 4096, ACCESS | AccessFlags::MW_BIND)?;
    Ok((p, mr))
}

/// Binds type 2 window `mw` to `mr[0..1024]` with `access` on `p.qp_b`.
fn bind2(p: &RcPair, mw: &MemoryWindow, mr: &MemoryRegion, access: AccessFlags) -> R<RemoteMemory> {
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

rdma_tests::tests!(
    "mw":
    memory_windows_grant_remote_writes,
    memory_windows_revoked_every_way,
);
