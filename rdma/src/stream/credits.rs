//! Credits: the flow control that keeps a SEND from meeting an empty
//! receive queue.
//!
//! Credits make sure that a SEND never meets an empty receive queue, so
//! no receiver-not-ready retry is ever needed (iWARP has none, and the
//! connection is made with an RNR retry count of 0, so a violation would
//! show as an error on rxe too):
//! - each side knows how many receives the peer has posted that its own
//!   SENDs have not used (its credits; the peer's receive buffers at the
//!   start, which the peer announced at set-up, since both sides post
//!   their whole ring before connecting: the two rings may differ);
//! - data and FIN take a credit only while at least two are left: the last
//!   one is kept for a credit-only message, so that two sides that both
//!   ran out cannot wait for each other;
//! - a receiver returns a credit per receive it posts again (once the
//!   reader has copied out the whole buffer): on the next data message, or
//!   in a credit-only message as soon as half the ring is due back.

/// The credit accounting of one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Credits {
    /// Receives the peer has posted that our SENDs have not used.
    pub(super) send: u32,
    /// Receives we posted again that the peer does not know of yet.
    pub(super) owed: u32,
    /// Receives the peer posts (its ring): the most credits there can be.
    pub(super) ring: u32,
    /// Credits owed that make a credit-only message due: half of this
    /// side's ring, and at least one.
    pub(super) due: u32,
}

impl Credits {
    /// The credits of a side that posts `own_ring` receives, whose peer
    /// posts `peer_ring`.
    pub(super) fn new(peer_ring: u32, own_ring: u32) -> Credits {
        Credits {
            send: peer_ring,
            owed: 0,
            ring: peer_ring,
            due: own_ring.div_ceil(2).max(1),
        }
    }

    /// Whether a data message (or a FIN) may go: it must leave the last
    /// credit for a credit-only message.
    pub(super) fn can_send_data(&self) -> bool {
        self.send >= 2
    }

    /// Whether a credit-only message is due: half the ring is owed, and a
    /// credit (the last one, possibly) is there to carry it.
    pub(super) fn credit_only_due(&self) -> bool {
        self.owed >= self.due && self.send >= 1
    }

    /// Whether credits are owed and a credit is there to carry them.
    pub(super) fn owes_any(&self) -> bool {
        self.owed > 0 && self.send >= 1
    }

    /// Takes a credit for a message and the credits it returns.
    pub(super) fn take(&mut self) -> u16 {
        debug_assert!(self.send >= 1);
        self.send -= 1;
        let n = self.owed.min(u32::from(u16::MAX));
        self.owed -= n;
        n as u16
    }

    /// A receive was posted again.
    pub(super) fn reposted(&mut self) {
        self.owed += 1;
    }

    /// The peer returned `n` credits; an error when it returns more than
    /// it can owe (a broken peer).
    pub(super) fn returned(&mut self, n: u16) -> Result<(), ()> {
        let send = self.send + u32::from(n);
        if send > self.ring {
            return Err(());
        }
        self.send = send;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn stream_credits_keep_the_last_one_for_a_credit_message() {
        let mut c = Credits::new(4, 4);
        assert!(c.can_send_data());
        assert_eq!(c.take(), 0);
        c.take();
        c.take();
        // One left: no data, and no credit-only message while nothing is owed.
        assert_eq!(c.send, 1);
        assert!(!c.can_send_data());
        assert!(!c.credit_only_due());
        c.reposted();
        assert!(!c.credit_only_due());
        c.reposted();
        // Half the ring owed: a credit-only message may use the last credit.
        assert!(c.credit_only_due());
        assert_eq!(c.take(), 2);
        assert_eq!((c.send, c.owed), (0, 0));
        assert!(!c.credit_only_due());
        assert_eq!(c.returned(3), Ok(()));
        assert!(c.can_send_data());
        // More than the ring: a broken peer.
        assert_eq!(c.returned(2), Err(()));
        assert_eq!(c.send, 3);
    }

    /// One side of the model below.
    struct Side {
        credits: Credits,
        /// Receives posted (what the peer's SENDs may use).
        posted: u32,
        /// Received messages not read yet.
        unread: u32,
        /// Data messages still to send.
        to_send: u32,
        received: u32,
    }

    /// Two sides sending through the credit rules with bursts of reading
    /// and writing in a pseudo-random order: no message ever meets an
    /// empty receive queue, and everything arrives (no deadlock).
    #[test]
    fn stream_credits_of_unequal_rings_follow_the_peers_ring() {
        // This side posts 8 receives, the peer 2: two credits at the
        // start, one data message, and a credit-only message due after 4
        // reposts (half of this side's ring).
        let mut c = Credits::new(2, 8);
        assert!(c.can_send_data());
        c.take();
        assert!(!c.can_send_data());
        for _ in 0..3 {
            c.reposted();
            assert!(!c.credit_only_due());
        }
        c.reposted();
        assert!(c.credit_only_due());
        assert_eq!(c.take(), 4);
        // The peer can owe at most its ring.
        assert_eq!(c.returned(3), Err(()));
        assert_eq!(c.returned(2), Ok(()));
        assert_eq!(c.returned(1), Err(()));
    }

    #[test]
    fn stream_credit_model_never_overruns_and_never_deadlocks() {
        for rings in [[4, 4], [2, 16], [16, 2], [2, 2], [3, 7]] {
            credit_model(rings);
        }
    }

    fn credit_model(rings: [u32; 2]) {
        // Fewer under Miri, where each step is slow.
        const N: u32 = if cfg!(miri) { 40 } else { 500 };
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut s = [0, 1].map(|i| Side {
            credits: Credits::new(rings[1 - i], rings[i]),
            posted: rings[i],
            unread: 0,
            to_send: N,
            received: 0,
        });
        // In-flight messages towards side i: credits carried.
        let mut wire: [VecDeque<(u16, bool)>; 2] = [VecDeque::new(), VecDeque::new()];
        for _step in 0..200_000 {
            if s.iter().all(|x| x.to_send == 0) && s.iter().all(|x| x.received == N) {
                return;
            }
            let i = (rnd() % 2) as usize;
            let j = 1 - i;
            match rnd() % 4 {
                // Read (and repost) some of what arrived.
                0 => {
                    let n = (rnd() % 3) as u32;
                    for _ in 0..n.min(s[i].unread) {
                        s[i].unread -= 1;
                        s[i].posted += 1;
                        s[i].credits.reposted();
                    }
                }
                // Deliver a message in flight to i.
                1 => {
                    if let Some((credits, data)) = wire[i].pop_front() {
                        assert!(s[i].posted > 0, "a SEND met an empty receive queue");
                        s[i].posted -= 1;
                        s[i].credits.returned(credits).unwrap();
                        if data {
                            s[i].unread += 1;
                            s[i].received += 1;
                        } else {
                            // Control messages are reposted at once.
                            s[i].posted += 1;
                            s[i].credits.reposted();
                        }
                    }
                }
                // Send what the rules allow (the driver's pump).
                _ => {
                    while s[i].to_send > 0 && s[i].credits.can_send_data() {
                        s[i].to_send -= 1;
                        let c = s[i].credits.take();
                        wire[j].push_back((c, true));
                    }
                    if s[i].credits.credit_only_due() {
                        let c = s[i].credits.take();
                        wire[j].push_back((c, false));
                    }
                }
            }
        }
        panic!(
            "rings {rings:?} stalled: sent {:?}, received {:?}",
            s.iter().map(|x| N - x.to_send).collect::<Vec<_>>(),
            s.iter().map(|x| x.received).collect::<Vec<_>>()
        );
    }
}
