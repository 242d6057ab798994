//! Which data SENDs are signalled, and the send queue's room for them.

/// At most this many data SENDs in a row go unsignalled (each inline, so
/// that its buffer is free at once) with `send_slots` send buffers; the
/// next is signalled, and its completion shows theirs. Less than
/// `send_slots`, which bounds the data SENDs in the send queue not known
/// complete: one of them is signalled. (7 with the default 16 buffers.)
pub(super) const fn unsignalled_run(send_slots: usize) -> usize {
    (send_slots / 2).saturating_sub(1)
}

/// Which data SENDs are signalled, and the send queue's room for them
/// (see [`Core::post_data`](super::engine::Core::post_data)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Signalling {
    /// Data SENDs posted, signalled or not, that no completion has shown
    /// complete: at most [`slots`](Self::slots).
    pub(super) out: usize,
    /// Unsignalled data SENDs posted since the last signalled one.
    pub(super) run: usize,
    /// The send buffers: the most data SENDs not known complete.
    pub(super) slots: usize,
    /// [`unsignalled_run`] of `slots`.
    pub(super) max_run: usize,
}

impl Signalling {
    /// The signalling of a side with `send_slots` send buffers.
    pub(super) fn new(send_slots: usize) -> Signalling {
        Signalling {
            out: 0,
            run: 0,
            slots: send_slots,
            max_run: unsignalled_run(send_slots),
        }
    }

    /// Whether another data SEND may be posted.
    pub(super) fn room(&self) -> bool {
        self.out < self.slots
    }

    /// A data SEND is posted (`inline`: its data goes inline, so it may go
    /// unsignalled): `Some` with the unsignalled SENDs before it that it
    /// retires when it is signalled, `None` when it is not.
    pub(super) fn post(&mut self, inline: bool) -> Option<usize> {
        debug_assert!(self.room());
        self.out += 1;
        if inline && self.run < self.max_run {
            self.run += 1;
            return None;
        }
        Some(std::mem::take(&mut self.run))
    }

    /// A signalled data SEND completed, retiring `retires` unsignalled
    /// ones before it.
    pub(super) fn completed(&mut self, retires: usize) {
        self.out -= 1 + retires;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn signalling_retires_every_send_and_never_fills_the_queue_with_unsignalled_ones() {
        // Posts (inline or not, by a fixed pseudo-random pattern) as the
        // room allows, and completes the signalled SENDs in order, some
        // turns none: the send queue then holds at most SEND_SLOTS data
        // SENDs, one of them signalled when it is full (else nothing would
        // ever complete), and the completions account for every SEND.
        for slots in [16, 1, 2, 3, 5] {
            signalling_model(slots);
        }
    }

    fn signalling_model(slots: usize) {
        let mut sig = Signalling::new(slots);
        // The send queue: per SEND, the retires of a signalled one.
        let mut queue: VecDeque<Option<usize>> = VecDeque::new();
        let (mut posted, mut retired, mut full, mut x) = (0usize, 0usize, 0usize, 0x2545_f491u32);
        // Pure bookkeeping: under Miri (which finds nothing more here) a tenth
        // of the turns.
        let turns = if cfg!(miri) { 1_000 } else { 10_000 };
        for turn in 0..turns {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            while sig.room() && x % 3 != 0 {
                let inline = x % 5 != 0;
                let s = sig.post(inline);
                assert!(
                    inline || s.is_some(),
                    "a SEND from its buffer went unsignalled"
                );
                queue.push_back(s);
                posted += 1;
                x = x.rotate_left(7);
            }
            assert!(sig.out <= slots);
            assert!(sig.run <= unsignalled_run(slots));
            assert_eq!(sig.out, queue.len());
            if !sig.room() {
                full += 1;
                assert!(
                    queue.iter().any(Option::is_some),
                    "a full queue with nothing signalled"
                );
            }
            // The device completes the queue up to its first signalled SEND
            // (or nothing, some turns), and the completion is taken.
            // (Unsignalled SENDs that complete after the last signalled
            // one complete unseen.)
            if turn % 4 != 3 {
                if let Some(i) = queue.iter().position(Option::is_some) {
                    let retires = queue[i].unwrap();
                    assert_eq!(
                        retires, i,
                        "a signalled SEND retires the unsignalled ones before it"
                    );
                    queue.drain(..=i);
                    sig.completed(retires);
                    retired += 1 + retires;
                }
                // The signalled SEND retired the unsignalled ones before it.
                assert_eq!(sig.out, queue.len());
            }
        }
        assert_eq!(posted - retired, sig.out);
        // A turn posts at most as many as there are free slots.
        let least = if slots >= 16 { turns } else { turns / 2 };
        assert!(posted > least, "{slots} slots: only {posted} SENDs posted");
        assert!(full > turns / 10, "the queue was full only {full} times");
    }
}
