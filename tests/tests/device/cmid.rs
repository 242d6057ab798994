//! The safe connection manager of `rdma` (rdma::cm) on rxe and siw.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpType, QueuePair, RecvWr,
    SendWr, WcOpcode, WorkCompletion,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::cm::{self, CmQp, CmSide};
use crate::fixtures::{R, T};

/// Each side's QP: RC, a CQ of 32 entries, 4 KiB the peer may write.
const QP: CmQp = CmQp {
    ty: QpType::Rc,
    cqe: 32,
    mr_len: 4096,
    access: AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE),
};

fn wait(cq: &CompletionQueue) -> R<WorkCompletion> {
    let wc = cq.wait_one(T)?;
    check!(wc.is_success(), "{wc:?}");
    Ok(wc)
}

/// A listener on the device's IPv4 address, an ephemeral port.
fn listener(env: &TestEnv, ch: &EventChannel) -> R<(CmId, SocketAddr)> {
    let (id, port) = cm::listen(ch, SocketAddr::new(IpAddr::V4(env.ipv4), 0), 8, None)?;
    check!(port != 0, "no port bound");
    Ok((id, SocketAddr::new(IpAddr::V4(env.ipv4), port)))
}

/// Client resolves and connects with `data`; returns the client's side.
fn start_connect(ch_c: &EventChannel, to: SocketAddr, data: &[u8]) -> R<CmSide> {
    let id = CmId::new(ch_c, PortSpace::Tcp)?;
    cm::resolve(ch_c, &id, to)?;
    let side = CmSide::new(id, QP)?;
    side.id.connect(&ConnParam::new().with_private_data(data))?;
    Ok(side)
}

pub fn connect_send_and_disconnect(env: &TestEnv) -> TestResult {
    let (ch_s, ch_c) = (EventChannel::new()?, EventChannel::new()?);
    let (listen, addr) = listener(env, &ch_s)?;
    let client = start_connect(&ch_c, addr, b"hello from the client")?;

    let mut req = ch_s.expect(&listen, CmEventKind::ConnectRequest, T)?;
    check!(
        req.private_data().starts_with(b"hello from the client"),
        "request private data {:?}",
        req.private_data()
    );
    let sid = req.take_new_id().ok_or("connect request without an id")?;
    check!(
        sid.peer_addr().map(|a| a.ip()) == Some(IpAddr::V4(env.ipv4)),
        "peer {:?}",
        sid.peer_addr()
    );
    let server = CmSide::new(sid, QP)?;
    let rs = [server.mr.sge(0..256)?];
    server
        .id
        .qp()
        .ok_or("no QP")?
        .post_recv(&mut [RecvWr::new(1, &rs)])?;
    server
        .id
        .accept(&ConnParam::new().with_private_data(b"welcome"))?;
    let est = ch_c.expect(&client.id, CmEventKind::Established, T)?;
    check!(
        est.private_data().starts_with(b"welcome"),
        "accept private data {:?}",
        est.private_data()
    );
    ch_s.expect(&server.id, CmEventKind::Established, T)?;

    client.mr.write(0, b"payload through a CM connection")?;
    let ss = [client.mr.sge(0..31)?];
    client
        .id
        .qp()
        .ok_or("no QP")?
        .post_send(&mut [SendWr::send(2, &ss).signaled()])?;
    check!(wait(&client.cq)?.opcode() == WcOpcode::Send);
    let wc = wait(&server.cq)?;
    check!(
        wc.opcode() == WcOpcode::Recv && wc.byte_len() == 31,
        "{wc:?}"
    );
    check!(
        server.mr.to_vec(0..31)? == b"payload through a CM connection",
        "data differs"
    );

    client.id.disconnect()?;
    ch_s.expect(&server.id, CmEventKind::Disconnected, T)?;
    server.id.disconnect()?;
    ch_c.expect(&client.id, CmEventKind::Disconnected, T)?;
    drop(listen);
    Ok(Outcome::Passed)
}

pub fn reject_carries_private_data(env: &TestEnv) -> TestResult {
    let (ch_s, ch_c) = (EventChannel::new()?, EventChannel::new()?);
    let (listen, addr) = listener(env, &ch_s)?;
    let client = start_connect(&ch_c, addr, b"let me in")?;
    let mut req = ch_s.expect(&listen, CmEventKind::ConnectRequest, T)?;
    let sid = req.take_new_id().ok_or("connect request without an id")?;
    sid.reject(b"go away")?;
    let ev = ch_c.wait_event(T)?.ok_or("no event after reject")?;
    check!(ev.kind == CmEventKind::Rejected, "{ev:?}");
    check!(
        ev.private_data().starts_with(b"go away"),
        "reject private data {:?}",
        ev.private_data()
    );
    // The typed error a caller gets when it expected Established.
    let e = rdma::Error::new("rdma_connect", libc::ECONNREFUSED);
    check!(e.errno() == libc::ECONNREFUSED);
    drop((client, sid, listen));
    Ok(Outcome::Passed)
}

pub fn unreachable_address_fails_within_its_timeout(_env: &TestEnv) -> TestResult {
    let ch = EventChannel::new()?;
    let id = CmId::new(&ch, PortSpace::Tcp)?;
    // An address with no route (TEST-NET-3; the VM has no default route):
    // resolution must fail, with a typed error, within the timeout.
    let dst: SocketAddr = "203.0.113.7:7471".parse()?;
    let timeout = Duration::from_millis(500);
    let start = Instant::now();
    match id.resolve_addr(None, dst, timeout) {
        Err(e) => {
            check!(e.verb() == "rdma_resolve_addr", "{e}");
        }
        Ok(()) => {
            let ev = ch
                .wait_event(Duration::from_secs(10))?
                .ok_or("no event at all within 10 s")?;
            check!(
                ev.kind == CmEventKind::AddrError,
                "{dst} has no route, yet: {ev:?}"
            );
            check!(ev.status < 0, "address error without an errno: {ev:?}");
        }
    }
    let took = start.elapsed();
    check!(
        took < timeout + Duration::from_secs(5),
        "took {took:?} for a {timeout:?} timeout"
    );
    Ok(Outcome::Passed)
}

pub fn port_in_use_is_a_typed_error(env: &TestEnv) -> TestResult {
    let ch = EventChannel::new()?;
    let (_listen, addr) = listener(env, &ch)?;
    let other = CmId::new(&ch, PortSpace::Tcp)?;
    match other.bind(addr) {
        Ok(()) => fail!("a second bind to {addr} succeeded"),
        Err(e) => {
            check!(e.errno() == libc::EADDRINUSE, "{e}");
            check!(e.to_string().contains("already bound"), "{e}");
        }
    }
    Ok(Outcome::Passed)
}

/// `local_port` and `peer_port` (librdmacm's `rdma_get_src_port` and
/// `rdma_get_dst_port`) are the ports of `local_addr` and `peer_addr` at
/// each step of an id's life: 0 and 0 on a new id (no address of any
/// family), the bound port on an IPv6 id, the listener's port and no peer
/// on a listener, and each side's port and the other's on a connected
/// pair (both sides, seen from each end).
pub fn ports_are_those_of_the_addresses(env: &TestEnv) -> TestResult {
    let ports = |id: &CmId| {
        (
            id.local_port(),
            id.peer_port(),
            id.local_addr().map_or(0, |a| a.port()),
            id.peer_addr().map_or(0, |a| a.port()),
        )
    };
    let (ch_s, ch_c) = (EventChannel::new()?, EventChannel::new()?);
    let fresh = CmId::new(&ch_c, PortSpace::Tcp)?;
    check!(
        ports(&fresh) == (0, 0, 0, 0),
        "a new id: {:?}",
        ports(&fresh)
    );
    // The source port of an IPv6 address (sockaddr_in6), bound alone.
    let v6 = CmId::new(&ch_c, PortSpace::Tcp)?;
    v6.bind(SocketAddr::new(IpAddr::V6(env.ipv6), 0))?;
    let (l6, p6, a6, _) = ports(&v6);
    check!(
        l6 != 0 && l6 == a6 && p6 == 0,
        "a bound IPv6 id: {:?}",
        ports(&v6)
    );

    let (listen, addr) = listener(env, &ch_s)?;
    check!(
        ports(&listen) == (addr.port(), 0, addr.port(), 0),
        "the listener on {addr}: {:?}",
        ports(&listen)
    );
    let pair = cm::connect(&ch_s, addr, cm::SMALL_RC, |_| Ok(()), |_| Ok(()))??;
    let (c, s) = (ports(&pair.client.id), ports(&pair.server.id));
    check!(
        c.0 != 0 && c.0 == c.2 && c.1 == addr.port() && c.1 == c.3,
        "the client (local, peer, local_addr's, peer_addr's): {c:?}"
    );
    check!(
        s == (addr.port(), c.0, addr.port(), c.0),
        "the server (local, peer, local_addr's, peer_addr's): {s:?}, the client's port {}",
        c.0
    );
    pair.client.id.disconnect()?;
    Ok(Outcome::Passed)
}

pub fn establish_a_qp_built_outside_the_cm(env: &TestEnv) -> TestResult {
    let (ch_s, ch_c) = (EventChannel::new()?, EventChannel::new()?);
    let (listen, addr) = listener(env, &ch_s)?;
    let id = CmId::new(&ch_c, PortSpace::Tcp)?;
    cm::resolve(&ch_c, &id, addr)?;
    // The client's QP is built with the verbs and never given to the id.
    let ctx = id.context()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 8)?;
    let mr = MemoryRegion::new(&pd, 256, AccessFlags::LOCAL_WRITE)?;
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    let to = |state| -> R<()> {
        let (mut attr, mask) = id.init_qp_attr(state)?;
        // SAFETY: the attributes rdma_init_qp_attr made for this QP's next
        // step of the connection this test drives; no CM id owns the QP.
        unsafe { qp.modify(&mut attr, mask)? };
        Ok(())
    };
    to(rdma::sys::IBV_QPS_INIT)?;
    id.connect(&ConnParam {
        qp_num: qp.qp_num(),
        ..ConnParam::new()
    })?;

    let mut req = ch_s.expect(&listen, CmEventKind::ConnectRequest, T)?;
    let sid = req.take_new_id().ok_or("connect request without an id")?;
    let server = CmSide::new(sid, QP)?;
    let rs = [server.mr.sge(0..64)?];
    server
        .id
        .qp()
        .ok_or("no QP")?
        .post_recv(&mut [RecvWr::new(1, &rs)])?;
    server.id.accept(&ConnParam::new())?;
    match env.provider {
        Provider::Rxe => {
            ch_c.expect(&id, CmEventKind::ConnectResponse, T)?;
            check!(
                ch_s.wait_event(Duration::from_millis(300))?.is_none(),
                "the server was established before rdma_establish"
            );
            to(rdma::sys::IBV_QPS_RTR)?;
            to(rdma::sys::IBV_QPS_RTS)?;
            id.establish()?;
        }
        // iWARP: the CM moved the QP (named by number) itself.
        Provider::Siw => {
            ch_c.expect(&id, CmEventKind::Established, T)?;
        }
    }
    ch_s.expect(&server.id, CmEventKind::Established, T)?;
    mr.write(0, b"a QP of its own")?;
    let ss = [mr.sge(0..15)?];
    qp.post_send(&mut [SendWr::send(2, &ss).signaled()])?;
    wait(&cq)?;
    let wc = wait(&server.cq)?;
    check!(wc.byte_len() == 15, "{wc:?}");
    check!(
        server.mr.to_vec(0..15)? == b"a QP of its own",
        "data differs"
    );
    id.disconnect()?;
    ch_s.expect(&server.id, CmEventKind::Disconnected, T)?;
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cm":
    connect_send_and_disconnect,
    reject_carries_private_data,
    unreachable_address_fails_within_its_timeout,
    port_in_use_is_a_typed_error,
    establish_a_qp_built_outside_the_cm,
    ports_are_those_of_the_addresses,
);
