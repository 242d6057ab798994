//! The path back to a UD sender from its datagram's completion and GRH
//! (`ibv_init_ah_from_wc`, `Path::from_wc`), used to reply.

use rdma::{
    AccessFlags, AddressHandle, CompletionQueue, MemoryRegion, Path, ProtectionDomain, RecvWr,
    SendOps, SendWr, WcOpcode,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::ud::ud_qp;
use crate::fixtures::{open, refused, roce_gid, wait};

pub fn path_from_wc_replies_to_the_sender(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
    let qkey = 0x0505_0505;
    let a = ud_qp(&pd, &cq, SendOps::empty(), qkey)?;
    let b = ud_qp(&pd, &cq, SendOps::empty(), qkey)?;
    let (gid, idx) = roce_gid(&ctx, env)?;
    let ah = AddressHandle::new(&pd, &Path::to_gid(gid, idx, 1))?;
    b.post_recv(&mut [RecvWr::new(1, &[mr.sge(1024..2048)?])])?;
    mr.write(0, b"ping")?;
    let ss = [mr.sge(0..4)?];
    a.post_send(&mut [SendWr::send(2, &ss).ud(&ah, b.qp_num(), qkey).signaled()])?;
    let wcs = wait(&cq, 2)?;
    let Some(recv) = wcs.iter().find(|w| w.opcode() == WcOpcode::Recv).copied() else {
        fail!("no receive: {wcs:?}")
    };
    let Some(send) = wcs.iter().find(|w| w.opcode() == WcOpcode::Send).copied() else {
        fail!("no send completion: {wcs:?}")
    };
    let mut grh = [0u8; 40];
    mr.read(1024, &mut grh)?;

    // The path names the sender's GID, and replies from the GID the
    // datagram was addressed to, on the receiving port.
    let path = Path::from_wc(&ctx, 1, &recv, &grh)?;
    check!(
        path.dgid == Some(gid) && path.sgid_index == idx && path.port == 1,
        "{path:?} (sender {gid:?} at index {idx})"
    );
    let back = AddressHandle::new(&pd, &path)?;
    a.post_recv(&mut [RecvWr::new(3, &[mr.sge(2048..3072)?])])?;
    mr.write(4, b"pong")?;
    let ss2 = [mr.sge(4..8)?];
    b.post_send(&mut [SendWr::send(4, &ss2)
        .ud(&back, recv.src_qp(), qkey)
        .signaled()])?;
    let wcs = wait(&cq, 2)?;
    check!(
        wcs.iter().any(|w| w.wr_id() == 3 && w.byte_len() == 44),
        "reply not received: {wcs:?}"
    );
    check!(mr.to_vec(2088..2092)? == b"pong", "the reply differs");

    // Refused before the call: a send's completion (libibverbs would make
    // a path of zeros of it).
    refused(
        Path::from_wc(&ctx, 1, &send, &grh),
        "ibv_init_ah_from_wc",
        libc::EINVAL,
        "successful receive",
    )?;
    // Refused by libibverbs: a GRH that names no GID of the port.
    let mut foreign = grh;
    // An IPv4 header (RoCEv2) to 203.0.113.9, no address of this port.
    foreign[36..40].copy_from_slice(&[203, 0, 113, 9]);
    // An IPv6 header would carry its destination GID at 24..40.
    foreign[24..36].fill(0);
    match Path::from_wc(&ctx, 1, &recv, &foreign) {
        Err(e) if e.verb() == "ibv_init_ah_from_wc" => {}
        other => fail!("a GRH to no GID of the port gave {other:?}"),
    }
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "ah_reply":
    path_from_wc_replies_to_the_sender,
);
