//! The SRQ of a CM id (`rdma_create_srq`, `rdma_create_srq_ex`,
//! `rdma_destroy_srq`): the QP the id creates afterwards takes its
//! receives from it over a real CM connection; what may not be done is
//! refused with a typed error before librdmacm; and the SRQ outlives the
//! id that made it while another id's QP uses it, with nothing left behind.

use std::net::{IpAddr, SocketAddr};

use rdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType, QueuePair,
    RecvWr, SendWr, SharedReceiveQueue,
};
use rdma_tests::{check, fail, Outcome, TestEnv, TestResult};

use crate::fixtures::cm::{self, CmSide, SMALL_RC};
use crate::fixtures::{open, refused, R, T};
use crate::unsupported::no_leak;

/// A listener on the device's IPv4 address; its channel and address.
fn listener(env: &TestEnv) -> R<(EventChannel, CmId, SocketAddr)> {
    let ch = EventChannel::new()?;
    let (id, port) = cm::listen(&ch, SocketAddr::new(IpAddr::V4(env.ipv4), 0), 4, None)?;
    Ok((ch, id, SocketAddr::new(IpAddr::V4(env.ipv4), port)))
}

/// Has librdmacm open the device (its context stays open once an id was
/// on it, whichever test came first), so that a count of the kernel's
/// objects around a test sees only what the test made.
pub(crate) fn open_cm_device(env: &TestEnv) -> R<()> {
    let ch = EventChannel::new()?;
    let id = CmId::new(&ch, PortSpace::Tcp)?;
    id.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    Ok(())
}

/// The id of the next connect request on `ch`.
fn request(ch: &EventChannel) -> R<CmId> {
    match ch.wait_event(T)? {
        Some(mut ev) if ev.kind == CmEventKind::ConnectRequest => {
            Ok(ev.take_new_id().ok_or("connect request without an id")?)
        }
        other => fail!("the listener got {other:?}"),
    }
}

/// Sends `msg` from `a`'s QP (completions on `a_cq`, bytes at the start of
/// `a_mr`) and waits for `b_cq`'s receive completion: its work request ID.
fn send(
    a: (&CmId, &CompletionQueue, &MemoryRegion),
    b_cq: &CompletionQueue,
    msg: &[u8],
) -> R<rdma::WorkCompletion> {
    let (id, cq, mr) = a;
    mr.write(0, msg)?;
    let s = [mr.sge(0..msg.len())?];
    id.qp()
        .ok_or("no QP")?
        .post_send(&mut [SendWr::send(9, &s).signaled()])?;
    check!(cq.wait_one(T)?.is_success(), "the send failed");
    let wc = b_cq.wait_one(T)?;
    check!(
        wc.is_success() && wc.byte_len() as usize == msg.len(),
        "{wc:?}"
    );
    Ok(wc)
}

/// Disconnects a connected pair, both sides seeing `Disconnected`.
fn disconnect(c: (&EventChannel, &CmId), s: (&EventChannel, &CmId)) -> R<()> {
    c.1.disconnect()?;
    s.0.expect(s.1, CmEventKind::Disconnected, T)?;
    s.1.disconnect()?;
    c.0.expect(c.1, CmEventKind::Disconnected, T)?;
    Ok(())
}

pub fn qp_of_the_id_receives_through_its_srq(env: &TestEnv) -> TestResult {
    let (ch_s, _listen, to) = listener(env)?;
    let ch_c = EventChannel::new()?;
    let mut cid = CmId::new(&ch_c, PortSpace::Tcp)?;
    let other = open(env)?;
    let other_pd = ProtectionDomain::new(&other)?;
    refused(
        cid.create_srq(&other_pd, 16, 1),
        "rdma_create_srq",
        libc::EINVAL,
        "not bound to a device",
    )?;
    cm::resolve(&ch_c, &cid, to)?;
    let ctx = cid.context()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 32)?;
    let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
    // A PD of another context of the same device: its handle means nothing
    // on the id's context, so it is refused before librdmacm.
    refused(
        cid.create_srq(&other_pd, 16, 1),
        "rdma_create_srq",
        libc::EINVAL,
        "not of the id's context",
    )?;
    refused(
        cid.create_srq(&pd, 0, 1),
        "rdma_create_srq",
        libc::EINVAL,
        "at least 1",
    )?;
    // The client's SRQ through rdma_create_srq_ex, the server's through
    // rdma_create_srq.
    let granted = cid
        .create_srq_ex(SharedReceiveQueue::builder(&pd).max_wr(16).max_sge(1))?
        .max_wr();
    check!(granted >= 16, "granted {granted}");
    refused(
        cid.create_srq(&pd, 16, 1),
        "rdma_create_srq",
        libc::EEXIST,
        "already has an SRQ",
    )?;
    cid.create_qp(&pd, QpType::Rc, &cq, &cq, QpCaps::default())?;
    refused(
        cid.destroy_srq(),
        "rdma_destroy_srq",
        libc::EBUSY,
        "still uses the SRQ",
    )?;
    check!(cid.srq().is_some(), "a refused destroy took the SRQ away");
    cid.connect(&ConnParam::new())?;

    let mut sid = request(&ch_s)?;
    let sctx = sid.context()?;
    let spd = ProtectionDomain::new(&sctx)?;
    let scq = CompletionQueue::new(&sctx, 32)?;
    let smr = MemoryRegion::new(&spd, 4096, AccessFlags::LOCAL_WRITE)?;
    let granted = sid.create_srq(&spd, 16, 1)?.max_wr();
    check!(granted >= 16, "granted {granted}");
    sid.create_qp(&spd, QpType::Rc, &scq, &scq, QpCaps::default())?;
    let r = [smr.sge(1024..1088)?, smr.sge(1088..1152)?];
    sid.srq()
        .ok_or("the server lost its SRQ")?
        .post_recv(&mut [RecvWr::new(100, &r[..1]), RecvWr::new(101, &r[1..])])?;
    sid.accept(&ConnParam::new())?;
    ch_c.expect(&cid, CmEventKind::Established, T)?;
    ch_s.expect(&sid, CmEventKind::Established, T)?;

    // Client -> server: both land in the server id's SRQ, in order.
    for (i, msg) in [&b"srq-zero"[..], b"srq-one"].into_iter().enumerate() {
        let wc = send((&cid, &cq, &mr), &scq, msg)?;
        check!(wc.wr_id() == 100 + i as u64, "receive {i}: {wc:?}");
        let at = 1024 + 64 * i;
        check!(
            smr.to_vec(at..at + msg.len())? == msg,
            "receive {i}: the bytes differ"
        );
    }
    // Server -> client: into the client id's SRQ.
    let cs = [mr.sge(2048..2112)?];
    cid.srq()
        .ok_or("the client lost its SRQ")?
        .post_recv(&mut [RecvWr::new(200, &cs)])?;
    let wc = send((&sid, &scq, &smr), &cq, b"back")?;
    check!(wc.wr_id() == 200, "{wc:?}");
    check!(mr.to_vec(2048..2052)? == b"back", "the bytes differ");

    disconnect((&ch_c, &cid), (&ch_s, &sid))?;
    // The server's id goes before its SRQ: a clone keeps it, and it still
    // takes receives.
    let keep = sid.srq().ok_or("the server lost its SRQ")?.clone();
    drop(sid);
    keep.post_recv(&mut [RecvWr::new(102, &r[..1])])?;
    drop(keep);
    // The client destroys its QP, then its SRQ (rdma_destroy_srq); a second
    // destroy has nothing to do.
    cid.destroy_qp();
    cid.destroy_srq()?;
    check!(cid.srq().is_none(), "the SRQ is still on the id");
    cid.destroy_srq()?;
    // The id takes a new SRQ after that.
    cid.create_srq(&pd, 4, 1)?;
    Ok(Outcome::Passed)
}

pub fn srq_of_another_id_outlives_it_with_nothing_left(env: &TestEnv) -> TestResult {
    open_cm_device(env)?;
    let received = no_leak(env, || {
        let (ch_s, listen, to) = listener(env)?;
        // Id X: bound to the device's address, with an SRQ and no QP.
        let ch_x = EventChannel::new()?;
        let mut x = CmId::new(&ch_x, PortSpace::Tcp)?;
        x.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
        let ctx = x.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
        let srq = x.create_srq(&pd, 8, 1)?.clone();

        let ch_c = EventChannel::new()?;
        let cid = CmId::new(&ch_c, PortSpace::Tcp)?;
        cm::resolve(&ch_c, &cid, to)?;
        let client = CmSide::new(cid, SMALL_RC)?;
        client.id.connect(&ConnParam::new())?;

        // The server's QP takes its receives from X's SRQ.
        let mut sid = request(&ch_s)?;
        let qp = QueuePair::builder(&pd, QpType::Rc, &cq).srq(&srq).build()?;
        sid.attach_qp(qp)?;
        // An id with a QP takes no SRQ: the QP would not use it.
        refused(
            sid.create_srq(&pd, 8, 1),
            "rdma_create_srq",
            libc::EINVAL,
            "already has a QP",
        )?;
        let r = [mr.sge(0..64)?, mr.sge(64..128)?];
        srq.post_recv(&mut [RecvWr::new(300, &r[..1])])?;
        sid.accept(&ConnParam::new())?;
        ch_c.expect(&client.id, CmEventKind::Established, T)?;
        ch_s.expect(&sid, CmEventKind::Established, T)?;

        // X goes first: librdmacm forgets the SRQ, which lives on for the
        // server's QP and the clone.
        drop(x);
        srq.post_recv(&mut [RecvWr::new(301, &r[1..])])?;
        drop(srq);
        let mut got = Vec::new();
        for msg in [&b"first"[..], b"second"] {
            let wc = send((&client.id, &client.cq, &client.mr), &cq, msg)?;
            got.push(wc.wr_id());
        }
        check!(got == [300, 301], "receives {got:?}");
        check!(mr.to_vec(64..70)? == b"second", "the bytes differ");
        disconnect((&ch_c, &client.id), (&ch_s, &sid))?;
        drop((sid, client, listen));
        Ok(got.len())
    })?;
    check!(received == 2, "{received} receives");
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cm_srq":
    qp_of_the_id_receives_through_its_srq,
    srq_of_another_id_outlives_it_with_nothing_left,
);
