//! The blocking connection manager (`rdma::cm::Endpoint`, `AddrInfo`):
//! address resolution, connections with the `rdma_verbs.h` helpers, and
//! what safe code can do wrong with them.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rdma::cm::{
    AddrHints, AddrInfo, CmEventKind, CmId, ConnParam, Endpoint, EpAttr, EventChannel, PortSpace,
};
use rdma::{
    AccessFlags, AddressHandle, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType,
    QueuePair, RecvWr, SendFlags, SendWr, SharedReceiveQueue, WcOpcode,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

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

/// RC QPs whose requests take up to three SGEs.
const ATTR_V: EpAttr = EpAttr {
    caps: QpCaps {
        max_send_sge: 3,
        max_recv_sge: 3,
        ..ATTR.caps
    },
    ..ATTR
};

/// UD QPs (in the UDP port space).
const ATTR_UD: EpAttr = EpAttr {
    qp_type: QpType::Ud,
    ..ATTR
};

/// A listening endpoint on the device's IPv4 address, an ephemeral port.
fn listener(env: &TestEnv, attr: Option<EpAttr>) -> R<(Endpoint, SocketAddr)> {
    listener_in(env, attr, PortSpace::Tcp)
}

/// A listening endpoint of port space `ps` on the device's IPv4 address,
/// an ephemeral port.
fn listener_in(env: &TestEnv, attr: Option<EpAttr>, ps: PortSpace) -> R<(Endpoint, SocketAddr)> {
    let ip = env.ipv4.to_string();
    let hints = AddrHints {
        port_space: ps,
        ..AddrHints::passive()
    };
    let info = AddrInfo::resolve(Some(&ip), Some("0"), &hints)?;
    let l = Endpoint::create(&info, attr)?;
    l.listen(4)?;
    let at = l.local_addr().ok_or("a listener without an address")?;
    check!(at.port() != 0, "no port bound: {at}");
    Ok((l, at))
}

/// An active endpoint with `ATTR` to `to`, address and route resolved.
fn client(to: SocketAddr) -> R<Endpoint> {
    client_with(to, ATTR, PortSpace::Tcp)
}

/// An active endpoint with `attr` in port space `ps` to `to`, address and
/// route resolved.
fn client_with(to: SocketAddr, attr: EpAttr, ps: PortSpace) -> R<Endpoint> {
    let (host, port) = (to.ip().to_string(), to.port().to_string());
    let hints = AddrHints {
        port_space: ps,
        ..AddrHints::default()
    };
    let info = AddrInfo::resolve(Some(&host), Some(&port), &hints)?;
    Ok(Endpoint::create(&info, Some(attr))?)
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

/// The SGE-list helpers (`rdma_post_sendv`, `rdma_post_recvv`,
/// `rdma_post_writev`, `rdma_post_readv`): a send gathered from pieces of
/// two regions lands scattered over pieces of the receiver's region, each
/// in list order; a write gathers and a read scatters the same way; an
/// empty list sends an empty message; a list longer than the QP takes is
/// refused with nothing posted (the next request's completion is the next
/// one). A read scatters over as many entries as the device's
/// `max_sge_rd` allows (two on rxe, one on siw).
pub fn endpoint_sge_lists_gather_and_scatter(env: &TestEnv) -> TestResult {
    let (l, at) = listener(env, Some(ATTR_V))?;
    let c = client_with(at, ATTR_V, PortSpace::Tcp)?;
    let c_recv = c.reg_msgs(64)?;
    let pieces = [c_recv.sge(40..44)?, c_recv.sge(0..6)?, c_recv.sge(20..25)?];
    c.post_recvv(1, &pieces)?;
    c.post_recvv(2, &[c_recv.sge(60..64)?])?;
    let s = connect(&l, &c)?;

    let (a, b) = (s.reg_msgs(64)?, s.reg_msgs(64)?);
    a.write(0, b"gath")?;
    b.write(10, b"ered f")?;
    a.write(30, b"rom 3")?;
    let gather = [a.sge(0..4)?, b.sge(10..16)?, a.sge(30..35)?];
    s.post_sendv(3, &gather, SendFlags::empty())?;
    check!(s.get_send_comp(T)?.result()?.wr_id() == 3, "sendv");
    let wc = c.get_recv_comp(T)?.result()?;
    check!(wc.wr_id() == 1 && wc.byte_len() == 15, "{wc:?}");
    let got = [
        c_recv.to_vec(40..44)?,
        c_recv.to_vec(0..6)?,
        c_recv.to_vec(20..25)?,
    ];
    check!(
        got == [&b"gath"[..], b"ered f", b"rom 3"],
        "scattered as {got:?}"
    );

    // More entries than either queue takes: refused, nothing posted.
    let qp = s.qp().ok_or("no QP")?;
    let long = too_many(&a, qp.caps().max_send_sge)?;
    for (what, r) in [
        ("sendv", s.post_sendv(4, &long, SendFlags::empty())),
        (
            "writev",
            s.post_writev(4, &long, b.remote(0..64)?, SendFlags::empty()),
        ),
        (
            "readv",
            s.post_readv(4, &long, b.remote(0..64)?, SendFlags::empty()),
        ),
    ] {
        let e = r
            .err()
            .ok_or(format!("{what} of {} SGEs posted", long.len()))?;
        check!(e.verb() == "ibv_post_send", "{what}: {e}");
    }
    let c_qp = c.qp().ok_or("no QP")?;
    let long = too_many(&c_recv, c_qp.caps().max_recv_sge)?;
    let e = c
        .post_recvv(5, &long)
        .err()
        .ok_or("recvv of too many SGEs posted")?;
    check!(e.verb() == "ibv_post_recv", "recvv: {e}");

    // An empty list: an empty message, into the next receive.
    s.post_sendv(6, &[], SendFlags::empty())?;
    check!(s.get_send_comp(T)?.result()?.wr_id() == 6, "empty sendv");
    let wc = c.get_recv_comp(T)?.result()?;
    check!(wc.wr_id() == 2 && wc.byte_len() == 0, "{wc:?}");

    // One-sided: gathered into the client's region, scattered out of it.
    let target = c.reg_write(64)?;
    let source = c.reg_read(64)?;
    source.write(0, b"scattered by readv")?;
    let gather = [b.sge(10..16)?, a.sge(0..4)?];
    s.post_writev(7, &gather, target.remote(8..18)?, SendFlags::empty())?;
    check!(s.get_send_comp(T)?.result()?.wr_id() == 7, "writev");
    check!(
        target.to_vec(8..18)? == b"ered fgath",
        "written {:?}",
        target.to_vec(8..18)?
    );
    // A READ's local side takes at most the device's max_sge_rd entries
    // (siw: 1, an iWARP limit).
    let max_rd = s.context()?.query_device()?.as_raw().orig_attr.max_sge_rd;
    let scatter = [b.sge(40..49)?, a.sge(50..59)?];
    let scatter = &scatter[..(max_rd.max(1) as usize).min(2)];
    let n = 9 * scatter.len();
    s.post_readv(8, scatter, source.remote(0..n)?, SendFlags::empty())?;
    check!(s.get_send_comp(T)?.result()?.wr_id() == 8, "readv");
    let got = [b.to_vec(40..49)?, a.to_vec(50..59)?];
    let want = [&b"scattered"[..], b" by readv"];
    check!(
        got[..scatter.len()] == want[..scatter.len()],
        "read into {} entries (max_sge_rd {max_rd}): {got:?}",
        scatter.len()
    );

    c.disconnect()?;
    s.wait_disconnected(T)?;
    Ok(Outcome::Passed)
}

/// `rdma_post_ud_send`: a UD endpoint's datagram, through an address handle
/// made from the CM's UD parameters (and dropped as soon as it was posted),
/// reaches the accepting endpoint's QP, whose Q_Key the CM set to the one
/// the helper sends with; a handle of another PD is refused before the
/// post.
pub fn endpoint_ud_send_reaches_the_peer(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    const GRH: usize = 40;
    let (l, at) = listener_in(env, Some(ATTR_UD), PortSpace::Udp)?;
    let c = client_with(at, ATTR_UD, PortSpace::Udp)?;
    // A UD accept answers the request (an IB SIDR reply); only the active
    // side gets an Established event.
    let (est, s, s_recv) = std::thread::scope(|sc| -> R<_> {
        let conn = sc.spawn(|| c.connect(&ConnParam::new(), T));
        let r = l.get_request(T)?;
        let s_recv = r.ep.reg_msgs(256)?;
        r.ep.post_recv(1, &s_recv.sge(0..256)?)?;
        r.ep.id().accept(&ConnParam::new())?;
        let est = conn
            .join()
            .map_err(|_| "the connecting thread panicked")??;
        Ok((est, r.ep, s_recv))
    })?;
    let ud = est.ud.ok_or("a UD connection without UD parameters")?;
    let (s_qp, c_qp) = (s.qp().ok_or("no QP")?, c.qp().ok_or("no QP")?);
    check!(
        ud.qp_num == s_qp.qp_num() && ud.qkey == s_qp.query()?.qkey,
        "UD parameters {ud:?}, the server's QP {:#x}",
        s_qp.qp_num()
    );
    let ah = AddressHandle::new(c.pd().ok_or("no PD")?, &ud.path)?;
    let m = c.reg_msgs(64)?;
    m.write(0, b"a datagram of an endpoint")?;
    c.post_ud_send(2, &m.sge(0..25)?, &ah, ud.qp_num, SendFlags::empty())?;
    drop(ah);
    let wc = c.get_send_comp(T)?.result()?;
    check!(wc.wr_id() == 2 && wc.opcode() == WcOpcode::Send, "{wc:?}");
    let wc = s.get_recv_comp(T)?.result()?;
    check!(
        wc.wr_id() == 1 && wc.byte_len() as usize == GRH + 25 && wc.src_qp() == c_qp.qp_num(),
        "{wc:?}"
    );
    check!(
        s_recv.to_vec(GRH..GRH + 25)? == b"a datagram of an endpoint",
        "the datagram differs"
    );

    let other_pd = ProtectionDomain::new(&c.context()?)?;
    let foreign = AddressHandle::new(&other_pd, &ud.path)?;
    let e = c
        .post_ud_send(3, &m.sge(0..4)?, &foreign, ud.qp_num, SendFlags::empty())
        .err()
        .ok_or("a send through another PD's handle was posted")?;
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("different protection domain"),
        "{e}"
    );
    Ok(Outcome::Passed)
}

/// `n` + 8 one-byte entries of `mr`: more than a queue of `n` SGEs takes.
fn too_many(mr: &MemoryRegion, n: u32) -> R<Vec<rdma::Sge<'_>>> {
    Ok((0..n as usize + 8)
        .map(|i| mr.sge(i..i + 1))
        .collect::<Result<_, _>>()?)
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
    let pd = ProtectionDomain::new(&bare.context()?)?;
    let mr = MemoryRegion::new(&pd, 16, AccessFlags::LOCAL_WRITE)?;
    let (sges, flags) = ([mr.sge(0..16)?], SendFlags::empty());
    for (verb, r) in [
        ("rdma_post_sendv", bare.post_sendv(1, &sges, flags)),
        ("rdma_post_recvv", bare.post_recvv(1, &sges)),
        (
            "rdma_post_writev",
            bare.post_writev(1, &sges, mr.remote(..)?, flags),
        ),
        (
            "rdma_post_readv",
            bare.post_readv(1, &sges, mr.remote(..)?, flags),
        ),
    ] {
        let e = r.err().ok_or(format!("{verb} without a QP"))?;
        check!(e.errno() == libc::EINVAL && e.verb() == verb, "{e}");
    }
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
    endpoint_sge_lists_gather_and_scatter,
    endpoint_ud_send_reaches_the_peer,
    endpoint_misuse_is_typed,
    srq_behind_cm_ids,
    accepted_endpoints_have_their_own_events,
);
