//! rping: an RDMA ping over the connection manager, on the wire the same as
//! rdma-core's `rping`, so either side may be the C tool.
//!
//! ```text
//! rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] [-P]
//! rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
//! ```
//!
//! The protocol, per ping: the client fills its start buffer with
//! `rdma-ping-N: ` and a rotating printable pattern, and SENDs the buffer's
//! address, rkey and size (a 16-byte `rping_rdma_info`, big-endian). The
//! server RDMA READs that buffer and SENDs a go-ahead; the client SENDs the
//! info of its sink buffer; the server RDMA WRITEs the string into it and
//! SENDs a second go-ahead; the client compares (`-V`) and prints (`-v`).
//! After `-C` pings the client disconnects.
//!
//! Built on the async CM of `rdma` (`AsyncCm`) and awaitable completions
//! (`AsyncCompletionQueue`), on a single-threaded tokio runtime.

use rdma_examples::net::resolve;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rdma::cm::{AsyncCm, AsyncCmId, CmEventKind, CmId, ConnParam, PortSpace};
use rdma::{
    AccessFlags, AsyncCompletionQueue, CompletionChannel, CompletionQueue, MemoryRegion,
    ProtectionDomain, QpCaps, QpType, RecvWr, RemoteMemory, SendWr, WcOpcode, WcStatus,
    WorkCompletion,
};

/// The largest ping (rping's RPING_BUFSIZE - 1).
const MAX_SIZE: usize = 64 * 1024 - 1;
/// The smallest ping: room for "rdma-ping-2147483647: " (rping's RPING_MIN_BUFSIZE).
const MIN_SIZE: usize = "2147483647".len() + 1 + "rdma-ping-%d: ".len() + 1;
/// Size of `struct rping_rdma_info`: be64 addr, be32 rkey, be32 size.
const INFO_LEN: usize = 16;
/// Send queue depth (RPING_SQ_DEPTH).
const SQ_DEPTH: u32 = 16;
/// How long each CM step of the set-up may take.
const CM_TIMEOUT: Duration = Duration::from_secs(10);
/// The first printable character of the pattern ('A') and the last ('z').
const PATTERN_FIRST: u8 = 65;
const PATTERN_LAST: u8 = 122;

/// Ping a peer over RDMA (like rdma-core's rping).
#[derive(Parser, Debug)]
#[command(name = "rping")]
struct Args {
    /// Server side. To bind to any address with IPv6 use -a ::0.
    #[arg(
        short = 's',
        conflicts_with = "client",
        required_unless_present = "client"
    )]
    server: bool,
    /// Client side.
    #[arg(short = 'c')]
    client: bool,
    /// Address: to listen on (server, default 0.0.0.0) or to connect to (client).
    #[arg(short = 'a')]
    addr: Option<String>,
    /// Source address to bind to for the client.
    #[arg(short = 'I')]
    source: Option<String>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Ping count (0: forever).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// Ping data size.
    #[arg(short = 'S', default_value_t = 64, value_parser = ping_size)]
    size: usize,
    /// Display ping data to stdout.
    #[arg(short = 'v')]
    verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    validate: bool,
    /// Debug printfs.
    #[arg(short = 'd')]
    debug: bool,
    /// Persistent server mode allowing multiple connections.
    #[arg(short = 'P')]
    persistent: bool,
}

fn ping_size(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if !(MIN_SIZE..=MAX_SIZE).contains(&n) {
        return Err(format!(
            "invalid size {n} (valid range is {MIN_SIZE} to {MAX_SIZE})"
        ));
    }
    Ok(n)
}

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// The 16-byte buffer advertisement of the rping protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Info {
    addr: u64,
    rkey: u32,
    size: u32,
}

impl Info {
    fn encode(&self) -> [u8; INFO_LEN] {
        let mut b = [0; INFO_LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    fn decode(b: &[u8; INFO_LEN]) -> Info {
        let (addr, rest) = b.split_at(8);
        let (rkey, size) = rest.split_at(4);
        Info {
            addr: u64::from_be_bytes(addr.try_into().unwrap_or_default()),
            rkey: u32::from_be_bytes(rkey.try_into().unwrap_or_default()),
            size: u32::from_be_bytes(size.try_into().unwrap_or_default()),
        }
    }

    fn remote(&self) -> RemoteMemory {
        RemoteMemory {
            addr: self.addr,
            len: u64::from(self.size),
            rkey: self.rkey,
        }
    }
}

/// The ping text of round `ping`: "rdma-ping-N: " then printable characters
/// from `start` on, wrapping from 'z' back to 'A', NUL-terminated.
fn ping_text(ping: u64, start: u8, size: usize) -> Vec<u8> {
    let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
    buf.truncate(size - 1);
    let mut c = start;
    while buf.len() < size - 1 {
        buf.push(c);
        c = if c >= PATTERN_LAST {
            PATTERN_FIRST
        } else {
            c + 1
        };
    }
    buf.push(0);
    buf
}

/// The bytes up to the first NUL, as C's `%s` prints them.
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

// Work request ids.
const WR_RECV: u64 = 1;
const WR_SEND: u64 = 2;
const WR_RDMA: u64 = 3;

/// The verbs resources of one connection, as rping's: a receive buffer and
/// a send buffer of one info each, the RDMA buffer (READ sink on the
/// server, WRITE sink on the client) and, on the client, the start buffer.
struct Buffers {
    /// recv info at 0..16, send info at 16..32.
    msg: MemoryRegion,
    rdma: MemoryRegion,
    start: Option<MemoryRegion>,
    cq: AsyncCompletionQueue,
    _pd: ProtectionDomain,
}

/// Creates the PD, CQ (with a channel), QP and buffers on the id's device.
fn setup(id: &mut CmId, size: usize, client: bool) -> Result<Buffers> {
    let ctx = id.context()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let channel = CompletionChannel::new(&ctx)?;
    let cq = CompletionQueue::builder(&ctx)
        .cqe(SQ_DEPTH as i32 * 2)
        .channel(&channel)
        .build()?;
    id.create_qp(
        &pd,
        QpType::Rc,
        &cq,
        &cq,
        QpCaps {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
    )?;
    let msg = MemoryRegion::new(&pd, 2 * INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    // A READ sink on iWARP needs remote write access: the responder writes it.
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let rdma = MemoryRegion::new(&pd, size, remote)?;
    let start = if client {
        Some(MemoryRegion::new(&pd, size, remote)?)
    } else {
        None
    };
    Ok(Buffers {
        msg,
        rdma,
        start,
        cq: AsyncCompletionQueue::new(cq)?,
        _pd: pd,
    })
}

/// What the connection's next event is.
enum Step {
    Completion(WorkCompletion),
    Disconnected,
}

/// A connected rping endpoint.
struct Conn {
    id: AsyncCmId,
    bufs: Buffers,
    size: usize,
    server: bool,
    debug: bool,
}

impl Conn {
    fn log(&self, what: std::fmt::Arguments<'_>) {
        if self.debug {
            println!("{what}");
        }
    }

    fn post_recv(&self) -> Result<()> {
        let sge = [self.bufs.msg.sge(0..INFO_LEN)?];
        self.qp()?.post_recv(&mut [RecvWr::new(WR_RECV, &sge)])?;
        Ok(())
    }

    fn qp(&self) -> Result<&rdma::QueuePair> {
        Ok(self.id.id().qp().ok_or("the CM id has no QP")?)
    }

    /// SENDs `info` (the go-ahead of the server is an all-zero info, as C's).
    fn send_info(&self, info: Info) -> Result<()> {
        self.bufs.msg.write(INFO_LEN, &info.encode())?;
        let sge = [self.bufs.msg.sge(INFO_LEN..2 * INFO_LEN)?];
        self.qp()?
            .post_send(&mut [SendWr::send(WR_SEND, &sge).signaled()])?;
        Ok(())
    }

    /// The next completion or the peer's disconnect; completions come first.
    async fn next(&mut self) -> Result<Step> {
        loop {
            let mut wc = [MaybeUninit::uninit(); 1];
            let ev = tokio::select! {
                biased;
                r = self.bufs.cq.wait(&mut wc) => {
                    let wc = *r?.first().ok_or("empty poll")?;
                    return Ok(Step::Completion(wc));
                }
                ev = self.id.next_event() => ev?,
            };
            match ev.kind {
                CmEventKind::Disconnected => {
                    let who = if self.server { "server" } else { "client" };
                    eprintln!("{who} DISCONNECT EVENT...");
                    return Ok(Step::Disconnected);
                }
                kind if kind.is_error() => {
                    return Err(format!("cma event {kind:?}, error {}", ev.status).into());
                }
                kind => self.log(format_args!("unhandled event: {kind:?}, ignoring")),
            }
        }
    }

    /// Waits for a completion of `want` (SEND completions are passed over;
    /// a receive is re-posted). `None` when the peer disconnected first.
    async fn wait(&mut self, want: WcOpcode) -> Result<Option<WorkCompletion>> {
        loop {
            let wc = match self.next().await? {
                Step::Disconnected => return Ok(None),
                Step::Completion(wc) => wc,
            };
            if wc.status() == WcStatus::WorkRequestFlushed {
                self.log(format_args!("flushed completion {wc:?}"));
                continue;
            }
            if !wc.is_success() {
                return Err(format!("cq completion failed status {}", wc.status()).into());
            }
            match wc.opcode() {
                WcOpcode::Send => self.log(format_args!("send completion")),
                WcOpcode::Recv => {
                    self.log(format_args!("recv completion"));
                    if wc.byte_len() as usize != INFO_LEN {
                        return Err(format!("Received bogus data, size {}", wc.byte_len()).into());
                    }
                }
                op => self.log(format_args!("{op:?} completion")),
            }
            if wc.opcode() == want {
                return Ok(Some(wc));
            }
            if wc.opcode() != WcOpcode::Send {
                return Err(format!("unexpected {:?} completion", wc.opcode()).into());
            }
        }
    }

    /// Waits for the peer's next info message and re-posts the receive.
    async fn recv_info(&mut self) -> Result<Option<Info>> {
        if self.wait(WcOpcode::Recv).await?.is_none() {
            return Ok(None);
        }
        let mut b = [0; INFO_LEN];
        self.bufs.msg.read(0, &mut b)?;
        self.post_recv()?;
        Ok(Some(Info::decode(&b)))
    }

    /// One RDMA READ or WRITE of `len` bytes of the RDMA buffer, waited for.
    async fn rdma(&mut self, write: bool, len: usize, to: RemoteMemory) -> Result<()> {
        let remote = to.slice(0, len as u64)?;
        let sge = [self.bufs.rdma.sge(0..len)?];
        let wr = if write {
            SendWr::rdma_write(WR_RDMA, &sge, remote)
        } else {
            SendWr::rdma_read(WR_RDMA, &sge, remote)
        };
        self.qp()?.post_send(&mut [wr.signaled()])?;
        let want = if write {
            WcOpcode::RdmaWrite
        } else {
            WcOpcode::RdmaRead
        };
        match self.wait(want).await? {
            Some(_) => Ok(()),
            None => Err(format!("disconnected while waiting for the {want:?}").into()),
        }
    }

    /// The server's loop: until the client disconnects.
    async fn serve(&mut self, verbose: bool) -> Result<()> {
        loop {
            // The client's start buffer.
            let Some(src) = self.recv_info().await? else {
                return Ok(());
            };
            self.log(format_args!(
                "Received rkey {:x} addr {:x} len {} from peer",
                src.rkey, src.addr, src.size
            ));
            let len = src.size as usize;
            if len == 0 || len > self.size {
                return Err(format!(
                    "the client advertises {len} bytes; this server pings 1 to {} (-S)",
                    self.size
                )
                .into());
            }
            self.rdma(false, len, src.remote()).await?;
            self.log(format_args!("server received read complete"));
            let data = self.bufs.rdma.to_vec(..)?;
            if verbose {
                println!("server ping data: {}", c_str(&data));
            }
            self.send_info(Info::default())?;
            self.log(format_args!("server posted go ahead"));

            // The client's sink buffer.
            let Some(sink) = self.recv_info().await? else {
                return Err("the client disconnected before advertising its sink".into());
            };
            let len = data
                .iter()
                .position(|&c| c == 0)
                .map_or(data.len(), |n| n + 1);
            if len > sink.size as usize {
                return Err(
                    format!("the client's sink has {} bytes, the ping {len}", sink.size).into(),
                );
            }
            self.rdma(true, len, sink.remote()).await?;
            self.log(format_args!("server rdma write complete"));
            self.send_info(Info::default())?;
            self.log(format_args!("server posted go ahead"));
        }
    }

    /// The client's loop: `count` pings (0: forever).
    async fn ping(&mut self, count: u64, verbose: bool, validate: bool) -> Result<()> {
        let mut start = PATTERN_FIRST;
        let mut ping = 0;
        while count == 0 || ping < count {
            let text = ping_text(ping, start, self.size);
            start = if start >= PATTERN_LAST {
                PATTERN_FIRST
            } else {
                start + 1
            };
            let start_mr = self.bufs.start.as_ref().ok_or("no start buffer")?;
            start_mr.write(0, &text)?;
            let info = info_of(start_mr, self.size)?;
            self.send_info(info)?;
            if self.recv_info().await?.is_none() {
                return Err("the server disconnected before reading the ping".into());
            }
            let info = info_of(&self.bufs.rdma, self.size)?;
            self.send_info(info)?;
            if self.recv_info().await?.is_none() {
                return Err("the server disconnected before writing the ping back".into());
            }
            let echo = self.bufs.rdma.to_vec(..)?;
            if validate && echo != text {
                return Err("data mismatch!".into());
            }
            if verbose {
                println!("ping data: {}", c_str(&echo));
            }
            ping += 1;
        }
        Ok(())
    }
}

fn info_of(mr: &MemoryRegion, size: usize) -> Result<Info> {
    let r = mr.remote(0..size)?;
    Ok(Info {
        addr: r.addr,
        rkey: r.rkey,
        size: size as u32,
    })
}

fn conn_param() -> ConnParam {
    ConnParam {
        private_data: Vec::new(),
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        qp_num: 0,
    }
}

async fn run_client(a: &Args) -> Result<()> {
    let host = a
        .addr
        .as_deref()
        .ok_or("the client needs the server address (-a)")?;
    let dst = resolve(host, a.port)?;
    let src = match &a.source {
        Some(s) => Some(resolve(s, 0)?),
        None => None,
    };
    let cm = AsyncCm::new()?;
    let mut id = cm.create_id(PortSpace::Tcp)?;
    id.id().resolve_addr(src, dst, Duration::from_secs(2))?;
    id.expect(CmEventKind::AddrResolved, CM_TIMEOUT).await?;
    id.id().resolve_route(Duration::from_secs(2))?;
    id.expect(CmEventKind::RouteResolved, CM_TIMEOUT).await?;
    if a.debug {
        println!("rdma_resolve_addr - rdma_resolve_route successful");
    }
    let bufs = setup(id.id_mut(), a.size, true)?;
    let mut conn = Conn {
        id,
        bufs,
        size: a.size,
        server: false,
        debug: a.debug,
    };
    conn.post_recv()?;
    conn.id.id().connect(&conn_param())?;
    conn.id
        .expect(CmEventKind::Established, CM_TIMEOUT)
        .await
        .map_err(|e| format!("connect error: {e}"))?;
    conn.log(format_args!("rdma_connect successful"));
    let result = conn.ping(a.count, a.verbose, a.validate).await;
    conn.id.id().disconnect().ok();
    result.map_err(|e| format!("rping client failed: {e}").into())
}

async fn serve_one(req: rdma::cm::ConnectRequest, a: &Args) -> Result<()> {
    let mut req = req;
    let bufs = setup(req.id_mut(), a.size, false)?;
    // Receive before accepting: the client sends as soon as it is connected.
    let sge = [bufs.msg.sge(0..INFO_LEN)?];
    req.id_mut()
        .qp()
        .ok_or("the CM id has no QP")?
        .post_recv(&mut [RecvWr::new(WR_RECV, &sge)])?;
    if a.debug {
        println!("accepting client connection request");
    }
    let (id, _) = req.accept(&conn_param(), CM_TIMEOUT).await?;
    let mut conn = Conn {
        id,
        bufs,
        size: a.size,
        server: true,
        debug: a.debug,
    };
    let result = conn.serve(a.verbose).await;
    conn.id.id().disconnect().ok();
    result.map_err(|e| format!("rping server failed: {e}").into())
}

async fn run_server(a: Args) -> Result<()> {
    let ip = match a.addr.as_deref() {
        Some(h) => resolve(h, a.port)?.ip(),
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let cm = AsyncCm::new()?;
    let mut listener = cm.listen(SocketAddr::new(ip, a.port), 3)?;
    if a.debug {
        println!("rdma_bind_addr successful");
    }
    if !a.persistent {
        let req = listener.accept().await?;
        return serve_one(req, &a).await;
    }
    let a = std::sync::Arc::new(a);
    loop {
        let req = listener.accept().await?;
        let a = std::sync::Arc::clone(&a);
        tokio::task::spawn_local(async move {
            if let Err(e) = serve_one(req, &a).await {
                eprintln!("{e}");
            }
        });
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rping: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let local = tokio::task::LocalSet::new();
    let r = local.block_on(&rt, async move {
        if a.server {
            run_server(a).await
        } else {
            run_client(&a).await
        }
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rping: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_text_is_rpings() {
        let t = ping_text(3, b'y', 26);
        assert_eq!(t.len(), 26);
        assert_eq!(&t[..], b"rdma-ping-3: yzABCDEFGHIJ\0");
    }

    #[test]
    fn info_round_trips_big_endian() {
        let i = Info {
            addr: 0x0102_0304_0506_0708,
            rkey: 0x0a0b_0c0d,
            size: 64,
        };
        let b = i.encode();
        assert_eq!(b[0], 1);
        assert_eq!(b[8], 0x0a);
        assert_eq!(b[15], 64);
        assert_eq!(Info::decode(&b), i);
    }

    #[test]
    fn sizes_outside_rpings_range_are_refused() {
        assert!(ping_size("25").is_err());
        assert!(ping_size("26").is_ok());
        assert!(ping_size("65535").is_ok());
        assert!(ping_size("65536").is_err());
        assert!(ping_size("x").is_err());
    }
}
