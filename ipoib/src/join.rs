//! Joining the multicast groups of the interface. [`Joins`] is what the
//! rest of the program needs; [`CmJoins`] does it through the connection
//! manager, the only way on RoCE (an InfiniBand port would join with
//! MCMemberRecords through the SA instead, a second implementation).

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::time::Duration;

use rdma::cm::{CmEventKind, CmId, EventChannel, PortSpace};
use rdma::{Context, Gid, Path};

type Error = Box<dyn std::error::Error>;

/// How long a join may take.
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);

/// A joined group: how to send to it.
#[derive(Clone, Copy, Debug)]
pub struct Group {
    pub mgid: Gid,
    /// The path to the group (its MGID as destination GID).
    pub path: Path,
    /// The group's Q_Key.
    pub qkey: u32,
    /// The multicast LID (0 on RoCE), for `attach_mcast`.
    pub mlid: u16,
}

/// Joining and leaving groups as a full member.
pub trait Joins {
    /// Joins `mgid`; waits for the answer.
    fn join(&mut self, mgid: Gid) -> Result<Group, Error>;
    /// Leaves `mgid` (nothing if it was not joined).
    fn leave(&mut self, mgid: Gid);
    /// Leaves every group joined.
    fn leave_all(&mut self);
}

/// Joins through the CM: an id in the UDP port space bound to the
/// device's address, joining each MGID as an IPv6 multicast address
/// (which RoCE takes as the MGID itself). The netdev also joins each
/// group as an IPv6 multicast address through a socket of its own, so
/// that the kernel's IPv6 input delivers the RoCE v2 packets sent to it to
/// the device (the CM joins IPv4 groups for RoCE, not IPv6 ones).
///
/// On RoCE v2 the kernel's CM refuses IPv6 groups (`ENOTSUPP`,
/// `cma_iboe_join_multicast`); there a RoCE join has nothing to ask of
/// anyone (no SA): the group is the netdev's membership above, and its
/// path and Q_Key are those the CM would give (the MGID from the bound
/// GID, the UDP port space's Q_Key).
pub struct CmJoins {
    // Field order: the id before its channel.
    id: CmId,
    ch: EventChannel,
    joined: Vec<SocketAddr>,
    /// Groups joined by the netdev only (RoCE v2).
    local: Vec<SocketAddr>,
    mld: Option<(UdpSocket, u32)>,
    /// The bound GID's index and port, for the paths of local joins.
    sgid_index: u8,
    port: u8,
    /// How long a join waits for the CM's answer.
    timeout: Duration,
}

/// The Q_Key of the CM's UDP port space (`RDMA_UDP_QKEY`).
pub const UDP_QKEY: u32 = 0x0123_4567;
/// The errno of the kernel's `ENOTSUPP`.
const ENOTSUPP: i32 = 524;

impl CmJoins {
    /// An id bound to `addr` (an address of the device's netdev, GID
    /// `sgid_index` of `port`); `ifindex`: the netdev, whose IPv6
    /// memberships are joined too (0: none, on InfiniBand).
    pub fn bind(
        addr: SocketAddr,
        ifindex: u32,
        sgid_index: u8,
        port: u8,
    ) -> Result<CmJoins, Error> {
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch, PortSpace::Udp)?;
        id.bind(addr)
            .map_err(|e| format!("binding the CM id to {addr}: {e}"))?;
        let mld = if ifindex != 0 {
            Some((UdpSocket::bind("[::]:0")?, ifindex))
        } else {
            None
        };
        Ok(CmJoins {
            id,
            ch,
            joined: Vec::new(),
            local: Vec::new(),
            mld,
            sgid_index,
            port,
            timeout: JOIN_TIMEOUT,
        })
    }

    /// Joins wait `t` for the CM's answer from now on (20 s at first).
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// The device the id is bound to.
    pub fn context(&self) -> rdma::Result<Context> {
        self.id.context()
    }

    /// The port the id is bound to.
    pub fn port(&self) -> u8 {
        self.id.port_num()
    }
}

impl Joins for CmJoins {
    /// On any error the group is not left half joined: the netdev's
    /// membership and the CM's join are undone.
    fn join(&mut self, mgid: Gid) -> Result<Group, Error> {
        let ip: Ipv6Addr = mgid.to_ipv6();
        let addr = SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, 0));
        if let Some((s, ifindex)) = &self.mld {
            s.join_multicast_v6(&ip, *ifindex)
                .map_err(|e| format!("joining {ip} on the netdev: {e}"))?;
        }
        match self.id.join_multicast(addr) {
            Ok(()) => {}
            Err(e) if e.errno() == ENOTSUPP && self.mld.is_some() => {
                self.local.push(addr);
                return Ok(Group {
                    mgid,
                    path: Path::to_gid(mgid, self.sgid_index, self.port),
                    qkey: UDP_QKEY,
                    mlid: 0,
                });
            }
            Err(e) => {
                self.leave_addr(addr, false);
                return Err(format!("joining {ip}: {e}").into());
            }
        }
        match self.answer(mgid) {
            Ok(g) => {
                self.joined.push(addr);
                Ok(g)
            }
            Err(e) => {
                self.leave_addr(addr, true);
                Err(format!("joining {ip}: {e}").into())
            }
        }
    }

    fn leave(&mut self, mgid: Gid) {
        let ip = mgid.to_ipv6();
        let is = |a: &SocketAddr| a.ip() == ip;
        if let Some(i) = self.joined.iter().position(is) {
            let addr = self.joined.swap_remove(i);
            self.leave_addr(addr, true);
        }
        if let Some(i) = self.local.iter().position(is) {
            let addr = self.local.swap_remove(i);
            self.leave_addr(addr, false);
        }
    }

    fn leave_all(&mut self) {
        for addr in std::mem::take(&mut self.joined) {
            self.leave_addr(addr, true);
        }
        for addr in std::mem::take(&mut self.local) {
            self.leave_addr(addr, false);
        }
    }
}

impl CmJoins {
    /// The CM's answer to the join of `mgid`: its event (an answer for
    /// another group, late from an earlier join that gave up, is passed
    /// over), within the timeout.
    fn answer(&mut self, mgid: Gid) -> Result<Group, Error> {
        let end = std::time::Instant::now() + self.timeout;
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            let ev = self
                .ch
                .wait_event(left)?
                .ok_or_else(|| format!("no answer in {:?}", self.timeout))?;
            match ev.kind {
                CmEventKind::MulticastJoin => {
                    let ud = ev.ud.ok_or("a join event without UD parameters")?;
                    if ud.path.dgid != Some(mgid) {
                        continue;
                    }
                    return Ok(Group {
                        mgid,
                        path: ud.path,
                        qkey: ud.qkey,
                        mlid: ud.path.dlid,
                    });
                }
                k if k.is_error() => {
                    return Err(format!("{k:?}, status {}", ev.status).into());
                }
                _ => {}
            }
        }
    }

    /// Leaves `addr`: through the CM if `cm` (it joined there), and the
    /// netdev's membership.
    fn leave_addr(&mut self, addr: SocketAddr, cm: bool) {
        if cm {
            if let Err(e) = self.id.leave_multicast(addr) {
                eprintln!("ipoib: leaving {addr}: {e}");
            }
        }
        if let (Some((s, ifindex)), SocketAddr::V6(a)) = (&self.mld, addr) {
            let _ = s.leave_multicast_v6(a.ip(), *ifindex);
        }
    }
}

impl Drop for CmJoins {
    fn drop(&mut self) {
        self.leave_all();
    }
}
