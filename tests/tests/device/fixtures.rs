//! Set-ups the device tests share: the device's context, an RC pair of one
//! device (by hand on RoCE, through rdma_cm on iWARP), waits for completions.

use std::ffi::c_int;
use std::ptr;
use std::time::Duration;

use rdma::{
    AccessFlags, CompletionQueue, Context, DeviceList, Gid, InitAttr, MemoryRegion, Mtu, Path,
    ProtectionDomain, QpCaps, QpState, QpType, QueuePair, RecvWr, RemoteMemory, RtrAttr, RtsAttr,
    SendOps, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use rdma_tests::{check, fail, Provider, TestEnv};

pub type R<T> = Result<T, Box<dyn std::error::Error>>;

pub const TIMEOUT: Duration = Duration::from_secs(20);

pub const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

pub fn open(env: &TestEnv) -> R<Context> {
    let list = DeviceList::new()?;
    match list.find(&env.device) {
        Some(d) => Ok(d.open()?),
        None => fail!("device {} not found", env.device),
    }
}

/// How `ibv_query_qp` reports a QP's state on the device under test.
///
/// rxe keeps the verbs state machine. siw has its own: no RESET, INIT or
/// RTR, only IDLE (a new QP, and one moved to RESET or INIT), RTS, and
/// ERROR, which it never leaves (a move to RESET is accepted and changes
/// nothing). Since siw_query_qp maps its states (6.12 does, as does 7.2)
/// IDLE reads INIT, as rdma-core's own tests expect of iWARP; 6.1's
/// siw_query_qp leaves the state unset, so the kernel's zero-allocated reply
/// reads RESET whatever the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateReport {
    /// Each verbs state as itself (rxe).
    Verbs,
    /// siw's states, IDLE as INIT.
    Siw,
    /// No state: every query reads RESET (siw before it mapped its states).
    Unset,
}

impl StateReport {
    /// What a new QP reports.
    pub fn new_qp(self) -> QpState {
        match self {
            StateReport::Verbs | StateReport::Unset => QpState::Reset,
            StateReport::Siw => QpState::Init,
        }
    }

    /// What a QP moved to INIT reports.
    pub fn init(self) -> QpState {
        match self {
            StateReport::Verbs | StateReport::Siw => QpState::Init,
            StateReport::Unset => QpState::Reset,
        }
    }

    /// What a QP moved to ERROR and then to RESET reports.
    pub fn reset_after_error(self) -> QpState {
        match self {
            StateReport::Verbs | StateReport::Unset => QpState::Reset,
            StateReport::Siw => QpState::Error,
        }
    }
}

/// How the device reports QP states. On siw a new QP of `pd` and `cq` is
/// moved to ERROR, a move siw allows from IDLE, and queried: ERROR when the
/// kernel maps siw's states, RESET when it leaves the state unset.
pub fn state_report(env: &TestEnv, pd: &ProtectionDomain, cq: &CompletionQueue) -> R<StateReport> {
    if env.provider == Provider::Rxe {
        return Ok(StateReport::Verbs);
    }
    let qp = QueuePair::builder(pd, QpType::Rc, cq).build()?;
    qp.set_state(QpState::Error)?;
    match qp.state()? {
        QpState::Error => Ok(StateReport::Siw),
        QpState::Reset => Ok(StateReport::Unset),
        other => fail!("a siw QP moved to ERROR reports {other:?}"),
    }
}

/// Waits for `n` completions of `cq` (each must succeed); those that
/// were there with them come too, up to 16 in all.
pub fn wait(cq: &CompletionQueue, n: usize) -> R<Vec<WorkCompletion>> {
    let mut buf = vec![WorkCompletion::ZERO; n.max(16)];
    let got = cq.wait(&mut buf[..], n, TIMEOUT)?;
    check!(
        got.len() >= n,
        "{} of {n} completions within {TIMEOUT:?}",
        got.len()
    );
    if let Some(wc) = got.iter().find(|wc| !wc.is_success()) {
        fail!("completion failed: {wc:?}");
    }
    Ok(got.to_vec())
}

/// Waits for one completion of `cq`, successful or not.
pub fn wait_any(cq: &CompletionQueue) -> R<WorkCompletion> {
    Ok(cq.wait_one(TIMEOUT)?)
}

/// The RoCEv2 GID of the device's IPv4 address.
pub fn roce_gid(ctx: &Context, env: &TestEnv) -> R<(Gid, u8)> {
    let want = Gid::from(env.ipv4.to_ipv6_mapped());
    match ctx
        .gid_table()?
        .into_iter()
        .find(|e| e.gid == want && e.gid_type == rdma::GidType::RoceV2)
    {
        Some(e) => Ok((e.gid, e.index)),
        None => fail!("no RoCEv2 GID for {}", env.ipv4),
    }
}

/// Connects two RC QPs of one device: by hand on RoCE, through rdma_cm on
/// iWARP (the returned connection must outlive the QPs' use).
pub fn connect_rc(
    env: &TestEnv,
    ctx: &Context,
    a: &QueuePair,
    b: &QueuePair,
) -> R<Option<cm::Connection>> {
    connect_rc_with(
        env,
        ctx,
        a,
        b,
        &RtsAttr {
            max_rd_atomic: 4,
            ..RtsAttr::default()
        },
    )
}

/// [`connect_rc`] with the RTS attributes (timeouts, retries) of `rts` on RoCE.
pub fn connect_rc_with(
    env: &TestEnv,
    ctx: &Context,
    a: &QueuePair,
    b: &QueuePair,
    rts: &RtsAttr,
) -> R<Option<cm::Connection>> {
    match env.provider {
        Provider::Rxe => {
            let (gid, idx) = roce_gid(ctx, env)?;
            let mtu = Mtu::from_bytes(ctx.query_port(1)?.active_mtu()).unwrap_or(Mtu::Mtu1024);
            for (qp, remote) in [(a, b.qp_num()), (b, a.qp_num())] {
                qp.to_init(&InitAttr {
                    access: ACCESS,
                    ..InitAttr::new(1)
                })?;
                qp.to_rtr(Some(&RtrAttr {
                    remote_qpn: remote,
                    rq_psn: 0,
                    mtu,
                    path: Path::to_gid(gid, idx, 1),
                    max_dest_rd_atomic: 4,
                    min_rnr_timer: 12,
                }))?;
                qp.to_rts(rts)?;
            }
            Ok(None)
        }
        Provider::Siw => Ok(Some(cm::connect(env, a, b)?)),
    }
}

/// Two connected RC queue pairs on one device, each with its CQ and region.
pub struct Pair {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub cq_a: CompletionQueue,
    pub cq_b: CompletionQueue,
    pub qp_a: QueuePair,
    pub qp_b: QueuePair,
    pub mr_a: MemoryRegion,
    pub mr_b: MemoryRegion,
    pub _cm: Option<cm::Connection>,
}

impl Pair {
    pub fn new(env: &TestEnv, extended: bool, caps: QpCaps) -> R<Pair> {
        let ops = if extended {
            SendOps::SEND | SendOps::RDMA_WRITE | SendOps::RDMA_READ
        } else {
            SendOps::empty()
        };
        Self::with_ops(env, ops, caps)
    }

    /// A pair whose QPs are extended with `ops` (classic where empty).
    pub fn with_ops(env: &TestEnv, ops: SendOps, caps: QpCaps) -> R<Pair> {
        let extended = !ops.is_empty();
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq_a = CompletionQueue::builder(&ctx)
            .cqe(64)
            .extended(extended)
            .build()?;
        let cq_b = CompletionQueue::builder(&ctx)
            .cqe(64)
            .extended(extended)
            .build()?;
        let qp_a = QueuePair::builder(&pd, QpType::Rc, &cq_a)
            .caps(caps)
            .send_ops(ops)
            .build()?;
        let qp_b = QueuePair::builder(&pd, QpType::Rc, &cq_b)
            .caps(caps)
            .send_ops(ops)
            .build()?;
        let mr_a = MemoryRegion::new(&pd, 16384, ACCESS)?;
        let mr_b = MemoryRegion::new(&pd, 16384, ACCESS)?;
        let cm = connect_rc(env, &ctx, &qp_a, &qp_b)?;
        Ok(Pair {
            ctx,
            pd,
            cq_a,
            cq_b,
            qp_a,
            qp_b,
            mr_a,
            mr_b,
            _cm: cm,
        })
    }
}

/// rdma_cm connection of two safe QPs (iWARP): the CM ids carry no QP; the
/// QPs are moved to INIT with `rdma_init_qp_attr` and named by number in the
/// connection parameters; the kernel's iWARP CM moves them to RTS.
pub mod cm {
    use super::*;
    use rdmacm_sys as cm;

    /// The CM ids and channels of a connection; destroyed on drop.
    pub struct Connection {
        ids: Vec<*mut cm::rdma_cm_id>,
        channels: Vec<*mut cm::rdma_event_channel>,
    }

    impl Drop for Connection {
        fn drop(&mut self) {
            for id in self.ids.drain(..).rev() {
                // SAFETY: ids created by this module, destroyed once; their
                // events were all acknowledged.
                unsafe { cm::rdma_destroy_id(id) };
            }
            for ch in self.channels.drain(..) {
                // SAFETY: channels created here, after their ids are gone.
                unsafe { cm::rdma_destroy_event_channel(ch) };
            }
        }
    }

    fn rc(r: c_int, verb: &str) -> R<()> {
        if r != 0 {
            fail!("{verb} failed: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn event(
        ch: *mut cm::rdma_event_channel,
        want: cm::rdma_cm_event_type,
    ) -> R<*mut cm::rdma_cm_id> {
        // SAFETY: a live channel.
        let mut pfd = libc::pollfd {
            fd: unsafe { (*ch).fd },
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 10_000) } <= 0 {
            fail!("no CM event {want} within 10 s");
        }
        let mut ev = ptr::null_mut();
        // SAFETY: readable channel, writable out-parameter.
        rc(
            unsafe { cm::rdma_get_cm_event(ch, &mut ev) },
            "rdma_get_cm_event",
        )?;
        // SAFETY: a live event until acked.
        let (kind, id) = unsafe { ((*ev).event, (*ev).id) };
        // SAFETY: acked once, fields copied.
        unsafe { cm::rdma_ack_cm_event(ev) };
        check!(kind == want, "CM event {kind}, expected {want}");
        Ok(id)
    }

    fn init_qp(id: *mut cm::rdma_cm_id, qp: &QueuePair) -> R<()> {
        // SAFETY: plain data.
        let mut attr: rdma::sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = rdma::sys::IBV_QPS_INIT;
        let mut mask = 0;
        // SAFETY: a resolved id; the out-parameters are writable.
        rc(
            unsafe { cm::rdma_init_qp_attr(id, &mut attr, &mut mask) },
            "rdma_init_qp_attr",
        )?;
        attr.qp_access_flags |= ACCESS.bits();
        // SAFETY: the CM's own attributes for this step, with the access
        // rights of the test's regions; the QP is the test's, connected on
        // this schedule.
        unsafe { qp.modify(&mut attr, mask as u32 | rdma::sys::IBV_QP_ACCESS_FLAGS)? };
        Ok(())
    }

    fn param(qp: &QueuePair) -> cm::rdma_conn_param {
        // SAFETY: plain data.
        let mut p: cm::rdma_conn_param = unsafe { std::mem::zeroed() };
        p.responder_resources = 4;
        p.initiator_depth = 4;
        p.retry_count = 7;
        p.rnr_retry_count = 7;
        p.qp_num = qp.qp_num();
        p
    }

    pub fn connect(env: &TestEnv, a: &QueuePair, b: &QueuePair) -> R<Connection> {
        let mut conn = Connection {
            ids: Vec::new(),
            channels: Vec::new(),
        };
        for _ in 0..2 {
            // SAFETY: no arguments.
            let ch = unsafe { cm::rdma_create_event_channel() };
            check!(!ch.is_null(), "rdma_create_event_channel failed");
            conn.channels.push(ch);
        }
        let (ch_s, ch_c) = (conn.channels[0], conn.channels[1]);
        let mut listen = ptr::null_mut();
        // SAFETY: a live channel.
        rc(
            unsafe { cm::rdma_create_id(ch_s, &mut listen, ptr::null_mut(), cm::RDMA_PS_TCP) },
            "rdma_create_id",
        )?;
        conn.ids.push(listen);
        // SAFETY: plain data.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from(env.ipv4).to_be();
        // SAFETY: a valid sockaddr_in.
        rc(
            unsafe { cm::rdma_bind_addr(listen, (&mut sa as *mut libc::sockaddr_in).cast()) },
            "rdma_bind_addr",
        )?;
        // SAFETY: a bound id.
        rc(unsafe { cm::rdma_listen(listen, 1) }, "rdma_listen")?;
        // SAFETY: a bound id.
        sa.sin_port = unsafe { cm::rdma_get_src_port(listen) };

        let mut cid = ptr::null_mut();
        // SAFETY: a live channel.
        rc(
            unsafe { cm::rdma_create_id(ch_c, &mut cid, ptr::null_mut(), cm::RDMA_PS_TCP) },
            "rdma_create_id",
        )?;
        conn.ids.push(cid);
        // SAFETY: a valid destination.
        rc(
            unsafe {
                cm::rdma_resolve_addr(
                    cid,
                    ptr::null_mut(),
                    (&mut sa as *mut libc::sockaddr_in).cast(),
                    2000,
                )
            },
            "rdma_resolve_addr",
        )?;
        event(ch_c, cm::RDMA_CM_EVENT_ADDR_RESOLVED)?;
        // SAFETY: address resolved.
        rc(
            unsafe { cm::rdma_resolve_route(cid, 2000) },
            "rdma_resolve_route",
        )?;
        event(ch_c, cm::RDMA_CM_EVENT_ROUTE_RESOLVED)?;
        init_qp(cid, a)?;
        let mut p = param(a);
        // SAFETY: route resolved; `p` names a QP in INIT.
        rc(unsafe { cm::rdma_connect(cid, &mut p) }, "rdma_connect")?;
        let sid = event(ch_s, cm::RDMA_CM_EVENT_CONNECT_REQUEST)?;
        conn.ids.push(sid);
        init_qp(sid, b)?;
        let mut p = param(b);
        // SAFETY: a connect-request id; `p` names a QP in INIT.
        rc(unsafe { cm::rdma_accept(sid, &mut p) }, "rdma_accept")?;
        event(ch_c, cm::RDMA_CM_EVENT_ESTABLISHED)?;
        event(ch_s, cm::RDMA_CM_EVENT_ESTABLISHED)?;
        Ok(conn)
    }
}

/// Sends `msg` from `a` (whose send CQ is `cq_a`) to `b` (receives into
/// `recv` of `mr_b`, completions on `cq_b`), and checks that it arrived.
pub(crate) fn send_one(
    a: (&QueuePair, &CompletionQueue, &MemoryRegion),
    b: (&QueuePair, &CompletionQueue, &MemoryRegion),
    msg: &[u8],
) -> R<()> {
    let (qa, cqa, mra) = a;
    let (qb, cqb, mrb) = b;
    let rs = [mrb.sge(0..1024)?];
    qb.post_recv(&mut [RecvWr::new(7, &rs)])?;
    mra.write(0, msg)?;
    let ss = [mra.sge(0..msg.len())?];
    qa.post_send(&mut [SendWr::send(8, &ss).signaled()])?;
    wait(cqa, 1)?;
    let wcs = wait(cqb, 1)?;
    check!(
        wcs[0].opcode() == WcOpcode::Recv && wcs[0].byte_len() as usize == msg.len(),
        "{wcs:?}"
    );
    check!(mrb.to_vec(0..msg.len())? == msg, "the message differs");
    Ok(())
}

/// Whether queue sizes `q` are each at least those of `granted`: a query
/// reports the queues the provider has, which may be larger than what
/// creation granted (rxe: the full ring, 63 for 32; siw: inline data
/// rounded up to 80 bytes).
pub(crate) fn at_least(q: QpCaps, granted: QpCaps) -> bool {
    q.max_send_wr >= granted.max_send_wr
        && q.max_recv_wr >= granted.max_recv_wr
        && q.max_send_sge >= granted.max_send_sge
        && q.max_recv_sge >= granted.max_recv_sge
        && q.max_inline_data >= granted.max_inline_data
}

/// Checks that `r` failed with `errno` from `verb`, its hint containing
/// `hint`.
pub(crate) fn refused<T: std::fmt::Debug>(
    r: rdma::Result<T>,
    verb: &str,
    errno: i32,
    hint: &str,
) -> R<rdma::Error> {
    match r {
        Ok(v) => fail!("{verb}: accepted ({v:?}), expected errno {errno}"),
        Err(e) => {
            check!(
                e.verb() == verb && e.errno() == errno,
                "expected {verb} errno {errno}, got {e}"
            );
            check!(
                e.hint().unwrap_or("").contains(hint),
                "hint of {e} lacks {hint:?}"
            );
            Ok(e)
        }
    }
}

pub(crate) const T: std::time::Duration = std::time::Duration::from_secs(10);

/// The one completion of a request on `qp`'s CQ `cq`, success or not.
pub(crate) fn completion(cq: &rdma::CompletionQueue) -> R<WorkCompletion> {
    Ok(cq.wait_one(T)?)
}

/// Checks that `wc` failed with `status`, naming `what`.
pub(crate) fn failed_with(wc: &WorkCompletion, status: WcStatus, what: &str) -> R<()> {
    check!(
        wc.status() == status,
        "{what}: {:?}, expected {status:?} ({wc:?})",
        wc.status()
    );
    Ok(())
}

/// An RDMA WRITE of 8 bytes of `p.mr_a` to `remote` from `p.qp_a`, and its
/// completion.
pub(crate) fn write_to(p: &Pair, remote: RemoteMemory, wr_id: u64) -> R<WorkCompletion> {
    let s = [p.mr_a.sge(0..8)?];
    p.qp_a
        .post_send(&mut [SendWr::rdma_write(wr_id, &s, remote).signaled()])?;
    completion(&p.cq_a)
}

pub(crate) fn atomic(p: &Pair, remote: RemoteMemory, compare: u64, swap: u64) -> R<WorkCompletion> {
    let res = [p.mr_a.sge(64..72)?];
    p.qp_a
        .post_send(&mut [SendWr::atomic_cmp_swp(9, &res, remote, compare, swap).signaled()])?;
    completion(&p.cq_a)
}
