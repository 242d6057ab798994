//! Where the link's datagrams go: [`Wire`], and its implementation over
//! the UD queue pair with address handles cached by destination GID.

use std::collections::HashMap;

use rdma::{AddressHandle, Gid, Path, WorkCompletion};
use rdma_ipoib::encap::Source;
use rdma_ipoib::LinkAddr;

use crate::rc::Connections;
use crate::route;
use crate::ud::{Ud, GRH};

/// Address handles kept, for unicast destinations and for groups each: past
/// it the cache starts over (its handles are made again when used).
const AH_CACHE: usize = 1024;

/// What became of a datagram handed to a [`Wire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Posted.
    Posted,
    /// Not sent: no send slot, no address handle, or too long.
    Dropped,
    /// The post failed.
    Failed,
    /// Not sent: longer than the way to the peer takes, whose limit this
    /// is (connected mode: a peer in datagram mode).
    TooBig(usize),
    /// Not sent: longer than a datagram while the peer's connection is
    /// being made.
    Held,
}

/// Sends datagrams of the link.
pub trait Wire {
    /// `payload` of `ether_type` to multicast group `mgid`.
    fn to_group(&mut self, mgid: Gid, ether_type: u16, payload: &[u8]) -> Sent;
    /// `payload` of `ether_type` to the interface at `to`.
    fn to_peer(&mut self, to: LinkAddr, ether_type: u16, payload: &[u8]) -> Sent;
    /// A neighbour left `gid` for another address: what was made for it
    /// may go.
    fn forget(&mut self, gid: Gid);
    /// A neighbour's address changed from `old`: its connection goes.
    fn moved(&mut self, _old: LinkAddr) {}
}

/// The UD queue pair as a [`Wire`], and in connected mode the
/// connections, which unicast to a peer in connected mode takes.
pub struct UdWire {
    pub ud: Ud,
    pub rc: Option<Connections>,
    /// The path to the broadcast group, the pattern of a path to a group.
    group_path: Path,
    port: u8,
    groups: HashMap<Gid, AddressHandle>,
    peers: HashMap<Gid, AddressHandle>,
}

impl UdWire {
    /// `ud` sending to groups as `group_path` goes, and to peers from the
    /// same GID and port.
    pub fn new(ud: Ud, group_path: Path, port: u8) -> UdWire {
        UdWire {
            ud,
            rc: None,
            group_path,
            port,
            groups: HashMap::new(),
            peers: HashMap::new(),
        }
    }

    fn post(ud: &mut Ud, ah: &AddressHandle, qpn: u32, ether_type: u16, p: &[u8]) -> Sent {
        match ud.send(ah, qpn, ether_type, p) {
            Ok(true) => Sent::Posted,
            Ok(false) => Sent::Dropped,
            Err(e) => {
                eprintln!("ipoib: send: {e}");
                Sent::Failed
            }
        }
    }

    /// The handle of `gid` in `cache`, made from `path` when missing.
    fn handle<'a>(
        ud: &Ud,
        cache: &'a mut HashMap<Gid, AddressHandle>,
        gid: Gid,
        path: Path,
    ) -> Option<&'a AddressHandle> {
        if !cache.contains_key(&gid) {
            if cache.len() >= AH_CACHE {
                cache.clear();
            }
            match AddressHandle::new(&ud.pd, &path) {
                Ok(ah) => {
                    cache.insert(gid, ah);
                }
                Err(e) => {
                    eprintln!("ipoib: no address handle for {}: {e}", gid.to_ipv6());
                    return None;
                }
            }
        }
        cache.get(&gid)
    }

    /// A send completed; false if it failed.
    pub fn on_sent(&mut self, wc: &WorkCompletion) -> bool {
        self.ud.sent(wc);
        wc.is_success()
    }

    /// A receive completed: the datagram's length in `buf` and its sender
    /// (from the completion and the GRH copied into `grh`); `Ok(None)` for
    /// a failed one. The slot is posted again. An error when the QP is in
    /// the error state (its receives flushed): it carries nothing more.
    pub fn on_recv(
        &mut self,
        wc: &WorkCompletion,
        grh: &mut [u8; GRH],
        buf: &mut [u8],
    ) -> Result<Option<(usize, Source)>, String> {
        if !wc.is_success() {
            if wc.status() == rdma::WcStatus::WorkRequestFlushed {
                return Err(format!("the queue pair failed: {wc:?}"));
            }
            let _ = self.ud.post_recv(wc.wr_id());
            return Ok(None);
        }
        let n = match self.ud.received(wc, grh, buf) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("ipoib: receive: {e}");
                return Ok(None);
            }
        };
        let gid = if wc.has_grh() {
            route::grh_source(grh)
        } else {
            None
        };
        Ok(Some((
            n,
            Source {
                qpn: wc.src_qp(),
                gid,
            },
        )))
    }
}

impl Wire for UdWire {
    fn to_group(&mut self, mgid: Gid, ether_type: u16, payload: &[u8]) -> Sent {
        let path = Path {
            dgid: Some(mgid),
            ..self.group_path
        };
        match Self::handle(&self.ud, &mut self.groups, mgid, path) {
            Some(ah) => Self::post(
                &mut self.ud,
                ah,
                LinkAddr::MULTICAST_QPN,
                ether_type,
                payload,
            ),
            None => Sent::Dropped,
        }
    }

    fn to_peer(&mut self, to: LinkAddr, ether_type: u16, payload: &[u8]) -> Sent {
        if let Some(rc) = &mut self.rc {
            if let Some(s) = rc.unicast(to, ether_type, payload) {
                return s;
            }
        }
        let gid = to.gid();
        let path = Path {
            traffic_class: self.group_path.traffic_class,
            sl: self.group_path.sl,
            ..Path::to_gid(gid, self.group_path.sgid_index, self.port)
        };
        match Self::handle(&self.ud, &mut self.peers, gid, path) {
            Some(ah) => Self::post(&mut self.ud, ah, to.qpn(), ether_type, payload),
            None => Sent::Dropped,
        }
    }

    fn forget(&mut self, gid: Gid) {
        self.peers.remove(&gid);
    }

    fn moved(&mut self, old: LinkAddr) {
        if let Some(rc) = &mut self.rc {
            rc.forget(old);
        }
    }
}
