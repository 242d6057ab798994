//! datagram: an IPoIB-style datagram service over one UD queue pair.
//!
//! ```text
//! datagram -a address -p port -g group [-n peers] [-C count] [--name NAME]
//! ```
//!
//! Hosts are addressed by IP address and port. Each instance creates one UD
//! QP, joins the multicast group `-g` with it and announces itself there
//! (`HELLO ip:port name`) every 300 ms. It also listens on `address:port`
//! in the UDP port space and answers every UD "connect" (SIDR) request with
//! the number of its one QP. When it hears from a host it has no route to
//! yet (an announcement, or a datagram that names its sender), it resolves
//! that host through the CM, whose answer (QP number, QKey, path) becomes
//! an address handle, and sends it `-C` unicast datagrams
//! (`DATA n from ip:port name`). A resolution that fails or stalls is
//! retried on the host's next announcement. It exits once it knows `-n`
//! peers, has sent to each and has received `-C` datagrams from each.
//! RoCE and IB only (iWARP has neither UD nor multicast).

use rdma_examples::net::resolve;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rdma::cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{
    AccessFlags, AddressHandle, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType,
    RecvWr, SendWr,
};

const GRH: usize = 40;
/// Payload bytes per datagram.
const MSG: usize = 256;
/// Receive slots.
const SLOTS: usize = 64;

/// An IPoIB-style datagram service: discovery by multicast, unicast through the CM.
#[derive(Parser, Debug)]
#[command(name = "datagram")]
struct Args {
    /// This host's address.
    #[arg(short = 'a')]
    address: String,
    /// This host's port.
    #[arg(short = 'p', default_value_t = 7471)]
    port: u16,
    /// The discovery group (a multicast address).
    #[arg(short = 'g', default_value = "239.0.0.71")]
    group: String,
    /// Peers to find before exiting.
    #[arg(short = 'n', default_value_t = 1)]
    peers: usize,
    /// Datagrams to send to, and receive from, each peer.
    #[arg(short = 'C', default_value_t = 5)]
    count: u32,
    /// This host's name in its messages.
    #[arg(long, default_value = "datagram")]
    name: String,
    /// Seconds until giving up.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

type Error = Box<dyn std::error::Error>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// How long a resolution may take before it is started again.
const RESOLVE_STALL: Duration = Duration::from_secs(5);

/// Where a peer's datagrams go: its address handle, QP number and QKey.
type Dest = (AddressHandle, u32, u32);

/// A known peer: its CM id and start time (while resolving), where its
/// datagrams go (once resolved), and how many of its datagrams arrived.
#[derive(Default)]
struct Peer {
    resolving: Option<(CmId, Instant)>,
    dest: Option<Dest>,
    sent: bool,
    received: u32,
}

struct Host {
    a: Args,
    me: SocketAddr,
    ch: EventChannel,
    mc: CmId,
    pd: ProtectionDomain,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    mr: MemoryRegion,
    group: Option<Dest>,
    peers: HashMap<SocketAddr, Peer>,
    /// Ids of accepted SIDR requests, kept until the end.
    accepted: Vec<CmId>,
}

impl Host {
    fn qp_num(&self) -> Result<u32> {
        Ok(self.mc.qp().ok_or("no QP")?.qp_num())
    }

    /// Sends `text` through `dest` and waits for its completion.
    fn send(&self, dest: &Dest, text: &str) -> Result<()> {
        let off = GRH + SLOTS * (GRH + MSG);
        let bytes = text.as_bytes();
        let len = bytes.len().min(MSG);
        self.mr.write(off, &bytes[..len])?;
        let sge = [self.mr.sge(off..off + len)?];
        let qp = self.mc.qp().ok_or("no QP")?;
        qp.post_send(&mut [SendWr::send(1, &sge).ud(&dest.0, dest.1, dest.2).signaled()])?;
        let wc = self
            .scq
            .wait_one(Duration::from_secs(5))
            .map_err(|e| format!("no send completion: {e}"))?;
        if !wc.is_success() {
            return Err(format!("send failed: {wc:?}").into());
        }
        Ok(())
    }

    fn post_recv(&self, slot: usize) -> Result<()> {
        let off = slot * (GRH + MSG);
        let sge = [self.mr.sge(off..off + GRH + MSG)?];
        let qp = self.mc.qp().ok_or("no QP")?;
        qp.post_recv(&mut [RecvWr::new(slot as u64, &sge)])?;
        Ok(())
    }

    /// Handles the datagrams that arrived.
    fn receive(&mut self) -> Result<()> {
        let mut buf = [MaybeUninit::uninit(); 8];
        let wcs: Vec<_> = self.rcq.poll(&mut buf)?.to_vec();
        for wc in wcs {
            if !wc.is_success() {
                return Err(format!("receive failed: {wc:?}").into());
            }
            let slot = wc.wr_id() as usize;
            let off = slot * (GRH + MSG);
            let len = (wc.byte_len() as usize).saturating_sub(GRH);
            let text =
                String::from_utf8_lossy(&self.mr.to_vec(off + GRH..off + GRH + len)?).into_owned();
            self.post_recv(slot)?;
            let mut words = text.split_whitespace();
            let from = match words.next() {
                // "HELLO ip:port name"
                Some("HELLO") => words.next(),
                // "DATA n from ip:port name"
                Some("DATA") => {
                    println!("datagram: received {text:?}");
                    words.nth(2)
                }
                _ => {
                    println!("datagram: unknown datagram {text:?}");
                    None
                }
            };
            let Some(from) = from.and_then(|a| a.parse::<SocketAddr>().ok()) else {
                continue;
            };
            if from == self.me {
                continue; // our own announcement, looped back by the group
            }
            if !self.peers.contains_key(&from) {
                println!(
                    "datagram: discovered {from} ({})",
                    words.next().unwrap_or("?")
                );
            }
            let peer = self.peers.entry(from).or_default();
            if text.starts_with("DATA") {
                peer.received += 1;
            }
            // No route yet, and none under way (or the last attempt stalled):
            // resolve the sender through the CM.
            let stalled = peer
                .resolving
                .as_ref()
                .is_some_and(|(_, t)| t.elapsed() > RESOLVE_STALL);
            if peer.dest.is_none() && (peer.resolving.is_none() || stalled) {
                let id = CmId::new(&self.ch, PortSpace::Udp)?;
                id.resolve_addr(
                    Some(SocketAddr::new(self.me.ip(), 0)),
                    from,
                    Duration::from_secs(2),
                )?;
                peer.resolving = Some((id, Instant::now()));
            }
        }
        Ok(())
    }

    /// Handles the CM events that are pending.
    fn cm_events(&mut self) -> Result<()> {
        while let Some(mut ev) = self.ch.wait_event(Duration::from_millis(10))? {
            match ev.kind {
                CmEventKind::ConnectRequest => {
                    let id = ev.take_new_id().ok_or("a request without an id")?;
                    let param = ConnParam {
                        qp_num: self.qp_num()?,
                        ..ConnParam::default()
                    };
                    // A failed answer is not fatal: the asker tries again.
                    match id.accept(&param) {
                        Ok(()) => self.accepted.push(id),
                        Err(e) => println!("datagram: answering a request: {e}"),
                    }
                }
                kind => {
                    // An event of a peer's resolution (stale ones, of an id
                    // already replaced, match no peer and are dropped).
                    let Some((addr, peer)) = self
                        .peers
                        .iter_mut()
                        .find(|(_, p)| p.resolving.as_ref().is_some_and(|(id, _)| ev.is_for(id)))
                    else {
                        continue;
                    };
                    let (id, _) = peer.resolving.as_ref().ok_or("no id")?;
                    let step = match kind {
                        CmEventKind::AddrResolved => id.resolve_route(Duration::from_secs(2)),
                        CmEventKind::RouteResolved => id.connect(&ConnParam::default()),
                        CmEventKind::Established => {
                            let ud = ev.ud.as_ref().ok_or("an answer without UD parameters")?;
                            let ah = AddressHandle::new(&self.pd, &ud.path)?;
                            println!(
                                "datagram: {addr} is QP {:#x} qkey {:#x}",
                                ud.qp_num, ud.qkey
                            );
                            peer.dest = Some((ah, ud.qp_num, ud.qkey));
                            peer.resolving = None;
                            Ok(())
                        }
                        _ => {
                            // Failed (no route, not listening yet, rejected):
                            // the peer's next announcement tries again.
                            if kind.is_error() {
                                println!(
                                    "datagram: resolving {addr}: {kind:?} (status {}); retrying",
                                    ev.status
                                );
                                peer.resolving = None;
                            }
                            Ok(())
                        }
                    };
                    if let Err(e) = step {
                        println!("datagram: resolving {addr}: {e}; retrying");
                        peer.resolving = None;
                    }
                }
            }
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.peers.len() >= self.a.peers
            && self
                .peers
                .values()
                .all(|p| p.sent && p.received >= self.a.count)
    }
}

fn run(a: Args) -> Result<()> {
    let me = resolve(&a.address, a.port)?;
    let group = resolve(&a.group, 0)?;
    let ch = EventChannel::new()?;
    let mut mc = CmId::new(&ch, PortSpace::Udp)?;
    mc.resolve_addr(
        Some(SocketAddr::new(me.ip(), 0)),
        group,
        Duration::from_secs(2),
    )?;
    ch.expect(&mc, CmEventKind::AddrResolved, Duration::from_secs(10))?;
    let ctx = mc.context()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let scq = CompletionQueue::new(&ctx, 16)?;
    let rcq = CompletionQueue::new(&ctx, SLOTS as i32)?;
    let caps = QpCaps {
        max_send_wr: 8,
        max_recv_wr: SLOTS as u32,
        ..QpCaps::default()
    };
    mc.create_qp(&pd, QpType::Ud, &scq, &rcq, caps)?;
    let mr = MemoryRegion::new(&pd, (SLOTS + 1) * (GRH + MSG), AccessFlags::LOCAL_WRITE)?;
    let mut h = Host {
        me,
        ch: ch.clone(),
        mc,
        pd,
        scq,
        rcq,
        mr,
        group: None,
        peers: HashMap::new(),
        accepted: Vec::new(),
        a,
    };
    for slot in 0..SLOTS {
        h.post_recv(slot)?;
    }
    h.mc.join_multicast(group)?;
    let ev = ch.expect(&h.mc, CmEventKind::MulticastJoin, Duration::from_secs(10))?;
    let ud = ev.ud.ok_or("a join without UD parameters")?;
    h.group = Some((AddressHandle::new(&h.pd, &ud.path)?, ud.qp_num, ud.qkey));
    let listen = CmId::new(&ch, PortSpace::Udp)?;
    listen.bind(me)?;
    listen.listen(16)?;
    println!(
        "datagram: {} at {me}, QP {:#x}, group {group}",
        h.a.name,
        h.qp_num()?
    );

    let deadline = Instant::now() + Duration::from_secs(h.a.timeout);
    let mut last_hello: Option<Instant> = None;
    let mut done_at: Option<Instant> = None;
    loop {
        if last_hello.is_none_or(|t| t.elapsed() > Duration::from_millis(300)) {
            let hello = format!("HELLO {me} {}", h.a.name);
            let g = h.group.as_ref().ok_or("no group")?;
            h.send(g, &hello)?;
            last_hello = Some(Instant::now());
        }
        h.cm_events()?;
        h.receive()?;
        let mut to_send = Vec::new();
        for (addr, p) in &h.peers {
            if !p.sent && p.dest.is_some() {
                to_send.push(*addr);
            }
        }
        for addr in to_send {
            for n in 0..h.a.count {
                let text = format!("DATA {n} from {me} {}", h.a.name);
                let dest = h.peers[&addr].dest.as_ref().ok_or("no destination")?;
                h.send(dest, &text)?;
            }
            println!("datagram: sent {} datagrams to {addr}", h.a.count);
            if let Some(p) = h.peers.get_mut(&addr) {
                p.sent = true;
            }
        }
        // Once done, linger a moment to answer late requests and announce.
        if h.done() {
            let t = *done_at.get_or_insert_with(Instant::now);
            if t.elapsed() > Duration::from_secs(2) {
                break;
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "not done within {} s: {} peers known",
                h.a.timeout,
                h.peers.len()
            )
            .into());
        }
    }
    for (addr, p) in &h.peers {
        println!("datagram: peer {addr}: received {}", p.received);
    }
    h.mc.leave_multicast(group)?;
    drop(listen);
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => {
            println!("datagram: done");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("datagram: {e}");
            ExitCode::FAILURE
        }
    }
}
