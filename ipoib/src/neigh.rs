//! The neighbour table: each peer's IP address to its link-layer address,
//! as ARP and neighbour discovery resolve them, bounded in size.
//!
//! An address being resolved is *incomplete*: packets for it wait (a few,
//! [`Limits::queue`]) while solicitations go out every
//! [`Limits::retry`], at most [`Limits::tries`] times; then the packets are
//! dropped. A resolved entry is *reachable* for [`Limits::reachable`],
//! then *stale*: it is still used, and a new solicitation refreshes it; a
//! stale entry unused for [`Limits::gc`] is removed. An answer that gives a
//! new address (the peer's program restarted with another QPN) replaces
//! the old one and says so, so that the address handles made for it can
//! go. The table holds at most [`Limits::entries`] entries and at most
//! [`Limits::incomplete`] incomplete ones: a flood of packets to unknown
//! addresses, or of requests, cannot grow it. An entry that a request
//! alone made (its sender, unasked) is *unsolicited* until a packet is sent
//! to it (answers and other requests naming it do not change that), and room for a new entry is taken from
//! the unsolicited ones first (the least recently made), then from stale
//! ones: a flood of requests from made-up senders churns among its own
//! entries and never keeps out a neighbour the program resolves. Time is
//! passed in.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::LinkAddr;

/// The table's bounds and timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Entries in all.
    pub entries: usize,
    /// Incomplete entries.
    pub incomplete: usize,
    /// Packets waiting per incomplete entry.
    pub queue: usize,
    /// Solicitations per resolution.
    pub tries: u32,
    /// Between solicitations.
    pub retry: Duration,
    /// How long an answer holds.
    pub reachable: Duration,
    /// How long an unused stale entry is kept.
    pub gc: Duration,
}

impl Default for Limits {
    /// Linux's defaults where it has them (3 tries a second apart, 30 s
    /// reachable, 3 packets queued), and 1,024 entries.
    fn default() -> Limits {
        Limits {
            entries: 1024,
            incomplete: 64,
            queue: 3,
            tries: 3,
            retry: Duration::from_secs(1),
            reachable: Duration::from_secs(30),
            gc: Duration::from_secs(60),
        }
    }
}

enum State<T> {
    Incomplete {
        tries: u32,
        last: Instant,
        waiting: VecDeque<T>,
    },
    Resolved {
        addr: LinkAddr,
        confirmed: Instant,
        used: Instant,
        /// Made by a request alone: neither sent to nor answered since.
        unsolicited: bool,
    },
}

/// What to do with a packet for an address.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Send it to this address.
    Send(LinkAddr),
    /// Send it to this address, and send a solicitation to refresh it
    /// (the entry is stale).
    SendAndRefresh(LinkAddr),
    /// The address is being resolved: queue the packet with
    /// [`Table::wait`]; send a solicitation first when `solicit`.
    Resolve {
        /// Whether a solicitation is due now (a new entry).
        solicit: bool,
    },
    /// No room for another address being resolved: drop the packet.
    Full,
}

/// What an answer did to the table.
#[derive(Debug, PartialEq, Eq)]
pub enum Learned<T> {
    /// A new address, or one that was being resolved: these packets waited
    /// for it.
    New(Vec<T>),
    /// The address it already had, confirmed.
    Same,
    /// Another address than before: the old one's address handles can go.
    Changed(LinkAddr),
    /// Not taken: the table is full of entries in use.
    Full,
}

/// What [`Table::tick`] found due.
#[derive(Debug, PartialEq, Eq)]
pub struct Due<T> {
    /// Addresses to solicit again.
    pub solicit: Vec<IpAddr>,
    /// Packets whose address was not resolved in time.
    pub dropped: Vec<T>,
}

/// The neighbour table; `T` is what waits for an address (a packet or a
/// handle of one).
pub struct Table<T> {
    limits: Limits,
    entries: HashMap<IpAddr, State<T>>,
    incomplete: usize,
}

impl<T> Table<T> {
    /// An empty table.
    pub fn new(limits: Limits) -> Table<T> {
        Table {
            limits,
            entries: HashMap::new(),
            incomplete: 0,
        }
    }

    /// Entries in all.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Incomplete entries.
    pub fn incomplete(&self) -> usize {
        self.incomplete
    }

    /// The resolved address of `ip`, if any.
    pub fn get(&self, ip: IpAddr) -> Option<LinkAddr> {
        match self.entries.get(&ip)? {
            State::Resolved { addr, .. } => Some(*addr),
            State::Incomplete { .. } => None,
        }
    }

    /// The resolved entries, in address order.
    pub fn resolved(&self) -> Vec<(IpAddr, LinkAddr)> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .filter_map(|(ip, e)| match e {
                State::Resolved { addr, .. } => Some((*ip, *addr)),
                State::Incomplete { .. } => None,
            })
            .collect();
        v.sort_unstable_by_key(|(ip, _)| *ip);
        v
    }

    /// Where a packet for `ip` goes at `now`.
    pub fn lookup(&mut self, ip: IpAddr, now: Instant) -> Lookup {
        match self.entries.get_mut(&ip) {
            Some(State::Resolved {
                addr,
                confirmed,
                used,
                unsolicited,
            }) => {
                *used = now;
                *unsolicited = false;
                if now.saturating_duration_since(*confirmed) < self.limits.reachable {
                    Lookup::Send(*addr)
                } else {
                    // One refresh per reachable period: count from now.
                    *confirmed = now - self.limits.reachable + self.limits.retry;
                    Lookup::SendAndRefresh(*addr)
                }
            }
            Some(State::Incomplete { .. }) => Lookup::Resolve { solicit: false },
            None => {
                if self.incomplete >= self.limits.incomplete || !self.make_room(now) {
                    return Lookup::Full;
                }
                self.entries.insert(
                    ip,
                    State::Incomplete {
                        tries: 1,
                        last: now,
                        waiting: VecDeque::new(),
                    },
                );
                self.incomplete += 1;
                Lookup::Resolve { solicit: true }
            }
        }
    }

    /// Queues `item` for incomplete `ip`; gives it back when the queue is
    /// full or `ip` is not being resolved.
    pub fn wait(&mut self, ip: IpAddr, item: T) -> Result<(), T> {
        match self.entries.get_mut(&ip) {
            Some(State::Incomplete { waiting, .. }) if waiting.len() < self.limits.queue => {
                waiting.push_back(item);
                Ok(())
            }
            _ => Err(item),
        }
    }

    /// An answer: `ip` is at `addr` (an ARP reply or request naming it, a
    /// neighbour advertisement or solicitation). `create`: take it even if
    /// the table has no entry for `ip` (a request addressed to us, whose
    /// sender we will answer); otherwise only entries that exist change.
    /// A new entry made by `create` is unsolicited (see the module's text)
    /// until a packet is sent to it.
    pub fn learn(&mut self, ip: IpAddr, addr: LinkAddr, now: Instant, create: bool) -> Learned<T> {
        let resolved = State::Resolved {
            addr,
            confirmed: now,
            used: now,
            unsolicited: false,
        };
        match self.entries.get_mut(&ip) {
            Some(State::Resolved {
                addr: old,
                confirmed,
                ..
            }) => {
                // An unsolicited entry stays so: only traffic to it
                // (`lookup`) makes it one the program uses; answers and
                // requests naming it, which anyone can send, do not.
                *confirmed = now;
                if *old == addr {
                    Learned::Same
                } else {
                    let was = *old;
                    *old = addr;
                    Learned::Changed(was)
                }
            }
            Some(e @ State::Incomplete { .. }) => {
                let State::Incomplete { waiting, .. } = std::mem::replace(e, resolved) else {
                    unreachable!("matched Incomplete")
                };
                self.incomplete -= 1;
                Learned::New(waiting.into())
            }
            None if create => {
                if !self.make_room(now) {
                    return Learned::Full;
                }
                self.entries.insert(
                    ip,
                    State::Resolved {
                        addr,
                        confirmed: now,
                        used: now,
                        unsolicited: true,
                    },
                );
                Learned::New(Vec::new())
            }
            None => Learned::Same,
        }
    }

    /// Forgets `ip` (its peer went away); the packets that waited for it.
    pub fn forget(&mut self, ip: IpAddr) -> Vec<T> {
        match self.entries.remove(&ip) {
            Some(State::Incomplete { waiting, .. }) => {
                self.incomplete -= 1;
                waiting.into()
            }
            _ => Vec::new(),
        }
    }

    /// The solicitations due at `now`, and the packets of resolutions that
    /// gave up; removes stale entries unused for [`Limits::gc`].
    pub fn tick(&mut self, now: Instant) -> Due<T> {
        let mut due = Due {
            solicit: Vec::new(),
            dropped: Vec::new(),
        };
        let l = self.limits;
        let mut gone = Vec::new();
        for (ip, e) in self.entries.iter_mut() {
            match e {
                State::Incomplete { tries, last, .. } => {
                    if now.saturating_duration_since(*last) < l.retry {
                        continue;
                    }
                    if *tries >= l.tries {
                        gone.push(*ip);
                    } else {
                        *tries += 1;
                        *last = now;
                        due.solicit.push(*ip);
                    }
                }
                State::Resolved {
                    confirmed, used, ..
                } => {
                    let stale = now.saturating_duration_since(*confirmed) >= l.reachable;
                    if stale && now.saturating_duration_since(*used) >= l.gc {
                        gone.push(*ip);
                    }
                }
            }
        }
        for ip in gone {
            due.dropped.extend(self.forget(ip));
        }
        due.solicit.sort_unstable();
        due
    }

    /// Room for one more entry: true when there is, after removing, if the
    /// table is full, the least recently made unsolicited entry, else the
    /// least recently used stale one.
    fn make_room(&mut self, now: Instant) -> bool {
        if self.entries.len() < self.limits.entries {
            return true;
        }
        let victim = self
            .entries
            .iter()
            .filter_map(|(ip, e)| match e {
                State::Resolved {
                    confirmed,
                    used,
                    unsolicited,
                    ..
                } if *unsolicited
                    || now.saturating_duration_since(*confirmed) >= self.limits.reachable =>
                {
                    Some((!*unsolicited, *used, *ip))
                }
                _ => None,
            })
            .min()
            .map(|(_, used, ip)| (used, ip));
        match victim {
            Some((_, ip)) => {
                self.entries.remove(&ip);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use rdma::Gid;

    #[test]
    fn resolved_lists_answered_entries_only() {
        let now = Instant::now();
        let mut t: Table<u8> = Table::new(Limits::default());
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            Ipv4Addr::new(10, 0, 0, 3).into(),
            Ipv4Addr::new(10, 0, 0, 1).into(),
            Ipv4Addr::new(10, 0, 0, 2).into(),
        );
        assert_eq!(t.lookup(a, now), Lookup::Resolve { solicit: true });
        assert_eq!(t.learn(b, addr(2), now, true), Learned::New(vec![]));
        assert_eq!(t.learn(c, addr(1), now, true), Learned::New(vec![]));
        assert_eq!(t.resolved(), vec![(b, addr(2)), (c, addr(1))]);
        assert_eq!(t.learn(a, addr(3), now, false), Learned::New(vec![]));
        assert_eq!(t.resolved().len(), 3);
    }

    fn addr(qpn: u32) -> LinkAddr {
        LinkAddr::new(0, qpn, Gid([0xfe; 16]))
    }

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n))
    }

    fn small() -> Limits {
        Limits {
            entries: 4,
            incomplete: 2,
            queue: 2,
            tries: 3,
            retry: Duration::from_secs(1),
            reachable: Duration::from_secs(30),
            gc: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_resolution_queues_solicits_and_releases_in_order() {
        let t0 = Instant::now();
        let mut t: Table<u32> = Table::new(small());
        assert_eq!(t.lookup(ip(1), t0), Lookup::Resolve { solicit: true });
        assert_eq!(t.wait(ip(1), 10), Ok(()));
        assert_eq!(t.lookup(ip(1), t0), Lookup::Resolve { solicit: false });
        assert_eq!(t.wait(ip(1), 11), Ok(()));
        assert_eq!(t.wait(ip(1), 12), Err(12), "the queue holds 2");
        assert_eq!(t.wait(ip(2), 13), Err(13), "no resolution of ip 2");
        // Retries a second apart.
        assert!(t.tick(t0 + Duration::from_millis(500)).solicit.is_empty());
        assert_eq!(t.tick(t0 + Duration::from_secs(1)).solicit, [ip(1)]);
        assert_eq!(
            t.learn(ip(1), addr(7), t0, false),
            Learned::New(vec![10, 11])
        );
        assert_eq!(t.incomplete(), 0);
        assert_eq!(t.lookup(ip(1), t0), Lookup::Send(addr(7)));
    }

    #[test]
    fn a_resolution_that_gets_no_answer_gives_up_and_drops_its_packets() {
        let t0 = Instant::now();
        let mut t: Table<u32> = Table::new(small());
        t.lookup(ip(1), t0);
        t.wait(ip(1), 1).unwrap();
        let s = Duration::from_secs(1);
        assert_eq!(t.tick(t0 + s).solicit, [ip(1)]);
        assert_eq!(t.tick(t0 + 2 * s).solicit, [ip(1)]);
        let due = t.tick(t0 + 3 * s);
        assert_eq!(
            due,
            Due {
                solicit: vec![],
                dropped: vec![1]
            }
        );
        assert!(t.is_empty());
        assert_eq!(t.incomplete(), 0);
    }

    /// The peer restarted: its new QPN replaces the old, which is named so
    /// that its address handle can go; a stale entry is refreshed while it
    /// is used, once per period.
    #[test]
    fn a_new_address_replaces_the_old_and_stale_entries_refresh() {
        let t0 = Instant::now();
        let mut t: Table<u32> = Table::new(small());
        assert_eq!(t.learn(ip(1), addr(7), t0, true), Learned::New(vec![]));
        assert_eq!(t.learn(ip(1), addr(7), t0, false), Learned::Same);
        assert_eq!(
            t.learn(ip(1), addr(9), t0, false),
            Learned::Changed(addr(7))
        );
        assert_eq!(t.get(ip(1)), Some(addr(9)));
        let later = t0 + Duration::from_secs(31);
        assert_eq!(t.lookup(ip(1), later), Lookup::SendAndRefresh(addr(9)));
        assert_eq!(t.lookup(ip(1), later), Lookup::Send(addr(9)));
        // An unused stale entry is collected.
        assert!(t.tick(later + Duration::from_secs(59)).dropped.is_empty());
        assert_eq!(t.len(), 1);
        t.tick(later + Duration::from_secs(61));
        assert!(t.is_empty());
        // Answers for addresses never asked for are not taken.
        assert_eq!(t.learn(ip(5), addr(5), t0, false), Learned::Same);
        assert!(t.is_empty());
    }

    /// A flood of packets to unknown addresses and of requests: the table
    /// stays within its bounds, entries in use are never evicted, stale
    /// ones are when room is needed.
    #[test]
    fn floods_stay_within_the_bounds() {
        let t0 = Instant::now();
        let mut t: Table<u32> = Table::new(small());
        let mut full = 0;
        for n in 0..1000 {
            if t.lookup(ip(100 + n), t0) == Lookup::Full {
                full += 1;
            }
        }
        assert_eq!((t.incomplete(), full), (2, 998));
        for n in 0..1000 {
            t.learn(ip(1000 + n), addr(n), t0, true);
        }
        assert_eq!(t.len(), 4, "the table holds 4");
        // The two incomplete entries and the last two senders.
        assert_eq!(t.resolved(), [(ip(1998), addr(998)), (ip(1999), addr(999))]);
        // Once the resolved entries are stale, a new one takes the least
        // recently used one's place.
        for n in [1998, 1999] {
            t.lookup(ip(n), t0);
        }
        let later = t0 + Duration::from_secs(40);
        assert_eq!(
            t.learn(ip(5000), addr(1), later, true),
            Learned::New(vec![])
        );
        assert_eq!(t.len(), 4);
        assert_eq!(t.get(ip(5000)), Some(addr(1)));
    }

    /// Each made-up sender named twice, by a request for us (which makes
    /// its entry) and by an answer or a request for another address (which
    /// confirms it): the entries stay unsolicited, and a neighbour the
    /// program resolves still gets in.
    #[test]
    fn a_flood_that_names_each_sender_twice_still_makes_room() {
        let t0 = Instant::now();
        let mut t: Table<u32> = Table::new(small());
        for n in 0..1000 {
            t.learn(ip(1000 + n), addr(n), t0, true);
            t.learn(ip(1000 + n), addr(n), t0, false);
        }
        let soon = t0 + Duration::from_secs(29);
        assert_eq!(t.lookup(ip(1), soon), Lookup::Resolve { solicit: true });
        assert_eq!(t.learn(ip(1), addr(1), soon, false), Learned::New(vec![]));
        assert_eq!(t.get(ip(1)), Some(addr(1)));
    }

    /// Requests from made-up senders fill the table, then a neighbour the
    /// program resolves still gets in (a made-up one makes room), and
    /// neither it nor an entry that traffic uses is pushed out by more of
    /// the flood; with only neighbours in use left, the flood is refused.
    /// (Before unsolicited entries, a flood kept a new neighbour out until
    /// its entries went stale, 30 s.)
    #[test]
    fn a_flood_of_requests_never_keeps_out_or_pushes_out_a_neighbour_in_use() {
        let t0 = Instant::now();
        let mut t: Table<u32> = Table::new(small());
        // A peer that asked first, and whose address traffic then uses.
        assert_eq!(t.learn(ip(7), addr(7), t0, true), Learned::New(vec![]));
        assert_eq!(t.lookup(ip(7), t0), Lookup::Send(addr(7)));
        for n in 0..1000 {
            assert_eq!(
                t.learn(ip(1000 + n), addr(n), t0, true),
                Learned::New(vec![])
            );
        }
        assert_eq!(t.len(), 4);
        assert_eq!(t.lookup(ip(1), t0), Lookup::Resolve { solicit: true });
        assert_eq!(t.learn(ip(1), addr(1), t0, false), Learned::New(vec![]));
        for n in 0..1000 {
            t.learn(ip(3000 + n), addr(n), t0, true);
        }
        assert_eq!(t.get(ip(1)), Some(addr(1)));
        assert_eq!(t.get(ip(7)), Some(addr(7)));
        assert_eq!(t.len(), 4);
        // Two more neighbours in use: no unsolicited entry is left, none is
        // stale, and the flood gets no room.
        for n in [2, 3] {
            assert_eq!(t.lookup(ip(n), t0), Lookup::Resolve { solicit: true });
            assert_eq!(t.learn(ip(n), addr(n), t0, false), Learned::New(vec![]));
        }
        assert_eq!(t.learn(ip(9000), addr(9), t0, true), Learned::Full);
        let in_use: Vec<IpAddr> = t.resolved().into_iter().map(|(ip, _)| ip).collect();
        assert_eq!(in_use, [ip(1), ip(2), ip(3), ip(7)]);
    }
}
