//! Connected mode (RFC 4755): the reliable connections of the link, one
//! per peer that advertises connected mode, made through the connection
//! manager, carrying unicast IP of up to 65,520 bytes as RC SENDs; the UD
//! queue pair still carries ARP, neighbour discovery, multicast and the
//! traffic of peers in datagram mode (or that refused a connection).
//!
//! # Addressing
//!
//! Linux's IPoIB-CM listens on the IB CM service ID `0x1000000000000000 |
//! QPN` (QPN: the interface's UD QPN, in its link-layer address) and puts
//! `(QPN, MTU)` in the private data of the request and the reply. A user
//! space program has only librdmacm, whose ids bind to IP addresses (or,
//! on InfiniBand, to `AF_IB` addresses that carry a whole service ID);
//! the `rdma` crate's CM ids take `SocketAddr`s, and this program runs on
//! RoCE only (its joins go through the CM). So it listens in rdma_cm's TCP
//! port space on the RoCE v2 address its GID is, at the port
//! [`connected::port`] derives from its UD QPN, and a peer connects to the
//! address of the GID and the port of the QPN of the link-layer address it
//! learnt: the link-layer address is all it needs, as with the kernel's
//! service IDs. rdma_cm's TCP port space prefixes its own header to the
//! IB CM private data, so this does not interoperate with the kernel's
//! IPoIB-CM (which does not run on RoCE anyway); the private data after
//! that header is the kernel's: [`PrivateData`].
//!
//! # Connections
//!
//! As in Linux, a connection carries one direction: the link sends on the
//! connections it makes (`tx`, their QPs post no receives) and receives on
//! those it accepts (`rx`, each with a ring of [`RECVS`] registered
//! buffers of 65,524 bytes, posted before the accept and again as each
//! completes). Sends take one of [`SENDS`] registered slots shared by the
//! `tx` connections. Nothing is allocated per packet. A receive completion
//! names its connection by its QP's number (a failed one's work request
//! ID may be anything: rxe reports some errors with 0); a failed receive
//! (a message longer than the buffers, say) closes that connection. The CM steps run as
//! tasks of the runtime's `LocalSet`, which report back through a channel;
//! meanwhile the peer's packets go as datagrams (longer ones are dropped
//! and counted: `held`). A connection whose peer disconnects, or whose
//! peer's address changes, goes; so do idle ones (`tx` after
//! [`Limits::idle`](connected::Limits), `rx` after twice that). A failed
//! connect leaves the peer in datagram mode for the retry time; packets
//! longer than a datagram to such a peer are answered with "fragmentation
//! needed" / "packet too big" (the link does that). SIGINT and SIGTERM
//! close every connection and destroy every id and QP.

use std::future::Future;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use rdma::cm::{AsyncCm, AsyncCmId, CmEvent, ConnParam, ConnectRequest, Listener};
use rdma::{
    AccessFlags, CompletionQueue, Gid, MemoryRegion, ProtectionDomain, QpCaps, QpType, RecvWr,
    SendWr, WcStatus, WorkCompletion,
};
use rdma_ipoib::connected::{self, Limits, PrivateData, Route, Table};
use rdma_ipoib::encap::{self, Source};
use rdma_ipoib::LinkAddr;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::wire::Sent;

/// Send slots, shared by the connections the link sends on.
pub const SENDS: u32 = 32;
/// Receive buffers per accepted connection.
pub const RECVS: u32 = 16;
/// A message's longest: the header and the connected-mode MTU.
pub const MSG: usize = encap::HEADER_LEN + connected::MAX_MTU as usize;
/// Accepted connections at most (past it requests are rejected).
pub const ACCEPTED: usize = 32;
/// The longest a CM step may take.
const STEP: Duration = Duration::from_secs(5);

/// What a CM task reports.
pub enum Setup {
    /// A connect to `peer` ended.
    Connected {
        peer: LinkAddr,
        r: Result<(AsyncCmId, PrivateData), String>,
    },
    /// The accept of request `idx` (generation `gen`) ended.
    Accepted {
        idx: usize,
        gen: u32,
        r: Result<AsyncCmId, String>,
    },
}

/// What connected mode counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct RcStats {
    /// Connections made, and accepted.
    pub connected: u64,
    pub accepted: u64,
    /// Connects that failed (refused, unreachable, bad private data).
    pub refused: u64,
    /// Requests rejected (bad private data, too many) or whose accept
    /// failed.
    pub rejected: u64,
    /// Connections closed: by the peer, for a changed address, idle.
    pub closed: u64,
    /// Messages sent and received on connections, and their bytes (the
    /// header included).
    pub tx: u64,
    pub tx_bytes: u64,
    pub rx: u64,
    pub rx_bytes: u64,
    /// Sends with no slot free.
    pub tx_dropped: u64,
    /// Receives that failed, other than flushed ones.
    pub rx_errors: u64,
}

/// A connection the link sends on.
struct Tx {
    id: AsyncCmId,
    peer: LinkAddr,
}

/// A connection the link receives on.
struct Rx {
    /// `None` while the accept runs (its task has the id).
    id: Option<AsyncCmId>,
    ring: MemoryRegion,
    /// The peer's UD QPN, from the request, and its GID (its address):
    /// the sender a message's link-layer addresses are checked against.
    peer_qpn: u32,
    peer_gid: Option<Gid>,
    /// Its QP's number.
    qpn: u32,
    used: Instant,
    /// Buffers that completed before the accept returned, to post again
    /// then (a bit per slot).
    pending: u32,
}

/// What the main loop awaits besides the connections' events: the CQs,
/// the listener, the tasks' reports.
pub struct Queues {
    pub scq: rdma::AsyncCompletionQueue,
    pub rcq: rdma::AsyncCompletionQueue,
    pub listener: Listener,
    pub setups: mpsc::UnboundedReceiver<Setup>,
}

/// The link's connections.
pub struct Connections {
    cm: AsyncCm,
    pd: ProtectionDomain,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    /// The local address, and the scope of a link-local peer.
    src: IpAddr,
    scope: u32,
    me: PrivateData,
    limits: Limits,
    smr: MemoryRegion,
    free: Vec<u32>,
    /// Per send slot: the work request ID in flight and its connection.
    busy: Vec<Option<(u64, usize)>>,
    seq: u64,
    table: Table<usize>,
    tx: Vec<Option<Tx>>,
    rx: Vec<Option<Rx>>,
    rx_gen: Vec<u32>,
    report: mpsc::UnboundedSender<Setup>,
    tasks: JoinSet<()>,
    pub stats: RcStats,
}

/// Where a peer listens: the address of its GID, the port of its QPN.
pub fn peer_addr(peer: LinkAddr, scope: u32) -> SocketAddr {
    let gid = peer.gid();
    let port = connected::port(peer.qpn());
    match gid.to_ipv4_mapped() {
        Some(v4) => SocketAddr::new(IpAddr::V4(v4), port),
        None => {
            let ip = gid.to_ipv6();
            let scope = if ip.is_unicast_link_local() { scope } else { 0 };
            SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope))
        }
    }
}

impl Connections {
    /// Listens at `bind` (its port: the one of UD QPN `qpn`) on `pd`'s
    /// device; `ud_max`: the longest datagram payload. Inside the
    /// runtime's `LocalSet`.
    pub fn new(
        pd: &ProtectionDomain,
        bind: SocketAddr,
        qpn: u32,
        ud_max: usize,
    ) -> Result<(Connections, Queues), rdma::Error> {
        let ctx = pd.context();
        let cm = AsyncCm::new()?;
        let mut at = bind;
        at.set_port(connected::port(qpn));
        let listener = cm.listen(at, 64)?;
        // Twice the work requests that may be posted: the completions of a
        // closed connection's requests (their slots posted again at once)
        // may still be queued.
        let scq = rdma::AsyncCompletionQueue::create(ctx, (2 * SENDS + 1) as i32)?;
        let rcq =
            rdma::AsyncCompletionQueue::create(ctx, (2 * ACCEPTED as u32 * RECVS + 1) as i32)?;
        let smr = MemoryRegion::new(pd, SENDS as usize * MSG, AccessFlags::LOCAL_WRITE)?;
        let (report, setups) = mpsc::unbounded_channel();
        let limits = Limits {
            ud_max,
            ..Limits::default()
        };
        let scope = match bind {
            SocketAddr::V6(v6) => v6.scope_id(),
            SocketAddr::V4(_) => 0,
        };
        let c = Connections {
            cm,
            pd: pd.clone(),
            scq: scq.cq().clone(),
            rcq: rcq.cq().clone(),
            src: bind.ip(),
            scope,
            me: PrivateData {
                qpn,
                mtu: MSG as u32,
            },
            limits,
            smr,
            free: (0..SENDS).rev().collect(),
            busy: vec![None; SENDS as usize],
            seq: 0,
            table: Table::new(limits),
            tx: Vec::new(),
            rx: Vec::new(),
            rx_gen: Vec::new(),
            report,
            tasks: JoinSet::new(),
            stats: RcStats::default(),
        };
        let q = Queues {
            scq,
            rcq,
            listener,
            setups,
        };
        Ok((c, q))
    }

    /// Packet `p` of `ether_type` to `to`: on its connection, or `None`
    /// for a datagram, or held or too big. May start a connect.
    pub fn unicast(&mut self, to: LinkAddr, ether_type: u16, p: &[u8]) -> Option<Sent> {
        let now = Instant::now();
        let (route, start) = self.table.route(to, p.len(), now);
        if start {
            self.connect(to);
        }
        match route {
            Route::Rc(i) => Some(self.send(i, ether_type, p)),
            Route::Ud => None,
            Route::TooBig(m) => Some(Sent::TooBig(m)),
            Route::Held => Some(Sent::Held),
        }
    }

    fn send(&mut self, i: usize, ether_type: u16, p: &[u8]) -> Sent {
        let Some(Some(tx)) = self.tx.get(i) else {
            return Sent::Dropped;
        };
        let Some(qp) = tx.id.id().qp() else {
            return Sent::Dropped;
        };
        let Some(slot) = self.free.pop() else {
            self.stats.tx_dropped += 1;
            return Sent::Dropped;
        };
        let off = slot as usize * MSG;
        let len = encap::HEADER_LEN + p.len();
        let posted = (|| {
            self.smr.write(off, &encap::header(ether_type))?;
            self.smr.write(off + encap::HEADER_LEN, p)?;
            let sge = [self.smr.sge(off..off + len)?];
            self.seq += 1;
            let wr_id = (self.seq << 8) | u64::from(slot);
            qp.post_send(&mut [SendWr::send(wr_id, &sge).signaled()])?;
            Ok::<_, rdma::Error>(wr_id)
        })();
        match posted {
            Ok(wr_id) => {
                self.busy[slot as usize] = Some((wr_id, i));
                self.stats.tx += 1;
                self.stats.tx_bytes += len as u64;
                Sent::Posted
            }
            Err(e) => {
                self.free.push(slot);
                eprintln!("ipoib: send on the connection to {}: {e}", tx.peer);
                Sent::Failed
            }
        }
    }

    /// Starts connecting to `peer`, in a task.
    fn connect(&mut self, peer: LinkAddr) {
        let cm = self.cm.clone();
        let (pd, scq, rcq) = (self.pd.clone(), self.scq.clone(), self.rcq.clone());
        let src = SocketAddr::new(self.src, 0);
        let src = match src {
            SocketAddr::V6(mut v6) => {
                v6.set_scope_id(self.scope);
                SocketAddr::V6(v6)
            }
            v4 => v4,
        };
        let dst = peer_addr(peer, self.scope);
        let param = ConnParam::new().with_private_data(&self.me.to_bytes());
        let report = self.report.clone();
        self.tasks.spawn_local(async move {
            let r = async {
                let setup = |id: &mut rdma::cm::CmId| {
                    let caps = QpCaps {
                        max_send_wr: SENDS,
                        max_recv_wr: 1,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        ..QpCaps::default()
                    };
                    id.create_qp(&pd, QpType::Rc, &scq, &rcq, caps).map(|_| ())
                };
                let (id, est, ()) = cm
                    .connect_from(Some(src), dst, STEP, &param, setup)
                    .await
                    .map_err(|e| format!("{dst}: {e}"))?;
                let pd = PrivateData::parse(est.private_data()).map_err(|e| e.to_string())?;
                Ok((id, pd))
            }
            .await;
            let _ = report.send(Setup::Connected { peer, r });
        });
    }

    /// A connect request: rejected, or its QP made, its ring posted and
    /// the accept started in a task.
    pub fn on_request(&mut self, mut req: ConnectRequest, now: Instant) {
        let pd = match PrivateData::parse(&req.private_data) {
            Ok(pd) => pd,
            Err(e) => {
                eprintln!("ipoib: connection request refused: {e}");
                self.stats.rejected += 1;
                let _ = req.reject(&[]);
                return;
            }
        };
        let idx = match self.rx.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.rx.len() < ACCEPTED => {
                self.rx.push(None);
                self.rx_gen.push(0);
                self.rx.len() - 1
            }
            None => {
                self.stats.rejected += 1;
                let _ = req.reject(&[]);
                return;
            }
        };
        let gen = self.rx_gen[idx];
        let made = (|| {
            let ring = MemoryRegion::new(&self.pd, RECVS as usize * MSG, AccessFlags::LOCAL_WRITE)?;
            let caps = QpCaps {
                max_send_wr: 1,
                max_recv_wr: RECVS,
                max_send_sge: 1,
                max_recv_sge: 1,
                ..QpCaps::default()
            };
            let qp = req
                .id_mut()
                .create_qp(&self.pd, QpType::Rc, &self.scq, &self.rcq, caps)?;
            for slot in 0..RECVS {
                let off = slot as usize * MSG;
                let sge = [ring.sge(off..off + MSG)?];
                qp.post_recv(&mut [RecvWr::new(rx_wr_id(gen, idx, slot), &sge)])?;
            }
            Ok::<_, rdma::Error>((ring, qp.qp_num()))
        })();
        let (ring, qpn) = match made {
            Ok(r) => r,
            Err(e) => {
                eprintln!("ipoib: connection request: {e}");
                self.stats.rejected += 1;
                let _ = req.reject(&[]);
                return;
            }
        };
        self.rx[idx] = Some(Rx {
            id: None,
            ring,
            peer_qpn: pd.qpn,
            peer_gid: req.id().peer_addr().map(|a| match a.ip() {
                IpAddr::V6(v6) => Gid::from(v6),
                IpAddr::V4(v4) => Gid::from(v4.to_ipv6_mapped()),
            }),
            qpn,
            used: now,
            pending: 0,
        });
        let param = ConnParam::new().with_private_data(&self.me.to_bytes());
        let report = self.report.clone();
        self.tasks.spawn_local(async move {
            let r = req
                .accept(&param, STEP)
                .await
                .map(|(id, _)| id)
                .map_err(|e| e.to_string());
            let _ = report.send(Setup::Accepted { idx, gen, r });
        });
    }

    /// A task's report.
    pub fn on_setup(&mut self, s: Setup, now: Instant) {
        match s {
            Setup::Connected {
                peer,
                r: Ok((id, pd)),
            } => {
                let i = match self.tx.iter().position(Option::is_none) {
                    Some(i) => i,
                    None => {
                        self.tx.push(None);
                        self.tx.len() - 1
                    }
                };
                self.tx[i] = Some(Tx { id, peer });
                if self.table.established(peer, i, pd, now) {
                    self.stats.connected += 1;
                    println!(
                        "ipoib: connected to {peer} (packets up to {})",
                        pd.max_packet()
                    );
                } else {
                    self.close_tx(i);
                }
            }
            Setup::Connected { peer, r: Err(e) } => {
                self.stats.refused += 1;
                println!("ipoib: no connection to {peer} ({e}): datagrams");
                if let Some(i) = self.table.failed(peer, now) {
                    self.close_tx(i);
                }
            }
            Setup::Accepted { idx, gen, r } => {
                let mine = self.rx_gen.get(idx) == Some(&gen);
                match (r, mine) {
                    (Ok(id), true) => {
                        if let Some(Some(rx)) = self.rx.get_mut(idx) {
                            println!("ipoib: accepted a connection from QPN {:#x}", rx.peer_qpn);
                            rx.used = now;
                            self.stats.accepted += 1;
                            let pending = std::mem::take(&mut rx.pending);
                            if let Err(e) = repost(&id, &rx.ring, gen, idx, pending) {
                                eprintln!("ipoib: receive on a connection: {e}");
                            }
                            rx.id = Some(id);
                        }
                    }
                    (Ok(id), false) => drop(id),
                    (Err(e), _) => {
                        eprintln!("ipoib: accept: {e}");
                        self.stats.rejected += 1;
                        if mine {
                            self.rx[idx] = None;
                            self.rx_gen[idx] = gen.wrapping_add(1);
                        }
                    }
                }
            }
        }
    }

    /// Polls every connection's CM id: the first event (or error), with
    /// its connection (`true`: one the link sends on).
    pub fn poll_events(
        &mut self,
        cx: &mut TaskContext<'_>,
    ) -> Poll<(bool, usize, Option<CmEvent>)> {
        for (i, t) in self.tx.iter_mut().enumerate() {
            if let Some(t) = t {
                if let Poll::Ready(r) = t.id.poll_event(cx) {
                    return Poll::Ready((true, i, r.ok()));
                }
            }
        }
        for (i, r) in self.rx.iter_mut().enumerate() {
            if let Some(Rx { id: Some(id), .. }) = r {
                if let Poll::Ready(r) = id.poll_event(cx) {
                    return Poll::Ready((false, i, r.ok()));
                }
            }
        }
        Poll::Pending
    }

    /// An event of an established connection (a disconnect, or anything
    /// else, which ends it too).
    pub fn on_event(&mut self, tx: bool, i: usize, ev: Option<CmEvent>) {
        let what = ev.map_or("event router stopped".to_string(), |e| {
            format!("{:?}", e.kind)
        });
        if tx {
            let Some(Some(t)) = self.tx.get(i) else {
                return;
            };
            let peer = t.peer;
            println!("ipoib: connection to {peer} closed ({what})");
            self.table.forget(peer);
        } else {
            println!("ipoib: accepted connection closed ({what})");
        }
        self.close(tx, i);
    }

    fn close(&mut self, tx: bool, i: usize) {
        if tx {
            self.close_tx(i)
        } else {
            self.close_rx(i)
        }
    }

    fn close_tx(&mut self, i: usize) {
        let Some(t) = self.tx.get_mut(i).and_then(Option::take) else {
            return;
        };
        let _ = t.id.id().disconnect();
        drop(t);
        for (slot, b) in self.busy.iter_mut().enumerate() {
            if b.is_some_and(|(_, c)| c == i) {
                *b = None;
                self.free.push(slot as u32);
            }
        }
        self.stats.closed += 1;
    }

    fn close_rx(&mut self, i: usize) {
        let Some(Some(rx)) = self.rx.get_mut(i) else {
            return;
        };
        // An accept in progress: its task's report closes it.
        let Some(id) = rx.id.take() else { return };
        let _ = id.id().disconnect();
        drop(id);
        self.rx[i] = None;
        self.rx_gen[i] = self.rx_gen[i].wrapping_add(1);
        self.stats.closed += 1;
    }

    /// `peer`'s address changed: its connection goes.
    pub fn forget(&mut self, peer: LinkAddr) {
        if let Some(i) = self.table.forget(peer) {
            self.close_tx(i);
        }
    }

    /// A send completed: its slot is free again; false if it failed.
    pub fn on_sent(&mut self, wc: &WorkCompletion) -> bool {
        let slot = (wc.wr_id() & 0xff) as usize;
        if let Some(b) = self.busy.get_mut(slot) {
            if b.is_some_and(|(w, _)| w == wc.wr_id()) {
                *b = None;
                self.free.push(slot as u32);
            }
        }
        wc.is_success()
    }

    /// A receive completed: its message copied into `out`, its length
    /// and sender; `None` for a failed or stale one. The buffer is posted
    /// again.
    pub fn on_recv(&mut self, wc: &WorkCompletion, out: &mut [u8]) -> Option<(usize, Source)> {
        let (gen, idx, slot) = split_rx_wr_id(wc.wr_id());
        // The connection is the one of the completion's QP: a failed
        // completion's work request ID may be anything (rxe reports some
        // errors with 0), and that of a closed connection's is stale.
        let qpn = wc.qp_num();
        let idx = self.rx_of(qpn, idx, gen)?;
        if !wc.is_success() {
            // Flushed: the connection is ending. Anything else (a message
            // longer than the buffer, say) put the QP in the error state:
            // the connection goes now rather than when idle.
            if wc.status() != WcStatus::WorkRequestFlushed {
                self.stats.rx_errors += 1;
                println!(
                    "ipoib: accepted connection failed ({:?}): closed",
                    wc.status()
                );
                self.close_rx(idx);
            }
            return None;
        }
        let rx = self.rx.get_mut(idx)?.as_mut()?;
        let off = slot as usize * MSG;
        let len = (wc.byte_len() as usize).min(MSG).min(out.len());
        let read = rx.ring.read(off, &mut out[..len]);
        rx.used = Instant::now();
        let repost = (|| {
            let qp = rx.id.as_ref().map(|id| id.id()).and_then(|id| id.qp());
            // Before the accept returns, the id is in its task: the slot
            // is posted again when it comes back (meanwhile the sender's
            // RNR retries cover a ring run dry).
            let Some(qp) = qp else {
                rx.pending |= 1 << slot;
                return Ok(());
            };
            let sge = [rx.ring.sge(off..off + MSG)?];
            qp.post_recv(&mut [RecvWr::new(wc.wr_id(), &sge)])
        })();
        if let Err(e) = repost {
            eprintln!("ipoib: receive on a connection: {e}");
        }
        read.ok()?;
        self.stats.rx += 1;
        self.stats.rx_bytes += len as u64;
        Some((
            len,
            Source {
                qpn: rx.peer_qpn,
                gid: rx.peer_gid,
            },
        ))
    }

    /// The accepted connection of QP `qpn`: `idx` (generation `gen`, from
    /// a work request ID) when that is it, else the one found by QPN.
    fn rx_of(&self, qpn: u32, idx: usize, gen: u32) -> Option<usize> {
        let is = |i: usize| matches!(&self.rx[i], Some(r) if r.qpn == qpn);
        if idx < self.rx.len() && self.rx_gen[idx] == gen && is(idx) {
            return Some(idx);
        }
        (0..self.rx.len()).find(|&i| is(i))
    }

    /// The timers: idle connections go, and refusals past their time.
    pub fn tick(&mut self, now: Instant) {
        for (peer, i) in self.table.age(now) {
            println!("ipoib: connection to {peer} idle: closed");
            self.close_tx(i);
        }
        let idle = self.limits.idle * 2;
        for i in 0..self.rx.len() {
            let old = matches!(&self.rx[i], Some(Rx { id: Some(_), used, .. })
                if now.saturating_duration_since(*used) >= idle);
            if old {
                println!("ipoib: accepted connection idle: closed");
                self.close_rx(i);
            }
        }
    }

    /// Every connection closes, the tasks end (their ids go).
    pub async fn shutdown(&mut self) {
        for (_, i) in self.table.drain() {
            self.close_tx(i);
        }
        for i in 0..self.tx.len() {
            self.close_tx(i);
        }
        self.tasks.shutdown().await;
        for i in 0..self.rx.len() {
            self.close_rx(i);
            self.rx[i] = None;
        }
    }

    /// The connections and counters, on standard output.
    pub fn dump(&self) {
        for (peer, _, max) in self.table.up() {
            println!("ipoib: connection to {peer} up, packets up to {max}");
        }
        let rx = self.rx.iter().flatten().filter(|r| r.id.is_some()).count();
        println!("ipoib: {rx} accepted connections up");
        println!("ipoib: {:?}", self.stats);
    }
}

/// Posts again the receive buffers of the bits of `pending`.
fn repost(
    id: &AsyncCmId,
    ring: &MemoryRegion,
    gen: u32,
    idx: usize,
    pending: u32,
) -> rdma::Result<()> {
    let Some(qp) = id.id().qp() else {
        return Ok(());
    };
    for slot in (0..RECVS).filter(|s| pending & (1 << s) != 0) {
        let off = slot as usize * MSG;
        let sge = [ring.sge(off..off + MSG)?];
        qp.post_recv(&mut [RecvWr::new(rx_wr_id(gen, idx, slot), &sge)])?;
    }
    Ok(())
}

/// The work request ID of receive buffer `slot` of accepted connection
/// `idx`, generation `gen` (a completion of an earlier connection of the
/// same index is told apart).
fn rx_wr_id(gen: u32, idx: usize, slot: u32) -> u64 {
    (u64::from(gen) << 32) | ((idx as u64 & 0xffff) << 16) | u64::from(slot & 0xffff)
}

fn split_rx_wr_id(w: u64) -> (u32, usize, u32) {
    (
        (w >> 32) as u32,
        ((w >> 16) & 0xffff) as usize,
        (w & 0xffff) as u32,
    )
}

/// The next event of `c`'s connections; never, without connections.
pub fn events(
    c: Option<&mut Connections>,
) -> impl Future<Output = (bool, usize, Option<CmEvent>)> + '_ {
    let mut c = c;
    std::future::poll_fn(move |cx| match c.as_deref_mut() {
        Some(c) => c.poll_events(cx),
        None => Poll::Pending,
    })
}

#[cfg(test)]
mod tests {
    use rdma::Gid;

    use super::*;

    #[test]
    fn receive_ids_carry_generation_connection_and_slot() {
        for (g, i, s) in [(0, 0, 0), (7, 31, 15), (u32::MAX, 0xffff, 0xffff)] {
            assert_eq!(split_rx_wr_id(rx_wr_id(g, i, s)), (g, i, s));
        }
        assert_ne!(rx_wr_id(1, 2, 3), rx_wr_id(2, 2, 3));
    }

    #[test]
    fn a_peer_listens_at_its_gid_s_address_and_its_qpn_s_port() {
        let v6: std::net::Ipv6Addr = "fd00:3::2".parse().unwrap();
        let a = LinkAddr::new(LinkAddr::CONNECTED, 0x11, Gid::from(v6));
        assert_eq!(peer_addr(a, 3), "[fd00:3::2]:16401".parse().unwrap());
        let ll: std::net::Ipv6Addr = "fe80::1".parse().unwrap();
        let a = LinkAddr::new(LinkAddr::CONNECTED, 0x11, Gid::from(ll));
        assert_eq!(
            peer_addr(a, 3),
            SocketAddr::V6(SocketAddrV6::new(ll, 0x4011, 0, 3))
        );
        let m: std::net::Ipv6Addr = "::ffff:203.0.113.2".parse().unwrap();
        let a = LinkAddr::new(LinkAddr::CONNECTED, 0x12, Gid::from(m));
        assert_eq!(peer_addr(a, 3), "203.0.113.2:16402".parse().unwrap());
    }
}
