//! `rdma::stream`'s message endpoints, one-sided requests and blocking
//! streams.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdma::stream::{blocking, MessageEndpoint, MessageListener, RdmaListener, RdmaStream};
use rdma::stream::{MAX_MESSAGE, RECV_SLOTS, SEND_SLOTS};
use rdma::{AccessFlags, RemoteMemory};
use rdma_tests::{Outcome, TestEnv, TestResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
/// The most any test may take.
const T: Duration = Duration::from_secs(60);

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

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

fn at(env: &TestEnv) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(env.ipv4), 0)
}

/// A connected pair of message endpoints: (client, server).
async fn pair(env: &TestEnv) -> R<(MessageEndpoint, MessageEndpoint)> {
    let mut l = MessageListener::bind(at(env))?;
    let addr = l.local_addr()?;
    let server = tokio::spawn(async move { l.accept().await.map(|(e, _)| e) });
    let c = MessageEndpoint::connect(addr).await?;
    let s = server.await??;
    Ok((c, s))
}

async fn recv_some(e: &MessageEndpoint) -> R<rdma::stream::Message> {
    e.recv()
        .await?
        .ok_or_else(|| "the peer's end came before a message".into())
}

pub fn boundaries_of_sizes_0_1_max_and_max_plus_1(env: &TestEnv) -> TestResult {
    run(async {
        let (c, s) = pair(env).await?;
        let peer_addr = c.peer_addr()?;
        if peer_addr.ip() != IpAddr::V4(env.ipv4) {
            return Err(format!("peer_addr {peer_addr}").into());
        }
        // The server echoes every message as it is.
        let echo = tokio::spawn(async move {
            let mut n = 0;
            while let Some(m) = s.recv().await? {
                s.send(&m).await?;
                n += 1;
            }
            s.shutdown().await?;
            Ok::<_, std::io::Error>(n)
        });
        let sizes = [0usize, 1, MAX_MESSAGE, 2, 0, MAX_MESSAGE - 1];
        for (i, &n) in sizes.iter().enumerate() {
            c.send(&pattern(i as u64, n)).await?;
        }
        // Too long: refused before anything is sent.
        let big = pattern(99, MAX_MESSAGE + 1);
        match c.send(&big).await {
            Err(e) if e.kind() == ErrorKind::InvalidInput => {}
            r => return Err(format!("a message of MAX_MESSAGE + 1 bytes: {r:?}").into()),
        }
        c.send(b"after the refused one").await?;
        for (i, &n) in sizes.iter().enumerate() {
            let m = recv_some(&c).await?;
            if m.len() != n || *m != pattern(i as u64, n)[..] {
                return Err(format!("message {i}: {} bytes back, sent {n}", m.len()).into());
            }
        }
        let m = recv_some(&c).await?;
        if &*m != b"after the refused one" {
            return Err(format!("after the refused message: {:?}", &m[..m.len().min(32)]).into());
        }
        drop(m);
        c.shutdown().await?;
        if let Some(m) = c.recv().await? {
            return Err(format!("a message of {} bytes after the echoes", m.len()).into());
        }
        let n = echo.await??;
        if n != sizes.len() + 1 {
            return Err(format!("the server echoed {n} messages").into());
        }
        Ok(())
    })
}

/// The size of message `i` of the test below: mostly small (0 to 2 KiB),
/// every 50th of the most, every 7th empty.
fn size(i: usize) -> usize {
    match i {
        _ if i % 50 == 0 => MAX_MESSAGE,
        _ if i % 7 == 0 => 0,
        _ => (i * 37) % 2048,
    }
}

pub fn many_messages_with_a_slow_receiver(env: &TestEnv) -> TestResult {
    const N: usize = 3000;
    run(async {
        let (c, s) = pair(env).await?;
        let sent = Arc::new(AtomicUsize::new(0));
        let sender = {
            let sent = Arc::clone(&sent);
            tokio::spawn(async move {
                for i in 0..N {
                    let len = size(i);
                    let mut m = pattern(i as u64, len.max(8));
                    m.truncate(len);
                    if len >= 8 {
                        m[..8].copy_from_slice(&(i as u64).to_le_bytes());
                    }
                    c.send(&m).await?;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                c.shutdown().await?;
                Ok::<_, std::io::Error>(c)
            })
        };
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let early = sent.load(Ordering::Relaxed);
        if sender.is_finished() || early == 0 || early > SEND_SLOTS + RECV_SLOTS {
            return Err(format!(
                "{early} messages sent before the receiver received (bound {})",
                SEND_SLOTS + RECV_SLOTS
            )
            .into());
        }
        for i in 0..N {
            let m = recv_some(&s).await?;
            let len = size(i);
            let mut want = pattern(i as u64, len.max(8));
            want.truncate(len);
            if len >= 8 {
                want[..8].copy_from_slice(&(i as u64).to_le_bytes());
            }
            if *m != want[..] {
                return Err(format!(
                    "message {i}: {} bytes, want {len} (first bytes {:?})",
                    m.len(),
                    &m[..m.len().min(8)]
                )
                .into());
            }
            // Slow now and then.
            if i % 500 == 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        if let Some(m) = s.recv().await? {
            return Err(format!("a message of {} bytes after the last", m.len()).into());
        }
        let _c = sender.await??;
        eprintln!("    {early} messages sent before the receiver started");
        Ok(())
    })
}

pub fn a_held_message_blocks_nothing_else(env: &TestEnv) -> TestResult {
    const N: usize = 10 * RECV_SLOTS;
    run(async {
        let (c, s) = pair(env).await?;
        let s = Arc::new(s);
        let first = pattern(1, 1000);
        c.send(&first).await?;
        let held = recv_some(&s).await?;
        // Many more than the ring while the first is held, and a reply.
        let sender = tokio::spawn(async move {
            for i in 0..N {
                c.send(&(i as u32).to_le_bytes()).await?;
            }
            let reply = recv_some(&c)
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            Ok::<_, std::io::Error>(reply.to_vec())
        });
        for i in 0..N {
            let m = recv_some(&s).await?;
            if *m != (i as u32).to_le_bytes() {
                return Err(format!("message {i} reads {:?}", &m[..]).into());
            }
        }
        s.send(b"reply while holding").await?;
        let reply = sender.await??;
        if reply != b"reply while holding" {
            return Err(format!("reply {reply:?}").into());
        }
        if *held != first[..] {
            return Err("the held message changed".into());
        }
        Ok(())
    })
}

/// The server side of the one-sided tests: registers `len` bytes the peer
/// may write and read, sends their descriptor, waits for "done" and
/// returns the region's bytes then.
async fn exposed_region(s: MessageEndpoint, len: usize) -> R<Vec<u8>> {
    let mr = s.register(
        len,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )?;
    s.send(&mr.remote(..)?.to_bytes()).await?;
    let done = recv_some(&s).await?;
    if &*done != b"done" {
        return Err(format!("{:?} instead of done", &done[..]).into());
    }
    Ok(mr.to_vec(..)?)
}

pub fn one_sided_write_then_read_back(env: &TestEnv) -> TestResult {
    const LEN: usize = 1 << 20;
    run(async {
        let (c, s) = pair(env).await?;
        let server = tokio::spawn(exposed_region(s, LEN));
        let remote = RemoteMemory::from_bytes(&recv_some(&c).await?)?;
        if remote.len != LEN as u64 {
            return Err(format!("remote {remote:?}").into());
        }
        let local = c.register(2 * LEN, AccessFlags::LOCAL_WRITE)?;
        let data = pattern(3, LEN);
        local.write(0, &data)?;
        // All of it, then a part at an odd offset.
        c.write_remote(&local, 0..LEN, &remote).await?;
        let part = pattern(4, 4097);
        local.write(100, &part)?;
        c.write_remote(&local, 100..100 + 4097, &remote.slice(12345, 4097)?)
            .await?;
        c.read_remote(&local, LEN..2 * LEN, &remote).await?;
        let mut want = data.clone();
        want[12345..12345 + 4097].copy_from_slice(&part);
        if local.to_vec(LEN..2 * LEN)? != want {
            return Err("the READ back differs from what was written".into());
        }
        c.send(b"done").await?;
        let theirs = server.await??;
        if theirs != want {
            return Err("the peer's region differs from what was written".into());
        }
        Ok(())
    })
}

pub fn one_sided_on_a_stream(env: &TestEnv) -> TestResult {
    run(async {
        let mut l = RdmaListener::bind(at(env))?;
        let addr = l.local_addr()?;
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await?;
            let mr = s.register(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
            s.write_all(&mr.remote(..)?.to_bytes()).await?;
            let mut done = [0; 4];
            s.read_exact(&mut done).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(mr.to_vec(..)?)
        });
        let mut c = RdmaStream::connect(addr).await?;
        let mut b = [0; RemoteMemory::WIRE_LEN];
        c.read_exact(&mut b).await?;
        let remote = RemoteMemory::from_bytes(&b)?;
        let local = c.register(4096, AccessFlags::empty())?;
        let data = pattern(8, 4096);
        local.write(0, &data)?;
        c.write_remote(&local, 0..4096, &remote).await?;
        c.write_all(b"done").await?;
        if server.await?? != data {
            return Err("the peer's region differs".into());
        }
        Ok(())
    })
}

/// Local mistakes are refused before posting and leave the connection
/// usable; a write past the peer's region (or with a bad rkey) fails on
/// the device with a typed error and ends the connection.
pub fn bad_one_sided_requests_are_typed_errors(env: &TestEnv) -> TestResult {
    run(async {
        for forge in ["out of range", "bad rkey"] {
            let (c, s) = pair(env).await?;
            let server = tokio::spawn(async move {
                let r = exposed_region(s, 4096).await;
                Ok::<_, std::io::Error>(r.is_ok())
            });
            let remote = RemoteMemory::from_bytes(&recv_some(&c).await?)?;
            let local = c.register(8192, AccessFlags::LOCAL_WRITE)?;
            // Checked here, nothing posted.
            let refused = [
                (
                    "local range past the region",
                    c.write_remote(&local, 8000..8200, &remote.slice(0, 200)?)
                        .await,
                ),
                (
                    "lengths differ",
                    c.write_remote(&local, 0..100, &remote).await,
                ),
                (
                    "reversed range",
                    c.write_remote(&local, std::ops::Range { start: 10, end: 5 }, &remote)
                        .await,
                ),
            ];
            for (what, r) in refused {
                match r {
                    Err(e) if e.kind() == ErrorKind::InvalidInput => {}
                    r => return Err(format!("{what}: {r:?}").into()),
                }
            }
            if remote.slice(4000, 200).is_ok() {
                return Err("RemoteMemory::slice accepted a range past the end".into());
            }
            let no_write = c.register(64, AccessFlags::empty())?;
            match c.read_remote(&no_write, 0..64, &remote.slice(0, 64)?).await {
                Err(e) if e.kind() == ErrorKind::InvalidInput => {}
                r => return Err(format!("a READ into a region without LOCAL_WRITE: {r:?}").into()),
            }
            // Still usable: a good write.
            c.write_remote(&local, 0..4096, &remote).await?;
            // Now what only the peer can refuse.
            let bad = match forge {
                "out of range" => RemoteMemory {
                    addr: remote.addr + 4096,
                    len: 4096,
                    rkey: remote.rkey,
                },
                _ => RemoteMemory {
                    rkey: remote.rkey ^ 0x5a5a_5a00,
                    ..remote
                },
            };
            let r = tokio::time::timeout(
                Duration::from_secs(20),
                c.write_remote(&local, 0..4096, &bad),
            )
            .await
            .map_err(|_| format!("{forge}: the write did not complete within 20 s"))?;
            let e = match r {
                Ok(()) => return Err(format!("{forge}: the write succeeded").into()),
                Err(e) => e,
            };
            eprintln!("    {forge}: {:?}: {e}", e.kind());
            // IB and RoCE report the peer's answer; on iWARP the peer's
            // Terminate ends the connection without a cause.
            let typed = match env.provider {
                rdma_tests::Provider::Siw => e.kind() == ErrorKind::ConnectionAborted,
                _ => matches!(
                    e.kind(),
                    ErrorKind::PermissionDenied | ErrorKind::InvalidInput
                ),
            };
            if !typed {
                return Err(format!("{forge}: {:?}: {e}", e.kind()).into());
            }
            // The connection is over (RC: the QP is in error).
            let after = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    if let Err(e) = c.send(b"x").await {
                        return e;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .map_err(|_| format!("{forge}: sends still succeed 10 s after the error"))?;
            eprintln!("    then send: {:?}", after.kind());
            drop(c);
            let _ = server.await?;
        }
        Ok(())
    })
}

/// Writes whose futures are dropped part-way: the driver keeps the region
/// (even once the caller dropped its own handle) until they complete, so
/// the device never meets a freed region (which would fail the connection
/// with a local protection error), and later requests succeed.
pub fn a_cancelled_write_keeps_its_region(env: &TestEnv) -> TestResult {
    const LEN: usize = 4 << 20;
    run(async {
        let (c, s) = pair(env).await?;
        let server = tokio::spawn(exposed_region(s, LEN));
        let remote = RemoteMemory::from_bytes(&recv_some(&c).await?)?;
        let mut cancelled = 0;
        for i in 0..20u64 {
            let local = c.register(LEN, AccessFlags::LOCAL_WRITE)?;
            local.fill(.., i as u8 + 1)?;
            let w = c.write_remote(&local, 0..LEN, &remote);
            tokio::select! {
                r = w => { r?; }
                _ = tokio::time::sleep(Duration::from_micros(50 * i)) => cancelled += 1,
            }
            drop(local);
            // Memory churn: what a freed region would be reused for.
            let churn: Vec<Vec<u8>> = (0..4).map(|k| vec![0xee ^ k; LEN]).collect();
            drop(churn);
        }
        // A later request, ordered after the cancelled ones on the QP.
        let last = c.register(LEN, AccessFlags::LOCAL_WRITE)?;
        last.fill(.., 0x77)?;
        c.write_remote(&last, 0..LEN, &remote).await?;
        let back = c.register(LEN, AccessFlags::LOCAL_WRITE)?;
        c.read_remote(&back, 0..LEN, &remote).await?;
        if back.to_vec(..)?.iter().any(|&b| b != 0x77) {
            return Err("the last write is not what the peer's region holds".into());
        }
        c.send(b"done").await?;
        let theirs = server.await??;
        if theirs.iter().any(|&b| b != 0x77) {
            return Err("the peer's region is not the last write".into());
        }
        eprintln!("    {cancelled} of 20 writes cancelled");
        Ok(())
    })
}

/// Waits (up to 10 s) until the device's resource counts are `want`
/// again: the blocking streams' drivers close on the process-wide runtime
/// within `LINGER + FLUSH_WAIT` after the streams are dropped.
fn counts_back(env_device: &str, want: &std::collections::BTreeMap<String, u64>) -> R<()> {
    let start = std::time::Instant::now();
    loop {
        let now = rdma_tests::resource_counts(env_device).map_err(|e| e.to_string())?;
        if &now == want {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err(
                format!("resources not back to {want:?} 10 s after the streams: {now:?}").into(),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `f` on a plain thread (no runtime anywhere on it), within `T`.
fn on_a_thread(f: impl FnOnce() -> R<()> + Send + 'static) -> TestResult {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err("the test panicked".into()));
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    rx.recv_timeout(T)
        .map_err(|_| format!("the test took more than {T:?}"))??;
    Ok(Outcome::Passed)
}

pub fn blocking_echo_between_two_threads(env: &TestEnv) -> TestResult {
    const LEN: usize = 4 << 20;
    let addr = at(env);
    let device = env.device.clone();
    let before = rdma_tests::resource_counts(&device)?;
    on_a_thread(move || {
        let l = blocking::RdmaListener::bind(addr)?;
        let addr = l.local_addr()?;
        let server = std::thread::spawn(move || -> R<u64> {
            let (mut s, _) = l.accept()?;
            let (mut rd, mut wr) = (&s, &s);
            let n = std::io::copy(&mut rd, &mut wr)?;
            s.shutdown(std::net::Shutdown::Write)?;
            s.flush()?;
            Ok(n)
        });
        let c = Arc::new(blocking::RdmaStream::connect(addr)?);
        // An idle read times out, having consumed nothing.
        c.set_read_timeout(Some(Duration::from_millis(100)))?;
        match (&*c).read(&mut [0; 16]) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            r => return Err(format!("an idle read with a timeout: {r:?}").into()),
        }
        if c.set_read_timeout(Some(Duration::ZERO)).is_ok() {
            return Err("a zero read timeout was accepted".into());
        }
        c.set_read_timeout(None)?;
        let data = Arc::new(pattern(9, LEN));
        let writer = {
            let (c, data) = (Arc::clone(&c), Arc::clone(&data));
            std::thread::spawn(move || -> std::io::Result<()> {
                (&*c).write_all(&data)?;
                c.shutdown(std::net::Shutdown::Write)
            })
        };
        let mut back = Vec::new();
        (&*c).read_to_end(&mut back)?;
        writer.join().map_err(|_| "the writer panicked")??;
        let n = server.join().map_err(|_| "the server panicked")??;
        if n != LEN as u64 || back != *data {
            return Err(format!("echoed {n} bytes, read back {} of {LEN}", back.len()).into());
        }
        drop(c);
        counts_back(&device, &before)
    })
}

pub fn blocking_use_inside_a_runtime_is_refused(env: &TestEnv) -> TestResult {
    let addr = at(env);
    let device = env.device.clone();
    let before = rdma_tests::resource_counts(&device)?;
    on_a_thread(move || {
        // A stream made outside any runtime, used inside one.
        let l = blocking::RdmaListener::bind(addr)?;
        let laddr = l.local_addr()?;
        let server = std::thread::spawn(move || l.accept().map(|(s, _)| s));
        let c = Arc::new(blocking::RdmaStream::connect(laddr)?);
        let s = server.join().map_err(|_| "the server panicked")??;
        let rt = runtime()?;
        let inside = Arc::clone(&c);
        let (r_read, r_write, r_connect, r_bind) = rt.block_on(async move {
            let task = tokio::spawn(async move {
                let r = (&*inside).read(&mut [0; 8]).map(|_| ());
                let w = (&*inside).write(b"x").map(|_| ());
                (r, w)
            });
            let (r, w) = task.await.expect("the task panicked");
            let cn = blocking::RdmaStream::connect(laddr).map(|_| ());
            let b = blocking::RdmaListener::bind(addr).map(|_| ());
            (r, w, cn, b)
        });
        for (what, r) in [
            ("read", r_read),
            ("write", r_write),
            ("connect", r_connect),
            ("bind", r_bind),
        ] {
            match r {
                Err(e) if e.kind() == ErrorKind::Unsupported => {}
                r => return Err(format!("{what} inside a runtime: {r:?}").into()),
            }
        }
        drop(rt);
        // Outside again, the same stream works (nothing was sent inside).
        (&*c).write_all(b"still")?;
        let mut got = [0; 5];
        (&s).read_exact(&mut got)?;
        if &got != b"still" {
            return Err(format!("read {got:?} after the refused calls").into());
        }
        drop((c, s));
        counts_back(&device, &before)
    })
}

/// Accepts dropped while a connection comes in lose nothing: the
/// listener accepts in the background, and the next call gets it.
pub fn a_cancelled_accept_loses_no_connection(env: &TestEnv) -> TestResult {
    run(async {
        let mut l = RdmaListener::bind(at(env))?;
        let addr = l.local_addr()?;
        let client = tokio::spawn(async move {
            let mut c = RdmaStream::connect(addr).await?;
            c.write_all(b"first").await?;
            let mut back = [0; 4];
            c.read_exact(&mut back).await?;
            Ok::<_, std::io::Error>(back)
        });
        // Accepts cancelled every millisecond, through the connection's
        // whole set-up.
        let mut cancelled = 0;
        let (mut s, _) = loop {
            match tokio::time::timeout(Duration::from_millis(1), l.accept()).await {
                Ok(r) => break r?,
                Err(_) => cancelled += 1,
            }
            if cancelled > 20_000 {
                return Err("no connection after 20000 cancelled accepts".into());
            }
        };
        let mut first = [0; 5];
        s.read_exact(&mut first).await?;
        s.write_all(b"back").await?;
        if &first != b"first" || &client.await?? != b"back" {
            return Err("the exchange over the accepted stream differs".into());
        }
        // A message listener too, and an accept dropped with nothing coming.
        let mut ml = MessageListener::bind(at(env))?;
        let maddr = ml.local_addr()?;
        if tokio::time::timeout(Duration::from_millis(50), ml.accept())
            .await
            .is_ok()
        {
            return Err("an accept returned with no requester".into());
        }
        let c = tokio::spawn(async move { MessageEndpoint::connect(maddr).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (e, _) = ml.accept().await?;
        let c = c.await??;
        c.send(b"m").await?;
        if &*recv_some(&e).await? != b"m" {
            return Err("the message over the accepted endpoint differs".into());
        }
        eprintln!("    {cancelled} accepts cancelled before the connection");
        Ok(())
    })
}

rdma_tests::tests!(
    "stream_msg":
    boundaries_of_sizes_0_1_max_and_max_plus_1,
    many_messages_with_a_slow_receiver,
    a_held_message_blocks_nothing_else,
    one_sided_write_then_read_back,
    one_sided_on_a_stream,
    bad_one_sided_requests_are_typed_errors,
    a_cancelled_write_keeps_its_region,
    a_cancelled_accept_loses_no_connection,
    blocking_echo_between_two_threads,
    blocking_use_inside_a_runtime_is_refused,
);
