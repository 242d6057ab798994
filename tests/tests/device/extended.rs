//! The extended verbs API (`ibv_wr_*` posting, `ibv_cq_ex` polling) on a
//! hand-connected RC pair, through the Rust ports and through the C shims.
//!
//! Polling uses `ibv_start_poll` / `ibv_end_poll` only, one completion per
//! poll: rdma-core v44's rxe provider mishandles `ibv_next_poll` on an empty
//! queue, and this test checks the ports, not that bug.

use std::ffi::c_int;
use std::ptr;
use std::time::Instant;

use ibverbs_sys::*;
use rdma_tests::sys::{
    alloc_pd, errno, non_null, ok, open_device, pattern, reg_mr, Buf, Result, WcRecord,
    COMPLETION_TIMEOUT,
};
use rdma_tests::{check, fail, Defer, Outcome, Provider, TestEnv, TestResult};

use crate::enumerate::roce_v2_gid_index;
use crate::rc::{active_mtu, connect_by_hand, query_gid};

/// The extended data-path calls, through one of the two implementations.
trait ExOps {
    const NAME: &'static str;
    unsafe fn wr_start(q: *mut ibv_qp_ex);
    unsafe fn wr_send(q: *mut ibv_qp_ex);
    unsafe fn wr_rdma_write(q: *mut ibv_qp_ex, rkey: u32, addr: u64);
    unsafe fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, len: u32);
    unsafe fn wr_complete(q: *mut ibv_qp_ex) -> c_int;
    unsafe fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int;
    unsafe fn end_poll(cq: *mut ibv_cq_ex);
    unsafe fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode;
    unsafe fn read_byte_len(cq: *mut ibv_cq_ex) -> u32;
    unsafe fn read_qp_num(cq: *mut ibv_cq_ex) -> u32;
    unsafe fn post_recv(q: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int;
}

macro_rules! ex_ops {
    ($ty:ident, $name:literal, $m:ident) => {
        struct $ty;
        impl ExOps for $ty {
            const NAME: &'static str = $name;
            // SAFETY (every method): the caller upholds the C function's contract.
            unsafe fn wr_start(q: *mut ibv_qp_ex) {
                unsafe { $m::ibv_wr_start(q) }
            }
            unsafe fn wr_send(q: *mut ibv_qp_ex) {
                unsafe { $m::ibv_wr_send(q) }
            }
            unsafe fn wr_rdma_write(q: *mut ibv_qp_ex, rkey: u32, addr: u64) {
                unsafe { $m::ibv_wr_rdma_write(q, rkey, addr) }
            }
            unsafe fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, len: u32) {
                unsafe { $m::ibv_wr_set_sge(q, lkey, addr, len) }
            }
            unsafe fn wr_complete(q: *mut ibv_qp_ex) -> c_int {
                unsafe { $m::ibv_wr_complete(q) }
            }
            unsafe fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
                unsafe { $m::ibv_start_poll(cq, attr) }
            }
            unsafe fn end_poll(cq: *mut ibv_cq_ex) {
                unsafe { $m::ibv_end_poll(cq) }
            }
            unsafe fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
                unsafe { $m::ibv_wc_read_opcode(cq) }
            }
            unsafe fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
                unsafe { $m::ibv_wc_read_byte_len(cq) }
            }
            unsafe fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
                unsafe { $m::ibv_wc_read_qp_num(cq) }
            }
            unsafe fn post_recv(
                q: *mut ibv_qp,
                wr: *mut ibv_recv_wr,
                bad: *mut *mut ibv_recv_wr,
            ) -> c_int {
                unsafe { $m::ibv_post_recv(q, wr, bad) }
            }
        }
    };
}

use ibverbs_sys as fast_mod;
use ibverbs_sys::shim as shim_mod;
ex_ops!(Fast, "fast", fast_mod);
ex_ops!(Shim, "shim", shim_mod);

/// One side: extended QP and CQ, and a registered buffer.
struct ExEndpoint<'a> {
    qp: *mut ibv_qp,
    qpx: *mut ibv_qp_ex,
    cq: *mut ibv_cq_ex,
    buf: &'a Buf,
    mr: *mut ibv_mr,
}

/// Why the extended API is unavailable, when the provider says so.
enum Unsupported {
    No(String),
}

fn create_cq_ex(
    ctx: *mut ibv_context,
    defer: &mut Defer,
) -> Result<std::result::Result<*mut ibv_cq_ex, Unsupported>> {
    // SAFETY: plain data.
    let mut attr: ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.cqe = 32;
    attr.wc_flags = (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM) as u64;
    // SAFETY: `ctx` is open; `attr` is complete.
    let cq = unsafe { ibv_create_cq_ex(ctx, &mut attr) };
    if cq.is_null() {
        let e = errno();
        if e == libc::EOPNOTSUPP || e == libc::ENOSYS {
            return Ok(Err(Unsupported::No(format!(
                "the provider has no extended CQ (ibv_create_cq_ex: {})",
                std::io::Error::from_raw_os_error(e)
            ))));
        }
        fail!(
            "ibv_create_cq_ex failed: {}",
            std::io::Error::from_raw_os_error(e)
        );
    }
    // SAFETY: destroyed once, after its QPs.
    defer.push("ibv_destroy_cq(ex)", move || unsafe {
        ibv_destroy_cq(ibv_cq_ex_to_cq(cq))
    });
    Ok(Ok(cq))
}

fn create_qp_ex(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq_ex,
    defer: &mut Defer,
) -> Result<std::result::Result<*mut ibv_qp, Unsupported>> {
    // SAFETY: plain data.
    let mut attr: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.send_cq = ibv_cq_ex_to_cq(cq);
    attr.recv_cq = ibv_cq_ex_to_cq(cq);
    attr.qp_type = IBV_QPT_RC;
    attr.cap = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.pd = pd;
    attr.send_ops_flags = (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE) as u64;
    // SAFETY: `ctx` is open; `attr` is complete for the mask.
    let qp = unsafe { ibv_create_qp_ex(ctx, &mut attr) };
    if qp.is_null() {
        let e = errno();
        if e == libc::EOPNOTSUPP || e == libc::ENOSYS {
            return Ok(Err(Unsupported::No(format!(
                "the provider has no extended QP (ibv_create_qp_ex: {})",
                std::io::Error::from_raw_os_error(e)
            ))));
        }
        fail!(
            "ibv_create_qp_ex failed: {}",
            std::io::Error::from_raw_os_error(e)
        );
    }
    // SAFETY: destroyed once, before its CQ and PD.
    defer.push("ibv_destroy_qp(ex)", move || unsafe { ibv_destroy_qp(qp) });
    Ok(Ok(qp))
}

fn poll_one<O: ExOps>(cq: *mut ibv_cq_ex) -> Result<WcRecord> {
    let start = Instant::now();
    loop {
        // SAFETY: plain data.
        let mut attr: ibv_poll_cq_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `cq` is a live extended CQ, not inside a poll.
        let rc = unsafe { O::start_poll(cq, &mut attr) };
        if rc == 0 {
            // SAFETY: inside a successful poll; BYTE_LEN and QP_NUM were
            // requested at creation; status and wr_id are plain fields.
            let rec = unsafe {
                WcRecord {
                    wr_id: (*cq).wr_id,
                    status: (*cq).status,
                    opcode: O::read_opcode(cq),
                    byte_len: O::read_byte_len(cq),
                    qp_num: O::read_qp_num(cq),
                }
            };
            // SAFETY: ends the poll that start_poll began.
            unsafe { O::end_poll(cq) };
            check!(
                rec.status == IBV_WC_SUCCESS,
                "completion {:#x} status {} ({})",
                rec.wr_id,
                rec.status,
                O::NAME
            );
            return Ok(rec);
        }
        if rc != libc::ENOENT {
            fail!("ibv_start_poll ({}) failed: {rc}", O::NAME);
        }
        if start.elapsed() > COMPLETION_TIMEOUT {
            fail!("no completion within {COMPLETION_TIMEOUT:?} ({})", O::NAME);
        }
        std::thread::yield_now();
    }
}

fn exchange<O: ExOps>(a: &ExEndpoint, b: &ExEndpoint, seed: u8) -> Result<Vec<WcRecord>> {
    // SAFETY: live MRs.
    let (a_lkey, b_lkey, b_rkey) = unsafe { ((*a.mr).lkey, (*b.mr).lkey, (*b.mr).rkey) };
    let mut out = Vec::new();

    let msg = pattern(seed, 64);
    a.buf.write(0, &msg);
    b.buf.write(0, &[0; 64]);
    let mut rsge = ibv_sge {
        addr: b.buf.addr(0),
        length: 256,
        lkey: b_lkey,
    };
    let mut rwr = ibv_recv_wr {
        wr_id: 0x100,
        next: ptr::null_mut(),
        sg_list: &mut rsge,
        num_sge: 1,
    };
    let mut bad = ptr::null_mut();
    // SAFETY: live QP; the SGE is inside a registered buffer that outlives the completion.
    ok(
        unsafe { O::post_recv(b.qp, &mut rwr, &mut bad) },
        "ibv_post_recv",
    )?;
    // SAFETY: a live extended QP created with SEND in its send_ops_flags; the
    // SGE is inside a registered buffer that outlives the completion.
    let rc = unsafe {
        O::wr_start(a.qpx);
        (*a.qpx).wr_id = 0x200;
        (*a.qpx).wr_flags = IBV_SEND_SIGNALED;
        O::wr_send(a.qpx);
        O::wr_set_sge(a.qpx, a_lkey, a.buf.addr(0), 64);
        O::wr_complete(a.qpx)
    };
    ok(rc, "ibv_wr_complete(SEND)")?;
    out.push(poll_one::<O>(a.cq)?);
    out.push(poll_one::<O>(b.cq)?);
    check!(
        b.buf.read(0, 64) == msg,
        "SEND ({}): received bytes differ",
        O::NAME
    );

    let data = pattern(seed.wrapping_add(77), 512);
    a.buf.write(1024, &data);
    b.buf.write(1024, &[0; 512]);
    // SAFETY: as above, with RDMA_WRITE in send_ops_flags; the remote range
    // is inside `b`'s MR, registered for remote write.
    let rc = unsafe {
        O::wr_start(a.qpx);
        (*a.qpx).wr_id = 0x300;
        (*a.qpx).wr_flags = IBV_SEND_SIGNALED;
        O::wr_rdma_write(a.qpx, b_rkey, b.buf.addr(1024));
        O::wr_set_sge(a.qpx, a_lkey, a.buf.addr(1024), 512);
        O::wr_complete(a.qpx)
    };
    ok(rc, "ibv_wr_complete(RDMA_WRITE)")?;
    out.push(poll_one::<O>(a.cq)?);
    check!(
        b.buf.read(1024, 512) == data,
        "RDMA WRITE ({}): target bytes differ",
        O::NAME
    );
    Ok(out)
}

pub fn wr_and_poll_api_fast_path_matches_shim(env: &TestEnv) -> TestResult {
    let (buf_a, buf_b) = (Buf::new(8192), Buf::new(8192));
    let mut defer = Defer::new();
    let ctx = open_device(&env.device, &mut defer)?;
    let pd = alloc_pd(ctx, &mut defer)?;
    let cq_a = match create_cq_ex(ctx, &mut defer)? {
        Ok(cq) => cq,
        Err(Unsupported::No(why)) => return Ok(Outcome::Skipped(why)),
    };
    let cq_b = match create_cq_ex(ctx, &mut defer)? {
        Ok(cq) => cq,
        Err(Unsupported::No(why)) => fail!("second extended CQ refused: {why}"),
    };
    let qp_a = match create_qp_ex(ctx, pd, cq_a, &mut defer)? {
        Ok(qp) => qp,
        Err(Unsupported::No(why)) => return Ok(Outcome::Skipped(why)),
    };
    let qp_b = match create_qp_ex(ctx, pd, cq_b, &mut defer)? {
        Ok(qp) => qp,
        Err(Unsupported::No(why)) => fail!("second extended QP refused: {why}"),
    };
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped(
            "iWARP QPs connect only through rdma_cm".into(),
        ));
    }
    let (mr_a, mr_b) = (
        reg_mr(pd, &buf_a, &mut defer)?,
        reg_mr(pd, &buf_b, &mut defer)?,
    );
    let gid_index = roce_v2_gid_index(ctx, env.ipv4.to_ipv6_mapped())?;
    let gid = query_gid(ctx, gid_index)?;
    let mtu = active_mtu(ctx)?;
    // SAFETY: live QPs.
    let (qpn_a, qpn_b) = unsafe { ((*qp_a).qp_num, (*qp_b).qp_num) };
    connect_by_hand(qp_a, qpn_b, gid, gid_index as u8, mtu)?;
    connect_by_hand(qp_b, qpn_a, gid, gid_index as u8, mtu)?;
    // SAFETY: the QPs were created with ibv_create_qp_ex.
    let (qpx_a, qpx_b) = unsafe { (ibv_qp_to_qp_ex(qp_a), ibv_qp_to_qp_ex(qp_b)) };
    let qpx_a = non_null(qpx_a, "ibv_qp_to_qp_ex")?;
    let qpx_b = non_null(qpx_b, "ibv_qp_to_qp_ex")?;

    let a = ExEndpoint {
        qp: qp_a,
        qpx: qpx_a,
        cq: cq_a,
        buf: &buf_a,
        mr: mr_a,
    };
    let b = ExEndpoint {
        qp: qp_b,
        qpx: qpx_b,
        cq: cq_b,
        buf: &buf_b,
        mr: mr_b,
    };
    let fast = exchange::<Fast>(&a, &b, 3)?;
    let shim = exchange::<Shim>(&a, &b, 4)?;
    let ops: Vec<_> = fast.iter().map(|r| r.opcode).collect();
    check!(
        ops == [IBV_WC_SEND, IBV_WC_RECV, IBV_WC_RDMA_WRITE],
        "opcodes {ops:?}"
    );
    check!(
        fast[1].byte_len == 64,
        "receive byte_len {}",
        fast[1].byte_len
    );
    check!(
        fast[0].qp_num == qpn_a && fast[1].qp_num == qpn_b,
        "qp_num {fast:?}"
    );
    check!(
        fast == shim,
        "fast path and C shim differ:\n fast {fast:?}\n shim {shim:?}"
    );
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "sys::extended":
    wr_and_poll_api_fast_path_matches_shim,
);
