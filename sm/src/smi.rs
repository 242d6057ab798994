//! The SMI server: SMInfo for other SMs and tools (Get, and Set with the
//! controls of the SM state machine), and traps from the subnet's nodes.

use std::sync::{Arc, RwLock};

use rdma::mad::{attr_id, InvalidField, Method, SmInfo, Status};
use rdma::umad::AsyncAgent;
use tokio::sync::mpsc::UnboundedSender;

use crate::election::{self, Control};

/// What the SMI server shares with the SM's loop.
#[derive(Clone)]
pub struct Shared {
    /// Our SMInfo (its state is the SM's state).
    pub sm_info: Arc<RwLock<SmInfo>>,
    /// Our port's M_Key and its protection bits (SM_Key shown past it).
    pub m_key: Arc<RwLock<(u64, u8)>>,
    /// Woken by each trap.
    pub traps: Arc<tokio::sync::Notify>,
    /// Each legal SMInfo Set's control, with the sender's SMInfo.
    pub controls: UnboundedSender<(Control, SmInfo)>,
}

/// Our SMInfo as the answer to a request, SM_Key as shown to it (`None`:
/// no answer).
fn answer(shared: &Shared, req_m_key: u64) -> Option<SmInfo> {
    let mut info = *shared.sm_info.read().unwrap_or_else(|e| e.into_inner());
    let (m_key, bits) = *shared.m_key.read().unwrap_or_else(|e| e.into_inner());
    info.sm_key = election::shown_sm_key(info.sm_key, m_key, bits, req_m_key)?;
    Some(info)
}

/// Answers SMInfo Get with our SMInfo; takes SMInfo Set of a control legal
/// in our state from an SM with our SM_Key (or none: 0), answers it with
/// our SMInfo and passes it on to the SM's loop, and answers any other
/// with status 7 (invalid value), as OpenSM; takes traps (answering
/// TrapRepress and waking the sweeper).
pub async fn serve_smi(agent: Arc<AsyncAgent>, shared: Shared) {
    while let Some(req) = agent.next_request().await {
        let h = req.mad.header();
        let mut resp = req.mad.response();
        if h.method == Method::TRAP {
            resp.set_header(&rdma::mad::MadHeader {
                method: Method::TRAP_REPRESS,
                ..resp.header()
            });
            let n = req.mad.data().len().min(resp.data_mut().len());
            let data = req.mad.data()[..n].to_vec();
            resp.data_mut()[..n].copy_from_slice(&data);
            let _ = agent.respond(&req, &resp);
            shared.traps.notify_one();
            continue;
        }
        if h.attr_id != attr_id::SM_INFO {
            continue;
        }
        let req_m_key = req.mad.m_key().unwrap_or(0);
        let Some(info) = answer(&shared, req_m_key) else {
            tracing::warn!("SMInfo {:?} failed the M_Key check: dropped", h.method);
            continue;
        };
        let mut control = None;
        if h.method == Method::SET {
            let from = req.mad.attribute::<SmInfo>().ok();
            let key_ok = |f: &SmInfo| shared_key(&shared) == 0 || f.sm_key == shared_key(&shared);
            let ctl = Control::from_attr_mod(h.attr_mod);
            match (ctl, from) {
                (Some(c), Some(f))
                    if key_ok(&f) && election::legal(info.sm_state, c, f.sm_state) =>
                {
                    control = Some((c, f));
                }
                _ => {
                    tracing::info!(
                        "SMInfo Set {} from {:?} refused in state {}",
                        h.attr_mod,
                        from.map(|f| (f.guid, f.sm_state)),
                        info.sm_state
                    );
                    // Keeping a directed-route response's D bit.
                    let h = resp.header();
                    let bad = Status::new(false, false, InvalidField::InvalidValue, 0);
                    resp.set_header(&rdma::mad::MadHeader {
                        status: Status(h.status.0 | bad.0),
                        ..h
                    });
                }
            }
        } else if h.method != Method::GET {
            continue;
        }
        if resp.set_attribute(&info).is_ok() {
            let _ = agent.respond(&req, &resp);
        }
        if let Some(c) = control {
            let _ = shared.controls.send(c);
        }
    }
}

/// Our SM_Key (the real one, not as shown).
fn shared_key(shared: &Shared) -> u64 {
    shared
        .sm_info
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .sm_key
}
