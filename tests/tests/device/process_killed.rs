//! A server or client process killed mid-transfer: the survivor sees the
//! peer go, releases everything, and serves or reconnects again.

use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use rdma::cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType, QueuePair,
    RecvWr, SendWr, WcStatus, WorkCompletion,
};
use rdma_tests::{check, fail, Outcome, Provider, Running, TestEnv, TestResult};

use crate::fixtures::R;
use crate::qp_errors::SEND;

// ------------------------------------------------------------------------
// The peer is a real process, SIGKILLed in the middle of a transfer: the
// `async_echo` example, as the server (the test connects to it) or as the
// client (the test serves it). The kernel tears down what the dead process
// held, so the survivor learns of the death through the CM and its
// completions; it must do so within a bound, every work request it had
// outstanding must complete, nothing of the dead process may stay in the
// kernel once it is reaped, and the survivor must then serve or reach a new
// peer process with verified data.

/// Largest message: the slot size of `async_echo` (its `-S` default).
const SIZE: usize = 4096;

/// Receive (and send) slots per connection, as many as `async_echo`'s
/// server posts.
const SLOTS: usize = 16;

/// Messages the survivor keeps in flight as a client (`async_echo`'s
/// client gets the same `--depth`).
const DEPTH: usize = 8;

/// Echoes verified before the peer is killed, and on the new connection.
const ECHOES: u64 = 200;

/// From the kill, how long the survivor may take to see the CM report the
/// death and every outstanding work request completed.
const DEATH_BOUND: Duration = Duration::from_secs(10);

/// How long a CM step, a stretch of traffic without progress or a peer
/// process's exit may take.
const STEP: Duration = Duration::from_secs(30);

/// The survivor's verbs resources, kept across its connections: a CQ and
/// one region of `2 * SLOTS` slots of `SIZE` bytes (receives, then sends).
struct Res {
    cq: CompletionQueue,
    mr: MemoryRegion,
    pd: ProtectionDomain,
}

impl Res {
    /// On the device of `id`: librdmacm's context, which its QPs use.
    fn new(id: &CmId) -> R<Res> {
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, (4 * SLOTS) as i32)?;
        let mr = MemoryRegion::new(&pd, 2 * SLOTS * SIZE, AccessFlags::LOCAL_WRITE)?;
        Ok(Res { cq, mr, pd })
    }

    /// Empties the CQ of what a destroyed QP left in it (late flushes);
    /// returns how many completions that was.
    fn discard(&self) -> R<usize> {
        let mut buf = [MaybeUninit::uninit(); 2 * SLOTS];
        let mut n = 0;
        loop {
            match self.cq.poll(&mut buf)?.len() {
                0 => return Ok(n),
                k => n += k,
            }
        }
    }
}

/// Work requests of one queue of a connection: posted and completed, in
/// total. A queue completes in the order it was posted.
///
/// A send the provider refused may still complete: siw's library writes the
/// request into the send queue it shares with the kernel before it rings
/// the doorbell, and a doorbell the kernel refuses (the QP is in ERROR)
/// leaves the request there, to be flushed with the rest (rdma-core
/// `providers/siw/siw.c`, `siw_post_send`). So a completion beyond `posted`
/// is one of the `refused`, never more.
#[derive(Debug, Clone, Copy, Default)]
struct Count {
    posted: u64,
    done: u64,
    refused: u64,
}

impl Count {
    fn outstanding(self) -> u64 {
        self.posted.saturating_sub(self.done)
    }
}

/// One connection of the survivor, with its work requests counted.
struct Conn<'a> {
    id: CmId,
    res: &'a Res,
    sends: Count,
    recvs: Count,
}

impl<'a> Conn<'a> {
    /// Gives `id` an RC QP on `res` and posts every receive slot.
    fn new(mut id: CmId, res: &'a Res) -> R<Conn<'a>> {
        let caps = QpCaps {
            max_send_wr: SLOTS as u32,
            max_recv_wr: SLOTS as u32,
            ..QpCaps::default()
        };
        id.create_qp(&res.pd, QpType::Rc, &res.cq, &res.cq, caps)?;
        let mut conn = Conn {
            id,
            res,
            sends: Count::default(),
            recvs: Count::default(),
        };
        for slot in 0..SLOTS {
            conn.post_recv(slot)?;
        }
        Ok(conn)
    }

    fn qp(&self) -> rdma::Result<&QueuePair> {
        self.id
            .qp()
            .ok_or_else(|| rdma::Error::invalid("post", "the CM id has no QP"))
    }

    fn post_recv(&mut self, slot: usize) -> rdma::Result<()> {
        let sge = [self.res.mr.sge(slot * SIZE..(slot + 1) * SIZE)?];
        if let Err(e) = self.qp()?.post_recv(&mut [RecvWr::new(slot as u64, &sge)]) {
            self.recvs.refused += 1;
            return Err(e);
        }
        self.recvs.posted += 1;
        Ok(())
    }

    /// SENDs `data` from send slot `slot`.
    fn post_send(&mut self, slot: usize, data: &[u8]) -> rdma::Result<()> {
        let at = (SLOTS + slot) * SIZE;
        self.res.mr.write(at, data)?;
        let sge = [self.res.mr.sge(at..at + data.len())?];
        if let Err(e) = self
            .qp()?
            .post_send(&mut [SendWr::send(SEND | slot as u64, &sge).signaled()])
        {
            self.sends.refused += 1;
            return Err(e);
        }
        self.sends.posted += 1;
        Ok(())
    }

    /// The bytes a successful receive completion delivered.
    fn received(&self, wc: &WorkCompletion) -> R<Vec<u8>> {
        let at = wc.wr_id() as usize * SIZE;
        Ok(self.res.mr.to_vec(at..at + wc.byte_len() as usize)?)
    }

    /// The completions ready now, counted.
    fn poll(&mut self) -> R<Vec<WorkCompletion>> {
        let mut buf = [MaybeUninit::uninit(); 2 * SLOTS];
        let wcs = self.res.cq.poll(&mut buf)?.to_vec();
        for wc in &wcs {
            let q = if wc.wr_id() & SEND != 0 {
                &mut self.sends
            } else {
                &mut self.recvs
            };
            check!(
                q.done < q.posted + q.refused,
                "a completion nothing was posted for: {wc:?} ({q:?})"
            );
            q.done += 1;
        }
        Ok(wcs)
    }

    fn outstanding(&self) -> u64 {
        self.sends.outstanding() + self.recvs.outstanding()
    }
}

/// How long the survivor waits, once everything outstanding at the kill has
/// completed, for what it posted after the kill. A provider whose queues
/// are mapped into the process (siw's receive queue) never flushes a
/// request written after the kernel moved the QP to error and flushed it;
/// those are counted, not waited for. Destroying the QP releases them.
const LATE_GRACE: Duration = Duration::from_millis(500);

/// What the survivor saw of the death of its peer; times from the kill.
#[derive(Default)]
struct Death {
    killed: Option<Instant>,
    /// Work requests posted until the kill was sent (sends, receives).
    at_kill: (Count, Count),
    /// The first typed sign of the death, and when it came.
    first: Option<(Duration, String)>,
    /// When the CM reported the death (DISCONNECTED or an error event).
    cm: Option<(Duration, CmEventKind)>,
    /// The first failed completion, and when.
    failed_wc: Option<(Duration, WcStatus)>,
    flushed: u64,
    other_errors: Vec<WcStatus>,
    /// The survivor's own `rdma_disconnect`, once it knew.
    disconnect: Option<String>,
    /// When everything outstanding at the kill had completed (and the CM
    /// had reported the death).
    settled: Option<Duration>,
    /// Posted after the kill and not completed `LATE_GRACE` later (sends,
    /// receives).
    never_completed: (u64, u64),
    /// When the last work request completed, if all did.
    drained: Option<Duration>,
}

impl Death {
    /// Kills `peer` (SIGKILL) with `conn`'s work requests outstanding.
    fn kill(&mut self, peer: &mut Running, conn: &Conn) -> R<()> {
        peer.child.kill()?;
        self.killed = Some(Instant::now());
        self.at_kill = (conn.sends, conn.recvs);
        Ok(())
    }

    fn since(&self) -> Duration {
        self.killed.map_or(Duration::ZERO, |k| k.elapsed())
    }

    fn note(&mut self, at: Duration, what: String) {
        if self.first.is_none() {
            self.first = Some((at, what));
        }
    }

    /// Whether the survivor still keeps traffic flowing: until the first
    /// sign of the death.
    fn flowing(&self) -> bool {
        self.first.is_none()
    }

    /// A failed completion: a sign of the death after the kill, a failure
    /// before it.
    fn completion(&mut self, wc: &WorkCompletion) -> R<()> {
        if self.killed.is_none() {
            fail!("a completion failed while the peer was alive: {wc:?}");
        }
        let at = self.since();
        if wc.status() == WcStatus::WorkRequestFlushed {
            self.flushed += 1;
        } else {
            self.other_errors.push(wc.status());
        }
        if self.failed_wc.is_none() {
            self.failed_wc = Some((at, wc.status()));
        }
        self.note(at, format!("a {:?} completion", wc.status()));
        Ok(())
    }

    /// A refused post: a sign of the death after the kill, a failure before.
    fn refused(&mut self, e: rdma::Error) -> R<()> {
        if self.killed.is_none() {
            return Err(e.into());
        }
        self.note(self.since(), format!("a refused post ({e})"));
        Ok(())
    }

    /// A CM event after the kill.
    fn event(&mut self, ev: &CmEvent) -> R<()> {
        let at = self.since();
        match ev.kind {
            CmEventKind::TimewaitExit => return Ok(()),
            CmEventKind::Disconnected => {}
            k if k.is_error() => {}
            _ => fail!("unexpected CM event after the kill: {ev:?}"),
        }
        if self.cm.is_none() {
            self.cm = Some((at, ev.kind));
        }
        self.note(at, format!("CM event {:?} (status {})", ev.kind, ev.status));
        Ok(())
    }

    /// After the kill: disconnects the survivor's side once it knows (on
    /// IB/RoCE that moves the QP to error, which flushes what is
    /// outstanding). True once the CM reported the death, every work request
    /// outstanding at the kill completed, and what was posted later
    /// completed too or had `LATE_GRACE` to. Fails past `DEATH_BOUND`.
    fn settled(&mut self, conn: &Conn) -> R<bool> {
        if self.first.is_some() && self.disconnect.is_none() {
            self.disconnect = Some(match conn.id.disconnect() {
                Ok(()) => "ok".into(),
                Err(e) => e.to_string(),
            });
        }
        let now = self.since();
        let (sends, recvs) = self.at_kill;
        let at_kill_done = conn.sends.done >= sends.posted && conn.recvs.done >= recvs.posted;
        if self.settled.is_none() && self.cm.is_some() && at_kill_done {
            self.settled = Some(now);
        }
        if let Some(at) = self.settled {
            if conn.outstanding() == 0 {
                self.drained = Some(now);
                return Ok(true);
            }
            if now - at > LATE_GRACE {
                self.never_completed = (conn.sends.outstanding(), conn.recvs.outstanding());
                return Ok(true);
            }
        }
        if now > DEATH_BOUND {
            fail!(
                "not settled {DEATH_BOUND:?} after the kill (sends {:?}, receives {:?}): {}",
                conn.sends,
                conn.recvs,
                self.report()
            );
        }
        Ok(false)
    }

    fn report(&self) -> String {
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        let (sends, recvs) = self.at_kill;
        let mut r = format!(
            "{} sends and {} receives outstanding at the kill",
            sends.outstanding(),
            recvs.outstanding()
        );
        match &self.first {
            Some((t, what)) => r += &format!("; first sign after {}: {what}", ms(*t)),
            None => r += "; no sign of the death",
        }
        if let Some((t, kind)) = self.cm {
            r += &format!("; CM {kind:?} after {}", ms(t));
        }
        if let Some((t, status)) = self.failed_wc {
            r += &format!("; first failed completion ({status:?}) after {}", ms(t));
        }
        r += &format!("; {} flushed", self.flushed);
        if !self.other_errors.is_empty() {
            r += &format!(", other errors {:?}", self.other_errors);
        }
        if let Some(d) = &self.disconnect {
            r += &format!("; own rdma_disconnect: {d}");
        }
        if let Some(t) = self.settled {
            r += &format!("; all outstanding at the kill completed after {}", ms(t));
        }
        if let Some(t) = self.drained {
            r += &format!(", all posted after it too after {}", ms(t));
        } else if self.settled.is_some() {
            let (sends, recvs) = self.never_completed;
            r += &format!(
                ", of those posted after it {sends} sends and {recvs} receives never completed ({} ms later)",
                LATE_GRACE.as_millis()
            );
        }
        r
    }
}

/// Message `seq` of connection `tag`: 1 to `SIZE` bytes, every byte
/// depending on both numbers.
fn message(tag: u32, seq: u64) -> Vec<u8> {
    let mut x = ((u64::from(tag) << 40) ^ seq).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    let len = 1 + (x >> 20) as usize % SIZE;
    (0..len)
        .map(|i| (x >> ((i % 8) * 8)) as u8 ^ (i as u8).wrapping_mul(7))
        .collect()
}

/// The client's side of the traffic: keeps `DEPTH` messages of connection
/// `tag` in flight and verifies every echo. Without a `peer` it stops after
/// `n` echoes (every send done); with one, it kills the peer after `n`
/// echoes, keeps going, and returns once the death has settled. Returns the
/// echoes verified and the death.
fn client_traffic(
    conn: &mut Conn,
    ch: &EventChannel,
    tag: u32,
    n: u64,
    mut peer: Option<&mut Running>,
) -> R<(u64, Death)> {
    let (mut sent, mut sends_done, mut echoed) = (0u64, 0u64, 0u64);
    let mut death = Death::default();
    let mut progress = Instant::now();
    loop {
        while death.flowing()
            && (peer.is_some() || sent < n)
            && sent - echoed < DEPTH as u64
            && sent - sends_done < DEPTH as u64
        {
            let slot = (sent % DEPTH as u64) as usize;
            match conn.post_send(slot, &message(tag, sent)) {
                Ok(()) => sent += 1,
                Err(e) => death.refused(e)?,
            }
        }
        for wc in conn.poll()? {
            progress = Instant::now();
            if !wc.is_success() {
                death.completion(&wc)?;
            } else if wc.wr_id() & SEND != 0 {
                sends_done += 1;
            } else {
                let got = conn.received(&wc)?;
                check!(
                    got == message(tag, echoed),
                    "echo {echoed} differs: {} bytes back for {} sent",
                    got.len(),
                    message(tag, echoed).len()
                );
                echoed += 1;
                if death.flowing() {
                    if let Err(e) = conn.post_recv(wc.wr_id() as usize) {
                        death.refused(e)?;
                    }
                }
            }
        }
        while let Some(ev) = ch.get_event()? {
            if death.killed.is_none() {
                fail!("CM event while the server was alive, after {echoed} echoes: {ev:?}");
            }
            death.event(&ev)?;
        }
        if death.killed.is_some() {
            if death.settled(conn)? {
                return Ok((echoed, death));
            }
            continue;
        }
        match peer.as_deref_mut() {
            Some(p) if echoed >= n => death.kill(p, conn)?,
            None if echoed >= n && sends_done == sent => return Ok((echoed, death)),
            _ => {}
        }
        check!(
            progress.elapsed() < STEP,
            "no progress for {STEP:?}: {sent} sent, {sends_done} done, {echoed} echoed"
        );
    }
}

/// The server's side: echoes every message back. Without a `peer` it
/// returns when the client disconnects; with one, it kills the peer after
/// `n` echoes, keeps echoing, and returns once the death has settled.
/// Returns the messages echoed and the death.
fn server_traffic(
    conn: &mut Conn,
    ch: &EventChannel,
    n: u64,
    mut peer: Option<&mut Running>,
) -> R<(u64, Death)> {
    let mut echoed = 0u64;
    let mut death = Death::default();
    let mut progress = Instant::now();
    loop {
        for wc in conn.poll()? {
            progress = Instant::now();
            if peer.is_none() && wc.status() == WcStatus::WorkRequestFlushed {
                // The client is going away: its disconnect follows.
                continue;
            }
            if !wc.is_success() {
                death.completion(&wc)?;
                continue;
            }
            let slot = (wc.wr_id() & !SEND) as usize;
            if !death.flowing() {
                continue;
            }
            // A receive is echoed from the send slot of the same number; the
            // receive slot is posted again once that send is done.
            let r = if wc.wr_id() & SEND != 0 {
                conn.post_recv(slot)
            } else {
                let data = conn.received(&wc)?;
                echoed += 1;
                conn.post_send(slot, &data)
            };
            if let Err(e) = r {
                death.refused(e)?;
            }
        }
        while let Some(ev) = ch.get_event()? {
            if death.killed.is_none() {
                if peer.is_none() && ev.kind == CmEventKind::Disconnected && ev.is_for(&conn.id) {
                    conn.id.disconnect()?;
                    return Ok((echoed, death));
                }
                fail!("CM event while the client was alive, after {echoed} echoes: {ev:?}");
            }
            death.event(&ev)?;
        }
        if death.killed.is_some() {
            if death.settled(conn)? {
                return Ok((echoed, death));
            }
            continue;
        }
        if let Some(p) = peer.as_deref_mut() {
            if echoed >= n {
                death.kill(p, conn)?;
            }
        }
        check!(
            progress.elapsed() < STEP,
            "no progress for {STEP:?} after {echoed} echoes"
        );
    }
}

/// A peer process, killed (if still running) and reaped when dropped,
/// whatever the test's outcome.
struct Peer(Running);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.finish_killed();
    }
}

impl Peer {
    /// Reaps the killed peer: it must have died of SIGKILL.
    fn reap_killed(&mut self) -> R<()> {
        let status = self.0.child.wait()?;
        check!(
            status.signal() == Some(libc::SIGKILL),
            "the peer ended with {status}, not by SIGKILL\n{}",
            self.0.finish_killed()
        );
        Ok(())
    }

    /// Waits for a clean exit (status 0) and returns the output.
    fn exit_ok(&mut self) -> R<String> {
        let code = self.0.wait(Instant::now() + STEP);
        let out = self.0.finish_killed();
        check!(code == Some(0), "the peer exited with {code:?}\n{out}");
        Ok(out)
    }
}

/// Starts an `async_echo` server on `port` that serves `connections`
/// connections (0: until killed) and waits until it listens.
fn echo_server(env: &TestEnv, port: u16, connections: &str) -> R<Peer> {
    let bin = rdma_tests::example("async_echo")?.display().to_string();
    let (ip, port_s) = (env.ipv4.to_string(), port.to_string());
    let args = [
        "server",
        "-a",
        &ip,
        "-p",
        &port_s,
        "--connections",
        connections,
    ];
    let mut peer = Peer(Running::spawn("server", &bin, &args)?);
    if let Err(e) = rdma_tests::wait_cm_listening(port, &mut peer.0, Instant::now() + STEP) {
        fail!("{e}\n{}", peer.0.finish_killed());
    }
    Ok(peer)
}

/// Starts an `async_echo` client of `messages` messages against `port`.
fn echo_client(env: &TestEnv, port: u16, messages: u64) -> R<Peer> {
    let bin = rdma_tests::example("async_echo")?.display().to_string();
    let (ip, port_s, m, d) = (
        env.ipv4.to_string(),
        port.to_string(),
        messages.to_string(),
        DEPTH.to_string(),
    );
    let args = [
        "client",
        "-a",
        &ip,
        "-p",
        &port_s,
        "--clients",
        "1",
        "--messages",
        &m,
        "--depth",
        &d,
    ];
    Ok(Peer(Running::spawn("client", &bin, &args)?))
}

/// Connects to `dst` (bounded CM steps) with a QP on `res`.
fn connect<'a>(ch: &EventChannel, dst: SocketAddr, res: &'a Res) -> R<Conn<'a>> {
    let id = CmId::new(ch, PortSpace::Tcp)?;
    id.resolve_addr(None, dst, Duration::from_secs(2))?;
    ch.expect(&id, CmEventKind::AddrResolved, STEP)?;
    id.resolve_route(Duration::from_secs(2))?;
    ch.expect(&id, CmEventKind::RouteResolved, STEP)?;
    let conn = Conn::new(id, res)?;
    conn.id.connect(&ConnParam::new())?;
    ch.expect(&conn.id, CmEventKind::Established, STEP)?;
    Ok(conn)
}

/// Accepts the next connect request on `listener` with a QP on `res`.
fn accept<'a>(ch: &EventChannel, listener: &CmId, res: &'a Res) -> R<Conn<'a>> {
    let mut req = ch.expect(listener, CmEventKind::ConnectRequest, STEP)?;
    let id = req.take_new_id().ok_or("a connect request without an id")?;
    let conn = Conn::new(id, res)?;
    conn.id.accept(&ConnParam::new())?;
    ch.expect(&conn.id, CmEventKind::Established, STEP)?;
    Ok(conn)
}

/// Waits until the device's resource counts are `want` again; returns how
/// long that took. At most 30 s: the kernel frees them within a fraction
/// of a second on an idle machine, and returns as soon as it has.
fn released(env: &TestEnv, want: &std::collections::BTreeMap<String, u64>) -> R<Duration> {
    let start = Instant::now();
    loop {
        let now = rdma_tests::resource_counts(&env.device)?;
        if &now == want {
            return Ok(start.elapsed());
        }
        check!(
            start.elapsed() < Duration::from_secs(30),
            "30 s after the peer was reaped, the kernel still holds more than before it \
             started: before {want:?}, now {now:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The test connects (safe `rdma::cm`) to an `async_echo` server process and
/// verifies echoes; with messages in flight the server is SIGKILLed. The
/// survivor must see the death (CM DISCONNECTED or error event, failed
/// completions) and every outstanding request complete within
/// `DEATH_BOUND`; the reaped server must leave no kernel resource; a new
/// server process on the same port then serves the survivor, whose PD, CQ
/// and region are reused, with verified echoes.
pub fn server_process_killed_mid_transfer_then_a_new_one_serves(env: &TestEnv) -> TestResult {
    let port = match env.provider {
        Provider::Rxe => 19_351,
        Provider::Siw => 19_352,
    };
    let dst = SocketAddr::new(IpAddr::V4(env.ipv4), port);
    let ch = EventChannel::new()?;
    ch.set_nonblocking(true)?;
    let res = {
        let probe = CmId::new(&ch, PortSpace::Tcp)?;
        probe.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
        Res::new(&probe)?
    };
    let before = rdma_tests::resource_counts(&env.device)?;

    let mut server = echo_server(env, port, "0")?;
    let r = connect(&ch, dst, &res)
        .and_then(|mut conn| client_traffic(&mut conn, &ch, 1, ECHOES, Some(&mut server.0)));
    let (echoed, death) = match r {
        Ok(r) => r,
        Err(e) => fail!("{e}\n{}", server.0.finish_killed()),
    };
    let late = res.discard()?;
    server.reap_killed()?;
    let release = released(env, &before)?;
    println!(
        "  server killed after {echoed} verified echoes: {}; {late} late completions left in the CQ; its resources gone {:.1} ms after it was reaped",
        death.report(),
        release.as_secs_f64() * 1e3
    );

    let mut server = echo_server(env, port, "1")?;
    let r = connect(&ch, dst, &res).and_then(|mut conn| {
        let (echoed, _) = client_traffic(&mut conn, &ch, 2, ECHOES, None)?;
        conn.id.disconnect()?;
        ch.expect(&conn.id, CmEventKind::Disconnected, STEP)?;
        Ok(echoed)
    });
    let echoed = match r {
        Ok(n) => n,
        Err(e) => fail!(
            "reconnecting to a new server: {e}\n{}",
            server.0.finish_killed()
        ),
    };
    let out = server.exit_ok()?;
    check!(
        out.contains("served 1 connections, 0 failed")
            && out.contains(&format!(": {ECHOES} messages,")),
        "the new server did not report {ECHOES} echoes\n{out}"
    );
    print!("  a new server process echoed {echoed} verified messages ... ");
    Ok(Outcome::Passed)
}

/// The test serves (safe `rdma::cm`) an `async_echo` client process that
/// verifies every echo; with messages in flight the client is SIGKILLed.
/// The survivor must see the death and every outstanding request complete
/// within `DEATH_BOUND`; the reaped client must leave no kernel resource;
/// the same listener then serves a new client process in full.
pub fn client_process_killed_mid_transfer_leaves_the_server_serving(env: &TestEnv) -> TestResult {
    let ch = EventChannel::new()?;
    ch.set_nonblocking(true)?;
    let listener = CmId::new(&ch, PortSpace::Tcp)?;
    listener.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
    listener.listen(4)?;
    let port = listener
        .local_addr()
        .ok_or("the listener has no address")?
        .port();
    let res = Res::new(&listener)?;
    let before = rdma_tests::resource_counts(&env.device)?;

    // Far more messages than it gets to send.
    let mut client = echo_client(env, port, 1 << 40)?;
    let r = accept(&ch, &listener, &res)
        .and_then(|mut conn| server_traffic(&mut conn, &ch, ECHOES, Some(&mut client.0)));
    let (echoed, death) = match r {
        Ok(r) => r,
        Err(e) => fail!("{e}\n{}", client.0.finish_killed()),
    };
    let late = res.discard()?;
    client.reap_killed()?;
    let release = released(env, &before)?;
    println!(
        "  client killed after {echoed} echoes: {}; {late} late completions left in the CQ; its resources gone {:.1} ms after it was reaped",
        death.report(),
        release.as_secs_f64() * 1e3
    );

    let mut client = echo_client(env, port, ECHOES)?;
    let r = accept(&ch, &listener, &res)
        .and_then(|mut conn| server_traffic(&mut conn, &ch, ECHOES, None));
    let echoed = match r {
        Ok((n, _)) => n,
        Err(e) => fail!("serving a new client: {e}\n{}", client.0.finish_killed()),
    };
    let out = client.exit_ok()?;
    check!(
        echoed == ECHOES
            && out.contains(&format!("1 clients x {ECHOES} messages: {ECHOES} echoes")),
        "the new client did not verify {ECHOES} echoes ({echoed} echoed)\n{out}"
    );
    print!("  the same listener served a new client process {echoed} verified echoes ... ");
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "process_killed":
    server_process_killed_mid_transfer_then_a_new_one_serves,
    client_process_killed_mid_transfer_leaves_the_server_serving,
);
