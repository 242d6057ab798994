//! The blocking connection manager (`rdma::cm::Endpoint`, `AddrInfo`):
//! address resolution, connections with the `rdma_verbs.h` helpers, and
//! what safe code can do wrong with them.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rdma::cm::{
    AddrHints, AddrInfo, CmEventKind, CmId, ConnParam, Endpoint, EpAttr, EventChannel, PortSpace,
};
use rdma::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType, QueuePair,
    RecvWr, SendFlags, SendWr, SharedReceiveQueue, WcOpcode,
};
use rdma_tests::{check, fail, Outcome, TestEnv, TestResult};

type R<T> = Result<T, Box<dyn std::error::Error>>;
const T: Duration = Duration::from_secs(10);

const ATTR: EpAttr = EpAttr {
    qp_type: rdma::QpType::Rc,
    caps: QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    },
    sq_sig_all: true,
};

/// A listening endpoint on the device's IPv4 address, an ephemeral port.
fn listener(env: &TestEnv, attr: Option<EpAttr>) -> R<(Endpoint, SocketAddr)> {
    let ip = env.ipv4.to_string();
    let info = AddrInfo::resolve(Some(&ip), Some("0"), &AddrHints::passive())?;
    let l = Endpoint::create(&info, attr)?;
    l.listen(4)?;
    let at = l.local_addr().ok_or("a listener without an address")?;
    check!(at.port() != 0, "no port bound: {at}");
    Ok((l, at))
}

/// An active endpoint with `ATTR` to `to`, address and route resolved.
fn client(to: SocketAddr) -> R<Endpoint> {
    let (host, port) = (to.ip().to_string(), to.port().to_string());
    let info = AddrInfo::resolve(Some(&host), Some(&port), &AddrHints::default())?;
    Ok(Endpoint::create(&info, Some(ATTR))?)
}

/// Connects `c` to `l`'s next request, accepted; the server's endpoint.
/// The client connects on another thread: a blocking connect waits for the
/// accept.
fn connect(l: &Endpoint, c: &Endpoint) -> R<Endpoint> {
    std::thread::scope(|s| {
        let conn = s.spawn(|| c.connect(&ConnParam::new(), T).map(|_| ()));
        let accepted = l
            .get_request(T)
            .and_then(|r| r.ep.accept(&ConnParam::new(), T).map(|_| r.ep));
        let connected = conn.join().map_err(|_| "the connecting thread panicked")?;
        let ep = accepted?;
        connected?;
        Ok(ep)
    })
}

pub fn addrinfo_resolves_and_refuses_typed(env: &TestEnv) -> TestResult {
    let ip = env.ipv4.to_string();
    let info = AddrInfo::resolve(Some(&ip), Some("7471"), &AddrHints::default())?;
    let e = info.entries();
    let want = SocketAddr::new(IpAddr::V4(env.ipv4), 7471);
    check!(
        e.first().and_then(|e| e.dst) == Some(want) && !e[0].passive,
        "active entries {e:?}"
    );
    let passive = AddrInfo::resolve(None, Some("7471"), &AddrHints::passive())?;
    let p = passive.entries();
    check!(
        p.first().is_some_and(|e| e.passive
            && e.src
                .is_some_and(|a| a.ip().is_unspecified() && a.port() == 7471)),
        "passive entries {p:?}"
    );
    // A name where only numbers are allowed: the resolver's refusal, typed.
    let numeric = AddrHints {
        numeric_host: true,
        ..AddrHints::default()
    };
    let e = AddrInfo::resolve(Some("not-an-address"), Some("7471"), &numeric)
        .err()
        .ok_or("a name resolved as a number")?;
    check!(e.errno() == libc::EADDRNOTAVAIL, "{e}");
    let e = AddrInfo::resolve(Some("192.0.2.1\0x"), None, &AddrHints::default())
        .err()
        .ok_or("a NUL byte was passed on")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    Ok(Outcome::Passed)
}

pub fn endpoints_connect_send_write_read(env: &TestEnv) -> TestResult {
    let (l, at) = listener(env, Some(ATTR))?;
    let c = client(at)?;
    // The client's receive must be posted before the server can send.
    let c_recv = c.reg_msgs(64)?;
    c.post_recv(1, &c_recv.sge(0..64)?)?;
    let s = connect(&l, &c)?;
    check!(
        s.peer_addr().map(|a| a.ip()) == Some(IpAddr::V4(env.ipv4)),
        "peer {:?}",
        s.peer_addr()
    );

    let s_recv = s.reg_msgs(64)?;
    s.post_recv(2, &s_recv.sge(0..64)?)?;
    let c_send = c.reg_msgs(64)?;
    c_send.write(0, b"from the client")?;
    c.post_send(3, &c_send.sge(0..15)?, SendFlags::empty())?;
    let wc = c.get_send_comp(T)?.result()?;
    check!(wc.wr_id() == 3 && wc.opcode() == WcOpcode::Send, "{wc:?}");
    let wc = s.get_recv_comp(T)?.result()?;
    check!(wc.byte_len() == 15, "{wc:?}");
    check!(
        s_recv.to_vec(0..15)? == b"from the client",
        "the message differs"
    );

    // One-sided: the server writes into and reads from the client's regions.
    let target = c.reg_write(64)?;
    let source = c.reg_read(64)?;
    source.write(0, b"readable")?;
    let s_buf = s.reg_msgs(64)?;
    s_buf.write(0, b"written!")?;
    s.post_write(
        4,
        &s_buf.sge(0..8)?,
        target.remote(8..16)?,
        SendFlags::empty(),
    )?;
    check!(s.get_send_comp(T)?.result()?.wr_id() == 4, "write");
    s.post_read(
        5,
        &s_buf.sge(16..24)?,
        source.remote(0..8)?,
        SendFlags::empty(),
    )?;
    check!(s.get_send_comp(T)?.result()?.wr_id() == 5, "read");
    check!(target.to_vec(8..16)? == b"written!", "the write differs");
    check!(s_buf.to_vec(16..24)? == b"readable", "the read differs");

    s.post_send_inline(6, b"inline", SendFlags::empty())
        .or_else(|_| s.post_send(6, &s_buf.sge(0..6)?, SendFlags::empty()))?;
    check!(s.get_send_comp(T)?.result()?.wr_id() == 6, "send back");
    check!(c.get_recv_comp(T)?.result()?.wr_id() == 1, "receive back");

    c.disconnect()?;
    s.wait_disconnected(T)?;
    s.disconnect()?;
    Ok(Outcome::Passed)
}

pub fn endpoint_misuse_is_typed(env: &TestEnv) -> TestResult {
    // Nothing to wait for: a timeout, not a hang.
    let (l, at) = listener(env, Some(ATTR))?;
    let started = Instant::now();
    let e = l
        .get_request(Duration::from_millis(300))
        .err()
        .ok_or("a request out of nowhere")?;
    check!(
        e.is_timeout() && started.elapsed() < Duration::from_secs(5),
        "{e}"
    );
    // Verbs helpers on an endpoint made without a QP.
    let bare = listener(env, None)?.0;
    let e = bare.reg_msgs(16).err().ok_or("a region without a PD")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    let e = bare
        .get_send_comp(T)
        .err()
        .ok_or("a completion without a CQ")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    // Nothing listens at the port any more: refused, on every transport.
    drop(bare);
    let to = SocketAddr::new(at.ip(), at.port().wrapping_add(1).max(1));
    let c = client(to)?;
    let e = c
        .connect(&ConnParam::new(), T)
        .err()
        .ok_or("connected to nothing")?;
    check!(e.is_refused(), "{e}");
    // A request dropped unanswered is a refusal for the client, which
    // then connects again.
    let c = client(at)?;
    std::thread::scope(|sc| -> R<()> {
        let conn = sc.spawn(|| c.connect(&ConnParam::new(), T));
        drop(l.get_request(T)?);
        match conn.join().map_err(|_| "the connecting thread panicked")? {
            Err(e) => check!(e.is_refused(), "{e}"),
            Ok(_) => fail!("connected through a dropped request"),
        }
        Ok(())
    })?;
    let again = client(at)?;
    let s = connect(&l, &again)?;
    drop((s, again, c, l));
    Ok(Outcome::Passed)
}

pub fn accepted_endpoints_have_their_own_events(env: &TestEnv) -> TestResult {
    // Two connections from one listener: the first one's disconnect goes to
    // its endpoint, not to the listener waiting for the second request.
    let (l, at) = listener(env, Some(ATTR))?;
    let c1 = client(at)?;
    let s1 = connect(&l, &c1)?;
    c1.disconnect()?;
    let c2 = client(at)?;
    let s2 = connect(&l, &c2)?;
    s1.wait_disconnected(T)?;
    let m = c2.reg_msgs(8)?;
    let r = s2.reg_msgs(8)?;
    s2.post_recv(1, &r.sge(0..8)?)?;
    m.write(0, b"second!!")?;
    c2.post_send(2, &m.sge(0..8)?, SendFlags::empty())?;
    c2.get_send_comp(T)?.result()?;
    s2.get_recv_comp(T)?.result()?;
    check!(
        r.to_vec(0..8)? == b"second!!",
        "the second connection's data"
    );
    // Endpoints outlive their listener.
    drop(l);
    c2.disconnect()?;
    s2.wait_disconnected(T)?;
    Ok(Outcome::Passed)
}

pub fn srq_behind_cm_ids(env: &TestEnv) -> TestResult {
    // Two connections whose server QPs, attached to their CM ids, share one
    // SRQ: what C does with rdma_create_srq, on iWARP too.
    let (ch_s, ch_c) = (EventChannel::new()?, EventChannel::new()?);
    let listen = CmId::new(&ch_s, PortSpace::Tcp)?;
    listen.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    listen.listen(4)?;
    let at = listen.local_addr().ok_or("no address")?;
    let mut server: Option<(
        ProtectionDomain,
        CompletionQueue,
        SharedReceiveQueue,
        MemoryRegion,
    )> = None;
    let (mut clients, mut servers) = (Vec::new(), Vec::new());
    for i in 0..2u64 {
        let mut id = CmId::new(&ch_c, PortSpace::Tcp)?;
        crate::fixtures::cm::resolve(&ch_c, &id, at)?;
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 8)?;
        let mr = MemoryRegion::new(&pd, 64, AccessFlags::LOCAL_WRITE)?;
        id.create_qp(&pd, QpType::Rc, &cq, &cq, QpCaps::default())?;
        id.connect(&ConnParam::new())?;

        let mut req = ch_s.expect(&listen, CmEventKind::ConnectRequest, T)?;
        let mut sid = req.take_new_id().ok_or("a request without an id")?;
        if server.is_none() {
            let ctx = sid.context()?;
            let pd = ProtectionDomain::new(&ctx)?;
            let cq = CompletionQueue::new(&ctx, 16)?;
            let srq = SharedReceiveQueue::new(&pd, 8, 1)?;
            let mr = MemoryRegion::new(&pd, 512, AccessFlags::LOCAL_WRITE)?;
            for j in 0..4 {
                let sge = [mr.sge(j * 64..j * 64 + 64)?];
                srq.post_recv(&mut [RecvWr::new(j as u64, &sge)])?;
            }
            server = Some((pd, cq, srq, mr));
        }
        let (spd, scq, srq, _) = server.as_ref().ok_or("no server")?;
        let qp = QueuePair::builder(spd, QpType::Rc, scq).srq(srq).build()?;
        sid.attach_qp(qp)?;
        // A second QP for the same id is refused before the kernel.
        let extra = QueuePair::builder(spd, QpType::Rc, scq).build()?;
        let e = sid.attach_qp(extra).err().ok_or("a second QP attached")?;
        check!(e.errno() == libc::EINVAL, "{e}");
        sid.accept(&ConnParam::new())?;
        ch_c.expect(&id, CmEventKind::Established, T)?;
        ch_s.expect(&sid, CmEventKind::Established, T)?;
        mr.write(0, &[b'a' + i as u8; 8])?;
        let s = [mr.sge(0..8)?];
        id.qp()
            .ok_or("no QP")?
            .post_send(&mut [SendWr::send(i, &s).signaled()])?;
        cq.wait_one(T)?.result()?;
        clients.push((id, cq, mr, pd));
        servers.push(sid);
    }
    let (_, cq, _, mr) = server.as_ref().ok_or("no server")?;
    let mut got = Vec::new();
    for _ in 0..2 {
        let wc = cq.wait_one(T)?.result()?;
        let at = wc.wr_id() as usize * 64;
        got.push((wc.qp_num(), mr.to_vec(at..at + 8)?));
    }
    got.sort();
    let mut want: Vec<_> = servers
        .iter()
        .zip([b'a', b'b'])
        .map(|(s, b)| (s.qp().map_or(0, |q| q.qp_num()), vec![b; 8]))
        .collect();
    want.sort();
    check!(got == want, "received {got:?}, expected {want:?}");
    drop((servers, clients));
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cm_ep":
    addrinfo_resolves_and_refuses_typed,
    endpoints_connect_send_write_read,
    endpoint_misuse_is_typed,
    srq_behind_cm_ids,
    accepted_endpoints_have_their_own_events,
);
