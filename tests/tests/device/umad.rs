//! uMAD and MAD device tests (rxe; siw has no MADs).
//!
//! On rxe (RoCE) only the GSI exists, every MAD carries a GRH, and responses
//! are matched only between IPv6 GIDs: the tests address the node's own
//! fd00:1::1 GID, so requester and responder are two ports (two fds) of the
//! same device.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma::mad::{
    InvalidField, Mad, MadHeader, Method, Oui, PhysPortState, PortState, RmppFlags, RmppHeader,
    RmppType, VendorHeader,
};
use rdma::umad::{self, Address, AsyncPort, Error, Port, Registration};
use rdma::Gid;
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

rdma_tests::tests!(
    "umad":
    discovery_lists_the_ca_and_its_port,
    get_is_answered_by_get_resp,
    get_to_an_unserved_class_is_answered_by_the_kernel,
    request_to_nobody_times_out_with_its_tid,
    duplicate_outstanding_tid_is_refused,
    mad_without_grh_on_roce_is_refused,
    smi_registration_is_refused,
    cm_class_belongs_to_the_kernel,
    hundred_async_requests_are_matched,
    umad_info_example_lists_the_port,
    madping_example_pings_its_server,
    agent_dropped_with_requests_outstanding_leaves_the_port_usable,
    rmpp_transfer_past_the_largest_read_is_dropped_and_the_port_serves_on,
);

const SIW_SKIP: &str = "siw has no MADs: iWARP devices have no umad port";
/// A vendor class of range 2 that the tests serve.
const CLASS: u8 = 0x32;
/// A vendor class of range 2 that nobody serves.
const UNSERVED_CLASS: u8 = 0x3a;

/// The device's umad port 1, and the GSI address of this node's IPv6 GID.
struct Rxe {
    ca: String,
    addr: Address,
}

fn rxe(env: &TestEnv) -> Result<Option<Rxe>, Box<dyn std::error::Error>> {
    if env.provider == Provider::Siw {
        return Ok(None);
    }
    let gid = Gid::from(env.ipv6);
    let Some(index) = umad::gid_index(&env.device, 1, gid)? else {
        fail!("{} has no GID {} on port 1", env.device, env.ipv6);
    };
    Ok(Some(Rxe {
        ca: env.device.clone(),
        addr: Address::gsi(gid, index),
    }))
}

fn skip() -> TestResult {
    Ok(Outcome::Skipped(SIW_SKIP.into()))
}

/// A vendor Get of `class` with the OpenIB OUI and `payload` in the data.
fn vendor_get(class: u8, tid: u64, payload: &[u8]) -> Result<Mad, Box<dyn std::error::Error>> {
    vendor_request(class, Method::GET, tid, payload)
}

/// A request that no one answers when no agent serves `class`: the kernel
/// answers unserved Get and Set itself, but not GetTable.
fn unanswered(class: u8, tid: u64, payload: &[u8]) -> Result<Mad, Box<dyn std::error::Error>> {
    vendor_request(class, Method::GET_TABLE, tid, payload)
}

fn vendor_request(
    class: u8,
    method: Method,
    tid: u64,
    payload: &[u8],
) -> Result<Mad, Box<dyn std::error::Error>> {
    let mut m = Mad::new(&MadHeader::request(class, 1, method, tid, 0));
    m.set_vendor_header(&VendorHeader::new(Oui::OPENIB))?;
    let n = payload.len().min(m.data().len());
    m.data_mut()[..n].copy_from_slice(&payload[..n]);
    Ok(m)
}

fn reg(class: u8) -> Registration {
    Registration::new(class, 1).oui(Oui::OPENIB)
}

fn discovery_lists_the_ca_and_its_port(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else {
        // The reason to skip holds: siw has no umad device.
        let names = umad::ca_names()?;
        check!(
            !names.contains(&env.device),
            "{} has a umad device: {names:?}",
            env.device
        );
        return skip();
    };
    let names = umad::ca_names()?;
    check!(names.contains(&r.ca), "{} not in {names:?}", r.ca);
    let ca = umad::Ca::get(&r.ca)?;
    let Some(port) = ca.port(1) else {
        fail!("{} has no port 1: {:?}", r.ca, ca.ports);
    };
    check!(port.is_ethernet(), "link layer {:?}", port.link_layer);
    check!(port.state == PortState::Active, "port state {}", port.state);
    check!(
        port.phys_state == PhysPortState::LinkUp,
        "phys state {}",
        port.phys_state
    );
    check!(
        port.base_lid == 0,
        "RoCE has no LIDs, got {}",
        port.base_lid
    );
    check!(ca.node_guid != 0, "node GUID 0");
    Ok(Outcome::Passed)
}

fn get_is_answered_by_get_resp(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let server_port = Port::open(&r.ca, 1)?;
    let server = server_port.register(&reg(CLASS).method(Method::GET))?;
    let client_port = Port::open(&r.ca, 1)?;
    let client = client_port.register(&reg(CLASS))?;

    let tid = client.next_tid();
    let req = vendor_get(CLASS, tid, b"ping from rust")?;
    let served = std::thread::scope(|s| {
        let h = s.spawn(|| -> Result<Vec<u8>, Error> {
            let got = server.recv(Some(Duration::from_secs(5)))?;
            let mut resp = got.mad.response();
            resp.data_mut()[..4].copy_from_slice(b"pong");
            server.respond(&got, &resp)?;
            Ok(got.mad.data()[..14].to_vec())
        });
        let reply = client.request(&req, &r.addr, Duration::from_millis(1000), 2);
        (reply, h.join())
    });
    let (reply, server_side) = served;
    let reply = reply?;
    let seen = match server_side {
        Ok(r) => r?,
        Err(_) => fail!("server thread panicked"),
    };
    check!(seen == b"ping from rust", "server saw {seen:?}");
    let h = reply.mad.header();
    check!(h.method == Method::GET_RESP, "method {:?}", h.method);
    check!(h.tid as u32 == tid as u32, "TID {:#x} for {tid:#x}", h.tid);
    check!(h.status.is_ok(), "status {}", h.status);
    check!(reply.mad.vendor_header()?.oui == Oui::OPENIB);
    check!(&reply.mad.data()[..4] == b"pong");
    let grh = reply.addr.grh;
    check!(
        grh.is_some_and(|g| g.gid == Gid::from(env.ipv6)),
        "reply from {grh:?}"
    );
    Ok(Outcome::Passed)
}

fn get_to_an_unserved_class_is_answered_by_the_kernel(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let port = Port::open(&r.ca, 1)?;
    let agent = port.register(&reg(UNSERVED_CLASS))?;
    let tid = agent.next_tid();
    let reply = agent.request(
        &vendor_get(UNSERVED_CLASS, tid, b"anyone?")?,
        &r.addr,
        Duration::from_millis(500),
        1,
    )?;
    let h = reply.mad.header();
    check!(h.method == Method::GET_RESP, "method {:?}", h.method);
    check!(h.tid as u32 == tid as u32);
    check!(
        h.status.invalid_field() == InvalidField::MethodAttributeNotSupported,
        "status {:?}",
        h.status
    );
    Ok(Outcome::Passed)
}

fn request_to_nobody_times_out_with_its_tid(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let port = Port::open(&r.ca, 1)?;
    let agent = port.register(&reg(UNSERVED_CLASS))?;
    let tid = agent.next_tid();
    let start = Instant::now();
    let res = agent.request(
        &unanswered(UNSERVED_CLASS, tid, b"anyone?")?,
        &r.addr,
        Duration::from_millis(200),
        1,
    );
    let took = start.elapsed();
    match res {
        Err(Error::Timeout { tid: got }) => {
            check!(
                got as u32 == tid as u32,
                "timeout TID {got:#x}, sent {tid:#x}"
            );
        }
        other => fail!("expected a timeout, got {other:?}"),
    }
    check!(
        took >= Duration::from_millis(350) && took < Duration::from_secs(5),
        "timed out after {took:?} (200 ms x 2 tries)"
    );
    Ok(Outcome::Passed)
}

fn agent_dropped_with_requests_outstanding_leaves_the_port_usable(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let port = Port::open(&r.ca, 1)?;
    let old = port.register(&reg(UNSERVED_CLASS))?;
    for _ in 0..3 {
        let tid = old.next_tid();
        old.send_request(
            &unanswered(UNSERVED_CLASS, tid, b"abandoned")?,
            &r.addr,
            Duration::from_secs(2),
            3,
        )?;
    }
    // Unregistering cancels the agent's outstanding requests.
    drop(old);
    let agent = port.register(&reg(UNSERVED_CLASS))?;
    let tid = agent.next_tid();
    let start = Instant::now();
    match agent.request(
        &unanswered(UNSERVED_CLASS, tid, b"fresh")?,
        &r.addr,
        Duration::from_millis(200),
        0,
    ) {
        Err(Error::Timeout { tid: got }) => check!(
            got as u32 == tid as u32,
            "timeout TID {got:#x}, sent {tid:#x}"
        ),
        other => fail!("expected this agent's own timeout, got {other:?}"),
    }
    check!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    // No notice of the dropped agent's requests reaches the new one.
    match agent.recv(Some(Duration::from_millis(300))) {
        Err(_) => {}
        Ok(m) => fail!("a MAD of the dropped agent arrived: TID {:#x}", m.tid()),
    }
    Ok(Outcome::Passed)
}

fn duplicate_outstanding_tid_is_refused(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let port = Port::open(&r.ca, 1)?;
    let agent = port.register(&reg(UNSERVED_CLASS))?;
    let tid = agent.next_tid();
    let mad = unanswered(UNSERVED_CLASS, tid, b"first")?;
    let t = Duration::from_millis(300);
    agent.send_request(&mad, &r.addr, t, 0)?;
    match agent.send_request(&mad, &r.addr, t, 0) {
        Err(Error::DuplicateTid { tid: got }) => check!(got == tid),
        other => fail!("a second request with TID {tid:#x} was not refused: {other:?}"),
    }
    // Another TID is fine meanwhile, and the first one times out as usual.
    let other = agent.next_tid();
    agent.send_request(
        &unanswered(UNSERVED_CLASS, other, b"second")?,
        &r.addr,
        t,
        0,
    )?;
    let mut timed_out = Vec::new();
    while timed_out.len() < 2 {
        let got = agent.recv(Some(Duration::from_secs(3)))?;
        check!(
            got.is_timeout(),
            "expected timeout notices, got status {}",
            got.status
        );
        timed_out.push(got.tid() as u32);
    }
    timed_out.sort();
    let mut want = vec![tid as u32, other as u32];
    want.sort();
    check!(
        timed_out == want,
        "timeouts for {timed_out:x?}, sent {want:x?}"
    );
    // Once it has timed out, the TID may be used again.
    agent.send_request(&mad, &r.addr, t, 0)?;
    Ok(Outcome::Passed)
}

fn mad_without_grh_on_roce_is_refused(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let port = Port::open(&r.ca, 1)?;
    check!(port.is_ethernet());
    let agent = port.register(&reg(CLASS))?;
    let mad = vendor_get(CLASS, agent.next_tid(), b"no grh")?;
    match agent.send(&mad, &Address::gsi_lid(1)) {
        Err(Error::GrhRequired) => {}
        other => fail!("expected GrhRequired, got {other:?}"),
    }
    // The kernel refuses it too: write the MAD by hand, without a GRH.
    let mut buf = vec![0u8; 64];
    buf[0..4].copy_from_slice(&agent.id().to_ne_bytes());
    buf[20..24].copy_from_slice(&1u32.to_be_bytes()); // QP1
    buf[24..28].copy_from_slice(&umad::GSI_QKEY.to_be_bytes());
    buf[28..30].copy_from_slice(&1u16.to_be_bytes()); // LID 1
    buf.extend_from_slice(mad.as_bytes());
    use std::os::fd::AsRawFd;
    // SAFETY: the port's fd is open and `buf` is readable for its length.
    let n = unsafe { libc::write(port.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    let errno = std::io::Error::last_os_error().raw_os_error();
    check!(n < 0, "the kernel accepted a MAD without GRH on RoCE");
    check!(
        errno == Some(libc::EINVAL),
        "errno {errno:?}, expected EINVAL"
    );
    Ok(Outcome::Passed)
}

fn smi_registration_is_refused(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let port = Port::open(&r.ca, 1)?;
    for class in [0x01u8, 0x81] {
        match port.register(&Registration::new(class, 1).method(Method::GET)) {
            Err(e @ Error::ClassRefused { .. }) => {
                check!(e.errno() == libc::EPROTONOSUPPORT, "class {class:#x}: {e}");
            }
            other => fail!("SMI class {class:#x} was not refused: {other:?}"),
        }
    }
    // The GSI classes still register on the same port.
    port.register(&Registration::new(rdma::mad::class::PERF_MGT, 1))?;
    Ok(Outcome::Passed)
}

fn cm_class_belongs_to_the_kernel(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let port = Port::open(&r.ca, 1)?;
    // ib_cm registers the CM class's Send method on every port.
    match port.register(&Registration::new(rdma::mad::class::CM, 2).method(Method::SEND)) {
        Err(e @ Error::ClassRefused { .. }) => {
            check!(e.errno() == libc::EINVAL, "{e}");
        }
        other => fail!("the CM class's Send method was given to userspace: {other:?}"),
    }
    Ok(Outcome::Passed)
}

fn hundred_async_requests_are_matched(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(hundred_requests(r))
}

async fn hundred_requests(r: Rxe) -> TestResult {
    {
        let server_port = AsyncPort::new(Port::open(&r.ca, 1)?)?;
        let server = server_port.register(&reg(CLASS).method(Method::GET))?;
        let client_port = AsyncPort::new(Port::open(&r.ca, 1)?)?;
        let client = Arc::new(client_port.register(&reg(CLASS))?);

        let serving = tokio::spawn(async move {
            let mut served = 0u32;
            while let Some(req) = server.next_request().await {
                let mut resp = req.mad.response();
                resp.data_mut()[..8].copy_from_slice(&req.mad.data()[..8]);
                server.respond(&req, &resp)?;
                served += 1;
                if served == 100 {
                    break;
                }
            }
            Ok::<u32, Error>(served)
        });

        let mut tasks = Vec::new();
        for i in 0..100u64 {
            let client = client.clone();
            let addr = r.addr;
            tasks.push(tokio::spawn(async move {
                let tid = client.agent().next_tid();
                let mad = vendor_get(CLASS, tid, &i.to_be_bytes()).map_err(|e| e.to_string())?;
                let resp = client
                    .request(&mad, &addr, Duration::from_millis(2000), 2)
                    .await
                    .map_err(|e| format!("request {i}: {e}"))?;
                let echoed =
                    u64::from_be_bytes(resp.mad.data()[..8].try_into().unwrap_or_default());
                if resp.tid() as u32 != tid as u32 || echoed != i {
                    return Err(format!(
                        "request {i} (TID {tid:#x}) got TID {:#x} with payload {echoed}",
                        resp.tid()
                    ));
                }
                Ok::<(), String>(())
            }));
        }
        let mut failures = Vec::new();
        for t in tasks {
            match tokio::time::timeout(Duration::from_secs(30), t).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => failures.push(e),
                Ok(Err(e)) => failures.push(format!("task: {e}")),
                Err(_) => failures.push("a request task hung".into()),
            }
        }
        check!(
            failures.is_empty(),
            "{} failed: {:?}",
            failures.len(),
            failures
        );
        match tokio::time::timeout(Duration::from_secs(5), serving).await {
            Ok(Ok(Ok(100))) => {}
            other => fail!("server: {other:?}"),
        }
        Ok(Outcome::Passed)
    }
}

/// Waits for `child` up to `limit`, killing it past that; its stdout.
fn finish(mut child: Child, limit: Duration) -> Result<(bool, String), Box<dyn std::error::Error>> {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output()?;
            fail!(
                "{limit:?} passed, killed; output:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok((out.status.success(), text))
}

fn umad_info_example_lists_the_port(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let child = Command::new(rdma_tests::example("umad_info")?)
        .arg(&r.ca)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (ok, out) = finish(child, Duration::from_secs(20))?;
    check!(ok, "umad_info failed:\n{out}");
    for want in [
        format!("CA '{}'", r.ca),
        "Port 1:".to_string(),
        "State: Active".to_string(),
        "Link layer: Ethernet".to_string(),
    ] {
        check!(out.contains(&want), "no {want:?} in\n{out}");
    }
    Ok(Outcome::Passed)
}

fn madping_example_pings_its_server(env: &TestEnv) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let bin = rdma_tests::example("madping")?;
    let mut server = Command::new(&bin)
        .args(["-S", "-d", &r.ca, "-c", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // The server prints its banner once its agent is registered.
    let Some(stdout) = server.stdout.take() else {
        fail!("no server stdout");
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next();
        let _ = tx.send(first.map(|l| l.unwrap_or_default()));
        for _ in lines {}
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Some(line)) if line.starts_with("madping server") => {}
        other => {
            let _ = server.kill();
            let _ = server.wait();
            fail!("the server did not start: {other:?}");
        }
    }
    let client = Command::new(&bin)
        .args([
            "-d",
            &r.ca,
            "-G",
            &env.ipv6.to_string(),
            "-c",
            "3",
            "-t",
            "1000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let client = finish(client, Duration::from_secs(20));
    let server = finish(server, Duration::from_secs(5));
    let (ok, out) = client?;
    check!(ok, "madping failed:\n{out}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")?;
    check!(
        out.matches(&format!("Pong from {} ({})", host.trim(), env.ipv6))
            .count()
            == 3,
        "three pongs from {} expected:\n{out}",
        host.trim()
    );
    check!(
        out.contains("3 packets transmitted, 3 received, 0% packet loss"),
        "{out}"
    );
    check!(out.contains("rtt min/avg/max"), "{out}");
    let (server_ok, server_out) = server?;
    check!(server_ok, "the server failed:\n{server_out}");
    Ok(Outcome::Passed)
}

/// A vendor Set of `len` bytes as one RMPP transfer (the kernel segments
/// it): RMPP version 1, an Active DATA segment whose PayloadLength is left
/// for the kernel to fill in.
fn rmpp_set(tid: u64, len: usize) -> Result<Mad, Box<dyn std::error::Error>> {
    let mut m = vendor_request(CLASS, Method::SET, tid, b"")?
        .as_bytes()
        .to_vec();
    m.resize(len, 0x5a);
    let h = RmppHeader {
        version: 1,
        rmpp_type: RmppType::Data,
        resp_time: 0x1f,
        flags: RmppFlags::ACTIVE,
        ..RmppHeader::default()
    };
    h.encode_into(&mut m[RmppHeader::OFFSET..])?;
    Ok(Mad::decode(&m)?)
}

/// The largest read a umad port makes, the umad header included.
const MAX_READ: usize = 64 << 20;

/// An RMPP transfer just over the largest read a port makes reaches the
/// port (the kernel reassembles it and acknowledges every segment), is
/// dropped and counted, the receive waiting for it gets `MadTooLong`, and
/// a MAD sent right after it arrives: the receive queue is not wedged.
///
/// The kernel drops a transfer that takes over 40 s to arrive; a transfer
/// of 1 MiB first measures the rate, and the test is skipped, with it, when
/// the long one could not arrive in time (as under emulation).
fn rmpp_transfer_past_the_largest_read_is_dropped_and_the_port_serves_on(
    env: &TestEnv,
) -> TestResult {
    let Some(r) = rxe(env)? else { return skip() };
    let server_port = Port::open(&r.ca, 1)?;
    let server = server_port.register(&reg(CLASS).method(Method::SET).rmpp(1))?;
    let client_port = Port::open(&r.ca, 1)?;
    let client = client_port.register(&reg(CLASS).rmpp(1))?;

    // A transfer that fits: received whole, and timed.
    let small = 1 << 20;
    let start = Instant::now();
    let tid = client.next_tid();
    client.send(&rmpp_set(tid, small)?, &r.addr)?;
    let got = server.recv(Some(Duration::from_secs(60)))?;
    let took = start.elapsed();
    check!(got.tid() as u32 == tid as u32, "TID {:#x}", got.tid());
    check!(
        got.len == small,
        "{} bytes of a {small}-byte transfer",
        got.len
    );
    check!(got.mad.as_bytes()[small - 1] == 0x5a);
    let rate = small as f64 / took.as_secs_f64();
    let long = MAX_READ + 4096;
    let expected = Duration::from_secs_f64(long as f64 / rate);
    if expected > Duration::from_secs(30) {
        return Ok(Outcome::Skipped(format!(
            "RMPP moves {:.2} MB/s here ({small} bytes in {took:?}): {long} bytes would take \
             {expected:?}, past the 40 s the kernel gives a transfer",
            rate / 1e6
        )));
    }

    let tid = client.next_tid();
    let start = Instant::now();
    client.send(&rmpp_set(tid, long)?, &r.addr)?;
    let got = server.recv(Some(Duration::from_secs(60)));
    let took = start.elapsed();
    match got {
        Err(Error::MadTooLong { len, .. }) => check!(len == long, "MadTooLong of {len} bytes"),
        other => fail!("a {long}-byte transfer gave {other:?} after {took:?}"),
    }
    check!(
        server_port.too_long_mads() == 1,
        "{} dropped",
        server_port.too_long_mads()
    );
    let tid = client.next_tid();
    client.send(&vendor_request(CLASS, Method::SET, tid, b"after")?, &r.addr)?;
    let got = server.recv(Some(Duration::from_secs(10)))?;
    check!(got.tid() as u32 == tid as u32, "TID {:#x} after", got.tid());
    check!(&got.mad.data()[..5] == b"after");
    eprintln!("umad: a {long}-byte RMPP transfer arrived and was dropped in {took:?}");
    Ok(Outcome::Passed)
}
