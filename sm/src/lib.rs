//! A subnet manager and subnet administrator for an InfiniBand fabric, in
//! the manner of OpenSM, over the `rdma` crate's umad ports and MAD codec.
//!
//! It sweeps the fabric with directed-route SMPs, assigns LIDs (2^LMC to
//! each CA port with [`Config::lmc`]), routes by the engines of
//! [`Config::routing`], programs every switch's linear and multicast forwarding
//! tables, brings the ports to Active, answers SMInfo as master, and answers
//! SA queries (NodeRecord, PortInfoRecord, PathRecord, LinkRecord,
//! MCMemberRecord with joins and leaves, ServiceRecord with registrations,
//! leases and removals, InformInfo and InformInfoRecord, P_KeyTableRecord,
//! SMInfoRecord, SwitchInfoRecord, LinearForwardingTableRecord,
//! MulticastForwardingTableRecord, GUIDInfoRecord, SLtoVLMappingTableRecord,
//! VLArbitrationTableRecord, ClassPortInfo). With [`Config::partitions`]
//! (OpenSM's partitions file, [`partitions`]) it writes the ports' P_Key
//! tables and answers paths and groups only within a shared partition.
//!
//! [`run`] is the whole SM on one port, as the `sm` program runs it;
//! [`subnet`] is its model of the fabric in pure Rust (topology, LIDs,
//! routes), usable without a device.
//!
//! The first sweep is heavy (LIDs, routes, tables, port states, from the
//! discovery that made the SM master; that discovery clears no
//! PortStateChange, so the first light sweep brings a second heavy one);
//! then every [`Config::sweep`] a light one reads each switch's SwitchInfo
//! and each CA port's PortInfo, and a heavy sweep follows when a switch
//! reports PortStateChange, a port's state moved or a node stopped
//! answering, SMPs of the last heavy sweep failed, or a port that is up
//! leads to a node the last heavy sweep did not reach, and whenever a trap
//! arrives. Discovery clears each switch's PortStateChange before it reads
//! the switch's ports, so a change after that is seen by the next light
//! sweep; a switch found reset (port 0 without the LID it was given, or
//! back in Init) or out of reach has its tables written whole again. At
//! most [`Config::max_wire_smps`] SMPs are outstanding at once. Each heavy sweep is logged: what
//! it found and changed, and `SUBNET UP` once the first is done. With
//! `OSM_CACHE_DIR` set the LIDs are written there as OpenSM does
//! (`guid2lid`: port GUID, LID, LID).
//!
//! The SM is one of possibly several (IBA 14.4): it starts DISCOVERING,
//! finds the other SMs (ports whose CapabilityMask has IsSM) and becomes
//! STANDBY when one is master or better (higher priority, then lower
//! GUID), MASTER otherwise. A standby polls the master's SMInfo every
//! [`Config::sminfo_polling`] and takes over after
//! [`Config::polling_retries`] missed polls; a master hands over to a
//! better standby. A new master keeps the LIDs the ports have (their
//! PortInfo, then `guid2lid` of `OSM_CACHE_DIR`) and sets ClientReregister
//! on every CA port in its first sweep.

#![warn(missing_docs)]

use std::time::Duration;

mod election;
mod groups;
pub mod partitions;
mod port_mask;
mod rate;
pub mod routing;
mod run;
mod sa;
mod smi;
mod state;
pub mod subnet;
mod sweep;

pub use routing::RoutingEngine;
pub use run::run;

/// An error of the SM: a umad or verbs failure, or a message.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// What an SM runs on and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The port to run on, by its GUID (OpenSM's `-g`); it takes
    /// precedence over [`Config::ca`] and [`Config::port`].
    pub port_guid: Option<u64>,
    /// The CA (`None`: the first).
    pub ca: Option<String>,
    /// The port (`None`: the CA's first; a switch's is 0).
    pub port: Option<u32>,
    /// The time between light sweeps.
    pub sweep: Duration,
    /// Stop once the first sweep has brought the subnet up.
    pub once: bool,
    /// The SM priority in SMInfo (0-15; higher bits are dropped): of two
    /// SMs the higher priority is master, on a tie the lower port GUID.
    pub priority: u8,
    /// The SM_Key of SMInfo (OpenSM's `sm_key`, default 1): other SMs
    /// whose SMInfo carries another non-zero key are ignored, and SMInfo
    /// Sets carrying another are refused.
    pub sm_key: u64,
    /// How often a standby polls the master's SMInfo (OpenSM's
    /// `sminfo_polling_timeout`, 10 s).
    pub sminfo_polling: Duration,
    /// Polls the master may miss in a row before a standby takes over
    /// (OpenSM's `polling_retry_number`, 4).
    pub polling_retries: u32,
    /// The unicast routing engines to try, in order (OpenSM's `-R`).
    pub routing: Vec<RoutingEngine>,
    /// The GUIDs of the roots of up/down routing (OpenSM's `-a` file);
    /// none: the switch in the middle of the subnet.
    pub roots: Vec<u64>,
    /// The most SMPs the sweep has outstanding at once (OpenSM's
    /// `--maxsmps`, default 4: VL15 has no flow control, and switches drop
    /// what they cannot take); 0: no limit.
    pub max_wire_smps: usize,
    /// The partitions (OpenSM's `-P` file, [`partitions::parse`]); the
    /// default: the default partition alone, every end port a full member,
    /// whose P_Key tables the SM leaves as the ports have them.
    pub partitions: partitions::Partitions,
    /// The LID Mask Control (OpenSM's `-l`, 0-7): each CA and router port
    /// gets 2^LMC LIDs, its paths spread over different links by the
    /// routing engines; a switch's port 0 keeps one. Above 7, [`run`]
    /// refuses to start.
    pub lmc: u8,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            port_guid: None,
            ca: None,
            port: None,
            sweep: Duration::from_secs(10),
            once: false,
            priority: 0,
            sm_key: 1,
            sminfo_polling: Duration::from_secs(10),
            polling_retries: 4,
            routing: vec![RoutingEngine::MinHop],
            roots: Vec::new(),
            max_wire_smps: 4,
            partitions: partitions::Partitions::default(),
            lmc: 0,
        }
    }
}
