//! Frameworks over the stream: HTTP/1.1 (hyper) and length-delimited frames
//! (tokio-util's codec).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::SinkExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rdma::stream::{RdmaListener, RdmaStream, MAX_PAYLOAD, SLOT_SIZE};
use rdma_tests::{check, TestEnv, TestResult};
use tokio::io::AsyncWriteExt;
use tokio_stream::StreamExt;
use tokio_util::codec::{Framed, FramedRead, FramedWrite, LengthDelimitedCodec};

use super::{header, listen, pattern, read_until_end, run, run_within, verify, R};

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
    codec_frames_over_a_stream,
    http1_over_rdma_streams,
);
