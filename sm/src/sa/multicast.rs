//! MCMemberRecords: the members of the multicast groups, and joins and
//! leaves.

use super::*;
use crate::partitions::holds;
use crate::rate::rate_rank;

/// The candidates of an MCMemberRecord query: a record per member of each
/// group, and a group with no members as its own record unless the query
/// asks for a port; of the groups whose partition the port of LID
/// `requester` is a member of. The query's components select among them.
pub(super) fn member_records(
    s: &Subnet,
    m: McMemberRecordMask,
    requester: u16,
) -> Vec<McMemberRecord> {
    let mut v = Vec::new();
    let table = table_of_lid(s, requester);
    for g in s.groups.by_mgid.values() {
        if !holds(table, g.rec.pkey) {
            continue;
        }
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

/// The rate of the port with GID `gid`, as its rank (`rate_rank`).
fn port_rate(s: &Subnet, gid: Gid) -> Option<u32> {
    let lid = end_port_by_gid(s, gid)?;
    let (id, p, _) = end_port(s, lid)?;
    let pi = s.port_info.get(&(id, p))?;
    Some(rate_rank(rate_code(pi)))
}

/// The MTU and rate of a group that a join creates, with their selectors,
/// as OpenSM chooses them (`mgrp_request_is_realizable`): where the query
/// names a value with its selector (other than largest), exactly that
/// value; greater than: the requesting port's (its NeighborMTU, its
/// link's rate), which must be greater; less than: the requesting port's
/// if the query's is above it, else the next value below the query's;
/// otherwise the requesting port's, or MTU 2048 and 10 Gb/s for a port the
/// sweep did not read. A value out of range: ERR_REQ_INVALID.
/// A value of a new group with its selector.
type Chosen = (Selector, u8);

fn new_group_mtu_rate(
    s: &Subnet,
    q: &McMemberRecord,
    m: McMemberRecordMask,
    requester: u16,
) -> Result<(Chosen, Chosen), SaStatusCode> {
    let pi = end_port(s, requester).and_then(|(id, p, _)| s.port_info.get(&(id, p)));
    let port_mtu = pi.map_or(0, |pi| match pi.neighbor_mtu {
        1..=5 => pi.neighbor_mtu,
        _ => pi.mtu_cap,
    });
    let port_rate = pi.map_or(0, rate_code);
    let named = |value, selector, sel| m.contains(value | selector) && sel != Selector::Best;
    let mtu = if !named(
        McMemberRecordMask::MTU,
        McMemberRecordMask::MTU_SELECTOR,
        q.mtu_selector,
    ) {
        (Selector::Exactly, if port_mtu != 0 { port_mtu } else { 4 })
    } else {
        let want = q.mtu;
        let v = match q.mtu_selector {
            Selector::GreaterThan if port_mtu != 0 && want >= port_mtu => {
                return Err(SaStatusCode::ReqInvalid)
            }
            Selector::GreaterThan if port_mtu != 0 => port_mtu,
            Selector::GreaterThan => want.saturating_add(1),
            Selector::LessThan if port_mtu != 0 && want > port_mtu => port_mtu,
            Selector::LessThan => want.wrapping_sub(1),
            _ => want,
        };
        if !(1..=5).contains(&v) {
            return Err(SaStatusCode::ReqInvalid);
        }
        (q.mtu_selector, v)
    };
    let rate = if !named(
        McMemberRecordMask::RATE,
        McMemberRecordMask::RATE_SELECTOR,
        q.rate_selector,
    ) {
        (
            Selector::Exactly,
            if port_rate != 0 { port_rate } else { 3 },
        )
    } else {
        let want = q.rate;
        let (w, p) = (rate_rank(want), rate_rank(port_rate));
        let v = match q.rate_selector {
            Selector::GreaterThan if w >= p => return Err(SaStatusCode::ReqInvalid),
            Selector::GreaterThan => port_rate,
            Selector::LessThan if w > p => port_rate,
            Selector::LessThan => crate::rate::rate_below(want).unwrap_or(0),
            _ => want,
        };
        if rate_rank(v) == 0 {
            return Err(SaStatusCode::ReqInvalid);
        }
        (q.rate_selector, v)
    };
    Ok((mtu, rate))
}

/// The P_Key table of the port of GID `gid` (none: no such port).
fn port_table(s: &Subnet, gid: Gid) -> Vec<u16> {
    end_port_by_gid(s, gid).map_or_else(Vec::new, |lid| table_of_lid(s, lid).to_vec())
}

/// Whether the port of LID `requester` may join or leave for the port of
/// `port_gid` in the group `mgid`, as OpenSM decides (o15-0.2.1): a port
/// for itself always; another port (a proxy) for a port not yet a member
/// (a proxy join) or for a member that a proxy joined; never for a member
/// that joined for itself (the port joined must be a member of the
/// group's partition, which [`join`] checks). A
/// requester of a LID the sweep did not find is refused.
fn may_act_for(
    s: &Subnet,
    requester: u16,
    mgid: &[u8; 16],
    port_gid: Gid,
) -> Result<bool, SaStatusCode> {
    let Some((_, _, guid)) = end_port(s, requester) else {
        return Err(SaStatusCode::ReqInvalid);
    };
    let proxy = Gid::from_parts(SUBNET_PREFIX, guid) != port_gid;
    let member = s
        .groups
        .by_mgid
        .get(mgid)
        .is_some_and(|g| g.members.contains_key(&port_gid.0));
    if proxy && member && !s.groups.proxies.contains(&(*mgid, port_gid.0)) {
        return Err(SaStatusCode::ReqInvalid);
    }
    Ok(proxy)
}

/// A join (SubnAdmSet) of `q`'s port to its group, asked by the port of
/// LID `requester`; the group is created if it does not exist.
pub(super) fn join(
    s: &mut Subnet,
    q: &McMemberRecord,
    m: McMemberRecordMask,
    requester: u16,
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
    let proxy = may_act_for(s, requester, &q.mgid.0, q.port_gid)?;
    if !zero {
        let table = port_table(s, q.port_gid);
        if let Some(g) = s.groups.by_mgid.get_mut(&q.mgid.0) {
            // A port joins only groups of its partitions.
            if !holds(&table, g.rec.pkey) {
                return Err(SaStatusCode::ReqInvalid);
            }
            if !g.members.contains_key(&q.port_gid.0) && proxy {
                s.groups.proxies.insert((q.mgid.0, q.port_gid.0));
            }
            if rate < rate_rank(g.rec.rate) {
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
    if !q.join_state.contains(JoinState::FULL_MEMBER) || !holds(&port_table(s, q.port_gid), q.pkey)
    {
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
    let ((mtu_selector, mtu), (rate_selector, rate)) = new_group_mtu_rate(s, q, m, requester)?;
    let rec = McMemberRecord {
        mgid: Gid(mgid),
        port_gid: Gid::default(),
        mlid,
        mtu_selector,
        mtu,
        rate_selector,
        rate,
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
    if proxy {
        s.groups.proxies.insert((mgid, q.port_gid.0));
    }
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

/// A leave (SubnAdmDelete) of `q`'s port from its group, asked by the
/// port of LID `requester`; the group goes with its last full member
/// unless it is permanent.
pub(super) fn leave(
    s: &mut Subnet,
    q: &McMemberRecord,
    m: McMemberRecordMask,
    requester: u16,
) -> Result<McMemberRecord, SaStatusCode> {
    if !m.contains(
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE,
    ) {
        return Err(SaStatusCode::ReqInsufficientComponents);
    }
    may_act_for(s, requester, &q.mgid.0, q.port_gid)?;
    let Some(g) = s.groups.by_mgid.get_mut(&q.mgid.0) else {
        return Err(SaStatusCode::ReqInvalid);
    };
    let Some(js) = g.members.get_mut(&q.port_gid.0) else {
        return Err(SaStatusCode::ReqInvalid);
    };
    // The states left must be some of the member's, and only those
    // (o15-0.1.14).
    if !js.intersects(q.join_state) || !js.contains(q.join_state) {
        return Err(SaStatusCode::ReqInvalid);
    }
    *js -= q.join_state;
    let left = *js;
    let rec = McMemberRecord {
        port_gid: q.port_gid,
        join_state: q.join_state,
        ..g.rec
    };
    if left.is_empty() {
        g.members.remove(&q.port_gid.0);
        s.groups.proxies.remove(&(q.mgid.0, q.port_gid.0));
    }
    let full_left = g
        .members
        .values()
        .any(|j| j.contains(JoinState::FULL_MEMBER));
    if !full_left && !g.permanent {
        s.groups.by_mgid.remove(&q.mgid.0);
        s.groups.proxies.retain(|(mgid, _)| *mgid != q.mgid.0);
    }
    Ok(rec)
}
