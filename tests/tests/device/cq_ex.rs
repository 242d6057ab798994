//! The extended completion's optional readers: invalidated rkey, VLAN,
//! flow tag and tag-matching info, each read only when the CQ asked for it.

use std::time::Instant;

use rdma::{CompletionQueue, RecvWr, SendWr, WcFlags, WcOpcode};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{RcPair, TIMEOUT};

pub fn optional_readers_only_when_asked_for(env: &TestEnv) -> TestResult {
    let p = RcPair::extended(env)?;
    if !p.cq_b.is_extended() {
        // siw has no extended CQs: the pair's are classic, whose extended
        // poll is refused with its typed error.
        match p.cq_b.start_poll() {
            Err(e) if e.errno() == libc::EOPNOTSUPP => {}
            Err(e) => fail!("an extended poll of a classic CQ: {e}"),
            Ok(_) => fail!("an extended poll of a classic CQ started"),
        }
        return Ok(Outcome::Skipped(format!(
            "{} has no extended completion queues",
            env.device
        )));
    }
    let rs = [p.mr_b.sge(0..64)?];
    p.qp_b.post_recv(&mut [RecvWr::new(1, &rs)])?;
    p.mr_a.write(0, b"imm")?;
    let s = [p.mr_a.sge(0..3)?];
    // iWARP (siw) has no immediate data: a plain SEND there.
    let imm = (env.provider == Provider::Rxe).then_some(0x5eed);
    let wr = match imm {
        Some(imm) => SendWr::send_with_imm(2, &s, imm),
        None => SendWr::send(2, &s),
    };
    p.qp_a.post_send(&mut [wr.signaled()])?;
    let start = Instant::now();
    let mut got = None;
    while got.is_none() {
        if let Some(mut poll) = p.cq_b.start_poll()? {
            while let Some(c) = poll.next() {
                check!(c.is_success() && c.opcode() == WcOpcode::Recv, "{c:?}");
                // The CQ has the standard fields: the immediate (whose
                // field an invalidated rkey shares), no VLAN, flow tag or
                // tag-matching info.
                got = Some((
                    c.imm_data(),
                    c.invalidated_rkey(),
                    c.cvlan(),
                    c.flow_tag(),
                    c.tm_info(),
                ));
            }
        }
        if start.elapsed() > TIMEOUT {
            fail!("no receive on the extended CQ");
        }
    }
    check!(
        got == Some((imm, None, None, None, None)),
        "a SEND (immediate {imm:?}) read as {got:?}"
    );

    // A CQ that asks for the Ethernet and tag-matching fields: made where
    // the provider has them, refused with its typed error elsewhere.
    let ask = WcFlags::STANDARD | WcFlags::CVLAN | WcFlags::FLOW_TAG | WcFlags::TM_INFO;
    match CompletionQueue::builder(&p.ctx)
        .cqe(16)
        .extended(true)
        .wc_flags(ask)
        .build()
    {
        Ok(cq) => {
            check!(cq.wc_flags() == Some(ask), "{:?}", cq.wc_flags());
            println!("    {}: a CQ with VLAN, flow tag and TM info", env.device);
        }
        Err(e) => {
            check!(
                e.verb() == "ibv_create_cq_ex"
                    && matches!(e.errno(), libc::EOPNOTSUPP | libc::EINVAL),
                "{e}"
            );
            println!(
                "    {}: VLAN, flow tag and TM info refused: {e}",
                env.device
            );
        }
    }
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cq_ex":
    optional_readers_only_when_asked_for,
);
