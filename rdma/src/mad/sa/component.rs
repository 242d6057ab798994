//! ComponentMask matching (IBA 15.2.4, 15.4): the components of an SA record
//! as bit ranges of its wire form, and a [`Matcher`] that compares the
//! selected components of candidate records with a query's.

use core::marker::PhantomData;

use super::SaRecord;
use crate::mad::Result;

/// The largest record a [`Matcher`] takes: the SA data of one MAD.
pub const MAX_RECORD: usize = 200;

/// One component of an SA record: `width` bits from bit `offset` of the
/// record's wire form, bits numbered from the most significant bit of byte
/// 0. Entry i of [`SaRecord::COMPONENTS`] is the component of ComponentMask
/// bit i.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Component {
    /// The field's name in the specification.
    pub name: &'static str,
    /// The first bit.
    pub offset: u16,
    /// The number of bits.
    pub width: u16,
}

impl Component {
    /// The component `name` of `width` bits from bit `offset`.
    pub const fn new(name: &'static str, offset: u16, width: u16) -> Component {
        Component {
            name,
            offset,
            width,
        }
    }

    /// The bit after the last one.
    pub const fn end(&self) -> usize {
        self.offset as usize + self.width as usize
    }
}

/// Compares records with a query on the components its ComponentMask
/// selects: a candidate matches when, for every selected component, its
/// wire bits equal the query's (IBA 15.4: a Get or GetTable returns the
/// records whose selected components have the query's values).
///
/// The query is encoded once, into a stack buffer, with the bits of the
/// selected components as a byte mask beside it; each candidate is encoded
/// into a stack buffer and compared byte by byte under that mask. Nothing is
/// allocated.
///
/// Mask bits beyond the record's [`SaRecord::COMPONENTS`] select nothing:
/// they are ignored, as the bits the specification leaves undefined. A mask
/// that selects nothing matches every record (a GetTable with an empty
/// mask asks for all of them).
///
/// Matching is bitwise. Components whose meaning is not equality (a
/// PathRecord's NumbPath, a JoinState that asks for any common bit, a
/// CapabilityMask compared bit by bit) are for the caller to leave out of
/// the mask and compare itself.
///
/// ```
/// use rdma::mad::sa::{LinkRecord, LinkRecordMask, Matcher};
///
/// let query = LinkRecord { from_lid: 5, ..Default::default() };
/// let m = Matcher::new(&query, LinkRecordMask::FROM_LID)?;
/// let links = [
///     LinkRecord { from_lid: 5, from_port: 1, to_port: 3, to_lid: 9 },
///     LinkRecord { from_lid: 6, from_port: 1, to_port: 2, to_lid: 5 },
///     LinkRecord { from_lid: 5, from_port: 2, to_port: 1, to_lid: 7 },
/// ];
/// let hits: Vec<u8> = links.iter().filter(|l| m.matches(l)).map(|l| l.from_port).collect();
/// assert_eq!(hits, [1, 2]);
///
/// // No component selected: every record matches.
/// let all = Matcher::new(&query, LinkRecordMask::empty())?;
/// assert!(links.iter().all(|l| all.matches(l)));
/// # Ok::<(), rdma::mad::Error>(())
/// ```
#[derive(Clone)]
pub struct Matcher<R: SaRecord> {
    /// The query's bytes, with the bits outside the selected components
    /// cleared.
    query: [u8; MAX_RECORD],
    /// Ones at the bits of the selected components.
    mask: [u8; MAX_RECORD],
    /// Whether any bit is selected.
    any: bool,
    record: PhantomData<fn(&R)>,
}

impl<R: SaRecord> core::fmt::Debug for Matcher<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Matcher")
            .field("record", &R::NAME)
            .field("query", &&self.query[..R::SIZE])
            .field("mask", &&self.mask[..R::SIZE])
            .finish()
    }
}

impl<R: SaRecord> Matcher<R> {
    /// The matcher of `query` on the components `mask` selects (its bits
    /// beyond the table ignored). Fails if the query does not encode (a
    /// field too wide for its bits).
    pub fn new(query: &R, mask: R::Mask) -> Result<Matcher<R>> {
        Self::with_comp_mask(query, bitflags::Flags::bits(&mask))
    }

    /// [`Matcher::new`] with the ComponentMask as the SA header carries it
    /// (bits the mask type does not name included).
    pub fn with_comp_mask(query: &R, comp_mask: u64) -> Result<Matcher<R>> {
        let mut buf = [0u8; MAX_RECORD];
        query.encode_into(Self::record_bytes(&mut buf))?;
        Ok(Self::of_bytes(buf, comp_mask))
    }

    /// The matcher of a query in wire form (at least `R::SIZE` bytes, as
    /// received in the SA data) on the components of ComponentMask
    /// `comp_mask`: the query's bits are compared as they are, reserved
    /// ones included.
    pub fn from_bytes(query: &[u8], comp_mask: u64) -> Result<Matcher<R>> {
        let mut buf = [0u8; MAX_RECORD];
        let src = query.get(..R::SIZE).ok_or(crate::mad::Error::Truncated {
            what: R::NAME,
            need: R::SIZE,
            have: query.len(),
        })?;
        Self::record_bytes(&mut buf).copy_from_slice(src);
        Ok(Self::of_bytes(buf, comp_mask))
    }

    /// The first `R::SIZE` bytes of `buf`.
    fn record_bytes(buf: &mut [u8; MAX_RECORD]) -> &mut [u8] {
        const { assert!(R::SIZE <= MAX_RECORD, "the record is larger than SA data") };
        &mut buf[..R::SIZE]
    }

    fn of_bytes(mut query: [u8; MAX_RECORD], comp_mask: u64) -> Matcher<R> {
        let mut mask = [0u8; MAX_RECORD];
        for (i, c) in R::COMPONENTS.iter().enumerate().take(64) {
            if comp_mask >> i & 1 == 0 {
                continue;
            }
            for bit in usize::from(c.offset)..c.end().min(R::SIZE * 8) {
                mask[bit / 8] |= 0x80 >> (bit % 8);
            }
        }
        for (q, m) in query.iter_mut().zip(&mask) {
            *q &= m;
        }
        Matcher {
            query,
            any: mask.iter().any(|&m| m != 0),
            mask,
            record: PhantomData,
        }
    }

    /// Whether the mask selects no bits: every record matches.
    pub fn selects_nothing(&self) -> bool {
        !self.any
    }

    /// Whether `candidate`'s selected components equal the query's. A
    /// candidate that does not encode matches nothing but an empty mask.
    pub fn matches(&self, candidate: &R) -> bool {
        if !self.any {
            return true;
        }
        let mut buf = [0u8; MAX_RECORD];
        candidate.encode_into(Self::record_bytes(&mut buf)).is_ok() && self.matches_bytes(&buf)
    }

    /// [`Matcher::matches`] of a candidate in wire form (at least `R::SIZE`
    /// bytes; a shorter one matches nothing but an empty mask).
    pub fn matches_bytes(&self, candidate: &[u8]) -> bool {
        if !self.any {
            return true;
        }
        let Some(c) = candidate.get(..R::SIZE) else {
            return false;
        };
        c.iter()
            .zip(&self.mask)
            .zip(&self.query)
            .all(|((c, m), q)| c & m == *q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::sa::{
        InformInfoRecord, LinkRecord, McMemberRecord, NodeRecord, PathRecord, PortInfoRecord,
        ServiceRecord,
    };
    use crate::mad::Attribute;
    use bitflags::Flags;

    /// The table starts at bit 0, each component where the one before it
    /// ends, none empty, none past the record; it has one entry per mask bit
    /// up to the highest one the mask type names. Returns its length.
    fn tiles<R: SaRecord>() -> usize {
        let t = R::COMPONENTS;
        let mut at = 0;
        for (i, c) in t.iter().enumerate() {
            assert_eq!(
                usize::from(c.offset),
                at,
                "{} component {i} ({})",
                R::NAME,
                c.name
            );
            assert!(
                c.width > 0,
                "{} component {i} ({}) is empty",
                R::NAME,
                c.name
            );
            at = c.end();
        }
        assert!(at <= R::SIZE * 8, "{} table ends at bit {at}", R::NAME);
        // Whatever the table leaves out is the last bytes, and reserved.
        assert!(
            R::SIZE * 8 - at < 64,
            "{}: {at} bits of {}",
            R::NAME,
            R::SIZE * 8
        );
        let highest = 64 - R::Mask::all().bits().leading_zeros() as usize;
        assert_eq!(t.len(), highest, "{}: table and mask", R::NAME);
        t.len()
    }

    #[test]
    fn every_table_tiles_its_record() {
        assert_eq!(tiles::<NodeRecord>(), 15);
        assert_eq!(tiles::<PortInfoRecord>(), 58);
        assert_eq!(tiles::<LinkRecord>(), 4);
        assert_eq!(tiles::<PathRecord>(), 23);
        assert_eq!(tiles::<McMemberRecord>(), 18);
        assert_eq!(tiles::<InformInfoRecord>(), 16);
        assert_eq!(tiles::<ServiceRecord>(), 37);
        // The tables that cover their record to the last bit.
        for (name, end, size) in [
            (
                "NodeRecord",
                NodeRecord::COMPONENTS.last().map(Component::end),
                108,
            ),
            (
                "PortInfoRecord",
                PortInfoRecord::COMPONENTS.last().map(Component::end),
                68,
            ),
            (
                "LinkRecord",
                LinkRecord::COMPONENTS.last().map(Component::end),
                6,
            ),
            (
                "InformInfoRecord",
                InformInfoRecord::COMPONENTS.last().map(Component::end),
                60,
            ),
            (
                "ServiceRecord",
                ServiceRecord::COMPONENTS.last().map(Component::end),
                176,
            ),
        ] {
            assert_eq!(end, Some(size * 8), "{name}");
        }
    }

    /// The record's wire bytes with bits `bits` (relative to component
    /// `c`, clipped to it) flipped.
    fn flip(b: &[u8], c: &Component, bits: core::ops::Range<usize>) -> Vec<u8> {
        let mut v = b.to_vec();
        let (from, to) = (usize::from(c.offset), c.end());
        for bit in (from + bits.start).min(to)..(from + bits.end).min(to) {
            v[bit / 8] ^= 0x80 >> (bit % 8);
        }
        v
    }

    /// For random records and each component: a candidate that differs from
    /// the query in that component alone (all its bits, its first bit, its
    /// last bit) matches exactly when the component's bit is clear, under
    /// the full mask, that bit alone, every other bit (bits past the table
    /// set too: ignored) and none. Returns how many components the typed
    /// record carries: those are checked through the codec too (the others
    /// are reserved bits it drops, checked in wire form only).
    ///
    /// Not under Miri: this is safe code over safe code (the matcher has no
    /// `unsafe`), and its thousands of encodes and matches per record take
    /// minutes there; `matcher_compares_only_the_selected_bits` runs under it.
    fn one_component_apart<R: SaRecord + PartialEq + core::fmt::Debug>() -> usize {
        let n = R::COMPONENTS.len();
        let full = (1u64 << n) - 1;
        let mut typed = 0;
        for seed in 0..8 {
            let query = R::decode(&super::super::tests::noise(seed, R::SIZE)).unwrap();
            let qb = query.to_bytes().unwrap();
            typed = 0;
            for (i, c) in R::COMPONENTS.iter().enumerate() {
                let w = usize::from(c.width);
                let bit = 1u64 << i;
                let masks = [
                    (full, false),
                    (bit, false),
                    (full & !bit, true),
                    (!bit, true),
                    (0, true),
                ];
                for bits in [0..w, 0..1, w - 1..w] {
                    let cb = flip(&qb, c, bits.clone());
                    for (mask, want) in masks {
                        let m = Matcher::<R>::from_bytes(&qb, mask).unwrap();
                        assert_eq!(
                            m.matches_bytes(&cb),
                            want,
                            "{} component {i} ({}) bits {bits:?}, mask {mask:#x}",
                            R::NAME,
                            c.name
                        );
                        assert!(m.matches_bytes(&qb), "{} matches itself", R::NAME);
                    }
                }
                // Through the codec: the candidate differs in the last bit.
                let cb = flip(&qb, c, w - 1..w);
                let cand = R::decode(&cb).unwrap();
                if cand.to_bytes().unwrap() != cb {
                    // The codec does not keep this component: reserved.
                    assert!(c.name.starts_with("Reserved"), "{} {}", R::NAME, c.name);
                    assert_eq!(cand, query);
                    continue;
                }
                typed += 1;
                assert_ne!(cand, query);
                for (mask, want) in masks {
                    let m = Matcher::new(&query, R::Mask::from_bits_retain(mask)).unwrap();
                    assert_eq!(
                        m.matches(&cand),
                        want,
                        "{} component {i} ({}), mask {mask:#x}",
                        R::NAME,
                        c.name
                    );
                    assert!(m.matches(&query));
                    assert_eq!(m.selects_nothing(), mask & full == 0);
                }
            }
        }
        typed
    }

    #[test]
    #[cfg_attr(miri, ignore)] // see one_component_apart
    fn node_record_matcher() {
        // All but the reserved 16 bits after the LID.
        assert_eq!(one_component_apart::<NodeRecord>(), 14);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // see one_component_apart
    fn port_info_record_matcher() {
        // All but PortInfo's 4 reserved fields.
        assert_eq!(one_component_apart::<PortInfoRecord>(), 54);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // see one_component_apart
    fn link_record_matcher() {
        assert_eq!(one_component_apart::<LinkRecord>(), 4);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // see one_component_apart
    fn path_record_matcher() {
        // All but the reserved 3 bits after RawTraffic.
        assert_eq!(one_component_apart::<PathRecord>(), 22);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // see one_component_apart
    fn mc_member_record_matcher() {
        assert_eq!(one_component_apart::<McMemberRecord>(), 18);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // see one_component_apart
    fn inform_info_record_matcher() {
        // All but the 4 reserved fields.
        assert_eq!(one_component_apart::<InformInfoRecord>(), 12);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // see one_component_apart
    fn service_record_matcher() {
        // All but the reserved 16 bits after ServiceP_Key.
        assert_eq!(one_component_apart::<ServiceRecord>(), 36);
    }

    #[test]
    fn matcher_compares_only_the_selected_bits() {
        // Two PathRecords that differ in SL and nothing else: P_Key and SL
        // share bytes 50-53 with QoSClass, compared bit by bit.
        let q = PathRecord {
            pkey: 0xffff,
            qos_class: 0xabc,
            sl: 3,
            ..PathRecord::default()
        };
        let c = PathRecord { sl: 4, ..q };
        use crate::mad::sa::PathRecordMask as M;
        assert!(Matcher::new(&q, M::PKEY | M::QOS_CLASS)
            .unwrap()
            .matches(&c));
        assert!(!Matcher::new(&q, M::PKEY | M::SL).unwrap().matches(&c));
        // A candidate that does not encode matches only an empty mask; a
        // query that does not encode makes no matcher.
        let bad = PathRecord { sl: 16, ..q };
        assert!(!Matcher::new(&q, M::PKEY).unwrap().matches(&bad));
        assert!(Matcher::new(&q, M::empty()).unwrap().matches(&bad));
        assert!(Matcher::new(&bad, M::PKEY).is_err());
        // Wire forms shorter than the record.
        let m = Matcher::<PathRecord>::from_bytes(&q.to_bytes().unwrap(), M::SL.bits()).unwrap();
        assert!(!m.matches_bytes(&[0; 63]));
        assert!(Matcher::<PathRecord>::from_bytes(&[0; 63], 0).is_err());
    }
}
