//! `rdma::stream`: byte streams with tokio's `AsyncRead` and `AsyncWrite`
//! over RC connections: echoes, bulk copies, many streams, hyper's HTTP/1.1
//! over them, peers that die (threads and SIGKILLed processes), a raw
//! peer that speaks another wire format, streams
//! dropped mid-write (the kernel's resource counts), and the cancellation
//! and shutdown edges.

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::SinkExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rdma::stream::{RdmaListener, RdmaStream, MAX_PAYLOAD, RECV_SLOTS, SEND_SLOTS, SLOT_SIZE};
use rdma_tests::{check, Outcome, Provider, TestEnv, TestResult};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_stream::StreamExt;
use tokio_util::codec::{Framed, FramedRead, FramedWrite, LengthDelimitedCodec};

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
/// The most any step of these tests may take.
const T: Duration = Duration::from_secs(60);
/// Resource counts of the device, as `rdma resource show` gives them.
type Counts = std::collections::BTreeMap<String, u64>;

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// One thread for the test and the streams' drivers.
fn current_thread_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// A listener on the device's address, on a port the system picks.
fn listen(env: &TestEnv) -> R<(RdmaListener, SocketAddr)> {
    let l = RdmaListener::bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    let at = l.local_addr()?;
    Ok((l, at))
}

/// Word `k` of the pattern `seed` (splitmix64 of the two).
fn word(seed: u64, k: u64) -> u64 {
    let mut z = seed.wrapping_add(k.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` with the bytes at `offset..` of the endless pseudo-random
/// stream `seed` (little-endian words of [`word`]): any piece of a stream
/// can be checked where it stands.
fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut pos = offset;
    let mut rest = buf;
    while !rest.is_empty() {
        let skip = (pos % 8) as usize;
        let w = word(seed, pos / 8).to_le_bytes();
        let n = (8 - skip).min(rest.len());
        rest[..n].copy_from_slice(&w[skip..skip + n]);
        rest = &mut rest[n..];
        pos += n as u64;
    }
}

/// The first `len` bytes of the stream `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    fill(seed, 0, &mut v);
    v
}

/// Checks that `piece` is the bytes at `offset..` of the stream `seed`;
/// the error names the first byte that differs.
fn verify(seed: u64, offset: u64, piece: &[u8], scratch: &mut Vec<u8>) -> Result<(), String> {
    scratch.resize(piece.len(), 0);
    fill(seed, offset, scratch);
    if piece == &scratch[..] {
        return Ok(());
    }
    let i = piece.iter().zip(scratch.iter()).position(|(a, b)| a != b);
    let i = i.unwrap_or(0);
    Err(format!(
        "byte {} of stream {seed:#x} is {:#04x}, not {:#04x}",
        offset + i as u64,
        piece[i],
        scratch[i]
    ))
}

/// Runs `f` on a fresh runtime, within `T`.
fn run<F: std::future::Future<Output = R<()>>>(f: F) -> TestResult {
    run_within(T, f)
}

fn run_within<F: std::future::Future<Output = R<()>>>(limit: Duration, f: F) -> TestResult {
    run_on(runtime()?, limit, f)
}

/// Runs `f` on `rt`, failing after `limit`.
fn run_on<F: std::future::Future<Output = R<()>>>(
    rt: tokio::runtime::Runtime,
    limit: Duration,
    f: F,
) -> TestResult {
    let r = rt.block_on(async {
        tokio::time::timeout(limit, f)
            .await
            .unwrap_or_else(|_| Err(format!("the test took more than {limit:?}").into()))
    });
    drop(rt);
    r.map_err(|e| e.to_string())?;
    Ok(Outcome::Passed)
}

/// The device's resource counts.
fn counts(env: &TestEnv) -> R<Counts> {
    rdma_tests::resource_counts(&env.device).map_err(|e| e.to_string().into())
}

/// Waits (up to `limit`) until the device's resource counts are `want`
/// again: a closed stream's driver releases its objects within
/// `LINGER + FLUSH_WAIT` (4 s). Returns how long that took.
async fn counts_back_to(env: &TestEnv, want: &Counts, limit: Duration) -> R<Duration> {
    let start = Instant::now();
    loop {
        let now = counts(env)?;
        if &now == want {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            return Err(format!(
                "resources not back to {want:?} {limit:?} after the streams were dropped: {now:?}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Connects to `l` and accepts: both ends of one stream.
async fn pair(l: &mut RdmaListener, at: SocketAddr) -> R<(RdmaStream, RdmaStream)> {
    let (a, c) = tokio::join!(l.accept(), RdmaStream::connect(at));
    Ok((c?, a?.0))
}

/// Echoes everything it reads on `stream` until EOF, then shuts down.
async fn echo(stream: RdmaStream) -> R<u64> {
    let (mut rd, mut wr) = stream.into_split();
    let n = tokio::io::copy(&mut rd, &mut wr).await?;
    wr.shutdown().await?;
    Ok(n)
}

/// Reads `len` bytes of the stream `seed`.
struct PatternReader {
    seed: u64,
    pos: u64,
    len: u64,
}

impl AsyncRead for PatternReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = (self.len - self.pos).min(buf.remaining() as u64) as usize;
        let dst = &mut buf.initialize_unfilled_to(n)[..n];
        fill(self.seed, self.pos, dst);
        buf.advance(n);
        self.pos += n as u64;
        Poll::Ready(Ok(()))
    }
}

/// A sink that checks what is written to it against the stream `seed`.
struct PatternCheck {
    seed: u64,
    pos: u64,
    scratch: Vec<u8>,
}

impl PatternCheck {
    fn new(seed: u64) -> PatternCheck {
        PatternCheck {
            seed,
            pos: 0,
            scratch: Vec::new(),
        }
    }

    fn check(&mut self, piece: &[u8]) -> Result<(), String> {
        verify(self.seed, self.pos, piece, &mut self.scratch)?;
        self.pos += piece.len() as u64;
        Ok(())
    }
}

impl AsyncWrite for PatternCheck {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(
            self.check(buf)
                .map(|()| buf.len())
                .map_err(io::Error::other),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
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

/// 64 MiB through `tokio::io::copy` at both ends: from a pattern source
/// into the stream, and from the stream into a sink that checks every
/// byte where it stands in the pattern.
pub fn copy_of_64_mib_checked_byte_by_byte(env: &TestEnv) -> TestResult {
    const LEN: u64 = 64 << 20;
    const SEED: u64 = 64;
    run(async {
        let (mut l, at) = listen(env)?;
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await?;
            let mut sink = PatternCheck::new(SEED);
            let n = tokio::io::copy(&mut s, &mut sink).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((n, sink.pos))
        });
        let start = Instant::now();
        let mut source = PatternReader {
            seed: SEED,
            pos: 0,
            len: LEN,
        };
        let mut s = RdmaStream::connect(at).await?;
        let sent = tokio::io::copy(&mut source, &mut s).await?;
        s.shutdown().await?;
        let (n, checked) = server.await??;
        check!(
            sent == LEN && n == LEN && checked == LEN,
            "sent {sent} bytes, the receiver copied {n} and checked {checked}; want {LEN}"
        );
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "    {} MiB in {secs:.1} s ({:.1} MiB/s)",
            LEN >> 20,
            (LEN >> 20) as f64 / secs
        );
        Ok(())
    })
}

/// The guest's free memory and the kernel's last words, for a failure
/// to create verbs objects.
fn memory_report() -> String {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem: Vec<&str> = meminfo
        .lines()
        .filter(|l| l.starts_with("MemAvailable") || l.starts_with("VmallocUsed"))
        .collect();
    let dmesg = std::process::Command::new("dmesg")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let tail: Vec<&str> = dmesg.lines().rev().take(4).collect();
    format!("{mem:?}; dmesg tail {tail:?}")
}

/// 64 streams on one listener at once, each echoing its own pattern, all
/// in this process (128 QPs); then one more; the device's resources are
/// back where they were once they are closed.
///
/// siw (kernel 6.1, in the CI VM) gives a process EAGAIN from
/// `ibv_create_qp` past some 50 QPs (measured: 24 streams here, 48 QPs,
/// fit; 32 do not; two processes of 32 QPs each do). There the streams past
/// the limit must fail with an error (the client's own QP, or the refusal
/// of a request whose QP the listener could not make), the others echo,
/// the listener goes on, and a stream made after them works.
pub fn sixty_four_concurrent_streams_on_one_listener(env: &TestEnv) -> TestResult {
    const N: usize = 64;
    // What fits in a process on siw (see above).
    const SIW_FITS: usize = 24;
    if env.provider == Provider::Siw {
        let (ok, failed) = many_streams(env, SIW_FITS).map_err(|e| e.to_string())?;
        check!(
            failed.is_empty(),
            "{} of {SIW_FITS} streams failed on siw, the first: {:?}",
            failed.len(),
            &failed[..failed.len().min(3)]
        );
        eprintln!("    siw: {ok} of {SIW_FITS} at once; now {N}, more than its QPs");
    }
    // On siw the streams past its limit fail; the others, and the one
    // after them all, echo (checked in many_streams).
    let (_, failed) = many_streams(env, N).map_err(|e| e.to_string())?;
    if env.provider == Provider::Rxe {
        check!(
            failed.is_empty(),
            "{} of {N} streams failed on rxe, the first: {:?}",
            failed.len(),
            &failed[..failed.len().min(3)]
        );
    }
    Ok(Outcome::Passed)
}

/// `n` streams at once, each echoing its own pattern, then one more that
/// must work; the server's total must be what the streams that worked
/// sent, and the device's resources come back to what they were. Returns
/// how many worked and the errors of the others.
fn many_streams(env: &TestEnv, n: usize) -> R<(usize, Vec<String>)> {
    let len = |i: usize| 48 * 1024 + i * 1021;
    let before = counts(env)?;
    let rt = runtime()?;
    let r: R<(usize, Vec<String>)> = rt.block_on(async {
        tokio::time::timeout(T, async {
        let (mut l, at) = listen(env)?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let (mut echoes, mut refused) = (Vec::new(), Vec::new());
            loop {
                let got = tokio::select! {
                    got = l.accept() => got,
                    _ = &mut stopped => break,
                };
                match got {
                    Ok((s, _)) => echoes.push(tokio::spawn(echo(s))),
                    // One request; the listener goes on.
                    Err(e) => refused.push(e.to_string()),
                }
            }
            let mut total = 0;
            for e in echoes {
                total += e.await??;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((total, refused))
        });
        let client = move |i: usize| async move {
            let s = RdmaStream::connect(at).await?;
            let (mut rd, mut wr) = s.into_split();
            let msg = pattern(100 + i as u64, len(i));
            let writer = async {
                wr.write_all(&msg).await?;
                wr.shutdown().await
            };
            let mut back = Vec::new();
            let (w, r) = tokio::join!(writer, rd.read_to_end(&mut back));
            w?;
            r?;
            if back != msg {
                return Err(format!(
                    "stream {i}: the echo differs ({} bytes of {})",
                    back.len(),
                    msg.len()
                )
                .into());
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        };
        let clients: Vec<_> = (0..n).map(|i| tokio::spawn(client(i))).collect();
        let (mut ok, mut failed) = (Vec::new(), Vec::new());
        for (i, c) in clients.into_iter().enumerate() {
            match c.await? {
                Ok(()) => ok.push(i),
                Err(e) => failed.push(format!("{i}: {e}")),
            }
        }
        // One more, after them all: the listener still serves.
        let last = tokio::time::timeout(Duration::from_secs(30), client(n)).await;
        let last = last.map_err(|_| "the stream after the others hung")?;
        let _ = stop.send(());
        let (total, refused) = server.await??;
        if let Err(e) = last {
            return Err(format!(
                "the stream after the others failed: {e}; {} of {n} had failed, the first {:?}; the listener refused {refused:?}; {}",
                failed.len(),
                &failed[..failed.len().min(3)],
                memory_report()
            )
            .into());
        }
        let want: usize = ok.iter().map(|&i| len(i)).sum::<usize>() + len(n);
        check!(
            total == want as u64,
            "the server echoed {total} bytes; the {} streams that worked sent {want}",
            ok.len() + 1
        );
        eprintln!(
            "    {} of {n} streams echoed, {} failed (the first {:?}), the listener refused {}; then one more",
            ok.len(),
            failed.len(),
            &failed[..failed.len().min(2)],
            refused.len()
        );
        // Everything (the listener went with the server task) is released
        // while the runtime runs.
        counts_back_to(env, &before, Duration::from_secs(10)).await?;
        Ok((ok.len(), failed))
        })
        .await
        .unwrap_or_else(|_| Err(format!("the test took more than {T:?}").into()))
    });
    drop(rt);
    let r = r?;
    let after = counts(env)?;
    check!(
        before == after,
        "resources left after the streams and the runtime are gone: before {before:?}, after {after:?}"
    );
    Ok(r)
}

// ------------------------------------------------------------ HTTP/1.1

type Body = BoxBody<Bytes, Infallible>;
/// The sizes of the bodies, in both directions: around the stream's
/// buffer (64 KiB, with its header MAX_PAYLOAD bytes of data) and beyond its ring.
const HTTP_SIZES: [usize; 8] = [
    0,
    1,
    100,
    MAX_PAYLOAD,
    MAX_PAYLOAD + 1,
    65536,
    1 << 20,
    4 << 20,
];
/// The seed of a reply: the request's, with this bit flipped.
const REPLY: u64 = 1 << 63;
/// A chunked body comes in pieces of this size (not a divisor of anything).
const PIECE: usize = 100 * 1024 - 3;

/// The body `len` bytes of the stream `seed`: with a length, or chunked.
fn http_body(seed: u64, len: usize, chunked: bool) -> Body {
    let data = Bytes::from(pattern(seed, len));
    if !chunked {
        return Full::new(data).boxed();
    }
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = (0..len)
        .step_by(PIECE)
        .map(|at| Ok(Frame::data(data.slice(at..(at + PIECE).min(len)))))
        .collect();
    StreamBody::new(tokio_stream::iter(frames)).boxed()
}

fn header(req: &Request<Incoming>, name: &str) -> R<u64> {
    let v = req
        .headers()
        .get(name)
        .ok_or_else(|| format!("no {name} header"))?;
    Ok(v.to_str()?.parse()?)
}

/// The server's handler: checks the request body (`x-len` bytes of the
/// stream `x-seed`) and replies with `x-want` bytes of the stream
/// `x-seed ^ REPLY` (chunked when `x-chunked` says 1); 400 with the
/// reason when the request is wrong.
async fn handle(
    req: Request<Incoming>,
    served: Arc<AtomicUsize>,
) -> Result<Response<Body>, Infallible> {
    let r: R<Body> = async {
        let (seed, len, want) = (
            header(&req, "x-seed")?,
            header(&req, "x-len")?,
            header(&req, "x-want")?,
        );
        let chunked = header(&req, "x-chunked")? == 1;
        let got = req.into_body().collect().await?.to_bytes();
        check_len(got.len(), len as usize, "request")?;
        verify(seed, 0, &got, &mut Vec::new())?;
        Ok(http_body(seed ^ REPLY, want as usize, chunked))
    }
    .await;
    let resp = match r {
        Ok(body) => {
            served.fetch_add(1, Ordering::Relaxed);
            Response::new(body)
        }
        Err(e) => {
            let mut resp = Response::new(Full::new(Bytes::from(e.to_string())).boxed());
            *resp.status_mut() = StatusCode::BAD_REQUEST;
            resp
        }
    };
    Ok(resp)
}

fn check_len(got: usize, want: usize, what: &str) -> R<()> {
    if got != want {
        return Err(format!("the {what} body has {got} bytes, not {want}").into());
    }
    Ok(())
}

/// Serves HTTP/1.1 on `conns` connections of `l`, each in a task of its
/// own; the connections' results.
async fn http_server(mut l: RdmaListener, conns: usize, served: Arc<AtomicUsize>) -> R<()> {
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (s, _) = l.accept().await?;
        let served = Arc::clone(&served);
        tasks.push(tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handle(req, Arc::clone(&served)));
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(s), service)
                .await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        t.await?.map_err(|e| {
            let cause = std::error::Error::source(&e).map(|c| c.to_string());
            format!("server connection {i}: {e} (cause: {cause:?})")
        })?;
    }
    Ok(())
}

/// One request of `len` bytes of the stream `seed` asking for `want`
/// bytes back; checks the reply's status and body.
async fn http_exchange(
    sender: &mut hyper::client::conn::http1::SendRequest<Body>,
    seed: u64,
    len: usize,
    want: usize,
    chunked: bool,
) -> R<()> {
    sender.ready().await?;
    let req = Request::post("/exchange")
        .header("x-seed", seed)
        .header("x-len", len)
        .header("x-want", want)
        .header("x-chunked", u32::from(!chunked))
        .body(http_body(seed, len, chunked))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let got = resp.into_body().collect().await?.to_bytes();
    if status != StatusCode::OK {
        return Err(format!("status {status}: {}", String::from_utf8_lossy(&got)).into());
    }
    check_len(got.len(), want, "reply")?;
    verify(seed ^ REPLY, 0, &got, &mut Vec::new())?;
    Ok(())
}

/// A client connection: the requests `(len, want)` in order, request
/// bodies chunked every other time (and the replies the other way round).
async fn http_client(at: SocketAddr, conn: u64, exchanges: Vec<(usize, usize)>) -> R<usize> {
    let s = RdmaStream::connect(at).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
    let driver = tokio::spawn(connection);
    for (k, &(len, want)) in exchanges.iter().enumerate() {
        let seed = conn << 32 | k as u64;
        http_exchange(&mut sender, seed, len, want, k % 2 == 1)
            .await
            .map_err(|e| {
                format!("connection {conn}, request {k} ({len} bytes up, {want} down): {e}")
            })?;
    }
    drop(sender);
    driver.await??;
    Ok(exchanges.len())
}

/// hyper's HTTP/1.1 server and client over RDMA streams: requests with
/// bodies of 0 bytes to 4 MiB in both directions (with a length and
/// chunked), many on one keep-alive connection, then on four connections
/// at once; every body is checked byte by byte.
pub fn http1_over_rdma_streams(env: &TestEnv) -> TestResult {
    const SEVERAL: u64 = 4;
    run_within(Duration::from_secs(120), async {
        let (l, at) = listen(env)?;
        let served = Arc::new(AtomicUsize::new(0));
        let server = tokio::spawn(http_server(l, 1 + SEVERAL as usize, Arc::clone(&served)));
        let start = Instant::now();
        // One connection: every size up with every size down of the
        // mirrored list, and every size both ways.
        let n = HTTP_SIZES.len();
        let mut one: Vec<(usize, usize)> = (0..n)
            .map(|i| (HTTP_SIZES[i], HTTP_SIZES[n - 1 - i]))
            .collect();
        one.extend(HTTP_SIZES.iter().map(|&s| (s, s)));
        let mut sent = http_client(at, 0, one).await?;
        let one_s = start.elapsed();
        // Several at once: each the sizes below 1 MiB both ways, rotated,
        // and one of 1 MiB.
        let small = &HTTP_SIZES[..6];
        let clients: Vec<_> = (1..=SEVERAL)
            .map(|c| {
                let mut ex: Vec<(usize, usize)> = (0..small.len())
                    .map(|i| (small[i], small[(i + c as usize) % small.len()]))
                    .collect();
                ex.insert(c as usize, (1 << 20, 1 << 20));
                tokio::spawn(http_client(at, c, ex))
            })
            .collect();
        for c in clients {
            sent += c.await??;
        }
        server.await??;
        let got = served.load(Ordering::Relaxed);
        check!(got == sent, "the server served {got} requests of {sent}");
        eprintln!(
            "    {sent} requests: one connection {:.1} s, then {SEVERAL} at once {:.1} s",
            one_s.as_secs_f64(),
            (start.elapsed() - one_s).as_secs_f64()
        );
        Ok(())
    })
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

/// Reads `s` (a stream or its read half) until EOF or an error, within
/// 10 s; the bytes read.
async fn read_until_end<S: AsyncRead + Unpin>(s: &mut S) -> R<(usize, std::io::Result<()>)> {
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

/// A child's standard output and error, collected by threads until it exits.
struct Output(Arc<std::sync::Mutex<String>>);

impl Output {
    /// What the child wrote so far.
    fn take(&self) -> String {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn collect_output(child: &mut std::process::Child) -> Output {
    use std::io::Read;
    let text = Arc::new(std::sync::Mutex::new(String::new()));
    let pipes: Vec<Box<dyn Read + Send>> = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .collect();
    for mut pipe in pipes {
        let text = Arc::clone(&text);
        std::thread::spawn(move || {
            let mut buf = [0; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut t) = text.lock() {
                    t.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
    }
    Output(text)
}

/// Kills and reaps the child when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .env("RDMA_TEST_CHILD", rdma_tests::current_test())
            .env(PEER_VAR, at.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let output = collect_output(&mut child);
        let mut child = KillOnDrop(child);
        let started = Instant::now();
        let s = loop {
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(200), l.accept()).await {
                break r?.0;
            }
            if let Some(status) = child.0.try_wait()? {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(format!(
                    "the peer process exited ({status}) before it connected: {}",
                    output.take()
                )
                .into());
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "the peer process did not connect within 30 s: {}",
                    output.take()
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
                child.0.kill()?;
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
        let status = child.0.wait()?;
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

/// Reads and writes raced against timers in `select!`, so that many are
/// cancelled while pending: every byte arrives once and in order (the
/// poll functions take nothing when they return `Pending`).
pub fn reads_and_writes_cancelled_in_select_lose_no_byte(env: &TestEnv) -> TestResult {
    const LEN: usize = 6 << 20;
    run(async {
        let (mut l, at) = listen(env)?;
        let (mut c, mut s) = pair(&mut l, at).await?;
        let data = Arc::new(pattern(11, LEN));
        let writer = {
            let data = Arc::clone(&data);
            tokio::spawn(async move {
                // Nothing comes for a while: the reader's first reads wait
                // (and poll the CQ themselves) until their sleeps win.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let (mut pos, mut cancelled, mut k) = (0, 0u32, 0u64);
                while pos < LEN {
                    k += 1;
                    let n = ((word(1, k) % 150_000) as usize + 1).min(LEN - pos);
                    tokio::select! {
                        biased;
                        r = c.write(&data[pos..pos + n]) => pos += r?,
                        _ = tokio::time::sleep(Duration::from_micros(word(2, k) % 700)) => cancelled += 1,
                    }
                    // Pauses, so that the reader waits too.
                    if k % 40 == 0 {
                        tokio::time::sleep(Duration::from_millis(15)).await;
                    }
                }
                c.shutdown().await?;
                Ok::<_, io::Error>((cancelled, c))
            })
        };
        let mut check = PatternCheck::new(11);
        let mut buf = vec![0; 200_000];
        let (mut cancelled, mut k) = (0u32, 0u64);
        loop {
            k += 1;
            let n = (word(3, k) % 65_536) as usize + 1;
            tokio::select! {
                biased;
                r = s.read(&mut buf[..n]) => match r? {
                    0 => break,
                    got => check.check(&buf[..got])?,
                },
                _ = tokio::time::sleep(Duration::from_micros(word(4, k) % 500)) => cancelled += 1,
            }
            // Pauses, so that the writer's buffers fill.
            if k % 16 == 0 {
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        }
        let (wcancelled, _c) = writer.await??;
        check!(check.pos == LEN as u64, "read {} bytes of {LEN}", check.pos);
        check!(
            cancelled > 0 && wcancelled > 0,
            "nothing was cancelled while pending: {cancelled} reads, {wcancelled} writes"
        );
        eprintln!("    {cancelled} reads and {wcancelled} writes cancelled, {LEN} bytes intact");
        Ok(())
    })
}

/// Both ends never sleep (a busy-poll time of `MAX`) on a two-worker
/// runtime, with each end's read half and write half in tasks of their
/// own: the halves poll the CQ and post from two threads at once, the
/// driver in between. 4 MiB each way, in writes of odd sizes, echoed and
/// checked; then both ends shut down and read EOF.
pub fn spinning_halves_on_two_threads_keep_every_byte(env: &TestEnv) -> TestResult {
    const LEN: u64 = 4 << 20;
    run(async {
        let (mut l, at) = listen(env)?;
        let (client, server) = pair(&mut l, at).await?;
        client.set_busy_poll(Duration::MAX);
        server.set_busy_poll(Duration::MAX);
        let echo = tokio::spawn(async move {
            let (mut rd, mut wr) = server.into_split();
            let n = tokio::io::copy(&mut rd, &mut wr).await?;
            wr.shutdown().await?;
            Ok::<u64, io::Error>(n)
        });
        let (mut rd, mut wr) = client.into_split();
        let writer = tokio::spawn(async move {
            let mut source = PatternReader {
                seed: 23,
                pos: 0,
                len: LEN,
            };
            let mut k = 0u64;
            let mut buf = vec![0u8; 70_000];
            loop {
                k += 1;
                let n = (word(5, k) % 70_000) as usize + 1;
                let got = source.read(&mut buf[..n]).await?;
                if got == 0 {
                    break;
                }
                wr.write_all(&buf[..got]).await?;
            }
            wr.shutdown().await?;
            Ok::<(), io::Error>(())
        });
        let mut check = PatternCheck::new(23);
        let back = tokio::io::copy(&mut rd, &mut check).await?;
        writer.await??;
        let echoed = echo.await??;
        check!(
            back == LEN && echoed == LEN && check.pos == LEN,
            "sent {LEN}, echoed {echoed}, read back {back} ({} checked)",
            check.pos
        );
        Ok(())
    })
}

/// Exchanges in which the client writes a burst of one to four pieces
/// (most of up to 64 bytes, which go at once and inline when nothing
/// written is in flight; some larger, which take a send buffer; a few of
/// many buffers) and reads the peer's echo of the burst before the next:
/// a burst's first piece goes inline, and the pieces after it queue
/// behind it or join a queued buffer. Every echo is checked byte for byte
/// against the pattern, so an inline piece that overtook a queued one, or
/// was lost or sent twice, fails. The echo is a task of its own on a
/// two-worker runtime; once with both drivers busy-polling, once with
/// them asleep on the armed CQ between messages.
pub fn small_inline_writes_keep_their_place_among_queued_ones(env: &TestEnv) -> TestResult {
    const EXCHANGES: u64 = 600;
    run(async {
        let (mut l, at) = listen(env)?;
        let mut report = vec![];
        let drivers = [
            (31u64, Duration::MAX, "busy-polling"),
            (32, Duration::ZERO, "asleep"),
        ];
        for (seed, spin, drivers) in drivers {
            let (mut client, server) = pair(&mut l, at).await?;
            client.set_busy_poll(spin);
            server.set_busy_poll(spin);
            let echoed = tokio::spawn(echo(server));
            let size = |k: u64| match word(seed, k) % 100 {
                0..=74 => (word(seed + 100, k) % 64 + 1) as usize,
                75..=96 => (word(seed + 100, k) % 400 + 65) as usize,
                _ => (word(seed + 100, k) % 150_000 + 1) as usize,
            };
            let (mut pos, mut k, mut small) = (0u64, 0u64, 0u64);
            let (mut piece, mut back, mut scratch) = (vec![], vec![], vec![]);
            for x in 0..EXCHANGES {
                let start = pos;
                for _ in 0..word(seed + 200, x) % 4 + 1 {
                    k += 1;
                    let n = size(k);
                    small += u64::from(n <= 64);
                    piece.resize(n, 0);
                    fill(seed, pos, &mut piece);
                    client.write_all(&piece).await?;
                    pos += n as u64;
                }
                back.resize((pos - start) as usize, 0);
                client.read_exact(&mut back).await?;
                verify(seed, start, &back, &mut scratch)
                    .map_err(|e| format!("drivers {drivers}, exchange {x}: {e}"))?;
            }
            client.shutdown().await?;
            let mut rest = [0u8; 1];
            let n = client.read(&mut rest).await?;
            check!(n == 0, "{n} bytes after the echo's end");
            let echoed = echoed.await??;
            check!(echoed == pos, "wrote {pos} bytes, the peer echoed {echoed}");
            report.push(format!(
                "drivers {drivers}: {k} writes ({small} of up to 64 bytes), {pos} bytes"
            ));
        }
        eprintln!("    {}", report.join("; "));
        Ok(())
    })
}

/// A read cancelled while it polls, then a busy-poll time of zero (the
/// driver sleeps on the armed CQ): the receive buffers that the next read
/// empties still go back to the peer at once, though this side then reads
/// no more. The peer writes more than its credits and send buffers hold,
/// so its last write ends only once credits come back.
pub fn buffers_read_after_a_cancelled_poll_go_back_to_the_peer(env: &TestEnv) -> TestResult {
    run(async {
        let (mut l, at) = listen(env)?;
        let (client, server) = pair(&mut l, at).await?;
        client.set_busy_poll(Duration::MAX);
        let (mut rd, _wr) = client.into_split();
        let mut small = [0u8; 64];
        let r = tokio::time::timeout(Duration::from_millis(20), rd.read(&mut small)).await;
        check!(r.is_err(), "a read with nothing sent ended: {r:?}");
        rd.set_busy_poll(Duration::ZERO);
        let writer = tokio::spawn(async move {
            let (_srd, mut swr) = server.into_split();
            let chunk = vec![7u8; MAX_PAYLOAD];
            for _ in 0..RECV_SLOTS + SEND_SLOTS + 1 {
                swr.write_all(&chunk).await?;
            }
            Ok::<_, io::Error>(swr)
        });
        // What the peer's credits let it send (one is kept for a
        // credit-only message) arrives meanwhile; one read takes it all.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut buf = vec![0u8; (RECV_SLOTS - 1) * MAX_PAYLOAD];
        let n = rd.read(&mut buf).await?;
        check!(
            n == buf.len(),
            "one read took {n} bytes, not the {} that had arrived",
            buf.len()
        );
        let done = tokio::time::timeout(Duration::from_secs(5), writer).await;
        check!(
            matches!(done, Ok(Ok(Ok(_)))),
            "the peer's writes did not end once this side had read: {done:?}"
        );
        Ok(())
    })
}

/// A read cancelled while it polls the CQ itself (a busy-poll time of
/// `MAX`, so it never stops on its own), on one current-thread runtime
/// with the driver: the driver takes the CQ back. With nobody reading,
/// the shutdown's wait for its FIN's completion is the driver's to end;
/// then the echo is read whole.
pub fn a_read_cancelled_while_it_polls_hands_the_cq_back(env: &TestEnv) -> TestResult {
    let rt = current_thread_runtime()?;
    run_on(rt, T, async {
        let (mut l, at) = listen(env)?;
        let (client, server) = pair(&mut l, at).await?;
        let srv = tokio::spawn(echo(server));
        client.set_busy_poll(Duration::MAX);
        let (mut rd, mut wr) = client.into_split();
        let mut buf = [0u8; 64];
        // Nothing was written: nothing comes, and the read polls on.
        let r = tokio::time::timeout(Duration::from_millis(20), rd.read(&mut buf)).await;
        check!(r.is_err(), "a read with nothing sent ended: {r:?}");
        let start = Instant::now();
        wr.write_all(b"after a cancelled read").await?;
        wr.shutdown().await?;
        let took = start.elapsed();
        check!(
            took < Duration::from_secs(2),
            "the shutdown took {took:?}: the CQ was left to a read that was gone"
        );
        let mut back = Vec::new();
        rd.read_to_end(&mut back).await?;
        check!(back == b"after a cancelled read", "the echo: {back:?}");
        let n = srv.await??;
        check!(n == 22, "the server echoed {n} bytes");
        eprintln!("    write and shutdown after the cancelled read: {took:?}");
        Ok(())
    })
}

/// What the calling thread did while it waited `wait` on the runtime (a
/// current-thread runtime: its tasks run on this thread).
struct ThreadTime {
    /// Time on a CPU.
    cpu: Duration,
    /// Time on a CPU or in the run queue, waiting for one: all of `wait`
    /// for a thread that never sleeps, however busy the machine's other
    /// threads keep its CPUs.
    runnable: Duration,
    /// Times the thread gave up its CPU of its own accord (slept):
    /// `voluntary_ctxt_switches` of `/proc/thread-self/status`.
    slept: u64,
}

/// The calling thread's times over a sleep of `wait` on the runtime,
/// from `/proc/thread-self/schedstat` (the nanoseconds on a CPU, then
/// waiting in a run queue).
async fn thread_time_over(wait: Duration) -> R<ThreadTime> {
    fn now() -> R<(u64, u64)> {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat")?;
        let mut f = s.split_ascii_whitespace().map(str::parse::<u64>);
        match (f.next(), f.next()) {
            (Some(Ok(run)), Some(Ok(queued))) => Ok((run, queued)),
            _ => Err(format!("/proc/thread-self/schedstat reads {s:?}").into()),
        }
    }
    fn voluntary() -> R<u64> {
        let s = std::fs::read_to_string("/proc/thread-self/status")?;
        s.lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| {
                format!("/proc/thread-self/status has no voluntary_ctxt_switches: {s:?}").into()
            })
    }
    let (run0, queued0) = now()?;
    let slept0 = voluntary()?;
    tokio::time::sleep(wait).await;
    let (run1, queued1) = now()?;
    let slept1 = voluntary()?;
    let cpu = Duration::from_nanos(run1.saturating_sub(run0));
    Ok(ThreadTime {
        cpu,
        runnable: cpu + Duration::from_nanos(queued1.saturating_sub(queued0)),
        slept: slept1.saturating_sub(slept0),
    })
}

/// Busy polling: the setting's edges (rounding, `Duration::MAX`, shared
/// by the halves), ping-pongs checked byte by byte with the client never
/// sleeping and the server sleeping at once, both on one current-thread
/// runtime (a driver that polls forever must still let the other tasks
/// run), the setting's effect (the thread's time on a CPU or waiting for
/// one over an idle wait, polling and sleeping), and a stream that polls
/// forever released when dropped.
pub fn busy_poll_never_starves_the_runtime_and_stops_with_the_stream(env: &TestEnv) -> TestResult {
    let before = rdma_tests::resource_counts(&env.device)?;
    let rt = current_thread_runtime()?;
    run_on(rt, T, async {
        let (mut l, at) = listen(env)?;
        let (client, server) = pair(&mut l, at).await?;
        if std::env::var_os("RDMA_STREAM_SPIN_US").is_none() {
            check!(
                client.busy_poll() == rdma::stream::DEFAULT_BUSY_POLL,
                "default busy poll {:?}",
                client.busy_poll()
            );
        }
        client.set_busy_poll(Duration::from_nanos(1500));
        check!(
            client.busy_poll() == Duration::from_micros(2),
            "1.5 us kept as {:?}, not 2 us",
            client.busy_poll()
        );
        client.set_busy_poll(Duration::MAX);
        check!(
            client.busy_poll() == Duration::MAX,
            "MAX kept as {:?}",
            client.busy_poll()
        );
        server.set_busy_poll(Duration::ZERO);
        let (mut srd, mut swr) = server.into_split();
        check!(
            swr.busy_poll() == Duration::ZERO,
            "the write half sees {:?}, not the stream's 0",
            swr.busy_poll()
        );
        srd.set_busy_poll(Duration::ZERO);
        let echo = tokio::spawn(async move {
            let n = tokio::io::copy(&mut srd, &mut swr).await?;
            swr.shutdown().await?;
            Ok::<u64, io::Error>(n)
        });
        let (mut rd, mut wr) = client.into_split();
        let mut back = vec![0u8; 64];
        for i in 0..300u64 {
            let msg = pattern(i + 1, 64);
            wr.write_all(&msg).await?;
            rd.read_exact(&mut back).await?;
            if back != msg {
                return Err(format!("round trip {i}: the echo differs").into());
            }
            if i == 100 {
                // A third of the way with the client sleeping at once
                // too, set from a half; then never sleeping again.
                wr.set_busy_poll(Duration::ZERO);
                check!(
                    rd.busy_poll() == Duration::ZERO,
                    "the halves share the setting"
                );
            }
            if i == 200 {
                rd.set_busy_poll(Duration::MAX);
            }
        }
        // What the setting does, seen in the runtime thread's times over
        // an idle wait: the client's driver, never sleeping, polls
        // through it (the thread is on a CPU or waiting for one, which
        // the VM's other threads may hold); with both drivers sleeping at
        // once the thread sleeps.
        let idle = Duration::from_millis(400);
        let spun = thread_time_over(idle).await?;
        wr.set_busy_poll(Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let slept = thread_time_over(idle).await?;
        println!(
            "over an idle {idle:?}: busy-polling {:?} on a CPU, {:?} runnable, slept {} times; \
             sleeping {:?} on a CPU, {:?} runnable, slept {} times",
            spun.cpu, spun.runnable, spun.slept, slept.cpu, slept.runnable, slept.slept
        );
        // What each thread did, not how long the machine took to let it:
        // a thread that never sleeps is on a CPU or waiting for one the
        // whole time (its run-queue time counts, so a busy host cannot
        // shrink it); a thread that sleeps gives up its CPU of its own
        // accord and uses little of it. Its run-queue time is not
        // asserted: in an emulated guest a woken thread waits there for as
        // long as the host does not run the vCPU.
        check!(
            spun.runnable >= idle / 2,
            "a driver that never sleeps was runnable {:?} of an idle {idle:?}",
            spun.runnable
        );
        check!(
            slept.slept >= 1 && slept.cpu <= idle / 5,
            "drivers that sleep at once slept {} times and were on a CPU {:?} of an idle {idle:?}",
            slept.slept,
            slept.cpu
        );
        wr.shutdown().await?;
        let mut rest = Vec::new();
        rd.read_to_end(&mut rest).await?;
        check!(rest.is_empty(), "{} bytes after the echoes", rest.len());
        let echoed = echo.await??;
        check!(echoed == 300 * 64, "the server echoed {echoed} bytes");
        drop((rd, wr, l));
        // Both drivers stop (the client's polled forever): the device's
        // objects go.
        let took = counts_back_to(env, &before, Duration::from_secs(20)).await?;
        println!("resources released {took:?} after the streams were dropped");
        Ok(())
    })
}

/// The tests of this module.
/// A raw RC peer connects to a listener and SENDs one message that is not
/// this wire format: the accepted stream's read fails with `InvalidData`
/// naming the fault, at once, and the next connection works.
pub fn a_peer_of_another_wire_format_is_refused_with_an_error(env: &TestEnv) -> TestResult {
    use rdma::cm::{AsyncCm, ConnParam};
    use rdma::SendWr;
    // The 8-byte header's low word: version 1 in bits 24 to 29.
    const V1: u32 = 1 << 24;
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "a 4-byte-header data message",
            [&[3u8, 0, 0, 0][..], b"hello"].concat(),
            "wire format version 0",
        ),
        (
            "a 4-byte-header FIN",
            vec![0, 0, 0, 0x80],
            "shorter than its header",
        ),
        (
            "another version",
            (2u64 << 24 | 1).to_le_bytes().to_vec(),
            "wire format version 2",
        ),
        (
            "a reserved bit in the high word",
            (u64::from(V1) | 1 << 40).to_le_bytes().to_vec(),
            "reserved bits",
        ),
        (
            "more credits than a ring",
            (u64::from(V1) | 0xffff).to_le_bytes().to_vec(),
            "more credits returned than owed",
        ),
    ];
    run_within(T, async {
        let (mut l, at) = listen(env)?;
        let cm = AsyncCm::new()?;
        let mut param = ConnParam::new();
        param.rnr_retry_count = 0;
        for (what, bytes, want) in &cases {
            let accept = l.accept();
            let connect = cm.connect(at, T, &param, crate::cm_async::setup);
            let (accepted, connected) = tokio::join!(accept, connect);
            let (mut stream, _) = accepted?;
            let (cid, _est, conn) = connected?;
            conn.mr.write(0, bytes)?;
            let sge = [conn.mr.sge(0..bytes.len())?];
            cid.id()
                .qp()
                .ok_or("no QP")?
                .post_send(&mut [SendWr::send(1, &sge).signaled()])?;
            let start = Instant::now();
            let mut buf = [0u8; 64];
            let r = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await;
            let took = start.elapsed();
            let e = match r {
                Err(_) => return Err(format!("{what}: no error after {took:?}").into()),
                Ok(Ok(n)) => return Err(format!("{what}: read {n} bytes, not an error").into()),
                Ok(Err(e)) => e,
            };
            println!("{what}: {e} (after {took:?})");
            check!(
                e.kind() == io::ErrorKind::InvalidData,
                "{what}: {:?}, not InvalidData: {e}",
                e.kind()
            );
            check!(
                e.to_string().contains(want),
                "{what}: {e:?} does not say {want:?}"
            );
            // Writing fails the same way, and the stream's end does not
            // wait for the raw peer.
            check!(
                stream.write_all(b"x").await.is_err(),
                "{what}: a write succeeded after the violation"
            );
            drop(stream);
            drop((cid, conn));
        }
        // The listener still serves a stream of this format.
        let (mut a, mut b) = pair(&mut l, at).await?;
        a.write_all(b"still fine").await?;
        a.shutdown().await?;
        let mut got = Vec::new();
        b.read_to_end(&mut got).await?;
        check!(got == b"still fine", "after the refusals: {got:?}");
        Ok(())
    })
}

/// Frame sizes for the codec test: empty, around a word, around the data
/// of one buffer (the codec's 4-byte length prefix moves each frame's
/// bytes across buffer boundaries), several buffers.
fn frame_sizes() -> Vec<usize> {
    let mut v = vec![0, 1, 7, 8, 9, 60, 64, 65];
    for n in [MAX_PAYLOAD, SLOT_SIZE, 3 * SLOT_SIZE] {
        v.extend([n - 5, n - 4, n - 3, n + 1]);
    }
    v.push(3 << 20);
    // Many small frames, which a writer coalesces into one buffer.
    v.extend((0..500).map(|i| i % 97));
    v
}

/// The most a codec frame may be here: the hostile-length check below
/// announces more.
const MAX_FRAME: usize = 4 << 20;

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// tokio-util's length-delimited codec runs unchanged over a stream: the
/// server echoes each frame through one `Framed`; the client writes every
/// frame through a `FramedWrite` on its write half while a `FramedRead` on
/// the read half checks each echo, then shuts down and sees the end. Then
/// a frame that announces more than the codec allows: the server's codec
/// fails with `InvalidData` and the server drops its stream with the
/// frame's bytes unread, and the client's read ends (EOF or an error)
/// within the test's time, never hangs.
pub fn codec_frames_over_a_stream(env: &TestEnv) -> TestResult {
    run(async {
        let (mut l, at) = listen(env)?;
        let server = tokio::spawn(async move {
            let (s, _) = l.accept().await?;
            let mut framed = Framed::new(s, codec());
            let mut frames = 0usize;
            while let Some(frame) = framed.next().await {
                framed.send(frame?.freeze()).await?;
                frames += 1;
            }
            framed.get_mut().shutdown().await?;
            // A second connection announces a frame longer than allowed.
            let (s, _) = l.accept().await?;
            let mut framed = Framed::new(s, codec());
            let refused = match framed.next().await {
                Some(Err(e)) => e.kind() == io::ErrorKind::InvalidData,
                _ => false,
            };
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((frames, refused))
        });
        let sizes = frame_sizes();
        let (rd, wr) = RdmaStream::connect(at).await?.into_split();
        let mut reader = FramedRead::new(rd, codec());
        let mut writer = FramedWrite::new(wr, codec());
        let send = async {
            for (i, &n) in sizes.iter().enumerate() {
                writer.send(Bytes::from(pattern(i as u64, n))).await?;
            }
            writer.get_mut().shutdown().await?;
            R::Ok(())
        };
        let recv = async {
            let mut scratch = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                let frame = match reader.next().await {
                    Some(f) => f.map_err(|e| format!("frame {i}: {e}"))?,
                    None => {
                        let all = sizes.len();
                        return Err(format!("the stream ended after {i} of {all} frames").into());
                    }
                };
                if frame.len() != n {
                    let got = frame.len();
                    return Err(format!("echo {i} has {got} bytes, frame {i} {n}").into());
                }
                verify(i as u64, 0, &frame, &mut scratch).map_err(|e| format!("echo {i}: {e}"))?;
            }
            match reader.next().await {
                None => R::Ok(()),
                Some(f) => Err(format!("more after the last echo: {f:?}").into()),
            }
        };
        // The first error ends both: a reader that stopped would leave the
        // writer waiting for credits.
        tokio::try_join!(send, recv)?;

        // The frame's bytes go after its length as far as credits let them:
        // the write ends, with an error or not, once the server has dropped
        // its stream; the read ends with EOF or an error.
        let (mut rd, mut wr) = RdmaStream::connect(at).await?.into_split();
        let announced = u32::try_from(MAX_FRAME + 1)?;
        let write = async {
            wr.write_all(&announced.to_be_bytes()).await?;
            wr.write_all(&pattern(7, 1 << 20)).await
        };
        let (_, read) = tokio::time::timeout(Duration::from_secs(20), async {
            tokio::join!(write, read_until_end(&mut rd))
        })
        .await
        .map_err(|_| "the client's write did not end after the server dropped its stream")?;
        let (ended, _) = read?;
        let (frames, refused) = server.await??;
        check!(
            frames == sizes.len(),
            "the server echoed {frames} of {} frames",
            sizes.len()
        );
        check!(
            refused,
            "the oversized frame was not refused with InvalidData"
        );
        check!(ended == 0, "{ended} bytes came back for the refused frame");
        Ok(())
    })
}

rdma_tests::tests!(
    "stream":
    a_peer_of_another_wire_format_is_refused_with_an_error,
    echo_of_every_size,
    copy_of_64_mib_checked_byte_by_byte,
    sixty_four_concurrent_streams_on_one_listener,
    codec_frames_over_a_stream,
    http1_over_rdma_streams,
    busy_poll_never_starves_the_runtime_and_stops_with_the_stream,
    half_close_then_reply,
    reads_and_writes_after_shutdown_and_after_the_peer_left,
    flush_succeeds_once_the_peer_read_everything_and_closed,
    reads_and_writes_cancelled_in_select_lose_no_byte,
    spinning_halves_on_two_threads_keep_every_byte,
    small_inline_writes_keep_their_place_among_queued_ones,
    buffers_read_after_a_cancelled_poll_go_back_to_the_peer,
    a_read_cancelled_while_it_polls_hands_the_cq_back,
    a_peer_dropped_mid_stream_ends_the_survivors_read,
    a_peer_whose_runtime_dies_ends_the_survivors_read,
    a_peer_process_killed_mid_stream_ends_both_halves,
    a_writer_whose_peer_does_not_read_waits,
    streams_dropped_mid_write_leak_no_kernel_resources,
    dropping_the_listener_ends_its_pending_connects,
    accepts_cancelled_mid_way_leave_the_listener_usable,
);
