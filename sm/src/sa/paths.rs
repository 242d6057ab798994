//! PathRecords: the route between two end ports, its MTU and rate, and
//! the queries that select among them.

use std::ops::RangeInclusive;

use super::*;
use crate::partitions::shared_pkey;
use crate::rate::rate_rank;

/// The end port of `lid`.
pub(super) fn end_port(s: &Subnet, lid: u16) -> Option<(NodeId, u8, u64)> {
    s.end_ports.get(&lid).copied()
}

pub(super) fn end_port_by_gid(s: &Subnet, gid: Gid) -> Option<u16> {
    if gid.subnet_prefix() != SUBNET_PREFIX {
        return None;
    }
    s.lids.get(gid.interface_id())
}

/// The path from end port `slid` to `dlid`: its MTU and rate the least of
/// the ports on the way, both ends of every link (the destination's port
/// included), `None` if it is not routed.
pub(super) fn path(s: &Subnet, slid: u16, dlid: u16) -> Option<PathRecord> {
    let (sn, sp, sguid) = end_port(s, slid)?;
    let (dn, dp, dguid) = end_port(s, dlid)?;
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
            if (sn, sp) == (dn, dp) {
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
        .min_by_key(|&c| crate::rate::rate_rank(c))
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
        // A loopback path's is 0 (IBA 1.2 table 205, as OpenSM).
        packet_life_time: if (sn, sp) == (dn, dp) { 0 } else { PACKET_LIFE },
        ..PathRecord::default()
    })
}

/// The LIDs of the end port `lid` is one of (all 2^LMC of them).
fn lids_of_port(s: &Subnet, lid: u16) -> Option<RangeInclusive<u16>> {
    let (_, _, guid) = end_port(s, lid)?;
    s.lids.range(guid)
}

/// The PathRecords that answer query `q` (mask `m`) from `requester`:
/// between each source and destination port (the query's LIDs or GIDs,
/// else the requester's port and every port), at most `limit` a pair
/// (`None`: every path). With an LMC above 0 a pair of ports has a path
/// for each pair of their LIDs: first those whose LIDs have the same
/// offset from the first LID of each side (the port's base, or the SLID or
/// DLID the query gives; the routes spread over different links,
/// Preference 0), then the others (Preference 2), as OpenSM orders them.
pub(super) fn path_records(
    s: &Subnet,
    q: &PathRecord,
    m: PathRecordMask,
    requester: u16,
    limit: Option<usize>,
) -> Vec<PathRecord> {
    let sources: Vec<RangeInclusive<u16>> = if m.contains(PathRecordMask::SLID) {
        vec![q.slid..=q.slid]
    } else if m.contains(PathRecordMask::SGID) {
        end_port_by_gid(s, q.sgid)
            .and_then(|l| lids_of_port(s, l))
            .into_iter()
            .collect()
    } else {
        lids_of_port(s, requester).into_iter().collect()
    };
    let dests: Vec<RangeInclusive<u16>> = if m.contains(PathRecordMask::DLID) {
        vec![q.dlid..=q.dlid]
    } else if m.contains(PathRecordMask::DGID) {
        end_port_by_gid(s, q.dgid)
            .and_then(|l| lids_of_port(s, l))
            .into_iter()
            .collect()
    } else {
        s.sorted_lids
            .iter()
            .filter_map(|&l| lids_of_port(s, l))
            .collect()
    };
    let mut v = Vec::new();
    for src in &sources {
        for dst in &dests {
            let mut found = 0;
            for (sl, dl, preference) in lid_pairs(src, dst) {
                if limit.is_some_and(|n| found >= n) {
                    break;
                }
                if let Some(p) = selected_path(s, q, m, sl, dl) {
                    v.push(PathRecord { preference, ..p });
                    found += 1;
                }
            }
        }
    }
    v
}

/// The pairs of LIDs of a source and a destination port, with their
/// Preference: the same offsets first (0), then the rest (2).
fn lid_pairs(
    src: &RangeInclusive<u16>,
    dst: &RangeInclusive<u16>,
) -> impl Iterator<Item = (u16, u16, u8)> {
    let (s0, d0) = (*src.start(), *dst.start());
    let same = src.clone().zip(dst.clone()).map(|(a, b)| (a, b, 0));
    let (src, dst) = (src.clone(), dst.clone());
    let rest = src
        .flat_map(move |a| dst.clone().map(move |b| (a, b)))
        .filter(move |&(a, b)| a - s0 != b - d0)
        .map(|(a, b)| (a, b, 2));
    same.chain(rest)
}

/// The path from `sl` to `dl` if it answers the query: routed, within a
/// shared partition, its SL, MTU, rate and packet lifetime as asked.
fn selected_path(
    s: &Subnet,
    q: &PathRecord,
    m: PathRecordMask,
    sl: u16,
    dl: u16,
) -> Option<PathRecord> {
    let mut p = path(s, sl, dl)?;
    // Only between ports that share a partition: the query's P_Key, or
    // the first of the source's that the destination holds too.
    let want = m.contains(PathRecordMask::PKEY).then_some(q.pkey);
    p.pkey = shared_pkey(table_of_lid(s, sl), table_of_lid(s, dl), want)?;
    if m.contains(PathRecordMask::SL) && q.sl != 0 {
        return None;
    }
    let mut p = selected(m, q, p)?;
    if m.contains(PathRecordMask::SERVICE_ID) {
        p.service_id = q.service_id;
    }
    Some(p)
}

/// Path `p` as it answers the query's MTU, rate and packet lifetime
/// selectors, as OpenSM adjusts a path (IBA 15.2.5.16; a value counts only
/// with its selector in the mask): greater than, the path's value must be;
/// less than, the path is offered at the highest value below the query's
/// (the MTU or lifetime one less, the next lower rate) when its own is not
/// already below; exactly, at the query's value when the path's is at
/// least that (rates: equal); largest (smallest lifetime), as it is.
/// `None` when the path cannot meet one.
pub(super) fn selected(m: PathRecordMask, q: &PathRecord, mut p: PathRecord) -> Option<PathRecord> {
    let asked = |value: PathRecordMask, selector: PathRecordMask| m.contains(value | selector);
    if asked(PathRecordMask::MTU, PathRecordMask::MTU_SELECTOR) {
        p.mtu = adjust(q.mtu_selector, p.mtu, q.mtu)?;
    }
    if asked(PathRecordMask::RATE, PathRecordMask::RATE_SELECTOR) {
        let (have, want) = (rate_rank(p.rate), rate_rank(q.rate));
        p.rate = match q.rate_selector {
            Selector::GreaterThan => (have > want).then_some(p.rate)?,
            Selector::LessThan if have >= want => crate::rate::rate_below(q.rate)?,
            Selector::LessThan | Selector::Best => p.rate,
            Selector::Exactly => (have == want).then_some(q.rate)?,
        };
    }
    if asked(
        PathRecordMask::PACKET_LIFE_TIME,
        PathRecordMask::PACKET_LIFE_TIME_SELECTOR,
    ) {
        p.packet_life_time = adjust(
            q.packet_life_time_selector,
            p.packet_life_time,
            q.packet_life_time,
        )?;
    }
    Some(p)
}

/// A path's MTU or packet lifetime `have` under selector `sel` and the
/// query's `want` (see [`selected`]): less than a value of 1 or below has
/// nothing to offer.
fn adjust(sel: Selector, have: u8, want: u8) -> Option<u8> {
    match sel {
        Selector::GreaterThan => (have > want).then_some(have),
        Selector::LessThan if have >= want => (want > 1).then(|| want - 1),
        Selector::LessThan | Selector::Best => Some(have),
        Selector::Exactly => (have >= want).then_some(want),
    }
}
