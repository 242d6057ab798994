//! The link between the TUN interface and the UD queue pair: packets from
//! the kernel to their group or neighbour (resolved by ARP or neighbour
//! discovery, waiting meanwhile in preallocated buffers), datagrams from
//! the fabric classified, answered (ARP, neighbour discovery) or handed
//! to the kernel. The datagrams go through a [`Wire`]: the UD queue pair,
//! or a test's record.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Instant;

use rdma::Gid;
use rdma_ipoib::arp::{self, Arp};
use rdma_ipoib::encap::{self, Drops, Frame, Source};
use rdma_ipoib::icmp;
use rdma_ipoib::nd::{self, Nd};
use rdma_ipoib::{mgid, neigh, LinkAddr};

use crate::route::{self, Dest, Me};
use crate::wire::{Sent, Wire};

/// What the link counted besides the classified drops.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Datagrams posted, and received.
    pub tx: u64,
    pub rx: u64,
    /// Their bytes, the 4-byte encapsulation header included.
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Packets from the kernel that were no IP packets, or IPv6 without an
    /// IPv6 address.
    pub unroutable: u64,
    /// Packets dropped for want of a send slot or an address handle, or
    /// too long.
    pub tx_dropped: u64,
    /// Packets whose neighbour was not resolved (or no room to wait).
    pub unresolved: u64,
    /// Malformed neighbour discovery messages, or ones whose link-layer
    /// address is not their sender's.
    pub nd_dropped: u64,
    /// Receives that failed.
    pub rx_errors: u64,
    /// Sends that failed.
    pub tx_errors: u64,
    /// Packets the kernel did not take.
    pub tun_errors: u64,
    /// Packets too long for the way to their peer (connected mode, a
    /// peer in datagram mode): answered with "fragmentation needed" or
    /// "packet too big".
    pub too_big: u64,
    /// Packets longer than a datagram while their peer's connection was
    /// being made.
    pub held: u64,
}

/// The link's state.
pub struct Link<W> {
    pub wire: W,
    me: Me,
    lladdr: LinkAddr,
    neigh: neigh::Table<usize>,
    pool: Vec<Box<[u8]>>,
    pool_len: Vec<usize>,
    pool_free: Vec<usize>,
    /// The ICMP answer to a packet too big, for the kernel.
    reply: Box<[u8]>,
    reply_len: usize,
    pub drops: Drops,
    pub stats: Stats,
}

impl<W: Wire> Link<W> {
    /// The link of interface `me` at `lladdr` over `wire`; packets of up to
    /// `max_payload` bytes wait for their neighbours.
    pub fn new(wire: W, me: Me, lladdr: LinkAddr, max_payload: usize) -> Link<W> {
        let limits = neigh::Limits::default();
        let waiting = limits.incomplete * limits.queue;
        Link {
            wire,
            me,
            lladdr,
            neigh: neigh::Table::new(limits),
            pool: (0..waiting)
                .map(|_| vec![0u8; max_payload].into())
                .collect(),
            pool_len: vec![0; waiting],
            pool_free: (0..waiting).collect(),
            reply: vec![0u8; icmp::MAX_LEN].into(),
            reply_len: 0,
            drops: Drops::default(),
            stats: Stats::default(),
        }
    }

    /// A packet `p` read from the TUN interface.
    pub fn on_tun_packet(&mut self, p: &[u8], now: Instant) {
        let ether_type = if p.first().is_some_and(|b| b >> 4 == 6) {
            encap::ETHERTYPE_IPV6
        } else {
            encap::ETHERTYPE_IPV4
        };
        match route::dest(p, &self.me) {
            Err(_) => self.stats.unroutable += 1,
            Ok(Dest::Group(g, t)) => self.send_group(g, t, p),
            Ok(Dest::Neighbour(ip)) => match self.neigh.lookup(ip, now) {
                neigh::Lookup::Send(a) => self.send_unicast(a, ether_type, p),
                neigh::Lookup::SendAndRefresh(a) => {
                    self.send_unicast(a, ether_type, p);
                    self.solicit(ip);
                }
                neigh::Lookup::Resolve { solicit } => {
                    self.wait(ip, p);
                    if solicit {
                        self.solicit(ip);
                    }
                }
                neigh::Lookup::Full => self.stats.unresolved += 1,
            },
        }
    }

    /// Keeps `p` until `ip` is resolved.
    fn wait(&mut self, ip: IpAddr, p: &[u8]) {
        let Some(i) = self.pool_free.pop() else {
            self.stats.unresolved += 1;
            return;
        };
        let n = p.len();
        if n > self.pool[i].len() {
            self.pool_free.push(i);
            self.stats.tx_dropped += 1;
            return;
        }
        self.pool[i][..n].copy_from_slice(p);
        self.pool_len[i] = n;
        if let Err(i) = self.neigh.wait(ip, i) {
            self.pool_free.push(i);
            self.stats.unresolved += 1;
        }
    }

    fn send_group(&mut self, g: Gid, ether_type: u16, p: &[u8]) {
        let r = self.wire.to_group(g, ether_type, p);
        self.count_send(r, p.len());
    }

    fn send_unicast(&mut self, to: LinkAddr, ether_type: u16, p: &[u8]) {
        let r = self.wire.to_peer(to, ether_type, p);
        if let Sent::TooBig(mtu) = r {
            let mtu = u32::try_from(mtu).unwrap_or(u32::MAX);
            if let Some(n) = icmp::too_big(p, mtu, &mut self.reply) {
                self.reply_len = n;
            }
        }
        self.count_send(r, p.len());
    }

    /// The ICMP answer to the last packet too big for its way, once: for
    /// the kernel, after [`on_tun_packet`](Self::on_tun_packet) and
    /// [`on_datagram`](Self::on_datagram).
    pub fn take_reply(&mut self) -> Option<&[u8]> {
        let n = std::mem::take(&mut self.reply_len);
        (n > 0).then(|| &self.reply[..n])
    }

    fn count_send(&mut self, r: Sent, len: usize) {
        match r {
            Sent::Posted => {
                self.stats.tx += 1;
                self.stats.tx_bytes += (encap::HEADER_LEN + len) as u64;
            }
            Sent::Dropped => self.stats.tx_dropped += 1,
            Sent::Failed => self.stats.tx_errors += 1,
            Sent::TooBig(_) => self.stats.too_big += 1,
            Sent::Held => self.stats.held += 1,
        }
    }

    /// Asks for `ip`'s link-layer address: an ARP request to the broadcast
    /// group, or a neighbour solicitation to the solicited-node group.
    fn solicit(&mut self, ip: IpAddr) {
        match ip {
            IpAddr::V4(t) => {
                let req = Arp::request(self.lladdr, self.me.v4, t).to_bytes();
                let g = mgid::ipv4_broadcast(self.me.pkey, mgid::LINK_LOCAL);
                self.send_group(g, encap::ETHERTYPE_ARP, &req);
            }
            IpAddr::V6(t) => {
                let Some(src) = self.me.v6 else { return };
                let ns = nd::solicitation(src, self.lladdr, t);
                let Some(g) = mgid::ipv6(mgid::solicited_node(t), self.me.pkey, mgid::LINK_LOCAL)
                else {
                    return;
                };
                self.send_group(g, encap::ETHERTYPE_IPV6, &ns);
            }
        }
    }

    /// Tells the link where this interface is, so that neighbours that
    /// knew it at another address (a program restarted, with a new QP)
    /// learn the new one: a gratuitous ARP request to the broadcast group
    /// and an unsolicited neighbour advertisement (override set) to the
    /// IPv6 all-nodes group.
    pub fn announce(&mut self) {
        let v4 = self.me.v4;
        let garp = Arp::request(self.lladdr, v4, v4).to_bytes();
        let g = mgid::ipv4_broadcast(self.me.pkey, mgid::LINK_LOCAL);
        self.send_group(g, encap::ETHERTYPE_ARP, &garp);
        if let Some(v6) = self.me.v6 {
            let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
            let na = nd::advertisement(v6, self.lladdr, all, false);
            if let Some(g) = mgid::ipv6(all, self.me.pkey, mgid::LINK_LOCAL) {
                self.send_group(g, encap::ETHERTYPE_IPV6, &na);
            }
        }
    }

    /// `ip` is at `addr`: the packets that waited for it go; a changed
    /// address's handle goes.
    fn learn(&mut self, ip: IpAddr, addr: LinkAddr, create: bool, now: Instant) {
        match self.neigh.learn(ip, addr, now, create) {
            neigh::Learned::New(waiting) => {
                println!("ipoib: neighbour {ip} lladdr {addr}");
                for i in waiting {
                    let p = std::mem::take(&mut self.pool[i]);
                    let n = self.pool_len[i];
                    let t = if p.first().is_some_and(|b| b >> 4 == 6) {
                        encap::ETHERTYPE_IPV6
                    } else {
                        encap::ETHERTYPE_IPV4
                    };
                    self.send_unicast(addr, t, &p[..n]);
                    self.pool[i] = p;
                    self.pool_free.push(i);
                }
            }
            neigh::Learned::Changed(old) => {
                println!("ipoib: neighbour {ip} lladdr {addr} (was {old})");
                self.wire.moved(old);
                if old.gid() != addr.gid() {
                    self.wire.forget(old.gid());
                }
            }
            neigh::Learned::Same | neigh::Learned::Full => {}
        }
    }

    /// A send completed; `ok`: it succeeded.
    pub fn on_sent(&mut self, ok: bool) {
        if !ok {
            self.stats.tx_errors += 1;
        }
    }

    /// A receive failed.
    pub fn on_recv_error(&mut self) {
        self.stats.rx_errors += 1;
    }

    /// Datagram `d` from `from`: classified, answered, learnt from or handed
    /// to `deliver` (the kernel; false when it did not take the packet).
    pub fn on_datagram(
        &mut self,
        d: &[u8],
        from: Source,
        now: Instant,
        deliver: &mut impl FnMut(&[u8]) -> bool,
    ) {
        self.stats.rx += 1;
        self.stats.rx_bytes += d.len() as u64;
        match encap::classify(d, &from, &self.lladdr) {
            Err(d) => self.drops.count(&d),
            Ok(Frame::Ipv4(p)) => self.deliver(deliver, p),
            Ok(Frame::Ipv6(p)) => match nd::parse(p) {
                Ok(None) => self.deliver(deliver, p),
                Ok(Some(m)) => self.on_nd(m, &from, now),
                Err(_) => self.stats.nd_dropped += 1,
            },
            // Our own address claimed by another: nothing to learn.
            Ok(Frame::Arp(a)) if a.sender_ip == self.me.v4 => self.drops.arp += 1,
            Ok(Frame::Arp(a)) => {
                let for_me = a.target_ip == self.me.v4;
                self.learn(IpAddr::V4(a.sender_ip), a.sender, for_me, now);
                if for_me && a.op == arp::Op::Request {
                    let reply = a.reply(self.lladdr).to_bytes();
                    self.send_unicast(a.sender, encap::ETHERTYPE_ARP, &reply);
                }
            }
        }
    }

    fn on_nd(&mut self, m: Nd, from: &Source, now: Instant) {
        let my6 = self.me.v6;
        match m {
            Nd::Solicitation {
                src,
                target,
                source: Some(l),
                ..
            } if !src.is_unspecified() && Some(src) != my6 => {
                if encap::check_sender(&l, from).is_err() {
                    self.stats.nd_dropped += 1;
                    return;
                }
                let for_me = Some(target) == my6;
                self.learn(IpAddr::V6(src), l, for_me, now);
                if for_me {
                    let na = nd::advertisement(target, self.lladdr, src, true);
                    self.send_unicast(l, encap::ETHERTYPE_IPV6, &na);
                }
            }
            Nd::Advertisement {
                target,
                link: Some(l),
                ..
            } => {
                if encap::check_sender(&l, from).is_err() {
                    self.stats.nd_dropped += 1;
                    return;
                }
                self.learn(IpAddr::V6(target), l, false, now);
            }
            _ => {}
        }
    }

    fn deliver(&mut self, deliver: &mut impl FnMut(&[u8]) -> bool, p: &[u8]) {
        if !deliver(p) {
            self.stats.tun_errors += 1;
        }
    }

    /// The timers: solicitations again, packets given up.
    pub fn tick(&mut self, now: Instant) {
        let due = self.neigh.tick(now);
        for ip in due.solicit {
            self.solicit(ip);
        }
        for i in due.dropped {
            self.pool_free.push(i);
            self.stats.unresolved += 1;
        }
    }

    /// The neighbour table and the counters, on standard output.
    pub fn dump(&self) {
        for (ip, a) in self.neigh.resolved() {
            println!("ipoib: table {ip} lladdr {a}");
        }
        println!(
            "ipoib: table size {} ({} incomplete)",
            self.neigh.len(),
            self.neigh.incomplete()
        );
        println!("ipoib: {:?} {:?}", self.stats, self.drops);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use super::*;

    #[derive(Clone, Debug, PartialEq, Eq)]
    enum To {
        Group(Gid),
        Peer(LinkAddr),
    }

    /// A wire that records what was sent.
    #[derive(Default)]
    struct Record {
        sent: Vec<(To, u16, Vec<u8>)>,
        forgotten: Vec<Gid>,
        moved: Vec<LinkAddr>,
    }

    impl Wire for Record {
        fn to_group(&mut self, mgid: Gid, ether_type: u16, payload: &[u8]) -> Sent {
            self.sent
                .push((To::Group(mgid), ether_type, payload.to_vec()));
            Sent::Posted
        }
        fn to_peer(&mut self, to: LinkAddr, ether_type: u16, payload: &[u8]) -> Sent {
            self.sent.push((To::Peer(to), ether_type, payload.to_vec()));
            Sent::Posted
        }
        fn forget(&mut self, gid: Gid) {
            self.forgotten.push(gid);
        }
        fn moved(&mut self, old: LinkAddr) {
            self.moved.push(old);
        }
    }

    fn gid(n: u8) -> Gid {
        let mut g = [0u8; 16];
        g[..4].copy_from_slice(&[0xfd, 0, 0, 3]);
        g[15] = n;
        Gid(g)
    }

    const MY4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    const PEER4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

    fn my6() -> Ipv6Addr {
        "fd77::1".parse().unwrap()
    }

    fn peer6() -> Ipv6Addr {
        "fd77::2".parse().unwrap()
    }

    fn me() -> LinkAddr {
        LinkAddr::new(0, 0x11, gid(1))
    }

    fn peer() -> LinkAddr {
        LinkAddr::new(0, 0x22, gid(2))
    }

    fn link() -> Link<Record> {
        let m = Me {
            v4: MY4,
            prefix4: 24,
            v6: Some(my6()),
            pkey: 0xffff,
        };
        Link::new(Record::default(), m, me(), 4092)
    }

    fn from(a: LinkAddr) -> Source {
        Source {
            qpn: a.qpn(),
            gid: Some(a.gid()),
        }
    }

    fn bcast() -> Gid {
        mgid::ipv4_broadcast(0xffff, mgid::LINK_LOCAL)
    }

    /// A 28-byte IPv4 packet from `src` to `dst`, its last byte `tag`.
    fn ip4(src: Ipv4Addr, dst: Ipv4Addr, tag: u8) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0];
        p.extend_from_slice(&src.octets());
        p.extend_from_slice(&dst.octets());
        p.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, tag]);
        p
    }

    fn datagram(ether_type: u16, payload: &[u8]) -> Vec<u8> {
        let mut d = encap::header(ether_type).to_vec();
        d.extend_from_slice(payload);
        d
    }

    /// Hands `d` from `src` to `l`; the packets it delivered.
    fn receive(l: &mut Link<Record>, d: &[u8], src: Source, now: Instant) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        l.on_datagram(d, src, now, &mut |p| {
            got.push(p.to_vec());
            true
        });
        got
    }

    fn arp_reply_from_peer() -> Vec<u8> {
        let a = Arp {
            op: arp::Op::Reply,
            sender: peer(),
            sender_ip: PEER4,
            target: me(),
            target_ip: MY4,
        };
        datagram(encap::ETHERTYPE_ARP, &a.to_bytes())
    }

    #[test]
    fn unicast_waits_for_the_arp_answer_then_goes_to_the_peer() {
        let now = Instant::now();
        let mut l = link();
        let p1 = ip4(MY4, PEER4, 1);
        l.on_tun_packet(&p1, now);
        assert_eq!(l.wire.sent.len(), 1);
        let (to, t, req) = &l.wire.sent[0];
        assert_eq!((to, *t), (&To::Group(bcast()), encap::ETHERTYPE_ARP));
        let req = Arp::parse(req).unwrap();
        assert_eq!(
            (req.op, req.sender, req.sender_ip, req.target_ip),
            (arp::Op::Request, me(), MY4, PEER4)
        );
        // A second packet waits too, without another request.
        let p2 = ip4(MY4, PEER4, 2);
        l.on_tun_packet(&p2, now);
        assert_eq!(l.wire.sent.len(), 1);

        assert!(receive(&mut l, &arp_reply_from_peer(), from(peer()), now).is_empty());
        let to_peer = |p: &Vec<u8>| (To::Peer(peer()), encap::ETHERTYPE_IPV4, p.clone());
        assert_eq!(l.wire.sent[1..], [to_peer(&p1), to_peer(&p2)]);
        let p3 = ip4(MY4, PEER4, 3);
        l.on_tun_packet(&p3, now);
        assert_eq!(l.wire.sent[3], to_peer(&p3));
        assert_eq!((l.stats.tx, l.stats.unresolved), (4, 0));
    }

    #[test]
    fn an_arp_request_for_us_is_answered_and_one_for_another_is_not() {
        let now = Instant::now();
        let mut l = link();
        let other = Arp::request(peer(), PEER4, Ipv4Addr::new(10, 77, 0, 9));
        let got = receive(
            &mut l,
            &datagram(encap::ETHERTYPE_ARP, &other.to_bytes()),
            from(peer()),
            now,
        );
        assert!(got.is_empty() && l.wire.sent.is_empty());
        let req = Arp::request(peer(), PEER4, MY4);
        receive(
            &mut l,
            &datagram(encap::ETHERTYPE_ARP, &req.to_bytes()),
            from(peer()),
            now,
        );
        assert_eq!(l.wire.sent.len(), 1);
        let (to, t, reply) = &l.wire.sent[0];
        assert_eq!((to, *t), (&To::Peer(peer()), encap::ETHERTYPE_ARP));
        assert_eq!(Arp::parse(reply).unwrap(), req.reply(me()));
        // The requester is learnt: a packet to it goes at once.
        l.on_tun_packet(&ip4(MY4, PEER4, 1), now);
        assert_eq!(l.wire.sent[1].0, To::Peer(peer()));
    }

    #[test]
    fn forged_and_own_datagrams_are_counted_and_change_nothing() {
        let now = Instant::now();
        let mut l = link();
        let liar = Source {
            qpn: 0x33,
            gid: Some(gid(2)),
        };
        assert!(receive(&mut l, &arp_reply_from_peer(), liar, now).is_empty());
        assert_eq!(l.drops.forged, 1);
        // Our own broadcast, looped back.
        let req = Arp::request(me(), MY4, PEER4);
        receive(
            &mut l,
            &datagram(encap::ETHERTYPE_ARP, &req.to_bytes()),
            from(me()),
            now,
        );
        assert_eq!(l.drops.own, 1);
        // Another claiming our address.
        let claim = Arp::request(peer(), MY4, MY4);
        receive(
            &mut l,
            &datagram(encap::ETHERTYPE_ARP, &claim.to_bytes()),
            from(peer()),
            now,
        );
        assert_eq!(l.drops.arp, 1);
        assert!(l.wire.sent.is_empty());
        // Nothing was learnt: a packet to the peer resolves it first.
        l.on_tun_packet(&ip4(MY4, PEER4, 1), now);
        assert_eq!(l.wire.sent[0].0, To::Group(bcast()));
        for bad in [
            &[0x08u8][..],
            &datagram(0x88b5, &[0; 20]),
            &datagram(0x0800, &[0x45; 8]),
        ] {
            assert!(receive(&mut l, bad, from(peer()), now).is_empty());
        }
        assert_eq!((l.drops.short, l.drops.ether_type, l.drops.ip), (1, 1, 1));
        assert_eq!(l.stats.rx, 6);
    }

    #[test]
    fn ip_packets_go_to_the_kernel() {
        let now = Instant::now();
        let mut l = link();
        let p = ip4(PEER4, MY4, 7);
        let mut padded = p.clone();
        padded.extend_from_slice(&[0xee; 6]);
        let got = receive(
            &mut l,
            &datagram(encap::ETHERTYPE_IPV4, &padded),
            from(peer()),
            now,
        );
        assert_eq!(got, [p]);
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[5] = 8;
        v6[6] = 17;
        let got = receive(
            &mut l,
            &datagram(encap::ETHERTYPE_IPV6, &v6),
            from(peer()),
            now,
        );
        assert_eq!(got, [v6]);
        let mut refused = |_: &[u8]| false;
        l.on_datagram(
            &datagram(encap::ETHERTYPE_IPV4, &ip4(PEER4, MY4, 8)),
            from(peer()),
            now,
            &mut refused,
        );
        assert_eq!(l.stats.tun_errors, 1);
    }

    #[test]
    fn a_solicitation_for_our_address_is_advertised_to_its_sender() {
        let now = Instant::now();
        let mut l = link();
        let ns = nd::solicitation(peer6(), peer(), my6());
        let got = receive(
            &mut l,
            &datagram(encap::ETHERTYPE_IPV6, &ns),
            from(peer()),
            now,
        );
        assert!(got.is_empty(), "neighbour discovery stays in the program");
        assert_eq!(l.wire.sent.len(), 1);
        let (to, t, na) = &l.wire.sent[0];
        assert_eq!((to, *t), (&To::Peer(peer()), encap::ETHERTYPE_IPV6));
        assert_eq!(
            nd::parse(na),
            Ok(Some(Nd::Advertisement {
                src: my6(),
                dst: peer6(),
                target: my6(),
                link: Some(me()),
                solicited: true,
                override_: true
            }))
        );
        // One for another address: learnt from (nothing), not answered.
        let other = nd::solicitation(peer6(), peer(), "fd77::9".parse().unwrap());
        receive(
            &mut l,
            &datagram(encap::ETHERTYPE_IPV6, &other),
            from(peer()),
            now,
        );
        assert_eq!(l.wire.sent.len(), 1);
        // A solicitation whose link-layer address is not its sender's.
        let forged = nd::solicitation(peer6(), LinkAddr::new(0, 0x44, gid(2)), my6());
        receive(
            &mut l,
            &datagram(encap::ETHERTYPE_IPV6, &forged),
            from(peer()),
            now,
        );
        assert_eq!((l.wire.sent.len(), l.stats.nd_dropped), (1, 1));
    }

    #[test]
    fn ipv6_unicast_solicits_the_solicited_node_group() {
        let now = Instant::now();
        let mut l = link();
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[8..24].copy_from_slice(&my6().octets());
        p[24..40].copy_from_slice(&peer6().octets());
        l.on_tun_packet(&p, now);
        let sn = mgid::ipv6(mgid::solicited_node(peer6()), 0xffff, mgid::LINK_LOCAL).unwrap();
        assert_eq!(l.wire.sent.len(), 1);
        assert_eq!(l.wire.sent[0].0, To::Group(sn));
        let na = nd::advertisement(peer6(), peer(), my6(), true);
        receive(
            &mut l,
            &datagram(encap::ETHERTYPE_IPV6, &na),
            from(peer()),
            now,
        );
        assert_eq!(
            l.wire.sent[1],
            (To::Peer(peer()), encap::ETHERTYPE_IPV6, p.clone())
        );
    }

    #[test]
    fn a_restarted_peer_announcing_itself_replaces_its_entry() {
        let now = Instant::now();
        let mut l = link();
        l.on_tun_packet(&ip4(MY4, PEER4, 1), now);
        receive(&mut l, &arp_reply_from_peer(), from(peer()), now);
        // The same GID, a new QP: the address handle stays.
        let again = LinkAddr::new(0, 0x23, gid(2));
        let garp = Arp::request(again, PEER4, PEER4);
        receive(
            &mut l,
            &datagram(encap::ETHERTYPE_ARP, &garp.to_bytes()),
            from(again),
            now,
        );
        assert!(l.wire.forgotten.is_empty());
        l.on_tun_packet(&ip4(MY4, PEER4, 2), now);
        assert_eq!(l.wire.sent.last().unwrap().0, To::Peer(again));
        // Another GID: the old one's handle goes.
        let moved = LinkAddr::new(0, 0x24, gid(3));
        let garp = Arp::request(moved, PEER4, PEER4);
        receive(
            &mut l,
            &datagram(encap::ETHERTYPE_ARP, &garp.to_bytes()),
            from(moved),
            now,
        );
        assert_eq!(l.wire.forgotten, [gid(2)]);
        // Each change lets the old address's connection go.
        assert_eq!(l.wire.moved, [peer(), again]);
        l.on_tun_packet(&ip4(MY4, PEER4, 3), now);
        assert_eq!(l.wire.sent.last().unwrap().0, To::Peer(moved));
        // Our announcement: a gratuitous ARP, an unsolicited advertisement.
        let n = l.wire.sent.len();
        l.announce();
        let garp = Arp::parse(&l.wire.sent[n].2).unwrap();
        assert_eq!(
            (garp.sender_ip, garp.target_ip, garp.sender),
            (MY4, MY4, me())
        );
        assert!(matches!(
            nd::parse(&l.wire.sent[n + 1].2),
            Ok(Some(Nd::Advertisement { target, solicited: false, override_: true, .. })) if target == my6()
        ));
    }

    #[test]
    fn unanswered_packets_are_dropped_and_their_buffers_come_back() {
        let mut now = Instant::now();
        let mut l = link();
        let free = l.pool_free.len();
        for round in 0..50u8 {
            let to = Ipv4Addr::new(10, 77, 1, round);
            for tag in 0..5 {
                l.on_tun_packet(&ip4(MY4, to, tag), now);
            }
            // Three wait (the queue's bound), two are dropped at once.
            assert_eq!(l.pool_free.len(), free - 3);
            for _ in 0..4 {
                now += Duration::from_secs(1);
                l.tick(now);
            }
            assert_eq!(l.pool_free.len(), free, "round {round}");
        }
        assert_eq!(l.stats.unresolved, 50 * 5);
        // Three requests per address: the first and two more.
        let requests = l
            .wire
            .sent
            .iter()
            .filter(|(to, t, _)| *to == To::Group(bcast()) && *t == encap::ETHERTYPE_ARP)
            .count();
        assert_eq!(requests, 50 * 3);
        // A packet longer than a buffer is not kept.
        l.on_tun_packet(&ip4(MY4, PEER4, 0), now);
        let mut big = ip4(MY4, Ipv4Addr::new(10, 77, 0, 3), 0);
        big.resize(5000, 0);
        l.on_tun_packet(&big, now);
        assert_eq!((l.stats.tx_dropped, l.pool_free.len()), (1, free - 1));
    }
}
