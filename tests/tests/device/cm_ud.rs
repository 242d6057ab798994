//! UD through the connection manager, and multicast (RoCE; iWARP has neither).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{
    AccessFlags, AddressHandle, CompletionQueue, QpType, RecvWr, SendWr, WcOpcode, WorkCompletion,
};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::cm::{CmQp, CmSide};
use crate::fixtures::{R, T};

const GRH: usize = 40;

/// Each member's QP: UD, a CQ of 16 entries, 4 KiB the device writes.
const UD: CmQp = CmQp {
    ty: QpType::Ud,
    cqe: 16,
    mr_len: 4096,
    access: AccessFlags::LOCAL_WRITE,
};

fn wait(cq: &CompletionQueue, opcode: WcOpcode) -> R<WorkCompletion> {
    let wc = cq
        .wait_one(T)
        .map_err(|e| format!("no {opcode:?} completion: {e}"))?;
    check!(wc.is_success() && wc.opcode() == opcode, "{wc:?}");
    Ok(wc)
}

fn skip_on_siw(env: &TestEnv) -> Option<Outcome> {
    (env.provider == Provider::Siw)
        .then(|| Outcome::Skipped("iWARP (siw) has no UD and no multicast".into()))
}

pub fn datagrams_through_the_cm(env: &TestEnv) -> TestResult {
    if let Some(skip) = skip_on_siw(env) {
        return Ok(skip);
    }
    let (ch_s, ch_c) = (EventChannel::new()?, EventChannel::new()?);
    let listen = CmId::new(&ch_s, PortSpace::Udp)?;
    listen.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    listen.listen(4)?;
    let addr = listen.local_addr().ok_or("no address")?;

    let client = CmId::new(&ch_c, PortSpace::Udp)?;
    crate::fixtures::cm::resolve(&ch_c, &client, addr)?;
    let c = CmSide::new(client, UD)?;
    c.id.connect(&ConnParam::new().with_private_data(b"ud hello"))?;

    let mut req = ch_s.expect(&listen, CmEventKind::ConnectRequest, T)?;
    check!(
        req.private_data().starts_with(b"ud hello"),
        "{:?}",
        req.private_data()
    );
    // A UD connect request (an IB SIDR REQ) carries no QP number.
    check!(req.ud.is_some(), "UD request without UD parameters");
    let server = req.take_new_id().ok_or("no new id")?;
    let s = CmSide::new(server, UD)?;
    let rs = [s.mr.sge(0..1024)?];
    s.id.qp()
        .ok_or("no QP")?
        .post_recv(&mut [RecvWr::new(1, &rs)])?;
    s.id.accept(&ConnParam::new())?;

    let est = ch_c.expect(&c.id, CmEventKind::Established, T)?;
    let ud = est.ud.ok_or("UD establish without UD parameters")?;
    check!(
        ud.qp_num == s.id.qp().ok_or("no QP")?.qp_num(),
        "remote QPN {} from the CM",
        ud.qp_num
    );
    let ah = AddressHandle::new(&c.pd, &ud.path)?;
    c.mr.write(0, b"datagram via the CM")?;
    let ss = [c.mr.sge(0..19)?];
    c.id.qp()
        .ok_or("no QP")?
        .post_send(&mut [SendWr::send(2, &ss).ud(&ah, ud.qp_num, ud.qkey).signaled()])?;
    wait(&c.cq, WcOpcode::Send)?;
    let wc = wait(&s.cq, WcOpcode::Recv)?;
    check!(wc.byte_len() as usize == GRH + 19, "{wc:?}");
    check!(
        s.mr.to_vec(GRH..GRH + 19)? == b"datagram via the CM",
        "UD payload differs"
    );
    Ok(Outcome::Passed)
}

pub fn multicast_join_send_receive_leave(env: &TestEnv) -> TestResult {
    if let Some(skip) = skip_on_siw(env) {
        return Ok(skip);
    }
    let group: SocketAddr = "239.1.2.3:0".parse()?;
    let ch = EventChannel::new()?;
    let mut members = Vec::new();
    for _ in 0..2 {
        let id = CmId::new(&ch, PortSpace::Udp)?;
        id.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
        let m = CmSide::new(id, UD)?;
        let rs = [m.mr.sge(0..1024)?];
        m.id.qp()
            .ok_or("no QP")?
            .post_recv(&mut [RecvWr::new(1, &rs)])?;
        m.id.join_multicast(group)?;
        let ev = ch.expect(&m.id, CmEventKind::MulticastJoin, T)?;
        let ud = ev.ud.ok_or("join without UD parameters")?;
        members.push((m, ud));
    }
    let (s, group_ud) = &members[0];
    check!(
        group_ud.qp_num == 0xFF_FFFF,
        "group QPN {:#x}",
        group_ud.qp_num
    );
    let ah = AddressHandle::new(&s.pd, &group_ud.path)?;
    s.mr.write(2048, b"to the whole group")?;
    let ss = [s.mr.sge(2048..2066)?];
    s.id.qp()
        .ok_or("no QP")?
        .post_send(&mut [SendWr::send(9, &ss)
            .ud(&ah, group_ud.qp_num, group_ud.qkey)
            .signaled()])?;
    // Both members receive it (the sender too: it joined the group). The
    // sender's CQ has its send and its receive, in either order.
    let (r, _) = &members[1];
    let wc = wait(&r.cq, WcOpcode::Recv)?;
    check!(wc.byte_len() as usize == GRH + 18, "{wc:?}");
    check!(
        r.mr.to_vec(GRH..GRH + 18)? == b"to the whole group",
        "multicast payload differs"
    );
    for (m, _) in &members {
        m.id.leave_multicast(group)?;
    }
    Ok(Outcome::Passed)
}

/// Waits for the send completion on `cq`, past any receives there (a
/// multicast sender may receive its own datagram).
fn wait_send(cq: &CompletionQueue) -> R<()> {
    loop {
        let wc = cq.wait_one(T)?.result()?;
        if wc.opcode() == WcOpcode::Send {
            return Ok(());
        }
    }
}

/// Whether a receive completes on `cq` within half a second.
fn receives_any(cq: &CompletionQueue) -> R<bool> {
    match cq.wait_one(Duration::from_millis(500)) {
        Ok(wc) => Ok(wc.opcode() == WcOpcode::Recv || receives_any(cq)?),
        Err(e) if e.is_timeout() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

pub fn multicast_send_only_member_and_leave(env: &TestEnv) -> TestResult {
    if let Some(skip) = skip_on_siw(env) {
        return Ok(skip);
    }
    let group: SocketAddr = "239.1.2.9:0".parse()?;
    let ch = EventChannel::new()?;
    // Full members A (a sender), B (who leaves) and C (the control), and S,
    // a send-only full member.
    let mut members = Vec::new();
    for send_only in [false, false, false, true] {
        let id = CmId::new(&ch, PortSpace::Udp)?;
        id.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
        let m = CmSide::new(id, UD)?;
        for i in 0..8 {
            let rs = [m.mr.sge(i * 256..i * 256 + 256)?];
            m.id.qp()
                .ok_or("no QP")?
                .post_recv(&mut [RecvWr::new(i as u64, &rs)])?;
        }
        if send_only {
            m.id.join_multicast_send_only(group)?;
        } else {
            m.id.join_multicast(group)?;
        }
        let ev = ch.expect(&m.id, CmEventKind::MulticastJoin, T)?;
        let ud = ev.ud.ok_or("join without UD parameters")?;
        members.push((m, ud));
    }
    let send = |from: usize, text: &[u8]| -> R<()> {
        let (m, ud) = &members[from];
        let ah = AddressHandle::new(&m.pd, &ud.path)?;
        m.mr.write(3000, text)?;
        let ss = [m.mr.sge(3000..3000 + text.len())?];
        m.id.qp()
            .ok_or("no QP")?
            .post_send(&mut [SendWr::send(99, &ss).ud(&ah, ud.qp_num, ud.qkey).signaled()])?;
        wait_send(&m.cq)
    };
    let cq = |i: usize| &members[i].0.cq;
    let (a, b, c, s) = (0, 1, 2, 3);

    // The send-only member reaches the group.
    send(s, b"from the send-only member")?;
    wait(cq(b), WcOpcode::Recv)?;
    wait(cq(c), WcOpcode::Recv)?;
    // It receives nothing the group carries.
    send(a, b"from a full member")?;
    wait(cq(b), WcOpcode::Recv)?;
    wait(cq(c), WcOpcode::Recv)?;
    check!(!receives_any(cq(s))?, "a send-only member received");
    // After a leave, nothing more arrives; the control still receives.
    members[b].0.id.leave_multicast(group)?;
    send(a, b"after the leave")?;
    let wc = wait(cq(c), WcOpcode::Recv)?;
    let at = wc.wr_id() as usize * 256 + GRH;
    check!(
        members[c].0.mr.to_vec(at..at + 15)? == b"after the leave",
        "the control's datagram differs"
    );
    check!(!receives_any(cq(b))?, "a member received after it left");
    check!(!receives_any(cq(s))?, "a send-only member received");
    for (i, (m, _)) in members.iter().enumerate() {
        if i != b {
            m.id.leave_multicast(group)?;
        }
    }
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cm::ud":
    datagrams_through_the_cm,
    multicast_join_send_receive_leave,
    multicast_send_only_member_and_leave,
);
