//! rstream: the ping-pong stream benchmark of rdma-core's rsockets
//! (`librdmacm/examples/rstream.c`), over [`rdma::stream`] instead of
//! rsockets, or over TCP through `tokio::net` (`-T s`), on a tokio runtime.
//!
//! ```text
//! rstream [-b bind_address] [-p port] [-S size|all] [-C count] [-I iterations] [-T s|v]...   # server
//! rstream -s server_address [-p port] [-S size|all] [-C count] [-I iterations] [-T s|v]...   # client
//! ```
//!
//! A test is a 16-byte exchange each way (the sync), then, `iterations`
//! times, `count` transfers of `size` bytes from the client to the server
//! followed by as many back; the time runs from the end of the sync to the
//! last transfer. Both sides print rstream's row for it:
//!
//! ```text
//! name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer
//! custom    64      1       10k     1.2m       1.23s      0.01      61.50
//! ```
//!
//! `total` counts the bytes of both directions, `Gb/sec` is that over the
//! time (10^9 bits), and `usec/xfer` the time per transfer: with `-C 1` half
//! a round trip. Any of `-S`, `-C` or `-I` runs that one test (the others
//! default to rstream's: 1000 bytes, 1000 transfers, 1 iteration) on one
//! connection; with none, the series of rstream runs: latency tests (one
//! transfer per iteration) of 64 B to 4 MiB on one connection, then
//! bandwidth tests (one iteration of many transfers) of the same sizes on
//! a second one; `-S all` adds the sizes between the powers of two.
//!
//! The server accepts one connection per test series and exits after the
//! last. `-T s` uses TCP (`TCP_NODELAY`, 512 KiB socket buffers, as rstream
//! sets), `-T v` fills every sent byte with a running pattern and checks
//! every received one. rstream's `-T n` (its default) and `-T b` choose how
//! it waits: spinning on non-blocking calls, or blocking in rsockets, which
//! polls briefly and then sleeps. Here every read and write is a tokio
//! future, and the two map onto the stream's busy-poll time
//! ([`RdmaStream::set_busy_poll`]): `Duration::MAX` by default (the driver
//! never sleeps, at a CPU's cost, as rstream spins), the stream's default
//! with `-T b` (it polls briefly after each completion, then sleeps on the
//! completion channel). `-T a` (rsockets' poll) does not apply. `--runtime
//! multi` runs on tokio's multi-threaded runtime instead of the
//! current-thread one (then the stream's driver task may run on another
//! thread than the test). The test runs in a task spawned on the runtime,
//! as a server's connection handler does; `--block-on` runs it in the
//! runtime's `block_on` future instead, which a current-thread runtime
//! polls only after a turn of its I/O and timer drivers once a completion
//! wakes it (an `epoll_wait` and a clock read per wake-up).

use rdma_examples::net::resolve;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use rdma::stream::{RdmaListener, RdmaStream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Streaming ping-pong test over rdma::stream or TCP (like rdma-core's rstream).
#[derive(Parser, Debug)]
#[command(name = "rstream")]
struct Args {
    /// The server's address: run as the client.
    #[arg(short = 's')]
    server: Option<String>,
    /// Address to bind to (the server's listening address; with -T s, the
    /// client's source address).
    #[arg(short = 'b')]
    bind: Option<String>,
    /// Iterations of each test.
    #[arg(short = 'I', value_parser = clap::value_parser!(u32).range(1..))]
    iterations: Option<u32>,
    /// Transfers each way per iteration.
    #[arg(short = 'C', value_parser = clap::value_parser!(u32).range(1..))]
    count: Option<u32>,
    /// Bytes per transfer, or `all` for the long series.
    #[arg(short = 'S')]
    size: Option<String>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7471)]
    port: u16,
    /// Test options: `s` (or `socket`) TCP instead of RDMA, `v` (or
    /// `verify`) check the data; may be repeated.
    #[arg(short = 'T')]
    options: Vec<String>,
    /// The tokio runtime.
    #[arg(long, value_enum, default_value_t = Flavor::Current)]
    runtime: Flavor,
    /// Runs the test in the runtime's `block_on` future rather than in a
    /// task spawned on it.
    #[arg(long)]
    block_on: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Flavor {
    /// One thread (`new_current_thread`).
    Current,
    /// A worker per CPU (`new_multi_thread`).
    Multi,
}

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// The sizes of the series, each with the `-S` option that includes it (0:
/// always, 1: with `-S all`).
const SERIES: [(usize, u8); 33] = [
    (1 << 6, 0),
    (1 << 7, 1),
    ((1 << 7) + (1 << 6), 1),
    (1 << 8, 1),
    ((1 << 8) + (1 << 7), 1),
    (1 << 9, 1),
    ((1 << 9) + (1 << 8), 1),
    (1 << 10, 1),
    ((1 << 10) + (1 << 9), 1),
    (1 << 11, 1),
    ((1 << 11) + (1 << 10), 1),
    (1 << 12, 0),
    ((1 << 12) + (1 << 11), 1),
    (1 << 13, 1),
    ((1 << 13) + (1 << 12), 1),
    (1 << 14, 1),
    ((1 << 14) + (1 << 13), 1),
    (1 << 15, 1),
    ((1 << 15) + (1 << 14), 1),
    (1 << 16, 0),
    ((1 << 16) + (1 << 15), 1),
    (1 << 17, 1),
    ((1 << 17) + (1 << 16), 1),
    (1 << 18, 1),
    ((1 << 18) + (1 << 17), 1),
    (1 << 19, 1),
    ((1 << 19) + (1 << 18), 1),
    (1 << 20, 0),
    ((1 << 20) + (1 << 19), 1),
    (1 << 21, 1),
    ((1 << 21) + (1 << 20), 1),
    (1 << 22, 1),
    ((1 << 22) + (1 << 21), 1),
];

/// Bytes of the sync exchange before each test.
const SYNC_LEN: usize = 16;
/// Socket buffer sizes of the TCP sockets (rstream's default).
const TCP_BUFFER: u32 = 1 << 19;

/// One test: `iterations` x (`count` transfers there, `count` back).
#[derive(Debug, Clone)]
struct Test {
    name: String,
    size: usize,
    count: u32,
    iterations: u32,
}

/// Transfers per test of the series for a size (rstream's choice).
fn size_to_count(size: usize) -> u32 {
    match size {
        s if s >= 1 << 20 => 100,
        s if s >= 1 << 16 => 1000,
        s if s >= 1 << 10 => 10000,
        _ => 100_000,
    }
}

/// A byte count as rstream prints it: `64`, `1.5k`, `64k`, `1m`, ... (at
/// most one decimal, only below 10 of the unit).
fn size_str(size: u64) -> String {
    let (base, mag) = match size {
        s if s >= 1 << 30 => (1u64 << 30, "g"),
        s if s >= 1 << 20 => (1 << 20, "m"),
        s if s >= 1 << 10 => (1 << 10, "k"),
        _ => (1, ""),
    };
    let whole = size / base;
    let fraction = if whole < 10 {
        (size % base) * 10 / base
    } else {
        0
    };
    if fraction > 0 {
        format!("{whole}.{fraction}{mag}")
    } else {
        format!("{whole}{mag}")
    }
}

/// A count as rstream prints it: `999`, `10k`, `1m`, `2b` (truncated).
fn cnt_str(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{}b", n / 1_000_000_000),
        n if n >= 1_000_000 => format!("{}m", n / 1_000_000),
        n if n >= 1000 => format!("{}k", n / 1000),
        n => n.to_string(),
    }
}

/// The name of a series test: the size as rstream prints it, in at most 4
/// characters, and the kind.
fn series_name(size: usize, kind: &str) -> String {
    let s: String = size_str(size as u64).chars().take(4).collect();
    format!("{s}_{kind}")
}

fn header() -> String {
    format!(
        "{:<10}{:<8}{:<8}{:<8}{:<8}{:>8} {:>10}{:>13}",
        "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer"
    )
}

/// rstream's result row of `t`, which took `elapsed`.
fn row(t: &Test, elapsed: Duration) -> String {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = u64::from(t.iterations) * u64::from(t.count) * t.size as u64 * 2;
    format!(
        "{:<10}{:<8}{:<8}{:<8}{:<8}{:8.2}s{:10.2}{:11.2}",
        t.name,
        size_str(t.size as u64),
        cnt_str(u64::from(t.count)),
        cnt_str(u64::from(t.iterations)),
        size_str(bytes),
        usec / 1e6,
        (bytes * 8) as f64 / (1000.0 * usec),
        usec / f64::from(t.iterations) / (f64::from(t.count) * 2.0)
    )
}

/// The running byte pattern of `-T v`: one for what a side sends, one for
/// what it receives (both start at 0, as the peer's).
#[derive(Debug, Default)]
struct Verify {
    sent: u8,
    received: u8,
    /// Bytes checked so far.
    total: u64,
}

impl Verify {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.sent;
            self.sent = self.sent.wrapping_add(1);
        }
    }

    fn check(&mut self, buf: &[u8]) -> Result<()> {
        for &b in buf {
            if b != self.received {
                return Err(format!("data verification failed byte {}", self.total).into());
            }
            self.received = self.received.wrapping_add(1);
            self.total += 1;
        }
        Ok(())
    }
}

async fn send_xfer<S: AsyncWrite + Unpin>(
    s: &mut S,
    buf: &mut [u8],
    verify: &mut Option<Verify>,
) -> Result<()> {
    if let Some(v) = verify {
        v.fill(buf);
    }
    s.write_all(buf)
        .await
        .map_err(|e| format!("send: {e}").into())
}

async fn recv_xfer<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut [u8],
    verify: &mut Option<Verify>,
) -> Result<()> {
    s.read_exact(buf).await.map_err(|e| format!("recv: {e}"))?;
    match verify {
        Some(v) => v.check(buf),
        None => Ok(()),
    }
}

/// Runs `t` on `s` (as the client or the server) and returns its time.
async fn run_test<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    t: &Test,
    buf: &mut [u8],
    verify: &mut Option<Verify>,
    client: bool,
) -> Result<Duration> {
    let sync = &mut buf[..SYNC_LEN];
    if client {
        send_xfer(s, sync, verify).await?;
        recv_xfer(s, sync, verify).await?;
    } else {
        recv_xfer(s, sync, verify).await?;
        send_xfer(s, sync, verify).await?;
    }
    let data = &mut buf[..t.size];
    let start = Instant::now();
    for _ in 0..t.iterations {
        for _ in 0..t.count {
            if client {
                send_xfer(s, data, verify).await?;
            } else {
                recv_xfer(s, data, verify).await?;
            }
        }
        for _ in 0..t.count {
            if client {
                recv_xfer(s, data, verify).await?;
            } else {
                send_xfer(s, data, verify).await?;
            }
        }
    }
    Ok(start.elapsed())
}

/// Closes the write side and reads to the peer's end of stream, so that
/// neither side goes away while the other still expects bytes.
async fn close<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> Result<()> {
    s.shutdown().await.map_err(|e| format!("shutdown: {e}"))?;
    let mut rest = [0u8; 64];
    match s.read(&mut rest).await {
        Ok(0) => Ok(()),
        Ok(_) => Err("the peer sent more than the test".into()),
        Err(e) => Err(format!("waiting for the peer's end of stream: {e}").into()),
    }
}

/// A connection of either kind.
enum Conn {
    Rdma(RdmaStream),
    Tcp(TcpStream),
}

impl Conn {
    async fn run_test(
        &mut self,
        t: &Test,
        buf: &mut [u8],
        verify: &mut Option<Verify>,
        client: bool,
    ) -> Result<Duration> {
        match self {
            Conn::Rdma(s) => run_test(s, t, buf, verify, client).await,
            Conn::Tcp(s) => run_test(s, t, buf, verify, client).await,
        }
    }

    async fn close(self) -> Result<()> {
        match self {
            Conn::Rdma(s) => close(s).await,
            Conn::Tcp(s) => close(s).await,
        }
    }
}

/// The server's listener of either kind.
enum Listen {
    Rdma(RdmaListener),
    Tcp(TcpListener),
}

/// What a run needs to make its connections.
struct Endpoint {
    /// The client's target; `None` on the server.
    server: Option<SocketAddr>,
    /// The client's source address (TCP only).
    bind: Option<SocketAddr>,
    /// TCP instead of RDMA.
    tcp: bool,
    /// The RDMA streams' busy-poll time (`None`: the default).
    busy_poll: Option<Duration>,
    listener: Option<Listen>,
}

impl Endpoint {
    fn new(args: &Args, opts: &Options) -> Result<Endpoint> {
        let tcp = opts.tcp;
        let busy_poll = (!opts.blocking).then_some(Duration::MAX);
        let bind = args
            .bind
            .as_deref()
            .map(|b| resolve(b, if args.server.is_some() { 0 } else { args.port }))
            .transpose()?;
        if let Some(server) = &args.server {
            if bind.is_some() && !tcp {
                return Err(
                    "-b on the client: rdma::stream's connect takes the source address from the route"
                        .into(),
                );
            }
            return Ok(Endpoint {
                server: Some(resolve(server, args.port)?),
                bind,
                tcp,
                busy_poll,
                listener: None,
            });
        }
        let addr = bind.unwrap_or(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            args.port,
        ));
        let listener = if tcp {
            let socket = tcp_socket(addr)?;
            socket.set_reuseaddr(true)?;
            socket.bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
            Listen::Tcp(socket.listen(1)?)
        } else {
            Listen::Rdma(RdmaListener::bind(addr).map_err(|e| format!("listen on {addr}: {e}"))?)
        };
        Ok(Endpoint {
            server: None,
            bind: None,
            tcp,
            busy_poll,
            listener: Some(listener),
        })
    }

    /// Connects to the server, or accepts the next client.
    async fn open(&mut self) -> Result<Conn> {
        let conn = match (&mut self.listener, self.server) {
            (Some(Listen::Rdma(l)), _) => {
                let (s, _) = l.accept().await.map_err(|e| format!("accept: {e}"))?;
                Conn::Rdma(s)
            }
            (Some(Listen::Tcp(l)), _) => {
                let (s, _) = l.accept().await.map_err(|e| format!("accept: {e}"))?;
                s.set_nodelay(true)?;
                Conn::Tcp(s)
            }
            (None, Some(addr)) if !self.tcp => {
                let s = RdmaStream::connect(addr)
                    .await
                    .map_err(|e| format!("connect to {addr}: {e}"))?;
                Conn::Rdma(s)
            }
            (None, Some(addr)) => {
                let socket = tcp_socket(addr)?;
                if let Some(b) = self.bind {
                    socket.bind(b).map_err(|e| format!("bind {b}: {e}"))?;
                }
                let s = socket
                    .connect(addr)
                    .await
                    .map_err(|e| format!("connect to {addr}: {e}"))?;
                s.set_nodelay(true)?;
                Conn::Tcp(s)
            }
            (None, None) => return Err("neither a server nor a listener".into()),
        };
        if let (Conn::Rdma(s), Some(t)) = (&conn, self.busy_poll) {
            s.set_busy_poll(t);
        }
        Ok(conn)
    }
}

/// A TCP socket of `addr`'s family with rstream's buffer sizes.
fn tcp_socket(addr: SocketAddr) -> Result<TcpSocket> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_send_buffer_size(TCP_BUFFER)?;
    socket.set_recv_buffer_size(TCP_BUFFER)?;
    Ok(socket)
}

/// The options of `-T`.
#[derive(Debug, Default)]
struct Options {
    /// `s`: TCP instead of RDMA.
    tcp: bool,
    /// `v`: check every byte.
    verify: bool,
    /// `b`: sleep while waiting, as rsockets' blocking calls do (they poll
    /// briefly, then sleep on the completion channel): the stream's
    /// default busy-poll time. Else (`n`, rstream's default) the driver
    /// busy-polls without sleeping, as rstream spins on non-blocking calls.
    blocking: bool,
}

fn test_options(options: &[String]) -> Result<Options> {
    let mut o = Options::default();
    for opt in options {
        match opt.to_ascii_lowercase().as_str() {
            "s" | "socket" | "sockets" => o.tcp = true,
            "v" | "verify" => o.verify = true,
            "b" | "block" | "blocking" => o.blocking = true,
            "n" | "nonblock" | "nonblocking" => o.blocking = false,
            other => {
                return Err(format!(
                    "-T {other}: not supported (s: TCP sockets, v: verify, b: blocking, \
                     n: non-blocking; reads and writes are tokio futures, so rstream's a does \
                     not apply)"
                )
                .into())
            }
        }
    }
    Ok(o)
}

async fn run(args: Args) -> Result<()> {
    let opts = test_options(&args.options)?;
    let client = args.server.is_some();
    let mut verify = opts.verify.then(Verify::default);
    let (all, size) = match args.size.as_deref() {
        Some(s) if s.eq_ignore_ascii_case("all") => (true, None),
        Some(s) => {
            let n: usize = s
                .parse()
                .map_err(|_| format!("-S {s}: not a size in bytes or `all`"))?;
            if n == 0 {
                return Err("-S 0: a transfer needs at least one byte".into());
            }
            (false, Some(n))
        }
        None => (false, None),
    };
    let custom = size.is_some() || args.count.is_some() || args.iterations.is_some();
    let mut ep = Endpoint::new(&args, &opts)?;
    println!("{}", header());
    if custom {
        let t = Test {
            name: "custom".into(),
            size: size.unwrap_or(1000),
            count: args.count.unwrap_or(1000),
            iterations: args.iterations.unwrap_or(1),
        };
        let mut buf = vec![0u8; t.size.max(SYNC_LEN)];
        let mut conn = ep.open().await?;
        let elapsed = conn.run_test(&t, &mut buf, &mut verify, client).await?;
        println!("{}", row(&t, elapsed));
        return conn.close().await;
    }
    let sizes: Vec<usize> = SERIES
        .iter()
        .filter(|&&(_, option)| option == 0 || all)
        .map(|&(s, _)| s)
        .collect();
    let mut buf = vec![0u8; sizes.iter().copied().max().unwrap_or(0).max(SYNC_LEN)];
    for latency in [true, false] {
        let mut conn = ep.open().await?;
        for &size in &sizes {
            let t = if latency {
                Test {
                    name: series_name(size, "lat"),
                    size,
                    count: 1,
                    iterations: size_to_count(size),
                }
            } else {
                Test {
                    name: series_name(size, "bw"),
                    size,
                    count: size_to_count(size),
                    iterations: 1,
                }
            };
            let elapsed = conn.run_test(&t, &mut buf, &mut verify, client).await?;
            println!("{}", row(&t, elapsed));
        }
        conn.close().await?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match args.runtime {
        Flavor::Current => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Flavor::Multi => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rstream: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let done = if args.block_on {
        rt.block_on(run(args))
    } else {
        rt.block_on(async {
            match tokio::spawn(run(args)).await {
                Ok(done) => done,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => Err(format!("the test task: {e}").into()),
            }
        })
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rstream: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts_print_as_rstream_prints_them() {
        assert_eq!(size_str(64), "64");
        assert_eq!(size_str(1536), "1.5k");
        assert_eq!(size_str(65536), "64k");
        assert_eq!(size_str(98304), "96k");
        assert_eq!(size_str(1 << 20), "1m");
        assert_eq!(size_str(3 << 19), "1.5m");
        assert_eq!(size_str(12_800_000), "12m");
        assert_eq!(cnt_str(999), "999");
        assert_eq!(cnt_str(10_000), "10k");
        assert_eq!(cnt_str(2_500_000), "2m");
        assert_eq!(series_name(6 << 20, "bw"), "6m_bw");
    }

    #[test]
    fn a_row_has_rstream_columns_and_figures() {
        let t = Test {
            name: "custom".into(),
            size: 64,
            count: 1,
            iterations: 1000,
        };
        // 1000 round trips of 64 B each way in 0.1 s: 128000 bytes, 50 us per transfer.
        let r = row(&t, Duration::from_millis(100));
        assert_eq!(
            r,
            "custom    64      1       1k      125k        0.10s      0.01      50.00"
        );
        assert_eq!(
            header(),
            "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer"
        );
    }

    #[test]
    fn verify_catches_a_wrong_byte_and_says_where() {
        let mut tx = Verify::default();
        let mut rx = Verify::default();
        let mut buf = [0u8; 300];
        tx.fill(&mut buf);
        rx.check(&buf).unwrap();
        tx.fill(&mut buf[..10]);
        buf[3] ^= 1;
        let e = rx.check(&buf[..10]).unwrap_err().to_string();
        assert_eq!(e, "data verification failed byte 303");
    }

    #[test]
    fn test_options_take_s_v_b_n_and_refuse_the_rest() {
        let o = |v: &[&str]| test_options(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let d = o(&[]).unwrap();
        assert_eq!((d.tcp, d.verify, d.blocking), (false, false, false));
        let sv = o(&["s", "verify"]).unwrap();
        assert_eq!((sv.tcp, sv.verify, sv.blocking), (true, true, false));
        assert!(o(&["b"]).unwrap().blocking);
        assert!(o(&["block"]).unwrap().blocking);
        // The last of b and n counts, as in rstream.
        assert!(!o(&["b", "n"]).unwrap().blocking);
        assert!(o(&["a"]).is_err());
        assert!(o(&["x"]).is_err());
    }
}
