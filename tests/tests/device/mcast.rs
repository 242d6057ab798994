//! Multicast through verbs alone (`ibv_attach_mcast`, `ibv_detach_mcast`):
//! UD QPs attached to a group receive its datagrams, stop after a detach,
//! and are detached before they are destroyed.

use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

use rdma::{
    AccessFlags, AddressHandle, CompletionQueue, Gid, MemoryRegion, Path, ProtectionDomain, QpType,
    QueuePair, RecvWr, SendOps, SendWr, WcOpcode,
};
use rdma_tests::{check, fail, resource_counts, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::ud::ud_qp;
use crate::fixtures::{open, refused, roce_gid, R, T};

const GRH: usize = 40;
const QKEY: u32 = 0x0bad_cafe;
/// The destination QPN of a multicast datagram.
const MCAST_QPN: u32 = 0xFF_FFFF;

/// Waits for a receive on `cq` from `from` and returns the offset of its payload in
/// the receiver's region (its buffer is `wr_id * 256`).
fn received(cq: &CompletionQueue, from: &QueuePair) -> R<usize> {
    loop {
        let wc = cq.wait_one(T)?.result()?;
        if wc.opcode() == WcOpcode::Recv {
            check!(wc.src_qp() == from.qp_num() && wc.has_grh(), "{wc:?}");
            return Ok(wc.wr_id() as usize * 256 + GRH);
        }
    }
}

/// Whether any receive completes on `cq` within half a second (the other
/// member's receive of the same datagram came first, so a delivery would
/// be there already).
fn receives_any(cq: &CompletionQueue) -> R<bool> {
    match cq.wait_one(Duration::from_millis(500)) {
        Ok(wc) => Ok(wc.opcode() == WcOpcode::Recv || receives_any(cq)?),
        Err(e) if e.is_timeout() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

pub fn attach_receive_detach(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped(
            "iWARP (siw) has no UD queue pairs and no multicast".into(),
        ));
    }
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let (sgid, sgid_index) = roce_gid(&ctx, env)?;
    let group_ip = Ipv4Addr::new(239, 7, 3, 1);
    let group = Gid::from(group_ip.to_ipv6_mapped());
    // On RoCE the datagram leaves through the netdev's IP stack, which
    // loops a multicast copy back to this host only when the netdev is a
    // member of the IP group (the CM joins it for its ids; verbs do not).
    let sock = UdpSocket::bind((env.ipv4, 0))?;
    sock.join_multicast_v4(&group_ip, &env.ipv4)?;

    let mut members = Vec::new();
    for _ in 0..2 {
        let cq = CompletionQueue::new(&ctx, 16)?;
        let qp = ud_qp(&pd, &cq, SendOps::empty(), QKEY)?;
        let mr = MemoryRegion::new(&pd, 2048, AccessFlags::LOCAL_WRITE)?;
        for i in 0..8u64 {
            let at = i as usize * 256;
            qp.post_recv(&mut [RecvWr::new(i, &[mr.sge(at..at + 256)?])])?;
        }
        qp.attach_mcast(group, 0)?;
        // A second attach to the same group is no second membership.
        qp.attach_mcast(group, 0)?;
        check!(
            qp.mcast_groups() == vec![(group, 0)],
            "{:?}",
            qp.mcast_groups()
        );
        members.push((qp, cq, mr));
    }
    let scq = CompletionQueue::new(&ctx, 16)?;
    let sender = ud_qp(&pd, &scq, SendOps::empty(), QKEY)?;
    let smr = MemoryRegion::new(&pd, 256, AccessFlags::LOCAL_WRITE)?;
    let ah = AddressHandle::new(&pd, &Path::to_gid(group, sgid_index, 1))?;
    let send = |text: &[u8]| -> R<()> {
        smr.write(0, text)?;
        let ss = [smr.sge(0..text.len())?];
        sender.post_send(&mut [SendWr::send(7, &ss).ud(&ah, MCAST_QPN, QKEY).signaled()])?;
        let wc = scq.wait_one(T)?.result()?;
        check!(wc.opcode() == WcOpcode::Send, "{wc:?}");
        Ok(())
    };

    // Both members receive the datagram sent to the group, from the sender.
    send(b"to the verbs group")?;
    for (qp, cq, mr) in &members {
        let at = received(cq, &sender)?;
        check!(
            mr.to_vec(at..at + 18)? == b"to the verbs group",
            "QP {:#x}: the datagram differs",
            qp.qp_num()
        );
        // RoCEv2 over IPv4: the GRH's last 20 bytes are the IPv4 header,
        // from the sender's address to the group's.
        let mut grh = [0u8; GRH];
        mr.read(at - GRH, &mut grh)?;
        check!(
            grh[32..36] == env.ipv4.octets() && grh[36..40] == group_ip.octets(),
            "the IPv4 header is not the sender's to the group: {grh:?}"
        );
    }

    // After member 1 detaches, member 0 (the control) still receives and
    // member 1 nothing.
    let (qp1, cq1, _) = &members[1];
    qp1.detach_mcast(group, 0)?;
    check!(qp1.mcast_groups().is_empty(), "{:?}", qp1.mcast_groups());
    send(b"after the detach")?;
    let (_, cq0, mr0) = &members[0];
    let at = received(cq0, &sender)?;
    check!(
        mr0.to_vec(at..at + 16)? == b"after the detach",
        "the control's datagram differs"
    );
    check!(!receives_any(cq1)?, "a detached QP received");

    // Refused before any call: a second detach, a unicast GID, a QP of
    // another type.
    refused(
        qp1.detach_mcast(group, 0),
        "ibv_detach_mcast",
        libc::EINVAL,
        "not attached",
    )?;
    refused(
        qp1.attach_mcast(sgid, 0),
        "ibv_attach_mcast",
        libc::EINVAL,
        "not a multicast GID",
    )?;
    let rc = QueuePair::builder(&pd, QpType::Rc, &scq).build()?;
    refused(
        rc.attach_mcast(group, 0),
        "ibv_attach_mcast",
        libc::EINVAL,
        "(UD)",
    )?;

    // A QP dropped while attached is detached and destroyed: the kernel's
    // QP count falls (an attached QP's destroy fails with EBUSY and would
    // leave it; the other provider's suite may release more at the same
    // time, never add to it).
    let before = resource_counts(&env.device)?;
    let (qp0, cq0, mr0) = members.remove(0);
    check!(qp0.mcast_groups().len() == 1, "{:?}", qp0.mcast_groups());
    drop(qp0);
    let after = resource_counts(&env.device)?;
    let qps = |m: &std::collections::BTreeMap<String, u64>| m.get("qp").copied().unwrap_or(0);
    if qps(&after) >= qps(&before) {
        fail!("QP count {before:?} -> {after:?}: the attached QP was not destroyed");
    }
    drop((cq0, mr0));
    sock.leave_multicast_v4(&group_ip, &env.ipv4)?;
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "mcast":
    attach_receive_detach,
);
