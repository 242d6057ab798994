//! Lists the CAs that have umad devices and their ports, like `ibstat`.
//!
//! Usage: `umad_info [CA]`

use std::process::ExitCode;

use clap::Parser;
use rdma::umad::{self, Ca};

/// List the CAs that have umad devices and their ports (like ibstat).
#[derive(Parser, Debug)]
#[command(name = "umad_info")]
struct Args {
    /// Show only the CA of this name (default: every CA with a umad device).
    #[arg(value_name = "CA")]
    ca: Option<String>,
}

fn print_ca(ca: &Ca) {
    println!("CA '{}'", ca.name);
    println!("\tCA type: {}", ca.ca_type);
    println!("\tNumber of ports: {}", ca.ports.len());
    println!("\tFirmware version: {}", ca.fw_ver);
    println!("\tHardware version: {}", ca.hw_ver);
    println!("\tNode GUID: {:#018x}", ca.node_guid);
    println!("\tSystem image GUID: {:#018x}", ca.system_guid);
    for p in &ca.ports {
        println!("\tPort {}:", p.port_num);
        println!("\t\tState: {}", umad::port_state_name(p.state));
        println!(
            "\t\tPhysical state: {}",
            umad::phys_state_name(p.phys_state)
        );
        println!("\t\tRate: {}", p.rate);
        println!("\t\tBase lid: {}", p.base_lid);
        println!("\t\tLMC: {}", p.lmc);
        println!("\t\tSM lid: {}", p.sm_lid);
        println!("\t\tCapability mask: {:#010x}", p.capability_mask);
        println!("\t\tPort GUID: {:#018x}", p.port_guid);
        println!("\t\tLink layer: {}", p.link_layer);
        println!("\t\tGID prefix: {:#018x}", p.gid_prefix);
        println!(
            "\t\tP_Keys: {}",
            p.pkeys.iter().filter(|&&k| k != 0).count()
        );
    }
}

fn main() -> ExitCode {
    let only = Args::parse().ca;
    let names = match umad::ca_names() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("umad_info: {e}");
            return ExitCode::FAILURE;
        }
    };
    if names.is_empty() {
        eprintln!("umad_info: no CA has a umad device (is ib_umad loaded?)");
        return ExitCode::FAILURE;
    }
    let mut shown = 0;
    for name in names
        .iter()
        .filter(|n| only.as_ref().is_none_or(|o| o == *n))
    {
        match Ca::get(name) {
            Ok(ca) => {
                print_ca(&ca);
                shown += 1;
            }
            Err(e) => {
                eprintln!("umad_info: {name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if shown == 0 {
        eprintln!(
            "umad_info: no CA named {:?} among {names:?}",
            only.unwrap_or_default()
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
