//! A peer that goes: dropped, its runtime dead, its process killed, shut
//! down; a writer whose peer does not read waits.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma::stream::{RdmaStream, RECV_SLOTS, SEND_SLOTS, SLOT_SIZE};
use rdma_tests::{check, Outcome, TestEnv, TestResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{
    counts_back_to, current_thread_runtime, fill, listen, pair, pattern, read_until_end, run,
    PatternCheck, R,
};

pub fn a_peer_dropped_mid_stream_ends_the_survivors_read(env: &TestEnv) -> TestResult {
    run(async {
        let (mut l, at) = listen(env)?;
        let dropped = Arc::new(tokio::sync::Notify::new());
        let server = {
            let dropped = Arc::clone(&dropped);
            tokio::spawn(async move {
                let (mut s, _) = l.accept().await?;
                let mut first = vec![0; 1000];
                s.read_exact(&mut first).await?;
                // The rest once the writer is gone.
                dropped.notified().await;
                read_until_end(&mut s).await
            })
        };
        let mut c = RdmaStream::connect(at).await?;
        // More than the pipeline holds, dropped part-way through.
        let data = pattern(5, 8 << 20);
        let w = tokio::time::timeout(Duration::from_millis(300), c.write_all(&data)).await;
        if let Ok(r) = w {
            return Err(
                format!("8 MiB were written to a peer that reads 1000 bytes: {r:?}").into(),
            );
        }
        drop(c);
        dropped.notify_one();
        let (n, end) = server.await??;
        if n + 1000 > data.len() {
            return Err(format!("the survivor read {n} more bytes").into());
        }
        eprintln!("    survivor: {} bytes, then {end:?}", n + 1000);
        Ok(())
    })
}

pub fn a_peer_whose_runtime_dies_ends_the_survivors_read(env: &TestEnv) -> TestResult {
    run(async {
        let (mut l, at) = listen(env)?;
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await?;
            read_until_end(&mut s).await
        });
        // The peer on a runtime of its own, which shuts down under a live
        // stream: its driver task is dropped without a FIN or a disconnect.
        let peer = std::thread::spawn(move || -> R<()> {
            let rt = current_thread_runtime()?;
            let s = rt.block_on(async {
                let mut s = RdmaStream::connect(at).await?;
                s.write_all(&pattern(6, 100_000)).await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(s)
            })?;
            drop(rt);
            drop(s);
            Ok(())
        });
        let (n, end) = server.await??;
        peer.join().map_err(|_| "the peer thread panicked")??;
        if n != 100_000 {
            return Err(format!("the survivor read {n} bytes of 100000, then {end:?}").into());
        }
        eprintln!("    survivor: {n} bytes, then {end:?}");
        Ok(())
    })
}

pub fn a_writer_whose_peer_does_not_read_waits(env: &TestEnv) -> TestResult {
    const LEN: usize = 8 << 20;
    const CHUNK: usize = 64 << 10;
    // What the writer's send buffers and the reader's ring can hold.
    const BOUND: usize = (SEND_SLOTS + RECV_SLOTS) * SLOT_SIZE;
    run(async {
        let (mut l, at) = listen(env)?;
        let accepted = tokio::spawn(async move { l.accept().await.map(|(s, _)| s) });
        let mut c = RdmaStream::connect(at).await?;
        let mut s = accepted.await??;
        let written = Arc::new(AtomicUsize::new(0));
        let data = Arc::new(pattern(7, LEN));
        let writer = {
            let (written, data) = (Arc::clone(&written), Arc::clone(&data));
            tokio::spawn(async move {
                for chunk in data.chunks(CHUNK) {
                    c.write_all(chunk).await?;
                    written.fetch_add(chunk.len(), Ordering::Relaxed);
                }
                c.shutdown().await?;
                Ok::<_, std::io::Error>(c)
            })
        };
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let w = written.load(Ordering::Relaxed);
        if writer.is_finished() {
            return Err(format!(
                "the writer finished (or failed) at {w} bytes: {:?}",
                writer.await
            )
            .into());
        }
        if w == 0 || w > BOUND {
            return Err(format!("{w} bytes written before the peer read (bound {BOUND})").into());
        }
        let mut got = Vec::with_capacity(LEN);
        s.read_to_end(&mut got).await?;
        let _c = writer.await??;
        if got.len() != LEN || got != *data {
            return Err(format!("received {} bytes, not the {LEN} written", got.len()).into());
        }
        eprintln!("    {w} bytes written before the peer read");
        Ok(())
    })
}

// ------------------------------------------------------------ a peer process killed

/// Set in the child process of the SIGKILL test: the address it connects to.
const PEER_VAR: &str = "RDMA_TEST_STREAM_PEER";

/// From the kill, how long the survivor's read and write may take to end.
const DEATH_BOUND: Duration = Duration::from_secs(10);

const CHILD_SEED: u64 = 0xC411D;

const PARENT_SEED: u64 = 0x9A4E47;

/// The child's part: connects to the parent, writes the stream
/// `CHILD_SEED` and reads (discarding) until it is killed; gives up after
/// `T` so that it never outlives a parent that failed.
fn killed_peer(addr: &str) -> TestResult {
    let at: SocketAddr = addr.parse()?;
    run(async move {
        let s = RdmaStream::connect(at).await?;
        let (mut rd, mut wr) = s.into_split();
        let writer = async {
            let mut buf = vec![0; 48 * 1024];
            let mut pos = 0;
            loop {
                fill(CHILD_SEED, pos, &mut buf);
                wr.write_all(&buf).await?;
                pos += buf.len() as u64;
            }
        };
        let reader = async {
            let mut buf = vec![0; 64 * 1024];
            loop {
                if rd.read(&mut buf).await? == 0 {
                    return Ok::<(), io::Error>(());
                }
            }
        };
        let (w, r): (io::Result<()>, io::Result<()>) = tokio::join!(writer, reader);
        Err(format!("the peer's stream ended before the kill: write {w:?}, read {r:?}").into())
    })
}

/// The peer is another process (this binary, running this test as the
/// peer) that writes and reads a stream; once data flows both ways it gets
/// SIGKILL. The survivor's read must end (EOF or an error) and its write
/// fail within `DEATH_BOUND`, never hang; every byte read before is the
/// peer's pattern; and once the survivor drops its stream the device's
/// resources (the dead process's too) are back where they were.
pub fn a_peer_process_killed_mid_stream_ends_both_halves(env: &TestEnv) -> TestResult {
    if let Ok(addr) = std::env::var(PEER_VAR) {
        return killed_peer(&addr);
    }
    let before = rdma_tests::resource_counts(&env.device)?;
    run(async {
        let (mut l, at) = listen(env)?;
        let mut peer = std::process::Command::new(std::env::current_exe()?);
        peer.env("RDMA_TEST_CHILD", rdma_tests::current_test())
            .env(PEER_VAR, at.to_string());
        let mut child = rdma_tests::Running::start("peer", peer).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let s = loop {
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(200), l.accept()).await {
                break r?.0;
            }
            if let Some(status) = child.child.try_wait()? {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(format!(
                    "the peer process exited ({status}) before it connected: {}",
                    child.output()
                )
                .into());
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "the peer process did not connect within 30 s: {}",
                    child.output()
                )
                .into());
            }
        };
        drop(l);
        let (mut rd, mut wr) = s.into_split();
        let written = Arc::new(AtomicUsize::new(0));
        let writer = {
            let written = Arc::clone(&written);
            tokio::spawn(async move {
                let mut buf = vec![0; 40 * 1024];
                let mut pos = 0;
                let e = loop {
                    fill(PARENT_SEED, pos, &mut buf);
                    if let Err(e) = wr.write_all(&buf).await {
                        break e;
                    }
                    pos += buf.len() as u64;
                    written.store(pos as usize, Ordering::Relaxed);
                };
                (Instant::now(), e)
            })
        };
        let mut check = PatternCheck::new(CHILD_SEED);
        let mut buf = vec![0; 64 * 1024];
        let mut killed = None;
        let end = loop {
            if killed.is_none()
                && check.pos >= 2 << 20
                && written.load(Ordering::Relaxed) >= 1 << 20
            {
                child.child.kill()?;
                killed = Some(Instant::now());
            }
            let limit = match killed {
                Some(k) => DEATH_BOUND.saturating_sub(k.elapsed()),
                None => Duration::from_secs(30),
            };
            match tokio::time::timeout(limit, rd.read(&mut buf)).await {
                Err(_) if killed.is_some() => {
                    return Err(format!(
                        "the survivor's read still waits {DEATH_BOUND:?} after the kill ({} bytes read)",
                        check.pos
                    )
                    .into())
                }
                Err(_) => {
                    return Err(format!(
                        "no data flowed: {} bytes read, {} written in 30 s",
                        check.pos,
                        written.load(Ordering::Relaxed)
                    )
                    .into())
                }
                Ok(Ok(0)) => break Ok(()),
                Ok(Ok(n)) => check.check(&buf[..n])?,
                Ok(Err(e)) => break Err(e),
            }
        };
        let Some(killed) = killed else {
            return Err(format!("the read ended before the kill: {end:?}").into());
        };
        let read_end = killed.elapsed();
        let (write_end, werr) =
            tokio::time::timeout(DEATH_BOUND, writer)
                .await
                .map_err(|_| {
                    format!("the survivor's write still waits {DEATH_BOUND:?} after the kill")
                })??;
        let status = child.child.wait()?;
        use std::os::unix::process::ExitStatusExt;
        check!(
            status.signal() == Some(libc::SIGKILL),
            "the peer ended with {status}, not SIGKILL"
        );
        eprintln!(
            "    read {} bytes, wrote {}; after the kill: read ended in {read_end:?} with {end:?}, \
             write failed in {:?} with {werr}",
            check.pos,
            written.load(Ordering::Relaxed),
            write_end.saturating_duration_since(killed)
        );
        drop(rd);
        let t = counts_back_to(env, &before, Duration::from_secs(10)).await?;
        eprintln!("    resources back {t:?} after the survivor's stream was dropped");
        Ok(())
    })?;
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources left: before {before:?}, after {after:?}"
    );
    Ok(Outcome::Passed)
}

/// After `shutdown`: shutdown again is fine, writes fail with
/// `BrokenPipe`, flush succeeds, reads go on; after the peer's FIN reads
/// stay at EOF; writes to a peer that is gone fail within seconds.
pub fn reads_and_writes_after_shutdown_and_after_the_peer_left(env: &TestEnv) -> TestResult {
    run(async {
        let (mut l, at) = listen(env)?;
        let (mut c, mut s) = pair(&mut l, at).await?;
        c.write_all(b"before").await?;
        c.shutdown().await?;
        c.shutdown().await?;
        let w = c.write(b"after").await;
        check!(
            w.as_ref()
                .is_err_and(|e| e.kind() == io::ErrorKind::BrokenPipe),
            "a write after shutdown: {w:?}"
        );
        c.flush().await?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).await?;
        check!(got == b"before", "the peer read {got:?}");
        check!(s.read(&mut [0; 4]).await? == 0, "data after EOF");
        // The other way still works after the half-close.
        s.write_all(&pattern(4, 300_000)).await?;
        drop(s);
        let mut reply = Vec::new();
        c.read_to_end(&mut reply).await?;
        check!(
            reply == pattern(4, 300_000),
            "the reply after the half-close differs ({} bytes)",
            reply.len()
        );
        for _ in 0..3 {
            check!(
                c.read(&mut [0; 4]).await? == 0,
                "a read after EOF is not EOF"
            );
        }
        drop(c);

        // Writes to a peer that dropped its stream (without reading).
        let (mut c, s) = pair(&mut l, at).await?;
        drop(s);
        let start = Instant::now();
        let buf = vec![7; 32 * 1024];
        let e = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Err(e) = c.write_all(&buf).await {
                    return e;
                }
            }
        })
        .await
        .map_err(|_| "writes to a peer that left still succeed (or wait) after 10 s")?;
        let mut rest = Vec::new();
        let r = c.read_to_end(&mut rest).await;
        check!(
            r.as_ref().is_ok_and(|&n| n == 0),
            "the read after the peer left (with a FIN): {r:?}"
        );
        let sd = c.shutdown().await;
        eprintln!(
            "    a write to a peer that left failed after {:?}: {e}; then shutdown: {sd:?}",
            start.elapsed()
        );
        Ok(())
    })
}

/// A peer reads everything written, then closes its stream (FIN and
/// disconnect): nothing written is lost, so a flush afterwards succeeds,
/// as it does on a TCP stream (hyper's server flushes after the client's
/// last response and reports a failure of the connection otherwise).
/// Both for data sent from its buffer (1000 bytes, a signalled SEND) and
/// for data small enough to go inline (10 bytes: an unsignalled SEND,
/// which the credit that the peer's FIN returns shows delivered), and
/// after a peer's half-close (its last credits then come in a credit-only
/// message before it disconnects).
pub fn flush_succeeds_once_the_peer_read_everything_and_closed(env: &TestEnv) -> TestResult {
    run(async {
        let (mut l, at) = listen(env)?;
        for len in [1000, 10] {
            let (mut c, mut s) = pair(&mut l, at).await?;
            c.write_all(&pattern(12, len)).await?;
            c.flush().await?;
            let mut got = vec![0; len];
            s.read_exact(&mut got).await?;
            check!(got == pattern(12, len), "the peer read other bytes");
            drop(s);
            let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut [0; 8]))
                .await
                .map_err(|_| "no EOF 10 s after the peer closed")??;
            check!(n == 0, "{n} bytes after the peer's FIN");
            // The peer's disconnect follows its FIN.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let f = c.flush().await;
            check!(
                f.is_ok(),
                "flush with {len} bytes written, delivered and read, after the peer closed: {f:?}"
            );
        }
        // The peer half-closes first (its FIN goes before our data), reads
        // what we then write (small: inline, unsignalled), and closes: its
        // last credits still tell us that the data arrived.
        for len in [10, 1000] {
            let (mut c, mut s) = pair(&mut l, at).await?;
            s.shutdown().await?;
            check!(
                c.read(&mut [0; 8]).await? == 0,
                "no EOF after the peer's FIN"
            );
            c.write_all(&pattern(13, len)).await?;
            let mut got = vec![0; len];
            s.read_exact(&mut got).await?;
            check!(got == pattern(13, len), "the peer read other bytes");
            drop(s);
            tokio::time::sleep(Duration::from_millis(500)).await;
            let f = c.flush().await;
            check!(
                f.is_ok(),
                "flush with {len} bytes written after the peer's FIN, read, and the peer closed: {f:?}"
            );
            let sd = c.shutdown().await;
            check!(sd.is_ok(), "shutdown after that: {sd:?}");
        }
        Ok(())
    })
}

rdma_tests::tests!(
    "stream":
    reads_and_writes_after_shutdown_and_after_the_peer_left,
    flush_succeeds_once_the_peer_read_everything_and_closed,
    a_peer_dropped_mid_stream_ends_the_survivors_read,
    a_peer_whose_runtime_dies_ends_the_survivors_read,
    a_peer_process_killed_mid_stream_ends_both_halves,
    a_writer_whose_peer_does_not_read_waits,
);
