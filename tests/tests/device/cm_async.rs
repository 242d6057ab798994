//! The connection manager on tokio: many connections on one event channel.

use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rdma::cm::{AsyncCm, CmId, ConnParam};
use rdma::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType, RecvWr, SendWr,
    WorkCompletion,
};
use rdma_tests::{check, Outcome, TestEnv, TestResult};
use tokio_stream::StreamExt;

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
    sixty_four_concurrent_connections,
    dropped_connect_futures_leak_nothing,
);
