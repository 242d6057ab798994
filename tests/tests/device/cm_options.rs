//! The CM id's options (`rdma_set_option`): type of service, ACK timeout,
//! AF-only, checked in what the device reports and in who may connect.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use rdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType, RecvWr, SendWr,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

type R<T> = Result<T, Box<dyn std::error::Error>>;
const T: Duration = Duration::from_secs(10);
/// The client's type of service: DSCP 10 (AF11) in the upper six bits.
const TOS: u8 = 10 << 2;
const CLIENT_ACK_TIMEOUT: u8 = 15;
const SERVER_ACK_TIMEOUT: u8 = 19;

/// The verbs resources of one side, with its QP on the id.
struct Side {
    id: CmId,
    cq: CompletionQueue,
    mr: MemoryRegion,
    _pd: ProtectionDomain,
}

fn side(mut id: CmId) -> R<Side> {
    let ctx = id.context()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let mr = MemoryRegion::new(&pd, 256, AccessFlags::LOCAL_WRITE)?;
    id.create_qp(&pd, QpType::Rc, &cq, &cq, QpCaps::default())?;
    Ok(Side {
        id,
        cq,
        mr,
        _pd: pd,
    })
}

fn listen(ch: &EventChannel, at: SocketAddr, afonly: Option<bool>) -> R<(CmId, u16)> {
    let id = CmId::new(ch, PortSpace::Tcp)?;
    if let Some(on) = afonly {
        id.set_afonly(on)?;
    }
    id.bind(at)?;
    id.listen(4)?;
    let port = id.local_addr().ok_or("listener without an address")?.port();
    Ok((id, port))
}

/// Resolves `to` from a new id (to which `prepare` applies its options
/// first) and connects; the server side accepts whatever request comes
/// within 3 s (with its own `prepare_server`). The connected pair, or the
/// client's error when the connect failed.
fn connect(
    ch_s: &EventChannel,
    to: SocketAddr,
    prepare: impl FnOnce(&CmId) -> rdma::Result<()>,
    prepare_server: impl FnOnce(&CmId) -> rdma::Result<()>,
) -> R<Result<(Side, Side, EventChannel), rdma::Error>> {
    let ch_c = EventChannel::new()?;
    let id = CmId::new(&ch_c, PortSpace::Tcp)?;
    prepare(&id)?;
    crate::cmid::resolve(&ch_c, &id, to)?;
    let client = side(id)?;
    // iWARP connects over TCP inside rdma_connect: a refusal comes here.
    if let Err(e) = client.id.connect(&ConnParam::new()) {
        return Ok(Err(e));
    }
    let server = match ch_s.wait_event(Duration::from_secs(3))? {
        Some(mut req) if req.kind == CmEventKind::ConnectRequest => {
            let sid = req.take_new_id().ok_or("connect request without an id")?;
            drop(req);
            prepare_server(&sid)?;
            let server = side(sid)?;
            server.id.accept(&ConnParam::new())?;
            Some(server)
        }
        Some(ev) => fail!("the listener got {ev:?}"),
        None => None,
    };
    if let Err(e) = ch_c.expect(&client.id, CmEventKind::Established, T) {
        check!(server.is_none(), "a request was accepted, yet: {e}");
        return Ok(Err(e));
    }
    let Some(server) = server else {
        fail!("established without a request at the listener")
    };
    ch_s.expect(&server.id, CmEventKind::Established, T)?;
    Ok(Ok((client, server, ch_c)))
}

/// A message from `a` to `b`, to show the connection carries traffic.
fn exchange(a: &Side, b: &Side) -> R<()> {
    let qa = a.id.qp().ok_or("no QP")?;
    let qb = b.id.qp().ok_or("no QP")?;
    let rs = [b.mr.sge(0..64)?];
    qb.post_recv(&mut [RecvWr::new(1, &rs)])?;
    a.mr.write(0, b"options")?;
    let ss = [a.mr.sge(0..7)?];
    qa.post_send(&mut [SendWr::send(2, &ss).signaled()])?;
    check!(a.cq.wait_one(T)?.is_success(), "send failed");
    let wc = b.cq.wait_one(T)?;
    check!(wc.is_success() && wc.byte_len() == 7, "{wc:?}");
    check!(b.mr.to_vec(0..7)? == b"options", "the message differs");
    Ok(())
}

pub fn tos_and_ack_timeout_reach_the_qp(env: &TestEnv) -> TestResult {
    // Refused before the kernel: a timeout code past 31.
    let ch = EventChannel::new()?;
    let id = CmId::new(&ch, PortSpace::Tcp)?;
    let e = id
        .set_ack_timeout(32)
        .err()
        .ok_or("ACK timeout 32 accepted")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    // Refused by the kernel: a UDP id has no ACKs.
    let udp = CmId::new(&ch, PortSpace::Udp)?;
    let e = udp
        .set_ack_timeout(10)
        .err()
        .ok_or("ACK timeout on a UDP id accepted")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    drop((id, udp));

    let ch_s = EventChannel::new()?;
    let (_listen, port) = listen(&ch_s, SocketAddr::new(IpAddr::V4(env.ipv4), 0), None)?;
    let to = SocketAddr::new(IpAddr::V4(env.ipv4), port);
    let (client, server, _ch_c) = connect(
        &ch_s,
        to,
        |id| {
            id.set_tos(TOS)?;
            id.set_ack_timeout(CLIENT_ACK_TIMEOUT)
        },
        |id| id.set_ack_timeout(SERVER_ACK_TIMEOUT),
    )??;
    exchange(&client, &server)?;
    exchange(&server, &client)?;
    match env.provider {
        Provider::Rxe => {
            let c = client.id.qp().ok_or("no QP")?.query()?;
            let s = server.id.qp().ok_or("no QP")?.query()?;
            check!(
                c.timeout == CLIENT_ACK_TIMEOUT && s.timeout == SERVER_ACK_TIMEOUT,
                "ACK timeouts {} and {}, set {CLIENT_ACK_TIMEOUT} and {SERVER_ACK_TIMEOUT}",
                c.timeout,
                s.timeout
            );
            check!(
                c.path.traffic_class == TOS,
                "the client's traffic class is {:#x}, its type of service {TOS:#x}",
                c.path.traffic_class
            );
            Ok(Outcome::Passed)
        }
        // iWARP has no ACK timeout or GRH: the options are taken and the
        // connection works, which is all there is to see.
        Provider::Siw => Ok(Outcome::Passed),
    }
}

pub fn afonly_listener_takes_only_its_family(env: &TestEnv) -> TestResult {
    let any6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0);
    let ch_s = EventChannel::new()?;

    // AF-only on [::]: an IPv4 connect is refused, an IPv6 one taken.
    let (only6, port) = listen(&ch_s, any6, Some(true))?;
    let e = only6
        .set_afonly(false)
        .err()
        .ok_or("AFONLY changed on a listening id")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    let v4 = SocketAddr::new(IpAddr::V4(env.ipv4), port);
    match connect(&ch_s, v4, |_| Ok(()), |_| Ok(()))? {
        Err(e) => check!(e.is_refused(), "IPv4 to an AF-only listener: {e}"),
        Ok(_) => fail!("an AF-only IPv6 listener took an IPv4 connection"),
    }
    let v6 = SocketAddr::new(IpAddr::V6(env.ipv6), port);
    let (c, s, _ch) = connect(&ch_s, v6, |_| Ok(()), |_| Ok(()))?
        .map_err(|e| format!("IPv6 to an AF-only listener: {e}"))?;
    exchange(&c, &s)?;
    drop((c, s, only6));

    // Without AF-only, [::] takes IPv4 too on RoCE (the IB CM matches the
    // request's service ID, the port). siw of kernel 6.1 listens on the
    // device's own addresses of the listener's family, so there it stays
    // IPv6: either answer is typed, and the test says which it saw.
    let (both, port) = listen(&ch_s, any6, Some(false))?;
    let v4 = SocketAddr::new(IpAddr::V4(env.ipv4), port);
    let v4_result = connect(&ch_s, v4, |_| Ok(()), |_| Ok(()))?;
    match (env.provider, v4_result) {
        (Provider::Rxe, Ok((c, s, _ch))) => exchange(&c, &s)?,
        (Provider::Rxe, Err(e)) => fail!("IPv4 to a dual-stack listener: {e}"),
        (Provider::Siw, Err(e)) => {
            check!(e.is_refused(), "IPv4 to [::] on siw: {e}");
            println!("    siw0: a [::] listener without AF-only refuses IPv4");
        }
        (Provider::Siw, Ok((c, s, _ch))) => {
            exchange(&c, &s)?;
            println!("    siw0: a [::] listener without AF-only takes IPv4");
        }
    }
    drop(both);
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cm_options":
    tos_and_ack_timeout_reach_the_qp,
    afonly_listener_takes_only_its_family,
);
