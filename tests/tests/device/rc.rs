//! An RC queue pair pair on one device, connected by hand (RoCE only).

use ibverbs_sys::*;
use rdma_tests::sys::{
    alloc_pd, create_cq, fast_matches_shim, non_null, ok, open_device, reg_mr, Buf, Endpoint,
    Result,
};
use rdma_tests::{Defer, Outcome, Provider, TestEnv, TestResult};

use crate::enumerate::roce_v2_gid_index;

/// Creates an RC QP on `pd` with `cq` for sends and receives.
pub fn create_rc_qp(pd: *mut ibv_pd, cq: *mut ibv_cq, defer: &mut Defer) -> Result<*mut ibv_qp> {
    // SAFETY: plain data.
    let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    // SAFETY: `pd` is live; `attr` is a complete init attribute.
    let qp = non_null(unsafe { ibv_create_qp(pd, &mut attr) }, "ibv_create_qp")?;
    // SAFETY: destroyed once, before its CQ and PD.
    defer.push("ibv_destroy_qp", move || unsafe { ibv_destroy_qp(qp) });
    Ok(qp)
}

/// Moves `qp` RESET -> INIT -> RTR -> RTS towards `remote_qpn` at `dgid`.
pub fn connect_by_hand(
    qp: *mut ibv_qp,
    remote_qpn: u32,
    dgid: ibv_gid,
    sgid_index: u8,
    mtu: ibv_mtu,
) -> Result<()> {
    // SAFETY: plain data.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    let mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    // SAFETY: `qp` is live; `a` and the mask describe a RESET->INIT transition.
    ok(
        unsafe { ibv_modify_qp(qp, &mut a, mask as i32) },
        "ibv_modify_qp(INIT)",
    )?;

    // SAFETY: plain data.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = sgid_index;
    a.ah_attr.grh.hop_limit = 64;
    let mask = IBV_QP_STATE
        | IBV_QP_AV
        | IBV_QP_PATH_MTU
        | IBV_QP_DEST_QPN
        | IBV_QP_RQ_PSN
        | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER;
    // SAFETY: as above, INIT->RTR.
    ok(
        unsafe { ibv_modify_qp(qp, &mut a, mask as i32) },
        "ibv_modify_qp(RTR)",
    )?;

    // SAFETY: plain data.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    let mask = IBV_QP_STATE
        | IBV_QP_TIMEOUT
        | IBV_QP_RETRY_CNT
        | IBV_QP_RNR_RETRY
        | IBV_QP_SQ_PSN
        | IBV_QP_MAX_QP_RD_ATOMIC;
    // SAFETY: as above, RTR->RTS.
    ok(
        unsafe { ibv_modify_qp(qp, &mut a, mask as i32) },
        "ibv_modify_qp(RTS)",
    )?;
    Ok(())
}

/// The GID at `index` of port 1.
pub fn query_gid(ctx: *mut ibv_context, index: u32) -> Result<ibv_gid> {
    // SAFETY: plain data.
    let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open.
    ok(
        unsafe { ibv_query_gid(ctx, 1, index as i32, &mut gid) },
        "ibv_query_gid",
    )?;
    Ok(gid)
}

/// The active MTU of port 1.
pub fn active_mtu(ctx: *mut ibv_context) -> Result<ibv_mtu> {
    // SAFETY: plain data.
    let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open.
    ok(unsafe { ibv_query_port(ctx, 1, &mut pa) }, "ibv_query_port")?;
    Ok(pa.active_mtu)
}

pub fn hand_connected_send_and_write_fast_path_matches_shim(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped(
            "iWARP connects only through rdma_cm; a QP cannot be moved to RTS by hand \
             (the rdma_cm variant of this test runs on siw)"
                .into(),
        ));
    }
    let (buf_a, buf_b) = (Buf::new(8192), Buf::new(8192));
    let mut defer = Defer::new();
    let ctx = open_device(&env.device, &mut defer)?;
    let pd = alloc_pd(ctx, &mut defer)?;
    let (cq_a, cq_b) = (
        create_cq(ctx, 32, &mut defer)?,
        create_cq(ctx, 32, &mut defer)?,
    );
    let (mr_a, mr_b) = (
        reg_mr(pd, &buf_a, &mut defer)?,
        reg_mr(pd, &buf_b, &mut defer)?,
    );
    let (qp_a, qp_b) = (
        create_rc_qp(pd, cq_a, &mut defer)?,
        create_rc_qp(pd, cq_b, &mut defer)?,
    );

    let gid_index = roce_v2_gid_index(ctx, env.ipv4.to_ipv6_mapped())?;
    let gid = query_gid(ctx, gid_index)?;
    let mtu = active_mtu(ctx)?;
    // SAFETY: the QPs are live; qp_num is set at creation.
    let (qpn_a, qpn_b) = unsafe { ((*qp_a).qp_num, (*qp_b).qp_num) };
    connect_by_hand(qp_a, qpn_b, gid, gid_index as u8, mtu)?;
    connect_by_hand(qp_b, qpn_a, gid, gid_index as u8, mtu)?;

    let a = Endpoint {
        qp: qp_a,
        cq: cq_a,
        buf: &buf_a,
        mr: mr_a,
    };
    let b = Endpoint {
        qp: qp_b,
        cq: cq_b,
        buf: &buf_b,
        mr: mr_b,
    };
    fast_matches_shim(&a, &b)?;
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "sys::rc":
    hand_connected_send_and_write_fast_path_matches_shim,
);
