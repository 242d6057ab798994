//! The SMI server: SMInfo for other SMs and tools, and traps from the
//! subnet's nodes.

use std::sync::{Arc, RwLock};

use rdma::mad::{attr_id, Method, SmInfo};
use rdma::umad::AsyncAgent;

/// Answers SMInfo (Get, Set) as the master, and takes traps (answering
/// TrapRepress and waking the sweeper).
pub async fn serve_smi(
    agent: Arc<AsyncAgent>,
    sm_info: Arc<RwLock<SmInfo>>,
    traps: Arc<tokio::sync::Notify>,
) {
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
            traps.notify_one();
            continue;
        }
        if h.attr_id != attr_id::SM_INFO {
            continue;
        }
        let info = *sm_info.read().unwrap_or_else(|e| e.into_inner());
        if resp.set_attribute(&info).is_ok() {
            let _ = agent.respond(&req, &resp);
        }
    }
}
