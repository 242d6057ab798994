//! The SA as a server, under either SM, through `rdma`'s SA client from
//! processes attached at different HCAs (`SIM_HOST`): who may join and
//! leave a multicast group for whom, and the Reports the SA sends to its
//! InformInfo subscribers (groups created and deleted, ports gone and
//! back).
//!
//! Each test runs its steps in child processes of this binary at HCAs
//! other than the SM's node, each child running the same test with
//! `RDMA_SA_SERVER_ROLE` naming its step; the parent orders them and
//! passes what one step learnt (a port GID) to the next.
//!
//! A subscriber claims its node's SM role (the issm device, [`IsSm`]):
//! ibsim hands an unsolicited GSI MAD (a Report) arriving at a node only to
//! the node's SM client (on a real fabric the kernel hands it to the agent
//! registered for SubnAdmReport, which `SaClient` is). A port with the
//! role has IsSM in its CapabilityMask, so the subnet's SM sends it SMInfo
//! Gets (the election, IBA 14.4), and umad2sim ends a process that receives
//! a MAD of a class without an agent: the subscriber first registers the
//! SMI classes and answers SMInfo as an SM that is not active.

use std::error::Error as StdError;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdma::mad::sa::{InformInfo, JoinState, McMemberRecord, McMemberRecordMask, SaStatusCode};
use rdma::mad::{attr_id, class, Method, SmInfo, Trap};
use rdma::umad::{AsyncPort, AsyncResponder, IsSm, Registration, SaClient};
use rdma::Gid;

use rdma_tests::fabric::{output_within, Fabric, FabricTest, Node, NodeKind};
use rdma_tests::{fail, Outcome, TestResult};

use crate::sa_client::{async_port, local_gid_and_lid, runtime};

pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "sa_server::a_join_or_leave_for_another_ports_gid_is_refused",
        run: a_join_or_leave_for_another_port_is_refused,
    },
    FabricTest {
        name: "sa_server::reports_of_a_group_created_and_deleted_reach_a_subscriber",
        run: reports_of_a_group_created_and_deleted,
    },
    FabricTest {
        name: "sa_server::reports_of_a_port_gone_and_back_reach_a_subscriber",
        run: reports_of_a_port_gone_and_back,
    },
];

type Res<T> = Result<T, Box<dyn StdError>>;

/// The step a child process runs (unset in the parent).
pub(crate) const ROLE: &str = "RDMA_SA_SERVER_ROLE";
/// The MGID of the test's group, as 32 hex digits.
const MGID: &str = "RDMA_SA_SERVER_MGID";
/// Another port's GID, as 32 hex digits.
pub(crate) const PEER: &str = "RDMA_SA_SERVER_PEER";
/// The port of the node whose link the subscriber takes down.
const VICTIM_PORT: &str = "RDMA_SA_SERVER_VICTIM_PORT";
/// The node whose link the subscriber takes down.
const VICTIM: &str = "RDMA_SA_SERVER_VICTIM";
/// What a subscriber prints once its subscriptions hold.
const SUBSCRIBED: &str = "SA_SERVER SUBSCRIBED";
/// How long a subscriber waits for each Report.
const REPORT_WAIT: Duration = Duration::from_secs(45);

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

pub(crate) fn hex(g: Gid) -> String {
    g.0.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn parse_gid(s: &str) -> Res<Gid> {
    let s = s.trim();
    if s.len() != 32 {
        fail!("not a GID of 32 hex digits: {s:?}");
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)?;
    }
    Ok(Gid(g))
}

pub(crate) fn env_gid(var: &str) -> Res<Gid> {
    parse_gid(&std::env::var(var).map_err(|_| format!("no {var}"))?)
}

/// A multicast GID of this run (the parent's PID in it), `tag` telling
/// the tests apart.
fn test_mgid(tag: u8) -> Gid {
    // Not the SA's own signature (0xA01B at bytes 2-3), which OpenSM
    // refuses in a client's MGID.
    let mut g = [
        0xff, 0x12, 0x5a, 0x5a, 0x5a, tag, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    g[12..].copy_from_slice(&std::process::id().to_be_bytes());
    Gid(g)
}

/// `n` HCAs for a test's children, none of them the SM's node (the
/// first of the net file, or under OpenSM ibsim's default node, which may
/// be an HCA): of the first `n + 1` HCAs, those whose LID (a child of
/// step `whoami` at each says) is not the SM's.
pub(crate) fn hcas<'a>(f: &'a Fabric, name: &str, n: usize) -> Res<Option<Vec<&'a Node>>> {
    let mut v = Vec::new();
    for h in f
        .nodes
        .iter()
        .skip(1)
        .filter(|x| x.kind == NodeKind::Hca)
        .take(n + 1)
    {
        let out = step(f, name, h, "whoami", &[])?;
        if printed(&out, LID_KEY)?.parse::<u16>()? != f.sm_lid {
            v.push(h);
        }
    }
    v.truncate(n);
    Ok((v.len() == n).then_some(v))
}

/// Step `whoami`: prints this port's GID, port number and LID.
pub(crate) fn whoami() -> TestResult {
    runtime()?.block_on(async {
        let port = async_port()?;
        let (me, lid) = local_gid_and_lid(&port)?;
        let n = port.port().port_num();
        println!("{GID_KEY}{} {PORT_KEY}{n} {LID_KEY}{lid}", hex(me));
        Ok(Outcome::Passed)
    })
}

/// Why a Report test does not run under OpenSM: the subscriber does not
/// get OpenSM's Reports under ibsim (OpenSM logs each SubnAdmReport to the
/// subscriber's LID as timed out, and the subscriber's process ends
/// without having read one). `None` under ours.
fn reports_not_received() -> Option<Outcome> {
    let sm = std::env::var("RDMA_FABRIC_SM").unwrap_or_else(|_| "opensm".into());
    (sm != "ours").then(|| {
        Outcome::Skipped(format!(
            "under {sm}: a subscriber under ibsim's umad2sim does not receive OpenSM's \
             Reports (OpenSM logs them timed out); the test is of our SA"
        ))
    })
}

/// This test again in a child at `host`, as step `role`, with `envs`; its
/// stdout once it passed.
pub(crate) fn step(
    f: &Fabric,
    name: &str,
    host: &Node,
    role: &str,
    envs: &[(&str, String)],
) -> Res<String> {
    let mut c = Command::new(std::env::current_exe()?);
    c.arg(name).env("SIM_HOST", &host.name).env(ROLE, role);
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = output_within(c, Duration::from_secs(120))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = format!("fabric {}: 1 passed, 0 failed, 0 skipped", f.name);
    if !out.status.success() || !text.contains(&summary) {
        fail!(
            "step {role} at {} ({}):\n{text}{}",
            host.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

/// The word a child printed after `key` (e.g. `SA_SERVER_GID=`).
pub(crate) fn printed<'a>(out: &'a str, key: &str) -> Res<&'a str> {
    out.lines()
        .find_map(|l| l.split_once(key))
        .and_then(|(_, v)| v.split_whitespace().next())
        .ok_or_else(|| format!("no {key:?} in:\n{out}").into())
}

/// What a child prints of its port: its GID and port number.
pub(crate) const GID_KEY: &str = "SA_SERVER_GID=";
const PORT_KEY: &str = "SA_SERVER_PORT=";
const LID_KEY: &str = "SA_SERVER_LID=";

fn member(mgid: Gid, port_gid: Gid, join_state: JoinState) -> McMemberRecord {
    McMemberRecord {
        mgid,
        port_gid,
        join_state,
        ..McMemberRecord::default()
    }
}

const MEMBER_MASK: McMemberRecordMask = McMemberRecordMask::MGID
    .union(McMemberRecordMask::PORT_GID)
    .union(McMemberRecordMask::JOIN_STATE);

/// A join of `port_gid` as a full member that creates the group `mgid`
/// (the components both SMs want of a creator).
async fn create(sa: &SaClient, mgid: Gid, port_gid: Gid) -> Res<McMemberRecord> {
    let q = McMemberRecord {
        qkey: 0x1234_5678,
        pkey: 0xffff,
        ..member(mgid, port_gid, JoinState::FULL_MEMBER)
    };
    let mask = MEMBER_MASK
        | McMemberRecordMask::QKEY
        | McMemberRecordMask::PKEY
        | McMemberRecordMask::SL
        | McMemberRecordMask::FLOW_LABEL
        | McMemberRecordMask::TCLASS;
    Ok(sa.join_multicast(&q, mask).await?)
}

/// How many MCMemberRecords of group `mgid` have PortGID `gid` (1 while
/// it is a member; OpenSM zeroes the PortGID and JoinState it answers to
/// a requester without the SM_Key, so only the count is compared).
async fn memberships(sa: &SaClient, mgid: Gid, gid: Gid) -> Res<usize> {
    let q = member(mgid, gid, JoinState::empty());
    let all = sa
        .get_table(&q, McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID)
        .await?;
    Ok(all.len())
}

/// Expects `r` to be the SA's ERR_REQ_INVALID.
fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, rdma::umad::Error>) -> Res<()> {
    match r {
        Err(e) if e.sa_status() == Some(SaStatusCode::ReqInvalid) => Ok(()),
        other => fail!("{what}: {other:?}, not ERR_REQ_INVALID"),
    }
}

/// From HCA A, a leave and a join (of another JoinState) naming the port
/// GID of HCA B, which joined group G for itself, are refused with
/// ERR_REQ_INVALID (OpenSM's `validate_modify`, o15-0.2.1), and B is still
/// a member: B's own leave of the state A asked to add is refused (B does
/// not hold it) and its leave as full member is taken. A proxy join (A
/// joins B to a group B was not in) is accepted by both SMs, and the proxy
/// may end it.
fn a_join_or_leave_for_another_port_is_refused(f: &Fabric) -> TestResult {
    let name = "sa_server::a_join_or_leave_for_another_ports_gid_is_refused";
    if let Some(r) = role() {
        if r == "whoami" {
            return whoami();
        }
        return runtime()?.block_on(async {
            let port = async_port()?;
            let sa = SaClient::new(&port)?;
            let (me, _) = local_gid_and_lid(&port)?;
            let mgid = env_gid(MGID)?;
            match r.as_str() {
                "create" => {
                    create(&sa, mgid, me).await?;
                    println!("{GID_KEY}{}", hex(me));
                }
                "intrude" => {
                    let b = env_gid(PEER)?;
                    let full = member(mgid, b, JoinState::FULL_MEMBER);
                    refused(
                        "a leave for another port",
                        sa.leave_multicast(&full, MEMBER_MASK).await,
                    )?;
                    let send_only = member(mgid, b, JoinState::SEND_ONLY_NON_MEMBER);
                    refused(
                        "a join for another port that is a member",
                        sa.join_multicast(&send_only, MEMBER_MASK).await,
                    )?;
                    let n = memberships(&sa, mgid, b).await?;
                    if n != 1 {
                        fail!("after the refusals, {n} memberships of the other port");
                    }
                    // A proxy join: B into a group of A's, then A ends it.
                    let mut other = mgid;
                    other.0[5] ^= 0x80;
                    create(&sa, other, me).await?;
                    sa.join_multicast(&member(other, b, JoinState::FULL_MEMBER), MEMBER_MASK)
                        .await
                        .map_err(|e| format!("a proxy join of a port not a member: {e}"))?;
                    if memberships(&sa, other, b).await? != 1 {
                        fail!("the proxy join left no membership");
                    }
                    sa.leave_multicast(&member(other, b, JoinState::FULL_MEMBER), MEMBER_MASK)
                        .await
                        .map_err(|e| format!("the proxy's leave of its proxy join: {e}"))?;
                    sa.leave_multicast(&member(other, me, JoinState::FULL_MEMBER), MEMBER_MASK)
                        .await?;
                }
                "leave" => {
                    refused(
                        "a leave of a JoinState the port does not hold",
                        sa.leave_multicast(
                            &member(mgid, me, JoinState::SEND_ONLY_NON_MEMBER),
                            MEMBER_MASK,
                        )
                        .await,
                    )?;
                    sa.leave_multicast(&member(mgid, me, JoinState::FULL_MEMBER), MEMBER_MASK)
                        .await?;
                    let n = memberships(&sa, mgid, me).await?;
                    if n != 0 {
                        fail!("after its leave, {n} memberships");
                    }
                }
                other => fail!("no step {other}"),
            }
            Ok(Outcome::Passed)
        });
    }
    let Some(h) = hcas(f, name, 2)? else {
        return Ok(Outcome::Skipped(
            "fewer than two HCAs besides the SM's node".into(),
        ));
    };
    let (a, b) = (h[0], h[1]);
    let mgid = hex(test_mgid(1));
    let out = step(f, name, b, "create", &[(MGID, mgid.clone())])?;
    let b_gid = printed(&out, GID_KEY)?.to_string();
    let intruded = step(
        f,
        name,
        a,
        "intrude",
        &[(MGID, mgid.clone()), (PEER, b_gid)],
    );
    // B leaves whatever happened, so that no group outlives the test.
    let left = step(f, name, b, "leave", &[(MGID, mgid)]);
    intruded?;
    left?;
    Ok(Outcome::Passed)
}

/// Makes this process its node's SM client, as a subscriber must be under
/// ibsim (see the module): agents of both SMI classes that answer SMInfo
/// Get with an SM not active (the SM's election leaves it out) and drop
/// any other SMP, registered before the issm device is claimed. The role
/// is held while the returned values live.
fn node_sm(port: &AsyncPort) -> Res<(AsyncResponder, AsyncResponder, IsSm)> {
    let guid = port.port().info()?.port_guid;
    let serve = |cls| {
        port.register_responder(
            &Registration::new(cls, 1)
                .method(Method::GET)
                .method(Method::SET),
            move |agent, req| {
                let h = req.mad.header();
                if h.attr_id != attr_id::SM_INFO || h.method != Method::GET {
                    return;
                }
                let mut resp = req.mad.response();
                let info = SmInfo {
                    guid,
                    sm_state: SmInfo::NOT_ACTIVE,
                    ..SmInfo::default()
                };
                if resp.set_attribute(&info).is_ok() {
                    let _ = agent.respond(&req, &resp);
                }
            },
        )
    };
    let dr = serve(class::SUBN_DIRECTED_ROUTE)?;
    let lid = serve(class::SUBN_LID_ROUTED)?;
    let ca = port.port().ca_name().to_string();
    let n = port.port().port_num();
    let is_sm = IsSm::try_acquire(&ca, n).map_err(|e| format!("the SM role of {ca}/{n}: {e}"))?;
    Ok((dr, lid, is_sm))
}

/// A child that subscribes and prints [`SUBSCRIBED`], running in the
/// background; its stdout lines come through the channel.
struct Subscriber {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    seen: String,
    /// Its output ended (it exited, or crashed).
    ended: bool,
}

impl Subscriber {
    fn start(name: &str, host: &Node, role: &str, envs: &[(&str, String)]) -> Res<Subscriber> {
        let mut c = Command::new(std::env::current_exe()?);
        c.arg(name)
            .env("SIM_HOST", &host.name)
            .env(ROLE, role)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            c.env(k, v);
        }
        let mut child = c.spawn()?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Ok(Subscriber {
            child,
            lines,
            seen: String::new(),
            ended: false,
        })
    }

    /// Waits for a line containing `what` (or the end of the output).
    fn wait_line(&mut self, what: &str, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push_str(&l);
                    self.seen.push('\n');
                    if l.contains(what) {
                        return true;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.ended = true;
                    return false;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return false,
            }
        }
    }

    /// Its end: passed (the summary printed, exit 0) within `limit`, or
    /// failed with its exit status (killed if it still ran).
    fn finish(mut self, f: &Fabric, limit: Duration) -> Res<()> {
        let summary = format!("fabric {}: 1 passed, 0 failed, 0 skipped", f.name);
        let printed = self.wait_line(&summary, limit);
        let status = if printed || self.ended {
            let end = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(s) = self.child.try_wait()? {
                    break Some(s);
                }
                if Instant::now() > end {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        } else {
            None
        };
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push_str(&l);
            self.seen.push('\n');
        }
        match status {
            Some(s) if s.success() && printed => Ok(()),
            _ => fail!("the subscriber ({status:?}):\n{}", self.seen),
        }
    }
}

/// The subscriptions of a subscriber: generic traps `traps`, of any
/// issuer and producer.
fn inform(trap: u16, subscribe: bool) -> InformInfo {
    InformInfo {
        lid_range_begin: 0xffff,
        is_generic: true,
        subscribe,
        trap_type: 0xffff,
        trap_number: trap,
        producer_type: 0xff_ffff,
        ..InformInfo::default()
    }
}

/// Waits for the Reports `want`, in order, skipping others (printed);
/// each within [`REPORT_WAIT`].
async fn expect_reports(
    sa: &SaClient,
    want: &[Trap],
    between: impl Fn(usize) -> Res<()>,
) -> Res<()> {
    for (i, w) in want.iter().enumerate() {
        between(i)?;
        let end = tokio::time::Instant::now() + REPORT_WAIT;
        loop {
            let n = match tokio::time::timeout_at(end, sa.next_report()).await {
                Err(_) => fail!("no Report of {w:?} within {REPORT_WAIT:?}"),
                Ok(None) => fail!("the port's reader stopped"),
                Ok(Some(n)) => n?,
            };
            println!("  report: {:?} from LID {}", n.trap(), n.issuer_lid);
            if n.trap() == Some(*w) {
                break;
            }
        }
    }
    Ok(())
}

/// A client at HCA A subscribes (`rdma`'s `SaClient::subscribe`) to traps
/// 66 and 67; a client at HCA B creates a group of a new MGID and leaves
/// it; A receives (`SaClient::next_report`, which answers ReportResp) a
/// Report of trap 66 then one of 67, both of that MGID.
fn reports_of_a_group_created_and_deleted(f: &Fabric) -> TestResult {
    let name = "sa_server::reports_of_a_group_created_and_deleted_reach_a_subscriber";
    if let Some(r) = role() {
        if r == "whoami" {
            return whoami();
        }
        return runtime()?.block_on(async {
            let port = async_port()?;
            let _sm = if r == "subscribe" {
                Some(node_sm(&port)?)
            } else {
                None
            };
            let sa = SaClient::new(&port)?;
            let (me, _) = local_gid_and_lid(&port)?;
            let mgid = env_gid(MGID)?;
            match r.as_str() {
                "subscribe" => {
                    for t in [66, 67] {
                        sa.subscribe(&inform(t, true)).await?;
                    }
                    println!("{SUBSCRIBED}");
                    let want = [Trap::McGroupCreated(mgid), Trap::McGroupDeleted(mgid)];
                    let got = expect_reports(&sa, &want, |_| Ok(())).await;
                    for t in [66, 67] {
                        let _ = sa.subscribe(&inform(t, false)).await;
                    }
                    got?;
                }
                "churn" => {
                    create(&sa, mgid, me).await?;
                    sa.leave_multicast(&member(mgid, me, JoinState::FULL_MEMBER), MEMBER_MASK)
                        .await?;
                }
                other => fail!("no step {other}"),
            }
            Ok(Outcome::Passed)
        });
    }
    if let Some(skip) = reports_not_received() {
        return Ok(skip);
    }
    let Some(h) = hcas(f, name, 2)? else {
        return Ok(Outcome::Skipped(
            "fewer than two HCAs besides the SM's node".into(),
        ));
    };
    let mgid = hex(test_mgid(2));
    let mut sub = Subscriber::start(name, h[0], "subscribe", &[(MGID, mgid.clone())])?;
    if !sub.wait_line(SUBSCRIBED, Duration::from_secs(30)) {
        sub.finish(f, REPORT_WAIT * 2 + Duration::from_secs(10))?;
        fail!("the subscriber passed without subscribing");
    }
    let churned = step(f, name, h[1], "churn", &[(MGID, mgid)]);
    let received = sub.finish(f, REPORT_WAIT * 2 + Duration::from_secs(10));
    churned?;
    received?;
    Ok(Outcome::Passed)
}

/// A client at HCA A subscribes to traps 64 and 65, is told the port GID
/// of HCA C (by a child at C), takes C's link down
/// (ibsim's `Unlink`) and receives a Report of trap 65 of C's GID once a
/// sweep found it gone, brings the link back (`ReLink`) and receives one
/// of trap 64 of it.
fn reports_of_a_port_gone_and_back(f: &Fabric) -> TestResult {
    let name = "sa_server::reports_of_a_port_gone_and_back_reach_a_subscriber";
    if let Some(r) = role() {
        if r == "whoami" {
            return whoami();
        }
        let victim = std::env::var(VICTIM).map_err(|_| "no victim")?;
        let gid = env_gid(PEER)?;
        let victim_port = std::env::var(VICTIM_PORT).map_err(|_| "no victim port")?;
        return runtime()?.block_on(async {
            let port = async_port()?;
            let _sm = node_sm(&port)?;
            let sa = SaClient::new(&port)?;
            for t in [64, 65] {
                sa.subscribe(&inform(t, true)).await?;
            }
            println!("{SUBSCRIBED}");
            let link = format!("\"{victim}\"[{victim_port}]");
            let want = [Trap::GidOutOfService(gid), Trap::GidInService(gid)];
            let got = expect_reports(&sa, &want, |i| {
                crate::sm::console(&format!("{} {link}", ["Unlink", "ReLink"][i]))
            })
            .await;
            if got.is_err() {
                let _ = crate::sm::console(&format!("ReLink {link}"));
            }
            for t in [64, 65] {
                let _ = sa.subscribe(&inform(t, false)).await;
            }
            got?;
            Ok(Outcome::Passed)
        });
    }
    if let Some(skip) = reports_not_received() {
        return Ok(skip);
    }
    let Some(h) = hcas(f, name, 2)? else {
        return Ok(Outcome::Skipped(
            "fewer than two HCAs besides the SM's node".into(),
        ));
    };
    let victim = h[1];
    let out = step(f, name, victim, "whoami", &[])?;
    let envs = [
        (VICTIM, victim.name.clone()),
        (PEER, printed(&out, GID_KEY)?.to_string()),
        (VICTIM_PORT, printed(&out, PORT_KEY)?.to_string()),
    ];
    let link = format!("\"{}\"[{}]", victim.name, envs[2].1);
    let mut sub = Subscriber::start(name, h[0], "watch", &envs)?;
    let subscribed = sub.wait_line(SUBSCRIBED, Duration::from_secs(30));
    let ended = sub.finish(f, REPORT_WAIT * 2 + Duration::from_secs(10));
    if ended.is_err() {
        // The subscriber may have ended between its Unlink and ReLink.
        let _ = crate::sm::console(&format!("ReLink {link}"));
    }
    ended?;
    if !subscribed {
        fail!("the subscriber passed without subscribing");
    }
    Ok(Outcome::Passed)
}
