//! What a new user reaches for first: a blocking wait for completions
//! (`CompletionQueue::wait`, `wait_one`) and the passive side's disconnect
//! of an async connection.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rdma::cm::{AsyncCm, AsyncCmId, CmEventKind, ConnParam};
use rdma::{
    AccessFlags, CompletionChannel, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps,
    QpType, QueuePair, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};

use crate::verbs::{connect_rc, open, R, TIMEOUT};

/// How a queue of the wait test is made.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    /// No channel: the wait polls and backs off.
    Polling,
    /// A blocking completion channel.
    Channel,
    /// A non-blocking completion channel.
    NonBlockingChannel,
}

/// How long a wait for nothing is given, and how much later than that it
/// may end under emulation.
const SHORT: Duration = Duration::from_millis(300);
const SLACK: Duration = Duration::from_secs(5);

/// Checks that a wait that found nothing ended at its timeout, not before
/// and not long after.
fn ended_at_the_timeout(took: Duration, what: &str) -> R<()> {
    check!(
        took >= SHORT,
        "{what}: returned after {took:?}, before {SHORT:?}"
    );
    check!(took < SHORT + SLACK, "{what}: returned after {took:?}");
    Ok(())
}

fn wait_on(env: &TestEnv, how: Waiting) -> R<()> {
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let ch = CompletionChannel::new(&ctx)?;
    if matches!(how, Waiting::NonBlockingChannel) {
        ch.set_nonblocking(true)?;
    }
    let cq = |ctx| -> rdma::Result<CompletionQueue> {
        match how {
            Waiting::Polling => CompletionQueue::new(ctx, 32),
            _ => CompletionQueue::builder(ctx).cqe(32).channel(&ch).build(),
        }
    };
    let (cq_a, cq_b) = (cq(&ctx)?, cq(&ctx)?);
    check!(
        cq_a.channel().is_some() == !matches!(how, Waiting::Polling),
        "{how:?}: channel {:?}",
        cq_a.channel()
    );
    let qp = |cq: &CompletionQueue| {
        QueuePair::builder(&pd, QpType::Rc, cq)
            .caps(QpCaps::default())
            .build()
    };
    let (qp_a, qp_b) = (qp(&cq_a)?, qp(&cq_b)?);
    let _cm = connect_rc(env, &ctx, &qp_a, &qp_b)?;
    let access = AccessFlags::LOCAL_WRITE;
    let (mr_a, mr_b) = (
        MemoryRegion::new(&pd, 4096, access)?,
        MemoryRegion::new(&pd, 4096, access)?,
    );

    // Nothing posted: the wait ends at its timeout, with nothing.
    let mut wcs = [WorkCompletion::ZERO; 16];
    let start = Instant::now();
    let got = cq_b.wait(&mut wcs, 1, SHORT)?.len();
    ended_at_the_timeout(start.elapsed(), &format!("{how:?}: wait"))?;
    check!(got == 0, "{how:?}: {got} completions on an idle queue");
    let start = Instant::now();
    match cq_b.wait_one(SHORT) {
        Err(e) if e.is_timeout() => {}
        other => return Err(format!("{how:?}: wait_one on an idle queue gave {other:?}").into()),
    }
    ended_at_the_timeout(start.elapsed(), &format!("{how:?}: wait_one"))?;

    // Four messages: the wait returns once all four have completed.
    const N: usize = 4;
    for i in 0..N {
        let rs = [mr_b.sge(i * 64..(i + 1) * 64)?];
        qp_b.post_recv(&mut [RecvWr::new(i as u64, &rs)])?;
    }
    for i in 0..N {
        mr_a.write(i * 64, format!("message {i}").as_bytes())?;
        let ss = [mr_a.sge(i * 64..i * 64 + 9)?];
        qp_a.post_send(&mut [SendWr::send(100 + i as u64, &ss).signaled()])?;
    }
    let sent = cq_a.wait(&mut wcs, N, TIMEOUT)?;
    check!(sent.len() == N, "{how:?}: {} of {N} sends", sent.len());
    for (i, wc) in sent.iter().enumerate() {
        check!(
            wc.is_success() && wc.opcode() == WcOpcode::Send && wc.wr_id() == 100 + i as u64,
            "{how:?}: send {i}: {wc:?}"
        );
    }
    let got = cq_b.wait(&mut wcs, N, TIMEOUT)?;
    check!(got.len() == N, "{how:?}: {} of {N} receives", got.len());
    for (i, wc) in got.iter().enumerate() {
        check!(
            wc.is_success() && wc.opcode() == WcOpcode::Recv && wc.byte_len() == 9,
            "{how:?}: receive {i}: {wc:?}"
        );
        let slot = wc.wr_id() as usize;
        let text = mr_b.to_vec(slot * 64..slot * 64 + 9)?;
        check!(
            text == format!("message {slot}").as_bytes(),
            "{how:?}: slot {slot} holds {text:?}"
        );
    }

    // A completion that comes while the thread sleeps in the wait.
    let rs = [mr_b.sge(0..64)?];
    qp_b.post_recv(&mut [RecvWr::new(7, &rs)])?;
    let delay = Duration::from_millis(300);
    let (wc, took) = std::thread::scope(|s| {
        let sender = s.spawn(|| -> rdma::Result<()> {
            std::thread::sleep(delay);
            let ss = [mr_a.sge(0..9)?];
            qp_a.post_send(&mut [SendWr::send(200, &ss).signaled()])
        });
        let start = Instant::now();
        let wc = cq_b.wait_one(TIMEOUT);
        let took = start.elapsed();
        let sent = sender.join().map_err(|_| "the sender panicked");
        (sent.map(|r| r.and(wc)), took)
    });
    let wc = wc??;
    check!(
        wc.is_success() && wc.wr_id() == 7,
        "{how:?}: late receive: {wc:?}"
    );
    check!(
        took >= delay - Duration::from_millis(50) && took < delay + SLACK,
        "{how:?}: the wait for a completion {delay:?} away took {took:?}"
    );
    let sent = cq_a.wait_one(TIMEOUT)?;
    check!(
        sent.is_success() && sent.wr_id() == 200,
        "{how:?}: {sent:?}"
    );
    // `min` 0 polls once: nothing is left over.
    check!(
        cq_a.wait(&mut wcs, 0, TIMEOUT)?.is_empty(),
        "{how:?}: completions left over"
    );
    Ok(())
}

pub fn cq_wait_returns_completions_and_times_out(env: &TestEnv) -> TestResult {
    for how in [
        Waiting::Polling,
        Waiting::Channel,
        Waiting::NonBlockingChannel,
    ] {
        wait_on(env, how)?;
    }
    Ok(Outcome::Passed)
}

use crate::cm_async::{setup, Conn};

type AR<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How the server learns that the client left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Learnt {
    /// It takes the `Disconnected` event itself (`next_event`).
    Taken,
    /// The event waits in the id's queue.
    Queued,
}

/// The longest a disconnect after the peer's may take.
const PROMPT: Duration = Duration::from_secs(1);

/// One connection: the client disconnects first; the server, once it
/// knows, disconnects too and must return at once.
async fn passive_disconnect(
    env: &TestEnv,
    cm: &AsyncCm,
    listener: &mut rdma::cm::Listener,
    how: Learnt,
) -> AR<()> {
    let addr = listener.local_addr().ok_or("the listener has no address")?;
    let server = async {
        let mut req = listener.accept().await?;
        let conn = setup(req.id_mut())?;
        let rs = [conn.mr.sge(0..256)?];
        req.id()
            .qp()
            .ok_or("no QP")?
            .post_recv(&mut [RecvWr::new(9, &rs)])?;
        let (id, _) = req.accept(&ConnParam::new(), TIMEOUT).await?;
        AR::Ok((id, conn))
    };
    let param = ConnParam::new();
    let client = cm.connect(addr, TIMEOUT, &param, setup);
    let (server, client) = tokio::join!(server, client);
    let (mut sid, sconn): (AsyncCmId, Conn) = server?;
    let (mut cid, _, _client_conn) = client?;
    check!(
        !sid.has_pending_event(),
        "{how:?}: an event pending on the accepted id before anything happened"
    );
    // The client's disconnect ends when the server answers (on the IB CM
    // its DREP): it runs beside the server's part.
    let client_done = tokio::spawn(async move {
        let r = cid.disconnect(TIMEOUT).await;
        drop(cid);
        r
    });
    match how {
        Learnt::Taken => {
            let ev = tokio::time::timeout(TIMEOUT, sid.next_event())
                .await
                .map_err(|_| "no event after the client's disconnect")??;
            check!(
                ev.kind == CmEventKind::Disconnected,
                "{how:?}: {:?} instead of Disconnected",
                ev.kind
            );
            check!(
                !sid.has_pending_event(),
                "{how:?}: an event still pending after the only one was taken"
            );
        }
        Learnt::Queued => {
            let start = Instant::now();
            while !sid.is_disconnected() {
                check!(
                    start.elapsed() < TIMEOUT,
                    "{how:?}: no Disconnected within {TIMEOUT:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            check!(
                sid.has_pending_event(),
                "{how:?}: the queued Disconnected is not pending"
            );
        }
    }
    check!(sid.is_disconnected(), "{how:?}: the id does not know");
    // The receive the server posted: on siw the client's disconnect has
    // flushed it already; on rxe it is flushed by the server's own.
    let mut wcs = [WorkCompletion::ZERO; 4];
    let before: Vec<WorkCompletion> = sconn.cq.poll(&mut wcs)?.to_vec();
    match env.provider {
        Provider::Siw => check!(
            before.len() == 1
                && before[0].wr_id() == 9
                && before[0].status() == WcStatus::WorkRequestFlushed,
            "{how:?}: on siw the receive was not flushed before Disconnected: {before:?}"
        ),
        Provider::Rxe => check!(
            before.is_empty(),
            "{how:?}: on rxe completions before the server disconnected: {before:?}"
        ),
    }
    let start = Instant::now();
    sid.disconnect(Duration::from_secs(10)).await?;
    let took = start.elapsed();
    check!(
        took < PROMPT,
        "{how:?}: the passive disconnect took {took:?}"
    );
    if env.provider == Provider::Rxe {
        let wc = sconn.cq.wait_one(TIMEOUT)?;
        check!(
            wc.wr_id() == 9 && wc.status() == WcStatus::WorkRequestFlushed,
            "{how:?}: on rxe after the disconnect: {wc:?}"
        );
    }
    tokio::time::timeout(TIMEOUT, client_done)
        .await
        .map_err(|_| "the client's disconnect did not end")???;
    // Nothing more comes for the server's id, and a second disconnect is
    // as prompt.
    let start = Instant::now();
    sid.disconnect(Duration::from_secs(10)).await?;
    check!(
        start.elapsed() < PROMPT,
        "{how:?}: a second disconnect waited"
    );
    Ok(())
}

pub fn passive_disconnect_returns_at_once(env: &TestEnv) -> TestResult {
    let before = rdma_tests::resource_counts(&env.device)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let r: AR<()> = rt.block_on(async {
        let cm = AsyncCm::new()?;
        let mut listener = cm.listen(SocketAddr::new(IpAddr::V4(env.ipv4), 0), 8)?;
        for how in [Learnt::Taken, Learnt::Queued] {
            passive_disconnect(env, &cm, &mut listener, how).await?;
        }
        Ok(())
    });
    r.map_err(|e| e.to_string())?;
    drop(rt);
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources leaked: before {before:?}, after {after:?}"
    );
    Ok(Outcome::Passed)
}

/// A free port on the test address: bound, then closed, so that nothing
/// listens there.
fn unused_port(env: &TestEnv) -> AR<SocketAddr> {
    let l = std::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    Ok(l.local_addr()?)
}

/// A connection refused reads the same on rxe (the IB CM's reject reason)
/// and siw (a refused TCP connection, an MPA reject): `is_refused`, a hint
/// that says what happened, and `ConnectionRefused` from a stream.
pub fn a_refused_connection_reads_the_same_everywhere(env: &TestEnv) -> TestResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let r: AR<()> = rt.block_on(async {
        let cm = AsyncCm::new()?;
        // Nothing listens.
        let nobody = unused_port(env)?;
        let e = match cm.connect(nobody, TIMEOUT, &ConnParam::new(), setup).await {
            Ok(_) => return Err("a connect to a port nobody listens on succeeded".into()),
            Err(e) => e,
        };
        let text = e.to_string();
        eprintln!("    nobody listens: {text}");
        check!(e.is_refused(), "not refused: {text}");
        check!(
            text.contains("nothing listens"),
            "the error does not say that nothing listens: {text}"
        );
        check!(!text.contains("status"), "a raw status in: {text}");
        let e = match rdma::stream::RdmaStream::connect(nobody).await {
            Ok(_) => return Err("a stream connected to a port nobody listens on".into()),
            Err(e) => e,
        };
        check!(
            e.kind() == std::io::ErrorKind::ConnectionRefused,
            "a stream's refused connect: {:?} {e}",
            e.kind()
        );
        // The listener rejects, with private data.
        let mut listener = cm.listen(SocketAddr::new(IpAddr::V4(env.ipv4), 0), 4)?;
        let at = listener.local_addr().ok_or("the listener has no address")?;
        let server = async {
            let req = listener.accept().await?;
            req.reject(b"go away")?;
            AR::Ok(())
        };
        let param = ConnParam::new();
        let client = cm.connect(at, TIMEOUT, &param, setup);
        let (server, client) = tokio::join!(server, client);
        server?;
        let e = match client {
            Ok(_) => return Err("a rejected connect succeeded".into()),
            Err(e) => e,
        };
        let text = e.to_string();
        eprintln!("    rejected: {text}");
        check!(e.is_refused(), "a reject is not refused: {text}");
        check!(
            text.contains("the listener rejected"),
            "the error does not say that the listener rejected: {text}"
        );
        Ok(())
    });
    r.map_err(|e| e.to_string())?;
    Ok(Outcome::Passed)
}

/// The set-up closure of `connect` returns the caller's own value, and its
/// own error type, which ends the connect as it is, leaking nothing.
pub fn connect_setup_returns_the_callers_value_and_error(env: &TestEnv) -> TestResult {
    #[derive(Debug)]
    enum Mine {
        Rdma(rdma::Error),
        NoThanks(u32),
    }
    impl From<rdma::Error> for Mine {
        fn from(e: rdma::Error) -> Mine {
            Mine::Rdma(e)
        }
    }
    let before = rdma_tests::resource_counts(&env.device)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let r: AR<()> = rt.block_on(async {
        let cm = AsyncCm::new()?;
        let mut listener = cm.listen(SocketAddr::new(IpAddr::V4(env.ipv4), 0), 4)?;
        let at = listener.local_addr().ok_or("the listener has no address")?;
        // The closure's own error: no connect request is ever sent.
        let r = cm
            .connect(at, TIMEOUT, &ConnParam::new(), |id| {
                let _conn = setup(id)?;
                Err::<Conn, Mine>(Mine::NoThanks(7))
            })
            .await;
        check!(
            matches!(r, Err(Mine::NoThanks(7))),
            "the closure's error came back as {:?}",
            r.err()
        );
        check!(
            tokio::time::timeout(Duration::from_millis(500), listener.accept())
                .await
                .is_err(),
            "a request reached the listener after the set-up failed"
        );
        // The closure's value: the connection's resources, used after.
        let server = async {
            let mut req = listener.accept().await?;
            let conn = setup(req.id_mut())?;
            let rs = [conn.mr.sge(0..64)?];
            req.id()
                .qp()
                .ok_or("no QP")?
                .post_recv(&mut [RecvWr::new(6, &rs)])?;
            let (id, _) = req
                .accept(&ConnParam::new().with_private_data(b"hi"), TIMEOUT)
                .await?;
            AR::Ok((id, conn))
        };
        let param = ConnParam::new();
        let client = cm.connect(at, TIMEOUT, &param, |id| Ok::<_, Mine>((setup(id)?, 42u32)));
        let (server, client) = tokio::join!(server, client);
        let (mut sid, sconn) = server?;
        let (mut cid, est, (conn, n)) = client.map_err(|e| match e {
            Mine::Rdma(e) => e.to_string(),
            Mine::NoThanks(n) => format!("the closure refused: {n}"),
        })?;
        check!(n == 42, "the closure's value: {n}");
        check!(
            est.private_data().starts_with(b"hi"),
            "the accept's private data: {:?}",
            est.private_data()
        );
        // The CQ the closure made serves the connection.
        conn.mr.write(0, b"ping")?;
        let ss = [conn.mr.sge(0..4)?];
        cid.id()
            .qp()
            .ok_or("no QP")?
            .post_send(&mut [SendWr::send(5, &ss).signaled()])?;
        let wc = conn.cq.wait_one(TIMEOUT)?;
        check!(wc.is_success() && wc.wr_id() == 5, "{wc:?}");
        let wc = sconn.cq.wait_one(TIMEOUT)?;
        check!(
            wc.is_success() && wc.wr_id() == 6 && sconn.mr.to_vec(0..4)? == b"ping",
            "{wc:?}"
        );
        // Both at once: on the IB CM the client's ends with the server's answer.
        let (c, s) = tokio::join!(cid.disconnect(TIMEOUT), sid.disconnect(TIMEOUT));
        c?;
        s?;
        Ok(())
    });
    r.map_err(|e| e.to_string())?;
    drop(rt);
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources leaked: before {before:?}, after {after:?}"
    );
    Ok(Outcome::Passed)
}

/// `AsyncCompletionQueue::create` makes its own channel; a CQ builder
/// refuses a channel of another context.
pub fn an_async_cq_makes_its_own_channel(env: &TestEnv) -> TestResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let r: R<()> = rt.block_on(async {
        let ctx = open(env)?;
        let acq = rdma::AsyncCompletionQueue::create(&ctx, 16)?;
        check!(acq.cq().channel().is_some(), "no channel");
        let pd = ProtectionDomain::new(&ctx)?;
        let qp = || {
            QueuePair::builder(&pd, QpType::Rc, acq.cq())
                .caps(QpCaps::default())
                .build()
        };
        let (a, b) = (qp()?, qp()?);
        let _cm = connect_rc(env, &ctx, &a, &b)?;
        let mr = MemoryRegion::new(&pd, 64, AccessFlags::LOCAL_WRITE)?;
        let rs = [mr.sge(0..32)?];
        b.post_recv(&mut [RecvWr::new(1, &rs)])?;
        let ss = [mr.sge(32..40)?];
        a.post_send(&mut [SendWr::send(2, &ss).signaled()])?;
        let mut got = Vec::new();
        let mut wcs = [WorkCompletion::ZERO; 4];
        while got.len() < 2 {
            let polled = tokio::time::timeout(TIMEOUT, acq.poll(&mut wcs))
                .await
                .map_err(|_| "no completion from the async CQ")??;
            got.extend(
                polled
                    .iter()
                    .map(|wc| (wc.wr_id(), wc.opcode(), wc.status())),
            );
        }
        got.sort_by_key(|g| g.0);
        check!(
            got == [
                (1, WcOpcode::Recv, WcStatus::Success),
                (2, WcOpcode::Send, WcStatus::Success)
            ],
            "{got:?}"
        );
        // A channel of another context (the same device, opened again).
        let other = open(env)?;
        let ch = CompletionChannel::new(&other)?;
        let e = match CompletionQueue::builder(&ctx).cqe(4).channel(&ch).build() {
            Ok(_) => return Err("a CQ was made with another context's channel".into()),
            Err(e) => e,
        };
        check!(e.errno() == libc::EINVAL, "another context's channel: {e}");
        drop((a, b));
        Ok(())
    });
    r.map_err(|e| e.to_string())?;
    Ok(Outcome::Passed)
}

/// The GID picker, and the types it picks by: on rxe the RoCE v2 GID of
/// the test's IPv4 address (and an IPv6 one), on siw iWARP GIDs only.
pub fn gids_are_picked_by_type_and_family(env: &TestEnv) -> TestResult {
    use rdma::{GidType, IpFamily};
    let ctx = open(env)?;
    let table = ctx.gid_table()?;
    check!(!table.is_empty(), "an empty GID table");
    for e in &table {
        // The index and port are those an address vector takes.
        let again = ctx.query_gid_entry(e.port, e.index)?;
        check!(again == Some(*e), "entry {e:?} queried again: {again:?}");
    }
    match env.provider {
        Provider::Rxe => {
            let v4 = ctx.find_gid(1, GidType::RoceV2, Some(IpFamily::V4))?;
            let v4 = v4.ok_or("no RoCE v2 IPv4 GID")?;
            check!(
                v4.gid.to_ipv4_mapped() == Some(env.ipv4),
                "the IPv4 RoCE v2 GID is {} (index {}), not {}",
                v4.gid,
                v4.index,
                env.ipv4
            );
            let v6 = ctx.find_gid(1, GidType::RoceV2, Some(IpFamily::V6))?;
            let v6 = v6.ok_or("no RoCE v2 IPv6 GID")?;
            check!(
                v6.ip_family() == Some(IpFamily::V6) && v6.gid.to_ipv4_mapped().is_none(),
                "{v6:?}"
            );
            check!(
                ctx.find_gid(1, GidType::Iwarp, None)?.is_none(),
                "an iWARP GID on rxe"
            );
            check!(
                ctx.find_gid(2, GidType::RoceV2, None)?.is_none(),
                "a GID on rxe's port 2"
            );
        }
        Provider::Siw => {
            check!(
                table
                    .iter()
                    .all(|e| e.gid_type == GidType::Iwarp && e.ip_family().is_none()),
                "siw's GIDs: {table:?}"
            );
            check!(
                ctx.find_gid(1, GidType::Iwarp, None)?.is_some(),
                "no iWARP GID found"
            );
            check!(
                ctx.find_gid(1, GidType::RoceV2, Some(IpFamily::V4))?
                    .is_none(),
                "a RoCE GID on siw"
            );
        }
    }
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "usability":
    gids_are_picked_by_type_and_family,
    a_refused_connection_reads_the_same_everywhere,
    connect_setup_returns_the_callers_value_and_error,
    an_async_cq_makes_its_own_channel,
    cq_wait_returns_completions_and_times_out,
    passive_disconnect_returns_at_once,
);
