//! Streams, listeners and accepts dropped or cancelled mid-way release
//! everything and leave the listener usable.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma::stream::{RdmaListener, RdmaStream};
use rdma_tests::{check, Outcome, TestEnv, TestResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{counts, counts_back_to, echo, listen, pair, pattern, run, run_within};

// ------------------------------------------------------------ drops mid-write

/// Rounds of streams dropped in the middle of writes, in four ways at
/// once; after each round the device's PD, CQ, QP, MR and CM id counts
/// must be back to what they were with only the listener (no growth).
pub fn streams_dropped_mid_write_leak_no_kernel_resources(env: &TestEnv) -> TestResult {
    const ROUNDS: usize = 5;
    const BIG: usize = 8 << 20;
    let before = rdma_tests::resource_counts(&env.device)?;
    run_within(Duration::from_secs(120), async {
        let (mut l, at) = listen(env)?;
        let base = counts(env)?;
        let data = Arc::new(pattern(9, BIG));
        let mut times = Vec::new();
        for round in 0..ROUNDS {
            let (c1, s1) = pair(&mut l, at).await?;
            let (c2, s2) = pair(&mut l, at).await?;
            let (c3, s3) = pair(&mut l, at).await?;
            let (c4, s4) = pair(&mut l, at).await?;
            check!(
                counts(env)?.get("qp") > base.get("qp"),
                "round {round}: no QP counted for the open streams: {:?}",
                counts(env)?
            );
            // 1: the writer's peer does not read; the writer is dropped
            // with its buffers full, then the peer.
            let one = {
                let data = Arc::clone(&data);
                async move {
                    let mut c1 = c1;
                    let w =
                        tokio::time::timeout(Duration::from_millis(200), c1.write_all(&data)).await;
                    check!(w.is_err(), "8 MiB went to a peer that does not read: {w:?}");
                    drop(c1);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    drop(s1);
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                }
            };
            // 2: the peer reads; the writer is dropped mid-way, the peer
            // reads what came (a prefix) until the end.
            let two = {
                let data = Arc::clone(&data);
                async move {
                    let mut c2 = c2;
                    let mut s2 = s2;
                    let reader = tokio::spawn(async move {
                        let mut got = Vec::new();
                        let r = s2.read_to_end(&mut got).await;
                        (got, r.err())
                    });
                    let _ =
                        tokio::time::timeout(Duration::from_millis(100), c2.write_all(&data)).await;
                    drop(c2);
                    let (got, _end) = tokio::time::timeout(Duration::from_secs(10), reader)
                        .await
                        .map_err(|_| "the reader of a dropped writer did not end in 10 s")??;
                    check!(
                        got.len() <= BIG && got[..] == data[..got.len()],
                        "the reader of a dropped writer got {} bytes that are not the prefix",
                        got.len()
                    );
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                }
            };
            // 3: the accepted side is the writer, dropped mid-write.
            let three = {
                let data = Arc::clone(&data);
                async move {
                    let mut s3 = s3;
                    let w =
                        tokio::time::timeout(Duration::from_millis(200), s3.write_all(&data)).await;
                    check!(w.is_err(), "8 MiB went to a peer that does not read: {w:?}");
                    drop(s3);
                    drop(c3);
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                }
            };
            // 4: split; the write half's task is aborted mid-write, the
            // read half was dropped before.
            let four = {
                let data = Arc::clone(&data);
                async move {
                    let (rd, mut wr) = c4.into_split();
                    drop(rd);
                    let task = tokio::spawn(async move { wr.write_all(&data).await });
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    check!(
                        !task.is_finished(),
                        "the write to a peer that does not read ended"
                    );
                    task.abort();
                    let _ = task.await;
                    drop(s4);
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                }
            };
            let (a, b, c, d) = tokio::join!(one, two, three, four);
            a.map_err(|e| format!("round {round}, way 1: {e}"))?;
            b.map_err(|e| format!("round {round}, way 2: {e}"))?;
            c.map_err(|e| format!("round {round}, way 3: {e}"))?;
            d.map_err(|e| format!("round {round}, way 4: {e}"))?;
            let t = counts_back_to(env, &base, Duration::from_secs(10))
                .await
                .map_err(|e| format!("round {round}: {e}"))?;
            times.push(t.as_millis());
        }
        eprintln!("    {ROUNDS} rounds of 4 drops: resources back after {times:?} ms; {base:?}");
        Ok(())
    })?;
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources left: before {before:?}, after {after:?}"
    );
    Ok(Outcome::Passed)
}

// ------------------------------------------------------------ edges

/// Clients connect to a listener that never calls `accept`, more than
/// its backlog; once it is dropped each of them ends within `BOUND`,
/// never hangs: its connect fails, or (when the listener had accepted it
/// in the background) its stream reads EOF or an error and no data. A
/// connect once the listener's task was aborted with an `accept` pending
/// fails too; the port can be bound again and serves; nothing leaks.
pub fn dropping_the_listener_ends_its_pending_connects(env: &TestEnv) -> TestResult {
    /// More than the listener's backlog (16).
    const N: usize = 20;
    const BOUND: Duration = Duration::from_secs(15);
    let before = rdma_tests::resource_counts(&env.device)?;
    run(async {
        let (l, at) = listen(env)?;
        let dropped = Arc::new(tokio::sync::Notify::new());
        let clients: Vec<_> = (0..N)
            .map(|_| {
                let dropped = Arc::clone(&dropped);
                tokio::spawn(async move {
                    let notified = dropped.notified();
                    let r = RdmaStream::connect(at).await;
                    let connected = r.is_ok();
                    let r = match r {
                        Ok(mut s) => {
                            notified.await;
                            let mut buf = [0; 16];
                            match s.read(&mut buf).await {
                                Ok(0) => Ok("EOF".to_string()),
                                Ok(n) => Err(format!("read {n} bytes from a listener's queue")),
                                Err(e) => Ok(format!("{}", e.kind())),
                            }
                        }
                        Err(e) => Ok(format!("connect: {}", e.kind())),
                    };
                    (Instant::now(), connected, r)
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let early = clients.iter().filter(|c| c.is_finished()).count();
        drop(l);
        let at_drop = Instant::now();
        dropped.notify_waiters();
        let mut ends = Vec::new();
        let mut connected = 0;
        for (i, c) in clients.into_iter().enumerate() {
            let (end, ok, r) = tokio::time::timeout(BOUND, c).await.map_err(|_| {
                format!("client {i} still waits {BOUND:?} after the listener was dropped")
            })??;
            let how = r.map_err(|e| format!("client {i}: {e}"))?;
            connected += usize::from(ok);
            ends.push(format!(
                "{how} {}ms",
                end.saturating_duration_since(at_drop).as_millis()
            ));
        }
        eprintln!(
            "    {N} clients, {early} ended before the drop, {connected} connected; after the drop: {ends:?}"
        );
        // The port again, then an accept pending when the task holding
        // the listener is aborted.
        let mut l = RdmaListener::bind(at)?;
        check!(
            l.local_addr()? == at,
            "bound {:?}, not {at}",
            l.local_addr()
        );
        let (c, s) = pair(&mut l, at).await?;
        let server = tokio::spawn(echo(s));
        let (mut rd, mut wr) = c.into_split();
        wr.write_all(b"on the port again").await?;
        wr.shutdown().await?;
        let mut back = Vec::new();
        rd.read_to_end(&mut back).await?;
        check!(back == b"on the port again", "echo {back:?}");
        server.await??;
        drop((rd, wr));
        let waiting = tokio::spawn(async move { l.accept().await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(200)).await;
        check!(!waiting.is_finished(), "an accept with no requester ended");
        waiting.abort();
        check!(
            waiting.await.is_err_and(|e| e.is_cancelled()),
            "the aborted accept was not cancelled"
        );
        let start = Instant::now();
        let late = tokio::time::timeout(BOUND, RdmaStream::connect(at))
            .await
            .map_err(|_| {
                format!("a connect to the dropped listener still waits after {BOUND:?}")
            })?;
        check!(late.is_err(), "a connect to a dropped listener succeeded");
        eprintln!(
            "    a connect after the listener's task was aborted failed in {:?}: {}",
            start.elapsed(),
            late.unwrap_err()
        );
        Ok(())
    })?;
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources left: before {before:?}, after {after:?}"
    );
    Ok(Outcome::Passed)
}

/// Accepts cancelled at ever later points (a timeout around each) while
/// clients connect: every client's connect ends; a client whose accept
/// was cancelled mid-way either fails or, if its connect completed, sees
/// its stream end (EOF or an error) within seconds; the accepted ones
/// echo; the listener then accepts a new client, and nothing leaks.
pub fn accepts_cancelled_mid_way_leave_the_listener_usable(env: &TestEnv) -> TestResult {
    const N: usize = 6;
    let before = rdma_tests::resource_counts(&env.device)?;
    run(async {
        let (mut l, at) = listen(env)?;
        let clients: Vec<_> = (0..N)
            .map(|_| tokio::spawn(async move { RdmaStream::connect(at).await }))
            .collect();
        let mut accepted = Vec::new();
        let mut cancelled = 0;
        let mut wait = Duration::from_micros(500);
        let start = Instant::now();
        while accepted.len() < N && start.elapsed() < Duration::from_secs(20) {
            if clients.iter().all(|c| c.is_finished()) && wait > Duration::from_millis(300) {
                break;
            }
            match tokio::time::timeout(wait, l.accept()).await {
                Ok(r) => accepted.push(r?.0),
                Err(_) => {
                    cancelled += 1;
                    wait += wait / 4;
                }
            }
        }
        let (mut orphans, mut refused) = (0, 0);
        for (i, c) in clients.into_iter().enumerate() {
            let r = tokio::time::timeout(Duration::from_secs(15), c)
                .await
                .map_err(|_| format!("client {i} still waits 15 s after the accepts"))??;
            let Ok(mut cs) = r else {
                refused += 1;
                continue;
            };
            let me = cs.local_addr()?;
            match accepted.iter().position(|s| s.peer_addr().ok() == Some(me)) {
                Some(k) => {
                    let s = accepted.swap_remove(k);
                    let server = tokio::spawn(echo(s));
                    let msg = pattern(20 + i as u64, 70_000);
                    cs.write_all(&msg).await?;
                    cs.shutdown().await?;
                    let mut back = Vec::new();
                    cs.read_to_end(&mut back).await?;
                    check!(back == msg, "client {i}: the echo differs");
                    server.await??;
                }
                None => {
                    // Connected, but its accept was cancelled: the stream
                    // must end, not hang.
                    orphans += 1;
                    let end = tokio::time::timeout(Duration::from_secs(10), cs.read(&mut [0; 16]))
                        .await
                        .map_err(|_| {
                            format!(
                                "client {i}, whose accept was cancelled, still reads after 10 s"
                            )
                        })?;
                    check!(
                        !matches!(end, Ok(n) if n > 0),
                        "client {i}, whose accept was cancelled, read data"
                    );
                }
            }
        }
        check!(
            accepted.is_empty(),
            "{} accepted streams have no client",
            accepted.len()
        );
        // The listener serves a new client.
        let (c, s) = pair(&mut l, at).await?;
        let server = tokio::spawn(echo(s));
        let (mut rd, mut wr) = c.into_split();
        wr.write_all(&pattern(3, 100_000)).await?;
        wr.shutdown().await?;
        let mut back = Vec::new();
        rd.read_to_end(&mut back).await?;
        check!(
            back == pattern(3, 100_000),
            "the echo after the cancelled accepts differs"
        );
        server.await??;
        eprintln!(
            "    {cancelled} accepts cancelled; of {N} clients {refused} failed to connect, \
             {orphans} connected without an accept (their streams ended)"
        );
        Ok(())
    })?;
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources left: before {before:?}, after {after:?}"
    );
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "stream":
    streams_dropped_mid_write_leak_no_kernel_resources,
    dropping_the_listener_ends_its_pending_connects,
    accepts_cancelled_mid_way_leave_the_listener_usable,
);
