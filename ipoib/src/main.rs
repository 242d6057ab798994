//! ipoib: IP over InfiniBand (RFC 4391) in user space: a TUN interface
//! whose packets travel as UD datagrams of one queue pair, and in
//! connected mode (RFC 4755, `--mode connected`) unicast to peers in
//! connected mode on reliable connections (see `rc`).
//!
//! ```text
//! ipoib -d DEVICE [-i PORT] --ip ADDR/PREFIX [--ip6 ADDR/PREFIX] [--name IFNAME] [--pkey PKEY] [--mode datagram|connected]
//! ```
//!
//! It joins the partition's IPv4 broadcast group (and, with `--ip6`, the
//! IPv6 all-nodes group and the solicited-node group of its address),
//! creates the interface with the port's MTU less the 4-byte header,
//! prints `ipoib: IFNAME up, lladdr HEX` and carries packets until SIGINT
//! or SIGTERM, when it removes the interface, leaves the groups and
//! destroys the QP. Meanwhile it joins and leaves the groups of the IP
//! multicast groups that sockets join on the interface (`members`). It
//! resolves neighbours itself (ARP, neighbour
//! discovery) and prints each one learnt; SIGUSR1 prints its table and
//! counters. RoCE ports join through the connection manager; InfiniBand
//! ports (MCMemberRecord joins through the SA) are not supported yet.

mod join;
mod link;
mod members;
#[cfg(test)]
mod noalloc;
mod rc;
mod route;
mod tun;
mod ud;
mod wire;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rdma::{DeviceList, GidType, IpFamily, WorkCompletion};
use rdma_ipoib::{mgid, LinkAddr};
use tokio::signal::unix::{signal, SignalKind};

use crate::join::{CmJoins, Group, Joins};
use crate::link::Link;
use crate::members::Members;
use crate::rc::{Connections, Queues};
use crate::route::Me;
use crate::tun::Tun;
use crate::ud::{Ud, GRH};
use crate::wire::UdWire;

type Error = Box<dyn std::error::Error>;
type Result<T, E = Error> = std::result::Result<T, E>;

/// The IPoIB mode.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// RFC 4391: every packet a UD datagram.
    Datagram,
    /// RFC 4755: unicast to peers in connected mode on RC connections.
    Connected,
}

/// IP over InfiniBand in user space (datagram or connected mode).
#[derive(Parser, Debug)]
#[command(name = "ipoib")]
struct Args {
    /// The RDMA device.
    #[arg(short = 'd')]
    device: String,
    /// Its port.
    #[arg(short = 'i', default_value_t = 1)]
    port: u8,
    /// The interface's IPv4 address and prefix length.
    #[arg(long = "ip", value_parser = |s: &str| route::parse_cidr::<Ipv4Addr>(s, 32))]
    ip: (Ipv4Addr, u8),
    /// Its IPv6 address and prefix length.
    #[arg(long = "ip6", value_parser = |s: &str| route::parse_cidr::<Ipv6Addr>(s, 128))]
    ip6: Option<(Ipv6Addr, u8)>,
    /// The interface's name (`%d`: the first free number).
    #[arg(long, default_value = "ib%d")]
    name: String,
    /// The partition key (hexadecimal).
    #[arg(long, default_value = "ffff", value_parser = parse_pkey)]
    pkey: u16,
    /// The address of the device's netdev to join from (default: its
    /// first RoCE v2 IPv6 GID, a global one before a link-local one).
    #[arg(long)]
    bind: Option<IpAddr>,
    /// Datagram mode (RFC 4391) or connected mode (RFC 4755: the
    /// interface's MTU is 65,520, unicast to peers in connected mode goes
    /// on RC connections).
    #[arg(long, value_enum, default_value_t = Mode::Datagram)]
    mode: Mode,
}

/// A P_Key in hexadecimal, with or without `0x`; the membership bit may
/// be clear, the key itself (the low 15 bits) not 0.
fn parse_pkey(s: &str) -> Result<u16, String> {
    let h = s.strip_prefix("0x").unwrap_or(s);
    u16::from_str_radix(h, 16)
        .ok()
        .filter(|p| p & 0x7fff != 0 && !h.starts_with('+'))
        .ok_or_else(|| format!("{s:?} is no partition key (hexadecimal, not 0 or 0x8000)"))
}

/// The address to bind the CM id to, the netdev's interface index and
/// the GID's index.
fn bind_address(a: &Args) -> Result<(SocketAddr, u32, u8)> {
    let list = DeviceList::new()?;
    let ctx = list.open(&a.device)?;
    let port = ctx.query_port(a.port)?;
    if port.link_layer() != "Ethernet" {
        return Err(format!(
            "{} port {} is {}: joins through the SA (InfiniBand) are not supported yet; RoCE only",
            a.device,
            a.port,
            port.link_layer()
        )
        .into());
    }
    let table = ctx.gid_table()?;
    let mine = |e: &&rdma::GidEntry| e.port == a.port && e.gid_type == GidType::RoceV2;
    if let Some(ip) = a.bind {
        let e = table.iter().filter(mine).find(|e| match ip {
            IpAddr::V4(v4) => e.gid.to_ipv4_mapped() == Some(v4),
            IpAddr::V6(v6) => e.gid.to_ipv6() == v6,
        });
        let e =
            e.ok_or_else(|| format!("{ip} is no RoCE v2 GID of {} port {}", a.device, a.port))?;
        return Ok((SocketAddr::new(ip, 0), e.ndev_ifindex, e.index));
    }
    let v6: Vec<_> = table
        .iter()
        .filter(mine)
        .filter(|e| e.ip_family() == Some(IpFamily::V6))
        .collect();
    let e = v6
        .iter()
        .find(|e| !e.gid.to_ipv6().is_unicast_link_local())
        .or(v6.first())
        .ok_or_else(|| {
            format!(
                "{} port {} has no RoCE v2 IPv6 GID (the IPv6 groups of IPoIB need one)",
                a.device, a.port
            )
        })?;
    let ip = e.gid.to_ipv6();
    let scope = if ip.is_unicast_link_local() {
        e.ndev_ifindex
    } else {
        0
    };
    Ok((
        SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, scope)),
        e.ndev_ifindex,
        e.index,
    ))
}

async fn run(a: Args) -> Result<()> {
    let (bind, ifindex, sgid_index) = bind_address(&a)?;
    let mut joins = CmJoins::bind(bind, ifindex, sgid_index, a.port)?;
    let ctx = joins.context()?;
    if ctx.name() != a.device || joins.port() != a.port {
        return Err(format!(
            "{bind} is on {} port {}, not {} port {}",
            ctx.name(),
            joins.port(),
            a.device,
            a.port
        )
        .into());
    }
    let pkey_index = ctx
        .pkey_index(a.port, a.pkey)?
        .ok_or_else(|| format!("P_Key {:#06x} is not in the port's table", a.pkey))?;
    let mtu = ctx.query_port(a.port)?.active_mtu();
    let mut ud = Ud::new(&ctx, mtu)?;

    let mut mgids = vec![mgid::ipv4_broadcast(a.pkey, mgid::LINK_LOCAL)];
    if let Some((v6, _)) = a.ip6 {
        for g in [
            Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
            mgid::solicited_node(v6),
        ] {
            mgids.extend(mgid::ipv6(g, a.pkey, mgid::LINK_LOCAL));
        }
    }
    let mut groups: Vec<Group> = Vec::new();
    for g in mgids {
        groups.push(joins.join(g)?);
    }
    let bcast = groups[0];
    ud.start(a.port, pkey_index, bcast.qkey)?;
    for g in &groups {
        ud.qp.attach_mcast(g.mgid, g.mlid)?;
    }
    let gid = ctx.query_gid(a.port, u32::from(bcast.path.sgid_index))?;
    let max_payload = ud.max_payload();
    // Connected mode: listening at the port of the QPN, or (that port
    // taken) datagram mode.
    let mut rc = None;
    if a.mode == Mode::Connected {
        match Connections::new(&ud.pd, bind, ud.qp.qp_num(), max_payload) {
            Ok(c) => rc = Some(c),
            Err(e) => eprintln!("ipoib: connected mode: {e}; datagram mode"),
        }
    }
    let (flags, if_mtu) = match rc {
        Some(_) => (LinkAddr::CONNECTED, rdma_ipoib::connected::MAX_MTU),
        None => (0, mtu - rdma_ipoib::encap::HEADER_LEN as u32),
    };
    let lladdr = LinkAddr::new(flags, ud.qp.qp_num(), gid);

    let tun = Tun::open(&a.name)?;
    tun.configure(if_mtu, a.ip, a.ip6)?;
    let me = Me {
        v4: a.ip.0,
        prefix4: a.ip.1,
        v6: a.ip6.map(|v| v.0),
        pkey: a.pkey,
    };
    let mut wire = UdWire::new(ud, bcast.path, a.port);
    let (conns, mut queues) = rc.unzip();
    wire.rc = conns;
    let mut link = Link::new(wire, me, lladdr, max_payload);
    link.announce();
    let mode = if link.wire.rc.is_some() {
        "connected"
    } else {
        "datagram"
    };
    println!(
        "ipoib: {} up, lladdr {lladdr}, {mode} mode, MTU {if_mtu}",
        tun.name()
    );

    let mut members = Members::new(groups.iter().map(|g| g.mgid).collect());
    // The joins that follow the kernel's memberships run on the packet
    // loop: each waits 2 s at most for the CM (RoCE v2's are local and
    // answer at once), at most `members::JOINS_PER_SYNC` a second.
    joins.set_timeout(Duration::from_secs(2));
    let follow = Follow {
        ifindex: tun.index()?,
        pkey: a.pkey,
    };
    let result = carry(
        &mut link,
        &tun,
        queues.as_mut(),
        if_mtu as usize,
        (&mut members, &mut joins, follow),
    )
    .await;

    // The interface first (no more packets), then the connections, the
    // groups, the QP.
    drop(tun);
    if let Some(rc) = &mut link.wire.rc {
        rc.dump();
        rc.shutdown().await;
        println!("ipoib: {:?}", rc.stats);
    }
    link.wire.rc = None;
    drop(queues);
    joins.leave_all();
    for g in groups.iter().chain(members.groups()) {
        let _ = link.wire.ud.qp.detach_mcast(g.mgid, g.mlid);
    }
    link.dump();
    drop(link);
    result
}

/// The completions of `cq` (never, without one).
async fn completions<'a>(
    cq: Option<&rdma::AsyncCompletionQueue>,
    wc: &'a mut [WorkCompletion],
) -> rdma::Result<&'a mut [WorkCompletion]> {
    match cq {
        Some(cq) => cq.wait(wc).await,
        None => std::future::pending().await,
    }
}

/// Carries packets until a signal to stop; `q`: connected mode's queues.
/// What the interface's memberships are followed by: the kernel's lists
/// for this interface, and the partition of the groups.
#[derive(Clone, Copy)]
struct Follow {
    ifindex: u32,
    pkey: u16,
}

/// Brings `members` to the kernel's memberships of the interface (see
/// `members`), and prints what changed.
fn follow(link: &mut Link<UdWire>, members: &mut Members, joins: &mut CmJoins, f: Follow) {
    // A list that cannot be read now (out of memory or descriptors) is
    // not an empty one: nothing changes until both can be.
    let (Ok(v4), Ok(v6)) = (
        std::fs::read_to_string("/proc/net/igmp"),
        std::fs::read_to_string("/proc/net/igmp6"),
    ) else {
        return;
    };
    let wanted = members::wanted(
        &members::igmp(&v4, f.ifindex),
        &members::igmp6(&v6, f.ifindex),
        f.pkey,
    );
    let qp = &link.wire.ud.qp;
    let mut attach = |g: &Group, on: bool| {
        if on {
            qp.attach_mcast(g.mgid, g.mlid)
        } else {
            qp.detach_mcast(g.mgid, g.mlid)
        }
    };
    for c in members.sync(&wanted, Instant::now(), joins, &mut attach) {
        match c {
            members::Change::Joined(ip, g) => {
                println!("ipoib: joined {ip} (group {})", g.to_ipv6())
            }
            members::Change::Left(ip, g) => println!("ipoib: left {ip} (group {})", g.to_ipv6()),
            members::Change::Failed(ip, g, e) => {
                eprintln!("ipoib: not joining {ip} (group {}): {e}", g.to_ipv6())
            }
        }
    }
}

async fn carry(
    link: &mut Link<UdWire>,
    tun: &Tun,
    mut q: Option<&mut Queues>,
    mtu: usize,
    (members, joins, f): (&mut Members, &mut CmJoins, Follow),
) -> Result<()> {
    // The kernel's memberships, followed each second (the first at once;
    // a tick missed while the loop was busy is not made up).
    let mut memberships = tokio::time::interval(Duration::from_secs(1));
    memberships.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut rwc = [WorkCompletion::ZERO; 32];
    let mut swc = [WorkCompletion::ZERO; 32];
    let mut crwc = [WorkCompletion::ZERO; 16];
    let mut cswc = [WorkCompletion::ZERO; 32];
    // One byte more than a datagram may carry, so that a longer packet
    // shows as one.
    let mut pkt = vec![0u8; mtu + 1];
    let mut rx = vec![0u8; mtu.max(rc::MSG)];
    let mut grh = [0u8; GRH];
    let mut tun_ready = true;
    loop {
        if tun_ready {
            for _ in 0..64 {
                if !link.wire.ud.can_send() {
                    break;
                }
                match tun.try_read(&mut pkt)? {
                    Some(n) => {
                        link.on_tun_packet(&pkt[..n], Instant::now());
                        if let Some(r) = link.take_reply() {
                            let _ = tun.write(r);
                        }
                    }
                    None => {
                        tun_ready = false;
                        break;
                    }
                }
            }
        }
        let more = tun_ready && link.wire.ud.can_send();
        let (crcq, cscq, listener, setups) = match q.as_deref_mut() {
            Some(Queues {
                rcq,
                scq,
                listener,
                setups,
            }) => (Some(&*rcq), Some(&*scq), Some(listener), Some(setups)),
            None => (None, None, None, None),
        };
        tokio::select! {
            r = tun.readable(), if !tun_ready => {
                r?;
                tun_ready = true;
            }
            _ = std::future::ready(()), if more => {}
            r = link.wire.ud.rcq.wait(&mut rwc) => {
                let now = Instant::now();
                for wc in r?.iter() {
                    match link.wire.on_recv(wc, &mut grh, &mut rx)? {
                        Some((n, from)) => {
                            link.on_datagram(&rx[..n], from, now, &mut |p| tun.write(p).is_ok())
                        }
                        None => link.on_recv_error(),
                    }
                }
                if let Some(r) = link.take_reply() {
                    let _ = tun.write(r);
                }
            }
            r = completions(crcq, &mut crwc) => {
                let now = Instant::now();
                for wc in r?.iter() {
                    let Some(rc) = link.wire.rc.as_mut() else { break };
                    if let Some((n, from)) = rc.on_recv(wc, &mut rx) {
                        link.on_datagram(&rx[..n], from, now, &mut |p| tun.write(p).is_ok());
                    }
                }
                if let Some(r) = link.take_reply() {
                    let _ = tun.write(r);
                }
            }
            r = completions(cscq, &mut cswc) => {
                for wc in r?.iter() {
                    if let Some(rc) = link.wire.rc.as_mut() {
                        let ok = rc.on_sent(wc);
                        link.on_sent(ok);
                    }
                }
            }
            r = accept(listener) => {
                if let Some(rc) = link.wire.rc.as_mut() {
                    rc.on_request(r?, Instant::now());
                }
            }
            Some(s) = setup(setups) => {
                if let Some(rc) = link.wire.rc.as_mut() {
                    rc.on_setup(s, Instant::now());
                }
            }
            (tx, i, ev) = rc::events(link.wire.rc.as_mut()) => {
                if let Some(rc) = link.wire.rc.as_mut() {
                    rc.on_event(tx, i, ev);
                }
            }
            r = link.wire.ud.scq.wait(&mut swc) => {
                for wc in r?.iter() {
                    let ok = link.wire.on_sent(wc);
                    link.on_sent(ok);
                }
            }
            _ = tick.tick() => {
                let now = Instant::now();
                link.tick(now);
                if let Some(rc) = link.wire.rc.as_mut() {
                    rc.tick(now);
                }
            }
            _ = memberships.tick() => follow(link, members, joins, f),
            _ = int.recv() => return Ok(()),
            _ = term.recv() => return Ok(()),
            _ = usr1.recv() => {
                link.dump();
                if let Some(rc) = &link.wire.rc {
                    rc.dump();
                }
            }
        }
    }
}

/// The next connection request (never, without a listener).
async fn accept(l: Option<&mut rdma::cm::Listener>) -> rdma::Result<rdma::cm::ConnectRequest> {
    match l {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// The next report of a CM task (never, without connected mode).
async fn setup(
    r: Option<&mut tokio::sync::mpsc::UnboundedReceiver<rc::Setup>>,
) -> Option<rc::Setup> {
    match r {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ipoib: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The CM steps of connected mode run as local tasks.
    let local = tokio::task::LocalSet::new();
    match rt.block_on(local.run_until(run(a))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ipoib: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_keys_are_hexadecimal_and_not_the_invalid_key() {
        assert_eq!(parse_pkey("ffff"), Ok(0xffff));
        assert_eq!(parse_pkey("0x8001"), Ok(0x8001));
        assert_eq!(parse_pkey("7fff"), Ok(0x7fff));
        for bad in [
            "", "0", "0x8000", "8000", "0x0x1", "10000", "+1", "fffg", "0x",
        ] {
            assert!(parse_pkey(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_command_line_takes_addresses_with_prefixes() {
        let a = Args::try_parse_from(["ipoib", "-d", "rxe0", "--ip", "10.77.0.1/24"]).unwrap();
        assert_eq!(
            (a.port, a.ip, a.ip6, a.pkey, a.name.as_str()),
            (1, (Ipv4Addr::new(10, 77, 0, 1), 24), None, 0xffff, "ib%d")
        );
        let a = Args::try_parse_from([
            "ipoib",
            "-d",
            "rxe0",
            "-i",
            "2",
            "--ip",
            "10.0.0.1/8",
            "--ip6",
            "fd77::1/64",
            "--pkey",
            "0x8001",
            "--name",
            "ib7",
        ])
        .unwrap();
        assert_eq!((a.port, a.ip6.map(|v| v.1), a.pkey), (2, Some(64), 0x8001));
        assert_eq!(a.mode, Mode::Datagram);
        let mode = |m: &str| {
            Args::try_parse_from(["ipoib", "-d", "rxe0", "--ip", "10.0.0.1/8", "--mode", m])
                .map(|a| a.mode)
        };
        assert_eq!(mode("connected").unwrap(), Mode::Connected);
        assert_eq!(mode("datagram").unwrap(), Mode::Datagram);
        assert!(mode("cm").is_err() && mode("").is_err());
        for bad in [
            &["ipoib", "-d", "rxe0"][..],
            &["ipoib", "--ip", "10.0.0.1/8"],
            &["ipoib", "-d", "rxe0", "--ip", "10.0.0.1"],
            &[
                "ipoib",
                "-d",
                "rxe0",
                "--ip",
                "10.0.0.1/8",
                "--ip6",
                "fd77::1/200",
            ],
            &["ipoib", "-d", "rxe0", "--ip", "10.0.0.1/8", "-i", "256"],
        ] {
            assert!(Args::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
