//! mckey: UD multicast through the connection manager, on the wire the same
//! as rdma-core's `mckey`, so either side may be the C tool.
//!
//! ```text
//! mckey -m multicast_address [-b bind_address] [-c connections] [-C count] [-S size] [-p port_space]      # receiver
//! mckey -m multicast_address -s [-b bind_address] [-c connections] [-C count] [-S size] [-p port_space]   # sender
//! ```
//!
//! Every node resolves the group address (which picks the local device, or
//! the one of `-b`), creates a UD queue pair and joins the group; the join
//! event carries the group's QP number (0xFFFFFF), QKey and path. After a
//! pause (as the C tool, which gives a subnet manager time to program the
//! switches) the sender sends `-C` datagrams of `-S` bytes to the group (SEND
//! with its QP number as immediate data) and each receiver counts as many.
//! Multicast is unreliable: start the receivers first. iWARP has no
//! multicast: this runs on RoCE and IB.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rdma::cm::{CmEvent, CmEventKind, CmId, EventChannel, PortSpace};
use rdma::AddressHandle;
use rdma_examples::net::resolve;
use rdma_examples::ud::{UdNode, UdRes};

/// How long to wait for each CM event.
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// UD multicast through the CM (like rdma-core's mckey).
#[derive(Parser, Debug)]
#[command(name = "mckey")]
struct Args {
    /// The multicast group's address (IPv4 or IPv6).
    #[arg(short = 'm')]
    multicast: String,
    /// Run as the sender.
    #[arg(short = 's')]
    sender: bool,
    /// Address to bind to (selects the device).
    #[arg(short = 'b')]
    bind: Option<String>,
    /// Connections (ids that each join the group).
    #[arg(short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    connections: u32,
    /// Messages to send, or to receive, per connection.
    #[arg(short = 'C', default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=4096))]
    count: u32,
    /// Message size (at most the active MTU); 0 sends nothing.
    #[arg(short = 'S', default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=4096))]
    size: u32,
    /// Port space: 0x111 for UDP (default), 0x2 for IPoIB.
    #[arg(short = 'p', default_value = "0x111", value_parser = parse_port_space)]
    port_space: PortSpace,
    /// Seconds a receiver waits for its messages (the C tool waits forever).
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Seconds to pause after joining, before the transfers.
    #[arg(long, default_value_t = 3)]
    pause: u64,
}

/// `-p` as strtol(.., 0) reads it: decimal, 0x hex or 0 octal.
fn parse_port_space(s: &str) -> Result<PortSpace, String> {
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u32::from_str_radix(h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        u32::from_str_radix(&s[1..], 8)
    } else {
        s.parse()
    }
    .map_err(|e| format!("{s:?}: {e}"))?;
    match v {
        0x111 => Ok(PortSpace::Udp),
        0x2 => Ok(PortSpace::IpoIb),
        _ => Err(format!(
            "{v:#x} is not a datagram port space (0x111 UDP, 0x2 IPoIB)"
        )),
    }
}

type Error = Box<dyn std::error::Error>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// The resources of a node whose address is resolved; a receiver posts
/// its receives before joining.
fn setup(id: &mut CmId, a: &Args) -> Result<UdRes> {
    let ctx = id.context()?;
    let mtu = ctx.query_port(id.port_num())?.active_mtu();
    if a.count > 0 && a.size > mtu {
        return Err(format!(
            "mckey: message_size {} is larger than active mtu {mtu}",
            a.size
        )
        .into());
    }
    let recvs = if !a.sender && a.size > 0 { a.count } else { 0 };
    UdRes::new(id, a.count, a.size, recvs)
}

fn next_event(ch: &EventChannel) -> Result<CmEvent> {
    ch.wait_event(EVENT_TIMEOUT)?
        .ok_or_else(|| format!("mckey: no CM event within {EVENT_TIMEOUT:?}").into())
}

fn run(a: &Args, ch: &EventChannel) -> Result<()> {
    println!(
        "mckey: starting {}",
        if a.sender { "client" } else { "server" }
    );
    let src = match &a.bind {
        Some(b) => Some(resolve(b, 0)?),
        None => None,
    };
    let group = resolve(&a.multicast, 0)?;
    println!("mckey: joining");
    let mut nodes = Vec::new();
    for _ in 0..a.connections {
        let id = CmId::new(ch, a.port_space)?;
        if let Some(src) = src {
            id.bind(src)
                .map_err(|e| format!("mckey: addr bind failure: {e}"))?;
        }
        id.resolve_addr(src, group, Duration::from_secs(2))
            .map_err(|e| format!("mckey: resolve addr failure: {e}"))?;
        nodes.push(UdNode::new(id));
    }
    let mut left = nodes.len();
    while left > 0 {
        let ev = next_event(ch)?;
        let node = nodes
            .iter_mut()
            .find(|n| ev.is_for(&n.id))
            .ok_or("mckey: an event for an unknown id")?;
        match ev.kind {
            CmEventKind::AddrResolved => {
                node.res = Some(setup(&mut node.id, a)?);
                node.id
                    .join_multicast(group)
                    .map_err(|e| format!("mckey: failure joining: {e}"))?;
            }
            CmEventKind::MulticastJoin => {
                let ud = ev
                    .ud
                    .as_ref()
                    .ok_or("mckey: a join without UD parameters")?;
                let dgid = ud.path.dgid.map(|g| g.to_ipv6().to_string());
                println!(
                    "mckey: joined dgid: {} mlid 0x{:x} sl {}",
                    dgid.as_deref().unwrap_or("-"),
                    ud.path.dlid,
                    ud.path.sl
                );
                let ah = AddressHandle::new(&node.res()?.pd, &ud.path)
                    .map_err(|e| format!("mckey: failure creating address handle: {e}"))?;
                node.dest = Some((ah, ud.qp_num, ud.qkey));
                left -= 1;
            }
            kind if kind.is_error() => {
                return Err(format!("mckey: event: {kind:?}, error: {}", ev.status).into());
            }
            _ => {}
        }
    }
    // As the C tool: give a subnet manager time to configure the switches.
    std::thread::sleep(Duration::from_secs(a.pause));
    let result = transfer(a, &nodes);
    for node in &nodes {
        if let Err(e) = node.id.leave_multicast(group) {
            eprintln!("mckey: failure leaving: {e}");
        }
    }
    result
}

fn transfer(a: &Args, nodes: &[UdNode]) -> Result<()> {
    if a.count == 0 || a.size == 0 {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    if a.sender {
        println!("initiating data transfers");
        // Signaled, and waited for, so that they have left before the QP
        // goes away.
        for node in nodes {
            node.post_sends(a.count, true)?;
            node.res()?.poll(a.count, deadline, "sends")?;
        }
    } else {
        println!("receiving data transfers");
        for node in nodes {
            node.res()?.poll(a.count, deadline, "messages")?;
        }
    }
    println!("data transfers complete");
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    let r = EventChannel::new()
        .map_err(Error::from)
        .and_then(|ch| run(&a, &ch));
    println!("test complete");
    match r {
        Ok(()) => {
            println!("return status 0");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            println!("return status 1");
            ExitCode::FAILURE
        }
    }
}
