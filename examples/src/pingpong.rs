//! The ping-pong protocol of rdma-core's `ibv_rc_pingpong`,
//! `ibv_uc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong`, on the safe
//! `rdma` API, so that these programs and the C ones talk to each other.
//!
//! # The exchange
//! The server listens on a TCP port (18515); the client connects. Each side
//! describes each of its queue pairs in one 52-byte message: the text
//! `LLLL:QQQQQQ:PPPPPP:GGGG...` (LID, QP number and first PSN in hex, then
//! the 16 GID bytes as 32 hex digits in network order) and a NUL. The client
//! sends its messages first; the server reads them, moves its QPs to RTR and
//! RTS, and answers with its own; the client answers `done` and a NUL, and
//! both close the connection. Then the client sends the first message of
//! the ping-pong over RDMA.
//!
//! A message with a non-zero GID interface ID asks for a global route (GRH,
//! hop limit 1) from the local GID index given with `-g`: on RoCE both sides
//! must pass `-g`.

use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::net::{Ipv6Addr, TcpListener, TcpStream};
use std::ops::Range;
use std::time::{Duration, Instant};

use rdma::{
    AddressHandle, Context, DeviceList, Gid, MemoryRegion, Path, QueuePair, RecvWr, SendWr,
    SharedReceiveQueue, WorkCompletion,
};

/// The TCP port of the exchange when none is given.
pub const DEFAULT_PORT: u16 = 18515;
/// The work request ID of every receive.
pub const RECV_WRID: u64 = 1;
/// The work request ID of every send.
pub const SEND_WRID: u64 = 2;
/// The length of one exchange message, its NUL included.
pub const MSG_LEN: usize = 52;
/// What the client sends last: `done` and a NUL.
pub const DONE: &[u8; 5] = b"done\0";
/// The byte the client writes at the start of each page of its buffer with
/// `-c`, and the server expects there. (The C tools compute it as
/// `page % sizeof(char)`, which is always 0.)
pub const CHECK_BYTE: u8 = 0;
/// How long a side waits for the other on the TCP connection.
const TCP_TIMEOUT: Duration = Duration::from_secs(60);

/// An error of an example: a message for the user.
pub type Result<T> = std::result::Result<T, String>;

/// Parses a number as C's `strtoul(s, NULL, 0)` would for sane input:
/// decimal, or hex with `0x`.
pub fn num<T: TryFrom<i64>>(s: &str) -> Result<T> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16),
        None => t.parse::<i64>(),
    }
    .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    let v = if neg { -v } else { v };
    T::try_from(v).map_err(|_| format!("{s} is out of range"))
}

/// One side's description of one queue pair, as exchanged over TCP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dest {
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// The QP number.
    pub qpn: u32,
    /// The first packet sequence number the QP sends.
    pub psn: u32,
    /// The GID to reach the QP at (zero for none).
    pub gid: Gid,
}

impl Dest {
    /// The 52-byte message of this description.
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let mut text = format!("{:04x}:{:06x}:{:06x}:", self.lid, self.qpn, self.psn);
        for b in self.gid.0 {
            text.push_str(&format!("{b:02x}"));
        }
        let mut msg = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Parses a message (up to its NUL).
    pub fn from_wire(msg: &[u8]) -> Result<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end])
            .map_err(|_| "the peer's address message is not text".to_string())?;
        let bad = || format!("malformed address message from the peer: {text:?}");
        let mut parts = text.split(':');
        let mut field = |max: u32| -> Result<u32> {
            let f = parts.next().ok_or_else(bad)?;
            u32::from_str_radix(f, 16)
                .ok()
                .filter(|&v| v <= max)
                .ok_or_else(bad)
        };
        let lid = field(0xffff)? as u16;
        let qpn = field(0xff_ffff)?;
        let psn = field(0xff_ffff)?;
        let hex = parts.next().ok_or_else(bad)?;
        if hex.len() != 32 || parts.next().is_some() {
            return Err(bad());
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Dest {
            lid,
            qpn,
            psn,
            gid: Gid(gid),
        })
    }

    /// Prints the description as the C tools do (`local address: ...`).
    pub fn print(&self, what: &str) {
        println!(
            "  {what} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid,
            self.qpn,
            self.psn,
            ntop(self.gid)
        );
    }

    /// The path to this side from local port `port`: a global route from
    /// local GID `sgid_index` when the description has a GID, as the C
    /// tools decide it (a non-zero interface ID), else a LID route.
    pub fn path(&self, port: u8, sl: u8, sgid_index: i32) -> Path {
        let mut path = Path {
            dgid: None,
            sgid_index: 0,
            hop_limit: 1,
            traffic_class: 0,
            flow_label: 0,
            dlid: self.lid,
            sl,
            port,
        };
        if self.gid.interface_id() != 0 {
            path.dgid = Some(self.gid);
            // Without -g the C tools pass -1 here, which the device refuses;
            // index 0 is at least a GID that exists.
            path.sgid_index = u8::try_from(sgid_index).unwrap_or(0);
        }
        path
    }
}

/// A GID as `inet_ntop` prints it.
fn ntop(g: Gid) -> String {
    Ipv6Addr::from(g.0).to_string()
}

/// The first packet sequence number: 24 random bits.
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() & 0xff_ffff) as u32
}

/// Opens device `name`, or the first device.
pub fn open_device(name: Option<&str>) -> Result<Context> {
    let list = DeviceList::new().map_err(|e| format!("Failed to get IB devices list: {e}"))?;
    let dev = match name {
        Some(n) => list
            .find(n)
            .ok_or_else(|| format!("IB device {n} not found"))?,
        None => list
            .iter()
            .next()
            .ok_or_else(|| "No IB devices found".to_string())?,
    };
    dev.open()
        .map_err(|e| format!("Couldn't get context for {}: {e}", dev.name()))
}

/// The local LID and the GID of index `gid_idx` (zero for a negative index)
/// of port `port`.
pub fn local_address(ctx: &Context, port: u8, gid_idx: i32) -> Result<(u16, Gid)> {
    let pa = ctx
        .query_port(port)
        .map_err(|e| format!("Couldn't get port info: {e}"))?;
    if pa.link_layer() != "Ethernet" && pa.lid() == 0 {
        return Err("Couldn't get local LID".into());
    }
    let gid = match u32::try_from(gid_idx) {
        Ok(i) => ctx
            .query_gid(port, i)
            .map_err(|e| format!("can't read sgid of index {i}: {e}"))?,
        Err(_) => Gid::default(),
    };
    Ok((pa.lid(), gid))
}

fn tcp_err(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

fn read_dests(s: &mut TcpStream, n: usize) -> Result<Vec<Dest>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut msg = [0u8; MSG_LEN];
        s.read_exact(&mut msg)
            .map_err(|e| tcp_err(&format!("Couldn't read remote address [{i}]"), e))?;
        out.push(Dest::from_wire(&msg)?);
    }
    Ok(out)
}

fn write_dests(s: &mut TcpStream, dests: &[Dest]) -> Result<()> {
    for d in dests {
        // One write per message: the C side reads each with one read().
        s.write_all(&d.to_wire())
            .map_err(|e| tcp_err("Couldn't send local address", e))?;
    }
    Ok(())
}

/// The client's half of the exchange: sends `mine`, returns the server's
/// descriptions (as many as `mine`).
pub fn client_exchange(server: &str, port: u16, mine: &[Dest]) -> Result<Vec<Dest>> {
    let mut s = TcpStream::connect((server, port))
        .map_err(|e| tcp_err(&format!("Couldn't connect to {server}:{port}"), e))?;
    s.set_read_timeout(Some(TCP_TIMEOUT))
        .map_err(|e| tcp_err("setsockopt", e))?;
    write_dests(&mut s, mine)?;
    let remote = read_dests(&mut s, mine.len())?;
    s.write_all(DONE)
        .map_err(|e| tcp_err("Couldn't read/write remote address", e))?;
    Ok(remote)
}

/// The server's half: waits for one client on `port`, reads its
/// descriptions, calls `connect` with them (move the QPs to RTS there), then
/// answers with `mine` and waits for `done`.
pub fn server_exchange(
    port: u16,
    mine: &[Dest],
    connect: impl FnOnce(&[Dest]) -> Result<()>,
) -> Result<Vec<Dest>> {
    // std sets SO_REUSEADDR on listening sockets, as the C tools do.
    let listener = TcpListener::bind(("0.0.0.0", port))
        .map_err(|e| tcp_err(&format!("Couldn't listen to port {port}"), e))?;
    let (mut s, _) = listener
        .accept()
        .map_err(|e| tcp_err("accept() failed", e))?;
    drop(listener);
    s.set_read_timeout(Some(TCP_TIMEOUT))
        .map_err(|e| tcp_err("setsockopt", e))?;
    let remote = read_dests(&mut s, mine.len())?;
    connect(&remote).map_err(|e| format!("Couldn't connect to remote QP: {e}"))?;
    write_dests(&mut s, mine)?;
    let mut done = [0u8; DONE.len()];
    s.read_exact(&mut done)
        .map_err(|e| tcp_err("Couldn't send/recv local address", e))?;
    if &done != DONE {
        return Err(format!(
            "the client ended the exchange with {done:?}, not \"done\""
        ));
    }
    Ok(remote)
}

/// Where receives are posted.
pub enum RecvQueue {
    /// The receive queue of the first QP.
    Qp,
    /// A shared receive queue.
    Srq(SharedReceiveQueue),
}

/// A UD destination: the address handle, the remote QPN and QKey.
pub struct UdDest {
    /// The address handle to the peer.
    pub ah: AddressHandle,
    /// The peer's QP number.
    pub qpn: u32,
    /// The QKey the peer's QP expects.
    pub qkey: u32,
}

/// The state of one side's ping-pong: its queue pairs and the one buffer
/// that every send reads and every receive writes, as in the C tools.
pub struct Pingpong {
    /// The queue pairs (one, or `-q` of them with an SRQ).
    pub qps: Vec<QueuePair>,
    /// Where receives go.
    pub recv_queue: RecvQueue,
    /// The buffer.
    pub mr: MemoryRegion,
    /// The part of the buffer receives land in.
    pub recv_range: Range<usize>,
    /// The part of the buffer sends read (the payload).
    pub send_range: Range<usize>,
    /// Send inline (the QP's inline limit covers the message).
    pub inline: bool,
    /// Where UD sends go.
    pub ud: Option<UdDest>,
    /// Receives kept posted.
    pub rx_depth: u32,
    /// Receives are topped up when fewer than this many remain.
    pub refill_at: u32,
    /// Receives outstanding.
    routs: u32,
}

impl Pingpong {
    /// A ping-pong over `qps` with nothing posted yet.
    pub fn new(
        qps: Vec<QueuePair>,
        recv_queue: RecvQueue,
        mr: MemoryRegion,
        recv_range: Range<usize>,
        send_range: Range<usize>,
        rx_depth: u32,
        refill_at: u32,
    ) -> Pingpong {
        let size = send_range.len();
        let inline = qps
            .iter()
            .all(|q| q.caps().max_inline_data as usize >= size);
        Pingpong {
            qps,
            recv_queue,
            mr,
            recv_range,
            send_range,
            inline,
            ud: None,
            rx_depth,
            refill_at,
            routs: 0,
        }
    }

    /// Posts up to `n` receives, one call each as the C tools do; returns how
    /// many were posted (it stops at the first refusal).
    fn post_recvs(&self, n: u32) -> u32 {
        let Ok(sge) = self.mr.sge(self.recv_range.clone()) else {
            return 0;
        };
        let sges = [sge];
        for i in 0..n {
            let mut wr = [RecvWr::new(RECV_WRID, &sges)];
            let r = match &self.recv_queue {
                RecvQueue::Qp => self.qps[0].post_recv(&mut wr),
                RecvQueue::Srq(srq) => srq.post_recv(&mut wr),
            };
            if r.is_err() {
                return i;
            }
        }
        n
    }

    /// Fills the receive queue (`rx_depth` receives).
    pub fn post_initial_recvs(&mut self) -> Result<()> {
        self.routs = self.post_recvs(self.rx_depth);
        if self.routs < self.rx_depth {
            return Err(format!("Couldn't post receive ({})", self.routs));
        }
        Ok(())
    }

    /// Posts the payload as a signalled SEND on QP `qp`.
    pub fn post_send(&self, qp: usize) -> Result<()> {
        let sges = [self
            .mr
            .sge(self.send_range.clone())
            .map_err(|e| e.to_string())?];
        let mut wr = SendWr::send(SEND_WRID, &sges).signaled();
        if self.inline {
            wr = wr.inline();
        }
        if let Some(ud) = &self.ud {
            wr = wr.ud(&ud.ah, ud.qpn, ud.qkey);
        }
        self.qps[qp]
            .post_send(&mut [wr])
            .map_err(|e| format!("Couldn't post send: {e}"))
    }

    /// With `-c` on the client: marks the first payload byte of every page.
    pub fn mark_pages(&self) -> Result<()> {
        for off in (0..self.send_range.len()).step_by(page_size()) {
            self.mr
                .write(self.send_range.start + off, &[CHECK_BYTE])
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// With `-c` on the server: checks the marks; prints each bad page as
    /// the C tools do, and fails (they only print).
    pub fn check_pages(&self) -> Result<()> {
        let mut bad = 0;
        for (page, off) in (0..self.send_range.len()).step_by(page_size()).enumerate() {
            let mut b = [0u8];
            self.mr
                .read(self.send_range.start + off, &mut b)
                .map_err(|e| e.to_string())?;
            if b[0] != CHECK_BYTE {
                println!("invalid data in page {page}");
                bad += 1;
            }
        }
        if bad > 0 {
            return Err(format!("{bad} page(s) received with invalid data"));
        }
        Ok(())
    }

    fn qp_index(&self, qp_num: u32) -> Option<usize> {
        self.qps.iter().position(|q| q.qp_num() == qp_num)
    }

    /// Runs the ping-pong until `iters` sends and receives completed: each QP
    /// sends again once its previous send and the peer's answer completed.
    /// The client starts it by sending on every QP (`client`).
    ///
    /// With `events`, sleeps on the CQ's completion channel (which the CQ
    /// must have, and which must be armed before the peer can send).
    pub fn run(
        &mut self,
        cq: &rdma::CompletionQueue,
        events: bool,
        iters: u32,
        client: bool,
    ) -> Result<Duration> {
        let mut pending = vec![RECV_WRID; self.qps.len()];
        if client {
            for (i, p) in pending.iter_mut().enumerate() {
                self.post_send(i)?;
                *p |= SEND_WRID;
            }
        }
        let start = Instant::now();
        let batch = (self.rx_depth as usize + self.qps.len()).max(2);
        let mut storage: Vec<MaybeUninit<WorkCompletion>> =
            (0..batch).map(|_| MaybeUninit::uninit()).collect();
        let (mut scnt, mut rcnt) = (0u32, 0u32);
        while rcnt < iters || scnt < iters {
            if events {
                cq.get_event()
                    .map_err(|e| format!("Failed to get cq_event: {e}"))?;
                cq.req_notify(false)
                    .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
            }
            // Drain: after re-arming, a completion already queued would
            // not raise another event.
            loop {
                let wcs = cq
                    .poll(&mut storage)
                    .map_err(|e| format!("poll CQ failed: {e}"))?;
                if wcs.is_empty() {
                    break;
                }
                for wc in wcs.iter() {
                    self.complete(wc, &mut pending, &mut scnt, &mut rcnt, iters)?;
                }
                if !events {
                    break;
                }
            }
        }
        Ok(start.elapsed())
    }

    fn complete(
        &mut self,
        wc: &WorkCompletion,
        pending: &mut [u64],
        scnt: &mut u32,
        rcnt: &mut u32,
        iters: u32,
    ) -> Result<()> {
        if !wc.is_success() {
            return Err(format!(
                "Failed status {} ({}) for wr_id {}",
                wc.status(),
                wc.as_raw().status,
                wc.wr_id()
            ));
        }
        let qp = self
            .qp_index(wc.qp_num())
            .ok_or_else(|| format!("Couldn't find QPN {:06x}", wc.qp_num()))?;
        match wc.wr_id() {
            SEND_WRID => *scnt += 1,
            RECV_WRID => {
                self.routs -= 1;
                if self.routs <= self.refill_at {
                    self.routs += self.post_recvs(self.rx_depth - self.routs);
                    if self.routs < self.rx_depth {
                        return Err(format!("Couldn't post receive ({})", self.routs));
                    }
                }
                *rcnt += 1;
            }
            other => return Err(format!("Completion for unknown wr_id {other}")),
        }
        pending[qp] &= !wc.wr_id();
        if *scnt < iters && pending[qp] == 0 {
            self.post_send(qp)?;
            pending[qp] = RECV_WRID | SEND_WRID;
        }
        Ok(())
    }
}

/// Prints the throughput and latency lines of the C tools.
pub fn report(size: usize, iters: u32, elapsed: Duration) {
    let usec = elapsed.as_micros().max(1) as f64;
    let bytes = size as u64 * u64::from(iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / f64::from(iters.max(1))
    );
}

/// The page size, for `-c`.
pub fn page_size() -> usize {
    4096
}

/// The options every `*_pingpong` shares with its C twin.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Listen on, or connect to, TCP port PORT.
    #[arg(short = 'p', long = "port", value_name = "PORT", default_value_t = DEFAULT_PORT, value_parser = num::<u16>)]
    pub port: u16,
    /// Use IB device DEV (default: the first device found).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Use port PORT of the device.
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", default_value_t = 1, value_parser = num_at_least_1)]
    pub ib_port: u8,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", value_name = "DEPTH", default_value_t = 500, value_parser = num_at_least_1_u32)]
    pub rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", value_name = "ITERS", default_value_t = 1000, value_parser = num::<u32>)]
    pub iters: u32,
    /// Service level.
    #[arg(short = 'l', long = "sl", value_name = "SL", default_value_t = 0, value_parser = num::<u8>)]
    pub sl: u8,
    /// Sleep on CQ events (default: poll).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local port GID index (needed on RoCE).
    #[arg(short = 'g', long = "gid-idx", value_name = "INDEX", default_value_t = -1, allow_negative_numbers = true, value_parser = num::<i32>)]
    pub gid_idx: i32,
    /// Validate the received buffer.
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// The server to connect to; without it, be the server.
    #[arg(value_name = "HOST")]
    pub servername: Option<String>,
}

fn num_at_least_1(s: &str) -> Result<u8> {
    num::<u8>(s).and_then(|v| {
        if v >= 1 {
            Ok(v)
        } else {
            Err("must be at least 1".into())
        }
    })
}

fn num_at_least_1_u32(s: &str) -> Result<u32> {
    num::<u32>(s).and_then(|v| {
        if v >= 1 {
            Ok(v)
        } else {
            Err("must be at least 1".into())
        }
    })
}

/// A message size in bytes (`-s`), at least 1.
pub fn size(s: &str) -> Result<usize> {
    num::<u32>(s).and_then(|v| {
        if v >= 1 {
            Ok(v as usize)
        } else {
            Err("must be at least 1".into())
        }
    })
}

/// A path MTU given in bytes (`-m`).
pub fn mtu(s: &str) -> Result<rdma::Mtu> {
    let bytes = num::<u32>(s)?;
    rdma::Mtu::from_bytes(bytes)
        .ok_or_else(|| format!("{bytes} is not an MTU (256, 512, 1024, 2048, 4096)"))
}

/// Runs `body`; prints its error and returns a failing exit code.
pub fn main_with(name: &str, body: impl FnOnce() -> Result<()>) -> std::process::ExitCode {
    match body() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The number of address messages `ibv_srq_pingpong` exchanges, whatever
/// its `-q`: the unused ones are all zeros.
pub const SRQ_MAX_QP: usize = 256;

/// What a connected (RC or UC) ping-pong runs with.
#[derive(Debug, Clone)]
pub struct Connected {
    /// RC or UC.
    pub qp_type: rdma::QpType,
    /// The shared options.
    pub common: CommonArgs,
    /// The message size in bytes.
    pub size: usize,
    /// The path MTU.
    pub mtu: rdma::Mtu,
    /// Register the buffer for on-demand paging (`-o`).
    pub odp: bool,
    /// `Some(n)`: `n` RC QPs sharing one SRQ, as `ibv_srq_pingpong`.
    pub srq_qps: Option<u32>,
}

impl Connected {
    /// Runs one side of the ping-pong: `ibv_rc_pingpong`, `ibv_uc_pingpong`
    /// or `ibv_srq_pingpong`.
    pub fn run(&self) -> Result<()> {
        use rdma::{
            AccessFlags, CompletionChannel, CompletionQueue, InitAttr, ProtectionDomain, QpCaps,
            RtrAttr, RtsAttr,
        };
        let c = &self.common;
        let num_qp = self.srq_qps.unwrap_or(1);
        if let Some(n) = self.srq_qps {
            if n > c.rx_depth {
                return Err(format!(
                    "rx_depth {} is too small for {n} QPs -- must have at least one receive per QP.",
                    c.rx_depth
                ));
            }
            if n as usize >= SRQ_MAX_QP || n == 0 {
                return Err(format!(
                    "num_qp {n} must be between 1 and {}",
                    SRQ_MAX_QP - 1
                ));
            }
        }
        let ctx = open_device(c.ib_dev.as_deref())?;
        let mut access = AccessFlags::LOCAL_WRITE;
        if self.odp {
            let attr = ctx
                .query_device()
                .map_err(|e| format!("Couldn't query device for its features: {e}"))?;
            let odp = &attr.as_raw().odp_caps;
            let need = if self.srq_qps.is_some() {
                rdma::sys::IBV_ODP_SUPPORT_SEND | rdma::sys::IBV_ODP_SUPPORT_SRQ_RECV
            } else {
                rdma::sys::IBV_ODP_SUPPORT_SEND | rdma::sys::IBV_ODP_SUPPORT_RECV
            };
            if odp.general_caps & u64::from(rdma::sys::IBV_ODP_SUPPORT) == 0
                || odp.per_transport_caps.rc_odp_caps & need != need
            {
                return Err(
                    "The device isn't ODP capable or does not support RC send and receive with ODP"
                        .into(),
                );
            }
            access |= AccessFlags::ON_DEMAND;
        }
        let channel = if c.events {
            Some(
                CompletionChannel::new(&ctx)
                    .map_err(|e| format!("Couldn't create completion channel: {e}"))?,
            )
        } else {
            None
        };
        let pd = ProtectionDomain::new(&ctx).map_err(|e| format!("Couldn't allocate PD: {e}"))?;
        let mr = MemoryRegion::new(&pd, self.size, access)
            .map_err(|e| format!("Couldn't register MR: {e}"))?;
        // The C tools fill the buffer with 0x7b (the SRQ one with zeros).
        if self.srq_qps.is_none() {
            mr.fill(.., 0x7b).map_err(|e| e.to_string())?;
        }
        let cqe = (c.rx_depth + num_qp) as i32;
        let mut cq = CompletionQueue::builder(&ctx).cqe(cqe);
        if let Some(ch) = &channel {
            cq = cq.channel(ch);
        }
        let cq = cq.build().map_err(|e| format!("Couldn't create CQ: {e}"))?;
        let srq = match self.srq_qps {
            Some(_) => Some(
                SharedReceiveQueue::new(&pd, c.rx_depth, 1)
                    .map_err(|e| format!("Couldn't create SRQ: {e}"))?,
            ),
            None => None,
        };
        let mut qps = Vec::new();
        for i in 0..num_qp {
            let caps = QpCaps {
                max_send_wr: 1,
                max_recv_wr: if srq.is_some() { 0 } else { c.rx_depth },
                max_send_sge: 1,
                max_recv_sge: if srq.is_some() { 0 } else { 1 },
                max_inline_data: 0,
            };
            let mut b = QueuePair::builder(&pd, self.qp_type, &cq).caps(caps);
            if let Some(srq) = &srq {
                b = b.srq(srq);
            }
            let qp = b
                .build()
                .map_err(|e| format!("Couldn't create QP[{i}]: {e}"))?;
            qp.to_init(&InitAttr::new(c.ib_port))
                .map_err(|e| format!("Failed to modify QP[{i}] to INIT: {e}"))?;
            qps.push(qp);
        }
        let (recv_queue, refill_at) = match srq {
            Some(srq) => (RecvQueue::Srq(srq), num_qp),
            None => (RecvQueue::Qp, 1),
        };
        let mut pp = Pingpong::new(
            qps,
            recv_queue,
            mr,
            0..self.size,
            0..self.size,
            c.rx_depth,
            refill_at,
        );
        pp.post_initial_recvs()?;
        if c.events {
            cq.req_notify(false)
                .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
        }
        let (lid, gid) = local_address(&ctx, c.ib_port, c.gid_idx)?;
        let mut mine: Vec<Dest> = pp
            .qps
            .iter()
            .map(|qp| Dest {
                lid,
                qpn: qp.qp_num(),
                psn: random_psn(),
                gid,
            })
            .collect();
        for d in &mine {
            d.print("local address: ");
        }
        // ibv_srq_pingpong always sends 256 messages, zeros after its QPs.
        let wire_len = if self.srq_qps.is_some() {
            SRQ_MAX_QP
        } else {
            1
        };
        let my_psns: Vec<u32> = mine.iter().map(|d| d.psn).collect();
        mine.resize(wire_len, Dest::default());
        let connect = |remote: &[Dest]| -> Result<()> {
            for (i, (qp, r)) in pp.qps.iter().zip(remote).enumerate() {
                let rtr = RtrAttr {
                    remote_qpn: r.qpn,
                    rq_psn: r.psn,
                    mtu: self.mtu,
                    path: remote[0].path(c.ib_port, c.sl, c.gid_idx),
                    max_dest_rd_atomic: 1,
                    min_rnr_timer: 12,
                };
                qp.to_rtr(Some(&rtr))
                    .map_err(|e| format!("Failed to modify QP[{i}] to RTR: {e}"))?;
                let rts = RtsAttr {
                    sq_psn: my_psns[i],
                    ..RtsAttr::default()
                };
                qp.to_rts(&rts)
                    .map_err(|e| format!("Failed to modify QP[{i}] to RTS: {e}"))?;
            }
            Ok(())
        };
        let remote = match &c.servername {
            Some(server) => {
                let remote = client_exchange(server, c.port, &mine)?;
                for r in &remote[..num_qp as usize] {
                    r.print("remote address:");
                }
                connect(&remote)?;
                remote
            }
            None => {
                let remote = server_exchange(c.port, &mine, connect)?;
                for r in &remote[..num_qp as usize] {
                    r.print("remote address:");
                }
                remote
            }
        };
        drop(remote);
        let client = c.servername.is_some();
        if client && c.chk {
            pp.mark_pages()?;
        }
        let elapsed = pp.run(&cq, c.events, c.iters, client)?;
        report(self.size, c.iters, elapsed);
        if !client && c.chk {
            pp.check_pages()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_the_c_format() {
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from("::ffff:192.0.2.1".parse::<Ipv6Addr>().unwrap()),
        };
        let msg = d.to_wire();
        assert_eq!(
            &msg[..MSG_LEN - 1],
            b"0000:000011:abcdef:00000000000000000000ffffc0000201"
        );
        assert_eq!(msg[MSG_LEN - 1], 0);
        assert_eq!(Dest::from_wire(&msg).unwrap(), d);
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        for bad in [
            &b""[..],
            b"0000:000011",
            b"zz00:000011:abcdef:00000000000000000000ffffc0000201",
            b"0000:000011:abcdef:0000000000000000000ffffc0000201",
            b"0000:1000000:abcdef:00000000000000000000ffffc0000201",
            b"0000:000011:abcdef:0000000000000000000\xffffffc0000201",
            b"0000:000011:abcdef:00000000000000000000ffffc00002g1",
        ] {
            assert!(Dest::from_wire(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn numbers_parse_like_strtoul() {
        assert_eq!(num::<u32>("4096"), Ok(4096));
        assert_eq!(num::<u32>("0x10"), Ok(16));
        assert_eq!(num::<i32>("-1"), Ok(-1));
        assert!(num::<u16>("70000").is_err());
        assert!(num::<u8>("x").is_err());
    }

    #[test]
    fn a_gid_asks_for_a_global_route() {
        let mut d = Dest::default();
        assert_eq!(d.path(1, 0, 1).dgid, None);
        d.gid = Gid::from("::ffff:192.0.2.1".parse::<Ipv6Addr>().unwrap());
        let p = d.path(1, 0, 1);
        assert_eq!(p.dgid, Some(d.gid));
        assert_eq!((p.sgid_index, p.hop_limit), (1, 1));
    }
}
