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
//! create QP, connect, disconnect (and destroy the QP), destroy the id. It
//! does the work of the C tool (rdma-core v44) in each step: the QPs share
//! one CQ, created with the first QP, as C's do, and an awaited step issues
//! the request of every connection, then takes their events on the one task
//! as they arrive, as C's event thread does: no task or timer per
//! connection, and a wake-up polls only the connections it is for. It prints, per step, the total time, the slowest and fastest
//! connection, and the time per connection, in the same table as the C tool.
//! The server accepts every request and disconnects when its client does; it
//! runs until it is killed. It also answers the out-of-band sync of the
//! clients of rdma-core 52 to 60 (a TCP connection to the same port number),
//! so that their `cmtime -s` runs against it; rdma-core 61's peer mesh
//! (`-C`, `-L`, `-P`) it does not speak.

use rdma_examples::net::resolve;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use clap::Parser;
use rdma::cm::{AsyncCm, AsyncCmId, CmEvent, CmEventKind, ConnParam, PortSpace};
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
    times: [Span; STEPS.len()],
    /// Its event of the step under way is still to come.
    waiting: bool,
    /// Re-issues left of the step under way.
    retries: u8,
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

/// The nodes whose ids have events to take, and the task that takes them.
/// Each node's id wakes that task through a waker of the node's own that
/// notes the node here, so that a wake-up polls the nodes it is for, not
/// every node still waiting (as C's event thread handles the event it read).
#[derive(Default)]
struct Ready(Mutex<ReadyInner>);

#[derive(Default)]
struct ReadyInner {
    nodes: Vec<usize>,
    task: Option<Waker>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned value is still a valid one here.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ready {
    /// The nodes woken since the last call, and notes the task to wake:
    /// the one polling now (`None`: no task polls).
    fn take(&self, cx: Option<&Context<'_>>) -> Vec<usize> {
        let mut r = lock(&self.0);
        if let Some(cx) = cx {
            if !r.task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                r.task = Some(cx.waker().clone());
            }
        }
        std::mem::take(&mut r.nodes)
    }
}

/// The waker of one node.
struct NodeWaker {
    node: usize,
    ready: Arc<Ready>,
}

impl Wake for NodeWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let task = {
            let mut r = lock(&self.ready.0);
            r.nodes.push(self.node);
            r.task.clone()
        };
        if let Some(task) = task {
            task.wake();
        }
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

/// What an awaited step waits for, and how it re-issues a failed request.
#[derive(Clone, Copy)]
struct Awaited {
    step: Step,
    kind: CmEventKind,
    retry: Option<Begin>,
}

impl Awaited {
    /// Takes the events of `n` that have arrived; true when its step is
    /// over (its event came, or it failed).
    fn poll_node(self, target: &Target, n: &mut Node, cx: &mut Context<'_>) -> bool {
        loop {
            let ev = match n.id().map(|id| id.poll_event(cx)) {
                Ok(Poll::Pending) => return false,
                Ok(Poll::Ready(Ok(ev))) => ev,
                Ok(Poll::Ready(Err(e))) => return self.fail(n, &e),
                Err(e) => return self.fail(n, &e),
            };
            if ev.kind == self.kind {
                n.end(self.step);
                return true;
            }
            if let Some(again) = self.retry.filter(|_| n.retries > 0) {
                n.retries -= 1;
                if again(target, n).is_ok() {
                    continue;
                }
            }
            return self.fail(n, &Unexpected(ev, self.kind));
        }
    }

    /// Ends the step of `n` as failed; true.
    fn fail(self, n: &mut Node, e: &dyn std::fmt::Display) -> bool {
        println!("{}: {e}", self.step.name());
        n.end(self.step);
        n.failed = true;
        true
    }
}

/// An event other than the one a step waits for.
struct Unexpected(CmEvent, CmEventKind);

impl std::fmt::Display for Unexpected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Unexpected(ev, wanted) = self;
        write!(
            f,
            "event {:?}, error: {} (instead of {wanted:?})",
            ev.kind, ev.status
        )
    }
}

/// How long to wait for the events that end a step: all connections run the
/// step at once, so the last one may wait for all the others.
fn event_wait(a: &Args) -> Duration {
    Duration::from_millis(a.timeout_ms * (u64::from(a.retries) + 1)) + Duration::from_secs(60)
}

/// The client's state: its nodes and the totals of each step.
struct Client {
    nodes: Vec<Node>,
    /// What the id of each node wakes when an event comes (see [`Ready`]).
    wakers: Vec<Waker>,
    ready: Arc<Ready>,
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
    /// it), then takes the nodes' events on this task as they arrive
    /// (timing to each node's event), as C's event thread does: the first
    /// poll polls every node, each later one the nodes whose ids woke it,
    /// under one deadline for the step. After an error event, `retry` (if
    /// any) re-issues the step, up to `retries` times.
    async fn awaited_step(
        &mut self,
        step: Step,
        kind: CmEventKind,
        begin: Begin,
        retry: Option<Begin>,
    ) {
        self.totals[step as usize].start = Some(Instant::now());
        let mut first: Vec<usize> = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if n.failed {
                continue;
            }
            n.start(step);
            match begin(&self.target, n) {
                Ok(()) => {
                    n.retries = self.retries;
                    n.waiting = true;
                    first.push(i);
                }
                Err(e) => {
                    eprintln!("{}: {e}", step.name());
                    n.failed = true;
                }
            }
        }
        let a = Awaited { step, kind, retry };
        let mut left = first.len();
        let (nodes, wakers, target, ready) =
            (&mut self.nodes, &self.wakers, &self.target, &self.ready);
        // Wake-ups of an earlier step: the first poll polls every node.
        ready.take(None);
        let all = std::future::poll_fn(|cx| {
            let woken = ready.take(Some(cx));
            let woken = if first.is_empty() {
                woken
            } else {
                std::mem::take(&mut first)
            };
            for i in woken {
                let n = &mut nodes[i];
                if n.waiting && a.poll_node(target, n, &mut Context::from_waker(&wakers[i])) {
                    n.waiting = false;
                    left -= 1;
                }
            }
            if left == 0 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        if tokio::time::timeout(self.wait, all).await.is_err() {
            for n in self.nodes.iter_mut().filter(|n| n.waiting) {
                let e = format!("no {kind:?} within {:?}", self.wait);
                a.fail(n, &e);
                n.waiting = false;
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

/// Disconnects and destroys the QP, as C does in this step.
fn disconnect(_: &Target, n: &mut Node) -> Result<()> {
    let id = n.id()?.id_mut();
    let r = id.disconnect();
    id.destroy_qp();
    Ok(r?)
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
        wakers: Vec::with_capacity(n),
        ready: Arc::default(),
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

    // The nodes first (C allocates them before the step too).
    for i in 0..n {
        c.wakers.push(Waker::from(Arc::new(NodeWaker {
            node: i,
            ready: Arc::clone(&c.ready),
        })));
        c.nodes.push(Node {
            id: None,
            times: Default::default(),
            waiting: false,
            retries: 0,
            failed: false,
        });
    }
    println!("creating id");
    c.sync_step(Step::CreateId, |_, n| {
        n.id = Some(cm.create_id(PortSpace::Tcp)?);
        Ok(())
    });
    if c.nodes.iter().any(|n| n.failed) {
        return Err("creating the ids failed".into());
    }

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
    // before the step. One CQ for all, created with the first QP: C's
    // rdma_create_qp creates the CQs of the first id and writes them back
    // into the QP attributes that every later call shares.
    let pd = match c.nodes.iter_mut().find(|n| !n.failed) {
        Some(n) => {
            let ctx = n.id()?.id().context()?;
            Some(ProtectionDomain::new(&ctx)?)
        }
        None => None,
    };
    let mut cq = None;
    c.sync_step(Step::CreateQp, |_, n| {
        let pd = pd.as_ref().ok_or("no protection domain")?;
        let cq = match &cq {
            Some(cq) => cq,
            None => cq.insert(CompletionQueue::new(pd.context(), 2)?),
        };
        n.id()?
            .id_mut()
            .create_qp(pd, QpType::Rc, cq, cq, qp_caps())?;
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
        Ok(())
    });
    drop(cq);
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

/// The PD and the CQ of each device the server has seen requests on: every
/// QP of a device shares them, as the QPs of C's server do.
type Verbs = Arc<Mutex<Vec<(ProtectionDomain, CompletionQueue)>>>;

fn verbs_for(verbs: &Verbs, ctx: &rdma::Context) -> Result<(ProtectionDomain, CompletionQueue)> {
    // A poisoned list is still a valid list.
    let mut verbs = verbs.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(v) = verbs
        .iter()
        .find(|(pd, _)| pd.context().name() == ctx.name())
    {
        return Ok(v.clone());
    }
    let v = (ProtectionDomain::new(ctx)?, CompletionQueue::new(ctx, 2)?);
    verbs.push(v.clone());
    Ok(v)
}

/// Serves one connection: a QP, accept, and a disconnect when the client
/// disconnects.
async fn serve(mut req: rdma::cm::ConnectRequest, verbs: Verbs, counts: Arc<Counts>) -> Result<()> {
    let mut settle = Settle {
        counts,
        established: false,
    };
    let ctx = req.id_mut().context()?;
    let (pd, cq) = verbs_for(&verbs, &ctx)?;
    req.id_mut()
        .create_qp(&pd, QpType::Rc, &cq, &cq, qp_caps())?;
    let (mut id, _) = req
        .accept(&ConnParam::new(), Duration::from_secs(60))
        .await?;
    settle.established();
    loop {
        let ev = id.next_event().await?;
        if ev.kind == CmEventKind::Disconnected {
            break;
        }
    }
    id.id().disconnect().ok();
    Ok(())
}

/// The server's connections so far: requests taken, requests settled
/// (established, or ended before), connections ended.
#[derive(Default)]
struct Counts {
    requests: AtomicUsize,
    settled: AtomicUsize,
    done: AtomicUsize,
}

/// Counts one connection as settled (once) and, when dropped, as ended.
struct Settle {
    counts: Arc<Counts>,
    established: bool,
}

impl Settle {
    fn established(&mut self) {
        if !self.established {
            self.established = true;
            self.counts.settled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Settle {
    fn drop(&mut self) {
        self.established();
        self.counts.done.fetch_add(1, Ordering::SeqCst);
    }
}

/// rdma-core 52 to 60's `cmtime` client syncs each round with its server
/// over a TCP connection to the server's address and CM port number: it
/// sends one byte and waits for the server to echo it, 0 before a round,
/// `OOB_CONNECTED` once its connections are established, `OOB_DISCONNECTED`
/// once they are disconnected (the values of its steps `STEP_CONNECT` and
/// `STEP_DISCONNECT`). The server echoes `OOB_CONNECTED` once every request
/// it has taken is settled, `OOB_DISCONNECTED` once every connection has
/// ended, other bytes at once; it waits at most `OOB_WAIT` for either.
const OOB_CONNECTED: u8 = 12;
const OOB_DISCONNECTED: u8 = 14;
const OOB_WAIT: Duration = Duration::from_secs(60);

/// Listens for the sync connections of rdma-core 52 to 60's client, on a
/// thread of its own (the connections are few and block). Where the port
/// is taken (iWARP, whose CM listens on the TCP port itself), says so and
/// serves the CM only.
fn oob_listen(addr: SocketAddr, counts: Arc<Counts>) {
    let listener = match std::net::TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cmtime: no out-of-band sync on TCP {addr} ({e}): only the CM is served");
            return;
        }
    };
    std::thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            let counts = Arc::clone(&counts);
            std::thread::spawn(move || oob_serve(sock, &counts));
        }
    });
}

fn oob_serve(mut sock: std::net::TcpStream, counts: &Counts) {
    use std::io::{Read, Write};
    sock.set_nodelay(true).ok();
    let mut b = [0u8];
    while sock.read_exact(&mut b).is_ok() {
        let ready = |c: &Counts| {
            let requests = c.requests.load(Ordering::SeqCst);
            match b[0] {
                OOB_CONNECTED => c.settled.load(Ordering::SeqCst) >= requests,
                OOB_DISCONNECTED => c.done.load(Ordering::SeqCst) >= requests,
                _ => true,
            }
        };
        let deadline = Instant::now() + OOB_WAIT;
        while !ready(counts) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if sock.write_all(&b).is_err() {
            break;
        }
    }
}

async fn run_server(a: &Args) -> Result<()> {
    let ip = match &a.bind {
        Some(b) => resolve(b, a.port)?.ip(),
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let cm = AsyncCm::new()?;
    let mut listener = cm.listen(SocketAddr::new(ip, a.port), 1024)?;
    let verbs: Verbs = Arc::default();
    let counts = Arc::new(Counts::default());
    oob_listen(SocketAddr::new(ip, a.port), Arc::clone(&counts));
    loop {
        let req = listener.accept().await?;
        counts.requests.fetch_add(1, Ordering::SeqCst);
        let verbs = Arc::clone(&verbs);
        let counts = Arc::clone(&counts);
        tokio::spawn(async move {
            if let Err(e) = serve(req, verbs, counts).await {
                println!("connection failed: {e}");
            }
        });
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    // Two workers, as the C tool has two threads: the CM events are read
    // (by the router task) while the main task still issues requests. (On
    // one thread, which reads them only after, resolving 100 addresses in
    // the test VM takes twice as long.)
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
