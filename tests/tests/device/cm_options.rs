//! The CM id's options (`rdma_set_option`): type of service, ACK timeout,
//! AF-only, checked in what the device reports and in who may connect;
//! InfiniBand paths given instead of a route resolution.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use rdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, IbPath, IbPathFlags, PortSpace};
use rdma::mad::sa::{PathRecord, Selector};
use rdma::{RecvWr, SendWr};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::cm::{self, CmSide, SMALL_RC};
use crate::fixtures::{open, refused, roce_gid, R, T};

/// The client's type of service: DSCP 10 (AF11) in the upper six bits.
const TOS: u8 = 10 << 2;
const CLIENT_ACK_TIMEOUT: u8 = 15;
const SERVER_ACK_TIMEOUT: u8 = 19;

/// A message from `a` to `b`, to show the connection carries traffic.
fn exchange(a: &CmSide, b: &CmSide) -> R<()> {
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
    let (_listen, port) = cm::listen(&ch_s, SocketAddr::new(IpAddr::V4(env.ipv4), 0), 4, None)?;
    let to = SocketAddr::new(IpAddr::V4(env.ipv4), port);
    let cm::CmPair {
        client,
        server,
        ch_c: _ch_c,
    } = cm::connect(
        &ch_s,
        to,
        SMALL_RC,
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
    let (only6, port) = cm::listen(&ch_s, any6, 4, Some(true))?;
    let e = only6
        .set_afonly(false)
        .err()
        .ok_or("AFONLY changed on a listening id")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    let v4 = SocketAddr::new(IpAddr::V4(env.ipv4), port);
    match cm::connect(&ch_s, v4, SMALL_RC, |_| Ok(()), |_| Ok(()))? {
        Err(e) => check!(e.is_refused(), "IPv4 to an AF-only listener: {e}"),
        Ok(_) => fail!("an AF-only IPv6 listener took an IPv4 connection"),
    }
    let v6 = SocketAddr::new(IpAddr::V6(env.ipv6), port);
    let p = cm::connect(&ch_s, v6, SMALL_RC, |_| Ok(()), |_| Ok(()))?
        .map_err(|e| format!("IPv6 to an AF-only listener: {e}"))?;
    exchange(&p.client, &p.server)?;
    drop((p, only6));

    // Without AF-only, [::] takes IPv4 too on RoCE (the IB CM matches the
    // request's service ID, the port). siw of kernel 6.1 listens on the
    // device's own addresses of the listener's family, so there it stays
    // IPv6: either answer is typed, and the test says which it saw.
    let (both, port) = cm::listen(&ch_s, any6, 4, Some(false))?;
    let v4 = SocketAddr::new(IpAddr::V4(env.ipv4), port);
    let v4_result = cm::connect(&ch_s, v4, SMALL_RC, |_| Ok(()), |_| Ok(()))?;
    match (env.provider, v4_result) {
        (Provider::Rxe, Ok(p)) => exchange(&p.client, &p.server)?,
        (Provider::Rxe, Err(e)) => fail!("IPv4 to a dual-stack listener: {e}"),
        (Provider::Siw, Err(e)) => {
            check!(e.is_refused(), "IPv4 to [::] on siw: {e}");
            println!("    siw0: a [::] listener without AF-only refuses IPv4");
        }
        (Provider::Siw, Ok(p)) => {
            exchange(&p.client, &p.server)?;
            println!("    siw0: a [::] listener without AF-only takes IPv4");
        }
    }
    drop(both);
    Ok(Outcome::Passed)
}

/// A path from the device's IPv4 address to itself: on RoCE its GIDs are
/// the address's RoCEv2 GID (iWARP keeps the path but does not use it).
fn path_to_self(env: &TestEnv) -> R<PathRecord> {
    let gid = match env.provider {
        Provider::Rxe => roce_gid(&open(env)?, env)?.0,
        Provider::Siw => rdma::Gid::from(env.ipv4.to_ipv6_mapped()),
    };
    Ok(PathRecord {
        dgid: gid,
        sgid: gid,
        hop_limit: 64,
        reversible: true,
        numb_path: 1,
        pkey: 0xffff,
        mtu_selector: Selector::Exactly,
        mtu: 3,
        rate_selector: Selector::Exactly,
        rate: 3,
        packet_life_time_selector: Selector::Exactly,
        packet_life_time: 14,
        ..Default::default()
    })
}

pub fn ib_paths_resolve_the_route_and_carry_the_connection(env: &TestEnv) -> TestResult {
    const VERB: &str = "rdma_set_option";
    let record = path_to_self(env)?;
    let ch_s = EventChannel::new()?;
    let (_listen, port) = cm::listen(&ch_s, SocketAddr::new(IpAddr::V4(env.ipv4), 0), 4, None)?;
    let to = SocketAddr::new(IpAddr::V4(env.ipv4), port);
    let ch_c = EventChannel::new()?;
    let id = CmId::new(&ch_c, PortSpace::Tcp)?;
    // Refused before the kernel: no path, a field too wide for the wire.
    refused(
        id.set_ib_paths(&[]),
        VERB,
        libc::EINVAL,
        "at least one path",
    )?;
    let mut wide = record;
    wide.sl = 16;
    refused(
        id.set_ib_paths(&[IbPath::primary(wide)]),
        VERB,
        libc::EINVAL,
        "RDMA_OPTION_IB_PATH",
    )?;
    // Refused by the kernel: an id without a device.
    refused(
        id.set_ib_paths(&[IbPath::primary(record)]),
        VERB,
        libc::EINVAL,
        "GMP | PRIMARY | BIDIRECTIONAL",
    )?;
    id.resolve_addr(None, to, std::time::Duration::from_secs(2))?;
    ch_c.expect(&id, CmEventKind::AddrResolved, T)?;
    // Refused by the kernel: no path of the primary flags.
    let alternate = IbPath {
        flags: IbPathFlags::GMP | IbPathFlags::ALTERNATE | IbPathFlags::BIDIRECTIONAL,
        record,
    };
    refused(
        id.set_ib_paths(&[alternate]),
        VERB,
        libc::EINVAL,
        "GMP | PRIMARY | BIDIRECTIONAL",
    )?;
    // Taken: the kernel picks the primary path and reports the route.
    id.set_ib_paths(&[alternate, IbPath::primary(record)])?;
    ch_c.expect(&id, CmEventKind::RouteResolved, T)?;
    // Once the route is resolved, paths are refused.
    refused(
        id.set_ib_paths(&[IbPath::primary(record)]),
        VERB,
        libc::EINVAL,
        "whose route is not",
    )?;
    // The connection goes over the path given.
    let client = CmSide::new(id, SMALL_RC)?;
    client.id.connect(&ConnParam::new())?;
    let sid = match ch_s.wait_event(T)? {
        Some(mut ev) if ev.kind == CmEventKind::ConnectRequest => {
            ev.take_new_id().ok_or("connect request without an id")?
        }
        other => fail!("the listener got {other:?}"),
    };
    let server = CmSide::new(sid, SMALL_RC)?;
    server.id.accept(&ConnParam::new())?;
    ch_c.expect(&client.id, CmEventKind::Established, T)?;
    ch_s.expect(&server.id, CmEventKind::Established, T)?;
    exchange(&client, &server)?;
    exchange(&server, &client)?;
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cm_options":
    tos_and_ack_timeout_reach_the_qp,
    afonly_listener_takes_only_its_family,
    ib_paths_resolve_the_route_and_carry_the_connection,
);
