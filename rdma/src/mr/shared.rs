//! Copies into and out of memory shared with a device, remote peers and
//! other threads.
//!
//! Every access is a relaxed atomic load or store, so copies from several
//! threads never race in Rust's sense, and the compiler can neither assume
//! the bytes stable nor invent or merge accesses to them. What a copy sees of
//! a concurrent write (by a thread, the device or a peer) is unspecified
//! byte by byte, never undefined.
//!
//! Rust forbids atomic accesses of different sizes to race, so the size of
//! each access depends only on the address and the bounds of the shared
//! range, never on the range of one copy: an aligned 8-byte word that lies
//! wholly inside the shared range is always accessed as one `AtomicU64` (a
//! copy that covers part of it merges its bytes with a compare-exchange, so
//! a concurrent write to the word's other bytes is kept); the bytes before
//! the first and after the last such word as `AtomicU8`s.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

const WORD: usize = 8;

/// A range of shared bytes, accessed only by atomic copies.
#[derive(Clone, Copy)]
pub(crate) struct SharedBytes {
    base: *mut u8,
    len: usize,
    /// Offsets of the first and past the last aligned word inside the range.
    words: (usize, usize),
}

// SAFETY: every access through a `SharedBytes` is atomic, and `new`'s
// contract makes the memory valid and reached only so, from any thread.
unsafe impl Send for SharedBytes {}
// SAFETY: as for `Send`: `&SharedBytes` allows only the atomic copies.
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    /// # Safety
    /// While this value or a copy of it is used, `base..base + len` must be
    /// valid for reads and writes, and every Rust access to these bytes that
    /// is not ordered with the copies by happens-before must be made through
    /// a `SharedBytes` with the same `base` and `len`.
    pub(crate) unsafe fn new(base: *mut u8, len: usize) -> SharedBytes {
        let addr = base as usize;
        let first = (addr.next_multiple_of(WORD) - addr).min(len);
        let last = ((addr + len) & !(WORD - 1)).saturating_sub(addr).max(first);
        SharedBytes {
            base,
            len,
            words: (first, last),
        }
    }

    /// The number of bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies `src` into the shared bytes at `offset`.
    ///
    /// # Panics
    /// If the range is outside the shared bytes (callers check it first).
    #[inline]
    pub(crate) fn store(&self, offset: usize, src: &[u8]) {
        match self.on_words(offset, src.len()) {
            Some(words) => store_words(words, src),
            None => self.store_split(offset, src),
        }
    }

    fn store_split(&self, offset: usize, src: &[u8]) {
        let c = self.split(offset, src.len());
        let at = |r: &Range<usize>| &src[r.start - offset..r.end - offset];
        let part_of = |w: usize, part: &Range<usize>| at(&(w + part.start..w + part.end));
        for (b, &v) in self.bytes(&c.head).iter().zip(at(&c.head)) {
            b.store(v, Relaxed);
        }
        if let Some((w, part)) = &c.lead {
            merge(self.word(*w), part, part_of(*w, part));
        }
        store_words(self.whole(&c.whole), at(&c.whole));
        if let Some((w, part)) = &c.trail {
            merge(self.word(*w), part, part_of(*w, part));
        }
        for (b, &v) in self.bytes(&c.tail).iter().zip(at(&c.tail)) {
            b.store(v, Relaxed);
        }
    }

    /// Sets `n` shared bytes at `offset` to `byte`.
    ///
    /// # Panics
    /// If the range is outside the shared bytes.
    pub(crate) fn fill(&self, offset: usize, n: usize, byte: u8) {
        let c = self.split(offset, n);
        let pattern = [byte; WORD];
        for b in self.bytes(&c.head).iter().chain(self.bytes(&c.tail)) {
            b.store(byte, Relaxed);
        }
        for (w, part) in c.lead.iter().chain(&c.trail) {
            merge(self.word(*w), part, &pattern[part.clone()]);
        }
        for w in self.whole(&c.whole) {
            w.store(u64::from_ne_bytes(pattern), Relaxed);
        }
    }

    /// Copies shared bytes at `offset` into `dst`.
    ///
    /// # Panics
    /// If the range is outside the shared bytes.
    #[inline]
    pub(crate) fn load(&self, offset: usize, dst: &mut [u8]) {
        match self.on_words(offset, dst.len()) {
            Some(words) => load_words(words, dst),
            None => self.load_split(offset, dst),
        }
    }

    fn load_split(&self, offset: usize, dst: &mut [u8]) {
        let c = self.split(offset, dst.len());
        let at = |r: &Range<usize>| r.start - offset..r.end - offset;
        let part_of = |w: usize, part: &Range<usize>| at(&(w + part.start..w + part.end));
        for (b, v) in self.bytes(&c.head).iter().zip(&mut dst[at(&c.head)]) {
            *v = b.load(Relaxed);
        }
        if let Some((w, part)) = &c.lead {
            let bytes = self.word(*w).load(Relaxed).to_ne_bytes();
            dst[part_of(*w, part)].copy_from_slice(&bytes[part.clone()]);
        }
        load_words(self.whole(&c.whole), &mut dst[at(&c.whole)]);
        if let Some((w, part)) = &c.trail {
            let bytes = self.word(*w).load(Relaxed).to_ne_bytes();
            dst[part_of(*w, part)].copy_from_slice(&bytes[part.clone()]);
        }
        for (b, v) in self.bytes(&c.tail).iter().zip(&mut dst[at(&c.tail)]) {
            *v = b.load(Relaxed);
        }
    }

    /// The 8 shared bytes at `offset` as one word (native byte order, as
    /// [`load`](Self::load) would copy them), in one atomic load when they
    /// are one of the range's aligned words, else byte by byte.
    ///
    /// # Panics
    /// If the range is outside the shared bytes.
    #[cfg(any(feature = "stream", test))]
    #[inline]
    pub(crate) fn load_word(&self, offset: usize) -> u64 {
        match self.on_words(offset, WORD) {
            Some(w) => w[0].load(Relaxed),
            None => {
                let mut b = [0; WORD];
                self.load_split(offset, &mut b);
                u64::from_ne_bytes(b)
            }
        }
    }

    /// Stores `v` as the 8 shared bytes at `offset` (native byte order, as
    /// [`store`](Self::store) of its bytes would), in one atomic store when
    /// they are one of the range's aligned words.
    ///
    /// # Panics
    /// If the range is outside the shared bytes.
    #[cfg(any(feature = "stream", test))]
    #[inline]
    pub(crate) fn store_word(&self, offset: usize, v: u64) {
        match self.on_words(offset, WORD) {
            Some(w) => w[0].store(v, Relaxed),
            None => self.store_split(offset, &v.to_ne_bytes()),
        }
    }

    /// The words of `offset..offset + n` when it is whole words (the common
    /// case, which needs no [`split`](Self::split)); `None` otherwise, and
    /// for a range past the end (which the split path refuses).
    #[inline]
    fn on_words(&self, offset: usize, n: usize) -> Option<&[AtomicU64]> {
        let (first, last) = self.words;
        let end = offset.checked_add(n)?;
        if offset < first || end > last || ((offset - first) | n) % WORD != 0 {
            return None;
        }
        // `first <= offset`, `end <= last <= len`, and both ends are a whole
        // number of words past `first`: what `whole` asks.
        Some(self.whole(&(offset..end)))
    }

    /// Splits `offset..offset + n` by how its bytes are accessed.
    fn split(&self, offset: usize, n: usize) -> Split {
        let end = offset
            .checked_add(n)
            .filter(|&e| e <= self.len)
            .expect("a shared copy inside its range");
        let (first, last) = self.words;
        // The part of the copy on words: a partial word at each end, whole
        // words between.
        let (mut start, stop) = (offset.max(first), end.min(last));
        let (mut lead, mut whole, mut trail) = (None, offset..offset, None);
        if start < stop {
            let skew = (start - first) % WORD;
            if skew != 0 {
                let w = start - skew;
                let part = skew..(stop - w).min(WORD);
                start = w + part.end;
                lead = Some((w, part));
            }
            let whole_end = stop - (stop - first) % WORD;
            if whole_end > start {
                whole = start..whole_end;
            }
            if whole_end >= start && whole_end < stop {
                trail = Some((whole_end, 0..stop - whole_end));
            }
        }
        Split {
            head: offset..end.min(first).max(offset),
            lead,
            whole,
            trail,
            tail: offset.max(last).min(end)..end,
        }
    }

    /// The byte-accessed bytes `r` (outside the words).
    fn bytes(&self, r: &Range<usize>) -> &[AtomicU8] {
        if r.is_empty() {
            return &[];
        }
        debug_assert!(r.end <= self.words.0 || r.start >= self.words.1);
        debug_assert!(r.end <= self.len);
        // SAFETY: `r` is inside the range (`split` clamps it to the copy,
        // checked against `len`), which is valid and accessed only
        // atomically (the contract of `new`); bytes outside the words are
        // always accessed as `AtomicU8`, which has the size and alignment
        // of `u8`.
        unsafe { std::slice::from_raw_parts(self.base.add(r.start).cast::<AtomicU8>(), r.len()) }
    }

    /// The whole words of `r` (a multiple of 8 bytes on the words).
    fn whole(&self, r: &Range<usize>) -> &[AtomicU64] {
        if r.is_empty() {
            return &[];
        }
        debug_assert!(r.start >= self.words.0 && r.end <= self.words.1);
        debug_assert!((r.start - self.words.0) % WORD == 0 && r.len() % WORD == 0);
        // SAFETY: `r` starts on an aligned word and covers whole words inside
        // the words of the range (both callers, `split` and `on_words`, make
        // it so; the debug assertions above check it), valid and accessed
        // only atomically, always as these `AtomicU64`s (8 bytes, 8-aligned).
        unsafe {
            std::slice::from_raw_parts(self.base.add(r.start).cast::<AtomicU64>(), r.len() / WORD)
        }
    }

    fn word(&self, start: usize) -> &AtomicU64 {
        debug_assert!(start >= self.words.0 && start + WORD <= self.words.1);
        debug_assert!((start - self.words.0) % WORD == 0);
        // SAFETY: `start` is the offset of an aligned word wholly inside the
        // range (`split` finds it a whole number of words past `words.0`,
        // ending at or before `words.1`), valid and accessed only
        // atomically, always as this `AtomicU64`.
        unsafe { AtomicU64::from_ptr(self.base.add(start).cast()) }
    }
}

/// A copy split by access size: offsets of bytes, of partial words (the
/// word's offset and the part of it covered) and of whole words.
struct Split {
    head: Range<usize>,
    lead: Option<(usize, Range<usize>)>,
    whole: Range<usize>,
    trail: Option<(usize, Range<usize>)>,
    tail: Range<usize>,
}

/// Stores `src`, a whole number of words, into `words`.
#[inline]
fn store_words(words: &[AtomicU64], src: &[u8]) {
    for (w, v) in words.iter().zip(src.chunks_exact(WORD)) {
        w.store(u64::from_ne_bytes(v.try_into().unwrap()), Relaxed);
    }
}

/// Loads `words` into `dst`, a whole number of words.
#[inline]
fn load_words(words: &[AtomicU64], dst: &mut [u8]) {
    for (w, v) in words.iter().zip(dst.chunks_exact_mut(WORD)) {
        v.copy_from_slice(&w.load(Relaxed).to_ne_bytes());
    }
}

/// Stores `src` into bytes `part` of `w`, keeping its other bytes even when
/// they are written concurrently.
fn merge(w: &AtomicU64, part: &Range<usize>, src: &[u8]) {
    // A compare-and-swap loop (what `fetch_update` is, spelled out: it is
    // deprecated on nightly for `try_update`, which the MSRV lacks).
    let mut old = w.load(Relaxed);
    loop {
        let mut bytes = old.to_ne_bytes();
        bytes[part.clone()].copy_from_slice(src);
        match w.compare_exchange_weak(old, u64::from_ne_bytes(bytes), Relaxed, Relaxed) {
            Ok(_) => return,
            Err(now) => old = now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A zeroed, word-aligned buffer of `words` words.
    fn buffer(words: usize) -> Arc<[AtomicU64]> {
        (0..words).map(|_| AtomicU64::new(0)).collect()
    }

    fn shared(buf: &Arc<[AtomicU64]>, skip: usize, len: usize) -> SharedBytes {
        assert!(skip + len <= buf.len() * WORD);
        // SAFETY: inside the buffer, which the tests access only through
        // `SharedBytes` of these bounds (and after the threads joined).
        unsafe { SharedBytes::new(buf.as_ptr().cast::<u8>().cast_mut().add(skip), len) }
    }

    #[test]
    fn copies_round_trip_at_every_offset_and_alignment() {
        // Under Miri, fewer alignments and lengths that still reach every
        // case (bytes only, a partial word, whole words at both ends).
        let (skips, lens): (&[usize], &[usize]) = if cfg!(miri) {
            (&[0, 1, 5], &[0, 1, 9, 17])
        } else {
            (&[0, 1, 2, 3, 4, 5, 6, 7], &[0, 1, 7, 8, 9, 17, 23])
        };
        for &skip in skips {
            for &len in lens {
                // A buffer per bounds: each region has one access size per
                // address (Miri's weak-memory model also rejects mixing
                // sizes on one address in sequence).
                let buf = buffer(4);
                let s = shared(&buf, skip, len);
                for off in 0..=len {
                    for n in 0..=len - off {
                        s.fill(0, len, 0);
                        let data: Vec<u8> = (1..=n as u8).collect();
                        s.store(off, &data);
                        let mut all = vec![0xee; len];
                        s.load(0, &mut all);
                        let mut want = vec![0; len];
                        want[off..off + n].copy_from_slice(&data);
                        assert_eq!(all, want, "skip {skip} len {len} off {off} n {n}");
                        s.fill(off, n, 0x5a);
                        s.load(0, &mut all);
                        want[off..off + n].fill(0x5a);
                        assert_eq!(all, want, "fill: skip {skip} len {len} off {off} n {n}");
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "inside its range")]
    fn a_copy_past_the_end_panics_before_touching_memory() {
        let buf = buffer(2);
        shared(&buf, 3, 10).store(8, &[1, 2, 3]);
    }

    #[test]
    fn word_copies_match_byte_copies_aligned_or_not() {
        let skips: &[usize] = if cfg!(miri) { &[0, 3] } else { &[0, 1, 3, 7] };
        for &skip in skips {
            let buf = buffer(4);
            let s = shared(&buf, skip, 24);
            for at in [0, 1, 8, 16] {
                let v = 0x0102_0304_0506_0708u64.wrapping_mul(at as u64 + 1);
                s.store_word(at, v);
                let mut b = [0; WORD];
                s.load(at, &mut b);
                assert_eq!(b, v.to_ne_bytes(), "skip {skip} at {at}");
                s.store(at, &(!v).to_ne_bytes());
                assert_eq!(s.load_word(at), !v, "skip {skip} at {at}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "inside its range")]
    fn a_word_past_the_end_panics() {
        let buf = buffer(2);
        shared(&buf, 0, 12).load_word(8);
    }

    #[test]
    fn concurrent_copies_of_different_ranges_do_not_race() {
        // Ranges that start and end at different places inside one word,
        // and overlap: under Miri a non-atomic or mixed-size access races.
        let buf = buffer(4);
        let s = shared(&buf, 3, 26);
        let writers: Vec<_> = [(0usize, 13usize, 0xaau8), (5, 17, 0x55)]
            .into_iter()
            .map(|(off, n, v)| {
                std::thread::spawn(move || {
                    let mut seen = vec![0; n];
                    for _ in 0..20 {
                        s.store(off, &vec![v; n]);
                        s.load(off, &mut seen);
                        s.fill(off + 1, n - 2, v);
                    }
                    seen
                })
            })
            .collect();
        for w in writers {
            let seen = w.join().unwrap();
            assert!(seen.iter().all(|b| [0xaa, 0x55].contains(b)), "{seen:?}");
        }
        let mut all = vec![0; 26];
        s.load(0, &mut all);
        assert!(
            all[..22].iter().all(|b| [0xaa, 0x55].contains(b)),
            "{all:?}"
        );
        assert_eq!(all[22..], [0; 4], "bytes no copy covered changed");
    }

    #[test]
    fn concurrent_writes_to_one_word_keep_each_other() {
        // Two threads write disjoint bytes of the same word: neither may
        // undo the other's (as a load, merge and plain store of the word
        // would).
        let buf = buffer(1);
        let s = shared(&buf, 0, 8);
        let rounds = if cfg!(miri) { 50 } else { 10_000 };
        let threads: Vec<_> = [(0usize, 3usize), (3, 5)]
            .into_iter()
            .map(|(off, n)| {
                std::thread::spawn(move || {
                    for r in 1..=rounds {
                        s.store(off, &vec![(r % 251) as u8 + off as u8; n]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut all = [0; 8];
        s.load(0, &mut all);
        let (a, b) = ((rounds % 251) as u8, (rounds % 251) as u8 + 3);
        assert_eq!(all, [a, a, a, b, b, b, b, b]);
    }
}
