//! `rdma::stream`: byte streams with tokio's `AsyncRead` and `AsyncWrite`
//! over RC connections.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdma::stream::{RdmaListener, RdmaStream, RECV_SLOTS, SEND_SLOTS, SLOT_SIZE};
use rdma_tests::{check, Outcome, TestEnv, TestResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
/// The most any step of these tests may take.
const T: Duration = Duration::from_secs(60);

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// A listener on the device's address, on a port the system picks.
fn listen(env: &TestEnv) -> R<(RdmaListener, SocketAddr)> {
    let l = RdmaListener::bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    let at = l.local_addr()?;
    Ok((l, at))
}

/// FNV-1a, 64 bits.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `len` pseudo-random bytes, different for every `seed` (xorshift64).
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Runs `f` on a fresh runtime, within `T`.
fn run<F: std::future::Future<Output = R<()>>>(f: F) -> TestResult {
    let rt = runtime()?;
    let r = rt.block_on(async {
        tokio::time::timeout(T, f)
            .await
            .unwrap_or_else(|_| Err(format!("the test took more than {T:?}").into()))
    });
    drop(rt);
    r.map_err(|e| e.to_string())?;
    Ok(Outcome::Passed)
}

/// Echoes everything it reads on `stream` until EOF, then shuts down.
async fn echo(stream: RdmaStream) -> R<u64> {
    let (mut rd, mut wr) = stream.into_split();
    let n = tokio::io::copy(&mut rd, &mut wr).await?;
    wr.shutdown().await?;
    Ok(n)
}

pub fn echo_of_every_size(env: &TestEnv) -> TestResult {
    run(async {
        let (mut l, at) = listen(env)?;
        let server = tokio::spawn(async move {
            let (s, peer) = l.accept().await?;
            check_addr(&s, peer)?;
            echo(s).await
        });
        let stream = RdmaStream::connect(at).await?;
        if stream.peer_addr()? != at {
            return Err(format!("peer_addr {:?}, not {at}", stream.peer_addr()).into());
        }
        let (mut rd, mut wr) = stream.into_split();
        let sizes = [0usize, 1, 4095, 65536, 1 << 20];
        let mut total = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let msg = pattern(i as u64 + 1, n);
            let mut back = vec![0; n];
            let (w, r) = tokio::join!(wr.write_all(&msg), rd.read_exact(&mut back));
            w?;
            r?;
            if back != msg {
                return Err(format!("the echo of {n} bytes differs").into());
            }
            total += n as u64;
        }
        wr.shutdown().await?;
        let mut rest = Vec::new();
        rd.read_to_end(&mut rest).await?;
        if !rest.is_empty() {
            return Err(format!("{} bytes after the echoes", rest.len()).into());
        }
        let echoed = server.await??;
        if echoed != total {
            return Err(format!("the server echoed {echoed} bytes of {total}").into());
        }
        Ok(())
    })
}

fn check_addr(s: &RdmaStream, peer: SocketAddr) -> R<()> {
    if s.peer_addr()? != peer || s.local_addr()?.ip() != peer.ip() {
        return Err(format!(
            "addresses: peer {:?} (accept said {peer}), local {:?}",
            s.peer_addr(),
            s.local_addr()
        )
        .into());
    }
    Ok(())
}

pub fn copy_of_16_mib_with_a_checksum(env: &TestEnv) -> TestResult {
    const LEN: usize = 16 << 20;
    run(async {
        let (mut l, at) = listen(env)?;
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await?;
            let mut got = Vec::with_capacity(LEN);
            tokio::io::copy(&mut s, &mut got).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((got.len(), fnv(&got)))
        });
        let data = pattern(16, LEN);
        let mut s = RdmaStream::connect(at).await?;
        let sent = tokio::io::copy(&mut &data[..], &mut s).await?;
        s.shutdown().await?;
        let (len, sum) = server.await??;
        if sent as usize != LEN || len != LEN || sum != fnv(&data) {
            return Err(format!(
                "sent {sent} bytes, received {len} with FNV {sum:#x}; want {LEN} with {:#x}",
                fnv(&data)
            )
            .into());
        }
        Ok(())
    })
}

pub fn eight_concurrent_streams_on_one_listener(env: &TestEnv) -> TestResult {
    const N: usize = 8;
    const LEN: usize = 256 << 10;
    let before = rdma_tests::resource_counts(&env.device)?;
    let r = run(async {
        let (mut l, at) = listen(env)?;
        let server = tokio::spawn(async move {
            let mut echoes = Vec::new();
            for _ in 0..N {
                let (s, _) = l.accept().await?;
                echoes.push(tokio::spawn(echo(s)));
            }
            for e in echoes {
                let n = e.await??;
                if n != LEN as u64 {
                    return Err(format!("a stream echoed {n} bytes").into());
                }
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        });
        let clients: Vec<_> = (0..N)
            .map(|i| {
                tokio::spawn(async move {
                    let s = RdmaStream::connect(at).await?;
                    let (mut rd, mut wr) = s.into_split();
                    let msg = pattern(100 + i as u64, LEN);
                    let writer = async {
                        wr.write_all(&msg).await?;
                        wr.shutdown().await
                    };
                    let mut back = Vec::new();
                    let (w, r) = tokio::join!(writer, rd.read_to_end(&mut back));
                    w?;
                    r?;
                    if back != msg {
                        return Err(format!("stream {i}: the echo differs").into());
                    }
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                })
            })
            .collect();
        for c in clients {
            c.await??;
        }
        server.await??;
        Ok(())
    })?;
    let after = rdma_tests::resource_counts(&env.device)?;
    check!(
        before == after,
        "resources left after the streams and the runtime are gone: before {before:?}, after {after:?}"
    );
    Ok(r)
}

pub fn half_close_then_reply(env: &TestEnv) -> TestResult {
    run(async {
        let (mut l, at) = listen(env)?;
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await?;
            let mut req = Vec::new();
            s.read_to_end(&mut req).await?;
            if req != b"request, then EOF" {
                return Err(format!("request {req:?}").into());
            }
            // After EOF the read side stays at EOF.
            if s.read(&mut [0; 8]).await? != 0 {
                return Err("data after EOF".into());
            }
            s.write_all(b"the reply").await?;
            s.shutdown().await?;
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        });
        let mut s = RdmaStream::connect(at).await?;
        s.write_all(b"request, then EOF").await?;
        s.shutdown().await?;
        if s.write(b"x").await.is_ok() {
            return Err("a write after shutdown succeeded".into());
        }
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).await?;
        if reply != b"the reply" {
            return Err(format!("reply {reply:?}").into());
        }
        server.await??;
        Ok(())
    })
}

/// Reads `s` until EOF or an error, within 10 s; the bytes read.
async fn read_until_end(s: &mut RdmaStream) -> R<(usize, std::io::Result<()>)> {
    let mut n = 0;
    let mut buf = vec![0; 1 << 16];
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(k) => n += k,
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .map_err(|_| "the survivor's read did not end within 10 s")?;
    Ok((n, end))
}

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
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
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
        if got.len() != LEN || fnv(&got) != fnv(&data) {
            return Err(format!("received {} bytes, not the {LEN} written", got.len()).into());
        }
        eprintln!("    {w} bytes written before the peer read");
        Ok(())
    })
}

/// The tests of this module.
pub const TESTS: &[rdma_tests::Test] = &[
    rdma_tests::Test {
        name: "stream::echo_of_every_size",
        run: echo_of_every_size,
    },
    rdma_tests::Test {
        name: "stream::copy_of_16_mib_with_a_checksum",
        run: copy_of_16_mib_with_a_checksum,
    },
    rdma_tests::Test {
        name: "stream::eight_concurrent_streams_on_one_listener",
        run: eight_concurrent_streams_on_one_listener,
    },
    rdma_tests::Test {
        name: "stream::half_close_then_reply",
        run: half_close_then_reply,
    },
    rdma_tests::Test {
        name: "stream::a_peer_dropped_mid_stream_ends_the_survivors_read",
        run: a_peer_dropped_mid_stream_ends_the_survivors_read,
    },
    rdma_tests::Test {
        name: "stream::a_peer_whose_runtime_dies_ends_the_survivors_read",
        run: a_peer_whose_runtime_dies_ends_the_survivors_read,
    },
    rdma_tests::Test {
        name: "stream::a_writer_whose_peer_does_not_read_waits",
        run: a_writer_whose_peer_does_not_read_waits,
    },
];
