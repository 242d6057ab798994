//! Bad input gets a clear, typed error and loses nothing: one test per case.
//! The table of cases is in `rdma`'s crate docs ("Bad input").

use std::net::{IpAddr, SocketAddr};

use rdma::cm::{CmId, ConnParam, EventChannel, PortSpace};
use rdma::{
    AccessFlags, CompletionQueue, Context, DeviceList, Error, InitAttr, MemoryRegion, MemoryWindow,
    MwType, ProtectionDomain, QpCaps, QpType, QueuePair, RecvWr, RtsAttr, SendWr,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{open, state_report, R};

pub fn bad_input_gives_typed_errors(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
    // An SGE outside its region.
    let e = mr
        .sge(4000..5000)
        .err()
        .ok_or("SGE past the end accepted")?;
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("outside the 4096-byte"),
        "{e}"
    );
    check!(
        mr.write(4090, &[0; 10]).is_err(),
        "write past the end accepted"
    );
    // A port past the last one.
    let e = ctx.query_port(9).err().ok_or("port 9 accepted")?;
    check!(e.verb() == "ibv_query_port", "{e}");
    // An illegal transition names both states (a new siw QP is IDLE, which
    // it may report as INIT: see `StateReport`).
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    let new = state_report(env, &pd, &cq)?.new_qp();
    let e = qp
        .to_rts(&RtsAttr::default())
        .err()
        .ok_or("RESET -> RTS accepted")?;
    check!(e.to_string().contains(&format!("{new:?} -> Rts")), "{e}");
    check!(qp.state()? == new, "failed transition changed the state");
    // A connected QP needs the remote side for RTR.
    qp.to_init(&InitAttr::new(1))?;
    let e = qp.to_rtr(None).err().ok_or("RTR without remote accepted")?;
    check!(e.errno() == libc::EINVAL, "{e}");
    // Too many SGEs for the QP.
    let sges: Vec<_> = (0..8)
        .map(|i| mr.sge(i * 8..i * 8 + 8))
        .collect::<Result<_, _>>()?;
    let e = qp
        .post_recv(&mut [RecvWr::new(1, &sges)])
        .err()
        .ok_or("8 SGEs on a 1-SGE QP accepted")?;
    check!(e.verb() == "ibv_post_recv", "{e}");
    Ok(Outcome::Passed)
}

/// The error of `r`, or a failure naming what was wrongly accepted.
fn refused<T>(r: rdma::Result<T>, what: &str) -> R<Error> {
    match r {
        Ok(_) => Err(format!("{what} was accepted").into()),
        Err(e) => Ok(e),
    }
}

struct Objects {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

fn objects(env: &TestEnv) -> R<Objects> {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    Ok(Objects { ctx, pd, cq })
}

pub fn unknown_device_name(_env: &TestEnv) -> TestResult {
    let e = refused(
        DeviceList::new()?.open("no-such-device9"),
        "an unknown device",
    )?;
    check!(
        e.errno() == libc::ENODEV && e.to_string().contains("no-such-device9"),
        "{e}"
    );
    Ok(Outcome::Passed)
}

pub fn port_zero(env: &TestEnv) -> TestResult {
    let e = refused(open(env)?.query_port(0), "port 0")?;
    check!(
        e.verb() == "ibv_query_port" && e.errno() == libc::EINVAL,
        "{e}"
    );
    Ok(Outcome::Passed)
}

pub fn port_past_the_last(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let last = ctx.query_device()?.phys_port_cnt();
    let e = refused(ctx.query_port(last + 1), "a port past the last")?;
    check!(
        e.verb() == "ibv_query_port" && e.to_string().contains("past the device's last port"),
        "{e}"
    );
    Ok(Outcome::Passed)
}

pub fn gid_index_out_of_range(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let len = ctx.query_port(1)?.gid_tbl_len() as u32;
    let e = refused(ctx.query_gid(1, len + 5), "a GID index past the table")?;
    check!(e.verb().starts_with("ibv_query_gid"), "{e}");
    Ok(Outcome::Passed)
}

pub fn zero_length_memory_region(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let e = refused(
        MemoryRegion::new(&o.pd, 0, AccessFlags::LOCAL_WRITE),
        "an empty memory region",
    )?;
    check!(e.verb() == "ibv_reg_mr", "{e}");
    Ok(Outcome::Passed)
}

pub fn huge_memory_region(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let e = refused(
        MemoryRegion::new(&o.pd, 1 << 40, AccessFlags::LOCAL_WRITE),
        "a 1 TiB memory region",
    )?;
    check!(
        matches!(
            e.errno(),
            libc::ENOMEM | libc::EFAULT | libc::EINVAL | libc::EAGAIN
        ),
        "{e}"
    );
    // Nothing was lost: a normal registration still works.
    MemoryRegion::new(&o.pd, 4096, AccessFlags::LOCAL_WRITE)?;
    Ok(Outcome::Passed)
}

pub fn sge_outside_its_region(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let mr = MemoryRegion::new(&o.pd, 4096, AccessFlags::LOCAL_WRITE)?;
    for range in [4000..4100, 5000..5001, 4096..4097] {
        let e = refused(mr.sge(range.clone()), "an SGE outside its region")?;
        check!(
            e.errno() == libc::EINVAL && e.to_string().contains("outside"),
            "{range:?}: {e}"
        );
    }
    Ok(Outcome::Passed)
}

pub fn copy_outside_its_region(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let mr = MemoryRegion::new(&o.pd, 64, AccessFlags::LOCAL_WRITE)?;
    refused(mr.write(60, &[1; 8]), "a write past the end")?;
    let mut out = [0u8; 8];
    refused(
        mr.read(usize::MAX - 2, &mut out),
        "a read at an overflowing offset",
    )?;
    check!(
        mr.to_vec(..)? == vec![0; 64],
        "a refused write changed the region"
    );
    Ok(Outcome::Passed)
}

fn reset_qp(o: &Objects, caps: QpCaps) -> R<QueuePair> {
    Ok(QueuePair::builder(&o.pd, QpType::Rc, &o.cq)
        .caps(caps)
        .build()?)
}

pub fn too_many_sges(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let qp = reset_qp(&o, QpCaps::default())?;
    qp.to_init(&InitAttr::new(1))?;
    let mr = MemoryRegion::new(&o.pd, 4096, AccessFlags::LOCAL_WRITE)?;
    let sges: Vec<_> = (0..qp.caps().max_recv_sge as usize + 8)
        .map(|i| mr.sge(i * 8..i * 8 + 8))
        .collect::<Result<_, _>>()?;
    let e = refused(qp.post_recv(&mut [RecvWr::new(1, &sges)]), "too many SGEs")?;
    check!(
        e.verb() == "ibv_post_recv" && e.to_string().contains("work request 0"),
        "{e}"
    );
    Ok(Outcome::Passed)
}

/// More receives than a shared receive queue holds: the error names the
/// first refused request; the ones before it were posted.
pub fn srq_post_past_its_capacity(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let srq = rdma::SharedReceiveQueue::new(&o.pd, 4, 1)?;
    let cap = srq.max_wr() as usize;
    let mr = MemoryRegion::new(&o.pd, 64 * (cap + 4), AccessFlags::LOCAL_WRITE)?;
    let sges: Vec<_> = (0..cap + 4)
        .map(|i| mr.sge(i * 64..i * 64 + 64))
        .collect::<Result<_, _>>()?;
    let mut wrs: Vec<_> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(i as u64, std::slice::from_ref(s)))
        .collect();
    let e = refused(srq.post_recv(&mut wrs), "more receives than the SRQ holds")?;
    let named = (1..wrs.len()).find(|i| e.to_string().contains(&format!("work request {i} ")));
    check!(
        e.verb() == "ibv_post_srq_recv" && named.is_some_and(|i| i >= cap.min(4)),
        "max_wr {cap}, {} requests: {e}",
        wrs.len()
    );
    Ok(Outcome::Passed)
}

pub fn inline_data_over_the_limit(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let qp = reset_qp(
        &o,
        QpCaps {
            max_inline_data: 0,
            ..QpCaps::default()
        },
    )?;
    let limit = qp.caps().max_inline_data as usize;
    let data = vec![7u8; limit + 4096];
    let e = refused(
        qp.post_send(&mut [SendWr::send_inline(1, &data)]),
        "inline data over the limit",
    )?;
    check!(e.verb() == "ibv_post_send", "{e}");
    Ok(Outcome::Passed)
}

pub fn post_send_on_a_reset_qp(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let qp = reset_qp(&o, QpCaps::default())?;
    let mr = MemoryRegion::new(&o.pd, 64, AccessFlags::LOCAL_WRITE)?;
    let s = [mr.sge(0..8)?];
    let e = refused(
        qp.post_send(&mut [SendWr::send(1, &s)]),
        "a send on a QP in RESET",
    )?;
    check!(e.verb() == "ibv_post_send", "{e}");
    // A new siw QP is IDLE, which it may report as INIT (see `StateReport`).
    let new = state_report(env, &o.pd, &o.cq)?.new_qp();
    let state = qp.state()?;
    check!(
        state == new,
        "the refused send left the QP in {state:?}, not {new:?}"
    );
    Ok(Outcome::Passed)
}

pub fn illegal_transition_reset_to_rts(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let qp = reset_qp(&o, QpCaps::default())?;
    let e = refused(qp.to_rts(&RtsAttr::default()), "RESET -> RTS")?;
    // The error names the state the QP reports: a new siw QP is IDLE, which
    // it may report as INIT (see `StateReport`).
    let new = state_report(env, &o.pd, &o.cq)?.new_qp();
    check!(e.to_string().contains(&format!("{new:?} -> Rts")), "{e}");
    Ok(Outcome::Passed)
}

pub fn illegal_transition_init_to_rts(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let qp = reset_qp(&o, QpCaps::default())?;
    qp.to_init(&InitAttr::new(1))?;
    // siw reports an initialised QP (its IDLE state) as INIT, or on 6.1 as
    // RESET (see `StateReport`).
    let before = qp.state()?;
    let init = state_report(env, &o.pd, &o.cq)?.init();
    check!(
        before == init,
        "an initialised QP reports {before:?}, not {init:?}"
    );
    let e = refused(qp.to_rts(&RtsAttr::default()), "INIT -> RTS")?;
    check!(e.to_string().contains(&format!("{before:?} -> Rts")), "{e}");
    check!(
        qp.state()? == before,
        "a refused transition changed the state"
    );
    Ok(Outcome::Passed)
}

pub fn rtr_without_the_remote_side(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let qp = reset_qp(&o, QpCaps::default())?;
    qp.to_init(&InitAttr::new(1))?;
    let e = refused(qp.to_rtr(None), "RTR without the remote side")?;
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("remote side"),
        "{e}"
    );
    Ok(Outcome::Passed)
}

pub fn qp_beyond_device_limits(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let max = o.ctx.query_device()?.max_qp_wr() as u32;
    let e = refused(
        QueuePair::builder(&o.pd, QpType::Rc, &o.cq)
            .caps(QpCaps {
                max_send_wr: max.saturating_mul(4),
                ..QpCaps::default()
            })
            .build(),
        "a QP deeper than the device allows",
    )?;
    check!(e.verb().starts_with("ibv_create_qp"), "{e}");
    Ok(Outcome::Passed)
}

pub fn ud_send_without_an_address_handle(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    let o = objects(env)?;
    let qp = QueuePair::builder(&o.pd, QpType::Ud, &o.cq).build()?;
    qp.to_init(&InitAttr {
        qkey: 1,
        ..InitAttr::new(1)
    })?;
    qp.to_rtr(None)?;
    qp.to_rts(&RtsAttr::default())?;
    let mr = MemoryRegion::new(&o.pd, 64, AccessFlags::LOCAL_WRITE)?;
    let s = [mr.sge(0..8)?];
    let e = refused(
        qp.post_send(&mut [SendWr::send(1, &s)]),
        "a UD send without an address handle",
    )?;
    check!(e.to_string().contains("no address handle"), "{e}");
    Ok(Outcome::Passed)
}

pub fn memory_window_where_unsupported(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    match (env.provider, MemoryWindow::new(&o.pd, MwType::Type1)) {
        (Provider::Siw, Ok(_)) => fail!("siw allocated a memory window"),
        (Provider::Siw, Err(e)) => {
            check!(
                e.verb() == "ibv_alloc_mw" && e.errno() == libc::EOPNOTSUPP,
                "{e}"
            );
            Ok(Outcome::Passed)
        }
        (Provider::Rxe, r) => {
            r?;
            Ok(Outcome::Skipped(
                "rxe supports memory windows: nothing to refuse".into(),
            ))
        }
    }
}

pub fn cm_bind_to_an_address_no_device_has(_env: &TestEnv) -> TestResult {
    let ch = EventChannel::new()?;
    let id = CmId::new(&ch, PortSpace::Tcp)?;
    let e = refused(
        id.bind("203.0.113.9:0".parse()?),
        "a bind to a foreign address",
    )?;
    check!(e.verb() == "rdma_bind_addr", "{e}");
    Ok(Outcome::Passed)
}

pub fn cm_qp_before_the_id_has_a_device(env: &TestEnv) -> TestResult {
    let o = objects(env)?;
    let ch = EventChannel::new()?;
    let mut id = CmId::new(&ch, PortSpace::Tcp)?;
    let e = refused(
        id.create_qp(&o.pd, QpType::Rc, &o.cq, &o.cq, QpCaps::default())
            .map(|_| ()),
        "a QP on an unbound id",
    )?;
    check!(e.to_string().contains("not bound to a device"), "{e}");
    Ok(Outcome::Passed)
}

pub fn cm_private_data_too_long(env: &TestEnv) -> TestResult {
    let ch = EventChannel::new()?;
    let id = CmId::new(&ch, PortSpace::Tcp)?;
    id.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    let e = refused(
        id.connect(&ConnParam::new().with_private_data(&[0; 300])),
        "300 bytes of private data",
    )?;
    check!(
        e.errno() == libc::EINVAL && e.to_string().contains("at most 255"),
        "{e}"
    );
    let e = refused(
        id.reject(&[0; 300]),
        "a reject with 300 bytes of private data",
    )?;
    check!(e.errno() == libc::EINVAL, "{e}");
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "bad_input":
    bad_input_gives_typed_errors,
    unknown_device_name,
    port_zero,
    port_past_the_last,
    gid_index_out_of_range,
    zero_length_memory_region,
    huge_memory_region,
    sge_outside_its_region,
    copy_outside_its_region,
    too_many_sges,
    srq_post_past_its_capacity,
    inline_data_over_the_limit,
    post_send_on_a_reset_qp,
    illegal_transition_reset_to_rts,
    illegal_transition_init_to_rts,
    rtr_without_the_remote_side,
    qp_beyond_device_limits,
    ud_send_without_an_address_handle,
    memory_window_where_unsupported,
    cm_bind_to_an_address_no_device_has,
    cm_qp_before_the_id_has_a_device,
    cm_private_data_too_long,
);
