//! Queries (or sets) a subnet manager's SMInfo, like infiniband-diags'
//! `sminfo`: by default the SM the local port knows (its SM LID).
//!
//! Usage: `sminfo [-D] [SM_LID|SM_DR_PATH [MODIFIER]]`, with `-s STATE -p
//! PRIORITY -a ACTIVITY` for a Set (a MODIFIER other than 0).

use std::process::ExitCode;

use clap::Parser;
use rdma::mad::{Attribute, Method, SmInfo};
use rdma_examples::ibdiag::{self, Common, Dest, Diag};

/// Query a subnet manager's SMInfo (like sminfo).
#[derive(Parser, Debug)]
#[command(name = "sminfo")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// The destination is a directed route (0,1,3), not a LID.
    #[arg(short = 'D', long = "Direct")]
    direct: bool,
    /// The SM state of a Set.
    #[arg(short = 's', long = "state", default_value_t = SmInfo::STANDBY)]
    state: u8,
    /// The priority of a Set.
    #[arg(short = 'p', long = "priority", default_value_t = 0)]
    priority: u8,
    /// The activity count of a Set.
    #[arg(short = 'a', long = "activity", default_value_t = 0)]
    activity: u32,
    /// The SM's LID or directed route (default: the local port's SM LID).
    dest: Option<String>,
    /// The attribute modifier: not 0 sends a Set (SMInfo's control
    /// packets: 1 handover, 2 acknowledge, 3 disable, 4 standby, 5
    /// discover).
    modifier: Option<String>,
}

const STATES: [&str; 4] = [
    "SMINFO_NOTACT",
    "SMINFO_DISCOVER",
    "SMINFO_STANDBY",
    "SMINFO_MASTER",
];

fn main() -> ExitCode {
    let a = Args::parse();
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("sminfo", &e));
    let modifier = a
        .modifier
        .as_deref()
        .and_then(|m| m.parse::<i64>().ok())
        .unwrap_or(0) as u32;
    let dest = match &a.dest {
        Some(d) => Dest::parse(d, a.direct).unwrap_or_else(|e| ibdiag::exit_error("sminfo", &e)),
        None => match diag.local().sm_lid {
            0 => ibdiag::exit_error("sminfo", "can't resolve sm port "),
            l => Dest::Lid(l as u16),
        },
    };
    let req = SmInfo {
        guid: 0,
        sm_key: 0,
        act_count: a.activity,
        priority: a.priority & 0xf,
        sm_state: a.state & 0xf,
    };
    let mut data = [0u8; SmInfo::SIZE];
    if req.encode_into(&mut data).is_err() {
        ibdiag::exit_error("sminfo", "query");
    }
    let method = if modifier != 0 {
        Method::SET
    } else {
        Method::GET
    };
    let reply = diag
        .smp(method, SmInfo::ID, modifier, &dest, Some(&data))
        .and_then(|m| SmInfo::decode(m.data()).map_err(|e| e.to_string()))
        .unwrap_or_else(|_| ibdiag::exit_error("sminfo", "query"));
    println!(
        "sminfo: sm lid {} sm guid {:#x}, activity count {} priority {} state {} {}",
        dest.lid().unwrap_or(0),
        reply.guid,
        reply.act_count,
        reply.priority,
        reply.sm_state,
        STATES.get(usize::from(reply.sm_state)).unwrap_or(&"???")
    );
    ExitCode::SUCCESS
}
