//! LIDs of end ports by port GUID, with the LID Mask Control (LMC): each
//! CA or router port gets a block of 2^LMC LIDs, its base LID aligned to
//! the block (IBA 7.11.1), assigned once and kept across sweeps.
//!
//! A CA's or router's port answers to every LID of its block (the low LMC
//! bits are its path bits: one route per LID, spread by the routing
//! engines over different links). A switch's port 0 has one LID (LMC 0 on
//! a base switch port 0, as OpenSM without `lmc_esp0`), any free one: as
//! OpenSM, switches fill the LIDs that the CAs' blocks leave, and keep an
//! unaligned LID they hold.

use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;

use super::{NodeId, NodeKind, Topology};

/// The highest unicast LID.
pub const MAX_UNICAST_LID: u16 = 0xbfff;

/// The highest LMC (a 3-bit field of PortInfo).
pub const MAX_LMC: u8 = 7;

/// Whether `lid` is a unicast LID (1-0xbfff).
fn is_unicast(lid: u16) -> bool {
    (1..=MAX_UNICAST_LID).contains(&lid)
}

/// The LIDs of one end port: the base LID and how many LIDs from it the
/// port answers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    base: u16,
    /// The port's LMC: 0 on a switch's port 0, the subnet's on others.
    lmc: u8,
}

impl Block {
    fn lids(self) -> RangeInclusive<u16> {
        self.base..=self.base + ((1u16 << self.lmc) - 1)
    }
}

/// LIDs of end ports by port GUID, assigned once and kept: a port that
/// comes back gets its LIDs again. Unicast LIDs 1-0xbfff, a CA port's in
/// an aligned block of 2^LMC (see the module's text).
///
/// A master that starts on a running fabric keeps the LIDs the ports
/// already have ([`Lids::keep_current`], from their PortInfo), then the
/// LIDs an earlier run wrote ([`Lids::remember`], OpenSM's `guid2lid`),
/// and only then hands out new ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lids {
    lmc: u8,
    by_guid: HashMap<u64, Block>,
    /// Every LID of every block of `by_guid`.
    used: HashSet<u16>,
    /// Base LIDs of an earlier run, by port GUID, given back when free.
    remembered: HashMap<u64, u16>,
    /// The LIDs of `remembered`: new ports take others first.
    reserved: HashSet<u16>,
    /// Below these, every LID (switches) and every block (CAs) is taken:
    /// where the search for a free one starts (LIDs are never given back
    /// within a run).
    next_lid: u32,
    next_block: u32,
}

impl Default for Lids {
    fn default() -> Lids {
        Lids::new()
    }
}

impl Lids {
    /// No LIDs assigned yet; LMC 0.
    pub fn new() -> Lids {
        Lids {
            lmc: 0,
            by_guid: HashMap::new(),
            used: HashSet::new(),
            remembered: HashMap::new(),
            reserved: HashSet::new(),
            next_lid: 1,
            next_block: 1,
        }
    }

    /// No LIDs assigned yet, end ports other than a switch's port 0 to get
    /// 2^`lmc` LIDs each; `None` when `lmc` is above [`MAX_LMC`].
    pub fn with_lmc(lmc: u8) -> Option<Lids> {
        (lmc <= MAX_LMC).then(|| Lids {
            lmc,
            next_block: 1 << lmc,
            ..Lids::new()
        })
    }

    /// The subnet's LMC.
    pub fn lmc(&self) -> u8 {
        self.lmc
    }

    /// The LMC of an end port of a node of `kind`: 0 on a switch's port 0.
    fn lmc_for(&self, kind: NodeKind) -> u8 {
        match kind {
            NodeKind::Switch => 0,
            _ => self.lmc,
        }
    }

    /// Whether `base` can start the LIDs of a port of LMC `lmc`: unicast,
    /// aligned to 2^`lmc`, the last LID at most [`MAX_UNICAST_LID`], and
    /// none of them in `taken`.
    fn fits(&self, base: u16, lmc: u8, taken: &HashSet<u16>) -> bool {
        let size = 1u32 << lmc;
        is_unicast(base)
            && u32::from(base) % size == 0
            && u32::from(base) + size - 1 <= u32::from(MAX_UNICAST_LID)
            && (u32::from(base)..u32::from(base) + size).all(|l| !taken.contains(&(l as u16)))
    }

    fn insert(&mut self, guid: u64, base: u16, lmc: u8) {
        let b = Block { base, lmc };
        self.used.extend(b.lids());
        self.by_guid.insert(guid, b);
    }

    /// Gives each end port of `current` (node, port, the LID its PortInfo
    /// holds) that has no LID here the one it holds, when its LIDs are
    /// free here and, on a CA port, the LID starts a block of the subnet's
    /// LMC (a LID off the block is moved, as OpenSM does; a switch keeps any
    /// unicast LID): the LIDs of a running fabric stay as they are when a
    /// new master takes it over. In the order given (the first of two ports
    /// holding one LID keeps it); entries that are not end ports of `topo`
    /// are skipped. Returns how many were kept.
    pub fn keep_current(
        &mut self,
        topo: &Topology,
        current: impl IntoIterator<Item = (NodeId, u8, u16)>,
    ) -> usize {
        let mut kept = 0;
        for (id, port, lid) in current {
            if id.0 >= topo.len() || !topo.node(id).end_ports().any(|p| p == port) {
                continue;
            }
            let node = topo.node(id);
            let g = node.port_guid(port);
            let lmc = self.lmc_for(node.kind);
            if self.by_guid.contains_key(&g) || !self.fits(lid, lmc, &self.used) {
                continue;
            }
            self.insert(g, lid, lmc);
            kept += 1;
        }
        kept
    }

    /// Remembers base LIDs of an earlier run (port GUID, LID; OpenSM's
    /// `guid2lid`): [`Lids::assign`] gives a port without a LID its
    /// remembered one when it fits the port (as for
    /// [`Lids::keep_current`]) and is free. LIDs that are not unicast are
    /// ignored.
    pub fn remember(&mut self, entries: impl IntoIterator<Item = (u64, u16)>) {
        for (g, l) in entries {
            if is_unicast(l) {
                self.remembered.insert(g, l);
                self.reserved.insert(l);
            }
        }
    }

    /// Gives every end port of `topo` without a LID its remembered LID if
    /// it fits and is free, else the lowest free LID (a switch) or block
    /// (a CA port) that no remembered LID is in, in node order (the
    /// sweep's, so the SM's own port first). Returns how many were new;
    /// stops when the unicast LIDs run out.
    pub fn assign(&mut self, topo: &Topology) -> usize {
        let mut new = 0;
        for (_, n) in topo.nodes() {
            let lmc = self.lmc_for(n.kind);
            for p in n.end_ports() {
                let g = n.port_guid(p);
                if self.by_guid.contains_key(&g) {
                    continue;
                }
                let base = match self.remembered.get(&g) {
                    Some(&l) if self.fits(l, lmc, &self.used) => l,
                    _ => match self.take_next(lmc) {
                        Some(l) => l,
                        None => return new,
                    },
                };
                self.insert(g, base, lmc);
                new += 1;
            }
        }
        new
    }

    /// The lowest free LID (LMC 0) or aligned block (the subnet's LMC)
    /// with no LID used or remembered.
    fn take_next(&mut self, lmc: u8) -> Option<u16> {
        let size = 1u32 << lmc;
        let next = if lmc == 0 {
            &mut self.next_lid
        } else {
            &mut self.next_block
        };
        while *next + size - 1 <= u32::from(MAX_UNICAST_LID) {
            let l = *next as u16;
            let free = (*next..*next + size)
                .all(|x| !self.used.contains(&(x as u16)) && !self.reserved.contains(&(x as u16)));
            if free {
                return Some(l);
            }
            *next += size;
        }
        None
    }

    /// The base LID of the port with GUID `guid`.
    pub fn get(&self, guid: u64) -> Option<u16> {
        self.by_guid.get(&guid).map(|b| b.base)
    }

    /// The base LID of end port `port` of `id`.
    pub fn of(&self, topo: &Topology, id: NodeId, port: u8) -> Option<u16> {
        self.get(topo.node(id).port_guid(port))
    }

    /// Every LID the port with GUID `guid` answers to: its base LID and
    /// the 2^LMC - 1 after it (the base alone on a switch).
    pub fn range(&self, guid: u64) -> Option<RangeInclusive<u16>> {
        self.by_guid.get(&guid).map(|b| b.lids())
    }

    /// The LMC of the port with GUID `guid` (0 on a switch's port 0).
    pub fn lmc_of(&self, guid: u64) -> Option<u8> {
        self.by_guid.get(&guid).map(|b| b.lmc)
    }

    /// Every (port GUID, base LID).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u16)> + '_ {
        self.by_guid.iter().map(|(&g, b)| (g, b.base))
    }

    /// Every (port GUID, LID) of every LID of every port.
    pub fn iter_all(&self) -> impl Iterator<Item = (u64, u16)> + '_ {
        self.by_guid
            .iter()
            .flat_map(|(&g, b)| b.lids().map(move |l| (g, l)))
    }

    /// The highest LID a port answers to (0 when none).
    pub fn max_lid(&self) -> u16 {
        self.by_guid
            .values()
            .map(|b| *b.lids().end())
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::ring;
    use super::*;

    #[test]
    fn lids_are_kept_for_ports_that_return() {
        let (mut t, s, h) = ring(3);
        let mut lids = Lids::new();
        assert_eq!(lids.assign(&t), 6);
        let before = lids.of(&t, h[1], 1).unwrap();
        t.unlink(h[1], 1);
        assert_eq!(lids.assign(&t), 0);
        t.link(s[1], 3, h[1], 1).unwrap();
        assert_eq!(lids.assign(&t), 0);
        assert_eq!(lids.of(&t, h[1], 1), Some(before));
        let all: Vec<u16> = {
            let mut v: Vec<u16> = lids.iter().map(|(_, l)| l).collect();
            v.sort();
            v
        };
        assert_eq!(all, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(lids.max_lid(), 6);
    }

    #[test]
    fn a_new_master_keeps_the_lids_ports_hold_then_remembered_ones() {
        let (t, sw, hca) = ring(3);
        let g = |id: NodeId, p: u8| t.node(id).port_guid(p);
        let mut lids = Lids::new();
        // Held: the first HCA 40, a switch 7; a second port claiming 40,
        // and LIDs that are not unicast, are not kept; a port that is not
        // an end port (a switch's port 1) is skipped.
        let kept = lids.keep_current(
            &t,
            [
                (hca[0], 1, 40),
                (sw[1], 0, 7),
                (hca[1], 1, 40),
                (hca[2], 1, 0),
                (sw[2], 0, 0xc000),
                (sw[0], 1, 9),
                (NodeId(99), 1, 11),
            ],
        );
        assert_eq!(kept, 2);
        // Remembered: hca[1] had 3 (free: given back); sw[0] had 7 (held
        // by sw[1]: a new one); hca[2] had 0 (not unicast: a new one).
        lids.remember([(g(hca[1], 1), 3), (g(sw[0], 0), 7), (g(hca[2], 1), 0)]);
        assert_eq!(lids.assign(&t), 4);
        assert_eq!(lids.of(&t, hca[0], 1), Some(40));
        assert_eq!(lids.of(&t, sw[1], 0), Some(7));
        assert_eq!(lids.of(&t, hca[1], 1), Some(3));
        // New LIDs skip held and remembered ones.
        let mut all: Vec<u16> = lids.iter().map(|(_, l)| l).collect();
        all.sort_unstable();
        assert_eq!(all, [1, 2, 3, 4, 7, 40]);
        // Kept across sweeps: nothing new, and a port's current LID does
        // not move a LID already given.
        assert_eq!(lids.keep_current(&t, [(hca[0], 1, 41)]), 0);
        assert_eq!(lids.assign(&t), 0);
        assert_eq!(lids.of(&t, hca[0], 1), Some(40));
    }

    /// With LMC 2 every CA port's base LID is aligned to 4 and its block of
    /// 4 is its own; a switch has one LID, any free one.
    #[test]
    fn with_an_lmc_each_port_gets_an_aligned_block_of_its_own() {
        assert_eq!(Lids::with_lmc(8), None);
        let (t, sw, hca) = ring(3);
        let mut lids = Lids::with_lmc(2).unwrap();
        assert_eq!(lids.assign(&t), 6);
        let mut seen = HashSet::new();
        for &h in &hca {
            let g = t.node(h).port_guid(1);
            let r = lids.range(g).unwrap();
            assert_eq!(r.start() % 4, 0, "{r:?}");
            assert_eq!(r.clone().count(), 4);
            assert_eq!(lids.lmc_of(g), Some(2));
            assert!(r.clone().all(|l| seen.insert(l)), "overlap at {r:?}");
        }
        for &s in &sw {
            let g = t.node(s).port_guid(0);
            let r = lids.range(g).unwrap();
            assert_eq!(r.clone().count(), 1);
            assert_eq!(lids.lmc_of(g), Some(0));
            assert!(seen.insert(*r.start()), "{r:?} is a CA's too");
        }
        assert_eq!(lids.iter_all().count(), 3 * 4 + 3);
        // The switches (first in node order) 1, 2, 3 below the first block
        // of four; the CAs 4-7, 8-11, 12-15.
        let mut sws: Vec<u16> = sw.iter().map(|&s| lids.of(&t, s, 0).unwrap()).collect();
        sws.sort_unstable();
        assert_eq!(sws, [1, 2, 3]);
        assert_eq!(lids.max_lid(), 15);
        // A switch keeps a LID off any block; a CA port does not.
        let mut again = Lids::with_lmc(2).unwrap();
        let held = [(sw[0], 0, 17), (hca[0], 1, 21), (hca[1], 1, 24)];
        assert_eq!(again.keep_current(&t, held), 2);
        assert_eq!(again.of(&t, sw[0], 0), Some(17));
        assert_eq!(again.of(&t, hca[1], 1), Some(24));
        assert_eq!(again.of(&t, hca[0], 1), None);
    }

    /// A held or remembered LID off the block, or whose block would pass
    /// the last unicast LID, is not kept: the port gets a fresh block.
    #[test]
    fn lids_off_the_block_are_moved() {
        let (t, _, hca) = ring(2);
        let g = |id: NodeId| t.node(id).port_guid(1);
        let mut lids = Lids::with_lmc(3).unwrap();
        assert_eq!(
            lids.keep_current(&t, [(hca[0], 1, 12), (hca[1], 1, 0xbff8)]),
            1
        );
        assert_eq!(lids.of(&t, hca[1], 1), Some(0xbff8));
        lids.remember([(g(hca[0]), 17)]);
        assert_eq!(lids.assign(&t), 3);
        let base = lids.of(&t, hca[0], 1).unwrap();
        assert_eq!(base % 8, 0);
        // 0xbff8 + 7 = 0xbfff: the last block fits; with LMC 7 the block
        // of 0xbf80 ends at 0xbfff too, and no block starts at 0.
        let l7 = Lids::with_lmc(7).unwrap();
        let none = HashSet::new();
        assert!(l7.fits(0xbf80, 7, &none));
        assert!(!l7.fits(0, 7, &none));
        assert!(!l7.fits(0xbf81, 7, &none));
        assert!(
            l7.fits(0xbf81, 0, &none),
            "a switch's LID need not be aligned"
        );
    }

    /// The LIDs run out without a panic or an overlapping block: LMC 7
    /// leaves 383 blocks of 128 (LID 0's block is not one), and switches
    /// the LIDs below the first.
    #[test]
    fn blocks_run_out_without_overlap() {
        let mut t = Topology::new();
        let s = t.add_node(1, NodeKind::Switch, 254);
        for i in 0..254u8 {
            let h = t.add_node(0x1000 + u64::from(i), NodeKind::Ca, 2);
            t.link(s, i + 1, h, 1).unwrap();
        }
        // 255 ports first, then 254 more from a second switch's CAs.
        let s2 = t.add_node(2, NodeKind::Switch, 254);
        for i in 0..254u8 {
            let h = t.add_node(0x2000 + u64::from(i), NodeKind::Ca, 1);
            t.link(s2, i + 1, h, 1).unwrap();
        }
        let mut lids = Lids::with_lmc(7).unwrap();
        // 383 CA blocks and the two switches' LIDs below the first block.
        assert_eq!(lids.assign(&t), 385);
        assert_eq!(lids.assign(&t), 0);
        assert_eq!(lids.max_lid(), MAX_UNICAST_LID);
        let mut bases: Vec<u16> = lids
            .iter()
            .filter(|&(g, _)| lids.lmc_of(g) == Some(7))
            .map(|(_, b)| b)
            .collect();
        bases.sort_unstable();
        assert_eq!(bases.len(), 383);
        assert!(bases.windows(2).all(|w| w[1] - w[0] >= 128));
        assert_eq!((lids.get(1), lids.get(2)), (Some(1), Some(2)));
    }
}
