//! ipoib-cm-inject: connects to an `ipoib` interface in connected mode as
//! a peer would, with what it must refuse or drop, for the two-host tests.
//!
//! ```text
//! ipoib-cm-inject --to LLADDR [--timeout SECONDS]
//! ```
//!
//! To the interface at link-layer address `LLADDR` (its GID's address, the
//! port of its QPN: `rdma_ipoib::connected::port`): a connect with 3 bytes
//! of private data (which the CM pads with zeros: a receive size of 0)
//! and one whose QPN has 25 bits, both of which it must reject; then a connection with good private data (whose answer must be
//! the interface's QPN and a receive size of 65,524 bytes) on which it
//! sends a message shorter than the header, an unknown EtherType, IPv4
//! whose lengths do not fit and an ARP reply whose sender QPN is not the
//! one of the private data; last a message longer than the receive
//! buffers, which fails the connection on the receiver's side. Prints
//! what it did, one line each; fails when the interface accepted what it
//! must reject or a send it must take failed.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rdma::cm::{AddrHints, AddrInfo, ConnParam, Endpoint, EpAttr};
use rdma::{QpCaps, SendFlags};
use rdma_ipoib::arp::{Arp, Op};
use rdma_ipoib::connected::{self, PrivateData};
use rdma_ipoib::{encap, LinkAddr};

type Error = Box<dyn std::error::Error>;

/// Connects to an ipoib interface in connected mode with bad input.
#[derive(Parser, Debug)]
#[command(name = "ipoib-cm-inject")]
struct Args {
    /// The interface's link-layer address.
    #[arg(long)]
    to: LinkAddr,
    /// Seconds each CM step and send may take.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// The QPN this tool claims in its private data.
const QPN: u32 = 0x12_3456;

fn endpoint(a: &Args) -> Result<Endpoint, Error> {
    let gid = a.to.gid();
    let host = match gid.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => gid.to_ipv6().to_string(),
    };
    let port = connected::port(a.to.qpn()).to_string();
    let hints = AddrHints {
        numeric_host: true,
        ..AddrHints::default()
    };
    let info = AddrInfo::resolve(Some(&host), Some(&port), &hints)?;
    let attr = EpAttr {
        caps: QpCaps {
            max_send_wr: 8,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..QpCaps::default()
        },
        ..EpAttr::default()
    };
    Ok(Endpoint::create(&info, Some(attr))?)
}

fn run(a: &Args) -> Result<(), Error> {
    let t = Duration::from_secs(a.timeout);
    for (what, pd) in [
        ("3 bytes of private data", vec![0, 0, 1]),
        (
            "a 25-bit QPN",
            PrivateData {
                qpn: 0x100_0000,
                mtu: 65524,
            }
            .to_bytes()
            .to_vec(),
        ),
    ] {
        let ep = endpoint(a)?;
        match ep.connect(&ConnParam::new().with_private_data(&pd), t) {
            Ok(_) => return Err(format!("a connect with {what} was accepted").into()),
            Err(e) => println!("ipoib-cm-inject: connect with {what}: refused ({e})"),
        }
    }
    let ep = endpoint(a)?;
    let mine = PrivateData {
        qpn: QPN,
        mtu: 65524,
    };
    let est = ep.connect(&ConnParam::new().with_private_data(&mine.to_bytes()), t)?;
    let theirs = PrivateData::parse(est.private_data())?;
    println!("ipoib-cm-inject: connected; the interface answered {theirs:?}");
    if theirs.qpn != a.to.qpn() || theirs.max_packet() != connected::MAX_MTU as usize {
        return Err(format!("the answer {theirs:?} is not the interface's").into());
    }
    let mut forged = Arp::request(a.to, "10.77.0.9".parse()?, "10.77.0.9".parse()?);
    forged.op = Op::Reply;
    forged.sender = LinkAddr::new(0, QPN + 1, a.to.gid());
    let with = |et: u16, p: &[u8]| [&encap::header(et)[..], p].concat();
    let mut bad_ip = vec![0x45u8; 40];
    bad_ip[2..4].copy_from_slice(&200u16.to_be_bytes());
    let messages: [(&str, Vec<u8>); 4] = [
        ("a message shorter than the header", vec![0x08]),
        ("an unknown EtherType", with(0x88b5, &[0; 20])),
        (
            "IPv4 whose lengths do not fit",
            with(encap::ETHERTYPE_IPV4, &bad_ip),
        ),
        (
            "ARP from another QPN",
            with(encap::ETHERTYPE_ARP, &forged.to_bytes()),
        ),
    ];
    let long = 4 + connected::MAX_MTU as usize + 1;
    let mr = ep.reg_msgs(long)?;
    for (i, (what, m)) in messages.iter().enumerate() {
        mr.write(0, m)?;
        ep.post_send(i as u64, &mr.sge(..m.len())?, SendFlags::SIGNALED)?;
        ep.get_send_comp(t)?.result()?;
        println!("ipoib-cm-inject: sent {what}");
    }
    ep.post_send(9, &mr.sge(..long)?, SendFlags::SIGNALED)?;
    match ep.get_send_comp(t)?.result() {
        Ok(_) => return Err(format!("a message of {long} bytes went through").into()),
        Err(e) => println!("ipoib-cm-inject: a message of {long} bytes failed: {e}"),
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ipoib-cm-inject: {e}");
            ExitCode::FAILURE
        }
    }
}
