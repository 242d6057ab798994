//! The byte stream over RC (`rdma::stream`): the set-ups its tests share.
//! The tests are filed by what they prove, one module each.

mod cancel;
mod config;
mod data;
mod frameworks;
mod peer_gone;
mod teardown;

pub use cancel::TESTS as CANCEL;
pub use config::TESTS as CONFIG;
pub use data::TESTS as DATA;
pub use frameworks::TESTS as FRAMEWORKS;
pub use peer_gone::TESTS as PEER_GONE;
pub use teardown::TESTS as TEARDOWN;

use hyper::body::Incoming;
use hyper::Request;
use rdma::stream::{RdmaListener, RdmaStream};
use rdma_tests::{Outcome, TestEnv, TestResult};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

pub(crate) type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The most any step of these tests may take: a guard against a hang, not
/// a measure of speed (the VM is emulated, and on a loaded host a 64 MiB
/// copy has taken over 60 s).
pub(crate) const T: Duration = Duration::from_secs(180);

/// Resource counts of the device, as `rdma resource show` gives them.
pub(crate) type Counts = std::collections::BTreeMap<String, u64>;

pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// One thread for the test and the streams' drivers.
pub(crate) fn current_thread_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// A listener on the device's address, on a port the system picks.
pub(crate) fn listen(env: &TestEnv) -> R<(RdmaListener, SocketAddr)> {
    let l = RdmaListener::bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    let at = l.local_addr()?;
    Ok((l, at))
}

/// Word `k` of the pattern `seed` (splitmix64 of the two).
pub(crate) fn word(seed: u64, k: u64) -> u64 {
    let mut z = seed.wrapping_add(k.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` with the bytes at `offset..` of the endless pseudo-random
/// stream `seed` (little-endian words of [`word`]): any piece of a stream
/// can be checked where it stands.
pub(crate) fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
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
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    fill(seed, 0, &mut v);
    v
}

/// Checks that `piece` is the bytes at `offset..` of the stream `seed`;
/// the error names the first byte that differs.
pub(crate) fn verify(
    seed: u64,
    offset: u64,
    piece: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
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
pub(crate) fn run<F: std::future::Future<Output = R<()>>>(f: F) -> TestResult {
    run_within(T, f)
}

pub(crate) fn run_within<F: std::future::Future<Output = R<()>>>(
    limit: Duration,
    f: F,
) -> TestResult {
    run_on(runtime()?, limit, f)
}

/// Runs `f` on `rt`, failing after `limit`.
pub(crate) fn run_on<F: std::future::Future<Output = R<()>>>(
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
pub(crate) fn counts(env: &TestEnv) -> R<Counts> {
    rdma_tests::resource_counts(&env.device).map_err(|e| e.to_string().into())
}

/// Waits (up to `limit`) until the device's resource counts are `want`
/// again: a closed stream's driver releases its objects within
/// `LINGER + FLUSH_WAIT` (4 s). Returns how long that took.
pub(crate) async fn counts_back_to(env: &TestEnv, want: &Counts, limit: Duration) -> R<Duration> {
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
pub(crate) async fn pair(l: &mut RdmaListener, at: SocketAddr) -> R<(RdmaStream, RdmaStream)> {
    let (a, c) = tokio::join!(l.accept(), RdmaStream::connect(at));
    Ok((c?, a?.0))
}

/// Echoes everything it reads on `stream` until EOF, then shuts down.
pub(crate) async fn echo(stream: RdmaStream) -> R<u64> {
    let (mut rd, mut wr) = stream.into_split();
    let n = tokio::io::copy(&mut rd, &mut wr).await?;
    wr.shutdown().await?;
    Ok(n)
}

/// Reads `len` bytes of the stream `seed`.
pub(crate) struct PatternReader {
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
pub(crate) struct PatternCheck {
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

pub(crate) fn header(req: &Request<Incoming>, name: &str) -> R<u64> {
    let v = req
        .headers()
        .get(name)
        .ok_or_else(|| format!("no {name} header"))?;
    Ok(v.to_str()?.parse()?)
}

/// Reads `s` (a stream or its read half) until EOF or an error, within
/// 10 s; the bytes read.
pub(crate) async fn read_until_end<S: AsyncRead + Unpin>(
    s: &mut S,
) -> R<(usize, std::io::Result<()>)> {
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
