//! Connecting the two sides of a benchmark: through rdma_cm (`-R`) or with
//! a TCP exchange of each side's queue pair and memory.
//!
//! Each side registers one memory region of twice the largest message: the
//! first half is what it sends (or reads into), the second half is where the
//! peer's messages land (receives, the peer's RDMA WRITEs) and what the peer
//! reads. The peer's second half is [`Conn::remote`].
//!
//! iWARP has no RNR retry: a SEND that finds no receive posted ends the
//! connection. On iWARP the receiver of SEND bandwidth therefore grants
//! credits, as perftest does: it RDMA WRITEs the count of receives it has
//! posted again into the first 8 bytes of the sender's target half, and the
//! sender keeps what it has sent within that count plus the receiver's
//! receive depth ([`Credits`]).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, DeviceList, Gid, GidType, InitAttr,
    IpFamily, MemoryRegion, Mtu, Path, ProtectionDomain, QpCaps, QpType, QueuePair, RecvWr,
    RemoteMemory, RtrAttr, RtsAttr, TransportType,
};

use super::{Config, Kind, Verb};
use crate::pingpong::{self, Result};

/// How long a side waits for the other to connect or to finish.
const WAIT: Duration = Duration::from_secs(120);
/// How long the client retries connecting to a server that is not up yet.
const CONNECT_RETRY: Duration = Duration::from_secs(10);

/// What one side tells the other: its queue pair and its target memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// The queue pair number (TCP mode).
    pub qpn: u32,
    /// The first packet sequence number (TCP mode).
    pub psn: u32,
    /// The GID to send to (TCP mode).
    pub gid: Gid,
    /// The memory the peer may write and read.
    pub remote: RemoteMemory,
    /// The receives this side keeps posted when the peer must wait for its
    /// credits before sending (iWARP SEND bandwidth), else 0.
    pub credit_depth: u32,
}

impl Dest {
    /// The length of the wire form.
    pub const LEN: usize = 48;

    /// The wire form, fields in declaration order: `qpn`, `psn` (u32
    /// little-endian), the GID's 16 bytes, `remote` in
    /// [`RemoteMemory::to_bytes`]'s form (20 bytes, big-endian), then
    /// `credit_depth` (u32 little-endian).
    pub fn to_wire(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.qpn.to_le_bytes());
        b[4..8].copy_from_slice(&self.psn.to_le_bytes());
        b[8..24].copy_from_slice(&self.gid.0);
        b[24..44].copy_from_slice(&self.remote.to_bytes());
        b[44..48].copy_from_slice(&self.credit_depth.to_le_bytes());
        b
    }

    /// Parses the wire form (extra bytes, such as CM padding, are ignored).
    pub fn from_wire(b: &[u8]) -> Result<Dest> {
        if b.len() < Self::LEN {
            return Err(format!(
                "the peer sent {} bytes, {} expected",
                b.len(),
                Self::LEN
            ));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        Ok(Dest {
            qpn: u32_at(0),
            psn: u32_at(4),
            gid: Gid(b[8..24].try_into().unwrap()),
            remote: RemoteMemory::from_bytes(&b[24..44]).map_err(|e| e.to_string())?,
            credit_depth: u32_at(44),
        })
    }
}

/// The link between the two sides, besides the queue pair.
enum Link {
    /// A queue pair connected by hand; the TCP stream synchronises.
    Tcp { qp: QueuePair, stream: TcpStream },
    /// A queue pair owned by a CM id.
    Cm {
        channel: EventChannel,
        id: Box<CmId>,
        _listener: Option<CmId>,
    },
}

/// A connected queue pair and everything it uses.
pub struct Conn {
    /// The device context.
    pub ctx: Context,
    /// Send completions.
    pub send_cq: CompletionQueue,
    /// Receive completions.
    pub recv_cq: CompletionQueue,
    /// Local memory: the send half, then the half the peer targets.
    pub mr: MemoryRegion,
    /// The peer's target half.
    pub remote: RemoteMemory,
    /// The path MTU.
    pub mtu: Mtu,
    /// The local GID index (TCP mode) or `None` (rdma_cm chose).
    pub gid_index: Option<u32>,
    /// The inline size the QP was granted.
    pub inline_size: u32,
    /// RDMA READs in flight.
    pub reads: u8,
    /// The credit flow of iWARP SEND bandwidth, on both sides.
    pub credits: Option<Credits>,
    /// The device's transport.
    pub transport: TransportType,
    link: Link,
    _pd: ProtectionDomain,
}

/// The objects created once the device is known.
struct Resources {
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
    caps: QpCaps,
    reads: u8,
}

impl Resources {
    fn new(ctx: &Context, cfg: &Config) -> Result<Resources> {
        let e = |what: &str, err: rdma::Error| format!("{what}: {err}");
        let pd = ProtectionDomain::new(ctx).map_err(|err| e("Couldn't allocate PD", err))?;
        let send_depth = cfg.tx_depth.max(cfg.cq_mod) + cfg.post_list;
        let cq = |depth: usize| -> Result<CompletionQueue> {
            let mut b = CompletionQueue::builder(ctx).cqe(depth.min(i32::MAX as usize) as i32);
            let ch;
            if cfg.events {
                ch = CompletionChannel::new(ctx)
                    .map_err(|err| e("Couldn't create completion channel", err))?;
                b = b.channel(&ch);
            }
            let cq = b.build().map_err(|err| e("Couldn't create CQ", err))?;
            if cfg.events {
                cq.req_notify(false)
                    .map_err(|err| e("Couldn't request CQ notification", err))?;
            }
            Ok(cq)
        };
        let send_cq = cq(send_depth)?;
        let recv_cq = cq(cfg.rx_depth + 1)?;
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        // At least 8 bytes a half: the iWARP credit word.
        let mr = MemoryRegion::new(&pd, 2 * cfg.max_size().max(8), access)
            .map_err(|err| e("Couldn't allocate MR", err))?;
        let dev = ctx
            .query_device()
            .map_err(|err| e("Couldn't query device", err))?;
        let reads = cfg.reads_in_flight(dev.as_raw().orig_attr.max_qp_rd_atom.max(1) as u32);
        let caps = QpCaps {
            max_send_wr: send_depth as u32,
            max_recv_wr: cfg.rx_depth as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: cfg.inline_size,
        };
        Ok(Resources {
            pd,
            send_cq,
            recv_cq,
            mr,
            caps,
            reads,
        })
    }

    /// The half of the local memory the peer targets.
    fn target(&self) -> Result<RemoteMemory> {
        let half = self.mr.len() / 2;
        self.mr.remote(half..).map_err(|e| e.to_string())
    }
}

/// Keeps `cfg.rx_depth` receives of the largest size posted (SEND tests).
fn post_initial_receives(cfg: &Config, qp: &QueuePair, mr: &MemoryRegion) -> Result<()> {
    if !cfg.receives() {
        return Ok(());
    }
    let half = mr.len() / 2;
    let sge = [mr.sge(half..).map_err(|e| e.to_string())?];
    let mut wr = [RecvWr::new(0, &sge)];
    for _ in 0..cfg.rx_depth {
        qp.post_recv(&mut wr)
            .map_err(|e| format!("Couldn't post receive: {e}"))?;
    }
    Ok(())
}

impl Conn {
    /// Connects as the command line says.
    pub fn establish(cfg: &Config) -> Result<Conn> {
        if !cfg.args.rdma_cm {
            return Self::with_tcp(cfg);
        }
        // A client that comes before the server listens is rejected: try
        // again for a while, as the TCP exchange does.
        let t0 = Instant::now();
        loop {
            if let Some(c) = Self::with_cm(cfg)? {
                return Ok(c);
            }
            if t0.elapsed() > CONNECT_RETRY {
                return Err("Connecting: the server rejected the connection".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The queue pair.
    pub fn qp(&self) -> &QueuePair {
        match &self.link {
            Link::Tcp { qp, .. } => qp,
            Link::Cm { id, .. } => id.qp().expect("the CM id owns a QP"),
        }
    }

    /// Whether the connection was made through rdma_cm.
    pub fn is_cm(&self) -> bool {
        matches!(self.link, Link::Cm { .. })
    }

    fn new(ctx: Context, r: Resources, peer: &Dest, cfg: &Config, mtu: Mtu, link: Link) -> Conn {
        let inline_size = match &link {
            Link::Tcp { qp, .. } => qp.caps().max_inline_data,
            Link::Cm { id, .. } => id.qp().map_or(0, |q| q.caps().max_inline_data),
        };
        let transport = transport(&ctx);
        let credits = if cfg.is_client() {
            (peer.credit_depth > 0).then(|| Credits::new(peer.credit_depth as usize, 0))
        } else {
            let total = (cfg.sizes.len() * cfg.iters) as u64;
            (credit_depth(cfg, transport) > 0).then(|| Credits::new(cfg.rx_depth, total))
        };
        Conn {
            ctx,
            send_cq: r.send_cq,
            recv_cq: r.recv_cq,
            mr: r.mr,
            remote: peer.remote,
            mtu,
            gid_index: None,
            inline_size,
            reads: r.reads,
            credits,
            transport,
            link,
            _pd: r.pd,
        }
    }

    fn with_tcp(cfg: &Config) -> Result<Conn> {
        let ctx = pingpong::open_device(cfg.args.ib_dev.as_deref())?;
        let port = cfg.args.ib_port;
        let pa = ctx
            .query_port(port)
            .map_err(|e| format!("Couldn't get port info: {e}"))?;
        let mtu = cfg
            .args
            .mtu
            .or_else(|| Mtu::from_bytes(pa.active_mtu()))
            .unwrap_or(Mtu::Mtu1024);
        let gid_index = match cfg.args.gid_index {
            Some(i) => i,
            None => default_gid_index(&ctx, port),
        };
        let gid = ctx
            .query_gid(port, gid_index)
            .map_err(|e| format!("can't read sgid of index {gid_index}: {e}"))?;
        let r = Resources::new(&ctx, cfg)?;
        let qp = QueuePair::builder(&r.pd, QpType::Rc, &r.send_cq)
            .recv_cq(&r.recv_cq)
            .caps(r.caps)
            .build()
            .map_err(|e| format!("Couldn't create QP: {e}"))?;
        let mut init = InitAttr::new(port);
        init.access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        qp.to_init(&init)
            .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
        post_initial_receives(cfg, &qp, &r.mr)?;
        let mine = Dest {
            qpn: qp.qp_num(),
            psn: pingpong::random_psn(),
            gid,
            remote: r.target()?,
            credit_depth: credit_depth(cfg, transport(&ctx)),
        };
        let mut stream = match &cfg.args.server {
            Some(host) => tcp_connect(host, cfg.args.port)?,
            None => tcp_accept(cfg.args.port)?,
        };
        stream
            .write_all(&mine.to_wire())
            .map_err(|e| format!("Couldn't send local address: {e}"))?;
        let mut buf = [0u8; Dest::LEN];
        stream
            .read_exact(&mut buf)
            .map_err(|e| format!("Couldn't read remote address: {e}"))?;
        let peer = Dest::from_wire(&buf)?;
        qp.to_rtr(Some(&RtrAttr {
            remote_qpn: peer.qpn,
            rq_psn: peer.psn,
            mtu,
            path: Path::to_gid(peer.gid, gid_index as u8, port),
            max_dest_rd_atomic: r.reads,
            min_rnr_timer: MIN_RNR_TIMER,
        }))
        .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
        qp.to_rts(&RtsAttr {
            sq_psn: mine.psn,
            max_rd_atomic: r.reads,
            ..RtsAttr::default()
        })
        .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
        let mut c = Conn::new(ctx, r, &peer, cfg, mtu, Link::Tcp { qp, stream });
        c.gid_index = Some(gid_index);
        c.barrier()?;
        Ok(c)
    }

    /// Connects through rdma_cm; `None` when the server rejected the client
    /// (not listening yet).
    fn with_cm(cfg: &Config) -> Result<Option<Conn>> {
        let cme = |what: &str, e: rdma::Error| format!("{what}: {e}");
        let channel = EventChannel::new().map_err(|e| cme("Couldn't create event channel", e))?;
        let (mut id, listener, request) = match &cfg.args.server {
            Some(host) => {
                let dst = resolve(host, cfg.args.port)?;
                let id = CmId::new(&channel, PortSpace::Tcp)
                    .map_err(|e| cme("Couldn't create CM id", e))?;
                id.resolve_addr(None, dst, Duration::from_secs(2))
                    .map_err(|e| cme("rdma_resolve_addr", e))?;
                channel
                    .expect(&id, CmEventKind::AddrResolved, Duration::from_secs(5))
                    .map_err(|e| cme("Address resolution", e))?;
                id.resolve_route(Duration::from_secs(2))
                    .map_err(|e| cme("rdma_resolve_route", e))?;
                channel
                    .expect(&id, CmEventKind::RouteResolved, Duration::from_secs(5))
                    .map_err(|e| cme("Route resolution", e))?;
                (id, None, None)
            }
            None => {
                let listener = CmId::new(&channel, PortSpace::Tcp)
                    .map_err(|e| cme("Couldn't create CM id", e))?;
                listener
                    .bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, cfg.args.port)))
                    .map_err(|e| cme("rdma_bind_addr", e))?;
                listener.listen(1).map_err(|e| cme("rdma_listen", e))?;
                let mut ev = channel
                    .expect(&listener, CmEventKind::ConnectRequest, WAIT)
                    .map_err(|e| cme("Waiting for a connect request", e))?;
                let id = ev.take_new_id().ok_or("a connect request without an id")?;
                let peer = Dest::from_wire(ev.private_data())?;
                (id, Some(listener), Some(peer))
            }
        };
        let ctx = id.context().map_err(|e| cme("The CM id's device", e))?;
        if let Some(want) = &cfg.args.ib_dev {
            if ctx.name() != want {
                return Err(format!(
                    "rdma_cm bound {} to {}, not {want}",
                    cfg.args.server.as_deref().unwrap_or("the server"),
                    ctx.name()
                ));
            }
        }
        let mtu = cfg.args.mtu.unwrap_or_else(|| {
            ctx.query_port(id.port_num())
                .ok()
                .and_then(|p| Mtu::from_bytes(p.active_mtu()))
                .unwrap_or(Mtu::Mtu1024)
        });
        let r = Resources::new(&ctx, cfg)?;
        let qp = id
            .create_qp(&r.pd, QpType::Rc, &r.send_cq, &r.recv_cq, r.caps)
            .map_err(|e| cme("Couldn't create QP", e))?;
        post_initial_receives(cfg, qp, &r.mr)?;
        let mine = Dest {
            qpn: qp.qp_num(),
            psn: 0,
            gid: Gid::default(),
            remote: r.target()?,
            credit_depth: credit_depth(cfg, transport(&ctx)),
        };
        let mut param = ConnParam::new().with_private_data(&mine.to_wire());
        param.responder_resources = r.reads;
        param.initiator_depth = r.reads;
        let peer = match request {
            Some(peer) => {
                id.accept(&param).map_err(|e| cme("rdma_accept", e))?;
                // The QP is in RTS once the accept is sent: the sooner
                // the timer is set, the fewer SENDs get the long one.
                shorten_rnr_timer(cfg, &ctx, &id)?;
                channel
                    .expect(&id, CmEventKind::Established, WAIT)
                    .map_err(|e| cme("Waiting for the connection", e))?;
                peer
            }
            None => {
                id.connect(&param).map_err(|e| cme("rdma_connect", e))?;
                match channel.expect(&id, CmEventKind::Established, WAIT) {
                    Ok(ev) => {
                        let peer = Dest::from_wire(ev.private_data())?;
                        shorten_rnr_timer(cfg, &ctx, &id)?;
                        peer
                    }
                    Err(e) if e.errno() == ECONNREFUSED => return Ok(None),
                    Err(e) => return Err(cme("Connecting", e)),
                }
            }
        };
        let link = Link::Cm {
            channel,
            id: Box::new(id),
            _listener: listener,
        };
        Ok(Some(Conn::new(ctx, r, &peer, cfg, mtu, link)))
    }

    /// Waits until the other side gets here too (TCP mode). With rdma_cm
    /// the sides need no barrier between sizes: receives stay posted and
    /// the loops of each size wait for the peer's messages.
    pub fn barrier(&mut self) -> Result<()> {
        if let Link::Tcp { stream, .. } = &mut self.link {
            stream
                .write_all(b"s")
                .and_then(|()| stream.read_exact(&mut [0u8; 1]))
                .map_err(|e| format!("Failed to synchronise with the peer: {e}"))?;
        }
        Ok(())
    }

    /// Ends the connection once both sides are done. With rdma_cm the side
    /// whose completions prove the other is done disconnects (the server of
    /// a ping-pong, whose last SEND or WRITE the client has acknowledged;
    /// the client otherwise) and the other waits for the disconnection.
    pub fn finish(&mut self, cfg: &Config) -> Result<()> {
        let Link::Cm { channel, id, .. } = &self.link else {
            return Ok(());
        };
        let pingpong = cfg.kind == Kind::Lat && cfg.verb != Verb::Read;
        if pingpong != cfg.is_client() {
            id.disconnect()
                .map_err(|e| format!("rdma_disconnect: {e}"))?;
        }
        let t0 = Instant::now();
        while t0.elapsed() < WAIT {
            match channel.wait_event(WAIT) {
                Ok(Some(ev)) if ev.kind == CmEventKind::Disconnected => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(format!("Waiting for the disconnection: {e}")),
            }
        }
        Err("the peer did not disconnect".into())
    }
}

/// The RNR NAK timer the receiver of SENDs sets (IB encoding 12: 0.64 ms),
/// the value the TCP mode sets at RTR (perftest's).
const MIN_RNR_TIMER: u8 = 12;

/// Sets the RNR NAK timer of a queue pair rdma_cm has moved to RTS, where
/// this side receives SENDs over IB or RoCE (iWARP has no RNR NAK). The
/// kernel's CM gives it timer 0, which encodes the longest wait, 655.36
/// ms: a sender that finds the receive queue empty (a receive depth below
/// the send depth) would pause that long each time, and a run of SEND
/// bandwidth would take minutes instead of moments. RTS -> RTS may change
/// it (IB: an optional attribute of that transition for RC); a SEND that
/// comes before this still gets the long timer, once.
fn shorten_rnr_timer(cfg: &Config, ctx: &Context, id: &CmId) -> Result<()> {
    if !cfg.receives() || transport(ctx) == TransportType::Iwarp {
        return Ok(());
    }
    let qp = id.qp().ok_or("the CM id has no QP")?;
    // SAFETY: `ibv_qp_attr` is plain C data (integers and nested structs of
    // integers and arrays), for which all zero bytes are a valid value.
    let mut a: rdma::sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = rdma::sys::IBV_QPS_RTS;
    a.min_rnr_timer = MIN_RNR_TIMER;
    // SAFETY: RTS -> RTS with only the RNR NAK timer: the CM has finished
    // with the QP (connected), and the state, path and peer stay as it set
    // them.
    unsafe {
        qp.modify(
            &mut a,
            rdma::sys::IBV_QP_STATE | rdma::sys::IBV_QP_MIN_RNR_TIMER,
        )
    }
    .map_err(|e| format!("Failed to set the RNR NAK timer: {e}"))
}

/// The device's transport (IB for RoCE too).
fn transport(ctx: &Context) -> TransportType {
    DeviceList::new()
        .ok()
        .and_then(|l| l.find(ctx.name()).map(|d| d.transport_type()))
        .unwrap_or(TransportType::Unspecified)
}

/// The receive depth this side advertises for credits: the receiver of
/// SEND bandwidth on iWARP, where a SEND without a receive is fatal.
fn credit_depth(cfg: &Config, transport: TransportType) -> u32 {
    let receiver = cfg.verb == Verb::Send && cfg.kind == Kind::Bw && !cfg.is_client();
    if receiver && transport == TransportType::Iwarp {
        cfg.rx_depth as u32
    } else {
        0
    }
}

/// The wr_id of the receiver's credit WRITEs.
pub const CREDIT_WR_ID: u64 = u64::MAX;

/// One side's count in the credit flow, over the whole connection (with
/// rdma_cm the sides do not synchronise between sizes).
#[derive(Debug, Clone)]
pub struct Credits {
    /// The receives the receiver keeps posted.
    pub depth: usize,
    /// Sender: SENDs posted. Receiver: receives completed and posted again.
    pub count: u64,
    /// A credit WRITE is sent each time this many receives were posted
    /// again (a third of the depth, as perftest).
    pub every: u64,
    /// Receiver: the count last written to the sender.
    pub granted: u64,
    /// Receiver: the SENDs of the whole run (every size).
    pub total: u64,
    /// Receiver: a credit WRITE is in flight.
    pub in_flight: bool,
}

impl Credits {
    fn new(depth: usize, total: u64) -> Credits {
        Credits {
            depth,
            count: 0,
            every: (depth as u64 / 3).max(1),
            granted: 0,
            total,
            in_flight: false,
        }
    }

    /// The longest post list the sender may use: when it waits for a
    /// credit, the last one granted is at most `every - 1` behind what the
    /// receiver has posted again.
    pub fn max_list(&self) -> usize {
        self.depth + 1 - self.every as usize
    }

    /// Receiver: whether to grant now. A grant goes out every `every`
    /// receives, and only while the sender still needs one: once the last
    /// grant covers the whole run, the sender may finish and disconnect,
    /// and a later WRITE would find the connection gone.
    pub fn should_grant(&self) -> bool {
        self.count % self.every == 0 && self.granted + (self.depth as u64) < self.total
    }
}

/// ECONNREFUSED (Linux), the errno `rdma` gives a rejected connection.
const ECONNREFUSED: i32 = 111;

/// The port's first RoCE v2 GID that maps an IPv4 address, else index 0.
pub(crate) fn default_gid_index(ctx: &Context, port: u8) -> u32 {
    ctx.find_gid(port, GidType::RoceV2, Some(IpFamily::V4))
        .ok()
        .flatten()
        .map_or(0, |g| u32::from(g.index))
}

use crate::net::resolve;

fn tcp_connect(host: &str, port: u16) -> Result<TcpStream> {
    let addr = resolve(host, port)?;
    let t0 = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) if t0.elapsed() > CONNECT_RETRY => {
                return Err(format!("Couldn't connect to {host}:{port}: {e}"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn tcp_accept(port: u16) -> Result<TcpStream> {
    let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
        .map_err(|e| format!("Couldn't listen to port {port}: {e}"))?;
    let (s, _) = l
        .accept()
        .map_err(|e| format!("Couldn't accept a client: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_round_trips_with_the_remote_memory_in_its_wire_form() {
        let d = Dest {
            qpn: 0x11,
            psn: 0x22,
            gid: Gid([7; 16]),
            remote: RemoteMemory {
                addr: 0x7f00_0000_1000,
                len: 1 << 33,
                rkey: 0xabcd,
            },
            credit_depth: 5,
        };
        let b = d.to_wire();
        assert_eq!(&b[24..44], &d.remote.to_bytes());
        assert_eq!(Dest::from_wire(&b).unwrap(), d);
        // CM private data arrives padded.
        let mut padded = [0; 56];
        padded[..Dest::LEN].copy_from_slice(&b);
        assert_eq!(Dest::from_wire(&padded).unwrap(), d);
        assert!(Dest::from_wire(&b[..Dest::LEN - 1]).is_err());
    }

    /// The credit flow, modelled: the sender posts lists within its credit,
    /// the receiver posts each receive again and grants as `should_grant`
    /// says, and a credit WRITE lands some time later. In every interleaving
    /// tried, no SEND finds its receive missing, nothing stalls, and no WRITE
    /// is posted once the sender may have finished.
    #[test]
    fn credit_flow_never_overruns_nor_stalls() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        // Miri runs it too, far slower: a few depths there.
        let depths = if cfg!(miri) { 1..5usize } else { 1..40 };
        for depth in depths {
            let probe = Credits::new(depth, 0);
            for list in 1..=probe.max_list() {
                for sizes in [1u64, 3] {
                    let iters = (list * (1 + rand(20) as usize)) as u64;
                    let total = sizes * iters;
                    let mut rx = Credits::new(depth, total);
                    let tx_every = Credits::new(depth, 0).every;
                    assert_eq!(tx_every, rx.every);
                    let (mut sent, mut word, mut flight) = (0u64, 0u64, None::<u64>);
                    let mut steps = 0;
                    while sent < total || rx.count < total || flight.is_some() {
                        steps += 1;
                        assert!(steps < 1_000_000, "stalled: depth {depth} list {list}");
                        let can_send = sent < total && sent + list as u64 <= word + depth as u64;
                        let can_recv = rx.count < sent;
                        let can_land = flight.is_some();
                        assert!(
                            can_send || can_recv || can_land,
                            "deadlock: depth {depth} list {list} sent {sent} count {} word {word}",
                            rx.count
                        );
                        match rand(3) {
                            0 if can_send => {
                                sent += list as u64;
                                // Receives posted: the depth, plus each posted again.
                                assert!(sent <= depth as u64 + rx.count, "overrun");
                            }
                            1 if can_recv => {
                                rx.count += 1;
                                if rx.should_grant() {
                                    // One WRITE at a time: the previous one lands first.
                                    if let Some(v) = flight.take() {
                                        word = v;
                                    }
                                    assert!(sent < total, "a grant after the sender finished");
                                    flight = Some(rx.count);
                                    rx.granted = rx.count;
                                }
                            }
                            2 if can_land => word = flight.take().unwrap(),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}
