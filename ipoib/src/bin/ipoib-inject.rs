//! ipoib-inject: sends an `ipoib` interface the datagrams it must drop, from
//! a UD queue pair of its own, for the two-host tests.
//!
//! ```text
//! ipoib-inject -d DEVICE [-i PORT] -g GID_INDEX --to LLADDR [--qkey QKEY] [--flood N]
//! ```
//!
//! To the interface at link-layer address `LLADDR` (flags, QPN, GID): a
//! datagram shorter than the header, an unknown EtherType, ARP with a wrong
//! hardware length, an IPv4 packet whose lengths do not fit, an IPv6 header
//! cut short, an ARP reply whose sender QPN is not the sending QP's; then
//! `N` ARP requests for the interface's address from as many made-up
//! IPv4 addresses (10.78.x.y), which a bounded neighbour table must
//! survive. Prints what it sent, one line each.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rdma::{
    AccessFlags, AddressHandle, CompletionQueue, DeviceList, InitAttr, MemoryRegion, Path,
    ProtectionDomain, QpCaps, QpType, QueuePair, RtsAttr, SendWr, WorkCompletion,
};
use rdma_ipoib::arp::{Arp, Op};
use rdma_ipoib::{encap, LinkAddr};

type Error = Box<dyn std::error::Error>;

/// Sends an ipoib interface datagrams it must drop.
#[derive(Parser, Debug)]
#[command(name = "ipoib-inject")]
struct Args {
    /// The RDMA device.
    #[arg(short = 'd')]
    device: String,
    /// Its port.
    #[arg(short = 'i', default_value_t = 1)]
    port: u8,
    /// The index of the GID to send from.
    #[arg(short = 'g')]
    gid_index: u8,
    /// The interface's link-layer address.
    #[arg(long)]
    to: LinkAddr,
    /// Its IPv4 address (the target of the flood's requests).
    #[arg(long)]
    ip: Ipv4Addr,
    /// The Q_Key of its groups.
    #[arg(long, default_value_t = 0x0123_4567)]
    qkey: u32,
    /// ARP requests from made-up addresses.
    #[arg(long, default_value_t = 2000)]
    flood: u32,
}

fn run(a: &Args) -> Result<(), Error> {
    let ctx = DeviceList::new()?.open(&a.device)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let cq = CompletionQueue::new(&ctx, 16)?;
    let qp = QueuePair::builder(&pd, QpType::Ud, &cq)
        .caps(QpCaps {
            max_send_wr: 8,
            max_recv_wr: 1,
            ..QpCaps::default()
        })
        .build()?;
    qp.to_init(&InitAttr {
        qkey: a.qkey,
        ..InitAttr::new(a.port)
    })?;
    qp.to_rtr(None)?;
    qp.to_rts(&RtsAttr::default())?;
    let gid = ctx.query_gid(a.port, u32::from(a.gid_index))?;
    let me = LinkAddr::new(0, qp.qp_num(), gid);
    let ah = AddressHandle::new(&pd, &Path::to_gid(a.to.gid(), a.gid_index, a.port))?;
    let mr = MemoryRegion::new(&pd, 256, AccessFlags::LOCAL_WRITE)?;
    let send = |what: &str, d: &[u8], quiet: bool| -> Result<(), Error> {
        mr.write(0, d)?;
        let sge = [mr.sge(..d.len())?];
        qp.post_send(&mut [SendWr::send(1, &sge).ud(&ah, a.to.qpn(), a.qkey).signaled()])?;
        let mut wc = [WorkCompletion::ZERO; 1];
        let got = cq.wait(&mut wc, 1, Duration::from_secs(10))?;
        match got.first() {
            Some(wc) if wc.is_success() => {}
            other => return Err(format!("{what}: send failed: {other:?}").into()),
        }
        if !quiet {
            println!("ipoib-inject: sent {what} ({} bytes)", d.len());
        }
        Ok(())
    };
    let framed = |t: u16, p: &[u8]| {
        let mut d = encap::header(t).to_vec();
        d.extend_from_slice(p);
        d
    };
    send("short", &[0x08], false)?;
    send("ether_type", &framed(0x88b5, &[0; 40]), false)?;
    let mut bad_hlen = Arp::request(me, Ipv4Addr::new(10, 78, 0, 1), a.ip).to_bytes();
    bad_hlen[4] = 6;
    send("arp", &framed(encap::ETHERTYPE_ARP, &bad_hlen), false)?;
    let ip = [
        0x45, 0, 0x05, 0xdc, 0, 0, 0, 0, 64, 1, 0, 0, 10, 78, 0, 1, 10, 77, 0, 1,
    ];
    send(
        "ip (IPv4 total length past the datagram)",
        &framed(encap::ETHERTYPE_IPV4, &ip),
        false,
    )?;
    send(
        "ip (IPv6 header cut short)",
        &framed(encap::ETHERTYPE_IPV6, &[0x60; 20]),
        false,
    )?;
    let liar = LinkAddr::new(0, qp.qp_num() + 1, gid);
    let forged = Arp {
        op: Op::Reply,
        sender: liar,
        sender_ip: Ipv4Addr::new(10, 78, 0, 2),
        target: a.to,
        target_ip: a.ip,
    };
    send(
        "forged",
        &framed(encap::ETHERTYPE_ARP, &forged.to_bytes()),
        false,
    )?;
    for i in 0..a.flood {
        let from = Ipv4Addr::new(10, 78, (i >> 8) as u8, i as u8);
        let req = Arp::request(me, from, a.ip).to_bytes();
        send("flood", &framed(encap::ETHERTYPE_ARP, &req), true)?;
    }
    println!(
        "ipoib-inject: sent {} ARP requests from made-up addresses",
        a.flood
    );
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ipoib-inject: {e}");
            ExitCode::FAILURE
        }
    }
}
