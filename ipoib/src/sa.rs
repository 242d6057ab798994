//! The subnet administrator's side of IPoIB on an InfiniBand port: joining
//! and leaving the multicast groups with MCMemberRecords, and the
//! PathRecord to a neighbour's GID, through the async SA client
//! ([`rdma::umad::SaClient`]). The records asked for are those of Linux's
//! IPoIB (`ipoib_multicast.c`, `ipoib_main.c`): a group that exists (the
//! broadcast group, which the SM creates) is joined by MGID, PortGID,
//! P_Key and JoinState, and takes its Q_Key, MTU and rate from the SA's
//! answer; a group that may not exist yet (an IPv6 group) is created with
//! the broadcast group's parameters; a path is asked by SGID, DGID,
//! P_Key, NumbPath 1, reversible.
//!
//! The requests and the checks of the answers are pure functions, tested
//! on any host; [`join`], [`create`], [`leave`] and [`path`] send them.

use rdma::mad::sa::{
    JoinState, McMemberRecord, McMemberRecordMask, PathRecord, PathRecordMask, Selector,
};
use rdma::umad::SaClient;
use rdma::Gid;

/// Why a join, a leave or a path failed.
#[derive(Debug, thiserror::Error)]
pub enum SaError {
    /// The query failed, or the SA answered an error status.
    #[error("SA query: {0}")]
    Query(#[from] rdma::umad::Error),
    /// The SA answered a record that does not fit the request.
    #[error("the SA answered {what}: {answer}")]
    Answer {
        /// What does not fit.
        what: &'static str,
        /// The record answered.
        answer: String,
    },
}

fn answer(what: &'static str, r: &impl std::fmt::Debug) -> SaError {
    SaError::Answer {
        what,
        answer: format!("{r:?}"),
    }
}

/// The low 15 bits of a P_Key: the key without its membership bit.
fn key(pkey: u16) -> u16 {
    pkey & 0x7fff
}

/// A multicast LID: 0xC000 to 0xFFFE (0xFFFF is the permissive LID).
fn is_multicast_lid(lid: u16) -> bool {
    (0xc000..0xffff).contains(&lid)
}

/// A unicast LID: 1 to 0xBFFF.
fn is_unicast_lid(lid: u16) -> bool {
    (1..0xc000).contains(&lid)
}

/// The join of an existing group `mgid` in partition `pkey` by port
/// `port_gid` as a full member: MGID, PortGID, P_Key, JoinState.
pub fn join_request(port_gid: Gid, mgid: Gid, pkey: u16) -> (McMemberRecord, McMemberRecordMask) {
    let r = McMemberRecord {
        mgid,
        port_gid,
        pkey,
        join_state: JoinState::FULL_MEMBER,
        ..McMemberRecord::default()
    };
    let mask = McMemberRecordMask::MGID
        | McMemberRecordMask::PORT_GID
        | McMemberRecordMask::PKEY
        | McMemberRecordMask::JOIN_STATE;
    (r, mask)
}

/// The join of group `mgid` by `port_gid` as a full member that creates
/// it if it does not exist: the Q_Key, P_Key, MTU, rate, SL, flow label,
/// hop limit and traffic class of `like` (the broadcast group as the SA
/// answered its join), MTU and rate exactly those.
pub fn create_request(
    port_gid: Gid,
    mgid: Gid,
    like: &McMemberRecord,
) -> (McMemberRecord, McMemberRecordMask) {
    let r = McMemberRecord {
        mgid,
        port_gid,
        qkey: like.qkey,
        pkey: like.pkey,
        mtu_selector: Selector::Exactly,
        mtu: like.mtu,
        rate_selector: Selector::Exactly,
        rate: like.rate,
        sl: like.sl,
        flow_label: like.flow_label,
        hop_limit: like.hop_limit,
        tclass: like.tclass,
        join_state: JoinState::FULL_MEMBER,
        ..McMemberRecord::default()
    };
    let mask = McMemberRecordMask::MGID
        | McMemberRecordMask::PORT_GID
        | McMemberRecordMask::QKEY
        | McMemberRecordMask::PKEY
        | McMemberRecordMask::MTU_SELECTOR
        | McMemberRecordMask::MTU
        | McMemberRecordMask::RATE_SELECTOR
        | McMemberRecordMask::RATE
        | McMemberRecordMask::SL
        | McMemberRecordMask::FLOW_LABEL
        | McMemberRecordMask::HOP_LIMIT
        | McMemberRecordMask::TCLASS
        | McMemberRecordMask::JOIN_STATE;
    (r, mask)
}

/// Whether `a` answers the join `req`: the same group, a multicast LID, a
/// Q_Key (0 is none), the partition asked for, and for a created group
/// the Q_Key asked for.
pub fn check_join(
    req: &McMemberRecord,
    mask: McMemberRecordMask,
    a: &McMemberRecord,
) -> Result<(), SaError> {
    if a.mgid != req.mgid {
        return Err(answer("another group", a));
    }
    if !is_multicast_lid(a.mlid) {
        return Err(answer("no multicast LID", a));
    }
    if a.qkey == 0 || (mask.contains(McMemberRecordMask::QKEY) && a.qkey != req.qkey) {
        return Err(answer("another Q_Key", a));
    }
    if key(a.pkey) != key(req.pkey) {
        return Err(answer("another partition", a));
    }
    Ok(())
}

/// The PathRecord query from `sgid` to `dgid` in partition `pkey`: one
/// path, reversible.
pub fn path_request(sgid: Gid, dgid: Gid, pkey: u16) -> (PathRecord, PathRecordMask) {
    let r = PathRecord {
        sgid,
        dgid,
        pkey,
        numb_path: 1,
        reversible: true,
        ..PathRecord::default()
    };
    let mask = PathRecordMask::SGID
        | PathRecordMask::DGID
        | PathRecordMask::PKEY
        | PathRecordMask::NUMB_PATH
        | PathRecordMask::REVERSIBLE;
    (r, mask)
}

/// The path of the answers `paths` to the query `req`: the first whose
/// GIDs are those asked for, with unicast LIDs, in the partition asked
/// for, reversible.
pub fn check_path(req: &PathRecord, paths: &[PathRecord]) -> Result<PathRecord, SaError> {
    let p = paths.first().ok_or_else(|| answer("no path", &req.dgid))?;
    if p.sgid != req.sgid || p.dgid != req.dgid {
        return Err(answer("a path between other GIDs", p));
    }
    if !is_unicast_lid(p.slid) || !is_unicast_lid(p.dlid) {
        return Err(answer("a path without unicast LIDs", p));
    }
    if key(p.pkey) != key(req.pkey) || !p.reversible {
        return Err(answer("a path in another partition, or one way", p));
    }
    Ok(*p)
}

/// A group joined: the request (for the leave) and the SA's answer (the
/// group's MLID, Q_Key, MTU, rate, SL).
#[derive(Clone, Copy, Debug)]
pub struct Joined {
    /// The group as the SA answered the join.
    pub group: McMemberRecord,
    request: McMemberRecord,
    mask: McMemberRecordMask,
}

async fn send_join(
    sa: &SaClient,
    request: McMemberRecord,
    mask: McMemberRecordMask,
) -> Result<Joined, SaError> {
    let group = sa.join_multicast(&request, mask).await?;
    check_join(&request, mask, &group)?;
    Ok(Joined {
        group,
        request,
        mask,
    })
}

/// Joins the existing group `mgid` of partition `pkey` from `port_gid` as
/// a full member ([`join_request`]).
pub async fn join(sa: &SaClient, port_gid: Gid, mgid: Gid, pkey: u16) -> Result<Joined, SaError> {
    let (r, mask) = join_request(port_gid, mgid, pkey);
    send_join(sa, r, mask).await
}

/// Joins `mgid` from `port_gid` as a full member, creating it like the
/// group `like` if it does not exist ([`create_request`]).
pub async fn create(
    sa: &SaClient,
    port_gid: Gid,
    mgid: Gid,
    like: &McMemberRecord,
) -> Result<Joined, SaError> {
    let (r, mask) = create_request(port_gid, mgid, like);
    send_join(sa, r, mask).await
}

/// Leaves group `j` (the MGID, PortGID and JoinState of its join).
pub async fn leave(sa: &SaClient, j: &Joined) -> Result<(), SaError> {
    let mask =
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE;
    let left = sa.leave_multicast(&j.request, mask & j.mask).await?;
    if left.mgid != j.request.mgid {
        return Err(answer("the leave of another group", &left));
    }
    Ok(())
}

/// The path from `sgid` to a neighbour's `dgid` in partition `pkey`
/// ([`path_request`], [`check_path`]).
pub async fn path(sa: &SaClient, sgid: Gid, dgid: Gid, pkey: u16) -> Result<PathRecord, SaError> {
    let (r, mask) = path_request(sgid, dgid, pkey);
    let paths = sa.path_records(&r, mask).await?;
    check_path(&r, &paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mgid;

    fn gid(n: u8) -> Gid {
        let mut g = [0u8; 16];
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        g[15] = n;
        Gid(g)
    }

    fn bcast() -> Gid {
        mgid::ipv4_broadcast(0xffff, mgid::LINK_LOCAL)
    }

    fn answered(req: &McMemberRecord) -> McMemberRecord {
        McMemberRecord {
            mlid: 0xc001,
            qkey: 0x0b1b,
            mtu: 4,
            rate: 3,
            ..*req
        }
    }

    #[test]
    fn a_join_asks_as_linux_ipoib_and_takes_the_group_s_q_key() {
        let (r, mask) = join_request(gid(1), bcast(), 0xffff);
        assert_eq!((r.mgid, r.port_gid, r.pkey), (bcast(), gid(1), 0xffff));
        assert_eq!(r.join_state, JoinState::FULL_MEMBER);
        assert_eq!(
            mask,
            McMemberRecordMask::MGID
                | McMemberRecordMask::PORT_GID
                | McMemberRecordMask::PKEY
                | McMemberRecordMask::JOIN_STATE
        );
        // Any Q_Key the group has is taken, and a limited member's key of
        // the same partition.
        let a = answered(&r);
        check_join(&r, mask, &a).unwrap();
        check_join(&r, mask, &McMemberRecord { pkey: 0x7fff, ..a }).unwrap();
        for (what, bad) in [
            ("another group", McMemberRecord { mgid: gid(9), ..a }),
            ("no multicast LID", McMemberRecord { mlid: 0xbfff, ..a }),
            ("no multicast LID", McMemberRecord { mlid: 0xffff, ..a }),
            ("another Q_Key", McMemberRecord { qkey: 0, ..a }),
            ("another partition", McMemberRecord { pkey: 0x8001, ..a }),
        ] {
            match check_join(&r, mask, &bad) {
                Err(SaError::Answer { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_created_group_is_like_the_broadcast_group() {
        let (b, bmask) = join_request(gid(1), bcast(), 0xffff);
        let like = McMemberRecord {
            sl: 2,
            flow_label: 7,
            hop_limit: 0,
            tclass: 0,
            ..answered(&b)
        };
        check_join(&b, bmask, &like).unwrap();
        let sn = mgid::ipv6(
            mgid::solicited_node("fd77::1".parse().unwrap()),
            0xffff,
            mgid::LINK_LOCAL,
        )
        .unwrap();
        let (r, mask) = create_request(gid(1), sn, &like);
        assert_eq!(
            (r.mgid, r.qkey, r.pkey, r.mtu, r.rate, r.sl, r.flow_label),
            (sn, 0x0b1b, 0xffff, 4, 3, 2, 7)
        );
        assert_eq!(
            (r.mtu_selector, r.rate_selector),
            (Selector::Exactly, Selector::Exactly)
        );
        assert!(mask.contains(McMemberRecordMask::QKEY | McMemberRecordMask::MTU));
        check_join(&r, mask, &answered(&r)).unwrap();
        // A group that exists with another Q_Key is not ours.
        let other = McMemberRecord {
            qkey: 0x1234,
            ..answered(&r)
        };
        assert!(matches!(
            check_join(&r, mask, &other),
            Err(SaError::Answer {
                what: "another Q_Key",
                ..
            })
        ));
    }

    #[test]
    fn a_path_is_one_reversible_path_between_the_gids_asked_for() {
        let (r, mask) = path_request(gid(1), gid(2), 0xffff);
        assert_eq!(
            mask,
            PathRecordMask::SGID
                | PathRecordMask::DGID
                | PathRecordMask::PKEY
                | PathRecordMask::NUMB_PATH
                | PathRecordMask::REVERSIBLE
        );
        assert_eq!((r.numb_path, r.reversible), (1, true));
        let good = PathRecord {
            slid: 1,
            dlid: 2,
            ..r
        };
        assert_eq!(check_path(&r, &[good]).unwrap().dlid, 2);
        for bad in [
            vec![],
            vec![PathRecord {
                dgid: gid(3),
                ..good
            }],
            vec![PathRecord { dlid: 0, ..good }],
            vec![PathRecord {
                dlid: 0xc000,
                ..good
            }],
            vec![PathRecord {
                pkey: 0x8001,
                ..good
            }],
            vec![PathRecord {
                reversible: false,
                ..good
            }],
        ] {
            assert!(
                matches!(check_path(&r, &bad), Err(SaError::Answer { .. })),
                "{bad:?}"
            );
        }
    }
}
