//! Lists the RDMA devices, their ports and GID tables.
//!
//! Usage: `devices [DEVICE]` — all devices, or only the one named.

use std::process::ExitCode;

use clap::Parser;
use rdma::{DeviceList, PortState};

/// List the RDMA devices, their ports and GID tables.
#[derive(Parser, Debug)]
#[command(name = "devices")]
struct Args {
    /// Show only the device of this name (default: every device).
    #[arg(value_name = "DEVICE")]
    device: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args.device.as_deref()) {
        Ok(0) => {
            eprintln!("no RDMA devices found");
            ExitCode::FAILURE
        }
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devices: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints the devices; returns how many were printed.
fn run(only: Option<&str>) -> rdma::Result<usize> {
    let list = DeviceList::new()?;
    let mut shown = 0;
    for dev in list.iter().filter(|d| only.is_none_or(|n| d.name() == n)) {
        shown += 1;
        let ctx = dev.open()?;
        let attr = ctx.query_device()?;
        println!("hca_id: {}", dev.name());
        println!("\tnode_type:\t\t{:?}", dev.node_type());
        println!("\ttransport:\t\t{:?}", dev.transport_type());
        println!("\tfw_ver:\t\t\t{}", attr.fw_ver());
        println!("\tnode_guid:\t\t{}", guid(attr.node_guid()));
        println!("\tsys_image_guid:\t\t{}", guid(attr.sys_image_guid()));
        println!("\tvendor_id:\t\t{:#06x}", attr.vendor_id());
        println!("\tvendor_part_id:\t\t{}", attr.vendor_part_id());
        println!("\thw_ver:\t\t\t{:#x}", attr.hw_ver());
        println!("\tmax_qp:\t\t\t{}", attr.max_qp());
        println!("\tmax_cq:\t\t\t{}", attr.max_cq());
        println!("\tmax_mr:\t\t\t{}", attr.max_mr());
        println!("\tphys_port_cnt:\t\t{}", attr.phys_port_cnt());
        let gids = ctx.gid_table()?;
        for p in 1..=attr.phys_port_cnt() {
            let port = ctx.query_port(p)?;
            println!("\t\tport:\t{p}");
            let state = match port.state() {
                PortState::Active => "PORT_ACTIVE (4)".to_string(),
                PortState::Down => "PORT_DOWN (1)".to_string(),
                other => format!("{other:?}"),
            };
            println!("\t\t\tstate:\t\t\t{state}");
            println!("\t\t\tmax_mtu:\t\t{}", port.max_mtu());
            println!("\t\t\tactive_mtu:\t\t{}", port.active_mtu());
            println!("\t\t\tsm_lid:\t\t\t{}", port.sm_lid());
            println!("\t\t\tport_lid:\t\t{}", port.lid());
            println!("\t\t\tport_lmc:\t\t{:#04x}", port.lmc());
            println!("\t\t\tlink_layer:\t\t{}", port.link_layer());
            for g in gids.iter().filter(|g| g.port == p) {
                let netdev = g.netdev().unwrap_or_default();
                println!(
                    "\t\t\tGID[{:3}]:\t\t{}, {:?} {} {}",
                    g.index,
                    g.gid,
                    g.gid_type,
                    netdev,
                    g.gid
                        .to_ipv4_mapped()
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| g.gid.to_ipv6().to_string()),
                );
            }
        }
        println!();
    }
    Ok(shown)
}

/// A GUID as `ibv_devinfo` prints it: four groups of four hex digits.
fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}
