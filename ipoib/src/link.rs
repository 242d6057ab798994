//! The link between the TUN interface and the UD queue pair: packets from
//! the kernel to their group or neighbour (resolved by ARP or neighbour
//! discovery, waiting meanwhile in preallocated buffers), datagrams from
//! the fabric classified, answered (ARP, neighbour discovery) or handed
//! to the kernel; address handles cached by destination GID.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Instant;

use rdma::{AddressHandle, Gid, Path, WorkCompletion};
use rdma_ipoib::arp::{self, Arp};
use rdma_ipoib::encap::{self, Drops, Frame, Source};
use rdma_ipoib::nd::{self, Nd};
use rdma_ipoib::{mgid, neigh, LinkAddr};

use crate::route::{self, Dest, Me};
use crate::tun::Tun;
use crate::ud::{Ud, GRH};

/// Address handles kept, for unicast destinations and for groups each: past
/// it the cache starts over (its handles are made again when used).
const AH_CACHE: usize = 1024;

/// What the link counted besides the classified drops.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub tx: u64,
    pub rx: u64,
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
}

/// The link's state.
pub struct Link {
    pub ud: Ud,
    me: Me,
    lladdr: LinkAddr,
    /// The path to the broadcast group, the pattern of a path to a group.
    group_path: Path,
    /// The GID index and port of the unicast paths.
    sgid_index: u8,
    port: u8,
    groups: HashMap<Gid, AddressHandle>,
    ahs: HashMap<Gid, AddressHandle>,
    neigh: neigh::Table<usize>,
    pool: Vec<Box<[u8]>>,
    pool_len: Vec<usize>,
    pool_free: Vec<usize>,
    pub drops: Drops,
    pub stats: Stats,
}

impl Link {
    /// The link of `ud`, interface `me` at `lladdr`, whose broadcast group
    /// is reached by `group_path`.
    pub fn new(ud: Ud, me: Me, lladdr: LinkAddr, group_path: Path, port: u8) -> Link {
        let limits = neigh::Limits::default();
        let waiting = limits.incomplete * limits.queue;
        let size = ud.max_payload();
        Link {
            me,
            lladdr,
            sgid_index: group_path.sgid_index,
            group_path,
            port,
            groups: HashMap::new(),
            ahs: HashMap::new(),
            neigh: neigh::Table::new(limits),
            pool: (0..waiting).map(|_| vec![0u8; size].into()).collect(),
            pool_len: vec![0; waiting],
            pool_free: (0..waiting).collect(),
            drops: Drops::default(),
            stats: Stats::default(),
            ud,
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
        let n = p.len().min(self.pool[i].len());
        self.pool[i][..n].copy_from_slice(&p[..n]);
        self.pool_len[i] = n;
        if let Err(i) = self.neigh.wait(ip, i) {
            self.pool_free.push(i);
            self.stats.unresolved += 1;
        }
    }

    fn send_group(&mut self, g: Gid, ether_type: u16, p: &[u8]) {
        if !self.groups.contains_key(&g) {
            if self.groups.len() >= AH_CACHE {
                self.groups.clear();
            }
            let path = Path {
                dgid: Some(g),
                ..self.group_path
            };
            match AddressHandle::new(&self.ud.pd, &path) {
                Ok(ah) => {
                    self.groups.insert(g, ah);
                }
                Err(e) => {
                    eprintln!("ipoib: no address handle for group {}: {e}", g.to_ipv6());
                    self.stats.tx_dropped += 1;
                    return;
                }
            }
        }
        let ah = &self.groups[&g];
        Self::count_send(
            &mut self.stats,
            self.ud.send(ah, LinkAddr::MULTICAST_QPN, ether_type, p),
        );
    }

    fn send_unicast(&mut self, to: LinkAddr, ether_type: u16, p: &[u8]) {
        let g = to.gid();
        if !self.ahs.contains_key(&g) {
            if self.ahs.len() >= AH_CACHE {
                self.ahs.clear();
            }
            let path = Path {
                traffic_class: self.group_path.traffic_class,
                sl: self.group_path.sl,
                ..Path::to_gid(g, self.sgid_index, self.port)
            };
            match AddressHandle::new(&self.ud.pd, &path) {
                Ok(ah) => {
                    self.ahs.insert(g, ah);
                }
                Err(e) => {
                    eprintln!("ipoib: no address handle for {}: {e}", g.to_ipv6());
                    self.stats.tx_dropped += 1;
                    return;
                }
            }
        }
        let ah = &self.ahs[&g];
        Self::count_send(&mut self.stats, self.ud.send(ah, to.qpn(), ether_type, p));
    }

    fn count_send(stats: &mut Stats, r: rdma::Result<bool>) {
        match r {
            Ok(true) => stats.tx += 1,
            Ok(false) => stats.tx_dropped += 1,
            Err(e) => {
                eprintln!("ipoib: send: {e}");
                stats.tx_errors += 1;
            }
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
                if !self.ahs.is_empty() && old.gid() != addr.gid() {
                    self.ahs.remove(&old.gid());
                }
            }
            neigh::Learned::Same | neigh::Learned::Full => {}
        }
    }

    /// A completion of the send queue.
    pub fn on_sent(&mut self, wc: &WorkCompletion) {
        if !wc.is_success() {
            self.stats.tx_errors += 1;
        }
        self.ud.sent(wc);
    }

    /// A completion of the receive queue; `grh` and `buf` are scratch.
    pub fn on_recv(
        &mut self,
        wc: &WorkCompletion,
        grh: &mut [u8; GRH],
        buf: &mut [u8],
        tun: &Tun,
        now: Instant,
    ) {
        if !wc.is_success() {
            self.stats.rx_errors += 1;
            if wc.status() != rdma::WcStatus::WorkRequestFlushed {
                let _ = self.ud.post_recv(wc.wr_id());
            }
            return;
        }
        let n = match self.ud.received(wc, grh, buf) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("ipoib: receive: {e}");
                self.stats.rx_errors += 1;
                return;
            }
        };
        self.stats.rx += 1;
        let from = Source {
            qpn: wc.src_qp(),
            gid: if wc.has_grh() {
                route::grh_source(grh)
            } else {
                None
            },
        };
        match encap::classify(&buf[..n], &from, &self.lladdr) {
            Err(d) => self.drops.count(&d),
            Ok(Frame::Ipv4(p)) => self.deliver(tun, p),
            Ok(Frame::Ipv6(p)) => match nd::parse(p) {
                Ok(None) => self.deliver(tun, p),
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

    fn deliver(&mut self, tun: &Tun, p: &[u8]) {
        if tun.write(p).is_err() {
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
        println!("ipoib: {:?} {:?}", self.stats, self.drops);
    }
}
