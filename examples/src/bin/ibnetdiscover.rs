//! Discovers the fabric by a directed-route sweep and prints its topology,
//! like infiniband-diags' `ibnetdiscover`: the format that ibsim reads as
//! its net file (switches, then CAs, then routers, each with its links).
//!
//! The sweep is libibnetdisc's ([`rdma_examples::discover`]), with at most
//! `-o` SMPs outstanding (2, as the C tool), so that nodes are found, and
//! listed, in the same order.
//!
//! `--cache FILE` also writes the fabric found to a cache file in
//! libibnetdisc's format ([`rdma_examples::fabric_cache`]).
//!
//! Usage: `ibnetdiscover [-o OUTSTANDING] [-l|-S|-H] [--cache FILE]
//! [TOPOLOGY_FILE]`

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use rdma_examples::discover::{
    clean, Fabric, NodeRec, PortRec, Sweep, CA, CAP_EXT_SPEEDS, ROUTER, SWITCH,
};
use rdma_examples::fabric_cache;
use rdma_examples::ibdiag::{self, Common, Diag};

/// Discover the fabric and print its topology (like ibnetdiscover).
#[derive(Parser, Debug)]
#[command(name = "ibnetdiscover")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// How many SMPs may be outstanding at once.
    #[arg(short = 'o', long = "outstanding_smps", default_value_t = 2)]
    outstanding: usize,
    /// List the nodes (CAs, switches, routers) instead of the topology.
    #[arg(short = 'l', long = "list")]
    list: bool,
    /// List the switches only.
    #[arg(short = 'S', long = "Switch_list")]
    switch_list: bool,
    /// List the CAs only.
    #[arg(short = 'H', long = "Hca_list")]
    hca_list: bool,
    /// Also write what the sweep found to this cache file (libibnetdisc's
    /// format: `iblinkinfo --load-cache` reads it, ours or the C tool).
    #[arg(long = "cache", value_name = "FILE")]
    cache: Option<String>,
    /// Write the topology to this file instead of stdout.
    file: Option<String>,
}

fn node_name(n: &NodeRec) -> String {
    let c = match n.info.node_type {
        SWITCH => 'S',
        CA => 'H',
        ROUTER => 'R',
        _ => '?',
    };
    format!("\"{c}-{:016x}\"", n.info.node_guid)
}

fn width_compat(w: u8) -> &'static str {
    match w {
        1 => "1x",
        2 => "4x",
        4 => "8x",
        8 => "12x",
        16 => "2x",
        _ => "??",
    }
}

fn speed_compat(s: u8) -> &'static str {
    match s {
        1 => "SDR",
        2 => "DDR",
        4 => "QDR",
        _ => "???",
    }
}

fn speed_ext_compat(e: u8, s: u8) -> &'static str {
    match e {
        0 => speed_compat(s),
        1 => "FDR",
        2 => "EDR",
        4 => "HDR",
        8 => "NDR",
        _ => "???",
    }
}

fn link_str(width: u8, speed: u8, espeed: u8) -> String {
    let s = if speed != 4 && espeed == 0 {
        speed_compat(speed)
    } else {
        speed_ext_compat(espeed, speed)
    };
    format!("{}{s}", width_compat(width))
}

/// `ctime(3)` of now, in UTC: `Tue Dec  1 17:11:41 2026`.
fn ctime_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let wd = (days + 4).rem_euclid(7) as usize;
    const WD: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MO: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {:2} {:02}:{:02}:{:02} {y}",
        WD[wd],
        MO[(m - 1) as usize],
        d,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn out_ids(o: &mut String, n: &NodeRec) {
    let _ = write!(
        o,
        "\nvendid=0x{:x}\ndevid=0x{:x}\n",
        n.info.vendor_id, n.info.device_id
    );
    if n.info.system_image_guid != 0 {
        let _ = writeln!(o, "sysimgguid=0x{:x}", n.info.system_image_guid);
    }
}

fn topology(s: &Fabric) -> String {
    let mut o = String::new();
    let _ = write!(o, "#\n# Topology file: generated on {}\n#\n", ctime_now());
    if let Some((f, _)) = s.from {
        let n = &s.nodes[f];
        let _ = writeln!(
            o,
            "# Initiated from node {:016x} port {:016x}",
            n.info.node_guid, n.info.port_guid
        );
    }
    let remote = |r: (usize, u8)| s.port(r);
    let lid_of = |n: &NodeRec, p: &PortRec| {
        if n.info.node_type == SWITCH {
            n.smalid
        } else {
            p.base_lid
        }
    };
    for n in s.nodes.iter().rev().filter(|n| n.info.node_type == SWITCH) {
        out_ids(&mut o, n);
        let _ = writeln!(
            o,
            "switchguid=0x{:x}({:x})",
            n.info.node_guid, n.info.port_guid
        );
        let _ = writeln!(
            o,
            "Switch\t{} {}\t\t# \"{}\" {} port 0 lid {} lmc {}",
            n.info.num_ports,
            node_name(n),
            clean(&n.desc),
            if n.enhsp0 { "enhanced" } else { "base" },
            n.smalid,
            n.smalmc
        );
        let cap = n.ports[0]
            .as_ref()
            .and_then(|p| p.info)
            .map(|i| i.capability_mask);
        for p in n.ports.iter().skip(1).flatten() {
            let Some(r) = p.remote else { continue };
            let (rn, rp) = remote(r);
            let info = p.info.unwrap_or_default();
            let (speed, espeed) = match cap {
                None => (0, 0),
                Some(c) if c & CAP_EXT_SPEEDS != 0 => (
                    info.link_speed_active.into(),
                    info.link_speed_ext_active.into(),
                ),
                Some(_) => (info.link_speed_active.into(), 0),
            };
            let _ = write!(o, "[{}]\t{}[{}]", p.num, node_name(rn), rp.num);
            if rn.info.node_type != SWITCH {
                let _ = write!(o, "({:x}) ", rp.guid);
            }
            let _ = writeln!(
                o,
                "\t\t# \"{}\" lid {} {}",
                clean(&rn.desc),
                lid_of(rn, rp),
                link_str(info.link_width_active.into(), speed, espeed)
            );
        }
    }
    for t in [CA, ROUTER] {
        for n in s.nodes.iter().rev().filter(|n| n.info.node_type == t) {
            out_ids(&mut o, n);
            let (lower, upper) = if t == CA { ("ca", "Ca") } else { ("rt", "Rt") };
            let _ = writeln!(o, "{lower}guid=0x{:x}", n.info.node_guid);
            let _ = writeln!(
                o,
                "{upper}\t{} {}\t\t# \"{}\"",
                n.info.num_ports,
                node_name(n),
                clean(&n.desc)
            );
            for p in n.ports.iter().skip(1).flatten() {
                let Some(r) = p.remote else { continue };
                let (rn, rp) = remote(r);
                let info = p.info.unwrap_or_default();
                let espeed = if info.capability_mask & CAP_EXT_SPEEDS != 0 {
                    info.link_speed_ext_active.into()
                } else {
                    0
                };
                let _ = write!(
                    o,
                    "[{}]({:x}) \t{}[{}]",
                    p.num,
                    p.guid,
                    node_name(rn),
                    rp.num
                );
                if rn.info.node_type != SWITCH {
                    let _ = write!(o, " ({:x}) ", rp.guid);
                }
                let _ = writeln!(
                    o,
                    "\t\t# lid {} lmc {} \"{}\" lid {} {}",
                    p.base_lid,
                    p.lmc,
                    clean(&rn.desc),
                    lid_of(rn, rp),
                    link_str(
                        info.link_width_active.into(),
                        info.link_speed_active.into(),
                        espeed,
                    )
                );
            }
        }
    }
    o
}

fn list(s: &Fabric, types: &[u8]) -> String {
    let mut o = String::new();
    for &t in types {
        for n in s.nodes.iter().rev().filter(|n| n.info.node_type == t) {
            let kind = match t {
                SWITCH => "Switch",
                CA => "Ca",
                _ => "Router",
            };
            let _ = writeln!(
                o,
                "{kind}\t : 0x{:016x} ports {} devid 0x{:x} vendid 0x{:x} \"{}\"",
                n.info.node_guid,
                n.info.num_ports,
                n.info.device_id,
                n.info.vendor_id,
                clean(&n.desc)
            );
        }
    }
    o
}

fn main() -> ExitCode {
    let start = std::time::Instant::now();
    let a = Args::parse();
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("ibnetdiscover", &e));
    let opened = start.elapsed();
    let mut s = Sweep::new(
        &diag,
        a.outstanding,
        Duration::from_millis(a.common.timeout_ms.max(1)),
    );
    let t0 = std::time::Instant::now();
    if let Err(e) = s.run() {
        ibdiag::exit_error("ibnetdiscover", &format!("discover failed: {e}"));
    }
    let swept = t0.elapsed();
    if s.fabric.from.is_none() {
        ibdiag::exit_error("ibnetdiscover", "discover failed");
    }
    let out = if a.list {
        list(&s.fabric, &[CA, SWITCH, ROUTER])
    } else if a.switch_list {
        list(&s.fabric, &[SWITCH])
    } else if a.hca_list {
        list(&s.fabric, &[CA])
    } else {
        topology(&s.fabric)
    };
    match &a.file {
        Some(f) => {
            if let Err(e) = std::fs::write(f, out) {
                ibdiag::exit_error("ibnetdiscover", &format!("can't open file {f}: {e}"));
            }
        }
        None => print!("{out}"),
    }
    if let Some(f) = &a.cache {
        if let Err(e) = fabric_cache::save(std::path::Path::new(f), &s.fabric) {
            ibdiag::exit_error(
                "ibnetdiscover",
                &format!("caching ibnetdiscover data failed: {e}"),
            );
        }
    }
    let (nodes, sent) = (s.fabric.nodes.len(), s.sent);
    let written = start.elapsed();
    drop(s);
    drop(diag);
    if std::env::var_os("RDMA_IBNETDISCOVER_STATS").is_some() {
        eprintln!(
            "ibnetdiscover: {nodes} nodes, {sent} SMPs, port opened in {opened:?}, sweep {swept:?}, output {:?}, port closed in {:?}",
            written - opened - swept,
            start.elapsed() - written
        );
    }
    ExitCode::SUCCESS
}
