//! The device's context: enumeration, ports and GIDs, objects dropped in any
//! order, asynchronous events, resource counts, fork support.

use std::collections::BTreeMap;
use std::time::Duration;

use rdma::{
    AccessFlags, CompletionChannel, CompletionQueue, ForkStatus, InitAttr, MemoryRegion, PortSpeed,
    PortWidth, ProtectionDomain, QpType, QueuePair, SharedReceiveQueue,
};
use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

use crate::fixtures::{self, open, refused, send_one, state_report, ACCESS, R};

pub fn objects_drop_in_any_order(env: &TestEnv) -> TestResult {
    let before = rdma_tests::resource_counts(&env.device)?;
    drop_in_any_order(env)?;
    let after = rdma_tests::resource_counts(&env.device)?;
    let grown = rdma_tests::grown_counts(&before, &after);
    check!(
        grown.is_empty(),
        "kernel resources leaked (kind, before, after): {grown:?}"
    );
    Ok(Outcome::Passed)
}

fn drop_in_any_order(env: &TestEnv) -> TestResult {
    // Parents dropped first: children keep them alive.
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let ch = CompletionChannel::new(&ctx)?;
    let cq = CompletionQueue::builder(&ctx)
        .channel(&ch)
        .cqe(16)
        .build()?;
    let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let qp = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
    let new = state_report(env, &pd, &cq)?.new_qp();
    drop(ctx);
    drop(pd);
    drop(ch);
    drop(cq);
    let state = qp.state()?;
    check!(state == new, "new QP reports {state:?}, not {new:?}");
    check!(mr.len() == 4096);
    drop(mr);
    drop(qp);

    // Children dropped first, in creation order and reversed.
    for reverse in [false, true] {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::builder(&ctx).extended(true).build()?;
        let srq = SharedReceiveQueue::new(&pd, 16, 1)?;
        let qp = QueuePair::builder(&pd, QpType::Rc, &cq).srq(&srq).build()?;
        let mr = MemoryRegion::new(&pd, 8192, AccessFlags::LOCAL_WRITE)?;
        if reverse {
            drop(mr);
            drop(qp);
            drop(srq);
            drop(cq);
            drop(pd);
            drop(ctx);
        } else {
            drop(ctx);
            drop(pd);
            drop(cq);
            drop(srq);
            drop(qp);
            drop(mr);
        }
    }
    Ok(Outcome::Passed)
}

pub fn async_events_stay_quiet_without_errors(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    ctx.set_async_nonblocking(true)?;
    check!(
        ctx.get_async_event()?.is_none(),
        "an async event before any error"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let events = rt.block_on(async { rdma::AsyncEvents::new(&ctx) })?;
    let none = rt
        .block_on(async { tokio::time::timeout(Duration::from_millis(200), events.next()).await });
    check!(none.is_err(), "an async event out of nowhere: {none:?}");
    Ok(Outcome::Passed)
}

pub fn pkey_table_and_port_attributes(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let dev = ctx.query_device()?;
    let ports = dev.phys_port_cnt();
    check!(ports >= 1, "no port");
    // Both counts agree below 256 ports (rxe and siw have one).
    check!(
        dev.phys_port_cnt_ex() == u32::from(ports)
            && dev.as_raw().phys_port_cnt_ex <= u32::from(ports),
        "phys_port_cnt_ex {} (raw {}), phys_port_cnt {ports}",
        dev.phys_port_cnt_ex(),
        dev.as_raw().phys_port_cnt_ex
    );
    let port = ctx.query_port(1)?;
    eprintln!(
        "{} port 1: width {:?} speed {:?} ({:?} Gb/s) link {} max_msg_sz {:#x} pkey_tbl_len {}",
        env.provider.name(),
        port.width(),
        port.speed(),
        port.rate_gbps(),
        port.link_layer(),
        port.max_msg_sz(),
        port.pkey_tbl_len()
    );
    // What pyverbs checks of a port: width and speed known, a link layer,
    // messages above a page.
    check!(
        !matches!(port.width(), PortWidth::Other(_))
            && !matches!(port.speed(), PortSpeed::Other(_)),
        "width code {} / speed code {} unknown",
        port.active_width(),
        port.active_speed()
    );
    check!(port.rate_gbps().is_some_and(|r| r > 0.0), "no rate");
    check!(
        port.link_layer() == "Ethernet",
        "link layer {}",
        port.link_layer()
    );
    check!(
        port.max_msg_sz() > 0x1000,
        "max_msg_sz {:#x}",
        port.max_msg_sz()
    );
    // rxe has the default P_Key; iWARP has no P_Keys, and siw's table is empty.
    let want_len = match env.provider {
        Provider::Rxe => 1,
        Provider::Siw => 0,
    };
    check!(
        port.pkey_tbl_len() == want_len,
        "pkey_tbl_len {}",
        port.pkey_tbl_len()
    );

    let len = port.pkey_tbl_len();
    refused(
        ctx.query_pkey(1, len),
        "ibv_query_pkey",
        libc::EINVAL,
        "past the port's P_Key table",
    )?;
    refused(
        ctx.query_pkey(ports + 1, 0),
        "ibv_query_port",
        libc::EINVAL,
        "past the device's last port",
    )?;
    refused(
        ctx.pkey_index(ports + 1, 0xffff),
        "ibv_query_port",
        libc::EINVAL,
        "past the device's last port",
    )?;
    match env.provider {
        Provider::Rxe => {
            let pkey = ctx.query_pkey(1, 0)?;
            check!(pkey == 0xffff, "rxe's P_Key 0 is {pkey:#x}");
            check!(ctx.pkey_index(1, 0xffff)? == Some(0));
            let absent = ctx.pkey_index(1, 0x7fff)?;
            check!(absent.is_none(), "P_Key 0x7fff at {absent:?}");
            Ok(Outcome::Passed)
        }
        Provider::Siw => {
            // The refusal of index `len` above was that of index 0.
            let e = refused(
                ctx.pkey_index(1, 0xffff),
                "ibv_get_pkey_index",
                libc::EINVAL,
                "no P_Key table",
            )?;
            Ok(Outcome::Skipped(format!(
                "iWARP (siw) has no P_Key table: {e} (port attributes and refusals checked)"
            )))
        }
    }
}

/// The counts of the kinds of objects the loop creates.
fn counts(env: &TestEnv) -> R<BTreeMap<String, u64>> {
    let mut all = rdma_tests::resource_counts(&env.device)?;
    all.retain(|k, _| ["pd", "cq", "qp", "mr", "srq", "ctx"].contains(&k.as_str()));
    Ok(all)
}

pub fn create_destroy_loop_leaves_no_resources(env: &TestEnv) -> TestResult {
    const ROUNDS: usize = 300;
    let ctx = open(env)?;
    let before = counts(env)?;
    let count = |v: &BTreeMap<String, u64>, k: &str| v.get(k).copied().unwrap_or(0);
    for round in 0..ROUNDS {
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
        let srq = SharedReceiveQueue::new(&pd, 4, 1)?;
        let rc = QueuePair::builder(&pd, QpType::Rc, &cq).build()?;
        let with_srq = QueuePair::builder(&pd, QpType::Rc, &cq).srq(&srq).build()?;
        let ud = match env.provider {
            Provider::Rxe => Some(QueuePair::builder(&pd, QpType::Ud, &cq).build()?),
            Provider::Siw => None,
        };
        rc.to_init(&InitAttr::new(1))?;
        if round == 0 {
            // The counts see these objects: the check below can fail.
            let during = counts(env)?;
            let qps = 2 + u64::from(ud.is_some());
            for (kind, more) in [("pd", 1), ("cq", 1), ("mr", 1), ("srq", 1), ("qp", qps)] {
                check!(
                    count(&during, kind) == count(&before, kind) + more,
                    "{kind}: {} with the objects of one round, {} before",
                    count(&during, kind),
                    count(&before, kind)
                );
            }
        }
        // Parents first on odd rounds: each child keeps its parent alive.
        if round % 2 == 1 {
            drop(pd);
            drop(cq);
            drop(srq);
        }
        drop((rc, with_srq, ud, mr));
    }
    let grown = rdma_tests::grown_counts(&before, &counts(env)?);
    check!(
        grown.is_empty(),
        "after {ROUNDS} rounds (kind, before, after): {grown:?}"
    );
    // Contexts too.
    drop(ctx);
    let before = counts(env)?;
    for _ in 0..50 {
        let ctx = open(env)?;
        drop(ProtectionDomain::new(&ctx)?);
    }
    let grown = rdma_tests::grown_counts(&before, &counts(env)?);
    check!(
        grown.is_empty(),
        "after 50 opens (kind, before, after): {grown:?}"
    );
    Ok(Outcome::Passed)
}

/// The kernel's release as (major, minor), from uname.
fn kernel_release() -> Option<(u32, u32)> {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut parts = text.trim().split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

pub fn fork_init_reports_the_kernel(env: &TestEnv) -> TestResult {
    // In a process of its own: fork protection is process-wide and must be
    // set before any registration.
    if let Some(outcome) = rdma_tests::in_own_process()? {
        return Ok(outcome);
    }
    let release = kernel_release();
    let cow = release.is_some_and(|r| r >= (5, 13));
    let first = rdma::is_fork_initialized();
    let env_safe = std::env::var_os("RDMAV_FORK_SAFE").is_some();
    let expect = if cow {
        ForkStatus::Unneeded
    } else if env_safe {
        ForkStatus::Enabled
    } else {
        ForkStatus::Disabled
    };
    check!(
        first == expect,
        "kernel {release:?}: ibv_is_fork_initialized says {first:?} before ibv_fork_init, expected {expect:?}"
    );
    rdma::fork_init()?;
    let after = rdma::is_fork_initialized();
    let expect = if cow {
        ForkStatus::Unneeded
    } else {
        ForkStatus::Enabled
    };
    check!(
        after == expect,
        "after ibv_fork_init: {after:?}, expected {expect:?}"
    );
    // Registered memory and traffic across a fork: the child exits at once,
    // the parent writes its region and sends from it; the peer receives the
    // bytes written after the fork.
    let ctx = open(env)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq_a = CompletionQueue::new(&ctx, 16)?;
    let cq_b = CompletionQueue::new(&ctx, 16)?;
    let a = QueuePair::builder(&pd, QpType::Rc, &cq_a).build()?;
    let b = QueuePair::builder(&pd, QpType::Rc, &cq_b).build()?;
    let mr_a = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let mr_b = MemoryRegion::new(&pd, 4096, ACCESS)?;
    let _cm = fixtures::connect_rc(env, &ctx, &a, &b)?;
    mr_a.write(0, b"before the fork")?;
    // SAFETY: the child calls only _exit, which is async-signal-safe.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(0) };
    }
    check!(pid > 0, "fork: {}", std::io::Error::last_os_error());
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    check!(
        waited == pid && libc::WIFEXITED(status),
        "child status {status}"
    );
    send_one(
        (&a, &cq_a, &mr_a),
        (&b, &cq_b, &mr_b),
        b"after the fork, new",
    )?;
    Ok(Outcome::Passed)
}

/// The GID picker, and the types it picks by: on rxe the RoCE v2 GID of
/// the test's IPv4 address (and an IPv6 one), on siw iWARP GIDs only.
pub fn gids_are_picked_by_type_and_family(env: &TestEnv) -> TestResult {
    use rdma::{GidType, IpFamily};
    let ctx = open(env)?;
    let table = ctx.gid_table()?;
    check!(!table.is_empty(), "an empty GID table");
    for e in &table {
        // The index and port are those an address vector takes.
        let again = ctx.query_gid_entry(e.port, e.index)?;
        check!(again == Some(*e), "entry {e:?} queried again: {again:?}");
    }
    match env.provider {
        Provider::Rxe => {
            let v4 = ctx.find_gid(1, GidType::RoceV2, Some(IpFamily::V4))?;
            let v4 = v4.ok_or("no RoCE v2 IPv4 GID")?;
            check!(
                v4.gid.to_ipv4_mapped() == Some(env.ipv4),
                "the IPv4 RoCE v2 GID is {} (index {}), not {}",
                v4.gid,
                v4.index,
                env.ipv4
            );
            let v6 = ctx.find_gid(1, GidType::RoceV2, Some(IpFamily::V6))?;
            let v6 = v6.ok_or("no RoCE v2 IPv6 GID")?;
            check!(
                v6.ip_family() == Some(IpFamily::V6) && v6.gid.to_ipv4_mapped().is_none(),
                "{v6:?}"
            );
            check!(
                ctx.find_gid(1, GidType::Iwarp, None)?.is_none(),
                "an iWARP GID on rxe"
            );
            check!(
                ctx.find_gid(2, GidType::RoceV2, None)?.is_none(),
                "a GID on rxe's port 2"
            );
        }
        Provider::Siw => {
            check!(
                table
                    .iter()
                    .all(|e| e.gid_type == GidType::Iwarp && e.ip_family().is_none()),
                "siw's GIDs: {table:?}"
            );
            check!(
                ctx.find_gid(1, GidType::Iwarp, None)?.is_some(),
                "no iWARP GID found"
            );
            check!(
                ctx.find_gid(1, GidType::RoceV2, Some(IpFamily::V4))?
                    .is_none(),
                "a RoCE GID on siw"
            );
        }
    }
    Ok(Outcome::Passed)
}

/// The kernel's index of the device: the same through the device list and
/// an open context, the one the `rdma` tool (netlink) prints, and unique
/// among the devices.
pub fn device_index_is_the_kernels(env: &TestEnv) -> TestResult {
    let list = rdma::DeviceList::new()?;
    let dev = list
        .find(&env.device)
        .ok_or("the test device is not listed")?;
    let Some(index) = dev.index() else {
        fail!("{} has no index (ibv_get_device_index gave -1)", env.device);
    };
    let ctx = dev.open()?;
    check!(
        ctx.device_index() == Some(index),
        "the context says {:?}, the device {index}",
        ctx.device_index()
    );
    let mut seen = Vec::new();
    for d in list.iter() {
        let i = d
            .index()
            .ok_or_else(|| format!("{} has no index", d.name()))?;
        check!(!seen.contains(&i), "index {i} twice: {seen:?}");
        seen.push(i);
    }
    let out = std::process::Command::new("rdma")
        .args(["dev", "show", &env.device])
        .output()
        .map_err(|e| format!("running `rdma dev show`: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let kernel: Option<u32> = text.split(':').next().and_then(|n| n.trim().parse().ok());
    check!(
        kernel == Some(index),
        "`rdma dev show {}` says {text:?}, ibv_get_device_index {index}",
        env.device
    );
    Ok(Outcome::Passed)
}

/// The device's raw clock: read twice, never backwards, where the provider
/// has the query; otherwise the typed `EOPNOTSUPP` naming the device (rxe
/// and siw have no `query_rt_values`), and the context still works.
pub fn raw_clock_is_read_or_refused_by_name(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    match ctx.raw_clock() {
        Ok(first) => {
            let second = ctx.raw_clock()?;
            check!(
                second >= first,
                "the clock went back: {first:?} then {second:?}"
            );
            Ok(Outcome::Passed)
        }
        Err(e) => {
            check!(
                e.errno() == libc::EOPNOTSUPP && e.verb() == "ibv_query_rt_values_ex",
                "not the typed 'not supported': {e}"
            );
            check!(
                e.hint().is_some_and(|h| h.contains(&env.device)),
                "the error does not name {}: {e}",
                env.device
            );
            // A failed query changes nothing.
            ProtectionDomain::new(&ctx)?;
            check!(ctx.query_device()?.phys_port_cnt() >= 1, "no port");
            Ok(Outcome::Passed)
        }
    }
}

/// The QP types the device's TSO, RSS and packet pacing take, read with
/// `ibv_is_qpt_supported`, are the bits of the raw capabilities (none on
/// rxe and siw, which have none of the three).
pub fn qp_type_capabilities_are_the_raw_bits(env: &TestEnv) -> TestResult {
    let ctx = open(env)?;
    let attr = ctx.query_device()?;
    let raw = attr.as_raw();
    for (qpt, bit) in [
        (QpType::Rc, ibverbs_sys::IBV_QPT_RC),
        (QpType::Uc, ibverbs_sys::IBV_QPT_UC),
        (QpType::Ud, ibverbs_sys::IBV_QPT_UD),
    ] {
        for (what, got, caps) in [
            ("tso", attr.tso_supported(qpt), raw.tso_caps.supported_qpts),
            ("rss", attr.rss_supported(qpt), raw.rss_caps.supported_qpts),
            (
                "packet pacing",
                attr.packet_pacing_supported(qpt),
                raw.packet_pacing_caps.supported_qpts,
            ),
        ] {
            check!(
                got == (caps >> bit & 1 == 1),
                "{what} for {qpt:?}: {got}, caps {caps:#x}"
            );
            check!(!got, "{} claims {what} for {qpt:?}", env.device);
        }
    }
    Ok(Outcome::Passed)
}

/// librdmacm's device contexts: the test device is among them, its context
/// serves verbs, and it outlives the list it came from.
pub fn cm_devices_give_working_contexts(env: &TestEnv) -> TestResult {
    let cm = rdma::cm::CmDevices::new()?;
    check!(!cm.is_empty(), "librdmacm lists no device");
    check!(
        cm.iter().count() == cm.len(),
        "{cm:?}: {} contexts",
        cm.len()
    );
    let ctx = cm
        .find(&env.device)
        .ok_or_else(|| format!("{} is not among librdmacm's devices {cm:?}", env.device))?;
    let verbs = open(env)?;
    check!(
        ctx.device_index() == verbs.device_index(),
        "librdmacm's context is of device {:?}, the verbs one {:?}",
        ctx.device_index(),
        verbs.device_index()
    );
    // The same context twice from one list, and from a second list.
    let again = rdma::cm::CmDevices::new()?
        .find(&env.device)
        .ok_or("gone")?;
    check!(
        again.as_raw() == ctx.as_raw(),
        "librdmacm handed out two contexts of {}",
        env.device
    );
    drop(cm);
    drop(again);
    // The list is gone; the context still works.
    let pd = ProtectionDomain::new(&ctx)?;
    let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
    check!(mr.len() == 4096, "a region of {} bytes", mr.len());
    check!(ctx.query_device()?.phys_port_cnt() >= 1, "no port");
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "context":
    objects_drop_in_any_order,
    async_events_stay_quiet_without_errors,
    pkey_table_and_port_attributes,
    create_destroy_loop_leaves_no_resources,
    fork_init_reports_the_kernel,
    gids_are_picked_by_type_and_family,
    device_index_is_the_kernels,
    raw_clock_is_read_or_refused_by_name,
    qp_type_capabilities_are_the_raw_bits,
    cm_devices_give_working_contexts,
);
