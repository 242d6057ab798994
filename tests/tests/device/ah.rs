//! Address handles: a UD send through a handle that the caller drops right
//! after `post_send`, before the request completes, still goes out, and to
//! the address that handle named; no kernel handle outlives the objects.
//!
//! rxe's kernel finds a UD request's address handle by its number when its
//! requester sends the datagram, possibly after `post_send` returned (when
//! two threads post at once, or the requester is behind): a handle
//! destroyed by then fails the request and errors the QP, and a number
//! given to a newer handle of the PD would send the datagram there.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use rdma::{
    AccessFlags, AddressHandle, CompletionQueue, MemoryRegion, Path, ProtectionDomain, QpCaps,
    QpType, QueuePair, RecvWr, SendWr, WcOpcode, WorkCompletion,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{open, roce_gid, ud, R, TIMEOUT};

/// Rounds of sends; each round two threads post `PER_THREAD` sends each.
const ROUNDS: usize = 60;
const PER_THREAD: usize = 8;
/// Bytes of a receive: the 40-byte GRH, then the 8-byte tag.
const RECV: usize = 64;
const QKEY: u32 = 0x0a00_0001;

/// The RoCEv2 GID of the device's IPv6 address.
fn roce_gid_v6(ctx: &rdma::Context, env: &TestEnv) -> R<(rdma::Gid, u8)> {
    let want = rdma::Gid::from(env.ipv6);
    match ctx
        .gid_table()?
        .into_iter()
        .find(|e| e.gid == want && e.gid_type == rdma::GidType::RoceV2)
    {
        Some(e) => Ok((e.gid, e.index)),
        None => fail!("no RoCEv2 GID for {}", env.ipv6),
    }
}

fn ud_qp(pd: &ProtectionDomain, cq: &CompletionQueue, caps: QpCaps) -> R<QueuePair> {
    let qp = QueuePair::builder(pd, QpType::Ud, cq).caps(caps).build()?;
    ud::to_rts(&qp, QKEY)?;
    Ok(qp)
}

/// The `users` count that `rdma res show pd` reports for the PDs of this
/// process on `dev` (every MR, QP and AH of a PD is one of its users), or
/// `None` where the tool is missing.
fn pd_users(dev: &str) -> Option<Vec<u64>> {
    let out = Command::new("rdma")
        .args(["res", "show", "pd", "dev", dev])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let pid = std::process::id().to_string();
    let text = String::from_utf8_lossy(&out.stdout);
    let users = text
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.windows(2).any(|p| p[0] == "pid" && p[1] == pid)
        })
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.windows(2)
                .find(|p| p[0] == "users")
                .and_then(|p| p[1].parse().ok())
        })
        .collect();
    Some(users)
}

/// Sends through address handles dropped right after their `post_send`
/// (two threads posting on one QP, so that one's requester often sends the
/// other's datagram after that post returned): every send completes, each
/// datagram reaches the QP it was sent to through the address of its own
/// handle (even tags to receiver B through the IPv4 GID, odd ones to
/// receiver C through the IPv6 GID, told apart by the GRH), and once the
/// QPs are gone the PD has no user left (no kernel address handle kept).
pub fn ah_dropped_after_post_send_is_kept_until_sent(env: &TestEnv) -> TestResult {
    dropped_handles(env, false)
}

/// As [`ah_dropped_after_post_send_is_kept_until_sent`], with every send
/// posted through a prepared list (`prepare_send`, whose posts the QP does
/// not count) that is dropped with its handle right after its post.
pub fn ah_dropped_after_a_prepared_post_is_kept_until_sent(env: &TestEnv) -> TestResult {
    dropped_handles(env, true)
}

fn dropped_handles(env: &TestEnv, prepared: bool) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    let ctx = open(env)?;
    let (gid4, idx4) = roce_gid(&ctx, env)?;
    let (gid6, idx6) = roce_gid_v6(&ctx, env)?;
    let total = ROUNDS * 2 * PER_THREAD;
    let half = total / 2;
    {
        let pd = ProtectionDomain::new(&ctx)?;
        let send_cq = CompletionQueue::new(&ctx, 4 * PER_THREAD as i32)?;
        let recv_cq = CompletionQueue::new(&ctx, total as i32 + 16)?;
        let recv_base = total * 8;
        let mr = MemoryRegion::new(&pd, recv_base + total * RECV, AccessFlags::LOCAL_WRITE)?;
        // A send queue just deep enough for a round: the handles of earlier
        // rounds are released while later ones are posted.
        let a = ud_qp(
            &pd,
            &send_cq,
            QpCaps {
                max_send_wr: 2 * PER_THREAD as u32,
                ..QpCaps::default()
            },
        )?;
        let rcaps = QpCaps {
            max_recv_wr: half as u32,
            ..QpCaps::default()
        };
        let b = QueuePair::builder(&pd, QpType::Ud, &send_cq)
            .recv_cq(&recv_cq)
            .caps(rcaps)
            .build()?;
        let c = QueuePair::builder(&pd, QpType::Ud, &send_cq)
            .recv_cq(&recv_cq)
            .caps(rcaps)
            .build()?;
        for qp in [&b, &c] {
            ud::to_rts(qp, QKEY)?;
        }
        for i in 0..total {
            let off = recv_base + i * RECV;
            let s = [mr.sge(off..off + RECV)?];
            let qp = if i % 2 == 0 { &b } else { &c };
            qp.post_recv(&mut [RecvWr::new(i as u64, &s)])?;
        }
        for i in 0..total {
            mr.write(i * 8, &(i as u64).to_le_bytes())?;
        }
        let path4 = Path::to_gid(gid4, idx4, 1);
        let path6 = Path::to_gid(gid6, idx6, 1);
        let next = AtomicUsize::new(0);
        let mut sent = Vec::with_capacity(total);
        for _ in 0..ROUNDS {
            std::thread::scope(|s| -> R<()> {
                let workers: Vec<_> = (0..2)
                    .map(|_| {
                        s.spawn(|| -> Result<(), String> {
                            for _ in 0..PER_THREAD {
                                let i = next.fetch_add(1, Ordering::Relaxed);
                                let (path, to) = if i % 2 == 0 {
                                    (&path4, b.qp_num())
                                } else {
                                    (&path6, c.qp_num())
                                };
                                let ah =
                                    AddressHandle::new(&pd, path).map_err(|e| e.to_string())?;
                                let sge = [mr.sge(i * 8..i * 8 + 8).map_err(|e| e.to_string())?];
                                let mut wrs =
                                    [SendWr::send(i as u64, &sge).ud(&ah, to, QKEY).signaled()];
                                if prepared {
                                    let mut p = a
                                        .prepare_send(&mut wrs)
                                        .map_err(|e| format!("prepare {i}: {e}"))?;
                                    p.post().map_err(|e| format!("send {i}: {e}"))?;
                                } else {
                                    a.post_send(&mut wrs)
                                        .map_err(|e| format!("send {i}: {e}"))?;
                                }
                                // The list, which borrows the handle, ends here.
                                let _ = wrs;
                                drop(ah);
                            }
                            Ok(())
                        })
                    })
                    .collect();
                for w in workers {
                    w.join().map_err(|_| "a sending thread panicked")??;
                }
                Ok(())
            })?;
            let mut wcs = vec![WorkCompletion::ZERO; 2 * PER_THREAD];
            let got = send_cq.wait(&mut wcs[..], 2 * PER_THREAD, TIMEOUT)?;
            check!(
                got.len() == 2 * PER_THREAD,
                "{} of {} send completions within {TIMEOUT:?}",
                got.len(),
                2 * PER_THREAD
            );
            if let Some(bad) = got.iter().find(|w| !w.is_success()) {
                fail!(
                    "a send through a dropped address handle failed: {bad:?} (after {} good ones)",
                    sent.len() + got.iter().filter(|w| w.is_success()).count()
                );
            }
            sent.extend(got.iter().map(|w| w.wr_id()));
        }
        sent.sort_unstable();
        check!(
            sent == (0..total as u64).collect::<Vec<_>>(),
            "send completions: {sent:?}"
        );
        let mut recvs = vec![WorkCompletion::ZERO; total];
        let got = recv_cq.wait(&mut recvs[..], total, TIMEOUT)?;
        check!(got.len() == total, "{} of {total} receives", got.len());
        let ip4 = env.ipv4.octets();
        let ip6 = env.ipv6.octets();
        let mut tags = Vec::with_capacity(total);
        for w in got.iter() {
            check!(
                w.is_success() && w.opcode() == WcOpcode::Recv && w.byte_len() == 48,
                "{w:?}"
            );
            let i = w.wr_id() as usize;
            let off = recv_base + i * RECV;
            let buf = mr.to_vec(off..off + 48)?;
            let tag = u64::from_le_bytes(buf[40..48].try_into()?) as usize;
            let to_b = w.qp_num() == b.qp_num();
            check!(
                to_b == (i % 2 == 0) && to_b == (tag % 2 == 0),
                "tag {tag} reached QP {} in receive {i}",
                w.qp_num()
            );
            // RoCEv2 puts the IPv4 header in the GRH's last 20 bytes (the
            // destination at 36..40), an IPv6 header in all 40 (24..40).
            if to_b {
                check!(buf[36..40] == ip4, "tag {tag}: not sent to {}", env.ipv4);
            } else {
                check!(buf[24..40] == ip6, "tag {tag}: not sent to {}", env.ipv6);
            }
            tags.push(tag as u64);
        }
        tags.sort_unstable();
        check!(
            tags == (0..total as u64).collect::<Vec<_>>(),
            "tags {tags:?}"
        );
        let with_objects = pd_users(&env.device);
        drop((a, b, c, mr));
        if let Some(users) = pd_users(&env.device) {
            check!(
                users == [0],
                "PD users after its QPs and MR were dropped: {users:?} (with them: {with_objects:?}): address handles left"
            );
        } else {
            fail!("`rdma res show pd` did not run");
        }
        drop(pd);
    }
    if let Some(users) = pd_users(&env.device) {
        check!(users.is_empty(), "PDs left: {users:?}");
    }
    Ok(Outcome::Passed)
}

/// A UD send through an address handle of another PD of the QP's context
/// is refused before the provider (rxe would fail it at send time, and the
/// PD keeps a dropped handle only for its own QPs), by every way to post:
/// one request, a list, a prepared list and a batch; nothing is posted,
/// and a send through the QP's own PD's handle then goes out.
pub fn ah_of_another_pd_is_refused(env: &TestEnv) -> TestResult {
    if env.provider == Provider::Siw {
        return Ok(Outcome::Skipped("iWARP (siw) has no UD queue pairs".into()));
    }
    let ctx = open(env)?;
    let (gid, idx) = roce_gid(&ctx, env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let other_pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let mut a = ud::ud_qp(&pd, &cq, rdma::SendOps::SEND, QKEY)?;
    let b = ud_qp(&pd, &cq, QpCaps::default())?;
    let path = Path::to_gid(gid, idx, 1);
    let foreign = AddressHandle::new(&other_pd, &path)?;
    let own = AddressHandle::new(&pd, &path)?;
    let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
    let s = [mr.sge(0..8)?];
    let is_other_pd = |e: &rdma::Error| {
        e.errno() == libc::EINVAL && e.to_string().contains("different protection domain")
    };
    let e = a
        .post_send(&mut [SendWr::send(1, &s)
            .ud(&foreign, b.qp_num(), QKEY)
            .signaled()])
        .err()
        .ok_or("one send through another PD's handle was posted")?;
    check!(is_other_pd(&e), "one request: {e}");
    let e = a
        .post_send(&mut [
            SendWr::send(2, &s).ud(&own, b.qp_num(), QKEY).signaled(),
            SendWr::send(3, &s)
                .ud(&foreign, b.qp_num(), QKEY)
                .signaled(),
        ])
        .err()
        .ok_or("a list with another PD's handle was posted")?;
    check!(
        is_other_pd(&e) && e.to_string().contains("request 1"),
        "list: {e}"
    );
    let e = a
        .prepare_send(&mut [SendWr::send(4, &s).ud(&foreign, b.qp_num(), QKEY)])
        .err()
        .ok_or("a list with another PD's handle was prepared")?;
    check!(is_other_pd(&e), "prepared: {e}");
    if a.is_extended() {
        let mut batch = a.wr_batch()?;
        batch.send_ud(
            5,
            rdma::SendFlags::SIGNALED,
            &s[0],
            &foreign,
            b.qp_num(),
            QKEY,
        );
        let e = batch
            .complete()
            .err()
            .ok_or("a batch with another PD's handle was posted")?;
        check!(
            e.errno() == libc::EINVAL && e.to_string().contains("different protection domain"),
            "batch: {e}"
        );
    }
    // Nothing was posted: the QP still sends, and only this completes.
    let rs = [mr.sge(1024..1088)?];
    b.post_recv(&mut [RecvWr::new(9, &rs)])?;
    a.post_send(&mut [SendWr::send(6, &s).ud(&own, b.qp_num(), QKEY).signaled()])?;
    let mut wcs = [WorkCompletion::ZERO; 4];
    let got = cq.wait(&mut wcs[..], 2, TIMEOUT)?;
    let mut ids: Vec<u64> = got.iter().map(|w| w.wr_id()).collect();
    ids.sort_unstable();
    check!(
        ids == [6, 9] && got.iter().all(|w| w.is_success()),
        "completions: {got:?}"
    );
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "ah":
    ah_dropped_after_post_send_is_kept_until_sent,
    ah_dropped_after_a_prepared_post_is_kept_until_sent,
    ah_of_another_pd_is_refused,
);
