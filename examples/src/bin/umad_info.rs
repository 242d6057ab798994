//! Lists the CAs that have umad devices and their ports, printing what
//! `ibstat` (infiniband-diags) prints, line for line: switches (a switch's
//! only port is its management port 0), one CA, one port of it, `-l`, `-s`,
//! `-p`, ibstat's rates (`2.5` for 1x SDR, the `(FDR10)` suffix) and state
//! names; a failure (no such CA or port) exits with status 255, as ibstat's.
//!
//! Usage: `umad_info [-l] [-s] [-p] [CA [PORT]]`

use std::process::ExitCode;

use clap::Parser;
use rdma::umad::{self, Ca, CaPort};

/// List the CAs that have umad devices and their ports (as ibstat does).
#[derive(Parser, Debug)]
#[command(name = "umad_info")]
struct Args {
    /// List the CAs' names only.
    #[arg(short = 'l', long = "list_of_cas")]
    list: bool,
    /// Short output: the CAs without their ports.
    #[arg(short = 's', long = "short")]
    short: bool,
    /// List the port GUIDs only.
    #[arg(short = 'p', long = "port_list")]
    port_list: bool,
    /// Show only the CA of this name (default: every CA with a umad device).
    #[arg(value_name = "CA")]
    ca: Option<String>,
    /// Show only this port of the CA (decimal, or 0x hexadecimal).
    #[arg(value_name = "PORT", value_parser = parse_port)]
    port: Option<u32>,
}

/// A port number as ibstat's `strtol(arg, NULL, 0)` reads it (decimal,
/// 0x hexadecimal, 0 octal).
fn parse_port(s: &str) -> Result<u32, String> {
    let r = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u32::from_str_radix(h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        u32::from_str_radix(&s[1..], 8)
    } else {
        s.parse()
    };
    r.map_err(|e| format!("bad port number {s:?}: {e}"))
}

fn print_ca(ca: &Ca) {
    let kind = umad::node_type_name(ca.node_type);
    println!("{kind} '{}'", ca.name);
    println!("\t{kind} type: {}", ca.ca_type);
    println!("\tNumber of ports: {}", ca.num_ports);
    println!("\tFirmware version: {}", ca.fw_ver);
    println!("\tHardware version: {}", ca.hw_ver);
    println!("\tNode GUID: {:#018x}", ca.node_guid);
    println!("\tSystem image GUID: {:#018x}", ca.system_guid);
}

/// ibstat's rate: the Gb/s of sysfs, `2.5` for 1x SDR (which libibumad
/// reads as 2), and `(FDR10)` after an FDR10 rate.
fn rate(p: &CaPort) -> String {
    rate_text(p.rate, p.is_fdr10())
}

fn rate_text(rate: u32, fdr10: bool) -> String {
    if fdr10 {
        format!("{rate} (FDR10)")
    } else if rate == 2 {
        "2.5".to_string()
    } else {
        rate.to_string()
    }
}

/// One port: indented under its CA, or alone (`umad_info CA PORT`).
fn print_port(p: &CaPort, alone: bool) {
    let (hdr, pre) = if alone { ("", "") } else { ("\t", "\t\t") };
    println!("{hdr}Port {}:", p.port_num);
    println!("{pre}State: {}", p.state.ibstat_name());
    println!("{pre}Physical state: {}", p.phys_state.ibstat_name());
    println!("{pre}Rate: {}", rate(p));
    println!("{pre}Base lid: {}", p.base_lid);
    println!("{pre}LMC: {}", p.lmc);
    println!("{pre}SM lid: {}", p.sm_lid);
    println!("{pre}Capability mask: {:#010x}", p.capability_mask);
    println!("{pre}Port GUID: {:#018x}", p.port_guid);
    println!("{pre}Link layer: {}", p.link_layer);
}

/// The status of ibstat's failures: libibumad's IBPANIC exits with -1,
/// which the shell sees as 255.
fn panic_exit() -> ExitCode {
    ExitCode::from(255)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut names = match umad::ca_names() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("umad_info: can't list IB device names: {e}");
            return panic_exit();
        }
    };
    names.sort();
    if let Some(only) = &args.ca {
        if !names.contains(only) {
            eprintln!("umad_info: '{only}' IB device can't be found");
            return panic_exit();
        }
        names.retain(|n| n == only);
    }
    for name in &names {
        if args.list && !args.port_list {
            println!("{name}");
            continue;
        }
        let ca = match Ca::get(name) {
            Ok(ca) => ca,
            Err(e) => {
                eprintln!("umad_info: stat of IB device '{name}' failed: {e}");
                return panic_exit();
            }
        };
        if args.port_list {
            // Ports 0 to the highest, those with a GUID.
            for p in &ca.ports {
                if p.port_guid != 0 {
                    println!("{:#018x}", p.port_guid);
                }
            }
            continue;
        }
        // A node type of 0 is not a device ibstat shows.
        if ca.node_type == 0 {
            continue;
        }
        if let (Some(n), false) = (args.port, args.short) {
            let Some(p) = ca.port(n) else {
                eprintln!(
                    "umad_info: {}: '{name}' has no port number {n} - max ({})",
                    umad::node_type_name(ca.node_type),
                    ca.num_ports
                );
                return panic_exit();
            };
            println!("{}: '{}'", umad::node_type_name(ca.node_type), ca.name);
            print_port(p, true);
            continue;
        }
        print_ca(&ca);
        if !args.short {
            for p in &ca.ports {
                print_port(p, false);
            }
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_print_as_ibstat_prints_them() {
        assert_eq!(rate_text(2, false), "2.5");
        assert_eq!(rate_text(10, false), "10");
        assert_eq!(rate_text(40, true), "40 (FDR10)");
        // ibstat checks FDR10 first.
        assert_eq!(rate_text(2, true), "2 (FDR10)");
    }

    #[test]
    fn port_numbers_read_as_strtol_with_base_0() {
        assert_eq!(parse_port("2"), Ok(2));
        assert_eq!(parse_port("0x1f"), Ok(31));
        assert_eq!(parse_port("010"), Ok(8));
        assert_eq!(parse_port("0"), Ok(0));
        assert!(parse_port("x").is_err());
    }
}
