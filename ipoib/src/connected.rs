//! Connected mode (RFC 4755): what two interfaces agree on to carry
//! unicast IP over a reliable connection, and the table of the
//! connections one interface sends on.
//!
//! - [`PrivateData`]: the 8 bytes of a connection request and its answer,
//!   as Linux's IPoIB-CM sends them (`struct ipoib_cm_data`): the sender's
//!   UD QPN and the longest message it receives, both big-endian.
//! - [`service_id`]: the IB CM service ID a Linux interface listens on
//!   (`0x1000000000000000 | QPN`); [`port`]: the rdma_cm port this
//!   library's program listens on instead where only IP addressing is
//!   available (RoCE through librdmacm), derived from the same QPN, so
//!   that a peer's link-layer address is all one needs to connect to it.
//! - [`Table`]: per peer, its connection's state: connecting, up (with
//!   the peer's message limit), or refused (datagram mode until a retry
//!   time), with the route each packet takes, idle connections aged out
//!   and a peer's changed address letting its connection go.
//!
//! As in Linux, a connection carries one direction: an interface sends on
//! the connections it made and receives on those it accepted. Everything
//! here is pure (callers pass the time).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::LinkAddr;

/// The longest IP packet of connected mode (RFC 4755 section 3; Linux's
/// `IPOIB_CM_MTU`): the interface's MTU.
pub const MAX_MTU: u32 = 65520;
/// The IB CM service IDs of IPoIB-CM: this, or'ed with the UD QPN.
pub const SERVICE_ID_BASE: u64 = 0x1000_0000_0000_0000;
/// The first rdma_cm port of [`port`]: below Linux's ephemeral range
/// (32768 and up), from which the connecting side's own ports come.
pub const PORT_BASE: u16 = 0x4000;

/// The IB CM service ID an interface with UD QPN `qpn` listens on.
pub fn service_id(qpn: u32) -> u64 {
    SERVICE_ID_BASE | u64::from(qpn & 0xff_ffff)
}

/// The rdma_cm port (TCP port space) an interface with UD QPN `qpn`
/// listens on: [`PORT_BASE`] or'ed with the QPN's low 14 bits. Two
/// interfaces on one address whose QPNs share those bits cannot both
/// listen: the second stays in datagram mode.
pub fn port(qpn: u32) -> u16 {
    PORT_BASE | (qpn & 0x3fff) as u16
}

/// The private data of a connection request or its acceptance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrivateData {
    /// The sender's UD QPN (the one of its link-layer address).
    pub qpn: u32,
    /// The longest message it receives, the 4-byte header included.
    pub mtu: u32,
}

/// Why private data was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadPrivateData {
    /// Fewer than 8 bytes.
    #[error("private data of {0} bytes, 8 needed")]
    Short(usize),
    /// A QPN of more than 24 bits.
    #[error("QPN {0:#x} has more than 24 bits")]
    Qpn(u32),
    /// A message limit that leaves no room for an IPv4 packet of 576
    /// bytes after the header.
    #[error("message limit {0} too small")]
    Mtu(u32),
}

impl PrivateData {
    /// The length on the wire.
    pub const LEN: usize = 8;
    /// The smallest message limit taken: the header and the 576 bytes
    /// every IPv4 host takes.
    pub const MIN_MTU: u32 = 4 + 576;

    /// The 8 bytes.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&self.qpn.to_be_bytes());
        b[4..].copy_from_slice(&self.mtu.to_be_bytes());
        b
    }

    /// From the private data of a CM event (which the CM may pad with
    /// zeros to its own length: bytes past the 8th are ignored).
    pub fn parse(b: &[u8]) -> Result<PrivateData, BadPrivateData> {
        let b: [u8; 8] = b
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or(BadPrivateData::Short(b.len()))?;
        let qpn = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let mtu = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        if qpn > 0xff_ffff {
            return Err(BadPrivateData::Qpn(qpn));
        }
        if mtu < Self::MIN_MTU {
            return Err(BadPrivateData::Mtu(mtu));
        }
        Ok(PrivateData { qpn, mtu })
    }

    /// The longest IP packet the peer takes: its limit less the header,
    /// at most [`MAX_MTU`].
    pub fn max_packet(self) -> usize {
        (self.mtu - 4).min(MAX_MTU) as usize
    }
}

/// The table's bounds and times.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections (of every state) at most; past it peers get datagrams.
    pub connections: usize,
    /// An unused connection goes after this long.
    pub idle: Duration,
    /// A peer that refused (or whose connection failed) gets datagrams
    /// for this long before another try.
    pub retry: Duration,
    /// The longest datagram payload (the UD path's MTU less the header).
    pub ud_max: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 64,
            idle: Duration::from_secs(120),
            retry: Duration::from_secs(10),
            ud_max: 4092,
        }
    }
}

/// The way a packet of a given length to a peer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route<C> {
    /// On connection `C`.
    Rc(C),
    /// As a datagram.
    Ud,
    /// Nowhere: too long for the way it must take, whose limit this is
    /// (answer "fragmentation needed").
    TooBig(usize),
    /// Nowhere: too long for a datagram while the connection is being
    /// made (dropped and counted, as the sender's retry will find it up).
    Held,
}

#[derive(Clone, Copy, Debug)]
enum State<C> {
    Connecting,
    Up { conn: C, max: usize, used: Instant },
    Refused { until: Instant },
}

/// The connections one interface sends on, by peer. `C`: the caller's
/// handle of a connection.
#[derive(Debug)]
pub struct Table<C> {
    limits: Limits,
    peers: HashMap<LinkAddr, State<C>>,
}

/// A peer's key: its address without the flags (a peer that turns
/// connected mode on or off stays the same peer).
fn key(a: LinkAddr) -> LinkAddr {
    LinkAddr::new(0, a.qpn(), a.gid())
}

impl<C: Copy> Table<C> {
    /// An empty table.
    pub fn new(limits: Limits) -> Table<C> {
        Table {
            limits,
            peers: HashMap::with_capacity(limits.connections),
        }
    }

    /// Entries, of every state.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// The way a packet of `len` bytes to `peer` goes, and whether the
    /// caller is to start connecting to it (the entry is then connecting).
    /// Allocates nothing past the table's capacity.
    pub fn route(&mut self, peer: LinkAddr, len: usize, now: Instant) -> (Route<C>, bool) {
        let ud = if len <= self.limits.ud_max {
            Route::Ud
        } else {
            Route::TooBig(self.limits.ud_max)
        };
        if !peer.connected() {
            return (ud, false);
        }
        let full = self.peers.len() >= self.limits.connections;
        match self.peers.get_mut(&key(peer)) {
            Some(State::Up { conn, max, used }) => {
                if len > *max {
                    return (Route::TooBig(*max), false);
                }
                *used = now;
                (Route::Rc(*conn), false)
            }
            Some(State::Connecting) => (
                if len <= self.limits.ud_max {
                    ud
                } else {
                    Route::Held
                },
                false,
            ),
            Some(s @ State::Refused { .. }) => match s {
                State::Refused { until } if *until > now => (ud, false),
                _ => {
                    *s = State::Connecting;
                    (
                        if len <= self.limits.ud_max {
                            ud
                        } else {
                            Route::Held
                        },
                        true,
                    )
                }
            },
            None if full => (ud, false),
            None => {
                self.peers.insert(key(peer), State::Connecting);
                (
                    if len <= self.limits.ud_max {
                        ud
                    } else {
                        Route::Held
                    },
                    true,
                )
            }
        }
    }

    /// The connection to `peer` is up as `conn`, the peer taking `pd`.
    /// False when nobody waits for it (the peer was forgotten meanwhile):
    /// the caller then closes `conn`.
    pub fn established(&mut self, peer: LinkAddr, conn: C, pd: PrivateData, now: Instant) -> bool {
        match self.peers.get_mut(&key(peer)) {
            Some(s @ State::Connecting) => {
                *s = State::Up {
                    conn,
                    max: pd.max_packet(),
                    used: now,
                };
                true
            }
            _ => false,
        }
    }

    /// Connecting to `peer` failed, or its connection broke: datagrams
    /// until the retry time. The connection that was up, to close.
    pub fn failed(&mut self, peer: LinkAddr, now: Instant) -> Option<C> {
        let s = self.peers.get_mut(&key(peer))?;
        let was = match *s {
            State::Up { conn, .. } => Some(conn),
            _ => None,
        };
        *s = State::Refused {
            until: now + self.limits.retry,
        };
        was
    }

    /// `peer` is gone (its address changed): its entry goes; its
    /// connection, when up, to close.
    pub fn forget(&mut self, peer: LinkAddr) -> Option<C> {
        match self.peers.remove(&key(peer))? {
            State::Up { conn, .. } => Some(conn),
            _ => None,
        }
    }

    /// The entries done with at `now`: connections unused for the idle
    /// time (returned, to close) and refusals past their retry time.
    pub fn age(&mut self, now: Instant) -> Vec<(LinkAddr, C)> {
        let idle = self.limits.idle;
        let mut gone = Vec::new();
        self.peers.retain(|&peer, s| match *s {
            State::Up { conn, used, .. } if now.saturating_duration_since(used) >= idle => {
                gone.push((peer, conn));
                false
            }
            State::Refused { until } => until > now,
            _ => true,
        });
        gone
    }

    /// Every entry goes; the connections that were up, to close.
    pub fn drain(&mut self) -> Vec<(LinkAddr, C)> {
        self.peers
            .drain()
            .filter_map(|(p, s)| match s {
                State::Up { conn, .. } => Some((p, conn)),
                _ => None,
            })
            .collect()
    }

    /// The connections up: peer, handle, the peer's longest packet.
    pub fn up(&self) -> impl Iterator<Item = (LinkAddr, C, usize)> + '_ {
        self.peers.iter().filter_map(|(&p, s)| match *s {
            State::Up { conn, max, .. } => Some((p, conn, max)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use rdma::Gid;

    use super::*;

    fn peer(flags: u8, n: u8) -> LinkAddr {
        let mut g = [0u8; 16];
        g[0] = 0xfd;
        g[15] = n;
        LinkAddr::new(flags, 0x100 + u32::from(n), Gid(g))
    }

    #[test]
    fn the_connected_flag_is_the_top_bit_of_the_first_octet() {
        let a: LinkAddr = "80:00:00:48:fe:80:00:00:00:00:00:00:02:c9:03:00:0a:0b:0c:0d"
            .parse()
            .unwrap();
        assert!(a.connected());
        assert_eq!(a.qpn(), 0x48);
        for flags in [0x00, 0x01, 0x40, 0x7f] {
            assert!(
                !LinkAddr::new(flags, 0x48, a.gid()).connected(),
                "{flags:#x}"
            );
        }
        assert!(LinkAddr::new(0xff, 0x48, a.gid()).connected());
    }

    #[test]
    fn service_ids_and_ports_come_from_the_qpn() {
        assert_eq!(service_id(0x48), 0x1000_0000_0000_0048);
        assert_eq!(service_id(0xff12_3456), 0x1000_0000_0012_3456);
        assert_eq!(port(0x48), 0x4048);
        assert_eq!(port(0x4048), 0x4048);
        assert_eq!(port(0xff_ffff), 0x7fff);
        for q in [0, 1, 17, 0x3fff, 0x4000, 0xff_ffff] {
            assert!((PORT_BASE..0x8000).contains(&port(q)), "{q:#x}");
        }
    }

    #[test]
    fn private_data_round_trips_and_hostile_bytes_are_refused() {
        let pd = PrivateData {
            qpn: 0x12_3456,
            mtu: 65524,
        };
        let b = pd.to_bytes();
        assert_eq!(b, [0, 0x12, 0x34, 0x56, 0, 0, 0xff, 0xf4]);
        assert_eq!(PrivateData::parse(&b), Ok(pd));
        assert_eq!(pd.max_packet(), 65520);
        // The CM pads to its length: the rest is ignored.
        let mut padded = b.to_vec();
        padded.resize(56, 0xee);
        assert_eq!(PrivateData::parse(&padded), Ok(pd));
        for n in 0..8 {
            assert_eq!(PrivateData::parse(&b[..n]), Err(BadPrivateData::Short(n)));
        }
        let bad_qpn = PrivateData {
            qpn: 0x100_0000,
            mtu: 65524,
        }
        .to_bytes();
        assert_eq!(
            PrivateData::parse(&bad_qpn),
            Err(BadPrivateData::Qpn(0x100_0000))
        );
        for mtu in [0, 4, 579] {
            let b = PrivateData { qpn: 1, mtu }.to_bytes();
            assert_eq!(PrivateData::parse(&b), Err(BadPrivateData::Mtu(mtu)));
        }
        // A limit past connected mode's is taken, capped.
        let huge = PrivateData::parse(
            &PrivateData {
                qpn: 1,
                mtu: u32::MAX,
            }
            .to_bytes(),
        )
        .unwrap();
        assert_eq!(huge.max_packet(), MAX_MTU as usize);
        let least = PrivateData::parse(&PrivateData { qpn: 1, mtu: 580 }.to_bytes()).unwrap();
        assert_eq!(least.max_packet(), 576);
        // Every 8-byte pattern of one byte value: parsed or refused, no panic.
        for v in 0..=255u8 {
            let _ = PrivateData::parse(&[v; 8]);
        }
    }

    #[test]
    fn a_connection_goes_connecting_then_up_then_idle() {
        let t0 = Instant::now();
        let mut t: Table<u32> = Table::new(Limits::default());
        let p = peer(LinkAddr::CONNECTED, 2);
        // The first packet starts the connection and goes as a datagram;
        // a long one meanwhile is held.
        assert_eq!(t.route(p, 100, t0), (Route::Ud, true));
        assert_eq!(t.route(p, 100, t0), (Route::Ud, false));
        assert_eq!(t.route(p, 8000, t0), (Route::Held, false));
        let pd = PrivateData {
            qpn: p.qpn(),
            mtu: 65524,
        };
        assert!(t.established(p, 7, pd, t0));
        assert_eq!(t.route(p, 8000, t0), (Route::Rc(7), false));
        assert_eq!(t.route(p, 65520, t0), (Route::Rc(7), false));
        assert_eq!(t.route(p, 65521, t0), (Route::TooBig(65520), false));
        // The same peer with its flag off still maps to the connection's
        // entry, but a datagram-mode address never uses a connection.
        assert_eq!(t.route(peer(0, 2), 100, t0), (Route::Ud, false));
        assert_eq!(
            t.up().collect::<Vec<_>>(),
            [(LinkAddr::new(0, p.qpn(), p.gid()), 7, 65520)]
        );
        // Used at 60 s: still there at 150 s, gone at 180 s.
        assert_eq!(
            t.route(p, 100, t0 + Duration::from_secs(60)),
            (Route::Rc(7), false)
        );
        assert!(t.age(t0 + Duration::from_secs(150)).is_empty());
        let gone = t.age(t0 + Duration::from_secs(180));
        assert_eq!(gone.iter().map(|g| g.1).collect::<Vec<_>>(), [7]);
        assert!(t.is_empty());
        // Then the next packet connects again.
        assert_eq!(
            t.route(p, 100, t0 + Duration::from_secs(181)),
            (Route::Ud, true)
        );
    }

    #[test]
    fn a_refusing_or_datagram_peer_gets_datagrams_and_too_big() {
        let t0 = Instant::now();
        let mut t: Table<u32> = Table::new(Limits::default());
        let dg = peer(0, 3);
        assert_eq!(t.route(dg, 4092, t0), (Route::Ud, false));
        assert_eq!(t.route(dg, 4093, t0), (Route::TooBig(4092), false));
        assert!(t.is_empty(), "a datagram-mode peer takes no entry");
        let p = peer(LinkAddr::CONNECTED, 4);
        assert!(t.route(p, 100, t0).1);
        assert_eq!(t.failed(p, t0), None);
        assert_eq!(t.route(p, 8000, t0), (Route::TooBig(4092), false));
        assert_eq!(
            t.route(p, 100, t0 + Duration::from_secs(9)),
            (Route::Ud, false)
        );
        // After the retry time: another try.
        assert_eq!(
            t.route(p, 100, t0 + Duration::from_secs(10)),
            (Route::Ud, true)
        );
        // A late answer for a forgotten peer is refused (the caller closes
        // it); so is one for a refused peer.
        let pd = PrivateData { qpn: 0, mtu: 65524 };
        assert_eq!(t.forget(p), None);
        assert!(!t.established(p, 9, pd, t0));
        t.route(p, 100, t0);
        t.failed(p, t0);
        assert!(!t.established(p, 9, pd, t0));
        // A broken connection hands its handle back.
        let q = peer(LinkAddr::CONNECTED, 5);
        t.route(q, 100, t0);
        assert!(t.established(q, 11, pd, t0));
        assert_eq!(t.failed(q, t0), Some(11));
        assert_eq!(t.route(q, 100, t0), (Route::Ud, false));
        // Refusals go once their time is over.
        assert_eq!(t.len(), 2);
        assert!(t.age(t0 + Duration::from_secs(11)).is_empty());
        assert!(t.is_empty());
    }

    #[test]
    fn a_changed_address_lets_the_connection_go_and_the_table_is_bounded() {
        let t0 = Instant::now();
        let limits = Limits {
            connections: 4,
            ..Limits::default()
        };
        let mut t: Table<u32> = Table::new(limits);
        let pd = PrivateData { qpn: 0, mtu: 8000 };
        for n in 0..4u8 {
            let p = peer(LinkAddr::CONNECTED, n);
            assert_eq!(t.route(p, 100, t0), (Route::Ud, true));
            assert!(t.established(p, u32::from(n), pd, t0));
        }
        // A fifth peer: datagrams, no entry.
        let fifth = peer(LinkAddr::CONNECTED, 9);
        assert_eq!(t.route(fifth, 100, t0), (Route::Ud, false));
        assert_eq!(t.route(fifth, 5000, t0), (Route::TooBig(4092), false));
        assert_eq!(t.len(), 4);
        // The peer's limit, not ours, bounds what goes on its connection.
        let p0 = peer(LinkAddr::CONNECTED, 0);
        assert_eq!(t.route(p0, 7996, t0), (Route::Rc(0), false));
        assert_eq!(t.route(p0, 7997, t0), (Route::TooBig(7996), false));
        // Its address changes (flags or not): the old connection goes.
        assert_eq!(t.forget(peer(0, 0)), Some(0));
        assert_eq!(t.forget(p0), None);
        assert_eq!(t.route(fifth, 100, t0), (Route::Ud, true));
        let mut left: Vec<u32> = t.drain().into_iter().map(|g| g.1).collect();
        left.sort();
        assert_eq!(left, [1, 2, 3]);
        assert!(t.is_empty());
    }
}
