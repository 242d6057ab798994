//! The batch operations beyond the classic work requests: inline data
//! lists, TSO sends, atomic writes and flushes, each run where the device
//! has it and refused with a typed error where it does not.

use std::io::IoSlice;

use rdma::{
    CompletionQueue, Context, ProtectionDomain, QpCaps, QpType, QueuePair, RecvWr, SendFlags,
    SendOps, WcOpcode,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{open, refused, wait, RcPair, R};

/// siw has no extended QPs: a batch never starts there.
fn no_batches(env: &TestEnv) -> Option<Outcome> {
    (env.provider == Provider::Siw).then(|| {
        Outcome::Skipped("siw has no extended QPs (the builder falls back to classic ones)".into())
    })
}

/// Building an RC QP of `ops` on `ctx` is refused with `EOPNOTSUPP`.
fn qp_refused(ctx: &Context, ops: SendOps, what: &str) -> R<rdma::Error> {
    let pd = ProtectionDomain::new(ctx)?;
    let cq = CompletionQueue::new(ctx, 4)?;
    let r = QueuePair::builder(&pd, QpType::Rc, &cq)
        .send_ops(ops)
        .build();
    match r {
        Ok(qp) => fail!(
            "{what}: a QP was built (extended: {}, ops {:?})",
            qp.is_extended(),
            qp.send_ops()
        ),
        Err(e) => {
            check!(
                e.verb() == "ibv_create_qp_ex" && e.errno() == libc::EOPNOTSUPP,
                "{what}: {e}"
            );
            Ok(e)
        }
    }
}

pub fn inline_lists_send_and_write_their_bytes_in_order(env: &TestEnv) -> TestResult {
    if let Some(skip) = no_batches(env) {
        return Ok(skip);
    }
    let p = RcPair::options()
        .caps(QpCaps {
            max_inline_data: 64,
            ..QpCaps::default()
        })
        .send_ops(SendOps::SEND | SendOps::RDMA_WRITE)
        .build(env)?;
    let (mut a, b) = (p.qp_a, p.qp_b);
    let max = a.caps().max_inline_data as usize;
    check!(max >= 64, "max_inline_data {max}");
    let rs: Vec<_> = (0..4)
        .map(|i| p.mr_b.sge(i * 1024..i * 1024 + 1024))
        .collect::<Result<_, _>>()?;
    for (i, s) in rs.iter().enumerate() {
        b.post_recv(&mut [RecvWr::new(i as u64, std::slice::from_ref(s))])?;
    }

    // A SEND of four buffers (one empty), whose memory is overwritten
    // after the call and before the batch completes: the copy was taken
    // at the call.
    let mut parts = [
        b"hello ".to_vec(),
        Vec::new(),
        b"inline ".to_vec(),
        b"list".to_vec(),
    ];
    let want: Vec<u8> = parts.concat();
    let mut batch = a.wr_batch()?;
    {
        let list: Vec<IoSlice<'_>> = parts.iter().map(|b| IoSlice::new(b)).collect();
        batch.send_inline_list(1, SendFlags::SIGNALED, &list);
    }
    for part in &mut parts {
        part.fill(b'#');
    }
    batch.complete()?;
    check!(wait(&p.cq_a, 1)?[0].wr_id() == 1);
    let wc = wait(&p.cq_b, 1)?[0];
    check!(
        wc.wr_id() == 0 && wc.byte_len() as usize == want.len(),
        "{wc:?}"
    );
    check!(
        p.mr_b.to_vec(0..want.len())? == want,
        "received {:?}",
        String::from_utf8_lossy(&p.mr_b.to_vec(0..want.len())?)
    );

    // An empty list is a zero-byte SEND.
    let mut batch = a.wr_batch()?;
    batch.send_inline_list(2, SendFlags::SIGNALED, &[]);
    batch.complete()?;
    check!(wait(&p.cq_a, 1)?[0].wr_id() == 2);
    let wc = wait(&p.cq_b, 1)?[0];
    check!(wc.wr_id() == 1 && wc.byte_len() == 0, "{wc:?}");

    // An RDMA WRITE of a list of exactly max_inline_data bytes.
    let bytes: Vec<u8> = (0..max).map(|i| (i * 7 + 3) as u8).collect();
    let (x, y) = bytes.split_at(max / 3);
    let remote = p.mr_b.remote(8192..8192 + max)?;
    let mut batch = a.wr_batch()?;
    batch.rdma_write_inline_list(
        3,
        SendFlags::SIGNALED,
        &[IoSlice::new(x), IoSlice::new(y)],
        remote,
    );
    batch.complete()?;
    let wc = wait(&p.cq_a, 1)?[0];
    check!(
        wc.wr_id() == 3 && wc.opcode() == WcOpcode::RdmaWrite,
        "{wc:?}"
    );
    check!(
        p.mr_b.to_vec(8192..8192 + max)? == bytes,
        "written bytes differ"
    );

    // Buffers each within the inline size but longer in sum: refused
    // before the provider (which before rdma-core v64 would copy them past
    // its queue entry), the whole batch aborted.
    let big = vec![0xa5u8; max];
    let list = [IoSlice::new(&big), IoSlice::new(&big), IoSlice::new(&big)];
    let mut batch = a.wr_batch()?;
    batch
        .send_inline_list(4, SendFlags::SIGNALED, &[IoSlice::new(b"first")])
        .send_inline_list(5, SendFlags::SIGNALED, &list);
    let e = refused(
        batch.complete(),
        "ibv_wr_set_inline_data_list",
        libc::ENOSPC,
        &format!("{} bytes of inline data", 3 * max),
    )?;
    check!(e.to_string().contains("request 1"), "{e}");
    let mut batch = a.wr_batch()?;
    batch.rdma_write_inline_list(6, SendFlags::SIGNALED, &list[..2], remote);
    refused(
        batch.complete(),
        "ibv_wr_set_inline_data_list",
        libc::ENOSPC,
        "max_inline_data",
    )?;
    // Nothing of those was posted: the next request is the next completion,
    // and the next receive gets its bytes.
    let mut batch = a.wr_batch()?;
    batch.send_inline_list(7, SendFlags::SIGNALED, &[IoSlice::new(b"after")]);
    batch.complete()?;
    check!(
        wait(&p.cq_a, 1)?[0].wr_id() == 7,
        "an aborted request was posted"
    );
    let wc = wait(&p.cq_b, 1)?[0];
    check!(wc.wr_id() == 2 && wc.byte_len() == 5, "{wc:?}");
    check!(p.mr_b.to_vec(2048..2053)? == b"after");

    // A QP created without RDMA WRITE refuses the inline-list WRITE.
    let mut d = RcPair::options()
        .on(&p.pd)
        .send_ops(SendOps::SEND)
        .build(env)?;
    let mut batch = d.qp_a.wr_batch()?;
    batch.rdma_write_inline_list(8, SendFlags::SIGNALED, &[IoSlice::new(b"x")], remote);
    refused(
        batch.complete(),
        "ibv_wr_rdma_write",
        libc::EOPNOTSUPP,
        "send_ops",
    )?;
    Ok(Outcome::Passed)
}

pub fn tso_is_refused_without_a_tso_device(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let attr = ctx.query_device()?;
    check!(
        !attr.tso_supported(QpType::Rc) && !attr.tso_supported(QpType::Ud),
        "{}: a soft device offers TSO?",
        env.device
    );
    // Asked for the TSO op, the builder refuses: no classic QP in its stead
    // (siw), no extended QP without it (rxe).
    qp_refused(&ctx, SendOps::SEND | SendOps::TSO, "an RC QP with TSO")?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 4)?;
    let e = QueuePair::builder(&pd, QpType::Ud, &cq)
        .send_ops(SendOps::SEND | SendOps::TSO)
        .max_tso_header(64)
        .build()
        .err()
        .ok_or("a UD QP with TSO was built")?;
    check!(
        e.verb() == "ibv_create_qp_ex" && e.errno() == libc::EOPNOTSUPP,
        "{e}"
    );
    if let Some(skip) = no_batches(env) {
        println!("    {}: no batches; the QP builds were refused", env.device);
        return Ok(skip);
    }
    // A batch of a QP without the op refuses a TSO send, before the
    // provider (which filled no `wr_send_tso`).
    let mut p = RcPair::options().send_ops(SendOps::SEND).build(env)?;
    let s = p.mr_a.sge(0..64)?;
    let mut batch = p.qp_a.wr_batch()?;
    batch.send_tso(1, SendFlags::SIGNALED, &[0u8; 14], 1400, &s);
    let e = refused(
        batch.complete(),
        "ibv_wr_send_tso",
        libc::EOPNOTSUPP,
        "send_ops",
    )?;
    check!(e.to_string().contains("request 0"), "{e}");
    // And the batch after it posts.
    let mut batch = p.qp_a.wr_batch()?;
    p.qp_b
        .post_recv(&mut [RecvWr::new(9, &[p.mr_b.sge(0..64)?])])?;
    batch.send(2, SendFlags::SIGNALED, &s);
    batch.complete()?;
    check!(wait(&p.cq_a, 1)?[0].wr_id() == 2);
    Ok(Outcome::Passed)
}

pub fn atomic_write_writes_eight_bytes(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let attr = ctx.query_device()?;
    let ops = SendOps::SEND | SendOps::RDMA_WRITE | SendOps::ATOMIC_WRITE;
    if !attr.atomic_write_supported() {
        // rxe before kernel 6.2, siw: the QP is refused, typed, whatever
        // libibverbs' provider would create.
        let e = qp_refused(&ctx, ops, "a QP with atomic write")?;
        check!(e.hint().unwrap_or("").contains("ATOMIC_WRITE"), "{e}");
        println!("    {}: no atomic write: {e}", env.device);
        return Ok(Outcome::Passed);
    }
    if env.provider == Provider::Siw {
        fail!("{}: atomic write offered without extended QPs", env.device);
    }
    let mut p = RcPair::options().send_ops(ops).build(env)?;
    p.mr_b.write(0, &[0x11; 32])?;
    let value = *b"\x01\x23\x45\x67\x89\xab\xcd\xef";
    let remote = p.mr_b.remote(8..16)?;
    let mut batch = p.qp_a.wr_batch()?;
    batch.atomic_write(1, SendFlags::SIGNALED, remote, &value);
    batch.complete()?;
    let wc = wait(&p.cq_a, 1)?[0];
    check!(
        wc.wr_id() == 1 && wc.opcode() == WcOpcode::AtomicWrite,
        "{wc:?}"
    );
    let got = p.mr_b.to_vec(0..32)?;
    check!(got[8..16] == value, "remote bytes {:x?}", &got[8..16]);
    check!(
        got[..8].iter().chain(&got[16..]).all(|&b| b == 0x11),
        "bytes around the write changed: {got:x?}"
    );
    // The value is read at the call: a second write of other bytes lands.
    let mut again = [0u8; 8];
    for (i, b) in again.iter_mut().enumerate() {
        *b = 0xf0 | i as u8;
    }
    let mut batch = p.qp_a.wr_batch()?;
    batch.atomic_write(2, SendFlags::SIGNALED, remote, &again);
    again.fill(0);
    batch.complete()?;
    check!(wait(&p.cq_a, 1)?[0].wr_id() == 2);
    let got = p.mr_b.to_vec(8..16)?;
    check!(
        got == [0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7],
        "remote bytes {got:x?}"
    );
    // A QP without the op refuses it before the provider.
    let mut q = RcPair::options()
        .on(&p.pd)
        .send_ops(SendOps::SEND)
        .build(env)?;
    let mut batch = q.qp_a.wr_batch()?;
    batch.atomic_write(3, SendFlags::SIGNALED, remote, &value);
    refused(
        batch.complete(),
        "ibv_wr_atomic_write",
        libc::EOPNOTSUPP,
        "send_ops",
    )?;
    println!("    {}: atomic write ran", env.device);
    Ok(Outcome::Passed)
}

#[cfg(not(has_ibv_wr_flush))]
pub fn flush_makes_writes_visible(_env: &TestEnv) -> TestResult {
    Ok(Outcome::Skipped(
        "built against rdma-core headers without ibv_wr_flush (rdma-core before v45): no flush API"
            .into(),
    ))
}

#[cfg(has_ibv_wr_flush)]
pub fn flush_makes_writes_visible(env: &TestEnv) -> TestResult {
    use rdma::{AccessFlags, FlushLevel, FlushType};

    let ctx = open(env)?;
    let attr = ctx.query_device()?;
    let ops = SendOps::SEND | SendOps::RDMA_WRITE | SendOps::FLUSH;
    if !attr.flush_supported(FlushType::Global) {
        let e = qp_refused(&ctx, ops, "a QP with flush")?;
        check!(e.hint().unwrap_or("").contains("FLUSH"), "{e}");
        println!("    {}: no flush: {e}", env.device);
        return Ok(Outcome::Passed);
    }
    if env.provider == Provider::Siw {
        fail!("{}: flush offered without extended QPs", env.device);
    }
    let access = crate::fixtures::ACCESS | AccessFlags::FLUSH_GLOBAL;
    let mut p = RcPair::options()
        .send_ops(ops)
        .access_b(access)
        .qp_access(access)
        .build(env)?;
    let data: Vec<u8> = (0..256u32).map(|i| (i * 13 + 1) as u8).collect();
    p.mr_a.write(0, &data)?;
    let s = p.mr_a.sge(0..256)?;
    let remote = p.mr_b.remote(4096..4352)?;
    let mut batch = p.qp_a.wr_batch()?;
    batch
        .rdma_write(1, SendFlags::empty(), &s, remote)
        .flush(
            2,
            SendFlags::SIGNALED,
            remote,
            FlushType::Global,
            FlushLevel::Range,
        )
        .flush(
            3,
            SendFlags::SIGNALED,
            p.mr_b.remote(0..1)?,
            FlushType::Global,
            FlushLevel::Region,
        );
    batch.complete()?;
    let wcs = wait(&p.cq_a, 2)?;
    check!(
        wcs.iter()
            .map(|w| (w.wr_id(), w.opcode()))
            .collect::<Vec<_>>()
            == [(2, WcOpcode::Flush), (3, WcOpcode::Flush)],
        "{wcs:?}"
    );
    check!(p.mr_b.to_vec(4096..4352)? == data, "written bytes differ");

    // Persistence needs persistent memory: the region is refused.
    let r = rdma::MemoryRegion::new(
        &p.pd,
        4096,
        crate::fixtures::ACCESS | AccessFlags::FLUSH_PERSISTENT,
    );
    check!(r.is_err(), "a DRAM region took FLUSH_PERSISTENT");
    println!(
        "    {}: flush ran; FLUSH_PERSISTENT on DRAM: {}",
        env.device,
        r.err().map(|e| e.to_string()).unwrap_or_default()
    );

    // A QP without the op refuses it before the provider.
    let mut q = RcPair::options()
        .on(&p.pd)
        .send_ops(SendOps::SEND)
        .build(env)?;
    let mut batch = q.qp_a.wr_batch()?;
    batch.flush(
        4,
        SendFlags::SIGNALED,
        remote,
        FlushType::Global,
        FlushLevel::Range,
    );
    refused(
        batch.complete(),
        "ibv_wr_flush",
        libc::EOPNOTSUPP,
        "send_ops",
    )?;
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "wr_ext":
    inline_lists_send_and_write_their_bytes_in_order,
    tso_is_refused_without_a_tso_device,
    atomic_write_writes_eight_bytes,
    flush_makes_writes_visible,
);
