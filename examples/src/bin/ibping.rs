//! Pings a port by LID with vendor MADs of OpenIB's ping class (0x32), like
//! infiniband-diags' `ibping`: the server (`-S`) answers each Get with its
//! host and domain name; the client prints the round trips and, at the end,
//! the statistics.
//!
//! Under ibsim a request to QP1 reaches only a client that is the node's
//! SM, on a node where no SM runs: `ibping -S --sm` claims that role, once
//! its agents are registered, as OpenSM does (by opening the port's
//! `issm` device, which sets PortInfo:CapabilityMask.IsSM), e.g.
//! `SIM_HOST=NODE ibping -S --sm`.
//!
//! Usage: `ibping [-c COUNT] [-f] LID` or `ibping -S`

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rdma::mad::{Mad, MadHeader, Method, Oui, VendorHeader};
use rdma::umad::{Address, IsSm, Registration};
use rdma_examples::ibdiag::{self, Common, Dest, Diag};

/// Ping a port by LID (like ibping).
#[derive(Parser, Debug)]
#[command(name = "ibping")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Stop after this many pings.
    #[arg(short = 'c', long = "count")]
    count: Option<u64>,
    /// Flood: no pause between pings and no line per pong.
    #[arg(short = 'f', long = "flood")]
    flood: bool,
    /// The OUI of the vendor class.
    #[arg(short = 'o', long = "oui", default_value = "0x001405")]
    oui: String,
    /// Serve: answer pings until killed.
    #[arg(short = 'S', long = "Server")]
    server: bool,
    /// As a server, also claim the port's SM role (IsSM) while serving:
    /// under ibsim only then do requests to QP1 reach this process.
    #[arg(long = "sm")]
    sm: bool,
    /// The LID to ping.
    dest: Option<String>,
}

/// OpenIB's ping class.
const PING_CLASS: u8 = 0x32;
/// The data of a vendor MAD of range 2 (after its 40 bytes of headers).
const DATA_SIZE: usize = 216;

/// `hostname.domainname`, as ibping's server answers (just the host name
/// when the domain is empty).
fn host_and_domain() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default()
    };
    let host = read("/proc/sys/kernel/hostname");
    let host = if host.is_empty() {
        "?hostname?".to_string()
    } else {
        host
    };
    let domain = read("/proc/sys/kernel/domainname");
    if domain.is_empty() {
        host
    } else {
        format!("{host}.{domain}")
    }
}

fn serve(diag: &Diag, oui: Oui, sm: bool) -> ibdiag::Result<()> {
    let mut _claim = None;
    if sm {
        // As the node's SM this port also gets the SMPs of the subnet
        // manager (SMInfo): agents for them, which the loop below ignores,
        // registered first (umad2sim fails a process that receives a MAD
        // of a class without an agent).
        diag.smi_agent()?;
        diag.dr_agent()?;
    }
    let agent = diag
        .port()
        .register(
            &Registration::new(PING_CLASS, 1)
                .oui(oui)
                .method(Method::GET),
        )
        .map_err(|_| format!("can't serve class {PING_CLASS} on this port"))?;
    if sm {
        let l = diag.local();
        _claim = Some(
            IsSm::try_acquire(&l.ca_name, l.port_num)
                .map_err(|e| format!("can't claim the SM role of the port: {e}"))?,
        );
    }
    let mut answer = host_and_domain().into_bytes();
    answer.truncate(DATA_SIZE - 1);
    loop {
        let req = agent.recv(None).map_err(|e| e.to_string())?;
        if req.status != 0 || req.mad.method() != Method::GET {
            continue;
        }
        let mut resp = req.mad.response();
        let data = resp.data_mut();
        data[..answer.len()].copy_from_slice(&answer);
        let _ = agent.respond(&req, &resp);
    }
}

struct Stats {
    sent: u64,
    replied: u64,
    min: u64,
    max: u64,
    total: u64,
    last_host: String,
}

fn ms(us: u64) -> String {
    format!("{}.{:03}", us / 1000, us % 1000)
}

fn main() -> ExitCode {
    let a = Args::parse();
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("ibping", &e));
    let oui_val = ibdiag::parse_int(&a.oui).unwrap_or(0x1405) as u32;
    let Some(oui) = Oui::from_u32(oui_val) else {
        ibdiag::exit_error(
            "ibping",
            &format!("OUI {:#x} is wider than 24 bits", oui_val),
        )
    };
    if a.server {
        if let Err(e) = serve(&diag, oui, a.sm) {
            ibdiag::exit_error("ibping", &e);
        }
        return ExitCode::SUCCESS;
    }
    let Some(d) = &a.dest else {
        eprintln!("ibping: a destination LID is needed (or -S)");
        return ExitCode::from(255);
    };
    let dest = Dest::parse(d, false).unwrap_or_else(|e| ibdiag::exit_error("ibping", &e));
    let lid = dest.lid().unwrap_or(0);
    let agent = diag
        .port()
        .register(&Registration::new(PING_CLASS, 1).oui(oui))
        .unwrap_or_else(|_| {
            ibdiag::exit_error(
                "ibping",
                &format!("can't register ping class {PING_CLASS} on this port"),
            )
        });
    let mut st = Stats {
        sent: 0,
        replied: 0,
        min: u64::MAX,
        max: 0,
        total: 0,
        last_host: String::new(),
    };
    let start = Instant::now();
    let count = a.count.unwrap_or(u64::MAX);
    let timeout = Duration::from_millis(a.common.timeout_ms.max(1));
    while st.sent < count {
        st.sent += 1;
        let t0 = Instant::now();
        let mut m = Mad::new(&MadHeader::request(
            PING_CLASS,
            1,
            Method::GET,
            agent.next_tid(),
            0,
        ));
        let reply = m
            .set_vendor_header(&VendorHeader::new(oui))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                agent
                    .request(&m, &Address::gsi_lid(lid), timeout, ibdiag::RETRIES)
                    .map_err(|e| e.to_string())
            });
        match reply {
            Ok(r) if r.mad.status().is_ok() => {
                let rtt = t0.elapsed().as_micros() as u64;
                let data = r.mad.data();
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                let host = String::from_utf8_lossy(&data[..end]).into_owned();
                if st.last_host.is_empty() {
                    st.last_host = host.clone();
                }
                if !a.flood {
                    println!(
                        "Pong from {host} ({}): time {} ms",
                        dest.describe(),
                        ms(rtt)
                    );
                }
                st.min = st.min.min(rtt);
                st.max = st.max.max(rtt);
                st.total += rtt;
                st.replied += 1;
            }
            _ => {}
        }
        if !a.flood {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let total_ms = start.elapsed().as_millis();
    let lost = st.sent - st.replied;
    println!(
        "\n--- {} ({}) ibping statistics ---",
        st.last_host,
        dest.describe()
    );
    println!(
        "{} packets transmitted, {} received, {}% packet loss, time {} ms",
        st.sent,
        st.replied,
        if lost != 0 { lost * 100 / st.sent } else { 0 },
        total_ms
    );
    let avg = st.total.checked_div(st.replied).unwrap_or(0);
    println!(
        "rtt min/avg/max = {}/{}/{} ms",
        if st.min == u64::MAX {
            "0.000".to_string()
        } else {
            ms(st.min)
        },
        ms(avg),
        ms(st.max)
    );
    ExitCode::SUCCESS
}
