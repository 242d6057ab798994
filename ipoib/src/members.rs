//! The IP multicast groups that the kernel's sockets joined on the
//! interface, followed as IPoIB groups (RFC 4391 section 4), as Linux's
//! ib_ipoib follows the multicast list of its netdev.
//!
//! A TUN interface tells its program nothing of its memberships, but the
//! kernel lists them per interface index in `/proc/net/igmp` and
//! `/proc/net/igmp6`. The program reads both every second
//! ([`wanted`]), joins the MGID of each new group and attaches the QP to
//! it, and detaches and leaves the groups the kernel no longer has
//! ([`Members::sync`]). The groups joined at the start (the broadcast
//! group, the all-nodes and solicited-node groups) are not its to leave.
//!
//! Sending needs no join here: a datagram to a group goes to its MGID
//! whether or not this port is a member (RoCE needs no multicast LID; an
//! InfiniBand port would need a send-only join first).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use rdma::Gid;
use rdma_ipoib::mgid;

use crate::join::{Group, Joins};

/// At most this many groups besides those of the start; the rest wait
/// for a free slot (each reported once).
pub const MAX_GROUPS: usize = 64;
/// At most this many groups of each family are read from the kernel's
/// lists (the rest are not looked at): any local user can join thousands
/// on the interface, and the lists are read every second.
pub const MAX_READ: usize = 4 * MAX_GROUPS;
/// At most this many joins a sync: a join may wait for the CM.
pub const JOINS_PER_SYNC: usize = 4;
/// A group whose join or attach failed is tried again after this long.
pub const RETRY: Duration = Duration::from_secs(10);

/// The IPv4 groups of interface `ifindex` in `text`, the contents of
/// `/proc/net/igmp`: a line `IDX\tNAME : COUNT QUERIER` per interface,
/// then one line per group, starting with tabs, whose first field is the
/// group address as the kernel's `%08X` of its network-order word.
pub fn igmp(text: &str, ifindex: u32) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut current = None;
    for line in text.lines() {
        if line.starts_with('\t') {
            if current != Some(ifindex) {
                continue;
            }
            let word = line.split_whitespace().next().unwrap_or("");
            if let Ok(w) = u32::from_str_radix(word, 16) {
                if word.len() == 8 && out.len() < MAX_READ {
                    out.push(Ipv4Addr::from(w.to_ne_bytes()));
                }
            }
        } else {
            current = line
                .split_whitespace()
                .next()
                .and_then(|i| i.parse::<u32>().ok());
        }
    }
    out
}

/// The IPv6 groups of interface `ifindex` in `text`, the contents of
/// `/proc/net/igmp6`: one line per group, `IDX NAME ADDRESS USERS FLAGS
/// TIMER` with the address as 32 hexadecimal digits.
pub fn igmp6(text: &str, ifindex: u32) -> Vec<Ipv6Addr> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let idx: u32 = f.next()?.parse().ok()?;
            let hex = f.nth(1)?;
            if idx != ifindex || hex.len() != 32 {
                return None;
            }
            u128::from_str_radix(hex, 16).ok().map(Ipv6Addr::from)
        })
        .take(MAX_READ)
        .collect()
}

/// The IPoIB groups of the IP groups `v4` and `v6` in partition `pkey`,
/// each MGID once, in the order given. An interface-local IPv6 group
/// (scope 1) never leaves the host and has none.
pub fn wanted(v4: &[Ipv4Addr], v6: &[Ipv6Addr], pkey: u16) -> Vec<(Gid, IpAddr)> {
    let mut out: Vec<(Gid, IpAddr)> = Vec::new();
    let mut seen = HashSet::new();
    let v4 = v4
        .iter()
        .filter_map(|a| Some((mgid::ipv4(*a, pkey, mgid::LINK_LOCAL)?, IpAddr::V4(*a))));
    let v6 = v6
        .iter()
        .filter(|a| a.segments()[0] & 0x000f != 1)
        .filter_map(|a| Some((mgid::ipv6(*a, pkey, mgid::LINK_LOCAL)?, IpAddr::V6(*a))));
    for (g, ip) in v4.chain(v6) {
        if seen.insert(g) {
            out.push((g, ip));
        }
    }
    out
}

/// What a [`Members::sync`] did, for the log.
#[derive(Debug, PartialEq)]
pub enum Change {
    /// Joined the group of this IP group, and attached the QP.
    Joined(IpAddr, Gid),
    /// Detached and left it.
    Left(IpAddr, Gid),
    /// Could not join or attach (tried again after [`RETRY`] while the
    /// kernel keeps the group; reported when it first fails), or over
    /// [`MAX_GROUPS`] (joined when a slot is free; reported once).
    Failed(IpAddr, Gid, String),
}

/// The groups joined for the kernel's memberships.
pub struct Members {
    fixed: Vec<Gid>,
    joined: Vec<(Gid, IpAddr, Group)>,
    /// Groups whose join or attach failed, and when to try again.
    failed: HashMap<Gid, Instant>,
    /// Groups over the limit, reported.
    over: HashSet<Gid>,
}

impl Members {
    /// None joined yet; `fixed`, the groups of the start, are left alone.
    pub fn new(fixed: Vec<Gid>) -> Members {
        Members {
            fixed,
            joined: Vec::new(),
            failed: HashMap::new(),
            over: HashSet::new(),
        }
    }

    /// The groups joined for the kernel.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.joined.iter().map(|(_, _, g)| g)
    }

    /// Brings the joined groups to `wanted` (from [`wanted`]) at `now`:
    /// detaches (`attach(group, false)`) and leaves what is gone, then
    /// joins through `joins` and attaches with `attach(group, true)` what
    /// is new, at most [`JOINS_PER_SYNC`] of them (the rest at the next
    /// sync).
    pub fn sync(
        &mut self,
        wanted: &[(Gid, IpAddr)],
        now: Instant,
        joins: &mut dyn Joins,
        attach: &mut dyn FnMut(&Group, bool) -> rdma::Result<()>,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        let want: HashSet<Gid> = wanted.iter().map(|(g, _)| *g).collect();
        self.failed.retain(|g, _| want.contains(g));
        self.over.retain(|g| want.contains(g));
        let mut i = 0;
        while i < self.joined.len() {
            let (g, ip, group) = self.joined[i];
            if want.contains(&g) {
                i += 1;
                continue;
            }
            self.joined.swap_remove(i);
            let _ = attach(&group, false);
            joins.leave(g);
            changes.push(Change::Left(ip, g));
        }
        let have: HashSet<Gid> = self.joined.iter().map(|(g, _, _)| *g).collect();
        let mut tries = 0;
        for &(g, ip) in wanted {
            if self.fixed.contains(&g)
                || have.contains(&g)
                || self.failed.get(&g).is_some_and(|at| now < *at)
            {
                continue;
            }
            if self.joined.len() >= MAX_GROUPS {
                if self.over.insert(g) {
                    changes.push(Change::Failed(
                        ip,
                        g,
                        format!("more than {MAX_GROUPS} groups"),
                    ));
                }
                continue;
            }
            if tries == JOINS_PER_SYNC {
                break;
            }
            tries += 1;
            self.over.remove(&g);
            let first = self.failed.remove(&g).is_none();
            let result = joins.join(g).map_err(|e| e.to_string()).and_then(|group| {
                match attach(&group, true) {
                    Ok(()) => Ok(group),
                    Err(e) => {
                        joins.leave(g);
                        Err(format!("attaching the QP: {e}"))
                    }
                }
            });
            match result {
                Ok(group) => {
                    self.joined.push((g, ip, group));
                    changes.push(Change::Joined(ip, g));
                }
                Err(e) => {
                    self.failed.insert(g, now + RETRY);
                    if first {
                        changes.push(Change::Failed(ip, g, e));
                    }
                }
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma::Path;

    /// `/proc/net/igmp` of a host whose sockets joined 239.77.0.1 on
    /// interface 5 (and 224.0.0.251 on interface 2), as Linux 6.1 prints
    /// it on x86_64.
    const IGMP: &str = "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n\
1\tlo        :     1      V3\n\
\t\t\t\t010000E0     1 0:00000000\t\t0\n\
2\teth0      :     2      V3\n\
\t\t\t\tFB0000E0     1 0:00000000\t\t0\n\
\t\t\t\t010000E0     1 0:00000000\t\t0\n\
5\tipoib0    :     2      V3\n\
\t\t\t\t01004DEF     1 0:00000000\t\t0\n\
\t\t\t\t010000E0     1 0:00000000\t\t0\n";

    const IGMP6: &str = "\
1    lo              ff020000000000000000000000000001     1 0000000C 0
1    lo              ff010000000000000000000000000001     1 00000008 0
5    ipoib0          ff020000000000000000000000000001     1 0000000C 0
5    ipoib0          ff0200000000000000000001ff000002     1 00000004 0
5    ipoib0          ff010000000000000000000000000001     1 00000008 0
5    ipoib0          ff120000000000000000000000000077     1 00000004 0
";

    #[test]
    fn the_kernel_s_lists_are_read_for_one_interface() {
        assert_eq!(
            igmp(IGMP, 5),
            [Ipv4Addr::new(239, 77, 0, 1), Ipv4Addr::new(224, 0, 0, 1)]
        );
        assert_eq!(igmp(IGMP, 2)[0], Ipv4Addr::new(224, 0, 0, 251));
        assert!(igmp(IGMP, 3).is_empty());
        let v6 = igmp6(IGMP6, 5);
        assert_eq!(v6.len(), 4);
        assert_eq!(v6[3], "ff12::77".parse::<Ipv6Addr>().unwrap());
        assert_eq!(igmp6(IGMP6, 1).len(), 2);
    }

    #[test]
    fn hostile_lists_give_no_groups_and_no_panic() {
        for text in [
            "",
            "\t\t\t\t010000E0",
            "5\n\t\t\t\tZZZZZZZZ 1\n\t\t\t\t1 1\n\t\t\t\t0100004DEF 1",
            "5 ipoib0 ff02 1\n5\n5 ipoib0 gg020000000000000000000000000001 1",
            "x\t\n\t\n\n\t",
        ] {
            assert!(igmp(text, 5).is_empty(), "{text:?}");
            assert!(igmp6(text, 5).is_empty(), "{text:?}");
        }
    }

    #[test]
    fn interface_local_groups_are_not_wanted_and_mgids_come_once() {
        let w = wanted(&igmp(IGMP, 5), &igmp6(IGMP6, 5), 0xffff);
        let text: Vec<String> = w.iter().map(|(g, _)| g.to_ipv6().to_string()).collect();
        // ff01::1 maps to ff02::1's MGID, and is left out as interface-local.
        assert_eq!(
            text,
            [
                "ff12:401b:ffff::f4d:1",
                "ff12:401b:ffff::1",
                "ff12:601b:ffff::1",
                "ff12:601b:ffff::1:ff00:2",
                "ff12:601b:ffff::77",
            ]
        );
        // Two IPv4 groups of the same low 28 bits are one IPoIB group.
        let same = wanted(
            &[Ipv4Addr::new(239, 1, 2, 3), Ipv4Addr::new(225, 1, 2, 3)],
            &[],
            0xffff,
        );
        assert_eq!(same.len(), 2);
        let same = wanted(
            &[Ipv4Addr::new(239, 1, 2, 3), Ipv4Addr::new(239, 1, 2, 3)],
            &[],
            0xffff,
        );
        assert_eq!(same.len(), 1);
    }

    /// Joins that record what was asked, refusing the MGIDs of `refuse`.
    #[derive(Default)]
    struct Fake {
        joined: Vec<Gid>,
        left: Vec<Gid>,
        refuse: Vec<Gid>,
        tried: usize,
    }

    impl Joins for Fake {
        fn join(&mut self, mgid: Gid) -> Result<Group, Box<dyn std::error::Error>> {
            self.tried += 1;
            if self.refuse.contains(&mgid) {
                return Err("refused".into());
            }
            self.joined.push(mgid);
            Ok(Group {
                mgid,
                path: Path::to_gid(mgid, 0, 1),
                qkey: 1,
                mlid: 0,
            })
        }
        fn leave(&mut self, mgid: Gid) {
            self.left.push(mgid);
        }
        fn leave_all(&mut self) {}
    }

    fn g4(last: u8) -> (Gid, IpAddr) {
        let a = Ipv4Addr::new(239, 0, 0, last);
        (mgid::ipv4(a, 0xffff, 2).unwrap(), IpAddr::V4(a))
    }

    #[test]
    fn groups_are_joined_attached_detached_and_left_as_the_kernel_s() {
        let fixed = g4(1);
        let now = Instant::now();
        let mut m = Members::new(vec![fixed.0]);
        let mut j = Fake::default();
        let mut attached: Vec<(Gid, bool)> = Vec::new();
        let mut at = |g: &Group, on: bool| {
            attached.push((g.mgid, on));
            Ok(())
        };
        let c = m.sync(&[fixed, g4(2), g4(3)], now, &mut j, &mut at);
        assert_eq!(
            c,
            [
                Change::Joined(g4(2).1, g4(2).0),
                Change::Joined(g4(3).1, g4(3).0)
            ]
        );
        // The same list again: nothing.
        assert!(m
            .sync(&[fixed, g4(2), g4(3)], now, &mut j, &mut at)
            .is_empty());
        // 2 gone, and the fixed group gone from the kernel's list: only 2
        // is left.
        let c = m.sync(&[g4(3)], now, &mut j, &mut at);
        assert_eq!(c, [Change::Left(g4(2).1, g4(2).0)]);
        assert_eq!(m.groups().count(), 1);
        assert_eq!(j.joined, [g4(2).0, g4(3).0]);
        assert_eq!(j.left, [g4(2).0]);
        assert_eq!(
            attached,
            [(g4(2).0, true), (g4(3).0, true), (g4(2).0, false)]
        );
    }

    #[test]
    fn a_failed_group_is_reported_once_and_tried_again_after_a_while() {
        let t0 = Instant::now();
        let mut m = Members::new(Vec::new());
        let mut j = Fake {
            refuse: vec![g4(2).0],
            ..Fake::default()
        };
        let mut ok = |_: &Group, _: bool| Ok(());
        let c = m.sync(&[g4(2)], t0, &mut j, &mut ok);
        assert!(matches!(&c[..], [Change::Failed(_, g, e)] if *g == g4(2).0 && e == "refused"));
        // Not before RETRY; then tried, and quiet while it still fails.
        assert!(m.sync(&[g4(2)], t0 + RETRY / 2, &mut j, &mut ok).is_empty());
        assert_eq!(j.tried, 1);
        assert!(m.sync(&[g4(2)], t0 + RETRY, &mut j, &mut ok).is_empty());
        assert_eq!(j.tried, 2);
        // The error passes: joined at the next try.
        j.refuse.clear();
        assert_eq!(
            m.sync(&[g4(2)], t0 + RETRY * 2, &mut j, &mut ok),
            [Change::Joined(g4(2).1, g4(2).0)]
        );
        // Gone and back: tried at once.
        let mut m = Members::new(Vec::new());
        j.refuse = vec![g4(5).0];
        assert_eq!(m.sync(&[g4(5)], t0, &mut j, &mut ok).len(), 1);
        assert!(m.sync(&[], t0, &mut j, &mut ok).is_empty());
        j.refuse.clear();
        assert_eq!(m.sync(&[g4(5)], t0, &mut j, &mut ok).len(), 1);
        assert_eq!(m.groups().count(), 1);
        // A failed attach leaves the group it joined.
        let mut bad = |_: &Group, _: bool| Err(rdma::Error::new("ibv_attach_mcast", libc::ENOMEM));
        let c = m.sync(&[g4(5), g4(3)], t0, &mut j, &mut bad);
        assert!(matches!(&c[..], [Change::Failed(_, g, _)] if *g == g4(3).0));
        assert_eq!(j.left, [g4(3).0]);
        assert_eq!(m.groups().count(), 1);
    }

    #[test]
    fn a_flood_of_memberships_joins_a_few_a_sync_and_at_most_max_groups() {
        let now = Instant::now();
        let mut m = Members::new(Vec::new());
        let mut j = Fake::default();
        let mut ok = |_: &Group, _: bool| Ok(());
        let many: Vec<_> = (0..1000u32)
            .map(|i| {
                let a = Ipv4Addr::from(0xef00_0000 | i);
                (mgid::ipv4(a, 0xffff, 2).unwrap(), IpAddr::V4(a))
            })
            .collect();
        let c = m.sync(&many, now, &mut j, &mut ok);
        assert_eq!(c.len(), JOINS_PER_SYNC);
        let mut c = Vec::new();
        for _ in 1..MAX_GROUPS / JOINS_PER_SYNC {
            c.extend(m.sync(&many, now, &mut j, &mut ok));
        }
        assert_eq!(j.joined.len(), MAX_GROUPS);
        // The rest, once the limit is reached: reported once each.
        let failed = c.iter().filter(|c| matches!(c, Change::Failed(..))).count();
        assert_eq!(failed, 1000 - MAX_GROUPS);
        assert!(m.sync(&many, now, &mut j, &mut ok).is_empty());
        assert_eq!(j.tried, MAX_GROUPS);
        // One gone: its slot goes to a waiting group at once.
        let fewer = &many[1..];
        let c = m.sync(fewer, now, &mut j, &mut ok);
        assert_eq!(
            c,
            [
                Change::Left(many[0].1, many[0].0),
                Change::Joined(many[MAX_GROUPS].1, many[MAX_GROUPS].0)
            ]
        );
        assert_eq!(m.groups().count(), MAX_GROUPS);
    }

    #[test]
    fn the_lists_read_are_bounded() {
        let mut text = String::from("5\tipoib0    :  2000      V3\n");
        let mut text6 = String::new();
        for i in 0..2000u32 {
            text += &format!(
                "\t\t\t\t{:08X}     1 0:00000000\t\t0\n",
                (0xef00_0000u32 | i).swap_bytes()
            );
            text6 += &format!("5    ipoib0          ff12{:028x}     1 00000004 0\n", i);
        }
        assert_eq!(igmp(&text, 5).len(), MAX_READ);
        assert_eq!(igmp6(&text6, 5).len(), MAX_READ);
        assert_eq!(igmp(&text, 5)[1], Ipv4Addr::new(239, 0, 0, 1));
    }
}
