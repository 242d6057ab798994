//! What the sweep does about faults: switches that reset (their tables
//! written whole again), and what the light sweep finds besides the
//! changes switches and ports report (SMPs that failed, ports that lead to
//! nodes the last heavy sweep did not reach).

use rdma::mad::{NodeInfo, PhysPortState, PortInfo, PortState};

use super::wire::get_all;
use super::Sm;
use crate::state::{lock_r, Subnet};
use crate::subnet::NodeKind;

/// Whether a switch whose port 0 reads `port0` has lost what the SM
/// wrote into it since: its management port no longer has the LID the SM
/// gave it (`lid`), or is back in Down or Init (as OpenSM takes a switch
/// whose port 0 is not past Init to need all its tables again).
pub(super) fn was_reset(port0: &PortInfo, lid: Option<u16>) -> bool {
    Some(port0.lid) != lid || matches!(port0.port_state, PortState::Down | PortState::Initialize)
}

impl Sm {
    /// Forgets the tables written into the switches that `s` (just
    /// discovered) shows reset ([`was_reset`]) or does not show at all (a
    /// switch out of reach may come back without its tables): their LFT
    /// and MFT blocks are all written again. How many were reset.
    pub(super) fn forget_reset_switches(&mut self, s: &Subnet) -> usize {
        let mut reset = Vec::new();
        for (id, n) in s.topo.nodes() {
            if n.kind != NodeKind::Switch || !self.written.contains_key(&n.guid) {
                continue;
            }
            let Some(pi) = s.port_info.get(&(id, 0)) else {
                continue;
            };
            if was_reset(pi, self.lids.of(&s.topo, id, 0)) {
                tracing::info!(
                    "switch {:#x} was reset (port 0: LID {}, {}): writing its tables whole",
                    n.guid,
                    pi.lid,
                    pi.port_state
                );
                reset.push(n.guid);
            }
        }
        let present = |guid: &u64| s.topo.find(*guid).is_some() && !reset.contains(guid);
        self.written.retain(|guid, _| present(guid));
        self.mft_written.retain(|(guid, _, _), _| present(guid));
        self.pkey_written.retain(|(guid, _, _), _| present(guid));
        reset.len()
    }

    /// What the light sweep finds besides the switches' PortStateChange
    /// and the CA ports' states: SMPs of the last heavy sweep that failed
    /// (a node or port it may have missed), and ports that the last heavy
    /// sweep read as LinkUp but reached nothing through, where a NodeInfo
    /// Get now gets an answer (a node whose SMPs were lost then). Each a
    /// reason for a heavy sweep.
    pub(super) async fn missed(&self) -> Vec<String> {
        let mut why: Vec<String> = self.resweep.iter().cloned().collect();
        let probes = {
            let s = lock_r(&self.subnet);
            let mut probes = Vec::new();
            for (id, n) in s.topo.nodes() {
                let Some(path) = s.paths.get(&id) else {
                    continue;
                };
                // Switches send out of every port; a CA only out of the
                // SM's own port.
                let ports: Vec<u8> = match n.kind {
                    NodeKind::Switch => (1..=n.num_ports).collect(),
                    _ if Some(id) == s.sm_node => n.end_ports().collect(),
                    _ => Vec::new(),
                };
                for p in ports {
                    let up = s
                        .port_info
                        .get(&(id, p))
                        .is_some_and(|pi| pi.port_physical_state == PhysPortState::LinkUp);
                    if up && s.topo.peer(id, p).is_none() && path.len() < 63 {
                        let mut to = path.clone();
                        to.push(p);
                        probes.push((n.guid, p, to));
                    }
                }
            }
            probes
        };
        let answers = get_all::<NodeInfo>(
            &self.smi,
            probes
                .iter()
                .map(|(_, _, path)| (0, path.clone()))
                .collect(),
        )
        .await;
        for ((guid, p, _), r) in probes.iter().zip(answers) {
            if let Ok(ni) = r {
                why.push(format!(
                    "port {p} of {guid:#x} leads to node {:#x}, not reached by the last heavy sweep",
                    ni.node_guid
                ));
            }
        }
        why
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A switch's port 0 as the SM left it is not reset; without the LID
    /// the SM gave it, or back in Init or Down, it is.
    #[test]
    fn a_switch_is_reset_when_port_0_lost_its_lid_or_state() {
        let left = PortInfo {
            lid: 7,
            port_state: PortState::Active,
            ..PortInfo::default()
        };
        assert!(!was_reset(&left, Some(7)));
        assert!(was_reset(&PortInfo { lid: 0, ..left }, Some(7)));
        assert!(was_reset(&left, Some(8)));
        assert!(was_reset(&left, None));
        for st in [PortState::Down, PortState::Initialize] {
            assert!(was_reset(
                &PortInfo {
                    port_state: st,
                    ..left
                },
                Some(7)
            ));
        }
        assert!(!was_reset(
            &PortInfo {
                port_state: PortState::Armed,
                ..left
            },
            Some(7)
        ));
    }
}
