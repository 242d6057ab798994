//! `rdma_notify` (`CmId::notify_comm_established`): where the CM takes
//! it, and its typed errors outside the connect handshake.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{CompletionQueue, ProtectionDomain, QpCaps, QpType};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{refused, R};

const T: Duration = Duration::from_secs(10);

/// A PD and CQ of `id`'s device, and an RC QP on the id.
fn with_qp(id: &mut CmId) -> R<(ProtectionDomain, CompletionQueue)> {
    let ctx = id.context()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 8)?;
    id.create_qp(&pd, QpType::Rc, &cq, &cq, QpCaps::default())?;
    Ok((pd, cq))
}

pub fn notify_comm_established(env: &TestEnv) -> TestResult {
    let (ch_s, ch_c) = (EventChannel::new()?, EventChannel::new()?);
    let listen = CmId::new(&ch_s, PortSpace::Tcp)?;
    listen.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    listen.listen(4)?;
    let addr = listen.local_addr().ok_or("listener has no address")?;
    // An id the kernel's CM never saw (no connect, no listen).
    let fresh = CmId::new(&ch_s, PortSpace::Tcp)?;
    refused(
        fresh.notify_comm_established(),
        "rdma_notify",
        libc::EINVAL,
        "",
    )?;
    drop(fresh);
    // The IB CM (rxe) refuses outside REP sent (a listener, a request not
    // answered yet) and says EISCONN once established; iWARP's CM (siw)
    // has nothing to do and takes it in any state.
    let outside = |r: rdma::Result<()>, established: bool| -> R<()> {
        match env.provider {
            Provider::Rxe => {
                let errno = if established {
                    libc::EISCONN
                } else {
                    libc::EINVAL
                };
                refused(r, "rdma_notify", errno, "")?;
            }
            Provider::Siw => r?,
        }
        Ok(())
    };
    outside(listen.notify_comm_established(), false)?;

    let mut client = CmId::new(&ch_c, PortSpace::Tcp)?;
    client.resolve_addr(None, addr, Duration::from_secs(2))?;
    ch_c.expect(&client, CmEventKind::AddrResolved, T)?;
    client.resolve_route(Duration::from_secs(2))?;
    ch_c.expect(&client, CmEventKind::RouteResolved, T)?;
    let _c = with_qp(&mut client)?;
    client.connect(&ConnParam::new())?;

    let mut req = ch_s.expect(&listen, CmEventKind::ConnectRequest, T)?;
    let mut sid = req.take_new_id().ok_or("connect request without an id")?;
    drop(req);
    outside(sid.notify_comm_established(), false)?;
    let _s = with_qp(&mut sid)?;
    sid.accept(&ConnParam::new())?;
    // After the REP the CM may take it (before the client's RTU) or be
    // established already (the RTU came first): either way the
    // connection comes up.
    match sid.notify_comm_established() {
        Ok(()) => {}
        Err(e) => check!(
            env.provider == Provider::Rxe
                && e.verb() == "rdma_notify"
                && e.errno() == libc::EISCONN,
            "{e}"
        ),
    }
    ch_s.expect(&sid, CmEventKind::Established, T)?;
    ch_c.expect(&client, CmEventKind::Established, T)?;
    outside(sid.notify_comm_established(), true)?;
    sid.disconnect()?;
    ch_c.expect(&client, CmEventKind::Disconnected, T)?;
    client.disconnect()?;
    ch_s.expect(&sid, CmEventKind::Disconnected, T)?;
    drop((sid, client, listen));
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cm_notify":
    notify_comm_established,
);
