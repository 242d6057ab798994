//! The data path allocates nothing per packet: this test binary's global
//! allocator counts the allocations of each thread, and the link carries
//! packets both ways (IPv4 and IPv6, from the TUN interface to a resolved
//! neighbour and from the fabric to the kernel) between two readings; in
//! connected mode too (packets of 8,000 bytes on a peer's connection, a
//! peer in datagram mode answered "too big", messages from a connection
//! to the kernel).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use rdma::Gid;
use rdma_ipoib::arp::Arp;
use rdma_ipoib::connected::{self, PrivateData, Route, Table};
use rdma_ipoib::encap::{self, Source};
use rdma_ipoib::{nd, LinkAddr};

use crate::link::Link;
use crate::route::Me;
use crate::wire::{Sent, Wire};

/// `System`, counting the calls that allocate.
struct Counting;

thread_local! {
    /// This thread's allocations (each test runs on a thread of its own).
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the allocator may run while the thread's locals go.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

// SAFETY: every method passes its arguments to `System` unchanged and
// returns its answer, so `System` upholds the `GlobalAlloc` contract; the
// count touches only a const-initialised thread-local `Cell` without a
// destructor, whose access allocates nothing (no recursion into `alloc`).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `realloc` (`ptr` came from this
        // allocator, that is from `System`), passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// A wire that copies each datagram into one send slot, as the UD queue
/// pair does, and counts them.
struct Slot {
    buf: [u8; 4096],
    sent: u64,
    bytes: u64,
    to_peer: u64,
}

impl Slot {
    fn copy(&mut self, ether_type: u16, payload: &[u8]) -> Sent {
        let n = encap::HEADER_LEN + payload.len();
        if n > self.buf.len() {
            return Sent::Dropped;
        }
        self.buf[..encap::HEADER_LEN].copy_from_slice(&encap::header(ether_type));
        self.buf[encap::HEADER_LEN..n].copy_from_slice(payload);
        self.sent += 1;
        self.bytes += n as u64;
        Sent::Posted
    }
}

impl Wire for Slot {
    fn to_group(&mut self, _: Gid, ether_type: u16, payload: &[u8]) -> Sent {
        self.copy(ether_type, payload)
    }
    fn to_peer(&mut self, _: LinkAddr, ether_type: u16, payload: &[u8]) -> Sent {
        self.to_peer += 1;
        self.copy(ether_type, payload)
    }
    fn forget(&mut self, _: Gid) {}
}

fn gid(n: u8) -> Gid {
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(&[0xfd, 0, 0, 3]);
    g[15] = n;
    Gid(g)
}

const MY4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const PEER4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const MY6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 1);

/// The link's own addresses: MY4/24 and MY6, the default P_Key.
fn addresses() -> Me {
    Me {
        v4: MY4,
        prefix4: 24,
        v6: Some(MY6),
        pkey: 0xffff,
    }
}
const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2);

/// An IPv4 TCP packet of `len` bytes from `src` to `dst`.
fn ip4(src: Ipv4Addr, dst: Ipv4Addr, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    p
}

/// An IPv6 TCP packet of `len` bytes from `src` to `dst`.
fn ip6(src: Ipv6Addr, dst: Ipv6Addr, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    p[6] = 6;
    p[7] = 64;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p
}

fn datagram(ether_type: u16, payload: &[u8]) -> Vec<u8> {
    let mut d = encap::header(ether_type).to_vec();
    d.extend_from_slice(payload);
    d
}

#[test]
fn packets_both_ways_allocate_nothing() {
    let now = Instant::now();
    let me = LinkAddr::new(0, 0x11, gid(1));
    let peer = LinkAddr::new(0, 0x22, gid(2));
    let from = Source {
        qpn: peer.qpn(),
        gid: Some(peer.gid()),
    };
    let wire = Slot {
        buf: [0; 4096],
        sent: 0,
        bytes: 0,
        to_peer: 0,
    };
    let mut link = Link::new(wire, addresses(), me, 4092);
    let delivered = Cell::new((0u64, 0u64));
    let mut kernel = |p: &[u8]| {
        let (n, bytes) = delivered.get();
        delivered.set((n + 1, bytes + p.len() as u64));
        true
    };
    // The peer asks for both our addresses: learnt, and answered.
    let arp = datagram(
        encap::ETHERTYPE_ARP,
        &Arp::request(peer, PEER4, MY4).to_bytes(),
    );
    link.on_datagram(&arp, from, now, &mut kernel);
    let ns = datagram(encap::ETHERTYPE_IPV6, &nd::solicitation(PEER6, peer, MY6));
    link.on_datagram(&ns, from, now, &mut kernel);
    assert_eq!(link.wire.to_peer, 2, "the ARP reply and the advertisement");

    let out4 = ip4(MY4, PEER4, 4092);
    let out6 = ip6(MY6, PEER6, 1500);
    let in4 = datagram(encap::ETHERTYPE_IPV4, &ip4(PEER4, MY4, 4092));
    let in6 = datagram(encap::ETHERTYPE_IPV6, &ip6(PEER6, MY6, 1500));
    let carry = |link: &mut Link<Slot>, kernel: &mut dyn FnMut(&[u8]) -> bool| {
        link.on_tun_packet(&out4, now);
        link.on_tun_packet(&out6, now);
        link.on_datagram(&in4, from, now, &mut |p| kernel(p));
        link.on_datagram(&in6, from, now, &mut |p| kernel(p));
    };
    // Once, so that what is made on first use (the standard output's
    // buffer, a table's first entries) is there.
    carry(&mut link, &mut kernel);
    let stats = link.stats;
    let wire = (link.wire.sent, link.wire.bytes, link.wire.to_peer);
    let delivered0 = delivered.get();

    // The counter counts: an allocation on this thread shows.
    let a0 = allocs();
    drop(std::hint::black_box(vec![0u8; 1]));
    assert_eq!(allocs() - a0, 1);

    const N: u64 = 1000;
    let a0 = allocs();
    for _ in 0..N {
        carry(&mut link, &mut kernel);
    }
    let allocated = allocs() - a0;
    assert_eq!(allocated, 0, "allocations over {N} rounds of 4 packets");

    // Every packet went where it should, whole: to the peer (no solicitation:
    // the neighbours stayed resolved), and to the kernel.
    let sent = 4096 + 1504;
    assert_eq!(
        (
            link.wire.sent - wire.0,
            link.wire.bytes - wire.1,
            link.wire.to_peer - wire.2
        ),
        (2 * N, N * sent, 2 * N)
    );
    let delivered = delivered.get();
    assert_eq!(
        (delivered.0 - delivered0.0, delivered.1 - delivered0.1),
        (2 * N, N * (4092 + 1500))
    );
    let s = link.stats;
    assert_eq!(
        (
            s.tx - stats.tx,
            s.tx_bytes - stats.tx_bytes,
            s.rx - stats.rx,
            s.rx_bytes - stats.rx_bytes
        ),
        (2 * N, N * sent, 2 * N, N * sent)
    );
    assert_eq!(
        (s.tx_dropped, s.unresolved, s.unroutable, link.drops.total()),
        (0, 0, 0, 0)
    );
}

/// The connected-mode wire as `rc::Connections::unicast` routes: the
/// connection table picks the way, a connection's message is copied into
/// one registered slot of the connected-mode size, a datagram into one of
/// the UD size.
struct CmSlots {
    table: Table<usize>,
    msg: Box<[u8]>,
    dgram: Slot,
    rc_sent: u64,
}

impl Wire for CmSlots {
    fn to_group(&mut self, _: Gid, ether_type: u16, payload: &[u8]) -> Sent {
        self.dgram.copy(ether_type, payload)
    }
    fn to_peer(&mut self, to: LinkAddr, ether_type: u16, payload: &[u8]) -> Sent {
        match self.table.route(to, payload.len(), Instant::now()).0 {
            Route::Rc(_) => {
                let n = encap::HEADER_LEN + payload.len();
                self.msg[..encap::HEADER_LEN].copy_from_slice(&encap::header(ether_type));
                self.msg[encap::HEADER_LEN..n].copy_from_slice(payload);
                self.rc_sent += 1;
                Sent::Posted
            }
            Route::Ud => self.dgram.copy(ether_type, payload),
            Route::TooBig(m) => Sent::TooBig(m),
            Route::Held => Sent::Held,
        }
    }
    fn forget(&mut self, _: Gid) {}
}

#[test]
fn connected_mode_packets_allocate_nothing() {
    let now = Instant::now();
    let me = LinkAddr::new(LinkAddr::CONNECTED, 0x11, gid(1));
    // 10.77.0.2 in connected mode, 10.77.0.3 in datagram mode.
    let cpeer = LinkAddr::new(LinkAddr::CONNECTED, 0x22, gid(2));
    let dpeer = LinkAddr::new(0, 0x33, gid(3));
    let dpeer4 = Ipv4Addr::new(10, 77, 0, 3);
    let mut table = Table::new(connected::Limits::default());
    assert!(table.route(cpeer, 100, now).1);
    let pd = PrivateData {
        qpn: cpeer.qpn(),
        mtu: connected::MAX_MTU + 4,
    };
    assert!(table.established(cpeer, 0, pd, now));
    let wire = CmSlots {
        table,
        msg: vec![0u8; 4 + connected::MAX_MTU as usize].into(),
        dgram: Slot {
            buf: [0; 4096],
            sent: 0,
            bytes: 0,
            to_peer: 0,
        },
        rc_sent: 0,
    };
    let mut link = Link::new(wire, addresses(), me, 4092);
    let delivered = Cell::new(0u64);
    let mut kernel = |p: &[u8]| {
        delivered.set(delivered.get() + p.len() as u64);
        true
    };
    for (peer, ip) in [(cpeer, PEER4), (dpeer, dpeer4)] {
        let from = Source {
            qpn: peer.qpn(),
            gid: Some(peer.gid()),
        };
        let arp = datagram(
            encap::ETHERTYPE_ARP,
            &Arp::request(peer, ip, MY4).to_bytes(),
        );
        link.on_datagram(&arp, from, now, &mut kernel);
    }
    let ns = datagram(encap::ETHERTYPE_IPV6, &nd::solicitation(PEER6, dpeer, MY6));
    let from_d = Source {
        qpn: dpeer.qpn(),
        gid: Some(dpeer.gid()),
    };
    link.on_datagram(&ns, from_d, now, &mut kernel);
    let _ = link.take_reply();

    let big4 = ip4(MY4, PEER4, 8000);
    let big_d4 = ip4(MY4, dpeer4, 8000);
    let big_d6 = ip6(MY6, PEER6, 8000);
    // As a connection delivers it: the peer's UD QPN (from the private
    // data) and the GID of its address.
    let from_rc = Source {
        qpn: cpeer.qpn(),
        gid: Some(cpeer.gid()),
    };
    let in4 = datagram(encap::ETHERTYPE_IPV4, &ip4(PEER4, MY4, 8000));
    let mut answers = 0u64;
    let mut carry = |link: &mut Link<CmSlots>, kernel: &mut dyn FnMut(&[u8]) -> bool| {
        link.on_tun_packet(&big4, now);
        for p in [&big_d4, &big_d6] {
            link.on_tun_packet(p, now);
            let r = link.take_reply().expect("an answer");
            answers += 1;
            // From the packet's destination, quoting its header.
            assert!(r.len() <= rdma_ipoib::icmp::MAX_LEN && r[0] >> 4 == p[0] >> 4);
        }
        link.on_datagram(&in4, from_rc, now, &mut |p| kernel(p));
    };
    carry(&mut link, &mut kernel);
    let (rc0, s0, d0) = (link.wire.rc_sent, link.stats, delivered.get());

    const N: u64 = 1000;
    let a0 = allocs();
    for _ in 0..N {
        carry(&mut link, &mut kernel);
    }
    let allocated = allocs() - a0;
    assert_eq!(allocated, 0, "allocations over {N} rounds");
    let s = link.stats;
    assert_eq!(link.wire.rc_sent - rc0, N, "8,000 bytes on the connection");
    assert_eq!((s.too_big - s0.too_big, answers), (2 * N, 2 * (N + 1)));
    assert_eq!(delivered.get() - d0, N * 8000);
    assert_eq!((s.tx_dropped, s.held, link.drops.total()), (0, 0, 0));
}
