//! The subnet administrator's server (the SA client is `rdma::umad::sa`,
//! the records' codec `rdma::mad::sa`): records of the swept subnet, matched by
//! component mask, and multicast groups joined and left through it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::subnet::{NodeId, NodeKind};
use rdma::mad::sa::{
    self as records, InformInfo, InformInfoRecord, JoinState, LinkRecord, Matcher, McMemberRecord,
    McMemberRecordMask, NodeRecord, PathRecord, PathRecordMask, PortInfoRecord, PortInfoRecordMask,
    SaRecord, SaStatusCode, Selector,
};
use rdma::mad::{
    attr_id, ClassPortInfo, Mad, MadHeader, Method, NodeDescription, PortInfo, Status, Trap,
};
use rdma::umad::{AgentView, Received};
use rdma::Gid;

use crate::groups::{Group, DEFAULT_PKEY, PACKET_LIFE};
use crate::rate::rate_code;
use crate::state::{lock_r, lock_w, Subnet, SUBNET_PREFIX};

/// The SA's handler ([`AsyncPort::register_responder`]): answers each
/// request, on the port's reader, from the state of the last sweep, wakes
/// `mcast` after a join or leave changed the groups, and hands the
/// Reports of groups created and deleted to `reporter`.
///
/// [`AsyncPort::register_responder`]: rdma::umad::AsyncPort::register_responder
pub fn responder(
    subnet: Arc<RwLock<Subnet>>,
    mcast: Arc<tokio::sync::Notify>,
    reporter: Reporter,
) -> impl Fn(&AgentView, Received) + Send + Sync + 'static {
    move |agent, req| {
        let resp = answer(&req, &subnet, Some(&reporter));
        let h = req.mad.header();
        if h.attr_id == records::attr_id::MC_MEMBER_RECORD
            && matches!(h.method, Method::SET | Method::DELETE)
            && resp.as_ref().is_some_and(|r| r.status().is_ok())
        {
            mcast.notify_one();
        }
        if let Some(resp) = resp {
            if agent.respond(&req, &resp).is_err() {
                let _ = agent.respond(&req, &unsent(&req.mad));
            }
        }
    }
}

/// The answer to `req` when its own could not be sent (a table longer
/// than the transport takes, a write refused): ERR_NO_RESOURCES, as OpenSM
/// answers a table it cannot send, and no records, never the part of a
/// table that fits labelled as the whole of it.
fn unsent(req: &Mad) -> Mad {
    error(req, SaStatusCode::NoResources)
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
fn answer(req: &Received, subnet: &RwLock<Subnet>, reporter: Option<&Reporter>) -> Option<Mad> {
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
            // What this SA serves: joins and leaves, the optional records
            // (ServiceRecord, the SMInfo, SwitchInfo, forwarding table,
            // GUIDInfo, SLtoVL and VLArbitration records; not
            // P_KeyTableRecord), and PortInfoRecord's bitwise capability
            // matches. Not MultiPathRecord (GetMulti) nor TraceRecord, not
            // Get/Set of Notice.
            let cpi = ClassPortInfo {
                base_version: 1,
                class_version: 2,
                capability_mask: records::cap::UD_MULTICAST
                    | records::cap::OPTIONAL_RECORDS
                    | records::cap::PORT_INFO_CAP_MASK_MATCH,
                capability_mask2: records::cap2::PORT_INFO_CAP_MASK2_MATCH,
                resp_time_value: 18,
                ..ClassPortInfo::default()
            };
            let _ = r.set_attribute(&cpi);
            r
        }
        (records::attr_id::NODE_RECORD, Method::GET | Method::GET_TABLE) => {
            let mut q = m.attribute::<NodeRecord>().ok()?;
            let s = lock_r(subnet);
            if mask & rdma::mad::sa::NodeRecordMask::LID.bits() != 0 {
                q.lid = base_of(&s, q.lid);
            }
            match matching(&q, mask, node_records(&s)) {
                Ok(hits) => reply(m, h.method, hits),
                Err(code) => error(m, code),
            }
        }
        (records::attr_id::PORT_INFO_RECORD, Method::GET | Method::GET_TABLE) => {
            let mut q = m.attribute::<PortInfoRecord>().ok()?;
            let s = lock_r(subnet);
            if mask & PortInfoRecordMask::LID.bits() != 0 {
                q.endport_lid = base_of(&s, q.endport_lid);
            }
            let bitwise_caps = h.attr_mod & 1 << 31 != 0;
            match port_info_matching(&q, mask, bitwise_caps, port_info_records(&s)) {
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
            let pm = PathRecordMask::from_bits_truncate(mask);
            // A Get: one path (IBA 1.2 erratum, as OpenSM: the first of
            // the first pair of ports that has one); NumbPath: at most that
            // many a pair.
            let limit = if h.method == Method::GET {
                Some(1)
            } else if pm.contains(PathRecordMask::NUMB_PATH) {
                Some(usize::from(q.numb_path))
            } else {
                None
            };
            let mut hits = path_records(&lock_r(subnet), &q, pm, req.addr.lid, limit);
            // A Get ends at the first pair of ports that has a path.
            if h.method == Method::GET {
                hits.truncate(1);
            }
            reply(m, h.method, hits)
        }
        (records::attr_id::MC_MEMBER_RECORD, Method::GET | Method::GET_TABLE) => {
            let q = m.attribute::<McMemberRecord>().ok()?;
            let all = member_records(
                &lock_r(subnet),
                McMemberRecordMask::from_bits_truncate(mask),
                req.addr.lid,
            );
            match matching(&q, mask, all) {
                Ok(hits) => reply(m, h.method, hits),
                Err(code) => error(m, code),
            }
        }
        (records::attr_id::P_KEY_TABLE_RECORD, Method::GET | Method::GET_TABLE) => {
            pkey_records::answer(m, subnet)?
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
            let before: Vec<[u8; 16]> = s.groups.by_mgid.keys().copied().collect();
            let r = if h.method == Method::SET {
                join(&mut s, &q, mk, req.addr.lid)
            } else {
                leave(&mut s, &q, mk, req.addr.lid)
            };
            if let (Ok(rec), Some(reporter)) = (&r, reporter) {
                let had = before.contains(&rec.mgid.0);
                match (had, s.groups.by_mgid.contains_key(&rec.mgid.0)) {
                    (false, true) => reporter.notify(&s, Trap::McGroupCreated(rec.mgid)),
                    (true, false) => reporter.notify(&s, Trap::McGroupDeleted(rec.mgid)),
                    _ => {}
                }
            }
            match r {
                Ok(rec) => record_response(m, &rec),
                Err(code) => error(m, code),
            }
        }
        (records::attr_id::SERVICE_RECORD, _) => service::answer(req, subnet, Instant::now()),
        (id, _) if tables::serves(id) => tables::answer(req, subnet),
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

/// The base LID of the port that answers to `lid` (any of its 2^LMC, as
/// OpenSM looks a port up for NodeRecord and PortInfoRecord queries); `lid`
/// itself where no port does.
fn base_of(s: &Subnet, lid: u16) -> u16 {
    end_port(s, lid)
        .and_then(|(_, _, guid)| s.lids.get(guid))
        .unwrap_or(lid)
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

mod multicast;
mod paths;
mod pkey_records;
mod reports;
mod service;
mod tables;

pub use reports::Reporter;
pub(crate) use service::Service;

use multicast::{join, leave, member_records};
use paths::{end_port, end_port_by_gid, path_records};
use pkey_records::table_of_lid;

#[cfg(test)]
mod lmc_tests;
#[cfg(test)]
mod partition_tests;
#[cfg(test)]
mod records_tests;
#[cfg(test)]
mod tests;
