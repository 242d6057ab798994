//! A subnet manager and subnet administrator for an InfiniBand fabric, in
//! the manner of OpenSM: it sweeps the fabric with directed-route SMPs,
//! assigns LIDs, routes by minimum hops, programs every switch's linear
//! forwarding table, brings the ports to Active, answers SMInfo as master,
//! and answers SA queries (NodeRecord, PortInfoRecord, PathRecord,
//! LinkRecord, MCMemberRecord with joins and leaves, ClassPortInfo).
//!
//! Usage: `sm [-C CA] [-P PORT] [--sweep SECONDS] [--once]`. It runs until
//! SIGINT or SIGTERM (or, with `--once`, exits after the first sweep has
//! brought the subnet up). The first sweep is heavy (discovery, LIDs,
//! routes, tables, port states); then every `--sweep` seconds a light one
//! reads each switch's SwitchInfo and each CA port's PortInfo, and a heavy
//! sweep follows when a switch reports PortStateChange, a port's state
//! moved or a node stopped answering, and whenever a trap arrives. It logs
//! each heavy sweep: what it found and changed, and `SUBNET UP` once the
//! first is done. With `OSM_CACHE_DIR` set
//! it writes the LIDs there as OpenSM does (`guid2lid`: port GUID, LID,
//! LID).

mod sa_server;
mod sweep;

use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use clap::Parser;
use rdma::mad::{class, Method, SmInfo};
use rdma::umad::{AsyncPort, IsSm, Port, Registration};

use sweep::{Sm, Subnet};

/// Run a subnet manager and SA on a port.
#[derive(Parser, Debug)]
#[command(name = "sm")]
struct Args {
    /// The CA (default: the first).
    #[arg(short = 'C', long = "Ca")]
    ca: Option<String>,
    /// The port (default: the CA's first; a switch's is 0).
    #[arg(short = 'P', long = "Port")]
    port: Option<u32>,
    /// Seconds between light sweeps (SwitchInfo of every switch, PortInfo of
    /// every CA port; a heavy sweep follows a change, as it does a trap).
    #[arg(long = "sweep", default_value_t = 10)]
    sweep: u64,
    /// Exit once the first sweep has brought the subnet up.
    #[arg(long)]
    once: bool,
    /// The SM priority in SMInfo (0-15).
    #[arg(short = 'p', long = "priority", default_value_t = 0)]
    priority: u8,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    let args = Args::parse();
    // One thread: the SA answers each request where it arrives, without a
    // hand-over between workers (the sweep's SMPs wait on the network, not
    // on a CPU).
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sm: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sm: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let ca = match args.ca {
        Some(c) => c,
        None => rdma::umad::ca_names()?
            .into_iter()
            .next()
            .ok_or("sm: no CA")?,
    };
    let port_num = match args.port {
        Some(p) => p,
        None => rdma::umad::Ca::get(&ca)?
            .ports
            .first()
            .map(|p| p.port_num)
            .ok_or("sm: the CA has no port")?,
    };
    let port = AsyncPort::new(Port::open(&ca, port_num)?)?;
    // Another SM holding the port's IsSM is an error, not a wait.
    let _is_sm = IsSm::try_acquire(&ca, port_num)
        .map_err(|e| format!("sm: another SM holds {ca}/{port_num}: {e}"))?;
    let info = port.port().info()?;
    // The SMI: directed-route sweeps (a client), and SMInfo queries from
    // others, LID-routed or directed (a server).
    let smi_dr = port.register(
        &Registration::new(class::SUBN_DIRECTED_ROUTE, 1)
            .method(Method::GET)
            .method(Method::SET)
            .method(Method::TRAP),
    )?;
    let smi_lid = port.register(
        &Registration::new(class::SUBN_LID_ROUTED, 1)
            .method(Method::GET)
            .method(Method::SET)
            .method(Method::TRAP),
    )?;
    let sa_reg = Registration::new(class::SUBN_ADM, 2)
        .rmpp(1)
        .method(Method::GET)
        .method(Method::GET_TABLE)
        .method(Method::SET)
        .method(Method::DELETE);
    let subnet = Arc::new(RwLock::new(Subnet::default()));
    let sm_info = Arc::new(RwLock::new(SmInfo {
        guid: info.port_guid,
        sm_key: 0,
        act_count: 0,
        priority: args.priority & 0xf,
        sm_state: SmInfo::DISCOVERING,
    }));
    let smi_dr = Arc::new(smi_dr);
    let smi_lid = Arc::new(smi_lid);
    let traps = Arc::new(tokio::sync::Notify::new());
    tokio::spawn(sweep::serve_smi(
        smi_dr.clone(),
        sm_info.clone(),
        traps.clone(),
    ));
    tokio::spawn(sweep::serve_smi(
        smi_lid.clone(),
        sm_info.clone(),
        traps.clone(),
    ));
    let mcast = Arc::new(tokio::sync::Notify::new());
    // The SA answers on the port's reader, as each request is read.
    let _sa =
        port.register_responder(&sa_reg, sa_server::responder(subnet.clone(), mcast.clone()))?;
    let mut sm = Sm::new(smi_dr, subnet, sm_info);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut first = true;
    // The first sweep is heavy; then a light one each period, and a heavy
    // one when the light one finds a change or a trap arrives.
    let mut heavy = true;
    loop {
        if !heavy {
            match sm.light_sweep().await {
                None => {}
                Some(why) => {
                    println!("sm: light sweep: {why}: sweeping");
                    heavy = true;
                }
            }
        }
        if heavy {
            heavy = false;
            sweep_once(&mut sm, &mut first).await;
            if first {
                // It failed before bringing the subnet up: again next period.
                heavy = true;
            } else if args.once {
                return Ok(());
            }
        }
        let wake = tokio::time::Instant::now() + Duration::from_secs(args.sweep);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => break,
                _ = mcast.notified() => {
                    let n = sm.program_multicast().await;
                    println!("sm: multicast groups changed: {n} MFT blocks written");
                    continue;
                }
                _ = traps.notified() => {
                    println!("sm: a trap arrived: sweeping");
                    heavy = true;
                    break;
                }
                _ = tokio::signal::ctrl_c() => return stopped(),
                _ = term.recv() => return stopped(),
            }
        }
    }
}

/// A heavy sweep, its report logged; `first` is cleared once one has
/// brought the subnet up (and `SUBNET UP` is logged).
async fn sweep_once(sm: &mut Sm, first: &mut bool) {
    match sm.sweep().await {
        Ok(report) => {
            if let Some(dir) = std::env::var_os("OSM_CACHE_DIR") {
                let path = std::path::Path::new(&dir).join("guid2lid");
                if let Err(e) = std::fs::write(&path, sweep::guid2lid(&sm.subnet())) {
                    eprintln!("sm: writing {}: {e}", path.display());
                }
            }
            let mfts = sm.program_multicast().await;
            println!("sm: sweep: {report}; {mfts} MFT blocks written");
            if *first {
                println!("sm: SUBNET UP");
                *first = false;
            }
        }
        Err(e) => eprintln!("sm: sweep failed: {e}"),
    }
}

fn stopped() -> Result<(), Error> {
    println!("sm: stopped");
    Ok(())
}
