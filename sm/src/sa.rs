//! The subnet administrator's server (the SA client is `rdma::umad::sa`,
//! the records' codec `rdma::mad::sa`): records of the swept subnet, matched by
//! component mask, and multicast groups joined and left through it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::subnet::{NodeId, NodeKind};
use rdma::mad::sa::{
    self as records, InformInfo, InformInfoRecord, JoinState, LinkRecord, Matcher, McMemberRecord,
    McMemberRecordMask, NodeRecord, PathRecord, PathRecordMask, PortInfoRecord, PortInfoRecordMask,
    SaRecord, SaStatusCode, Selector,
};
use rdma::mad::{
    attr_id, ClassPortInfo, Mad, MadHeader, Method, NodeDescription, PortInfo, Status,
};
use rdma::umad::{AgentView, Received};
use rdma::Gid;

use crate::groups::{Group, DEFAULT_PKEY, PACKET_LIFE};
use crate::rate::{rate_code, rate_tenths};
use crate::state::{lock_r, lock_w, Subnet, SUBNET_PREFIX};

/// The SA's handler ([`AsyncPort::register_responder`]): answers each
/// request, on the port's reader, from the state of the last sweep, and
/// wakes `mcast` after a join or leave changed the groups.
///
/// [`AsyncPort::register_responder`]: rdma::umad::AsyncPort::register_responder
pub fn responder(
    subnet: Arc<RwLock<Subnet>>,
    mcast: Arc<tokio::sync::Notify>,
) -> impl Fn(&AgentView, Received) + Send + Sync + 'static {
    move |agent, req| {
        let resp = answer(&req, &subnet);
        let h = req.mad.header();
        if h.attr_id == records::attr_id::MC_MEMBER_RECORD
            && matches!(h.method, Method::SET | Method::DELETE)
            && resp.as_ref().is_some_and(|r| r.status().is_ok())
        {
            mcast.notify_one();
        }
        if let Some(resp) = resp {
            if agent.respond(&req, &resp).is_err() {
                // A table longer than the transport takes: what fits.
                let _ = agent.respond(&req, &first_mad(&resp));
            }
        }
    }
}

/// The first 256 bytes of a long GetTable answer, its RMPP header saying
/// they are the whole of it.
fn first_mad(resp: &Mad) -> Mad {
    let Ok(mut sa) = resp.sa_header() else {
        return resp.clone();
    };
    let stride = usize::from(sa.attr_offset) * 8;
    let fit = (Mad::SIZE - 56).checked_div(stride).unwrap_or(0);
    sa.rmpp.data2 = 20 + (fit * stride) as u32;
    let mut m = Mad::decode(&resp.as_bytes()[..Mad::SIZE]).unwrap_or_else(|_| resp.clone());
    let _ = m.set_sa_header(&sa);
    let keep = 56 + fit * stride;
    for b in &mut m.as_bytes_mut()[keep..] {
        *b = 0;
    }
    m
}

fn error(req: &Mad, code: SaStatusCode) -> Mad {
    let mut r = req.response();
    let h = r.header();
    r.set_header(&MadHeader {
        status: code.status(),
        ..h
    });
    r
}

fn general_error(req: &Mad, status: Status) -> Mad {
    let mut r = req.response();
    let h = r.header();
    r.set_header(&MadHeader { status, ..h });
    r
}

/// The answer to one request, if it is one the SA answers.
fn answer(req: &Received, subnet: &RwLock<Subnet>) -> Option<Mad> {
    let m = &req.mad;
    let h = m.header();
    if h.method.is_response() {
        return None;
    }
    let sa = match m.sa_header() {
        Ok(sa) => sa,
        Err(_) => {
            return Some(general_error(
                m,
                Status::new(false, false, rdma::mad::InvalidField::BadVersion, 0),
            ))
        }
    };
    let mask = sa.comp_mask;
    let r = match (h.attr_id, h.method) {
        (attr_id::CLASS_PORT_INFO, Method::GET) => {
            let mut r = m.response();
            // What this SA serves: joins and leaves, and PortInfoRecord's
            // bitwise capability matches. Not MultiPathRecord (GetMulti)
            // nor TraceRecord, not Get/Set of Notice.
            let cpi = ClassPortInfo {
                base_version: 1,
                class_version: 2,
                capability_mask: records::cap::UD_MULTICAST
                    | records::cap::PORT_INFO_CAP_MASK_MATCH,
                capability_mask2: records::cap2::PORT_INFO_CAP_MASK2_MATCH,
                resp_time_value: 18,
                ..ClassPortInfo::default()
            };
            let _ = r.set_attribute(&cpi);
            r
        }
        (records::attr_id::NODE_RECORD, Method::GET | Method::GET_TABLE) => {
            let q = m.attribute::<NodeRecord>().ok()?;
            match matching(&q, mask, node_records(&lock_r(subnet))) {
                Ok(hits) => reply(m, h.method, hits),
                Err(code) => error(m, code),
            }
        }
        (records::attr_id::PORT_INFO_RECORD, Method::GET | Method::GET_TABLE) => {
            let q = m.attribute::<PortInfoRecord>().ok()?;
            let bitwise_caps = h.attr_mod & 1 << 31 != 0;
            match port_info_matching(&q, mask, bitwise_caps, port_info_records(&lock_r(subnet))) {
                Ok(hits) => reply(m, h.method, hits),
                Err(code) => error(m, code),
            }
        }
        (records::attr_id::LINK_RECORD, Method::GET | Method::GET_TABLE) => {
            let q = m.attribute::<LinkRecord>().ok()?;
            match matching(&q, mask, link_records(&lock_r(subnet))) {
                Ok(hits) => reply(m, h.method, hits),
                Err(code) => error(m, code),
            }
        }
        (records::attr_id::PATH_RECORD, Method::GET | Method::GET_TABLE) => {
            let q = m.attribute::<PathRecord>().ok()?;
            let hits = path_records(
                &lock_r(subnet),
                &q,
                PathRecordMask::from_bits_truncate(mask),
                req.addr.lid,
            );
            reply(m, h.method, hits)
        }
        (records::attr_id::MC_MEMBER_RECORD, Method::GET | Method::GET_TABLE) => {
            let q = m.attribute::<McMemberRecord>().ok()?;
            let all = member_records(
                &lock_r(subnet),
                McMemberRecordMask::from_bits_truncate(mask),
            );
            match matching(&q, mask, all) {
                Ok(hits) => reply(m, h.method, hits),
                Err(code) => error(m, code),
            }
        }
        (records::attr_id::INFORM_INFO, Method::SET) => {
            let q = m.attribute::<InformInfo>().ok()?;
            let same = |(lid, i): &(u16, InformInfo)| {
                *lid == req.addr.lid
                    && i.trap_number == q.trap_number
                    && i.is_generic == q.is_generic
            };
            let mut s = lock_w(subnet);
            let subs = &mut s.groups.subscriptions;
            let known = subs.iter().position(same);
            match (q.subscribe, known) {
                (true, None) => subs.push((req.addr.lid, q)),
                (true, Some(i)) => subs[i].1 = q,
                (false, Some(i)) => {
                    subs.remove(i);
                }
                (false, None) => return Some(error(m, SaStatusCode::ReqInvalid)),
            }
            // The answer is a copy of the request (o13-12.1.1).
            let mut r = m.response();
            let _ = r.set_attribute(&q);
            r
        }
        (records::attr_id::INFORM_INFO_RECORD, Method::GET | Method::GET_TABLE) => {
            let q = m.attribute::<InformInfoRecord>().ok()?;
            match matching(&q, mask, inform_info_records(&lock_r(subnet))) {
                Ok(hits) => reply(m, h.method, hits),
                Err(code) => error(m, code),
            }
        }
        (records::attr_id::MC_MEMBER_RECORD, Method::SET | Method::DELETE) => {
            let q = m.attribute::<McMemberRecord>().ok()?;
            let mk = McMemberRecordMask::from_bits_truncate(mask);
            let mut s = lock_w(subnet);
            let r = if h.method == Method::SET {
                join(&mut s, &q, mk)
            } else {
                leave(&mut s, &q, mk)
            };
            match r {
                Ok(rec) => record_response(m, &rec),
                Err(code) => error(m, code),
            }
        }
        _ => general_error(
            m,
            Status::new(
                false,
                false,
                rdma::mad::InvalidField::MethodAttributeNotSupported,
                0,
            ),
        ),
    };
    Some(r)
}

/// The response to `req` carrying `rec`, with the SA header's
/// AttributeOffset set as in a table (OpenSM's answers carry it too).
fn record_response<R: SaRecord>(req: &Mad, rec: &R) -> Mad {
    let mut r = req.response();
    let sa = r.sa_header().map(|h| records::SaHeader {
        attr_offset: R::ATTR_OFFSET,
        sm_key: 0,
        ..h
    });
    match sa.map(|h| r.set_sa_header(&h)) {
        Ok(Ok(())) if r.set_attribute(rec).is_ok() => r,
        _ => error(req, SaStatusCode::NoResources),
    }
}

/// A Get's one record (none: ERR_NO_RECORDS; more: ERR_TOO_MANY_RECORDS)
/// or a GetTable's records.
fn reply<R: SaRecord>(req: &Mad, method: Method, hits: Vec<R>) -> Mad {
    if method == Method::GET {
        return match hits.as_slice() {
            [one] => record_response(req, one),
            [] => error(req, SaStatusCode::NoRecords),
            _ => error(req, SaStatusCode::TooManyRecords),
        };
    }
    records::table_response(req, &hits).unwrap_or_else(|_| error(req, SaStatusCode::NoResources))
}

/// The LID of the end port of `id` that `port` belongs to (a switch's
/// port 0 LID for every port of it).
fn base_lid(s: &Subnet, id: NodeId, port: u8) -> Option<u16> {
    match s.topo.node(id).kind {
        NodeKind::Switch => s.lids.of(&s.topo, id, 0),
        _ => s.lids.of(&s.topo, id, port),
    }
}

fn node_records(s: &Subnet) -> Vec<NodeRecord> {
    let mut v = Vec::new();
    for (id, n) in s.topo.nodes() {
        let Some(ni) = s.node_info.get(&id) else {
            continue;
        };
        for p in n.end_ports() {
            let Some(lid) = s.lids.of(&s.topo, id, p) else {
                continue;
            };
            let mut ni = *ni;
            ni.port_guid = n.port_guid(p);
            if n.kind != NodeKind::Switch {
                ni.local_port_num = p;
            }
            v.push(NodeRecord {
                lid,
                node_info: ni,
                node_description: NodeDescription::new(&n.description)
                    .unwrap_or(NodeDescription([0; 64])),
            });
        }
    }
    v.sort_by_key(|r| r.lid);
    v
}

/// The records of `all` whose components selected by ComponentMask `mask`
/// equal the query's, bit for bit (every component of the record's table;
/// mask bits past it are ignored; an empty mask keeps them all). A query
/// that does not encode is invalid.
fn matching<R: SaRecord>(q: &R, mask: u64, all: Vec<R>) -> Result<Vec<R>, SaStatusCode> {
    let m = Matcher::with_comp_mask(q, mask).map_err(|_| SaStatusCode::ReqInvalid)?;
    Ok(all.into_iter().filter(|c| m.matches(c)).collect())
}

/// [`matching`] for PortInfoRecords, but for two components that are not
/// compared bit for bit: Options is how the query asks to be answered
/// (records carry 0), not a value to match; and with `bitwise_caps` (the
/// request's AttributeModifier bit 31, the enhanced ComponentMask of the
/// IBA 1.2 errata that OpenSM follows) CapabilityMask and CapabilityMask2
/// match a record that has every bit the query's has set.
fn port_info_matching(
    q: &PortInfoRecord,
    mask: u64,
    bitwise_caps: bool,
    all: Vec<PortInfoRecord>,
) -> Result<Vec<PortInfoRecord>, SaStatusCode> {
    let mut exact = PortInfoRecordMask::from_bits_retain(mask) - PortInfoRecordMask::OPTIONS;
    let caps = exact & (PortInfoRecordMask::CAPABILITY_MASK | PortInfoRecordMask::CAPABILITY_MASK2);
    if bitwise_caps {
        exact -= caps;
    }
    let (cm, cm2) = (q.port_info.capability_mask, q.port_info.capability_mask2);
    let hits = matching(q, exact.bits(), all)?;
    Ok(hits
        .into_iter()
        .filter(|c| {
            let pi = &c.port_info;
            !bitwise_caps
                || (!caps.contains(PortInfoRecordMask::CAPABILITY_MASK)
                    || pi.capability_mask & cm == cm)
                    && (!caps.contains(PortInfoRecordMask::CAPABILITY_MASK2)
                        || pi.capability_mask2 & cm2 == cm2)
        })
        .collect())
}

fn port_info_records(s: &Subnet) -> Vec<PortInfoRecord> {
    let mut v: Vec<_> = s
        .port_info
        .iter()
        .filter_map(|(&(id, p), pi)| {
            Some(PortInfoRecord {
                endport_lid: base_lid(s, id, p)?,
                port_num: p,
                options: 0,
                port_info: *pi,
            })
        })
        .collect();
    v.sort_by_key(|r| (r.endport_lid, r.port_num));
    v
}

fn link_records(s: &Subnet) -> Vec<LinkRecord> {
    let mut v = Vec::new();
    for (id, n) in s.topo.nodes() {
        for p in 1..=n.num_ports {
            let Some(peer) = s.topo.peer(id, p) else {
                continue;
            };
            let (Some(from), Some(to)) = (base_lid(s, id, p), base_lid(s, peer.node, peer.port))
            else {
                continue;
            };
            v.push(LinkRecord {
                from_lid: from,
                from_port: p,
                to_port: peer.port,
                to_lid: to,
            });
        }
    }
    v.sort_by_key(|r| (r.from_lid, r.from_port));
    v
}

/// The subscriptions as InformInfoRecords: each subscriber's port GID
/// (of its LID; none for a LID no longer swept), Enum 0, and QPN 0 (the SA
/// shows the subscriber's QPN to trusted requests only, C15-0.2-1.16, and
/// this SA trusts none).
fn inform_info_records(s: &Subnet) -> Vec<InformInfoRecord> {
    s.groups
        .subscriptions
        .iter()
        .filter_map(|&(lid, inform_info)| {
            let (_, _, guid) = end_port(s, lid)?;
            Some(InformInfoRecord {
                subscriber_gid: Gid::from_parts(SUBNET_PREFIX, guid),
                enumeration: 0,
                inform_info: InformInfo {
                    qpn: 0,
                    ..inform_info
                },
            })
        })
        .collect()
}

/// The end port of `lid`.
fn end_port(s: &Subnet, lid: u16) -> Option<(NodeId, u8, u64)> {
    s.end_ports.get(&lid).copied()
}

fn end_port_by_gid(s: &Subnet, gid: Gid) -> Option<u16> {
    if gid.subnet_prefix() != SUBNET_PREFIX {
        return None;
    }
    s.lids.get(gid.interface_id())
}

/// The path from end port `slid` to `dlid`: its MTU and rate the least of
/// the ports on the way, both ends of every link (the destination's port
/// included), `None` if it is not routed.
fn path(s: &Subnet, slid: u16, dlid: u16) -> Option<PathRecord> {
    let (sn, sp, sguid) = end_port(s, slid)?;
    let (_, _, dguid) = end_port(s, dlid)?;
    let mut ports: Vec<&PortInfo> = Vec::new();
    // A link's two ends; the far one where the sweep read it.
    fn link<'a>(s: &'a Subnet, ports: &mut Vec<&'a PortInfo>, node: NodeId, p: u8) -> Option<()> {
        ports.push(s.port_info.get(&(node, p))?);
        if let Some(peer) = s.topo.peer(node, p) {
            ports.extend(s.port_info.get(&(peer.node, peer.port)));
        }
        Some(())
    }
    let at = match s.topo.node(sn).kind {
        NodeKind::Switch => Some(sn),
        _ => {
            if slid == dlid {
                ports.push(s.port_info.get(&(sn, sp))?);
                None
            } else {
                link(s, &mut ports, sn, sp)?;
                let peer = s.topo.peer(sn, sp)?;
                (s.topo.node(peer.node).kind == NodeKind::Switch).then_some(peer.node)
            }
        }
    };
    if let Some(sw) = at {
        for (node, p) in s.routes.trace(&s.topo, sw, dlid)? {
            if p != 0 {
                link(s, &mut ports, node, p)?;
            }
        }
    }
    let links: Vec<&&PortInfo> = ports
        .iter()
        .filter(|p| u8::from(p.link_width_active) != 0)
        .collect();
    let mtu = ports
        .iter()
        .map(|p| p.mtu_cap)
        .filter(|&m| m != 0)
        .min()
        .unwrap_or(4);
    let rate = links
        .iter()
        .map(|p| rate_code(p))
        .min_by_key(|&c| rate_tenths(c))
        .unwrap_or(3);
    Some(PathRecord {
        dgid: Gid::from_parts(SUBNET_PREFIX, dguid),
        sgid: Gid::from_parts(SUBNET_PREFIX, sguid),
        dlid,
        slid,
        reversible: true,
        numb_path: 0,
        pkey: DEFAULT_PKEY,
        sl: 0,
        mtu_selector: Selector::Exactly,
        mtu,
        rate_selector: Selector::Exactly,
        rate,
        packet_life_time_selector: Selector::Exactly,
        packet_life_time: PACKET_LIFE,
        ..PathRecord::default()
    })
}

fn path_records(s: &Subnet, q: &PathRecord, m: PathRecordMask, requester: u16) -> Vec<PathRecord> {
    let sources: Vec<u16> = if m.contains(PathRecordMask::SLID) {
        vec![q.slid]
    } else if m.contains(PathRecordMask::SGID) {
        end_port_by_gid(s, q.sgid).into_iter().collect()
    } else {
        vec![requester]
    };
    let dests: Vec<u16> = if m.contains(PathRecordMask::DLID) {
        vec![q.dlid]
    } else if m.contains(PathRecordMask::DGID) {
        end_port_by_gid(s, q.dgid).into_iter().collect()
    } else {
        s.sorted_lids.clone()
    };
    let mut v = Vec::new();
    for &sl in &sources {
        for &dl in &dests {
            let Some(mut p) = path(s, sl, dl) else {
                continue;
            };
            if m.contains(PathRecordMask::PKEY) && q.pkey & 0x7fff != DEFAULT_PKEY & 0x7fff {
                continue;
            }
            if m.contains(PathRecordMask::SL) && q.sl != 0 {
                continue;
            }
            if !selected(m, q, &p) {
                continue;
            }
            if m.contains(PathRecordMask::SERVICE_ID) {
                p.service_id = q.service_id;
            }
            v.push(p);
        }
    }
    v
}

/// Whether path `p` meets the query's MTU, rate and packet lifetime, each
/// where the mask has it: greater than, less than or exactly the query's
/// value by its selector (exactly when the mask has no selector), or the
/// best there is (this path's: the only one between its ports).
fn selected(m: PathRecordMask, q: &PathRecord, p: &PathRecord) -> bool {
    let meets =
        |value: PathRecordMask, selector: PathRecordMask, sel: Selector, have: u32, want: u32| {
            if !m.contains(value) {
                return true;
            }
            match if m.contains(selector) {
                sel
            } else {
                Selector::Exactly
            } {
                Selector::GreaterThan => have > want,
                Selector::LessThan => have < want,
                Selector::Exactly => have == want,
                Selector::Best => true,
            }
        };
    meets(
        PathRecordMask::MTU,
        PathRecordMask::MTU_SELECTOR,
        q.mtu_selector,
        u32::from(p.mtu),
        u32::from(q.mtu),
    ) && meets(
        PathRecordMask::RATE,
        PathRecordMask::RATE_SELECTOR,
        q.rate_selector,
        rate_tenths(p.rate),
        rate_tenths(q.rate),
    ) && meets(
        PathRecordMask::PACKET_LIFE_TIME,
        PathRecordMask::PACKET_LIFE_TIME_SELECTOR,
        q.packet_life_time_selector,
        u32::from(p.packet_life_time),
        u32::from(q.packet_life_time),
    )
}

/// The candidates of an MCMemberRecord query: a record per member of each
/// group, and a group with no members as its own record unless the query
/// asks for a port. The query's components select among them.
fn member_records(s: &Subnet, m: McMemberRecordMask) -> Vec<McMemberRecord> {
    let mut v = Vec::new();
    for g in s.groups.by_mgid.values() {
        if g.members.is_empty() && !m.contains(McMemberRecordMask::PORT_GID) {
            v.push(g.rec);
        }
        for (gid, js) in &g.members {
            v.push(McMemberRecord {
                port_gid: Gid(*gid),
                join_state: *js,
                ..g.rec
            });
        }
    }
    v
}

/// The rate of the port with GID `gid`, in tenths of Gb/s.
fn port_rate(s: &Subnet, gid: Gid) -> Option<u32> {
    let lid = end_port_by_gid(s, gid)?;
    let (id, p, _) = end_port(s, lid)?;
    let pi = s.port_info.get(&(id, p))?;
    Some(rate_tenths(rate_code(pi)))
}

fn join(
    s: &mut Subnet,
    q: &McMemberRecord,
    m: McMemberRecordMask,
) -> Result<McMemberRecord, SaStatusCode> {
    let need =
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE;
    if !m.contains(McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE) {
        return Err(SaStatusCode::ReqInsufficientComponents);
    }
    if q.join_state.is_empty() {
        return Err(SaStatusCode::ReqInvalid);
    }
    let Some(rate) = port_rate(s, q.port_gid) else {
        return Err(SaStatusCode::ReqInvalidGid);
    };
    let zero = q.mgid.0 == [0; 16] || !m.contains(McMemberRecordMask::MGID);
    if !zero {
        if let Some(g) = s.groups.by_mgid.get_mut(&q.mgid.0) {
            if rate < rate_tenths(g.rec.rate) {
                return Err(SaStatusCode::ReqInvalid);
            }
            let js = g.members.entry(q.port_gid.0).or_insert(JoinState::empty());
            *js |= q.join_state;
            return Ok(McMemberRecord {
                port_gid: q.port_gid,
                join_state: *js,
                ..g.rec
            });
        }
    }
    // A new group: the creator names its parameters.
    let create = McMemberRecordMask::QKEY
        | McMemberRecordMask::PKEY
        | McMemberRecordMask::SL
        | McMemberRecordMask::FLOW_LABEL
        | McMemberRecordMask::TCLASS;
    if !m.contains(create) || !m.contains(need - McMemberRecordMask::MGID) {
        return Err(SaStatusCode::ReqInsufficientComponents);
    }
    if !q.join_state.contains(JoinState::FULL_MEMBER) {
        return Err(SaStatusCode::ReqInvalid);
    }
    let Some(mlid) = s.groups.free_mlid() else {
        return Err(SaStatusCode::NoResources);
    };
    let mgid = if zero {
        // The SA's own MGID, named after the group's MLID (which no other
        // group holds); a client that took the same MGID for a group of
        // its own leaves this request without one.
        let mut g = [
            0xff, 0x12, 0xa0, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        g[14..].copy_from_slice(&mlid.to_be_bytes());
        if s.groups.by_mgid.contains_key(&g) {
            return Err(SaStatusCode::NoResources);
        }
        g
    } else {
        q.mgid.0
    };
    let rec = McMemberRecord {
        mgid: Gid(mgid),
        port_gid: Gid::default(),
        mlid,
        mtu_selector: Selector::Exactly,
        mtu: if m.contains(McMemberRecordMask::MTU) {
            q.mtu
        } else {
            4
        },
        rate_selector: Selector::Exactly,
        rate: if m.contains(McMemberRecordMask::RATE) {
            q.rate
        } else {
            3
        },
        packet_life_time_selector: Selector::Exactly,
        packet_life_time: PACKET_LIFE,
        join_state: JoinState::empty(),
        proxy_join: false,
        scope: if m.contains(McMemberRecordMask::SCOPE) {
            q.scope
        } else {
            2
        },
        ..*q
    };
    let mut members = BTreeMap::new();
    members.insert(q.port_gid.0, q.join_state);
    s.groups.by_mgid.insert(
        mgid,
        Group {
            rec,
            members,
            permanent: false,
        },
    );
    Ok(McMemberRecord {
        port_gid: q.port_gid,
        join_state: q.join_state,
        ..rec
    })
}

fn leave(
    s: &mut Subnet,
    q: &McMemberRecord,
    m: McMemberRecordMask,
) -> Result<McMemberRecord, SaStatusCode> {
    if !m.contains(
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE,
    ) {
        return Err(SaStatusCode::ReqInsufficientComponents);
    }
    let Some(g) = s.groups.by_mgid.get_mut(&q.mgid.0) else {
        return Err(SaStatusCode::ReqInvalid);
    };
    let Some(js) = g.members.get_mut(&q.port_gid.0) else {
        return Err(SaStatusCode::ReqInvalid);
    };
    *js -= q.join_state;
    let left = *js;
    let rec = McMemberRecord {
        port_gid: q.port_gid,
        join_state: q.join_state,
        ..g.rec
    };
    if left.is_empty() {
        g.members.remove(&q.port_gid.0);
    }
    let full_left = g
        .members
        .values()
        .any(|j| j.contains(JoinState::FULL_MEMBER));
    if !full_left && !g.permanent {
        s.groups.by_mgid.remove(&q.mgid.0);
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subnet of `n` CAs on one switch, each with one port and a LID, as
    /// a sweep leaves it; the GIDs of the CAs' ports.
    fn subnet_of_cas(n: u8) -> (Subnet, Vec<Gid>) {
        let mut s = Subnet::default();
        let switch = s.topo.add_node(0x10, NodeKind::Switch, n);
        let ids: Vec<NodeId> = (1..=n)
            .map(|i| {
                let ca = s.topo.add_node(0x1000 * u64::from(i), NodeKind::Ca, 1);
                s.topo.link(switch, i, ca, 1).unwrap();
                ca
            })
            .collect();
        s.lids.assign(&s.topo);
        s.index_lids();
        let mut gids = Vec::new();
        for id in ids {
            s.port_info.insert((id, 1), PortInfo::default());
            let mut g = [0u8; 16];
            g[..8].copy_from_slice(&SUBNET_PREFIX.to_be_bytes());
            g[8..].copy_from_slice(&s.topo.node(id).port_guid(1).to_be_bytes());
            gids.push(Gid(g));
        }
        (s, gids)
    }

    /// Two CAs on a switch, every link 4X EDR and MTU 4096 but the second
    /// CA's port, which takes 1024; routed. The LIDs of the two CAs.
    fn two_cas_one_small() -> (Subnet, u16, u16) {
        let (mut s, _) = subnet_of_cas(2);
        s.routes = s.topo.min_hop_routes(&s.lids);
        let fast = PortInfo {
            mtu_cap: 5,
            link_width_active: rdma::mad::LinkWidth::X4,
            link_speed_active: rdma::mad::LinkSpeed::Sdr,
            link_speed_ext_active: rdma::mad::LinkSpeedExt::Edr,
            ..PortInfo::default()
        };
        let switch = s.topo.find(0x10).unwrap();
        let (a, b) = (s.topo.find(0x1000).unwrap(), s.topo.find(0x2000).unwrap());
        for key in [(switch, 1), (switch, 2), (a, 1)] {
            s.port_info.insert(key, fast);
        }
        s.port_info.insert((b, 1), PortInfo { mtu_cap: 3, ..fast });
        let lid = |id| s.lids.of(&s.topo, id, 1).unwrap();
        let (la, lb) = (lid(a), lid(b));
        (s, la, lb)
    }

    #[test]
    fn a_path_takes_the_destinations_mtu_and_extended_speeds() {
        let (s, a, b) = two_cas_one_small();
        let p = path(&s, a, b).unwrap();
        assert_eq!((p.mtu, p.rate), (3, 16), "MTU 1024 and 100 Gb/s");
        let back = path(&s, b, a).unwrap();
        assert_eq!((back.mtu, back.rate), (3, 16));
    }

    #[test]
    fn path_queries_meet_their_mtu_rate_and_lifetime_selectors() {
        let (s, a, b) = two_cas_one_small();
        let base = PathRecordMask::SLID | PathRecordMask::DLID;
        let ask = |m: PathRecordMask, q: PathRecord| {
            path_records(
                &s,
                &PathRecord {
                    slid: a,
                    dlid: b,
                    ..q
                },
                base | m,
                a,
            )
            .len()
        };
        let mtu = |sel, mtu| PathRecord {
            mtu_selector: sel,
            mtu,
            ..PathRecord::default()
        };
        let with_mtu = PathRecordMask::MTU | PathRecordMask::MTU_SELECTOR;
        assert_eq!(ask(base, PathRecord::default()), 1);
        assert_eq!(
            ask(with_mtu, mtu(Selector::GreaterThan, 4)),
            0,
            "> 2048: the path has 1024"
        );
        assert_eq!(ask(with_mtu, mtu(Selector::GreaterThan, 2)), 1);
        assert_eq!(ask(with_mtu, mtu(Selector::LessThan, 3)), 0);
        assert_eq!(ask(with_mtu, mtu(Selector::Exactly, 3)), 1);
        assert_eq!(ask(with_mtu, mtu(Selector::Best, 5)), 1);
        // Without its selector, a value must match exactly.
        assert_eq!(ask(PathRecordMask::MTU, mtu(Selector::GreaterThan, 2)), 0);
        let rate = |sel, rate| PathRecord {
            rate_selector: sel,
            rate,
            ..PathRecord::default()
        };
        let with_rate = PathRecordMask::RATE | PathRecordMask::RATE_SELECTOR;
        assert_eq!(
            ask(with_rate, rate(Selector::GreaterThan, 7)),
            1,
            "100 > 40 Gb/s"
        );
        assert_eq!(ask(with_rate, rate(Selector::GreaterThan, 16)), 0);
        assert_eq!(
            ask(with_rate, rate(Selector::LessThan, 17)),
            1,
            "100 < 200 Gb/s"
        );
        let life = |sel, l| PathRecord {
            packet_life_time_selector: sel,
            packet_life_time: l,
            ..PathRecord::default()
        };
        let with_life =
            PathRecordMask::PACKET_LIFE_TIME | PathRecordMask::PACKET_LIFE_TIME_SELECTOR;
        assert_eq!(ask(with_life, life(Selector::LessThan, PACKET_LIFE)), 0);
        assert_eq!(ask(with_life, life(Selector::LessThan, PACKET_LIFE + 1)), 1);
    }

    /// A join that creates the group `mgid` (its last two bytes) for the
    /// port `port_gid`.
    fn create(s: &mut Subnet, mgid: u16, port_gid: Gid) -> Result<McMemberRecord, SaStatusCode> {
        let mut g = [0xff, 0x12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        g[14..].copy_from_slice(&mgid.to_be_bytes());
        let q = McMemberRecord {
            mgid: Gid(g),
            port_gid,
            qkey: 0x1234,
            pkey: 0xffff,
            rate: 2,
            join_state: JoinState::FULL_MEMBER,
            ..McMemberRecord::default()
        };
        let m = McMemberRecordMask::MGID
            | McMemberRecordMask::PORT_GID
            | McMemberRecordMask::QKEY
            | McMemberRecordMask::PKEY
            | McMemberRecordMask::SL
            | McMemberRecordMask::FLOW_LABEL
            | McMemberRecordMask::TCLASS
            | McMemberRecordMask::RATE
            | McMemberRecordMask::JOIN_STATE;
        join(s, &q, m)
    }

    fn leave_all(s: &mut Subnet, rec: &McMemberRecord) {
        let m = McMemberRecordMask::MGID
            | McMemberRecordMask::PORT_GID
            | McMemberRecordMask::JOIN_STATE;
        leave(s, rec, m).unwrap();
    }

    #[test]
    fn a_group_gone_gives_its_mlid_to_the_next_group() {
        let (mut s, ports) = subnet_of_cas(3);
        // The broadcast group holds 0xc000.
        let a = create(&mut s, 1, ports[0]).unwrap();
        let b = create(&mut s, 2, ports[0]).unwrap();
        assert_eq!((a.mlid, b.mlid), (0xc001, 0xc002));
        leave_all(&mut s, &a);
        let c = create(&mut s, 3, ports[1]).unwrap();
        assert_eq!(c.mlid, 0xc001, "the lowest free MLID");
        // Joins and leaves without end run out of nothing.
        for i in 0..5_000u16 {
            let g = create(&mut s, 10 + i, ports[2]).unwrap();
            assert_eq!(g.mlid, 0xc003);
            leave_all(&mut s, &g);
        }
        assert_eq!(s.groups.by_mgid.len(), 3);
    }

    #[test]
    fn every_mlid_taken_is_no_resources_not_a_reuse() {
        let (mut s, ports) = subnet_of_cas(1);
        let port_gid = ports[0].0;
        // Every MLID but the last held by a group already.
        for mlid in crate::groups::MLIDS.skip(1).take(0xfffe - 0xc000 - 1) {
            let mut g = [0xff, 0x12, 0x12, 0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            g[14..].copy_from_slice(&mlid.to_be_bytes());
            s.groups.by_mgid.insert(
                g,
                Group {
                    rec: McMemberRecord {
                        mgid: Gid(g),
                        mlid,
                        ..McMemberRecord::default()
                    },
                    members: BTreeMap::from([(port_gid, JoinState::FULL_MEMBER)]),
                    permanent: false,
                },
            );
        }
        assert_eq!(create(&mut s, 1, ports[0]).unwrap().mlid, 0xfffe);
        assert_eq!(
            create(&mut s, 2, ports[0]).map(|r| r.mlid),
            Err(SaStatusCode::NoResources)
        );
    }
    use rdma::mad::sa::{LinkRecordMask, NodeRecordMask};
    use rdma::mad::NodeInfo;

    fn nodes() -> Vec<NodeRecord> {
        (1..=3u16)
            .map(|lid| NodeRecord {
                lid,
                node_info: NodeInfo {
                    node_type: if lid == 2 { 2 } else { 1 },
                    node_guid: 0x100 + u64::from(lid),
                    ..NodeInfo::default()
                },
                ..NodeRecord::default()
            })
            .collect()
    }

    #[test]
    fn queries_select_on_every_component() {
        let q = NodeRecord::default();
        // No mask: all of them; mask bits past the table: ignored.
        assert_eq!(matching(&q, 0, nodes()).unwrap(), nodes());
        assert_eq!(matching(&q, 1 << 63, nodes()).unwrap(), nodes());
        let q = NodeRecord {
            node_info: NodeInfo {
                node_type: 1,
                node_guid: 0x103,
                ..NodeInfo::default()
            },
            ..NodeRecord::default()
        };
        let lids = |mask: NodeRecordMask| -> Vec<u16> {
            matching(&q, mask.bits(), nodes())
                .unwrap()
                .iter()
                .map(|r| r.lid)
                .collect()
        };
        assert_eq!(lids(NodeRecordMask::NODE_TYPE), [1, 3]);
        assert_eq!(
            lids(NodeRecordMask::NODE_TYPE | NodeRecordMask::NODE_GUID),
            [3]
        );
        // DeviceID, 0 in every record: all of them for 0, none for 7.
        assert_eq!(lids(NodeRecordMask::DEVICE_ID), [1, 2, 3]);
        let q = NodeRecord {
            node_info: NodeInfo {
                device_id: 7,
                ..NodeInfo::default()
            },
            ..NodeRecord::default()
        };
        assert!(matching(&q, NodeRecordMask::DEVICE_ID.bits(), nodes())
            .unwrap()
            .is_empty());
        let links = vec![
            LinkRecord {
                from_lid: 1,
                from_port: 1,
                to_port: 2,
                to_lid: 2,
            },
            LinkRecord {
                from_lid: 2,
                from_port: 2,
                to_port: 1,
                to_lid: 1,
            },
        ];
        let q = LinkRecord {
            to_lid: 1,
            ..LinkRecord::default()
        };
        assert_eq!(
            matching(&q, LinkRecordMask::TO_LID.bits(), links.clone()).unwrap(),
            links[1..]
        );
    }

    #[test]
    fn port_info_options_and_capability_masks() {
        let rec = |lid: u16, cm: u32| PortInfoRecord {
            endport_lid: lid,
            port_num: 1,
            options: 0,
            port_info: PortInfo {
                capability_mask: cm,
                ..PortInfo::default()
            },
        };
        let all = vec![rec(1, 0b110), rec(2, 0b010), rec(3, 0b100)];
        let lids = |q: &PortInfoRecord, mask: PortInfoRecordMask, bitwise: bool| -> Vec<u16> {
            port_info_matching(q, mask.bits(), bitwise, all.clone())
                .unwrap()
                .iter()
                .map(|r| r.endport_lid)
                .collect()
        };
        let q = PortInfoRecord {
            options: 0x81,
            ..rec(0, 0b010)
        };
        // Options selects nothing; CapabilityMask is exact, or with
        // AttributeModifier bit 31 asks for the query's bits.
        assert_eq!(lids(&q, PortInfoRecordMask::OPTIONS, false), [1, 2, 3]);
        assert_eq!(lids(&q, PortInfoRecordMask::CAPABILITY_MASK, false), [2]);
        assert_eq!(lids(&q, PortInfoRecordMask::CAPABILITY_MASK, true), [1, 2]);
        assert_eq!(
            lids(
                &q,
                PortInfoRecordMask::CAPABILITY_MASK | PortInfoRecordMask::LID,
                true
            ),
            Vec::<u16>::new()
        );
        let q = PortInfoRecord {
            endport_lid: 1,
            ..q
        };
        assert_eq!(
            lids(
                &q,
                PortInfoRecordMask::CAPABILITY_MASK | PortInfoRecordMask::LID,
                true
            ),
            [1]
        );
        // Without the CapabilityMask bit, bit 31 changes nothing.
        assert_eq!(lids(&q, PortInfoRecordMask::PORT_NUM, true), [1, 2, 3]);
    }
}
