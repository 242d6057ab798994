//! cmtime: times the steps of connection set-up through the CM for many
//! connections at once, like rdma-core's `cmtime`, on the async API.
//!
//! ```text
//! cmtime [-b bind_address] [-p port]                      # server
//! cmtime -s server_address [-b bind_address] [-c connections] [-p port] [-r retries] [-t timeout_ms]
//! ```
//!
//! The client creates all ids, then runs each step for every connection
//! before the next step: bind (with `-b`), resolve address, resolve route,
//! create QP, connect, disconnect, destroy. It prints, per step, the total
//! time, the slowest and fastest connection, and the time per connection, in
//! the same table as the C tool. The server accepts every request and
//! disconnects when its client does; it runs until it is killed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use rdma::cm::{AsyncCm, AsyncCmId, CmEventKind, ConnParam, PortSpace};
use rdma::{CompletionQueue, ProtectionDomain, QpCaps, QpType};

/// Times the CM steps of many connections (like rdma-core's cmtime).
#[derive(Parser, Debug)]
#[command(name = "cmtime")]
struct Args {
    /// The server's address: run as the client.
    #[arg(short = 's')]
    server: Option<String>,
    /// Address to bind to (the client's source, the server's listening one).
    #[arg(short = 'b')]
    bind: Option<String>,
    /// Connections.
    #[arg(short = 'c', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=65536))]
    connections: u32,
    /// Port.
    #[arg(short = 'p', default_value_t = 7471)]
    port: u16,
    /// Retries of a failed address or route resolution (also the connection's retry count).
    #[arg(short = 'r', default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=7))]
    retries: u8,
    /// Timeout of each resolution, in milliseconds.
    #[arg(short = 't', default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    timeout_ms: u64,
}

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// The steps, in order, with the names the C tool prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    CreateId,
    Bind,
    ResolveAddr,
    ResolveRoute,
    CreateQp,
    Connect,
    Disconnect,
    Destroy,
}

const STEPS: [Step; 8] = [
    Step::CreateId,
    Step::Bind,
    Step::ResolveAddr,
    Step::ResolveRoute,
    Step::CreateQp,
    Step::Connect,
    Step::Disconnect,
    Step::Destroy,
];

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::CreateId => "create id",
            Step::Bind => "bind addr",
            Step::ResolveAddr => "resolve addr",
            Step::ResolveRoute => "resolve route",
            Step::CreateQp => "create qp",
            Step::Connect => "connect",
            Step::Disconnect => "disconnect",
            Step::Destroy => "destroy",
        }
    }
}

/// A start and an end.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    start: Option<Instant>,
    end: Option<Instant>,
}

impl Span {
    fn micros(&self) -> Option<f64> {
        Some(self.end?.checked_duration_since(self.start?)?.as_secs_f64() * 1e6)
    }
}

/// One connection of the client.
struct Node {
    id: Option<AsyncCmId>,
    cq: Option<CompletionQueue>,
    times: [Span; STEPS.len()],
    failed: bool,
}

impl Node {
    fn start(&mut self, step: Step) {
        self.times[step as usize].start = Some(Instant::now());
    }

    fn end(&mut self, step: Step) {
        self.times[step as usize].end = Some(Instant::now());
    }

    fn id(&mut self) -> Result<&mut AsyncCmId> {
        Ok(self.id.as_mut().ok_or("the id is gone")?)
    }
}

/// Where the client connects, and how resolutions are timed out.
#[derive(Debug, Clone)]
struct Target {
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout: Duration,
    param: ConnParam,
}

/// Starts a step on one node (a non-blocking librdmacm call).
type Begin = fn(&Target, &mut Node) -> Result<()>;

/// How long to wait for the event that ends a step: all connections run the
/// step at once, so the last one may wait for all the others.
fn event_wait(a: &Args) -> Duration {
    Duration::from_millis(a.timeout_ms * (u64::from(a.retries) + 1)) + Duration::from_secs(60)
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host:?} has no address").into())
}

/// The client's state: its nodes and the totals of each step.
struct Client {
    nodes: Vec<Node>,
    totals: [Span; STEPS.len()],
    target: Target,
    retries: u8,
    wait: Duration,
}

impl Client {
    /// Times `f` over every node that has not failed, one after the other.
    fn sync_step(&mut self, step: Step, mut f: impl FnMut(&Target, &mut Node) -> Result<()>) {
        self.totals[step as usize].start = Some(Instant::now());
        for n in self.nodes.iter_mut().filter(|n| !n.failed) {
            n.start(step);
            match f(&self.target, n) {
                Ok(()) => n.end(step),
                Err(e) => {
                    eprintln!("{}: {e}", step.name());
                    n.failed = true;
                }
            }
        }
        self.totals[step as usize].end = Some(Instant::now());
    }

    /// Runs `begin` on every node that has not failed (timing from before
    /// it), then awaits each node's `kind` event (timing to its arrival).
    /// After an error event, `retry` (if any) re-issues the step, up to
    /// `retries` times.
    async fn awaited_step(
        &mut self,
        step: Step,
        kind: CmEventKind,
        begin: Begin,
        retry: Option<Begin>,
    ) {
        self.totals[step as usize].start = Some(Instant::now());
        for n in self.nodes.iter_mut().filter(|n| !n.failed) {
            n.start(step);
            if let Err(e) = begin(&self.target, n) {
                eprintln!("{}: {e}", step.name());
                n.failed = true;
            }
        }
        // Each node awaits its event in a task of its own, so that its time
        // is taken when its event arrives, whatever the order.
        let (retries, wait) = (self.retries, self.wait);
        let tasks: Vec<_> = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(|mut n| {
                let target = self.target.clone();
                tokio::spawn(async move {
                    let mut left = retries;
                    while !n.failed {
                        let r = match n.id() {
                            Ok(id) => id.expect(kind, wait).await.map(drop).map_err(Error::from),
                            Err(e) => Err(e),
                        };
                        match r {
                            Ok(()) => {
                                n.end(step);
                                break;
                            }
                            Err(e) => {
                                if let Some(again) = retry.filter(|_| left > 0) {
                                    left -= 1;
                                    if again(&target, &mut n).is_ok() {
                                        continue;
                                    }
                                }
                                println!("{}: {e}", step.name());
                                n.end(step);
                                n.failed = true;
                            }
                        }
                    }
                    n
                })
            })
            .collect();
        for t in tasks {
            match t.await {
                Ok(n) => self.nodes.push(n),
                Err(e) => eprintln!("{}: a task failed: {e}", step.name()),
            }
        }
        self.totals[step as usize].end = Some(Instant::now());
    }

    /// The table of the C tool: per step, the total, the slowest and the
    /// fastest connection, and the total per connection.
    fn show_perf(&self) {
        println!("step              total ms     max ms     min us  us / conn");
        for step in STEPS {
            if step == Step::Bind && self.target.src.is_none() {
                continue;
            }
            let per: Vec<f64> = self
                .nodes
                .iter()
                .filter_map(|n| n.times[step as usize].micros())
                .collect();
            let max = per.iter().copied().fold(0.0, f64::max);
            let min = per.iter().copied().fold(999_999_999.0, f64::min);
            let total = self.totals[step as usize].micros().unwrap_or(0.0);
            println!(
                "{:<13}: {:11.2}{:11.2}{:11.2}{:11.2}",
                step.name(),
                total / 1000.0,
                max / 1000.0,
                min,
                total / self.nodes.len().max(1) as f64
            );
        }
    }
}

fn resolve_addr(t: &Target, n: &mut Node) -> Result<()> {
    n.id()?.id().resolve_addr(t.src, t.dst, t.timeout)?;
    Ok(())
}

fn resolve_route(t: &Target, n: &mut Node) -> Result<()> {
    n.id()?.id().resolve_route(t.timeout)?;
    Ok(())
}

fn disconnect(_: &Target, n: &mut Node) -> Result<()> {
    n.id()?.id().disconnect()?;
    Ok(())
}

async fn run_client(a: &Args, server: &str) -> Result<()> {
    let dst = resolve(server, a.port)?;
    let src = match &a.bind {
        Some(b) => Some(resolve(b, 0)?),
        None => None,
    };
    let cm = AsyncCm::new()?;
    let n = a.connections as usize;
    let mut c = Client {
        nodes: Vec::with_capacity(n),
        totals: Default::default(),
        target: Target {
            src,
            dst,
            timeout: Duration::from_millis(a.timeout_ms),
            param: ConnParam {
                retry_count: a.retries,
                rnr_retry_count: 0,
                ..ConnParam::new()
            },
        },
        retries: a.retries,
        wait: event_wait(a),
    };

    println!("creating id");
    c.totals[Step::CreateId as usize].start = Some(Instant::now());
    for _ in 0..n {
        let mut node = Node {
            id: None,
            cq: None,
            times: Default::default(),
            failed: false,
        };
        node.start(Step::CreateId);
        node.id = Some(cm.create_id(PortSpace::Tcp)?);
        node.end(Step::CreateId);
        c.nodes.push(node);
    }
    c.totals[Step::CreateId as usize].end = Some(Instant::now());

    if let Some(src) = src {
        println!("binding source address");
        c.sync_step(Step::Bind, |_, n| Ok(n.id()?.id().bind(src)?));
    }

    println!("resolving address");
    c.awaited_step(
        Step::ResolveAddr,
        CmEventKind::AddrResolved,
        resolve_addr,
        Some(resolve_addr),
    )
    .await;

    println!("resolving route");
    c.awaited_step(
        Step::ResolveRoute,
        CmEventKind::RouteResolved,
        resolve_route,
        Some(resolve_route),
    )
    .await;

    println!("creating qp");
    // One PD for all (librdmacm's default PD of the device, in C), created
    // before the step; a CQ per QP, as rdma_create_qp without CQs makes.
    let pd = match c.nodes.iter_mut().find(|n| !n.failed) {
        Some(n) => {
            let ctx = n.id()?.id().context().ok_or("the id has no device")?;
            Some(ProtectionDomain::new(&ctx)?)
        }
        None => None,
    };
    c.sync_step(Step::CreateQp, |_, n| {
        let pd = pd.as_ref().ok_or("no protection domain")?;
        let cq = CompletionQueue::new(pd.context(), 2)?;
        n.id()?
            .id_mut()
            .create_qp(pd, QpType::Rc, &cq, &cq, qp_caps())?;
        n.cq = Some(cq);
        Ok(())
    });

    println!("connecting");
    c.awaited_step(Step::Connect, CmEventKind::Established, connect, None)
        .await;

    println!("disconnecting");
    c.awaited_step(
        Step::Disconnect,
        CmEventKind::Disconnected,
        disconnect,
        None,
    )
    .await;

    println!("destroying id");
    c.sync_step(Step::Destroy, |_, n| {
        drop(n.id.take());
        drop(n.cq.take());
        Ok(())
    });
    drop(pd);

    c.show_perf();
    let failed = c.nodes.iter().filter(|n| n.failed).count();
    if failed > 0 {
        return Err(format!("{failed} of {n} connections failed").into());
    }
    Ok(())
}

fn connect(t: &Target, n: &mut Node) -> Result<()> {
    n.id()?.id().connect(&t.param)?;
    Ok(())
}

fn qp_caps() -> QpCaps {
    QpCaps {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// The protection domains of the devices the server has seen requests on.
type Pds = Arc<Mutex<Vec<ProtectionDomain>>>;

fn pd_for(pds: &Pds, ctx: &rdma::Context) -> Result<ProtectionDomain> {
    // A poisoned list is still a valid list.
    let mut pds = pds.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(pd) = pds.iter().find(|p| p.context().name() == ctx.name()) {
        return Ok(pd.clone());
    }
    let pd = ProtectionDomain::new(ctx)?;
    pds.push(pd.clone());
    Ok(pd)
}

/// Serves one connection: a QP, accept, and a disconnect when the client
/// disconnects.
async fn serve(mut req: rdma::cm::ConnectRequest, pds: Pds) -> Result<()> {
    let ctx = req.id_mut().context().ok_or("the request has no device")?;
    let pd = pd_for(&pds, &ctx)?;
    let cq = CompletionQueue::new(&ctx, 2)?;
    req.id_mut()
        .create_qp(&pd, QpType::Rc, &cq, &cq, qp_caps())?;
    let mut id = req
        .accept(&ConnParam::new(), Duration::from_secs(60))
        .await?;
    loop {
        let ev = id.next_event().await?;
        if ev.kind == CmEventKind::Disconnected {
            break;
        }
    }
    id.id().disconnect().ok();
    Ok(())
}

async fn run_server(a: &Args) -> Result<()> {
    let ip = match &a.bind {
        Some(b) => resolve(b, a.port)?.ip(),
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let cm = AsyncCm::new()?;
    let mut listener = cm.listen(SocketAddr::new(ip, a.port), 1024)?;
    let pds: Pds = Arc::default();
    loop {
        let req = listener.accept().await?;
        let pds = Arc::clone(&pds);
        tokio::spawn(async move {
            if let Err(e) = serve(req, pds).await {
                println!("connection failed: {e}");
            }
        });
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    // Two workers, as the C tool has two threads: the CM events are read
    // (by the router task) while the main task still issues requests.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cmtime: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = rt.block_on(async {
        match &a.server {
            Some(server) => run_client(&a, server).await,
            None => run_server(&a).await,
        }
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cmtime: {e}");
            ExitCode::FAILURE
        }
    }
}
