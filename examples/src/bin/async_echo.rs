//! An echo service over RDMA message endpoints on tokio
//! (`rdma::stream::MessageEndpoint`: RC connections with credit flow
//! control and message boundaries): the server accepts any number of
//! concurrent clients and sends back every message it receives; the client
//! opens `--clients` connections at once, sends `--messages` messages of
//! varied length on each (up to `--depth` awaiting their echo) and verifies
//! every echoed byte.
//!
//! ```text
//! async_echo server [-a ADDR] [-p PORT] [-S SIZE] [--connections N]
//! async_echo client -a ADDR [-p PORT] [-S SIZE] [--clients N] [--messages M] [--depth D]
//! ```
//!
//! Everything runs on one single-threaded runtime; each endpoint's driver
//! task posts its work requests and handles its CM events.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

use clap::{Args as ClapArgs, Parser, Subcommand};
use rdma::stream::{MessageEndpoint, MessageListener, MAX_MESSAGE, RECV_SLOTS};

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
    /// Largest message, in bytes.
    #[arg(short = 'S', long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=MAX_MESSAGE as i64))]
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
    /// Messages awaiting their echo per connection. At most the receive
    /// ring's size: the client does not receive while it sends, so more
    /// than the rings hold could leave both sides waiting to send.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=RECV_SLOTS as i64))]
    depth: u32,
}

type Error = Box<dyn std::error::Error>;
type Result<T, E = Error> = std::result::Result<T, E>;

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

/// Serves one connection until the client closes it; returns the number
/// of messages and bytes echoed.
async fn echo(ep: MessageEndpoint) -> Result<(u64, u64)> {
    let (mut msgs, mut bytes) = (0, 0);
    while let Some(msg) = ep.recv().await? {
        ep.send(&msg).await?;
        msgs += 1;
        bytes += msg.len() as u64;
    }
    ep.shutdown().await?;
    Ok((msgs, bytes))
}

async fn server(a: ServerArgs) -> Result<()> {
    let mut listener = MessageListener::bind(SocketAddr::new(a.addr, a.common.port))?;
    println!("async_echo: listening on {}", listener.local_addr()?);
    let mut tasks = Vec::new();
    let mut accepted = 0;
    while a.connections == 0 || accepted < a.connections {
        let (ep, peer) = listener.accept().await?;
        accepted += 1;
        tasks.push(tokio::task::spawn_local(async move {
            match echo(ep).await {
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

/// One client: connects, sends `messages` messages with up to `depth`
/// awaiting their echo, verifies each echo, closes. Returns the bytes
/// verified.
async fn client(dst: SocketAddr, me: u32, a: Rc<ClientArgs>) -> Result<u64> {
    let size = a.common.size as usize;
    let depth = u64::from(a.depth);
    let ep = MessageEndpoint::connect(dst).await?;
    let (mut sent, mut bytes) = (0u64, 0u64);
    for echoed in 0..a.messages {
        while sent < a.messages && sent - echoed < depth {
            ep.send(&message(me, sent, size)).await?;
            sent += 1;
        }
        let got = ep
            .recv()
            .await?
            .ok_or_else(|| format!("the server closed after {echoed} echoes"))?;
        let want = message(me, echoed, size);
        if *got != *want {
            return Err(format!(
                "echo {echoed} differs: {} bytes back for {} sent",
                got.len(),
                want.len()
            )
            .into());
        }
        bytes += want.len() as u64;
    }
    // Our end of stream; the server answers with its own.
    ep.shutdown().await?;
    if let Some(extra) = ep.recv().await? {
        return Err(format!("{} bytes more than were sent came back", extra.len()).into());
    }
    Ok(bytes)
}

async fn clients(a: ClientArgs) -> Result<()> {
    let dst = rdma_examples::net::resolve(&a.addr, a.common.port)?;
    let a = Rc::new(a);
    let start = Instant::now();
    let tasks: Vec<_> = (0..a.clients)
        .map(|i| tokio::task::spawn_local(client(dst, i, Rc::clone(&a))))
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
