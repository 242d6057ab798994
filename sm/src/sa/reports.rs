//! Reports to the InformInfo subscribers (IBA 13.4.8.3, 15.4.9): the
//! notices of the SA's own events, traps 64 and 65 (a port's GID came into
//! or went out of service, between two sweeps) and 66 and 67 (a multicast
//! group created or deleted), each sent as a SubnAdmReport to every
//! subscription that matches it (as OpenSM's `match_notice_to_inf_rec`
//! matches), and sent again until the subscriber answers ReportResp.

use std::collections::BTreeSet;
use std::time::Duration;

use rdma::mad::{class, Attribute, Notice};
use rdma::umad::{Address, AsyncAgent, AsyncPort, Registration};
use tokio::sync::mpsc;

use super::*;

/// How long a Report waits for its ReportResp, and how many times it is
/// sent at most.
const REPORT_TIMEOUT: Duration = Duration::from_millis(500);
const REPORT_SENDS: u32 = 4;
/// How often the subnet's end ports are compared with those reported
/// last, for traps 64 and 65.
const GID_POLL: Duration = Duration::from_millis(250);

/// One Report to send: the subscriber's address and the notice.
type Job = (Address, [u8; 80]);

/// The sender of Reports: a task with an agent of its own (their
/// ReportResps are responses to it), fed by the SA's handler.
#[derive(Clone, Debug)]
pub struct Reporter {
    tx: mpsc::UnboundedSender<Job>,
}

impl Reporter {
    /// Registers the reporting agent on `port` and starts the tasks that
    /// send Reports and watch `subnet` for ports come and gone (call inside
    /// a tokio runtime).
    pub fn start(port: &AsyncPort, subnet: Arc<RwLock<Subnet>>) -> rdma::umad::Result<Reporter> {
        let agent = Arc::new(port.register(&Registration::new(class::SUBN_ADM, 2))?);
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        tokio::spawn(async move {
            while let Some((addr, notice)) = rx.recv().await {
                tokio::spawn(send_report(agent.clone(), addr, notice));
            }
        });
        let me = Reporter { tx };
        let watcher = me.clone();
        tokio::spawn(async move {
            let mut known: Option<BTreeSet<u64>> = None;
            loop {
                tokio::time::sleep(GID_POLL).await;
                if watcher.tx.is_closed() {
                    return;
                }
                let s = lock_r(&subnet);
                if s.sm_lid == 0 {
                    continue;
                }
                let now: BTreeSet<u64> = s.end_ports.values().map(|&(_, _, g)| g).collect();
                if let Some(before) = &known {
                    for &g in now.difference(before) {
                        watcher.notify(&s, Trap::GidInService(Gid::from_parts(SUBNET_PREFIX, g)));
                    }
                    for &g in before.difference(&now) {
                        watcher
                            .notify(&s, Trap::GidOutOfService(Gid::from_parts(SUBNET_PREFIX, g)));
                    }
                }
                known = Some(now);
            }
        });
        Ok(me)
    }

    /// Reports `trap`, issued by the SM's port, to every subscription of
    /// `s` that matches it.
    pub(super) fn notify(&self, s: &Subnet, trap: Trap) {
        for (addr, notice) in reports(s, trap) {
            let _ = self.tx.send((addr, notice));
        }
    }
}

/// The Reports of `trap` to the subscriptions of `s` that match it: each
/// one's address (the subscriber's LID, its QPN) and the Notice with its
/// IssuerGID (80 bytes), issued by the SM's port as a generic notice of
/// type subnet management from the class manager (as OpenSM issues them).
pub(super) fn reports(s: &Subnet, trap: Trap) -> Vec<Job> {
    let issuer_guid = end_port(s, s.sm_lid).map_or(0, |(_, _, g)| g);
    let issuer = Gid::from_parts(SUBNET_PREFIX, issuer_guid);
    let notice = Notice::generic(3, Notice::PRODUCER_SM, s.sm_lid, &trap);
    let mut bytes = [0u8; 80];
    if notice.encode_into(&mut bytes[..64]).is_err() {
        return Vec::new();
    }
    bytes[64..].copy_from_slice(&issuer.0);
    s.groups
        .subscriptions
        .iter()
        .filter(|(_, ii)| matches(ii, &notice, issuer))
        .map(|&(lid, ii)| {
            let mut addr = Address::gsi_lid(lid);
            if ii.qpn != 0 {
                addr.qpn = ii.qpn;
            }
            (addr, bytes)
        })
        .collect()
}

/// Whether subscription `ii` wants `notice` of `issuer`: its GID if not
/// zero (else its LID range unless it begins at 0xFFFF), IsGeneric, Type
/// and TrapNumber or DeviceID unless 0xFFFF, ProducerType or VendorID
/// unless 0xFFFFFF.
pub(super) fn matches(ii: &InformInfo, notice: &Notice, issuer: Gid) -> bool {
    if ii.gid != Gid::default() {
        if ii.gid != issuer {
            return false;
        }
    } else if ii.lid_range_begin != 0xffff
        && !(ii.lid_range_begin..=ii.lid_range_end).contains(&notice.issuer_lid)
    {
        return false;
    }
    ii.is_generic == notice.is_generic
        && (ii.trap_type == 0xffff || ii.trap_type == u16::from(notice.notice_type))
        && (ii.trap_number == 0xffff || ii.trap_number == notice.trap_number_or_device_id)
        && (ii.producer_type == 0xff_ffff || ii.producer_type == notice.producer_type_or_vendor_id)
}

/// Sends one Report until its ReportResp comes (at most
/// [`REPORT_SENDS`] times, the same TID each time).
async fn send_report(agent: Arc<AsyncAgent>, addr: Address, notice: [u8; 80]) {
    let mut mad = Mad::new(&MadHeader {
        base_version: 1,
        mgmt_class: class::SUBN_ADM,
        class_version: 2,
        method: Method::REPORT,
        status: Status::default(),
        class_specific: 0,
        tid: agent.agent().next_tid(),
        attr_id: rdma::mad::attr_id::NOTICE,
        reserved: 0,
        attr_mod: 0,
    });
    let off = mad.data_offset();
    mad.as_bytes_mut()[off..off + 80].copy_from_slice(&notice);
    for _ in 0..REPORT_SENDS {
        match agent.request(&mad, &addr, REPORT_TIMEOUT, 0).await {
            Ok(r) if r.mad.header().method == Method::REPORT_RESP => return,
            Ok(_) | Err(_) => {}
        }
    }
    tracing::warn!("no ReportResp from LID {} to a Report", addr.lid);
}
