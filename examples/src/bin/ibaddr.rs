//! Shows a port's addresses, like infiniband-diags' `ibaddr`: its GID
//! (PortInfo's subnet prefix and NodeInfo's port GUID) and its LID range
//! (LID to LID + 2^LMC - 1), of this port or of a port given by LID, GUID
//! (`-G`) or directed route (`-D`).
//!
//! Usage: `ibaddr [-g] [-l|-L] [DEST [PORT]]`

use std::process::ExitCode;

use clap::Parser;
use rdma::mad::{NodeInfo, PortInfo};
use rdma_examples::ibdiag::{self, Addressing, Common, Dest, Diag};

/// Show a port's GID and LID range (like ibaddr).
#[derive(Parser, Debug)]
#[command(name = "ibaddr")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// The destination is a directed route (0,1,3).
    #[arg(short = 'D', long = "Direct")]
    direct: bool,
    /// The destination is a port GUID.
    #[arg(short = 'G', long = "Guid")]
    guid: bool,
    /// The LID of the SM port that resolves GUIDs.
    #[arg(short = 's', long = "sm_port", value_name = "LID")]
    sm_port: Option<String>,
    /// Show send and receive errors.
    #[arg(short = 'e', long = "errors")]
    errors: bool,
    /// More output.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// Show the GID only.
    #[arg(short = 'g', long = "gid_show")]
    gid: bool,
    /// Show the LID range only.
    #[arg(short = 'l', long = "lid_show", action = clap::ArgAction::Count)]
    lid: u8,
    /// Show the LID range only, in decimal.
    #[arg(short = 'L', long = "Lid_show")]
    lid_decimal: bool,
    /// The port: a LID, with -G a port GUID, with -D a directed route
    /// (default: this port).
    dest: Option<String>,
    /// The port number to query on the node.
    #[arg(value_name = "PORT")]
    portnum: Option<String>,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let fail = |what: &str| -> ! { ibdiag::exit_error("ibaddr", what) };
    // ibaddr's show_lid: -l counts up, -L sets it negative (last wins
    // in C; here -L wins).
    let (show_lid, show_gid) = match (a.lid_decimal, a.lid, a.gid) {
        (false, 0, false) => (1i32, true),
        (true, _, g) => (-100, g),
        (false, n, g) => (i32::from(n), g),
    };
    let diag = Diag::open(&a.common).unwrap_or_else(|e| fail(&e));
    let mut port = a
        .portnum
        .as_deref()
        .map_or(0, |p| ibdiag::parse_int(p).unwrap_or(0) as u8);
    let dest = match &a.dest {
        Some(d) => {
            let addr = Addressing {
                direct: a.direct,
                guid: a.guid,
                sm_port: a.sm_port.clone(),
                errors: a.errors,
                verbose: a.verbose,
                ..Addressing::default()
            };
            diag.resolve(d, &addr)
                .unwrap_or_else(|_| fail(&format!("can't resolve destination port {d}")))
        }
        None => {
            port = diag.local().port_num as u8;
            Dest::Lid(diag.local().base_lid as u16)
        }
    };
    let ni = diag.smp_get::<NodeInfo>(0, &dest);
    let pi = ni
        .as_ref()
        .ok()
        .and_then(|_| diag.smp_get::<PortInfo>(u32::from(port), &dest).ok());
    let (Ok(ni), Some(pi)) = (ni, pi) else {
        fail("can't resolve requested address")
    };
    let mut line = String::new();
    if show_gid {
        let gid = rdma::Gid::from_parts(pi.gid_prefix, ni.port_guid);
        line.push_str(&format!("GID {} ", ibdiag::inet6(&gid.0)));
    }
    let last = u32::from(pi.lid) + (1u32 << pi.lmc) - 1;
    if show_lid > 0 {
        line.push_str(&format!("LID start 0x{:x} end 0x{last:x}", pi.lid));
    } else if show_lid < 0 {
        line.push_str(&format!("LID start {} end {last}", pi.lid));
    }
    println!("{line}");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Args::command().debug_assert();
    }
}
