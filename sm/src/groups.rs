//! The multicast groups the SA keeps (MCMemberRecords with their members)
//! and the InformInfo subscriptions.

use std::collections::{BTreeMap, BTreeSet};

use rdma::mad::sa::{InformInfo, JoinState, McMemberRecord, Selector};
use rdma::Gid;

/// The IPoIB IPv4 broadcast group of the default partition, which the SM
/// creates (as OpenSM does).
pub const IPOIB_BROADCAST: [u8; 16] = [
    0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
];
/// The packet lifetime of the groups and paths the SA gives (OpenSM's
/// default).
pub(crate) const PACKET_LIFE: u8 = 0x12;
/// The default partition's P_Key, of every group and path.
pub(crate) const DEFAULT_PKEY: u16 = 0xffff;

/// A multicast group: its record and its members' join states.
#[derive(Clone, Debug)]
pub struct Group {
    /// The group (PortGID and JoinState unset).
    pub rec: McMemberRecord,
    /// Members by port GID.
    pub members: BTreeMap<[u8; 16], JoinState>,
    /// Kept when its last full member leaves.
    pub permanent: bool,
}

/// The groups, by MGID.
#[derive(Clone, Debug)]
pub struct Groups {
    /// By MGID.
    pub by_mgid: BTreeMap<[u8; 16], Group>,
    /// InformInfo subscriptions: the subscriber's LID and its InformInfo
    /// as the request gave it, one per (LID, trap number, generic). Kept,
    /// answered, listed as InformInfoRecords, and sent the Reports that
    /// match them (`sa::Reporter`).
    pub subscriptions: Vec<(u16, InformInfo)>,
    /// The members that another port joined for them (a proxy join), by
    /// MGID and port GID: a proxy may change or end their membership, as
    /// it may not that of a port that joined for itself.
    pub proxies: BTreeSet<([u8; 16], [u8; 16])>,
    /// The services registered (ServiceRecords), with their leases.
    pub services: Vec<crate::sa::Service>,
}

impl Default for Groups {
    fn default() -> Groups {
        let mut by_mgid = BTreeMap::new();
        by_mgid.insert(
            IPOIB_BROADCAST,
            Group {
                rec: McMemberRecord {
                    mgid: Gid(IPOIB_BROADCAST),
                    qkey: 0x0b1b,
                    mlid: 0xc000,
                    mtu_selector: Selector::Exactly,
                    mtu: 4,
                    pkey: DEFAULT_PKEY,
                    rate_selector: Selector::Exactly,
                    rate: 3,
                    packet_life_time_selector: Selector::Exactly,
                    packet_life_time: PACKET_LIFE,
                    scope: 2,
                    ..McMemberRecord::default()
                },
                members: BTreeMap::new(),
                permanent: true,
            },
        );
        Groups {
            by_mgid,
            subscriptions: Vec::new(),
            proxies: BTreeSet::new(),
            services: Vec::new(),
        }
    }
}

/// The multicast LIDs: 0xC000 to 0xFFFE (0xFFFF is the permissive LID).
pub(crate) const MLIDS: std::ops::RangeInclusive<u16> = 0xc000..=0xfffe;

impl Groups {
    /// The groups of the SM at start: the IPoIB broadcast group of each
    /// partition with the `ipoib` flag (MGID ff12:401b:PKEY::ffff:ffff,
    /// the partition's MTU, rate and SL, Q_Key 0x0b1b), as OpenSM creates
    /// them; in the partitions' order, from MLID 0xC000. Without a
    /// partitions file, the default partition's ([`Groups::default`]).
    pub fn for_partitions(p: &crate::partitions::Partitions) -> Groups {
        if p.is_default() {
            return Groups::default();
        }
        let mut g = Groups {
            by_mgid: BTreeMap::new(),
            ..Groups::default()
        };
        for part in p.list.iter().filter(|part| part.ipoib) {
            let Some(mlid) = g.free_mlid() else {
                break;
            };
            let mgid = crate::partitions::ipoib_broadcast_mgid(part.pkey);
            let rec = McMemberRecord {
                mgid: Gid(mgid),
                mlid,
                mtu: part.mtu,
                rate: part.rate,
                sl: part.sl,
                pkey: part.pkey | crate::partitions::FULL,
                ..Groups::default().by_mgid[&IPOIB_BROADCAST].rec
            };
            g.by_mgid.insert(
                mgid,
                Group {
                    rec,
                    members: BTreeMap::new(),
                    permanent: true,
                },
            );
        }
        g
    }

    /// The lowest multicast LID no group holds, for a new group; `None`
    /// when every one is taken. A group's MLID is free again once the
    /// group is gone, so that joins and leaves without end do not run out
    /// of them (nor of the switches' multicast forwarding tables, which
    /// hold the lowest MLIDs: 1,024 of them under ibsim).
    pub(crate) fn free_mlid(&self) -> Option<u16> {
        let used: BTreeSet<u16> = self.by_mgid.values().map(|g| g.rec.mlid).collect();
        MLIDS.into_iter().find(|m| !used.contains(m))
    }
}
