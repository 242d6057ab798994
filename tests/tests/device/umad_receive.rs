//! Receiving on a umad port: its receive queue is bounded, receives sleep
//! in the kernel until their MAD or their timeout, and an `AsyncPort` gives
//! no way to receive beside its reader task. rxe only: siw has no umad
//! device.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use rdma::mad::{Mad, MadHeader, Method, Oui, VendorHeader};
use rdma::umad::{self, Address, AsyncPort, Error, Port, Registration};
use rdma::Gid;
use rdma_tests::{check, fail, Outcome, Provider, ScratchDevice, TestEnv, TestResult};

rdma_tests::tests!(
    "umad::receive":
    a_flood_of_unsolicited_mads_is_bounded_and_responses_still_arrive,
    async_server_stream_is_bounded_under_a_flood,
    recv_sleeps_until_its_timeout_or_its_mad,
    receivers_on_one_port_each_get_their_mad_or_their_timeout,
    async_port_refuses_a_port_with_registered_agents,
    async_requests_fail_when_their_device_goes_away,
);

use crate::fixtures::R;

/// Vendor classes of range 2 that these tests serve (other tests use 0x32).
const FLOODED: u8 = 0x33;
const OTHER: u8 = 0x34;
/// A vendor class no one serves: the kernel answers its Get itself.
const UNSERVED: u8 = 0x3b;
/// How many MADs the floods send, and the bound they meet.
const FLOOD: u8 = 64;
const BOUND: usize = 8;

/// The GSI address of this node's IPv6 GID on rxe's port 1; `None` on siw.
fn rxe(env: &TestEnv) -> R<Option<Address>> {
    if env.provider == Provider::Siw {
        return Ok(None);
    }
    let gid = Gid::from(env.ipv6);
    let Some(index) = umad::gid_index(&env.device, 1, gid)? else {
        fail!("{} has no GID {} on port 1", env.device, env.ipv6);
    };
    Ok(Some(Address::gsi(gid, index)))
}

fn skip() -> TestResult {
    Ok(Outcome::Skipped(
        "siw has no MADs: iWARP devices have no umad port".into(),
    ))
}

fn reg(class: u8) -> Registration {
    Registration::new(class, 1).oui(Oui::OPENIB)
}

/// A vendor Get of `class` with `seq` in its first data byte.
fn get(class: u8, tid: u64, seq: u8) -> R<Mad> {
    let mut m = Mad::new(&MadHeader::request(class, 1, Method::GET, tid, 0));
    m.set_vendor_header(&VendorHeader::new(Oui::OPENIB))?;
    m.data_mut()[0] = seq;
    Ok(m)
}

/// Sends `FLOOD` unsolicited Gets of `class` from a port of their own.
fn flood(env: &TestEnv, class: u8, addr: &Address) -> R<()> {
    let port = Port::open(&env.device, 1)?;
    let agent = port.register(&reg(class))?;
    for seq in 0..FLOOD {
        agent.send(&get(class, agent.next_tid(), seq)?, addr)?;
    }
    // Let every MAD reach the receiving port before anything else is sent.
    std::thread::sleep(Duration::from_secs(1));
    Ok(())
}

/// Checks a kernel-answered Get of the unserved class with `tid`.
fn check_reply(reply: &umad::Received, tid: u64) -> TestResult {
    let h = reply.mad.header();
    check!(
        h.method == Method::GET_RESP && h.tid as u32 == tid as u32,
        "reply {:?} TID {:#x} to TID {tid:#x}",
        h.method,
        h.tid
    );
    Ok(Outcome::Passed)
}

/// Voluntary context switches of the calling thread so far.
fn voluntary_switches() -> i64 {
    // SAFETY: rusage is plain data, written by getrusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is writable; RUSAGE_THREAD is the calling thread.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) } != 0 {
        return i64::MAX / 2;
    }
    u.ru_nvcsw
}

fn a_flood_of_unsolicited_mads_is_bounded_and_responses_still_arrive(env: &TestEnv) -> TestResult {
    let Some(addr) = rxe(env)? else { return skip() };
    let port = Port::open(&env.device, 1)?;
    check!(port.pending_capacity() == Port::DEFAULT_PENDING_CAPACITY);
    port.set_pending_capacity(BOUND);
    let server = port.register(&reg(FLOODED).method(Method::GET))?;
    let client = port.register(&reg(UNSERVED))?;
    flood(env, FLOODED, &addr)?;
    // The client's request reads the whole flood on its way to its reply.
    let tid = client.next_tid();
    let reply = client.request(&get(UNSERVED, tid, 0)?, &addr, Duration::from_secs(1), 2)?;
    check_reply(&reply, tid)?;
    let queued = port.pending_len();
    let dropped = port.dropped_mads();
    check!(queued == BOUND, "{queued} MADs queued, bound {BOUND}");
    check!(dropped > 0, "nothing dropped of {FLOOD} MADs");
    let mut seen = Vec::new();
    while let Ok(r) = server.recv(Some(Duration::from_millis(500))) {
        seen.push(r.mad.data()[0]);
    }
    let oldest: Vec<u8> = (0..BOUND as u8).collect();
    check!(
        seen.len() >= BOUND && seen[..BOUND] == oldest[..],
        "the server got {seen:?}: the oldest {BOUND} should have been kept"
    );
    check!(
        seen.len() as u64 + dropped == u64::from(FLOOD),
        "{} received and {dropped} dropped of {FLOOD}",
        seen.len()
    );
    Ok(Outcome::Passed)
}

fn async_server_stream_is_bounded_under_a_flood(env: &TestEnv) -> TestResult {
    let Some(addr) = rxe(env)? else { return skip() };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let port = Port::open(&env.device, 1)?;
        port.set_pending_capacity(BOUND);
        let port = AsyncPort::new(port)?;
        let server = port.register(&reg(FLOODED).method(Method::GET))?;
        let client = port.register(&reg(UNSERVED))?;
        tokio::task::block_in_place(|| flood(env, FLOODED, &addr))?;
        let tid = client.agent().next_tid();
        let reply = client
            .request(&get(UNSERVED, tid, 0)?, &addr, Duration::from_secs(1), 2)
            .await?;
        check_reply(&reply, tid)?;
        let dropped = port.port().dropped_mads();
        let mut seen = Vec::new();
        while let Ok(Some(r)) =
            tokio::time::timeout(Duration::from_millis(500), server.next_request()).await
        {
            seen.push(r.mad.data()[0]);
        }
        let oldest: Vec<u8> = (0..BOUND as u8).collect();
        check!(
            seen == oldest,
            "the server's stream held {seen:?}: the oldest {BOUND} should have been kept"
        );
        check!(
            dropped == u64::from(FLOOD) - BOUND as u64,
            "{dropped} dropped of {FLOOD}, bound {BOUND}"
        );
        Ok(Outcome::Passed)
    })
}

fn recv_sleeps_until_its_timeout_or_its_mad(env: &TestEnv) -> TestResult {
    let Some(addr) = rxe(env)? else { return skip() };
    let port = Port::open(&env.device, 1)?;
    let agent = port.register(&reg(FLOODED).method(Method::GET))?;
    let before = voluntary_switches();
    let start = Instant::now();
    let r = agent.recv(Some(Duration::from_secs(1)));
    let took = start.elapsed();
    let switches = voluntary_switches() - before;
    check!(
        matches!(r, Err(Error::RecvTimeout(_))),
        "expected a timeout, got {r:?}"
    );
    check!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "a 1 s receive returned after {took:?}"
    );
    // Polling in 20 ms slices would wake some 50 times.
    check!(switches <= 10, "{switches} wake-ups in a 1 s receive");

    let sender_port = Port::open(&env.device, 1)?;
    let sender = sender_port.register(&reg(FLOODED))?;
    let (got, sent, arrived) = std::thread::scope(|s| -> R<_> {
        let h = s.spawn(|| {
            let r = agent.recv(Some(Duration::from_secs(60)));
            (r, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(500));
        let sent = Instant::now();
        sender.send(&get(FLOODED, sender.next_tid(), 7)?, &addr)?;
        let Ok((r, at)) = h.join() else {
            fail!("the receiving thread panicked");
        };
        Ok((r, sent, at))
    })?;
    let got = got?;
    check!(got.mad.data()[0] == 7, "received {:?}", got.mad.header());
    check!(
        arrived - sent < Duration::from_secs(20),
        "the MAD was returned {:?} after it was sent",
        arrived - sent
    );
    Ok(Outcome::Passed)
}

fn receivers_on_one_port_each_get_their_mad_or_their_timeout(env: &TestEnv) -> TestResult {
    let Some(addr) = rxe(env)? else { return skip() };
    let port = Port::open(&env.device, 1)?;
    let a = port.register(&reg(FLOODED).method(Method::GET))?;
    let b = port.register(&reg(OTHER).method(Method::GET))?;
    let sender_port = Port::open(&env.device, 1)?;
    let to_a = sender_port.register(&reg(FLOODED))?;
    let to_b = sender_port.register(&reg(OTHER))?;
    std::thread::scope(|s| -> TestResult {
        let for_a = s.spawn(|| {
            let r = a.recv(Some(Duration::from_secs(15)));
            (r, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(300));
        // While `a` waits on the fd, `b` times out on its own deadline.
        let start = Instant::now();
        let r = b.recv(Some(Duration::from_millis(500)));
        let took = start.elapsed();
        check!(
            matches!(r, Err(Error::RecvTimeout(_))),
            "expected a timeout, got {r:?}"
        );
        check!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(5),
            "a 500 ms receive returned after {took:?}"
        );
        // Then each of two waiting receivers gets its own MAD, whichever
        // of them reads it from the fd.
        let for_b = s.spawn(|| {
            let r = b.recv(Some(Duration::from_secs(15)));
            (r, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(300));
        let sent_b = Instant::now();
        to_b.send(&get(OTHER, to_b.next_tid(), 2)?, &addr)?;
        let Ok((rb, at_b)) = for_b.join() else {
            fail!("b's thread panicked");
        };
        std::thread::sleep(Duration::from_millis(300));
        let sent_a = Instant::now();
        to_a.send(&get(FLOODED, to_a.next_tid(), 1)?, &addr)?;
        let Ok((ra, at_a)) = for_a.join() else {
            fail!("a's thread panicked");
        };
        let (ra, rb) = (ra?, rb?);
        check!(
            ra.agent_id == a.id() && ra.mad.data()[0] == 1,
            "a got {:?}",
            ra.mad.header()
        );
        check!(
            rb.agent_id == b.id() && rb.mad.data()[0] == 2,
            "b got {:?}",
            rb.mad.header()
        );
        for (who, took) in [("a", at_a - sent_a), ("b", at_b - sent_b)] {
            check!(
                took < Duration::from_secs(5),
                "{who}'s MAD was returned {took:?} after it was sent"
            );
        }
        Ok(Outcome::Passed)
    })
}

fn async_port_refuses_a_port_with_registered_agents(env: &TestEnv) -> TestResult {
    if rxe(env)?.is_none() {
        return skip();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _enter = rt.enter();
    let port = Port::open(&env.device, 1)?;
    let agent = port.register(&reg(FLOODED))?;
    match AsyncPort::new(port) {
        Err(e) => check!(e.errno() == libc::EBUSY, "{e}"),
        Ok(_) => fail!(
            "a port whose agent {} can still receive was taken over",
            agent.id()
        ),
    }
    drop(agent);
    // Without agents the same port is taken over.
    let port = Port::open(&env.device, 1)?;
    let async_port = AsyncPort::new(port)?;
    async_port.register(&reg(FLOODED))?;
    Ok(Outcome::Passed)
}

fn async_requests_fail_when_their_device_goes_away(env: &TestEnv) -> TestResult {
    // A device comes and goes: only in a process of its own.
    if let Some(outcome) = rdma_tests::in_own_process()? {
        return Ok(outcome);
    }
    if env.provider == Provider::Siw {
        return skip();
    }
    if std::env::var_os("RDMA_TEST_IN_VM").is_none() {
        return Ok(Outcome::Skipped(
            "adds and removes a device of its own: only in the test VM".into(),
        ));
    }
    let ip = Ipv4Addr::new(10, 78, 0, 1);
    let dev = ScratchDevice::new(Provider::Rxe, "sound_umad0", "rdsumad0", ip)?;
    let gid = Gid::from(ip.to_ipv6_mapped());
    // The device gets the address's GID a moment after it is added.
    let start = Instant::now();
    let index = loop {
        if let Ok(Some(i)) = umad::gid_index(dev.name, 1, gid) {
            break i;
        }
        check!(
            start.elapsed() < Duration::from_secs(15),
            "{} has no GID {gid} after 15 s",
            dev.name
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let addr = Address::gsi(gid, index);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut removal = rt.block_on(async {
        let port = AsyncPort::new(Port::open(dev.name, 1)?)?;
        let server = port.register(&reg(FLOODED).method(Method::GET))?;
        let client = port.register(&reg(FLOODED))?;
        let tid = client.agent().next_tid();
        // The server never answers: the request waits up to 30 s (10 s a
        // try), more than the removal may take on a loaded machine.
        let request = async {
            let r = client
                .request(&get(FLOODED, tid, 9)?, &addr, Duration::from_secs(10), 2)
                .await;
            Ok::<_, Box<dyn std::error::Error>>((r, Instant::now()))
        };
        let remove = async {
            let got = tokio::time::timeout(Duration::from_secs(20), server.next_request()).await;
            let Ok(Some(got)) = got else {
                fail!("the server got {got:?} instead of the request");
            };
            check!(
                got.mad.data()[0] == 9,
                "the server got {:?}",
                got.mad.header()
            );
            let removal = tokio::task::block_in_place(|| dev.start_removal())?;
            Ok::<_, Box<dyn std::error::Error>>((removal, Instant::now()))
        };
        let (answer, removed) = tokio::join!(request, remove);
        let ((r, at), (removal, removed_at)) = (answer?, removed?);
        match r {
            Err(Error::Timeout { .. }) => fail!(
                "the request timed out {:?} after its device was removed",
                at - removed_at
            ),
            Err(e) => check!(e.errno() == libc::EIO, "the request failed with {e}"),
            Ok(r) => fail!("the request got {:?}", r.mad.header()),
        }
        check!(
            at - removed_at < Duration::from_secs(8),
            "the request failed {:?} after its device was removed",
            at - removed_at
        );
        // The server's stream ends too, and later requests fail at once.
        let next = tokio::time::timeout(Duration::from_secs(10), server.next_request()).await;
        check!(
            matches!(next, Ok(None)),
            "the server's stream gave {next:?}"
        );
        let again = client
            .request(
                &get(FLOODED, client.agent().next_tid(), 1)?,
                &addr,
                Duration::from_secs(2),
                0,
            )
            .await;
        check!(
            again.as_ref().err().map(Error::errno) == Some(libc::EIO),
            "a request after the removal got {again:?}"
        );
        check!(
            port.port().malformed_mads() == 0,
            "MADs that did not decode"
        );
        Ok::<_, Box<dyn std::error::Error>>(removal)
    })?;
    // With the port closed, nothing holds the device.
    let start = Instant::now();
    let status = loop {
        if let Some(st) = removal.try_wait()? {
            break st;
        }
        check!(
            start.elapsed() < Duration::from_secs(30),
            "the removal of {} still waits 30 s after its port was closed",
            dev.name
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    check!(status.success(), "rdma link delete {}: {status}", dev.name);
    Ok(Outcome::Passed)
}
