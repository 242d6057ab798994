//! Whether an operation's data lands in order (`ibv_query_qp_data_in_order`).

use super::{QueuePair, SendOps};
use crate::{sys, Error, Result};

impl QueuePair {
    /// Whether the data of operation `op` (one flag of [`SendOps`]) is
    /// written at the responder in order, so that its last byte's arrival
    /// tells that the whole message has arrived
    /// (`ibv_query_qp_data_in_order`). Refused (`EINVAL`, before the call):
    /// `op` empty or of several operations, or one that writes nothing at
    /// the responder (READ, atomics, local invalidate, bind).
    pub fn data_in_order(&self, op: SendOps) -> Result<bool> {
        let raw = match op {
            o if o == SendOps::RDMA_WRITE => sys::IBV_WR_RDMA_WRITE,
            o if o == SendOps::RDMA_WRITE_WITH_IMM => sys::IBV_WR_RDMA_WRITE_WITH_IMM,
            o if o == SendOps::SEND => sys::IBV_WR_SEND,
            o if o == SendOps::SEND_WITH_IMM => sys::IBV_WR_SEND_WITH_IMM,
            o if o == SendOps::SEND_WITH_INV => sys::IBV_WR_SEND_WITH_INV,
            _ => {
                return Err(Error::invalid(
                    "ibv_query_qp_data_in_order",
                    format!("{op:?} is not one operation that writes at the responder"),
                ))
            }
        };
        // SAFETY: a live QP; flags 0, the only value every release takes.
        let rc = unsafe { sys::ibv_query_qp_data_in_order(self.raw.as_ptr(), raw, 0) };
        match rc {
            0 => Ok(false),
            r if r > 0 => Ok(true),
            r => Err(Error::from_rc("ibv_query_qp_data_in_order", r)),
        }
    }
}
