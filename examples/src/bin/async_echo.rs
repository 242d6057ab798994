//! An echo service over RC connections on tokio: the server accepts any
//! number of concurrent clients through one async CM listener and SENDs
//! back every message it receives; the client opens `--clients` connections
//! at once, sends `--messages` messages of varied length on each (up to
//! `--depth` in flight) and verifies every echoed byte.
//!
//! ```text
//! async_echo server [-a ADDR] [-p PORT] [-S SIZE] [--connections N]
//! async_echo client -a ADDR [-p PORT] [-S SIZE] [--clients N] [--messages M] [--depth D]
//! ```
//!
//! Everything runs on one single-threaded runtime: the CM events of all
//! connections arrive through one event channel (`AsyncCm`) and each
//! connection awaits its own completion queue (`AsyncCompletionQueue`).

use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::{Args as ClapArgs, Parser, Subcommand};
use rdma::cm::{AsyncCm, AsyncCmId, CmEventKind, CmId, ConnParam};
use rdma::{
    AccessFlags, AsyncCompletionQueue, CompletionChannel, CompletionQueue, MemoryRegion,
    ProtectionDomain, QpCaps, QpType, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

/// Receive (and send) slots per connection on the server: the most
/// messages a client may have in flight.
const SLOTS: usize = 16;
/// How long each CM step may take.
const CM_TIMEOUT: Duration = Duration::from_secs(30);

/// Echo server and clients over RDMA RC connections, on tokio.
#[derive(Parser, Debug)]
#[command(name = "async_echo")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Serve clients: echo every message back on its connection.
    Server(ServerArgs),
    /// Connect clients, send messages and verify their echoes.
    Client(ClientArgs),
}

#[derive(ClapArgs, Debug)]
struct Common {
    /// Port.
    #[arg(short = 'p', long, default_value_t = 7175)]
    port: u16,
    /// Largest message, in bytes (the same on both sides).
    #[arg(short = 'S', long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    size: u32,
}

#[derive(ClapArgs, Debug)]
struct ServerArgs {
    /// Address to listen on.
    #[arg(short = 'a', long, default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    addr: IpAddr,
    #[command(flatten)]
    common: Common,
    /// Exit after serving this many connections (0: serve forever). The
    /// exit status says whether every one of them went well.
    #[arg(long, default_value_t = 0)]
    connections: u64,
}

#[derive(ClapArgs, Debug)]
struct ClientArgs {
    /// The server's address or host name.
    #[arg(short = 'a', long)]
    addr: String,
    #[command(flatten)]
    common: Common,
    /// Concurrent connections.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=4096))]
    clients: u32,
    /// Messages per connection.
    #[arg(long, default_value_t = 100)]
    messages: u64,
    /// Messages in flight per connection.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=SLOTS as i64))]
    depth: u32,
}

type Error = Box<dyn std::error::Error>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// The verbs resources of one connection: `2 * slots` buffers of `size`
/// bytes (receive slots first, then send slots) and an awaitable CQ.
struct Conn {
    mr: MemoryRegion,
    cq: AsyncCompletionQueue,
    slots: usize,
    size: usize,
    _pd: ProtectionDomain,
}

/// Work request ids: the slot, with this bit for sends.
const SEND: u64 = 1 << 32;

impl Conn {
    /// Creates the resources and the id's QP, and posts every receive slot.
    fn new(id: &mut CmId, slots: usize, size: usize) -> rdma::Result<Conn> {
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let channel = CompletionChannel::new(&ctx)?;
        let cq = CompletionQueue::builder(&ctx)
            .cqe(2 * slots as i32)
            .channel(&channel)
            .build()?;
        let caps = QpCaps {
            max_send_wr: slots as u32,
            max_recv_wr: slots as u32,
            ..QpCaps::default()
        };
        id.create_qp(&pd, QpType::Rc, &cq, &cq, caps)?;
        let mr = MemoryRegion::new(&pd, 2 * slots * size, AccessFlags::LOCAL_WRITE)?;
        let conn = Conn {
            mr,
            cq: AsyncCompletionQueue::new(cq)?,
            slots,
            size,
            _pd: pd,
        };
        for slot in 0..slots {
            conn.post_recv(id, slot)?;
        }
        Ok(conn)
    }

    fn recv_at(&self, slot: usize) -> usize {
        slot * self.size
    }

    fn send_at(&self, slot: usize) -> usize {
        (self.slots + slot) * self.size
    }

    fn post_recv(&self, id: &CmId, slot: usize) -> rdma::Result<()> {
        let at = self.recv_at(slot);
        let sge = [self.mr.sge(at..at + self.size)?];
        qp(id)?.post_recv(&mut [RecvWr::new(slot as u64, &sge)])
    }

    /// SENDs `len` bytes of send slot `slot`.
    fn post_send(&self, id: &CmId, slot: usize, len: usize) -> rdma::Result<()> {
        let at = self.send_at(slot);
        let sge = [self.mr.sge(at..at + len)?];
        qp(id)?.post_send(&mut [SendWr::send(SEND | slot as u64, &sge).signaled()])
    }
}

fn qp(id: &CmId) -> rdma::Result<&rdma::QueuePair> {
    id.qp()
        .ok_or_else(|| rdma::Error::invalid("post", "the CM id has no QP"))
}

/// What woke a connection up.
enum Wake {
    Completions(Vec<WorkCompletion>),
    Disconnected,
}

/// Awaits completions or the peer's disconnect (completions first).
async fn wake(conn: &Conn, id: &mut AsyncCmId) -> Result<Wake> {
    let mut buf = [MaybeUninit::uninit(); 2 * SLOTS];
    tokio::select! {
        biased;
        r = conn.cq.wait(&mut buf) => {
            // Flushed receives follow a disconnect, which the CM reports.
            let wcs: Vec<WorkCompletion> = r?
                .iter()
                .filter(|wc| wc.status() != WcStatus::WorkRequestFlushed)
                .copied()
                .collect();
            if let Some(bad) = wcs.iter().find(|wc| !wc.is_success()) {
                return Err(format!("completion failed: {bad:?}").into());
            }
            Ok(Wake::Completions(wcs))
        }
        ev = id.next_event() => match ev?.kind {
            CmEventKind::Disconnected => Ok(Wake::Disconnected),
            kind => Err(format!("unexpected CM event {kind:?}").into()),
        }
    }
}

/// The bytes of message `msg` of client `client`: its length varies from 1
/// to `size` and every byte depends on both numbers.
fn message(client: u32, msg: u64, size: usize) -> Vec<u8> {
    // A splitmix64 step: every (client, message) pair, (0, 0) included, gets
    // well-mixed bits for its length and content.
    let mut seed = (u64::from(client) << 32 | msg).wrapping_add(0x9E37_79B9_7F4A_7C15);
    seed = (seed ^ (seed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    seed = (seed ^ (seed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    seed ^= seed >> 31;
    let len = 1 + (seed >> 17) as usize % size;
    (0..len)
        .map(|i| (seed >> ((i % 8) * 8)) as u8 ^ i as u8)
        .collect()
}

// ---------------------------------------------------------------- server

/// Serves one connection until the client disconnects; returns the number
/// of messages and bytes echoed.
async fn echo(req: rdma::cm::ConnectRequest, size: usize) -> Result<(u64, u64)> {
    let mut req = req;
    let conn = Conn::new(req.id_mut(), SLOTS, size)?;
    let (mut id, _) = req.accept(&ConnParam::new(), CM_TIMEOUT).await?;
    let (mut msgs, mut bytes) = (0, 0);
    loop {
        let wcs = match wake(&conn, &mut id).await? {
            Wake::Disconnected => break,
            Wake::Completions(wcs) => wcs,
        };
        for wc in wcs {
            let slot = (wc.wr_id() & !SEND) as usize;
            match wc.opcode() {
                WcOpcode::Recv => {
                    // Echo from the send slot of the same number; the
                    // receive slot is posted again once that send is done.
                    let len = wc.byte_len() as usize;
                    let data = conn
                        .mr
                        .to_vec(conn.recv_at(slot)..conn.recv_at(slot) + len)?;
                    conn.mr.write(conn.send_at(slot), &data)?;
                    conn.post_send(id.id(), slot, len)?;
                    msgs += 1;
                    bytes += len as u64;
                }
                WcOpcode::Send => conn.post_recv(id.id(), slot)?,
                op => return Err(format!("unexpected {op:?} completion").into()),
            }
        }
    }
    id.id().disconnect().ok();
    Ok((msgs, bytes))
}

async fn server(a: ServerArgs) -> Result<()> {
    let cm = AsyncCm::new()?;
    let mut listener = cm.listen(SocketAddr::new(a.addr, a.common.port), 128)?;
    let at = listener.local_addr().ok_or("the listener has no address")?;
    println!("async_echo: listening on {at}");
    let size = a.common.size as usize;
    let mut tasks = Vec::new();
    let mut accepted = 0;
    while a.connections == 0 || accepted < a.connections {
        let mut req = listener.accept().await?;
        accepted += 1;
        tasks.push(tokio::task::spawn_local(async move {
            let peer = req
                .id_mut()
                .peer_addr()
                .map_or_else(|| "client".to_string(), |a| a.to_string());
            match echo(req, size).await {
                Ok((m, b)) => {
                    println!("{peer}: {m} messages, {b} bytes echoed");
                    true
                }
                Err(e) => {
                    eprintln!("{peer}: {e}");
                    false
                }
            }
        }));
    }
    let mut failed = 0;
    for t in tasks {
        if !t.await.unwrap_or(false) {
            failed += 1;
        }
    }
    println!("async_echo: served {accepted} connections, {failed} failed");
    if failed > 0 {
        return Err(format!("{failed} connections failed").into());
    }
    Ok(())
}

// ---------------------------------------------------------------- client

/// One client: connects, sends `messages` messages with up to `depth` in
/// flight, verifies each echo, disconnects. Returns the bytes verified.
async fn client(cm: AsyncCm, dst: SocketAddr, me: u32, a: Rc<ClientArgs>) -> Result<u64> {
    let size = a.common.size as usize;
    let depth = a.depth as usize;
    let (mut id, _, conn) = cm
        .connect(dst, CM_TIMEOUT, &ConnParam::new(), |id| {
            Conn::new(id, depth, size)
        })
        .await?;
    let (mut sent, mut sends_done, mut echoed, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    while echoed < a.messages {
        // Fill the window: a send slot is free once its previous send is
        // done, and at most `depth` echoes are outstanding (one receive each).
        while sent < a.messages && sent - echoed < depth as u64 && sent - sends_done < depth as u64
        {
            let slot = (sent % depth as u64) as usize;
            let msg = message(me, sent, size);
            conn.mr.write(conn.send_at(slot), &msg)?;
            conn.post_send(id.id(), slot, msg.len())?;
            sent += 1;
        }
        let wcs = match wake(&conn, &mut id).await? {
            Wake::Disconnected => {
                return Err(format!("the server disconnected after {echoed} echoes").into())
            }
            Wake::Completions(wcs) => wcs,
        };
        for wc in wcs {
            match wc.opcode() {
                WcOpcode::Send => sends_done += 1,
                WcOpcode::Recv => {
                    let slot = wc.wr_id() as usize;
                    let want = message(me, echoed, size);
                    let at = conn.recv_at(slot);
                    let got = conn.mr.to_vec(at..at + wc.byte_len() as usize)?;
                    if got != want {
                        return Err(format!(
                            "echo {echoed} differs: {} bytes back for {} sent",
                            got.len(),
                            want.len()
                        )
                        .into());
                    }
                    conn.post_recv(id.id(), slot)?;
                    echoed += 1;
                    bytes += want.len() as u64;
                }
                op => return Err(format!("unexpected {op:?} completion").into()),
            }
        }
    }
    id.disconnect(CM_TIMEOUT).await?;
    Ok(bytes)
}

async fn clients(a: ClientArgs) -> Result<()> {
    let dst = rdma_examples::net::resolve(&a.addr, a.common.port)?;
    let cm = AsyncCm::new()?;
    let a = Rc::new(a);
    let start = Instant::now();
    let tasks: Vec<_> = (0..a.clients)
        .map(|i| tokio::task::spawn_local(client(cm.clone(), dst, i, Rc::clone(&a))))
        .collect();
    let (mut bytes, mut failed) = (0, 0);
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await {
            Ok(Ok(b)) => bytes += b,
            Ok(Err(e)) => {
                eprintln!("client {i}: {e}");
                failed += 1;
            }
            Err(e) => {
                eprintln!("client {i}: {e}");
                failed += 1;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let msgs = u64::from(a.clients - failed) * a.messages;
    println!(
        "async_echo: {} clients x {} messages: {msgs} echoes, {bytes} bytes verified in {secs:.2} s ({:.0} messages/s)",
        a.clients,
        a.messages,
        msgs as f64 / secs
    );
    if failed > 0 {
        return Err(format!("{failed} of {} clients failed", a.clients).into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("async_echo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = tokio::task::LocalSet::new().block_on(&rt, async move {
        match cli.mode {
            Mode::Server(a) => server(a).await,
            Mode::Client(a) => clients(a).await,
        }
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_echo: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_vary_in_length_and_content() {
        let a = message(0, 0, 4096);
        let b = message(0, 1, 4096);
        let c = message(1, 0, 4096);
        assert!(!a.is_empty() && a.len() <= 4096);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, message(0, 0, 4096));
        assert!((0..1000).all(|m| (1..=16).contains(&message(7, m, 16).len())));
    }
}
