//! What `rdma_server` and `rdma_client` share, as rdma-core's two tools do:
//! the message size and the QP both ask `rdma_create_ep` for.

use std::process::ExitCode;

use rdma::cm::{Endpoint, EpAttr};
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

/// Whether the endpoint's QP sends the message inline; the C tools' line
/// when it does not.
pub fn inline_or_say(tool: &str, ep: &Endpoint) -> bool {
    let inline = ep
        .qp()
        .is_some_and(|q| q.caps().max_inline_data as usize >= MSG);
    if !inline {
        println!("{tool}: device doesn't support IBV_SEND_INLINE, using sge sends");
    }
    inline
}

/// Sends the all-zero message the C tools send: inline when `inline`, else
/// from `region`.
pub fn send_msg(ep: &Endpoint, inline: bool, region: &rdma::MemoryRegion) -> rdma::Result<()> {
    if inline {
        ep.post_send_inline(0, &[0; MSG], rdma::SendFlags::empty())
    } else {
        ep.post_send(0, &region.sge(0..MSG)?, rdma::SendFlags::empty())
    }
}

/// The C tools' `main`: "TOOL: start", the run, "TOOL: end N" (0, or -1
/// after the error's line).
pub fn main_of(tool: &str, run: impl FnOnce() -> rdma::Result<()>) -> ExitCode {
    println!("{tool}: start");
    let ret = match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("{tool}: {e}");
            -1
        }
    };
    println!("{tool}: end {ret}");
    if ret == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
