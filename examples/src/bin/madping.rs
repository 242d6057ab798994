//! Pings over the GSI with vendor MADs, as infiniband-diags' `ibping` does:
//! class 0x32, OUI 0x001405, method Get; the server answers with its host
//! name in the payload. Addressed by GID, so it works on RoCE.
//!
//! ```text
//! madping -S [-d CA] [-P PORT] [-c COUNT]           # server (COUNT: exit after so many pings)
//! madping -G GID [-d CA] [-P PORT] [-c COUNT] [-t TIMEOUT_MS] [-i SGID_INDEX]
//! ```
//!
//! On rxe use an IPv6 GID (`-G fd00:1::1`): responses are matched to
//! requests only between IPv6 GIDs.

use std::net::Ipv6Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rdma::mad::{Mad, MadHeader, Method, Oui, VendorHeader};
use rdma::umad::{self, Address, Port, Registration};
use rdma::{DeviceList, Gid, GidType};

/// infiniband-diags' ping class (IB_VENDOR_OPENIB_PING_CLASS).
const PING_CLASS: u8 = 0x32;
/// The host name's room in the vendor data (ibping copies up to 64 bytes).
const HOST_LEN: usize = 64;

/// Ping over the GSI with vendor MADs (like infiniband-diags' ibping).
#[derive(Parser, Debug)]
#[command(
    name = "madping",
    override_usage = "madping -S [-d CA] [-P PORT] [-c COUNT]\n       \
                      madping -G GID [-d CA] [-P PORT] [-c COUNT] [-t TIMEOUT_MS] [-i SGID_INDEX]"
)]
struct Args {
    /// Run the server: answer pings with this host's name.
    #[arg(short = 'S', long = "server")]
    server: bool,
    /// Use this CA (default: the first CA with a umad device).
    #[arg(short = 'd', long = "ca", value_name = "CA")]
    ca: Option<String>,
    /// Use this port of the CA.
    #[arg(short = 'P', long = "port", value_name = "PORT", default_value_t = 1)]
    port: u32,
    /// Send so many pings (server: exit after answering so many; default: no end).
    #[arg(short = 'c', long = "count", value_name = "COUNT")]
    count: Option<u64>,
    /// Wait so many milliseconds for each answer.
    #[arg(
        short = 't',
        long = "timeout",
        value_name = "TIMEOUT_MS",
        default_value_t = 1000
    )]
    timeout_ms: u64,
    /// Ping the server at this GID (an IPv6 address; needed by the client).
    #[arg(
        short = 'G',
        long = "gid",
        value_name = "GID",
        required_unless_present = "server"
    )]
    gid: Option<Ipv6Addr>,
    /// Send from this local GID index (default: the destination GID when it is
    /// ours, else the first RoCEv2 or IB GID of the destination's family).
    #[arg(short = 'i', long = "sgid-index", value_name = "SGID_INDEX")]
    sgid_index: Option<u8>,
}

/// The first CA with a umad device, when none is named.
fn default_ca() -> Result<String, Box<dyn std::error::Error>> {
    umad::ca_names()?
        .into_iter()
        .next()
        .ok_or_else(|| "no CA has a umad device".into())
}

/// The local GID index to send from: the destination GID itself when it is
/// ours, else the first RoCEv2 (or IB) GID that is IPv6 and not link-local.
fn source_gid_index(ca: &str, port: u32, dest: Gid) -> Result<u8, Box<dyn std::error::Error>> {
    let list = DeviceList::new()?;
    let dev = list
        .iter()
        .find(|d| d.name() == ca)
        .ok_or_else(|| format!("no verbs device {ca}"))?;
    let table = dev.open()?.gid_table()?;
    let ours: Vec<_> = table.iter().filter(|e| u32::from(e.port) == port).collect();
    // RoCE v2 carries the GIDs as IP addresses: source and destination must be
    // of one family (an IPv6 source with an IPv4-mapped destination is refused
    // with EINVAL).
    let v4 = dest.to_ipv6().to_ipv4_mapped().is_some();
    let pick = ours.iter().find(|e| e.gid == dest).or_else(|| {
        ours.iter().find(|e| {
            let ip = e.gid.to_ipv6();
            matches!(e.gid_type, GidType::RoceV2 | GidType::Ib)
                && ip.to_ipv4_mapped().is_some() == v4
                && (ip.segments()[0] & 0xffc0) != 0xfe80
        })
    });
    let family = if v4 { "IPv4-mapped" } else { "IPv6" };
    let e = pick.ok_or_else(|| format!("{ca} port {port} has no {family} GID to send from"))?;
    Ok(e.index)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn serve(port: &Port, count: Option<u64>) -> Result<(), Box<dyn std::error::Error>> {
    let agent = port.register(
        &Registration::new(PING_CLASS, 1)
            .oui(Oui::OPENIB)
            .method(Method::GET),
    )?;
    let host = host_name();
    println!(
        "madping server on {} port {}: {host}",
        port.ca_name(),
        port.port_num()
    );
    let mut served = 0u64;
    while count.is_none_or(|c| served < c) {
        let req = agent.recv(None)?;
        if req.mad.method() != Method::GET {
            continue;
        }
        let mut resp = req.mad.response();
        let data = resp.data_mut();
        let n = host.len().min(HOST_LEN - 1).min(data.len());
        data[..n].copy_from_slice(&host.as_bytes()[..n]);
        agent.respond(&req, &resp)?;
        served += 1;
    }
    Ok(())
}

fn ping(port: &Port, a: &Args, dest: Gid) -> Result<bool, Box<dyn std::error::Error>> {
    let sgid = match a.sgid_index {
        Some(i) => i,
        None => source_gid_index(port.ca_name(), port.port_num(), dest)?,
    };
    let addr = Address::gsi(dest, sgid);
    let agent = port.register(&Registration::new(PING_CLASS, 1).oui(Oui::OPENIB))?;
    let timeout = Duration::from_millis(a.timeout_ms);
    let count = a.count.unwrap_or(u64::MAX);
    let (mut sent, mut got) = (0u64, 0u64);
    let mut rtts = Vec::new();
    let start = Instant::now();
    let mut peer = String::new();
    while sent < count {
        let mut mad = Mad::new(&MadHeader::request(
            PING_CLASS,
            1,
            Method::GET,
            agent.next_tid(),
            0,
        ));
        mad.set_vendor_header(&VendorHeader::new(Oui::OPENIB))?;
        sent += 1;
        let t0 = Instant::now();
        match agent.request(&mad, &addr, timeout, 0) {
            Ok(r) if !r.mad.status().is_ok() => {
                // The kernel answers a Get for a class no agent serves.
                println!("no madping server there: status {}", r.mad.status());
            }
            Ok(r) => {
                let rtt = t0.elapsed();
                got += 1;
                rtts.push(rtt);
                peer = c_str(&r.mad.data()[..HOST_LEN]);
                println!(
                    "Pong from {peer} ({}): time {:.3} ms",
                    dest.to_ipv6(),
                    rtt.as_secs_f64() * 1e3
                );
            }
            Err(umad::Error::Timeout { tid }) => {
                println!("no answer to TID {tid:#x} within {} ms", a.timeout_ms);
            }
            Err(e) => return Err(e.into()),
        }
        if sent < count {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let total = start.elapsed();
    println!("\n--- {peer} ({}) madping statistics ---", dest.to_ipv6());
    println!(
        "{sent} packets transmitted, {got} received, {}% packet loss, time {} ms",
        (sent - got) * 100 / sent.max(1),
        total.as_millis()
    );
    if let (Some(min), Some(max)) = (rtts.iter().min(), rtts.iter().max()) {
        let avg = rtts.iter().sum::<Duration>() / rtts.len() as u32;
        println!(
            "rtt min/avg/max = {:.3}/{:.3}/{:.3} ms",
            min.as_secs_f64() * 1e3,
            avg.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    Ok(got == sent)
}

fn run(a: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let ca = match &a.ca {
        Some(c) => c.clone(),
        None => default_ca()?,
    };
    let port = Port::open(&ca, a.port)?;
    if a.server {
        serve(&port, a.count)?;
        return Ok(true);
    }
    let dest = Gid::from(a.gid.ok_or("no GID")?);
    ping(&port, a, dest)
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("madping: {e}");
            ExitCode::FAILURE
        }
    }
}
