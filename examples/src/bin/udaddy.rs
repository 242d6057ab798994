//! udaddy: UD datagrams through the connection manager, on the wire the same
//! as rdma-core's `udaddy`, so either side may be the C tool.
//!
//! ```text
//! udaddy [-b bind_address] [-c connections] [-C count] [-S size]               # server
//! udaddy -s server_address [-b bind_address] [-c connections] [-C count] [-S size]
//! ```
//!
//! The client resolves the server (UDP port space, port 7174), creates a UD
//! queue pair per connection and "connects": the CM answers with the
//! server's QP number and QKey. The client sends `-C` datagrams (SEND with
//! immediate data: its own QP number) on each connection; the server
//! receives them all, makes an address handle back from the first one, and
//! replies with as many datagrams. iWARP has no UD: this runs on RoCE and IB.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rdma::cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::AddressHandle;
use rdma_examples::net::resolve;
use rdma_examples::ud::{UdNode, UdRes, GRH};

/// How long to wait for each event or completion.
const TIMEOUT: Duration = Duration::from_secs(30);

/// UD datagrams through the CM (like rdma-core's udaddy).
#[derive(Parser, Debug)]
#[command(name = "udaddy")]
struct Args {
    /// The server's address: run as the client.
    #[arg(short = 's')]
    server: Option<String>,
    /// Address to bind to.
    #[arg(short = 'b')]
    bind: Option<String>,
    /// Connections.
    #[arg(short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    connections: u32,
    /// Datagrams per connection, each way.
    #[arg(short = 'C', default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=4096))]
    count: u32,
    /// Datagram size (at most the path MTU).
    #[arg(short = 'S', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=4096))]
    size: u32,
    /// Port (rdma-core's udaddy always uses 7174).
    #[arg(long, default_value_t = 7174)]
    port: u16,
}

type Error = Box<dyn std::error::Error>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// The resources of a node: every node receives `count` datagrams.
fn setup(id: &mut CmId, a: &Args) -> Result<UdRes> {
    UdRes::new(id, a.count, a.size, a.count)
}

/// The `n` completions of a node, within `TIMEOUT`.
fn poll(node: &UdNode, n: u32) -> Result<Vec<rdma::WorkCompletion>> {
    node.res()?.poll(n, Instant::now() + TIMEOUT, "completions")
}

fn next_event(ch: &EventChannel) -> Result<CmEvent> {
    ch.wait_event(TIMEOUT)?
        .ok_or_else(|| format!("no CM event within {TIMEOUT:?}").into())
}

fn event_error(ev: &CmEvent) -> Error {
    format!("udaddy: event: {:?}, error: {}", ev.kind, ev.status).into()
}

fn run_server(a: &Args, ch: &EventChannel) -> Result<()> {
    println!("udaddy: starting server");
    let ip = match &a.bind {
        Some(b) => resolve(b, a.port)?.ip(),
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let listen = CmId::new(ch, PortSpace::Udp)?;
    listen.bind(SocketAddr::new(ip, a.port))?;
    listen.listen(16)?;
    let mut nodes = Vec::new();
    while nodes.len() < a.connections as usize {
        let mut ev = next_event(ch)?;
        match ev.kind {
            CmEventKind::ConnectRequest => {
                let mut id = ev.take_new_id().ok_or("a connect request without an id")?;
                let res = setup(&mut id, a)?;
                let qp_num = id.qp().ok_or("the CM id has no QP")?.qp_num();
                id.accept(&ConnParam {
                    qp_num,
                    ..ConnParam::default()
                })?;
                let mut node = UdNode::new(id);
                node.res = Some(res);
                nodes.push(node);
            }
            kind if kind.is_error() => return Err(event_error(&ev)),
            _ => {}
        }
    }
    if a.count > 0 {
        println!("receiving data transfers");
        for node in &mut nodes {
            let wcs = poll(node, a.count)?;
            let res = node.res()?;
            let first = wcs.first().ok_or("no completion")?;
            if first.byte_len() as usize != GRH + a.size as usize {
                return Err(format!(
                    "a datagram of {} bytes, expected {}",
                    first.byte_len() as usize - GRH.min(first.byte_len() as usize),
                    a.size
                )
                .into());
            }
            // The reply goes back to the sender: its address from the GRH,
            // its QP number from the immediate data, our own QKey.
            let mut grh = [0; GRH];
            res.mr.read(0, &mut grh)?;
            let ah = AddressHandle::from_wc(&res.pd, node.id.port_num(), first, &grh)?;
            let qpn = first
                .imm_data()
                .ok_or("a datagram without immediate data")?;
            let qkey = node.id.init_qp_attr(rdma::sys::IBV_QPS_INIT)?.0.qkey;
            node.dest = Some((ah, qpn, qkey));
        }
        println!("sending replies");
        for node in &nodes {
            node.post_sends(a.count, true)?;
        }
        for node in &nodes {
            poll(node, a.count)?;
        }
        println!("data transfers complete");
    }
    drop(listen);
    Ok(())
}

fn run_client(a: &Args, ch: &EventChannel, server: &str) -> Result<()> {
    println!("udaddy: starting client");
    let dst = resolve(server, a.port)?;
    let src = match &a.bind {
        Some(b) => Some(resolve(b, 0)?),
        None => None,
    };
    println!("udaddy: connecting");
    let mut nodes = Vec::new();
    for _ in 0..a.connections {
        let id = CmId::new(ch, PortSpace::Udp)?;
        id.resolve_addr(src, dst, Duration::from_secs(2))?;
        nodes.push(UdNode::new(id));
    }
    let mut left = nodes.len();
    while left > 0 {
        let ev = next_event(ch)?;
        let node = nodes
            .iter_mut()
            .find(|n| ev.is_for(&n.id))
            .ok_or("an event for an unknown id")?;
        match ev.kind {
            CmEventKind::AddrResolved => node.id.resolve_route(Duration::from_secs(2))?,
            CmEventKind::RouteResolved => {
                node.res = Some(setup(&mut node.id, a)?);
                node.id.connect(&ConnParam::default())?;
            }
            CmEventKind::Established => {
                let ud = ev.ud.as_ref().ok_or("an answer without UD parameters")?;
                let ah = AddressHandle::new(&node.res()?.pd, &ud.path)?;
                node.dest = Some((ah, ud.qp_num, ud.qkey));
                left -= 1;
            }
            kind if kind.is_error() => return Err(event_error(&ev)),
            _ => {}
        }
    }
    if a.count > 0 {
        println!("initiating data transfers");
        for node in &nodes {
            node.post_sends(a.count, false)?;
        }
        println!("receiving data transfers");
        for node in &nodes {
            for wc in poll(node, a.count)? {
                if wc.byte_len() as usize != GRH + a.size as usize {
                    return Err(format!("a reply of {} bytes with its GRH", wc.byte_len()).into());
                }
            }
        }
        println!("data transfers complete");
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    let r = EventChannel::new()
        .map_err(Error::from)
        .and_then(|ch| match &a.server {
            Some(s) => run_client(&a, &ch, s),
            None => run_server(&a, &ch),
        });
    println!("test complete");
    match r {
        Ok(()) => {
            println!("return status 0");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("udaddy: {e}");
            println!("return status 1");
            ExitCode::FAILURE
        }
    }
}
