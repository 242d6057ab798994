//! The SM state machine's election (IBA 14.4, as OpenSM implements it in
//! osm_sminfo_rcv.c, osm_sm_state_mgr.c and osm_state_mgr.c): which SM is
//! better, which SMInfo Set a state accepts, what a discovering SM becomes
//! and whom a master hands over to (pure functions); and the SMPs between
//! SMs: SMInfo Get and Set along a directed route, and trap 144 to the
//! master.

use std::time::Duration;

use rdma::mad::{attr_id, Attribute, Mad, Method, PortInfo, SmInfo};
use rdma::umad::{Address, AsyncAgent};

use crate::state::Subnet;
use crate::subnet::NodeKind;
use crate::Error;

/// PortInfo CapabilityMask bit: an SM runs on the port.
pub const IS_SM: u32 = 1 << 1;

/// Per attempt, as the sweep's SMPs.
const SMP_TIMEOUT: Duration = Duration::from_millis(200);
const SMP_RETRIES: u32 = 3;

/// The control of an SMInfo Set, its attribute modifier (IBA 14.2.5.13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// 1: the receiver becomes master.
    Handover,
    /// 2: the receiver of a handover took it.
    Acknowledge,
    /// 3: the receiver stops (NOT-ACTIVE).
    Disable,
    /// 4: the receiver (NOT-ACTIVE) becomes standby.
    Standby,
    /// 5: the receiver (standby) discovers again.
    Discover,
}

impl Control {
    /// The control of an attribute modifier; `None` for any other.
    pub fn from_attr_mod(m: u32) -> Option<Control> {
        Some(match m {
            1 => Control::Handover,
            2 => Control::Acknowledge,
            3 => Control::Disable,
            4 => Control::Standby,
            5 => Control::Discover,
            _ => return None,
        })
    }

    /// Its attribute modifier.
    pub fn attr_mod(self) -> u32 {
        match self {
            Control::Handover => 1,
            Control::Acknowledge => 2,
            Control::Disable => 3,
            Control::Standby => 4,
            Control::Discover => 5,
        }
    }
}

/// Whether SM `a` is better than SM `b`: a higher priority, or on a tie
/// a lower port GUID.
pub fn is_higher(a: &SmInfo, b: &SmInfo) -> bool {
    (a.priority & 0xf, std::cmp::Reverse(a.guid)) > (b.priority & 0xf, std::cmp::Reverse(b.guid))
}

/// Whether an SM in state `own` takes `ctl` from an SM in state `from`
/// (the SMInfo of the Set): ACKNOWLEDGE only from a standby, the others
/// only from a master; and then HANDOVER in DISCOVERING, STANDBY or
/// MASTER, DISCOVER, DISABLE and ACKNOWLEDGE in STANDBY, STANDBY in
/// NOT-ACTIVE.
pub fn legal(own: u8, ctl: Control, from: u8) -> bool {
    let sender = match ctl {
        Control::Acknowledge => SmInfo::STANDBY,
        _ => SmInfo::MASTER,
    };
    if from != sender {
        return false;
    }
    matches!(
        (own, ctl),
        (SmInfo::DISCOVERING, Control::Handover)
            | (SmInfo::STANDBY, Control::Handover)
            | (SmInfo::STANDBY, Control::Acknowledge)
            | (SmInfo::STANDBY, Control::Discover)
            | (SmInfo::STANDBY, Control::Disable)
            | (SmInfo::NOT_ACTIVE, Control::Standby)
            | (SmInfo::MASTER, Control::Handover)
    )
}

/// The SM_Key shown in the answer to an SMInfo Get (IBA 14.2.5.13, as
/// OpenSM): the key when the Get passes the port's M_Key check, 0 when it
/// fails with protection bits 1, and no answer (`None`) when it fails with
/// higher protection bits. A port without an M_Key passes every Get.
pub fn shown_sm_key(sm_key: u64, port_m_key: u64, protect_bits: u8, req_m_key: u64) -> Option<u64> {
    if port_m_key == 0 || port_m_key == req_m_key {
        Some(sm_key)
    } else if protect_bits <= 1 {
        Some(0)
    } else {
        None
    }
}

/// Another SM: its SMInfo, and how to reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Its SMInfo as it answered.
    pub info: SmInfo,
    /// The directed route to its node.
    pub path: Vec<u8>,
    /// Its port's LID (0: none yet).
    pub lid: u16,
}

/// What a discovering SM becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No master and no better SM: master.
    Master,
    /// Standby, polling this SM (the master, else the best better one).
    Standby(Remote),
}

/// What an SM that finished discovery becomes, given the other SMs
/// found: standby under a master if there is one, else under the best
/// discovering or standby SM better than itself, else master. Not-active
/// SMs do not count.
pub fn after_discovery(own: &SmInfo, remotes: &[Remote]) -> Outcome {
    if let Some(m) = remotes.iter().find(|r| r.info.sm_state == SmInfo::MASTER) {
        return Outcome::Standby(m.clone());
    }
    remotes
        .iter()
        .filter(|r| {
            matches!(r.info.sm_state, SmInfo::DISCOVERING | SmInfo::STANDBY)
                && is_higher(&r.info, own)
        })
        .fold(None::<&Remote>, |best, r| match best {
            Some(b) if !is_higher(&r.info, &b.info) => Some(b),
            _ => Some(r),
        })
        .map_or(Outcome::Master, |r| Outcome::Standby(r.clone()))
}

/// Whom a master hands over to: the best STANDBY SM better than itself
/// (IBA 14.4.1: a master hands over to a standby SM of higher priority). A
/// better SM still DISCOVERING is not one: it finds this master when its
/// discovery ends and is standby under it, and a HANDOVER meanwhile would
/// leave the subnet without a master (the receiver is not standby; the
/// sender is).
pub fn handover_to<'a>(own: &SmInfo, remotes: &'a [Remote]) -> Option<&'a Remote> {
    remotes
        .iter()
        .filter(|r| r.info.sm_state == SmInfo::STANDBY && is_higher(&r.info, own))
        .fold(None, |best: Option<&Remote>, r| match best {
            Some(b) if !is_higher(&r.info, &b.info) => Some(b),
            _ => Some(r),
        })
}

/// The ports of a discovered subnet whose CapabilityMask has IsSM, but
/// the one with GUID `own`: (port GUID, directed route to the node, LID).
pub fn sm_ports(s: &Subnet, own: u64) -> Vec<(u64, Vec<u8>, u16)> {
    let mut v: Vec<_> = s
        .port_info
        .iter()
        .filter(|(_, pi)| pi.capability_mask & IS_SM != 0)
        .filter_map(|(&(id, p), pi)| {
            let n = s.topo.node(id);
            let end = match n.kind {
                NodeKind::Switch => p == 0,
                _ => p != 0,
            };
            let guid = n.port_guid(p);
            if !end || guid == own {
                return None;
            }
            Some((guid, s.paths.get(&id)?.clone(), pi.lid))
        })
        .collect();
    v.sort();
    v
}

/// An SMInfo SMP along `path`: Get (`ctl` none) or Set of `ctl` with
/// `own` as data; the SMInfo answered.
pub async fn sm_info(
    smi: &AsyncAgent,
    path: &[u8],
    ctl: Option<Control>,
    own: &SmInfo,
) -> Result<SmInfo, Error> {
    let tid = smi.agent().next_tid();
    let (method, attr_mod) = match ctl {
        None => (Method::GET, 0),
        Some(c) => (Method::SET, c.attr_mod()),
    };
    let mut m = Mad::smp_directed(method, attr_id::SM_INFO, attr_mod, tid, 0, path)?;
    if ctl.is_some() {
        m.set_attribute(own)?;
    }
    let r = smi
        .request(&m, &Address::smi_lid(0xffff), SMP_TIMEOUT, SMP_RETRIES)
        .await?;
    let st = r.mad.status_without_direction();
    if !st.is_ok() {
        return Err(format!("SMInfo {method:?}/{attr_mod} along {path:?}: status {st:?}").into());
    }
    Ok(r.mad.attribute::<SmInfo>()?)
}

/// The other SMs at `ports` (of [`sm_ports`]), as they answer SMInfo
/// Get; those that do not answer, answer for another port, or carry an
/// SM_Key that is neither 0 nor `own`'s (when `own`'s is not 0) are left
/// out.
pub async fn survey(
    smi: &AsyncAgent,
    ports: Vec<(u64, Vec<u8>, u16)>,
    own: &SmInfo,
) -> Vec<Remote> {
    let mut out = Vec::new();
    for (guid, path, lid) in ports {
        match sm_info(smi, &path, None, own).await {
            Ok(info) if info.guid != guid => {
                tracing::warn!("SMInfo of port {guid:#x} names port {:#x}", info.guid)
            }
            Ok(info) if own.sm_key != 0 && info.sm_key != 0 && info.sm_key != own.sm_key => {
                tracing::warn!("SM {guid:#x} has another SM_Key: ignored")
            }
            Ok(info) => out.push(Remote { info, path, lid }),
            Err(e) => tracing::debug!("SMInfo of port {guid:#x}: {e}"),
        }
    }
    out
}

/// Our own PortInfo (M_Key, LID), by a directed route of no hop.
pub async fn own_port_info(smi: &AsyncAgent, port: u8) -> Result<PortInfo, Error> {
    let tid = smi.agent().next_tid();
    let m = Mad::smp_directed(
        Method::GET,
        PortInfo::ID,
        PortInfo::attr_mod(port),
        tid,
        0,
        &[0],
    )?;
    let r = smi
        .request(&m, &Address::smi_lid(0xffff), SMP_TIMEOUT, SMP_RETRIES)
        .await?;
    Ok(r.mad.attribute::<PortInfo>()?)
}

/// Trap 144 (local changes, IBA 14.2.5.1) from our port (LID `lid`,
/// CapabilityMask `cap`, node type `node_type`) to the master at
/// `master_lid`, LID-routed: the master sweeps and finds us (and hands
/// over when we are better), as OpenSM's standby tells its master.
pub fn send_trap144(
    smi_lid: &AsyncAgent,
    master_lid: u16,
    lid: u16,
    cap: u32,
    node_type: u8,
) -> Result<(), Error> {
    let tid = smi_lid.agent().next_tid();
    let mut m = Mad::smp(Method::TRAP, attr_id::NOTICE, 0, tid, 0);
    let d = m.data_mut();
    d[0] = 0x80 | 4; // generic, informational
    d[1..4].copy_from_slice(&u32::from(node_type).to_be_bytes()[1..]);
    d[4..6].copy_from_slice(&144u16.to_be_bytes());
    d[6..8].copy_from_slice(&lid.to_be_bytes());
    // Data details: LIDADDR, then the new CapabilityMask.
    d[12..14].copy_from_slice(&lid.to_be_bytes());
    d[16..20].copy_from_slice(&cap.to_be_bytes());
    smi_lid.send(&m, &Address::smi_lid(master_lid))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sm(guid: u64, priority: u8, state: u8) -> SmInfo {
        SmInfo {
            guid,
            sm_key: 1,
            act_count: 0,
            priority,
            sm_state: state,
        }
    }

    fn remote(guid: u64, priority: u8, state: u8) -> Remote {
        Remote {
            info: sm(guid, priority, state),
            path: vec![0, guid as u8],
            lid: guid as u16,
        }
    }

    #[test]
    fn priority_wins_then_the_lower_guid() {
        assert!(is_higher(&sm(9, 2, 1), &sm(1, 1, 1)));
        assert!(!is_higher(&sm(1, 1, 1), &sm(9, 2, 1)));
        assert!(is_higher(&sm(1, 3, 1), &sm(2, 3, 1)));
        assert!(!is_higher(&sm(2, 3, 1), &sm(1, 3, 1)));
        // Not better than itself; priority bits above 4 do not count.
        assert!(!is_higher(&sm(5, 3, 1), &sm(5, 3, 1)));
        assert!(!is_higher(&sm(5, 0x13, 1), &sm(4, 3, 1)));
    }

    #[test]
    fn a_discovering_sm_is_standby_under_a_master_or_a_better_sm() {
        let own = sm(5, 5, SmInfo::DISCOVERING);
        assert_eq!(after_discovery(&own, &[]), Outcome::Master);
        // A master, even a worse one, keeps the subnet (it hands over).
        let m = remote(9, 0, SmInfo::MASTER);
        let worse = remote(1, 1, SmInfo::STANDBY);
        assert_eq!(
            after_discovery(&own, &[worse.clone(), m.clone()]),
            Outcome::Standby(m)
        );
        // No master: the best of the better ones.
        let better = remote(7, 6, SmInfo::DISCOVERING);
        let best = remote(8, 9, SmInfo::STANDBY);
        let inactive = remote(2, 15, SmInfo::NOT_ACTIVE);
        assert_eq!(
            after_discovery(&own, &[better.clone(), inactive.clone(), best.clone()]),
            Outcome::Standby(best)
        );
        assert_eq!(after_discovery(&own, &[worse, inactive]), Outcome::Master);
        // A tie goes to the lower GUID.
        let tie_low = remote(4, 5, SmInfo::STANDBY);
        let tie_high = remote(6, 5, SmInfo::STANDBY);
        assert_eq!(
            after_discovery(&own, &[tie_high.clone(), tie_low.clone()]),
            Outcome::Standby(tie_low)
        );
        assert_eq!(after_discovery(&own, &[tie_high]), Outcome::Master);
    }

    #[test]
    fn a_master_hands_over_to_the_best_standby_better_sm() {
        let own = sm(5, 5, SmInfo::MASTER);
        let a = remote(7, 6, SmInfo::STANDBY);
        let b = remote(3, 6, SmInfo::STANDBY);
        let off = remote(1, 15, SmInfo::NOT_ACTIVE);
        let worse = remote(2, 4, SmInfo::STANDBY);
        // Better than `b`, but still discovering: not handed to.
        let discovering = remote(9, 14, SmInfo::DISCOVERING);
        assert_eq!(
            handover_to(
                &own,
                &[a.clone(), discovering.clone(), b.clone(), off.clone()]
            ),
            Some(&b)
        );
        assert_eq!(handover_to(&own, &[discovering, worse, off]), None);
        assert_eq!(handover_to(&own, &[]), None);
    }

    #[test]
    fn only_the_transitions_of_the_state_machine_are_legal() {
        use Control::*;
        let (d, s, m, n) = (
            SmInfo::DISCOVERING,
            SmInfo::STANDBY,
            SmInfo::MASTER,
            SmInfo::NOT_ACTIVE,
        );
        for (own, ctl, from, ok) in [
            (s, Handover, m, true),
            (d, Handover, m, true),
            (m, Handover, m, true),
            (n, Handover, m, false),
            (s, Handover, s, false),
            (s, Acknowledge, s, true),
            (s, Acknowledge, m, false),
            (m, Acknowledge, s, false),
            (s, Disable, m, true),
            (m, Disable, m, false),
            (n, Standby, m, true),
            (s, Standby, m, false),
            (s, Discover, m, true),
            (d, Discover, m, false),
            (m, Discover, m, false),
        ] {
            assert_eq!(legal(own, ctl, from), ok, "{own} {ctl:?} from {from}");
        }
        for m in [0, 6, 0xffff_ffff] {
            assert_eq!(Control::from_attr_mod(m), None);
        }
        for c in [Handover, Acknowledge, Disable, Standby, Discover] {
            assert_eq!(Control::from_attr_mod(c.attr_mod()), Some(c));
        }
    }

    #[test]
    fn the_sm_key_is_shown_only_past_the_m_key() {
        assert_eq!(shown_sm_key(7, 0, 0, 0), Some(7));
        assert_eq!(shown_sm_key(7, 0, 3, 99), Some(7));
        assert_eq!(shown_sm_key(7, 5, 1, 5), Some(7));
        assert_eq!(shown_sm_key(7, 5, 1, 6), Some(0));
        assert_eq!(shown_sm_key(7, 5, 0, 6), Some(0));
        assert_eq!(shown_sm_key(7, 5, 2, 6), None);
    }
}
