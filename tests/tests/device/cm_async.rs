//! The connection manager on tokio: many connections on one event channel.

use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rdma::cm::{AsyncCm, AsyncCmId, CmEventKind, CmId, ConnParam};
use rdma::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType, RecvWr, SendWr,
    WcStatus, WorkCompletion,
};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};
use tokio_stream::StreamExt;

use crate::fixtures::TIMEOUT;

type AR<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How the server learns that the client left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Learnt {
    /// It takes the `Disconnected` event itself (`next_event`).
    Taken,
    /// The event waits in the id's queue.
    Queued,
}

/// The longest a disconnect after the peer's may take: half its own
/// timeout (10 s), which it would wait out if it waited for an event that
/// already came; generous for a loaded machine, where it takes milliseconds.
const PROMPT: Duration = Duration::from_secs(5);

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

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const T: Duration = Duration::from_secs(30);

/// The verbs resources of one connection; the id owns the QP.
pub(crate) struct Conn {
    pub(crate) cq: CompletionQueue,
    pub(crate) mr: MemoryRegion,
    _pd: ProtectionDomain,
}

/// A PD, a CQ of 16, a 256-byte region and an RC QP on the id's device.
pub(crate) fn setup(id: &mut CmId) -> rdma::Result<Conn> {
    let ctx = id.context()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let mr = MemoryRegion::new(&pd, 256, AccessFlags::LOCAL_WRITE)?;
    id.create_qp(&pd, QpType::Rc, &cq, &cq, QpCaps::default())?;
    Ok(Conn { cq, mr, _pd: pd })
}

/// Polls without blocking the runtime: yields between empty polls.
async fn completion(cq: &CompletionQueue) -> R<WorkCompletion> {
    let start = Instant::now();
    let mut buf = [MaybeUninit::uninit(); 1];
    loop {
        if let Some(wc) = cq.poll(&mut buf)?.first() {
            if !wc.is_success() {
                return Err(format!("completion failed: {wc:?}").into());
            }
            return Ok(*wc);
        }
        if start.elapsed() > T {
            return Err("no completion".into());
        }
        tokio::task::yield_now().await;
    }
}

fn message(i: usize) -> Vec<u8> {
    format!("message of client {i:03}").into_bytes()
}

/// Takes `n` connect requests from the listener as a stream; each must come
/// from the listener's own IP address (the clients bind to it or resolve
/// from it).
async fn serve(cm: &AsyncCm, listen: SocketAddr, n: usize) -> R<usize> {
    let mut incoming = cm.listen(listen, 128)?;
    let mut tasks = Vec::new();
    for _ in 0..n {
        let mut req = incoming.next().await.ok_or("the listener ended")??;
        let i: usize = std::str::from_utf8(&req.private_data[..3])?.parse()?;
        let peer = req.id().peer_addr().map(|a| a.ip());
        if peer != Some(listen.ip()) {
            return Err(format!("client {i}: request from {peer:?}").into());
        }
        let conn = setup(req.id_mut())?;
        tasks.push(tokio::spawn(async move {
            let rs = [conn.mr.sge(0..256)?];
            let mut id = {
                let qp_id = &mut req;
                qp_id
                    .id_mut()
                    .qp()
                    .ok_or("no QP")?
                    .post_recv(&mut [RecvWr::new(i as u64, &rs)])?;
                req.accept(&ConnParam::new(), T).await?.0
            };
            let wc = completion(&conn.cq).await?;
            let want = message(i);
            if wc.byte_len() as usize != want.len() || conn.mr.to_vec(0..want.len())? != want {
                return Err(format!("connection {i}: wrong data").into());
            }
            id.expect(rdma::cm::CmEventKind::Disconnected, T).await?;
            id.id().disconnect().ok();
            Ok::<usize, Box<dyn std::error::Error + Send + Sync>>(i)
        }));
    }
    let mut served = 0;
    for t in tasks {
        t.await??;
        served += 1;
    }
    Ok(served)
}

/// Client `i`; the odd ones name their source address (port 0: any).
async fn client(cm: AsyncCm, to: SocketAddr, i: usize) -> R<()> {
    let data = format!("{i:03}");
    let src = (i % 2 == 1).then(|| SocketAddr::new(to.ip(), 0));
    let (mut id, _, conn) = cm
        .connect_from(
            src,
            to,
            T,
            &ConnParam::new().with_private_data(data.as_bytes()),
            setup,
        )
        .await?;
    conn.mr.write(0, &message(i))?;
    let ss = [conn.mr.sge(0..message(i).len())?];
    id.id()
        .qp()
        .ok_or("no QP")?
        .post_send(&mut [SendWr::send(i as u64, &ss).signaled()])?;
    completion(&conn.cq).await?;
    id.disconnect(T).await?;
    Ok(())
}

pub fn sixty_four_concurrent_connections(env: &TestEnv) -> TestResult {
    const N: usize = 64;
    let before = rdma_tests::resource_counts(&env.device)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = rt.block_on(async {
        let cm = AsyncCm::new()?;
        // A fixed port, so the clients know it before the listener exists.
        let addr = SocketAddr::new(IpAddr::V4(env.ipv4), 20_886);
        let server = {
            let cm = cm.clone();
            tokio::spawn(async move { serve(&cm, addr, N).await })
        };
        tokio::task::yield_now().await;
        let clients: Vec<_> = (0..N)
            .map(|i| tokio::spawn(client(cm.clone(), addr, i)))
            .collect();
        for c in clients {
            c.await??;
        }
        let served = tokio::time::timeout(T, server).await???;
        Ok::<usize, Box<dyn std::error::Error + Send + Sync>>(served)
    });
    let served = served.map_err(|e| e.to_string())?;
    check!(served == N, "served {served} of {N}");
    drop(rt);
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources leaked: before {before:?}, after {after:?}"
    );
    Ok(Outcome::Passed)
}

pub fn dropped_connect_futures_leak_nothing(env: &TestEnv) -> TestResult {
    let before = rdma_tests::resource_counts(&env.device)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let r: R<()> = rt.block_on(async {
        let cm = AsyncCm::new()?;
        let addr = SocketAddr::new(IpAddr::V4(env.ipv4), 20_887);
        let mut listener = cm.listen(addr, 16)?;
        // Connects abandoned at different points of their progress.
        for ms in [0u64, 1, 2, 5, 10, 20] {
            let param = ConnParam::new();
            let attempt = cm.connect(addr, T, &param, |id| setup(id).map(drop));
            let _ = tokio::time::timeout(Duration::from_millis(ms), attempt).await;
        }
        // Requests of abandoned connects that reached the listener are refused.
        while let Ok(Ok(req)) =
            tokio::time::timeout(Duration::from_millis(300), listener.accept()).await
        {
            // Best effort: the requester may already be gone (its id was
            // destroyed with the abandoned future), and dropping the request
            // destroys its id either way.
            let _ = req.reject(b"abandoned");
        }
        // The channel still works: a full connection.
        let server = tokio::spawn(async move {
            let mut req = listener.accept().await?;
            let _conn = setup(req.id_mut())?;
            let (mut id, _) = req.accept(&ConnParam::new(), T).await?;
            id.expect(rdma::cm::CmEventKind::Disconnected, T).await?;
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        });
        let (mut id, _, _conn) = cm.connect(addr, T, &ConnParam::new(), setup).await?;
        id.disconnect(T).await?;
        server.await??;
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

rdma_tests::tests!(
    "cm::async":
    a_refused_connection_reads_the_same_everywhere,
    connect_setup_returns_the_callers_value_and_error,
    passive_disconnect_returns_at_once,
    sixty_four_concurrent_connections,
    dropped_connect_futures_leak_nothing,
);
