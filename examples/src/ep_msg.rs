//! What `rdma_server` and `rdma_client` share, as rdma-core's two tools do:
//! the message size and the QP both ask `rdma_create_ep` for.

use rdma::cm::EpAttr;
use rdma::{QpCaps, QpType};

/// The message size of both sides.
pub const MSG: usize = 16;

/// One request each way, the message inline, every send signaled.
pub const ATTR: EpAttr = EpAttr {
    qp_type: QpType::Rc,
    caps: QpCaps {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: MSG as u32,
    },
    sq_sig_all: true,
};

/// Sends the all-zero message the C tools send: inline when the QP
/// granted enough inline data, else from `region`.
pub fn send_msg(ep: &rdma::cm::Endpoint, region: &rdma::MemoryRegion) -> rdma::Result<()> {
    let inline = ep
        .qp()
        .is_some_and(|q| q.caps().max_inline_data as usize >= MSG);
    if inline {
        ep.post_send_inline(0, &[0; MSG], rdma::SendFlags::empty())
    } else {
        ep.post_send(0, &region.sge(0..MSG)?, rdma::SendFlags::empty())
    }
}
