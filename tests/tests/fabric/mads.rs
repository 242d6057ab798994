//! `rdma::umad` under umad2sim, as a caller uses it (no workaround): the
//! simulated CA and its port, LID-routed SMPs answered by ibsim's SMAs, the
//! SA of OpenSM, ibsim's PerfMgt agents, the tokio `AsyncPort`, and the
//! adversarial cases (a LID that does not exist, ports closed and opened
//! again, many requests in flight matched by TID).

use std::collections::{HashMap, HashSet};
use std::error::Error as StdError;
use std::time::{Duration, Instant};

use rdma::mad::{
    class, Attribute, ClassPortInfo, Mad, MadHeader, Method, NodeInfo, PortCounters, PortState,
    SaHeader,
};
use rdma::umad::{self, Address, Agent, AsyncPort, Error, Port, Received, Registration};
use rdma_tests::fabric::{Fabric, FabricTest, NodeKind};
use rdma_tests::{check, fail, Outcome, TestResult};

/// The tests of this module.
pub const TESTS: &[FabricTest] = &[
    FabricTest {
        name: "mads::the_simulated_ca_is_the_attached_node",
        run: the_simulated_ca_is_the_attached_node,
    },
    FabricTest {
        name: "mads::smp_nodeinfo_of_the_sm_is_the_local_node",
        run: smp_nodeinfo_of_the_sm_is_the_local_node,
    },
    FabricTest {
        name: "mads::smp_nodeinfo_of_every_lid_matches_the_subnet",
        run: smp_nodeinfo_of_every_lid_matches_the_subnet,
    },
    FabricTest {
        name: "mads::a_lid_that_does_not_exist_times_out_with_its_tid",
        run: a_lid_that_does_not_exist_times_out_with_its_tid,
    },
    FabricTest {
        name: "mads::sa_class_port_info",
        run: sa_class_port_info,
    },
    FabricTest {
        name: "mads::sa_node_records_by_get_table_and_by_lid",
        run: sa_node_records_by_get_table_and_by_lid,
    },
    FabricTest {
        name: "mads::a_mad_longer_than_256_bytes_is_sent_whole_by_an_rmpp_agent",
        run: a_mad_longer_than_256_bytes_is_sent_whole_by_an_rmpp_agent,
    },
    FabricTest {
        name: "mads::perf_port_counters_and_class_port_info",
        run: perf_port_counters_and_class_port_info,
    },
    FabricTest {
        name: "mads::many_requests_in_flight_are_matched_by_tid",
        run: many_requests_in_flight_are_matched_by_tid,
    },
    FabricTest {
        name: "mads::a_short_mad_is_received_with_its_length",
        run: a_short_mad_is_received_with_its_length,
    },
    FabricTest {
        name: "mads::ports_closed_and_opened_again_past_the_shims_fd_slots",
        run: ports_closed_and_opened_again_past_the_shims_fd_slots,
    },
    FabricTest {
        name: "mads::async_port_requests_in_flight_smp_sa_and_timeout",
        run: async_port_requests_in_flight_smp_sa_and_timeout,
    },
];

const TIMEOUT: Duration = Duration::from_millis(500);
const RETRIES: u32 = 2;
/// The SA's class version.
const SA_VERSION: u8 = 2;
const NODE_RECORD: u16 = 0x0011;
/// NodeRecord: LID (2), reserved (2), NodeInfo (40), NodeDescription (64).
const NODE_RECORD_LEN: usize = 108;

type Res<T> = Result<T, Box<dyn StdError>>;

/// The simulated CA (umad2sim names it `ibsim0`) and its one port.
fn local(f: &Fabric) -> Res<(umad::Ca, u32)> {
    let names = umad::ca_names()?;
    if names != ["ibsim0"] {
        fail!("umad2sim shows one CA, ibsim0; ca_names() gave {names:?}");
    }
    let ca = umad::Ca::get("ibsim0")?;
    let Some(p) = ca.ports.first() else {
        fail!(
            "ibsim0 has no port ({ca:?}) attached at {}",
            f.attached().name
        );
    };
    let port = p.port_num;
    Ok((ca, port))
}

fn open(f: &Fabric) -> Res<Port> {
    let (ca, port) = local(f)?;
    Ok(Port::open(&ca.name, port)?)
}

fn smp(agent_tid: u64, attr: u16, attr_mod: u32) -> Mad {
    let mut h = MadHeader::request(class::SUBN_LID_ROUTED, 1, Method::GET, agent_tid, attr);
    h.attr_mod = attr_mod;
    Mad::new(&h)
}

/// A LID-routed SubnGet(NodeInfo) to `lid`.
fn node_info(agent: &Agent, lid: u16) -> Res<(NodeInfo, Received)> {
    let tid = agent.next_tid();
    let r = agent.request(
        &smp(tid, NodeInfo::ID, 0),
        &Address::smi_lid(lid),
        TIMEOUT,
        RETRIES,
    )?;
    check_response(&r, tid, Method::GET_RESP)?;
    Ok((r.mad.attribute::<NodeInfo>()?, r))
}

/// The response's TID (lower 32 bits: the shim and ibsim write the upper
/// ones), method and status.
fn check_response(r: &Received, tid: u64, method: Method) -> TestResult {
    check!(
        r.tid() as u32 == tid as u32,
        "TID {:#x} answered by {:#x}",
        tid,
        r.tid()
    );
    check!(
        r.mad.method() == method,
        "method {:?}, not {:?}",
        r.mad.method(),
        method
    );
    check!(
        r.mad.status().is_ok(),
        "status {:?} on {:?}",
        r.mad.status(),
        r.mad.header()
    );
    check!(r.status == 0, "umad status {}", r.status);
    Ok(Outcome::Passed)
}

fn node_type(kind: NodeKind) -> u8 {
    match kind {
        NodeKind::Hca => 1,
        NodeKind::Switch => 2,
    }
}

fn the_simulated_ca_is_the_attached_node(f: &Fabric) -> TestResult {
    let (ca, port_num) = local(f)?;
    let node = f.attached();
    check!(
        ca.node_type == u32::from(node_type(node.kind)),
        "node type {} for {node:?}",
        ca.node_type
    );
    // A switch's only umad port is its management port 0; an HCA's ports
    // count from 1 (the simulator shows the one it is attached at).
    let want_port = if node.kind == NodeKind::Switch { 0 } else { 1 };
    check!(port_num == want_port, "port {port_num} of {node:?}");
    check!(
        ca.num_ports == port_num,
        "num_ports {} (libibumad's highest port number) with port {port_num}",
        ca.num_ports
    );
    let port = Port::open(&ca.name, port_num)?;
    use std::os::fd::AsRawFd;
    // The shim's fds (fcntl refuses them); Port::open took it as it is.
    check!(
        port.as_raw_fd() >= 1024,
        "fd {} is not umad2sim's",
        port.as_raw_fd()
    );
    let info = port.info()?;
    check!(
        info.state == PortState::Active,
        "port state {} (not Active)",
        info.state
    );
    check!(
        info.sm_lid == u32::from(f.sm_lid),
        "SM lid {} (sminfo: {})",
        info.sm_lid,
        f.sm_lid
    );
    check!(
        info.base_lid == u32::from(f.sm_lid),
        "the first node holds the SM port, yet its LID is {} (SM lid {})",
        info.base_lid,
        f.sm_lid
    );
    check!(!port.is_ethernet(), "link layer {}", info.link_layer);
    let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    // The shim's read of an empty queue returns -EWOULDBLOCK and leaves
    // errno as it was, which is why the port reads only after its poll.
    // SAFETY: one byte of a local buffer; the fd is the port's, open.
    let mut b = [0u8; 1];
    let n = unsafe { libc::read(port.as_raw_fd(), b.as_mut_ptr().cast(), 0) };
    check!(
        n == -(libc::EWOULDBLOCK as isize),
        "umad2sim's read of nothing returned {n}"
    );
    // Nothing queued: no MAD and no error, a receive times out as such.
    for _ in 0..3 {
        check!(port.try_recv()?.is_none(), "a MAD before any request");
    }
    match agent.recv(Some(Duration::from_millis(150))) {
        Err(Error::RecvTimeout(_)) => {}
        other => fail!("a receive with nothing to read gave {other:?}"),
    }
    node_info(&agent, f.sm_lid)?;
    drop(agent);
    Ok(Outcome::Passed)
}

fn smp_nodeinfo_of_the_sm_is_the_local_node(f: &Fabric) -> TestResult {
    let (ca, _) = local(f)?;
    let port = open(f)?;
    let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    let (ni, r) = node_info(&agent, f.sm_lid)?;
    check!(
        ni.node_guid == ca.node_guid,
        "NodeInfo of the SM's LID: node GUID {:#x}, the local CA's {:#x}",
        ni.node_guid,
        ca.node_guid
    );
    check!(ni.node_type == node_type(f.attached().kind), "{ni:?}");
    check!(ni.base_version == 1 && ni.class_version == 1, "{ni:?}");
    // The shim passes on the length of the MAD as ibsim wrote it.
    check!(r.len == Mad::SIZE, "received {} bytes", r.len);
    check!(
        r.addr.lid == f.sm_lid && r.addr.qpn == 0,
        "from {:?}",
        r.addr
    );
    Ok(Outcome::Passed)
}

fn smp_nodeinfo_of_every_lid_matches_the_subnet(f: &Fabric) -> TestResult {
    let lids = f.lids()?;
    check!(
        lids.len() == f.nodes.len(),
        "OpenSM assigned {} LIDs to {} nodes (one port each: HCAs with one port, switches' port 0)",
        lids.len(),
        f.nodes.len()
    );
    let port = open(f)?;
    let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    let mut nodes: HashMap<u64, u8> = HashMap::new();
    for &(guid, lid) in &lids {
        let (ni, r) = node_info(&agent, lid)?;
        check!(
            ni.port_guid == guid,
            "LID {lid}: port GUID {:#x}, guid2lid says {guid:#x}",
            ni.port_guid
        );
        check!(r.addr.lid == lid, "LID {lid} answered from {:?}", r.addr);
        nodes.insert(ni.node_guid, ni.node_type);
    }
    let switches = nodes.values().filter(|&&t| t == 2).count();
    let cas = nodes.values().filter(|&&t| t == 1).count();
    check!(
        (switches, cas) == (f.switches(), f.hcas()),
        "NodeInfo of every LID: {switches} switches and {cas} CAs; the net file has {} and {}",
        f.switches(),
        f.hcas()
    );
    Ok(Outcome::Passed)
}

fn a_lid_that_does_not_exist_times_out_with_its_tid(f: &Fabric) -> TestResult {
    let lids = f.lids()?;
    let nowhere = lids.iter().map(|&(_, l)| l).max().unwrap_or(0) + 100;
    let port = open(f)?;
    let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    for _ in 0..3 {
        let tid = agent.next_tid();
        let start = Instant::now();
        let r = agent.request(
            &smp(tid, NodeInfo::ID, 0),
            &Address::smi_lid(nowhere),
            TIMEOUT,
            RETRIES,
        );
        let took = start.elapsed();
        match r {
            Err(Error::Timeout { tid: t }) => {
                check!(
                    t as u32 == tid as u32,
                    "timeout of TID {t:#x}, sent {tid:#x}"
                )
            }
            other => fail!("a request to LID {nowhere} (no such port) gave {other:?}"),
        }
        // ibsim answers a MAD it cannot route with a timeout status at once;
        // the wait is bounded by the request's own limit in any case (ten
        // times it here: a loaded host may be slow to run the wait's end).
        check!(
            took <= TIMEOUT * (RETRIES + 1) * 10,
            "the timeout took {took:?}"
        );
    }
    // The agent still works.
    node_info(&agent, f.sm_lid)?;
    Ok(Outcome::Passed)
}

fn sa_request(
    agent: &Agent,
    f: &Fabric,
    method: Method,
    attr: u16,
    fill: impl Fn(&mut Mad),
) -> Res<(u64, Received)> {
    let tid = agent.next_tid();
    let mut mad = Mad::new(&MadHeader::request(
        class::SUBN_ADM,
        SA_VERSION,
        method,
        tid,
        attr,
    ));
    fill(&mut mad);
    let r = agent.request(&mad, &Address::gsi_lid(f.sm_lid), TIMEOUT, RETRIES)?;
    Ok((tid, r))
}

fn sa_class_port_info(f: &Fabric) -> TestResult {
    let port = open(f)?;
    let agent = port.register(&Registration::new(class::SUBN_ADM, SA_VERSION))?;
    let (tid, r) = sa_request(&agent, f, Method::GET, ClassPortInfo::ID, |_| {})?;
    check_response(&r, tid, Method::GET_RESP)?;
    let cpi = r.mad.attribute::<ClassPortInfo>()?;
    check!(
        cpi.base_version == 1 && cpi.class_version == SA_VERSION,
        "SA ClassPortInfo {cpi:?}"
    );
    check!(r.addr.lid == f.sm_lid, "answered from {:?}", r.addr);
    Ok(Outcome::Passed)
}

/// The NodeRecords of an SA response: (LID, NodeInfo, description), whole
/// records only (RMPP is not simulated: a GetTable answer carries what fits
/// in one MAD).
/// A NodeRecord: its LID, its NodeInfo and its NodeDescription.
type NodeRecord = (u16, NodeInfo, String);

fn node_records(r: &Received) -> Res<(SaHeader, Vec<NodeRecord>)> {
    let sa = r.mad.sa_header()?;
    let stride = usize::from(sa.attr_offset) * 8;
    if stride < NODE_RECORD_LEN {
        fail!(
            "AttributeOffset {} (x8 < {NODE_RECORD_LEN})",
            sa.attr_offset
        );
    }
    let data = &r.received_bytes()[SaHeader::DATA_OFFSET.min(r.len)..];
    let mut recs = Vec::new();
    for rec in data.chunks(stride).filter(|c| c.len() >= NODE_RECORD_LEN) {
        let lid = u16::from_be_bytes([rec[0], rec[1]]);
        let ni = NodeInfo::decode(&rec[4..44])?;
        let desc = String::from_utf8_lossy(&rec[44..108])
            .trim_end_matches('\0')
            .to_string();
        recs.push((lid, ni, desc));
    }
    Ok((sa, recs))
}

fn sa_node_records_by_get_table_and_by_lid(f: &Fabric) -> TestResult {
    let port = open(f)?;
    let agent = port.register(&Registration::new(class::SUBN_ADM, SA_VERSION).rmpp(1))?;
    // Every NodeRecord: under the simulator the answer is the first MAD of
    // what OpenSM sends (no RMPP), with at least one whole record.
    let (tid, r) = sa_request(&agent, f, Method::GET_TABLE, NODE_RECORD, |_| {})?;
    check_response(&r, tid, Method::GET_TABLE_RESP)?;
    let (sa, recs) = node_records(&r)?;
    check!(
        !recs.is_empty(),
        "no whole NodeRecord in {} bytes ({sa:?})",
        r.len
    );
    let names: HashSet<&str> = f.nodes.iter().map(|n| n.name.as_str()).collect();
    let lids: HashMap<u16, u64> = f.lids()?.into_iter().map(|(g, l)| (l, g)).collect();
    for (lid, ni, desc) in &recs {
        check!(
            names.contains(desc.as_str()),
            "NodeRecord of {desc:?} (LID {lid}), not a node of the net file"
        );
        check!(
            lids.get(lid) == Some(&ni.port_guid),
            "NodeRecord LID {lid} port GUID {:#x}",
            ni.port_guid
        );
    }
    // By LID (ComponentMask bit 0): the one record of each of a few LIDs,
    // matching what the node itself says in an SMP.
    let smi = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    let mut some: Vec<u16> = lids.keys().copied().collect();
    some.sort_unstable();
    some.truncate(3);
    if let Some(&last) = lids.keys().max() {
        some.push(last);
    }
    for lid in some {
        let (tid, r) = sa_request(&agent, f, Method::GET, NODE_RECORD, |m| {
            let mut sa = m.sa_header().unwrap_or_default();
            sa.comp_mask = 1;
            let _ = m.set_sa_header(&sa);
            m.as_bytes_mut()[SaHeader::DATA_OFFSET..SaHeader::DATA_OFFSET + 2]
                .copy_from_slice(&lid.to_be_bytes());
        })?;
        check_response(&r, tid, Method::GET_RESP)?;
        let (_, recs) = node_records(&r)?;
        let Some((rl, ni, desc)) = recs.first() else {
            fail!("no NodeRecord for LID {lid}");
        };
        let (smp, _) = node_info(&smi, lid)?;
        check!(*rl == lid, "NodeRecord of LID {rl} for LID {lid}");
        check!(
            ni.node_guid == smp.node_guid && ni.port_guid == smp.port_guid,
            "SA NodeRecord {ni:?} of {desc:?}, SMP NodeInfo {smp:?}"
        );
    }
    Ok(Outcome::Passed)
}

fn a_mad_longer_than_256_bytes_is_sent_whole_by_an_rmpp_agent(f: &Fabric) -> TestResult {
    let port = open(f)?;
    // Not an RMPP agent: refused before the write, with the reason.
    let plain = port.register(&Registration::new(class::SUBN_ADM, SA_VERSION))?;
    let tid = plain.next_tid();
    let mut long = Mad::new(&MadHeader::request(
        class::SUBN_ADM,
        SA_VERSION,
        Method::GET,
        tid,
        ClassPortInfo::ID,
    ))
    .as_bytes()
    .to_vec();
    long.resize(600, 0);
    let long_mad = Mad::decode(&long)?;
    match plain.request(&long_mad, &Address::gsi_lid(f.sm_lid), TIMEOUT, RETRIES) {
        Err(Error::MadTooLong { len: 600, .. }) => {}
        other => fail!("a 600-byte MAD on an agent without RMPP gave {other:?}"),
    }
    drop(plain);
    // An RMPP agent writes it whole; umad2sim passes on its first 256 bytes
    // (RMPP is not simulated), a whole SA Get, which OpenSM answers.
    let agent = port.register(&Registration::new(class::SUBN_ADM, SA_VERSION).rmpp(1))?;
    let tid = agent.next_tid();
    let mut m = long_mad.clone();
    m.set_tid(tid);
    let r = agent.request(&m, &Address::gsi_lid(f.sm_lid), TIMEOUT, RETRIES)?;
    check_response(&r, tid, Method::GET_RESP)?;
    r.mad.attribute::<ClassPortInfo>()?;
    Ok(Outcome::Passed)
}

fn perf_get(agent: &Agent, lid: u16, attr: u16, port_select: u8) -> Res<Received> {
    let tid = agent.next_tid();
    let mut m = Mad::new(&MadHeader::request(
        class::PERF_MGT,
        1,
        Method::GET,
        tid,
        attr,
    ));
    if attr == PortCounters::ID {
        // PortSelect is the data's second byte.
        m.data_mut()[1] = port_select;
    }
    let r = agent.request(&m, &Address::gsi_lid(lid), TIMEOUT, RETRIES)?;
    check_response(&r, tid, Method::GET_RESP)?;
    Ok(r)
}

fn perf_port_counters_and_class_port_info(f: &Fabric) -> TestResult {
    let lids = f.lids()?;
    let port = open(f)?;
    let pma = port.register(&Registration::new(class::PERF_MGT, 1))?;
    let smi = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    // The SM's node and the farthest LID.
    let far = lids.iter().map(|&(_, l)| l).max().unwrap_or(f.sm_lid);
    for lid in [f.sm_lid, far] {
        let (ni, _) = node_info(&smi, lid)?;
        let cpi = perf_get(&pma, lid, ClassPortInfo::ID, 0)?
            .mad
            .attribute::<ClassPortInfo>()?;
        // AllPortSelect (bit 8) on switches only, in ibsim's PMA.
        let all_ports = cpi.capability_mask & 0x100 != 0;
        check!(
            all_ports == (ni.node_type == 2),
            "PerfMgt ClassPortInfo of LID {lid} ({ni:?}): {cpi:?}"
        );
        let sel = 1;
        let first = perf_get(&pma, lid, PortCounters::ID, sel)?
            .mad
            .attribute::<PortCounters>()?;
        check!(
            first.port_select == sel,
            "PortCounters of port {}, asked {sel}",
            first.port_select
        );
        // Traffic through the port in between: counters only grow.
        for _ in 0..5 {
            node_info(&smi, lid)?;
        }
        let second = perf_get(&pma, lid, PortCounters::ID, sel)?
            .mad
            .attribute::<PortCounters>()?;
        check!(
            second.port_xmit_pkts >= first.port_xmit_pkts
                && second.port_rcv_pkts >= first.port_rcv_pkts,
            "LID {lid}: counters went back: {first:?} then {second:?}"
        );
    }
    Ok(Outcome::Passed)
}

fn many_requests_in_flight_are_matched_by_tid(f: &Fabric) -> TestResult {
    let lids = f.lids()?;
    let port = open(f)?;
    let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    // 64 requests sent before any response is read, to every LID in turn.
    let mut sent: HashMap<u32, u64> = HashMap::new();
    for i in 0..64 {
        let (guid, lid) = lids[i % lids.len()];
        let tid = agent.next_tid();
        agent.send_request(
            &smp(tid, NodeInfo::ID, 0),
            &Address::smi_lid(lid),
            Duration::from_secs(2),
            0,
        )?;
        sent.insert(tid as u32, guid);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sent.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let r = match agent.recv(Some(left)) {
            Ok(r) => r,
            Err(e) => fail!("{} responses missing ({e})", sent.len()),
        };
        check!(
            r.status == 0,
            "umad status {} for TID {:#x}",
            r.status,
            r.tid()
        );
        let Some(guid) = sent.remove(&(r.tid() as u32)) else {
            fail!(
                "a response with TID {:#x}, which no request in flight has",
                r.tid()
            );
        };
        let ni = r.mad.attribute::<NodeInfo>()?;
        check!(
            ni.port_guid == guid,
            "TID {:#x}: NodeInfo of {:#x}, sent to {guid:#x}",
            r.tid(),
            ni.port_guid
        );
    }
    // Nothing else comes.
    check!(
        matches!(
            agent.recv(Some(Duration::from_millis(200))),
            Err(Error::RecvTimeout(_))
        ),
        "a MAD after every response"
    );
    Ok(Outcome::Passed)
}

/// A `struct ib_user_mad` header (with P_Key support) for a raw write:
/// agent ID, no timeout, the length, and a LID-routed QP0 address.
fn umad_header(agent: u32, len: usize, lid: u16) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[0..4].copy_from_slice(&agent.to_ne_bytes());
    h[16..20].copy_from_slice(&(len as u32).to_ne_bytes());
    // ib_mad_addr at 20: qpn 0, qkey 0, lid (big-endian) at 28.
    h[28..30].copy_from_slice(&lid.to_be_bytes());
    h
}

fn a_short_mad_is_received_with_its_length(f: &Fabric) -> TestResult {
    use std::os::fd::AsRawFd;
    let port = open(f)?;
    let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    // The crate writes whole MADs; a raw write of 100 bytes is what a C
    // sender may do, and umad2sim passes the length on to the answer.
    const SHORT: usize = 100;
    let tid = agent.next_tid();
    let mad = smp(tid, NodeInfo::ID, 0);
    let mut b = umad_header(agent.id(), SHORT, f.sm_lid).to_vec();
    b.extend_from_slice(&mad.as_bytes()[..SHORT]);
    // SAFETY: `b` is readable for its length; the fd is the port's, open.
    let n = unsafe { libc::write(port.as_raw_fd(), b.as_ptr().cast(), b.len()) };
    check!(
        n == b.len() as isize,
        "raw write of {} bytes returned {n}",
        b.len()
    );
    let r = agent.recv(Some(Duration::from_secs(5)))?;
    check!(
        r.tid() as u32 == tid as u32,
        "TID {:#x} for {tid:#x}",
        r.tid()
    );
    check!(r.mad.method() == Method::GET_RESP, "{:?}", r.mad.header());
    check!(
        r.len == SHORT,
        "received {} bytes of a {SHORT}-byte answer",
        r.len
    );
    check!(
        r.received_bytes().len() == SHORT && r.mad.len() == Mad::SIZE,
        "received_bytes {}, MAD {}",
        r.received_bytes().len(),
        r.mad.len()
    );
    // What came is the answer's first 100 bytes: NodeInfo's first 36, and
    // the padding after them is zeros, not what the shim's buffer held.
    let full = node_info(&agent, f.sm_lid)?.1;
    check!(
        r.received_bytes()[64..] == full.mad.as_bytes()[64..SHORT],
        "the first 36 bytes of NodeInfo differ from a whole answer's"
    );
    check!(
        r.mad.as_bytes()[SHORT..].iter().all(|&x| x == 0),
        "padding not zero"
    );
    Ok(Outcome::Passed)
}

fn ports_closed_and_opened_again_past_the_shims_fd_slots(f: &Fabric) -> TestResult {
    // umad2sim has 8 fds per CA: every close must give its fd back.
    for round in 0..12 {
        let port = open(f)?;
        let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
        node_info(&agent, f.sm_lid).map_err(|e| format!("round {round}: {e}"))?;
        drop(agent);
        drop(port);
    }
    // A port whose agent is gone answers nothing for it, and a new agent of
    // the same class on a new port works.
    let port = open(f)?;
    let agent = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    drop(agent);
    check!(port.try_recv()?.is_none(), "a MAD for no agent");
    let again = open(f)?;
    let agent = again.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
    node_info(&agent, f.sm_lid)?;
    Ok(Outcome::Passed)
}

fn async_port_requests_in_flight_smp_sa_and_timeout(f: &Fabric) -> TestResult {
    let lids = f.lids()?;
    let nowhere = lids.iter().map(|&(_, l)| l).max().unwrap_or(0) + 100;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let sm_lid = f.sm_lid;
    let r: Res<()> = rt.block_on(async move {
        let port = AsyncPort::new(open(f)?)?;
        let smi =
            std::sync::Arc::new(port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?);
        let sa = port.register(&Registration::new(class::SUBN_ADM, SA_VERSION))?;
        // 48 SMPs in flight from as many tasks.
        let mut tasks = Vec::new();
        for i in 0..48 {
            let (guid, lid) = lids[i % lids.len()];
            let smi = smi.clone();
            tasks.push(tokio::spawn(async move {
                let tid = smi.agent().next_tid();
                let r = smi
                    .request(
                        &smp(tid, NodeInfo::ID, 0),
                        &Address::smi_lid(lid),
                        TIMEOUT,
                        RETRIES,
                    )
                    .await?;
                let ni = r.mad.attribute::<NodeInfo>()?;
                if r.tid() as u32 != tid as u32 || ni.port_guid != guid {
                    return Err(
                        format!("TID {tid:#x} to LID {lid}: {:#x} with {ni:?}", r.tid()).into(),
                    );
                }
                Ok::<_, Box<dyn StdError + Send + Sync>>(())
            }));
        }
        for t in tasks {
            t.await?.map_err(|e| e.to_string())?;
        }
        // The SA on the same port.
        let tid = sa.agent().next_tid();
        let m = Mad::new(&MadHeader::request(
            class::SUBN_ADM,
            SA_VERSION,
            Method::GET,
            tid,
            ClassPortInfo::ID,
        ));
        let r = sa
            .request(&m, &Address::gsi_lid(sm_lid), TIMEOUT, RETRIES)
            .await?;
        check_response(&r, tid, Method::GET_RESP)?;
        // A LID that does not exist: the typed timeout.
        let tid = smi.agent().next_tid();
        match smi
            .request(
                &smp(tid, NodeInfo::ID, 0),
                &Address::smi_lid(nowhere),
                TIMEOUT,
                RETRIES,
            )
            .await
        {
            Err(Error::Timeout { tid: t }) if t as u32 == tid as u32 => {}
            other => return Err(format!("async request to LID {nowhere} gave {other:?}").into()),
        }
        drop((smi, sa, port));
        // Dropping the last handle closes the port at once (umad2sim has 8
        // fds per CA: more rounds than that need each one given back).
        for round in 0..10 {
            let port = AsyncPort::new(open(f)?)?;
            let smi = port.register(&Registration::new(class::SUBN_LID_ROUTED, 1))?;
            let tid = smi.agent().next_tid();
            smi.request(
                &smp(tid, NodeInfo::ID, 0),
                &Address::smi_lid(sm_lid),
                TIMEOUT,
                RETRIES,
            )
            .await
            .map_err(|e| format!("round {round}: {e}"))?;
        }
        Ok(())
    });
    r?;
    Ok(Outcome::Passed)
}
