//! The SM's main loop: the port, its agents, the SA, and the sweeps.

use std::sync::{Arc, RwLock};

use rdma::mad::{class, Method, SmInfo};
use rdma::umad::{AsyncAgent, AsyncPort, IsSm, Port, Registration};

use crate::election::{self, Control, Outcome, Remote};
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
///
/// The SM starts DISCOVERING, then is MASTER or STANDBY by priority and
/// GUID against the other SMs of the subnet (IBA 14.4); a standby takes over
/// when the master stops answering or hands over.
pub async fn run(config: Config) -> Result<(), Error> {
    let lids = crate::subnet::Lids::with_lmc(config.lmc)
        .ok_or_else(|| format!("LMC {} is above {}", config.lmc, crate::subnet::MAX_LMC))?;
    let (ca, port_num) = sm_port(&config)?;
    tracing::info!("running on {ca} port {port_num}");
    let port = AsyncPort::new(Port::open(&ca, port_num)?)?;
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
    let subnet = Arc::new(RwLock::new(Subnet {
        groups: crate::groups::Groups::for_partitions(&config.partitions),
        ..Subnet::default()
    }));
    let sm_info = Arc::new(RwLock::new(SmInfo {
        guid: info.port_guid,
        sm_key: config.sm_key,
        act_count: 0,
        priority: config.priority & 0xf,
        sm_state: SmInfo::DISCOVERING,
    }));
    let smi_dr = Arc::new(smi_dr);
    let smi_lid = Arc::new(smi_lid);
    let (controls_tx, controls) = tokio::sync::mpsc::unbounded_channel();
    let shared = smi::Shared {
        sm_info: sm_info.clone(),
        m_key: Arc::new(RwLock::new((0, 0))),
        traps: Arc::new(tokio::sync::Notify::new()),
        controls: controls_tx,
    };
    tokio::spawn(smi::serve_smi(smi_dr.clone(), shared.clone()));
    tokio::spawn(smi::serve_smi(smi_lid.clone(), shared.clone()));
    let mcast = Arc::new(tokio::sync::Notify::new());
    // The SA answers on the port's reader, as each request is read.
    let reports = sa::Reporter::start(&port, subnet.clone())?;
    let _sa = port.register_responder(
        &sa_reg,
        sa::responder(subnet.clone(), mcast.clone(), reports),
    )?;
    // The SM role of the port (IsSM in its CapabilityMask) once every
    // agent of the SMI and the SA is there: other SMs send SMInfo to a port
    // that has it, and umad2sim ends a process that receives a MAD of a
    // class it has no agent for. Another SM holding it is an error, not a
    // wait.
    let _is_sm = IsSm::try_acquire(&ca, port_num)
        .map_err(|e| format!("another SM holds {ca}/{port_num}: {e}"))?;
    let mut sm = Sm::new(
        smi_dr.clone(),
        subnet,
        sm_info,
        config.routing.clone(),
        config.roots.clone(),
        config.max_wire_smps,
    );
    sm.partitions = config.partitions.clone();
    *sm.lids_mut() = lids;
    if let Some(dir) = std::env::var_os("OSM_CACHE_DIR") {
        let path = std::path::Path::new(&dir).join("guid2lid");
        match std::fs::read_to_string(&path) {
            Ok(text) => match state::parse_guid2lid(&text) {
                Ok(v) => {
                    tracing::info!("{}: {} LIDs of an earlier run", path.display(), v.len());
                    sm.lids_mut().remember(v);
                }
                Err(e) => tracing::warn!("{}: {e}; not used", path.display()),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("{}: {e}", path.display()),
        }
    }
    let port_num = u8::try_from(port_num).map_err(|_| format!("port {port_num}"))?;
    match election::own_port_info(&smi_dr, port_num).await {
        Ok(pi) => *write(&shared.m_key) = (pi.m_key, pi.m_key_protect_bits),
        Err(e) => tracing::warn!("our own PortInfo: {e}"),
    }
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut m = Machine {
        sm,
        smi: smi_dr,
        smi_lid,
        shared,
        controls,
        config,
        port_num,
        first: true,
        term,
        mcast,
        master: None,
        node_type: 1,
        told: None,
    };
    loop {
        let flow = match m.state() {
            SmInfo::DISCOVERING => m.discovering().await,
            SmInfo::STANDBY => m.standby().await,
            SmInfo::MASTER => m.master().await,
            _ => m.not_active().await,
        };
        if let Flow::Stop = flow {
            return stopped();
        }
    }
}

/// Whether the SM goes on.
enum Flow {
    Go,
    Stop,
}

/// What ended a wait.
enum Wake {
    Timeout,
    Trap,
    Control(Control, SmInfo),
    Stop,
}

/// The SM's state machine and what it drives.
struct Machine {
    sm: Sm,
    smi: Arc<AsyncAgent>,
    smi_lid: Arc<AsyncAgent>,
    shared: smi::Shared,
    controls: tokio::sync::mpsc::UnboundedReceiver<(Control, SmInfo)>,
    config: Config,
    port_num: u8,
    /// No heavy sweep has brought the subnet up yet.
    first: bool,
    term: tokio::signal::unix::Signal,
    mcast: Arc<tokio::sync::Notify>,
    /// The SM a standby polls.
    master: Option<Remote>,
    /// Our node's type (NodeInfo), for trap 144.
    node_type: u8,
    /// When we last sent the master trap 144.
    told: Option<tokio::time::Instant>,
}

/// The least time between two traps 144 to a worse master.
const REMIND_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

fn state_name(s: u8) -> &'static str {
    match s {
        SmInfo::NOT_ACTIVE => "NOT-ACTIVE",
        SmInfo::DISCOVERING => "DISCOVERING",
        SmInfo::STANDBY => "STANDBY",
        SmInfo::MASTER => "MASTER",
        _ => "?",
    }
}

impl Machine {
    fn info(&self) -> SmInfo {
        *self
            .shared
            .sm_info
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn state(&self) -> u8 {
        self.info().sm_state
    }

    fn set_state(&self, to: u8, why: &str) {
        let mut i = write(&self.shared.sm_info);
        if i.sm_state != to {
            tracing::info!(
                "SM state {} -> {}: {why}",
                state_name(i.sm_state),
                state_name(to)
            );
            i.sm_state = to;
        }
    }

    /// Waits until `until`, a trap, an SMInfo control or a signal; as
    /// master, programs the multicast groups as they change meanwhile.
    async fn wait(&mut self, until: tokio::time::Instant) -> Wake {
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return Wake::Timeout,
                _ = self.mcast.notified() => {
                    if self.state() == SmInfo::MASTER {
                        let n = self.sm.program_multicast().await;
                        tracing::info!("multicast groups changed: {n} MFT blocks written");
                    }
                }
                _ = self.shared.traps.notified() => return Wake::Trap,
                c = self.controls.recv() => match c {
                    Some((c, from)) => return Wake::Control(c, from),
                    None => return Wake::Stop,
                },
                _ = tokio::signal::ctrl_c() => return Wake::Stop,
                _ = self.term.recv() => return Wake::Stop,
            }
        }
    }

    /// Discovery, then the other SMs decide: STANDBY under a master or a
    /// better SM, else MASTER.
    async fn discovering(&mut self) -> Flow {
        let d = match self.sm.discover_subnet().await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!("discovery failed: {e}");
                let until = tokio::time::Instant::now() + self.config.sweep;
                return match self.wait(until).await {
                    Wake::Stop => Flow::Stop,
                    _ => Flow::Go,
                };
            }
        };
        let own = self.info();
        let s = &d.subnet;
        let remotes = election::survey(&self.smi, election::sm_ports(s, own.guid), &own).await;
        // A HANDOVER meanwhile: discover again (the sender is standby now).
        if let Ok((Control::Handover, from)) = self.controls.try_recv() {
            tracing::info!("HANDOVER from {:#x} while discovering", from.guid);
            return Flow::Go;
        }
        match election::after_discovery(&own, &remotes) {
            Outcome::Master => {
                self.set_state(SmInfo::MASTER, "no master and no better SM");
                self.sm.reregister = true;
                self.sm.forget_tables();
                self.sm.adopt(d);
            }
            Outcome::Standby(r) => {
                let why = format!(
                    "SM {:#x} (priority {}, {}) at LID {}",
                    r.info.guid,
                    r.info.priority,
                    state_name(r.info.sm_state),
                    r.lid
                );
                self.set_state(SmInfo::STANDBY, &why);
                if let Some(ni) = s.sm_node.and_then(|n| s.node_info.get(&n)) {
                    self.node_type = ni.node_type;
                }
                self.tell_master(r.lid).await;
                self.master = Some(r);
            }
        }
        Flow::Go
    }

    /// Trap 144 to the master at `lid` (so that it finds us and hands over
    /// if we are better), as OpenSM's standby sends.
    async fn tell_master(&mut self, lid: u16) {
        self.told = Some(tokio::time::Instant::now());
        let node_type = self.node_type;
        let sent = match election::own_port_info(&self.smi, self.port_num).await {
            Ok(pi) if pi.lid != 0 && lid != 0 => {
                election::send_trap144(&self.smi_lid, lid, pi.lid, pi.capability_mask, node_type)
            }
            Ok(_) => Err("no LID yet".into()),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            tracing::debug!("trap 144 to the master: {e}");
        }
    }

    /// Polls the master every [`Config::sminfo_polling`]; DISCOVERING once
    /// it missed [`Config::polling_retries`] polls in a row, MASTER on a
    /// HANDOVER.
    async fn standby(&mut self) -> Flow {
        let mut missed = 0;
        loop {
            let until = tokio::time::Instant::now() + self.config.sminfo_polling;
            match self.wait(until).await {
                Wake::Stop => return Flow::Stop,
                Wake::Trap => {}
                Wake::Control(Control::Handover, from) => {
                    // ACKNOWLEDGE while still standby (as the old master
                    // checks), then master.
                    let own = self.info();
                    if let Some(m) = self.master.as_ref().filter(|m| m.info.guid == from.guid) {
                        let ack =
                            election::sm_info(&self.smi, &m.path, Some(Control::Acknowledge), &own);
                        if let Err(e) = ack.await {
                            tracing::info!("ACKNOWLEDGE to {:#x}: {e}", from.guid);
                        }
                    }
                    self.set_state(SmInfo::MASTER, &format!("HANDOVER from {:#x}", from.guid));
                    self.sm.reregister = true;
                    self.sm.forget_tables();
                    self.master = None;
                    return Flow::Go;
                }
                Wake::Control(Control::Discover, from) => {
                    self.set_state(
                        SmInfo::DISCOVERING,
                        &format!("DISCOVER from {:#x}", from.guid),
                    );
                    return Flow::Go;
                }
                Wake::Control(Control::Disable, from) => {
                    self.set_state(
                        SmInfo::NOT_ACTIVE,
                        &format!("DISABLE from {:#x}", from.guid),
                    );
                    return Flow::Go;
                }
                Wake::Control(_, _) => {}
                Wake::Timeout => {
                    let Some(m) = self.master.clone() else {
                        self.set_state(SmInfo::DISCOVERING, "no master to poll");
                        return Flow::Go;
                    };
                    let own = self.info();
                    let alive = match election::sm_info(&self.smi, &m.path, None, &own).await {
                        Ok(i) if i.sm_state == SmInfo::MASTER => {
                            // A worse master: remind it of us, at most once
                            // per OpenSM's default poll (each trap costs it
                            // a heavy sweep).
                            let due = self.told.is_none_or(|t| t.elapsed() >= REMIND_EVERY);
                            if !election::is_higher(&i, &own) && due {
                                self.tell_master(m.lid).await;
                            }
                            true
                        }
                        Ok(i) => {
                            matches!(i.sm_state, SmInfo::DISCOVERING | SmInfo::STANDBY)
                                && election::is_higher(&i, &own)
                        }
                        Err(e) => {
                            tracing::debug!("polling {:#x}: {e}", m.info.guid);
                            false
                        }
                    };
                    if alive {
                        missed = 0;
                        continue;
                    }
                    missed += 1;
                    tracing::info!(
                        "master {:#x} missed {missed} of {} polls",
                        m.info.guid,
                        self.config.polling_retries
                    );
                    if missed >= self.config.polling_retries.max(1) {
                        self.master = None;
                        self.set_state(
                            SmInfo::DISCOVERING,
                            &format!("master {:#x} stopped answering", m.info.guid),
                        );
                        return Flow::Go;
                    }
                }
            }
        }
    }

    /// NOT-ACTIVE until a STANDBY control: then standby under its sender
    /// (found by a discovery), or discovering when it is not found.
    async fn not_active(&mut self) -> Flow {
        loop {
            let until = tokio::time::Instant::now() + self.config.sweep;
            match self.wait(until).await {
                Wake::Stop => return Flow::Stop,
                Wake::Control(Control::Standby, from) => {
                    let own = self.info();
                    let found = match self.sm.discover_subnet().await {
                        Ok(d) => election::sm_ports(&d.subnet, own.guid)
                            .into_iter()
                            .find(|(g, _, _)| *g == from.guid),
                        Err(_) => None,
                    };
                    match found {
                        Some((_, path, lid)) => {
                            self.master = Some(Remote {
                                info: from,
                                path,
                                lid,
                            });
                            self.set_state(
                                SmInfo::STANDBY,
                                &format!("STANDBY from {:#x}", from.guid),
                            );
                        }
                        None => self.set_state(SmInfo::DISCOVERING, "STANDBY from an SM not found"),
                    }
                    return Flow::Go;
                }
                _ => {}
            }
        }
    }

    /// The master: a heavy sweep, then a light one each period and a heavy
    /// one when the light one finds a change or a trap arrives; after each
    /// heavy sweep the other SMs are asked, and the master hands over to a
    /// better standby one; while a better one is still DISCOVERING, they
    /// are asked each period until it is STANDBY.
    async fn master(&mut self) -> Flow {
        let mut heavy = true;
        let mut ask = false;
        loop {
            if !heavy {
                if let Some(why) = self.sm.light_sweep().await {
                    tracing::info!("light sweep: {why}: sweeping");
                    heavy = true;
                }
            }
            if heavy {
                heavy = false;
                ask = true;
                sweep_once(&mut self.sm, &mut self.first).await;
                if self.first {
                    // It failed before bringing the subnet up: again next period.
                    heavy = true;
                } else if self.config.once {
                    return Flow::Stop;
                }
            }
            if ask {
                match self.hand_over().await {
                    Asked::HandedOver => return Flow::Go,
                    Asked::BetterDiscovering => {}
                    Asked::NoBetter => ask = false,
                }
            }
            let until = tokio::time::Instant::now() + self.config.sweep;
            match self.wait(until).await {
                Wake::Stop => {
                    self.relinquish().await;
                    return Flow::Stop;
                }
                Wake::Timeout => {}
                Wake::Trap => {
                    tracing::info!("a trap arrived: sweeping");
                    heavy = true;
                }
                Wake::Control(Control::Handover, from) => {
                    tracing::info!("HANDOVER from {:#x} as master: sweeping", from.guid);
                    self.sm.reregister = true;
                    self.sm.forget_tables();
                    heavy = true;
                }
                Wake::Control(_, _) => {}
            }
        }
    }

    /// A master that stops hands over to the best other active SM, if
    /// any answers, so that the subnet keeps a master without waiting for
    /// a standby's polls to fail.
    async fn relinquish(&mut self) {
        let own = self.info();
        let ports = election::sm_ports(&state::lock_r(&self.sm.subnet()), own.guid);
        let remotes = election::survey(&self.smi, ports, &own).await;
        let lowest = SmInfo {
            priority: 0,
            guid: u64::MAX,
            ..own
        };
        let Some(r) = election::handover_to(&lowest, &remotes) else {
            return;
        };
        match election::sm_info(&self.smi, &r.path, Some(Control::Handover), &own).await {
            Ok(_) => tracing::info!("stopping: handed over to {:#x}", r.info.guid),
            Err(e) => tracing::warn!("stopping: HANDOVER to {:#x}: {e}", r.info.guid),
        }
    }

    /// Asks the other SMs of the subnet; hands over to the best better
    /// standby one (HANDOVER, and STANDBY polling it).
    async fn hand_over(&mut self) -> Asked {
        let own = self.info();
        let ports = election::sm_ports(&state::lock_r(&self.sm.subnet()), own.guid);
        if ports.is_empty() {
            return Asked::NoBetter;
        }
        let remotes = election::survey(&self.smi, ports, &own).await;
        let Some(r) = election::handover_to(&own, &remotes).cloned() else {
            let discovering = remotes.iter().any(|r| {
                r.info.sm_state == SmInfo::DISCOVERING && election::is_higher(&r.info, &own)
            });
            return if discovering {
                Asked::BetterDiscovering
            } else {
                Asked::NoBetter
            };
        };
        // Sent as master (the receiver checks); standby once it took it.
        let own = self.info();
        match election::sm_info(&self.smi, &r.path, Some(Control::Handover), &own).await {
            Ok(_) => {
                let why = format!(
                    "handed over to {:#x} (priority {})",
                    r.info.guid, r.info.priority
                );
                self.set_state(SmInfo::STANDBY, &why);
                self.master = Some(r);
                Asked::HandedOver
            }
            Err(e) => {
                tracing::warn!("HANDOVER to {:#x}: {e}", r.info.guid);
                Asked::NoBetter
            }
        }
    }
}

/// What a master learnt from asking the other SMs.
enum Asked {
    /// It handed over and is standby.
    HandedOver,
    /// A better SM is still discovering: ask again next period.
    BetterDiscovering,
    /// No better SM (or the HANDOVER failed): ask after the next heavy
    /// sweep.
    NoBetter,
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
