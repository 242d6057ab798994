//! Enhanced connection establishment (ECE) on verbs QPs and CM ids: the
//! typed "not supported" of providers without it (rxe, siw), the CM's
//! offer and read-back for ids without a QP, and a reject for unsupported
//! options.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{CompletionQueue, Ece, InitAttr, ProtectionDomain, QpCaps, QpType, QueuePair};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{open, refused, R};

const T: Duration = Duration::from_secs(10);
const OFFER: Ece = Ece {
    vendor_id: 0x15b3,
    options: 0x1,
};

pub fn verbs_ece_is_not_supported(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 8)?;
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    // Neither rxe nor siw implements ECE: libibverbs answers EOPNOTSUPP
    // for the provider, in RESET and INIT alike.
    refused(
        qp.query_ece(),
        "ibv_query_ece",
        libc::EOPNOTSUPP,
        "does not support",
    )?;
    refused(
        qp.set_ece(OFFER),
        "ibv_set_ece",
        libc::EOPNOTSUPP,
        "does not support",
    )?;
    qp.to_init(&InitAttr::new(1))?;
    refused(
        qp.set_ece(OFFER),
        "ibv_set_ece",
        libc::EOPNOTSUPP,
        "does not support",
    )?;
    refused(
        qp.query_ece(),
        "ibv_query_ece",
        libc::EOPNOTSUPP,
        "does not support",
    )?;
    Ok(Outcome::Passed)
}

fn resolve(ch: &EventChannel, id: &CmId, to: SocketAddr) -> R<()> {
    id.resolve_addr(None, to, Duration::from_secs(2))?;
    ch.expect(id, CmEventKind::AddrResolved, T)?;
    id.resolve_route(Duration::from_secs(2))?;
    ch.expect(id, CmEventKind::RouteResolved, T)?;
    Ok(())
}

pub fn cm_ece_offer_and_reject(env: &TestEnv) -> TestResult {
    let (ch_s, ch_c) = (EventChannel::new()?, EventChannel::new()?);
    let listen = CmId::new(&ch_s, PortSpace::Tcp)?;
    listen.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    listen.listen(4)?;
    let addr = listen.local_addr().ok_or("listener has no address")?;

    let mut client = CmId::new(&ch_c, PortSpace::Tcp)?;
    resolve(&ch_c, &client, addr)?;
    // An id without a QP keeps the options it is to offer; before any
    // exchange the peer's are all zero.
    client.set_local_ece(OFFER)?;
    check!(
        client.remote_ece()? == Ece::default(),
        "{:?}",
        client.remote_ece()
    );
    let ctx = client.context()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 8)?;
    client.create_qp(&pd, QpType::Rc, &cq, &cq, QpCaps::default())?;
    // An id with a QP: the QP's options, refused before librdmacm.
    refused(
        client.set_local_ece(OFFER),
        "rdma_set_local_ece",
        libc::EINVAL,
        "holds a QP",
    )?;
    refused(
        client.remote_ece(),
        "rdma_get_remote_ece",
        libc::EINVAL,
        "holds a QP",
    )?;
    client.connect(&ConnParam::new().with_private_data(b"ece?"))?;

    let mut req = ch_s.expect(&listen, CmEventKind::ConnectRequest, T)?;
    let sid = req.take_new_id().ok_or("connect request without an id")?;
    // The request's id has no QP: it reads what the client offered. The
    // IB CM (rxe) carries the options set before the client's QP in its
    // REQ (the QP's own query fails there); iWARP's MPA has no ECE.
    let offered = sid.remote_ece()?;
    let expected = match env.provider {
        Provider::Rxe => OFFER,
        Provider::Siw => Ece::default(),
    };
    check!(
        offered == expected,
        "offered {offered:?}, expected {expected:?}"
    );
    refused(
        sid.reject_ece(&[0; 256]),
        "rdma_reject_ece",
        libc::EINVAL,
        "255 bytes",
    )?;
    sid.reject_ece(b"no such options")?;
    let ev = ch_c.wait_event(T)?.ok_or("no event after the reject")?;
    check!(ev.kind == CmEventKind::Rejected, "{ev:?}");
    drop(ev);
    drop((client, sid, listen));
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "ece":
    verbs_ece_is_not_supported,
    cm_ece_offer_and_reject,
);
