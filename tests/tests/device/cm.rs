//! An RC connection through the RDMA connection manager (rdmacm-sys), client
//! and server in one process on the device's IPv4 address. This is how iWARP
//! connects; it runs on RoCE too.

use std::ffi::{c_int, CStr};

use std::net::Ipv4Addr;
use std::ptr;

use rdma_tests::sys::{create_cq, fast_matches_shim, non_null, ok, reg_mr, Buf, Endpoint, Result};
use rdma_tests::{fail, Defer, Outcome, TestEnv, TestResult};
use rdmacm_sys::*;

/// How long a CM step may take before the test fails (ms).
const CM_TIMEOUT_MS: c_int = 10_000;

/// An IPv4 socket address.
fn sockaddr_v4(ip: Ipv4Addr, port: u16) -> sockaddr_in {
    // SAFETY: plain data; zero is a valid sockaddr_in.
    let mut sa: sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as sa_family_t;
    sa.sin_port = port.to_be();
    sa.sin_addr = in_addr {
        s_addr: u32::from(ip).to_be(),
    };
    sa
}

fn create_channel(defer: &mut Defer) -> Result<*mut rdma_event_channel> {
    // SAFETY: no arguments; NULL on failure.
    let ch = non_null(
        unsafe { rdma_create_event_channel() },
        "rdma_create_event_channel",
    )?;
    // SAFETY: destroyed once, after every id on it.
    defer.push("rdma_destroy_event_channel", move || {
        unsafe { rdma_destroy_event_channel(ch) };
        0
    });
    Ok(ch)
}

fn create_id(ch: *mut rdma_event_channel, defer: &mut Defer) -> Result<*mut rdma_cm_id> {
    let mut id = ptr::null_mut();
    // SAFETY: `ch` is live; `id` is writable.
    ok(
        unsafe { rdma_create_id(ch, &mut id, ptr::null_mut(), RDMA_PS_TCP) },
        "rdma_create_id",
    )?;
    // SAFETY: destroyed once, after its QP.
    defer.push("rdma_destroy_id", move || unsafe { rdma_destroy_id(id) });
    Ok(id)
}

/// Waits (bounded) for the next event on `ch`, checks its type, acks it and
/// returns the id it names.
fn expect_event(ch: *mut rdma_event_channel, want: rdma_cm_event_type) -> Result<*mut rdma_cm_id> {
    // SAFETY: `ch` is live; its fd is open.
    let mut pfd = libc::pollfd {
        fd: unsafe { (*ch).fd },
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, CM_TIMEOUT_MS) };
    if n <= 0 {
        // SAFETY: rdma_event_str returns a static string for any value.
        let w = unsafe { CStr::from_ptr(rdma_event_str(want)) };
        fail!(
            "no CM event within {CM_TIMEOUT_MS} ms (waiting for {})",
            w.to_string_lossy()
        );
    }
    let mut ev = ptr::null_mut();
    // SAFETY: the fd is readable, so this does not block; `ev` is writable.
    ok(
        unsafe { rdma_get_cm_event(ch, &mut ev) },
        "rdma_get_cm_event",
    )?;
    // SAFETY: `ev` is a live event until acked.
    let (kind, status, id) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
    // SAFETY: acked once; the fields were copied out above.
    ok(unsafe { rdma_ack_cm_event(ev) }, "rdma_ack_cm_event")?;
    if kind != want {
        // SAFETY: static strings.
        let (k, w) = unsafe {
            (
                CStr::from_ptr(rdma_event_str(kind)),
                CStr::from_ptr(rdma_event_str(want)),
            )
        };
        fail!(
            "CM event {} (status {status}), expected {}",
            k.to_string_lossy(),
            w.to_string_lossy()
        );
    }
    Ok(id)
}

/// Creates a PD, a CQ and an RC QP on the id's device.
fn create_qp(
    id: *mut rdma_cm_id,
    buf: &Buf,
    defer: &mut Defer,
) -> Result<(*mut ibv_qp, *mut ibv_cq, *mut ibv_mr)> {
    // SAFETY: the id is bound to a device after address resolution or a
    // connect request, so `verbs` is an open context.
    let ctx = unsafe { (*id).verbs };
    let pd = rdma_tests::sys::alloc_pd(ctx, defer)?;
    let cq = create_cq(ctx, 32, defer)?;
    let mr = reg_mr(pd, buf, defer)?;
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
    // SAFETY: `id`, `pd` are live; `attr` is complete.
    ok(
        unsafe { rdma_create_qp(id, pd, &mut attr) },
        "rdma_create_qp",
    )?;
    // SAFETY: destroyed once, before the id, CQ and PD.
    defer.push("rdma_destroy_qp", move || {
        unsafe { rdma_destroy_qp(id) };
        0
    });
    // SAFETY: rdma_create_qp stored the QP in the id.
    Ok((unsafe { (*id).qp }, cq, mr))
}

fn conn_param() -> rdma_conn_param {
    // SAFETY: plain data.
    let mut p: rdma_conn_param = unsafe { std::mem::zeroed() };
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    p
}

pub fn connected_send_and_write_fast_path_matches_shim(env: &TestEnv) -> TestResult {
    let (buf_c, buf_s) = (Buf::new(8192), Buf::new(8192));
    let mut defer = Defer::new();
    let (ch_s, ch_c) = (create_channel(&mut defer)?, create_channel(&mut defer)?);

    // Server: bind to the device's address on an ephemeral port and listen.
    let listen_id = create_id(ch_s, &mut defer)?;
    let mut addr = sockaddr_v4(env.ipv4, 0);
    // SAFETY: `addr` is a valid sockaddr_in, passed as a sockaddr.
    ok(
        unsafe { rdma_bind_addr(listen_id, (&mut addr as *mut sockaddr_in).cast()) },
        "rdma_bind_addr",
    )?;
    // SAFETY: a bound id.
    ok(unsafe { rdma_listen(listen_id, 4) }, "rdma_listen")?;
    // SAFETY: a bound id.
    let port = u16::from_be(unsafe { rdma_get_src_port(listen_id) });
    if port == 0 {
        fail!("listener has no port");
    }

    // Client: resolve address and route, create its QP, connect.
    let cid = create_id(ch_c, &mut defer)?;
    let mut dst = sockaddr_v4(env.ipv4, port);
    // SAFETY: `dst` is a valid sockaddr_in; NULL source means any.
    let rc = unsafe {
        rdma_resolve_addr(
            cid,
            ptr::null_mut(),
            (&mut dst as *mut sockaddr_in).cast(),
            2000,
        )
    };
    ok(rc, "rdma_resolve_addr")?;
    expect_event(ch_c, RDMA_CM_EVENT_ADDR_RESOLVED)?;
    // SAFETY: address resolved.
    ok(
        unsafe { rdma_resolve_route(cid, 2000) },
        "rdma_resolve_route",
    )?;
    expect_event(ch_c, RDMA_CM_EVENT_ROUTE_RESOLVED)?;
    let (qp_c, cq_c, mr_c) = create_qp(cid, &buf_c, &mut defer)?;
    let mut param = conn_param();
    // SAFETY: route resolved, QP created; `param` is complete.
    ok(unsafe { rdma_connect(cid, &mut param) }, "rdma_connect")?;

    // Server: the connect request names a new id; give it a QP and accept.
    let sid = expect_event(ch_s, RDMA_CM_EVENT_CONNECT_REQUEST)?;
    // SAFETY: the new id is the application's now; destroyed once.
    defer.push("rdma_destroy_id(server side)", move || unsafe {
        rdma_destroy_id(sid)
    });
    let (qp_s, cq_s, mr_s) = create_qp(sid, &buf_s, &mut defer)?;
    let mut param = conn_param();
    // SAFETY: a connect-request id with a QP.
    ok(unsafe { rdma_accept(sid, &mut param) }, "rdma_accept")?;
    expect_event(ch_c, RDMA_CM_EVENT_ESTABLISHED)?;
    expect_event(ch_s, RDMA_CM_EVENT_ESTABLISHED)?;

    let client = Endpoint {
        qp: qp_c,
        cq: cq_c,
        buf: &buf_c,
        mr: mr_c,
    };
    let server = Endpoint {
        qp: qp_s,
        cq: cq_s,
        buf: &buf_s,
        mr: mr_s,
    };
    fast_matches_shim(&client, &server)?;

    // The client disconnects; the server sees it and disconnects too, which
    // answers the client's request (an IB CM DREP), so both see DISCONNECTED.
    // SAFETY: a connected id.
    ok(unsafe { rdma_disconnect(cid) }, "rdma_disconnect(client)")?;
    expect_event(ch_s, RDMA_CM_EVENT_DISCONNECTED).map_err(|e| format!("server: {e}"))?;
    // SAFETY: the server's id, disconnected by its peer.
    ok(unsafe { rdma_disconnect(sid) }, "rdma_disconnect(server)")?;
    expect_event(ch_c, RDMA_CM_EVENT_DISCONNECTED).map_err(|e| format!("client: {e}"))?;
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "sys::cm":
    connected_send_and_write_fast_path_matches_shim,
);
