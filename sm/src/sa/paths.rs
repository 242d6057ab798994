//! PathRecords: the route between two end ports, its MTU and rate, and
//! the queries that select among them.

use super::*;
use crate::partitions::shared_pkey;

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

pub(super) fn path_records(
    s: &Subnet,
    q: &PathRecord,
    m: PathRecordMask,
    requester: u16,
) -> Vec<PathRecord> {
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
            // Only between ports that share a partition: the query's
            // P_Key, or the first of the source's that the destination
            // holds too.
            let want = m.contains(PathRecordMask::PKEY).then_some(q.pkey);
            let Some(pkey) = shared_pkey(table_of_lid(s, sl), table_of_lid(s, dl), want) else {
                continue;
            };
            p.pkey = pkey;
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
pub(super) fn selected(m: PathRecordMask, q: &PathRecord, p: &PathRecord) -> bool {
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
