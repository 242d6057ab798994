//! The SM's main loop: the port, its agents, the SA, and the sweeps.

use std::sync::{Arc, RwLock};

use rdma::mad::{class, Method, SmInfo};
use rdma::umad::{AsyncPort, IsSm, Port, Registration};

use crate::smi;
use crate::state::{self, Subnet};
use crate::sweep::Sm;
use crate::{sa, Config, Error};

/// The CA and port the SM runs on: the one whose port GUID is
/// [`Config::port_guid`], else [`Config::ca`] (or the first CA) and
/// [`Config::port`] (or its first port).
fn sm_port(config: &Config) -> Result<(String, u32), Error> {
    if let Some(guid) = config.port_guid {
        for name in rdma::umad::ca_names()? {
            let ca = rdma::umad::Ca::get(&name)?;
            if let Some(p) = ca.ports.iter().find(|p| p.port_guid == guid) {
                return Ok((name, p.port_num));
            }
        }
        return Err(format!("no local port has GUID {guid:#018x}").into());
    }
    let ca = match &config.ca {
        Some(c) => c.clone(),
        None => rdma::umad::ca_names()?.into_iter().next().ok_or("no CA")?,
    };
    let port_num = match config.port {
        Some(p) => p,
        None => rdma::umad::Ca::get(&ca)?
            .ports
            .first()
            .map(|p| p.port_num)
            .ok_or_else(|| format!("{ca} has no port"))?,
    };
    Ok((ca, port_num))
}

/// Runs the SM and SA on `config`'s port until SIGINT or SIGTERM (or, with
/// [`Config::once`], until the first sweep has brought the subnet up).
pub async fn run(config: Config) -> Result<(), Error> {
    let (ca, port_num) = sm_port(&config)?;
    tracing::info!("running on {ca} port {port_num}");
    let port = AsyncPort::new(Port::open(&ca, port_num)?)?;
    // Another SM holding the port's IsSM is an error, not a wait.
    let _is_sm = IsSm::try_acquire(&ca, port_num)
        .map_err(|e| format!("another SM holds {ca}/{port_num}: {e}"))?;
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
        priority: config.priority & 0xf,
        sm_state: SmInfo::DISCOVERING,
    }));
    let smi_dr = Arc::new(smi_dr);
    let smi_lid = Arc::new(smi_lid);
    let traps = Arc::new(tokio::sync::Notify::new());
    tokio::spawn(smi::serve_smi(
        smi_dr.clone(),
        sm_info.clone(),
        traps.clone(),
    ));
    tokio::spawn(smi::serve_smi(
        smi_lid.clone(),
        sm_info.clone(),
        traps.clone(),
    ));
    let mcast = Arc::new(tokio::sync::Notify::new());
    // The SA answers on the port's reader, as each request is read.
    let reports = sa::Reporter::start(&port, subnet.clone())?;
    let _sa = port.register_responder(
        &sa_reg,
        sa::responder(subnet.clone(), mcast.clone(), reports),
    )?;
    let mut sm = Sm::new(
        smi_dr,
        subnet,
        sm_info,
        config.routing.clone(),
        config.roots.clone(),
    );
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
                    tracing::info!("light sweep: {why}: sweeping");
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
            } else if config.once {
                return Ok(());
            }
        }
        let wake = tokio::time::Instant::now() + config.sweep;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => break,
                _ = mcast.notified() => {
                    let n = sm.program_multicast().await;
                    tracing::info!("multicast groups changed: {n} MFT blocks written");
                    continue;
                }
                _ = traps.notified() => {
                    tracing::info!("a trap arrived: sweeping");
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
                if let Err(e) = std::fs::write(&path, state::guid2lid(&sm.subnet())) {
                    tracing::error!("writing {}: {e}", path.display());
                }
            }
            let mfts = sm.program_multicast().await;
            tracing::info!("sweep: {report}; {mfts} MFT blocks written");
            if *first {
                tracing::info!("SUBNET UP");
                *first = false;
            }
        }
        Err(e) => tracing::error!("sweep failed: {e}"),
    }
}

fn stopped() -> Result<(), Error> {
    tracing::info!("stopped");
    Ok(())
}
