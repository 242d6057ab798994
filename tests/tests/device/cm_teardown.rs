//! Tearing down CM objects: an event callback that panics or drops its own
//! id, a QP destroyed while its id's event is processed, the QP of a
//! multicast member, a CM context that outlives its ids and its device.

use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdma::cm::{CmEventKind, CmId, EventChannel, PortSpace};
use rdma::{AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType};
use rdma_tests::{
    check, fail, resource_counts, Outcome, Provider, ScratchDevice, TestEnv, TestResult,
};

use crate::fixtures::{R, T};

/// How long a scratch device may take to take its address (the bind below
/// succeeds once it has): the device's set-up runs in the kernel's workers,
/// which an emulated guest on a loaded host can hold back for many seconds,
/// so the bound only proves that the wait ends.
const DEVICE_UP: Duration = Duration::from_secs(30);

/// Runs `f` on a thread of its own and waits up to `limit` for it: `None`
/// when it has not returned by then (it is left running, blocked).
fn within<F, X>(limit: Duration, f: F) -> Option<X>
where
    F: FnOnce() -> X + Send + 'static,
    X: Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// Runs `f` with panics kept quiet (the tests make callbacks panic on
/// purpose).
fn quietly<X>(f: impl FnOnce() -> X) -> X {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let x = f();
    std::panic::set_hook(hook);
    x
}

/// A client id on `ch` that has an `AddrResolved` event pending (it
/// resolved the device's own address), not read yet.
fn id_with_pending_event(env: &TestEnv, ch: &EventChannel) -> R<CmId> {
    let id = CmId::new(ch, PortSpace::Tcp)?;
    id.resolve_addr(
        None,
        SocketAddr::new(IpAddr::V4(env.ipv4), 7471),
        Duration::from_secs(2),
    )?;
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(ch),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, T.as_millis() as i32) };
    check!(n == 1, "no event within {T:?}");
    Ok(id)
}

pub fn panicking_event_callback_still_acknowledges_the_event(env: &TestEnv) -> TestResult {
    let ch = EventChannel::new()?;
    let id = id_with_pending_event(env, &ch)?;
    let mut seen = None;
    let r = quietly(|| {
        catch_unwind(AssertUnwindSafe(|| {
            ch.get_event_with(|ev| {
                seen = Some(ev.kind);
                panic!("the callback panics");
            })
        }))
    });
    check!(r.is_err(), "the callback did not panic: {:?}", r.ok());
    check!(
        seen == Some(CmEventKind::AddrResolved),
        "the callback saw {seen:?}"
    );
    // rdma_destroy_id waits for the id's events to be acknowledged: an
    // event left unacknowledged by the panic would keep it waiting for ever.
    check!(
        within(Duration::from_secs(5), move || drop(id)).is_some(),
        "dropping the id after a panicking callback still waits after 5 s"
    );
    Ok(Outcome::Passed)
}

pub fn id_dropped_inside_its_event_callback_is_destroyed(env: &TestEnv) -> TestResult {
    let ch = EventChannel::new()?;
    // The callback drops the event's own id, once by returning and once by
    // unwinding: both would wait for the event's acknowledgement, which
    // comes only after the callback.
    for panics in [false, true] {
        let id = id_with_pending_event(env, &ch)?;
        let ch2 = ch.clone();
        let done = within(Duration::from_secs(5), move || {
            quietly(|| {
                catch_unwind(AssertUnwindSafe(|| {
                    ch2.get_event_with(move |ev| {
                        let kind = ev.kind;
                        drop(id);
                        if panics {
                            panic!("the callback panics");
                        }
                        kind
                    })
                    .map_err(|e| e.to_string())
                }))
                .is_err()
            })
        });
        match done {
            None => fail!("an id dropped inside its event's callback (panics: {panics}) still waits after 5 s"),
            Some(unwound) => check!(unwound == panics, "unwound: {unwound}, panics: {panics}"),
        }
    }
    Ok(Outcome::Passed)
}

pub fn qp_teardown_waits_for_event_processing(env: &TestEnv) -> TestResult {
    let ch = EventChannel::new()?;
    let mut id = CmId::new(&ch, PortSpace::Tcp)?;
    id.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    let ctx = id.context()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 4)?;
    id.create_qp(&pd, QpType::Rc, &cq, &cq, QpCaps::default())?;
    id.resolve_addr(
        None,
        SocketAddr::new(IpAddr::V4(env.ipv4), 7471),
        Duration::from_secs(2),
    )?;
    // A reader on another thread holds the event (as librdmacm does while
    // it processes one: a connect response moves the id's QP to RTS) for
    // 300 ms; the QP's teardown must not overlap that.
    let (tx, rx) = mpsc::channel();
    let reader = {
        let ch = ch.clone();
        std::thread::spawn(move || {
            ch.get_event_with(|ev| {
                let _ = tx.send(());
                std::thread::sleep(Duration::from_millis(300));
                (ev.kind, Instant::now())
            })
        })
    };
    rx.recv_timeout(T).map_err(|_| "no event within 10 s")?;
    id.destroy_qp();
    let destroyed = Instant::now();
    let (kind, processed) = match reader.join() {
        Ok(Ok(Some(r))) => r,
        other => fail!("the reader: {other:?}"),
    };
    check!(kind == CmEventKind::AddrResolved, "{kind:?}");
    check!(
        destroyed >= processed,
        "the QP was destroyed {:?} before the event's processing ended",
        processed - destroyed
    );
    check!(id.qp().is_none(), "the id still has a QP");
    Ok(Outcome::Passed)
}

pub fn multicast_join_leaves_no_qp_behind(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no multicast".into()));
    }
    let before = resource_counts(&env.device)?;
    for round in 0..2 {
        let ch = EventChannel::new()?;
        let mut id = CmId::new(&ch, PortSpace::Udp)?;
        id.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 4)?;
        id.create_qp(&pd, QpType::Ud, &cq, &cq, QpCaps::default())?;
        id.join_multicast("239.1.2.7:0".parse()?)?;
        ch.expect(&id, CmEventKind::MulticastJoin, T)?;
        if round == 1 {
            // The explicit teardown leaves the group too.
            id.destroy_qp();
        }
    }
    let after = resource_counts(&env.device)?;
    check!(
        before == after,
        "resources before {before:?}, after two joins {after:?}"
    );
    Ok(Outcome::Passed)
}

fn wait_exit(child: &mut Child, limit: Duration) -> R<Option<std::process::ExitStatus>> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        if start.elapsed() > limit {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn cm_context_outlives_its_ids_and_its_device(env: &TestEnv) -> TestResult {
    // A device comes and goes: only in a process of its own.
    if let Some(outcome) = rdma_tests::in_own_process()? {
        return Ok(outcome);
    }
    if std::env::var_os("RDMA_TEST_IN_VM").is_none() {
        return Ok(Outcome::Skipped(
            "adds and removes a device of its own: only in the test VM".into(),
        ));
    }
    // A name, netdev and subnet per provider: the two providers' suites may
    // run at the same time in one VM (ci/test.sh).
    let (name, netdev, ip) = match env.provider {
        Provider::Rxe => ("sound_cm0", "rdsound0", Ipv4Addr::new(10, 77, 0, 1)),
        Provider::Siw => ("sound_cm1", "rdsound1", Ipv4Addr::new(10, 77, 1, 1)),
    };
    // The device gets the address's GID a moment after it is added. Now
    // and then (about one siw device in 40 in the test VM) a new device
    // never takes its address: rdma_bind_addr answers ENODEV for as long
    // as one waits. That is the kernel's set-up of the device, not what
    // this test proves, so such a device is made again, twice at most.
    let mut attempt = 0;
    let (dev, ch, id, ctx) = loop {
        attempt += 1;
        let dev = ScratchDevice::new(env.provider, name, netdev, ip)?;
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch, PortSpace::Tcp)?;
        let start = Instant::now();
        let mut bound = false;
        // The id's context takes a second binding to the address (the
        // reference that keeps the device open): it fails with ENODEV, as a
        // bind does, while the new device does not hold its address yet.
        let up = loop {
            let step = match bound {
                false => id.bind(SocketAddr::new(IpAddr::V4(ip), 0)).map(|()| None),
                true => id.context().map(Some),
            };
            match step {
                Ok(None) => bound = true,
                Ok(Some(ctx)) => break Ok(ctx),
                Err(_) if start.elapsed() < DEVICE_UP => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => break Err(e),
            }
        };
        match up {
            Ok(ctx) => break (dev, ch, id, ctx),
            Err(e) if attempt < 3 => {
                let what = if bound { "the id's context" } else { "bind" };
                println!(
                    "    device {attempt}: {what} on {ip} for {:?}: {e}; the device is made again",
                    start.elapsed()
                );
                drop((id, ch, dev));
            }
            Err(e) => fail!("bind to {ip}, on {attempt} new devices, {DEVICE_UP:?} each: {e}"),
        }
    };
    check!(ctx.name() == dev.name, "the id is on {}", ctx.name());
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 4)?;
    let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
    drop(ctx);
    drop(id);
    drop(ch);

    // Remove the device. Its removal waits until the process closes its
    // context; librdmacm closes it once it sees the device gone and no
    // reference on it is left (the id's went with the id), unless the PD,
    // CQ and MR keep one.
    let mut removal = dev.start_removal()?;
    let start = Instant::now();
    while rdma_tests::rdmacm_lists(dev.name) {
        check!(
            start.elapsed() < T,
            "librdmacm still lists {} after {T:?}",
            dev.name
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The context is still open: the verbs work, and the removal waits.
    let mr2 = MemoryRegion::new(&pd, 8192, AccessFlags::LOCAL_WRITE)?;
    mr2.write(0, b"after the removal")?;
    check!(
        mr2.to_vec(0..17)? == b"after the removal",
        "the region reads back other bytes"
    );
    mr.write(0, b"still here")?;
    let mut wc = [MaybeUninit::uninit(); 4];
    check!(
        cq.poll(&mut wc)?.is_empty(),
        "a completion on a CQ with no QP"
    );
    check!(
        removal.try_wait()?.is_none(),
        "the device was removed while its context was in use"
    );
    drop((mr2, mr, cq, pd));
    // Now nothing holds the context: librdmacm closes it and the removal
    // completes.
    let Some(st) = wait_exit(&mut removal, T)? else {
        fail!(
            "the removal of {} still waits 10 s after the last object went",
            dev.name
        );
    };
    check!(st.success(), "rdma link delete {}: {st}", dev.name);
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "cm::teardown":
    panicking_event_callback_still_acknowledges_the_event,
    id_dropped_inside_its_event_callback_is_destroyed,
    qp_teardown_waits_for_event_processing,
    multicast_join_leaves_no_qp_behind,
    cm_context_outlives_its_ids_and_its_device,
);
