//! The opcode of a send work request (`IBV_WR_*`).

use std::fmt;

use crate::sys;

/// What a send work request does (`enum ibv_wr_opcode`); see
/// [`SendWr::opcode`](crate::SendWr::opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// An RDMA WRITE.
    RdmaWrite,
    /// An RDMA WRITE with immediate data.
    RdmaWriteWithImm,
    /// A SEND.
    Send,
    /// A SEND with immediate data.
    SendWithImm,
    /// An RDMA READ.
    RdmaRead,
    /// An atomic compare-and-swap.
    AtomicCmpAndSwp,
    /// An atomic fetch-and-add.
    AtomicFetchAndAdd,
    /// A local invalidate.
    LocalInv,
    /// A memory-window bind.
    BindMw,
    /// A SEND with invalidate.
    SendWithInv,
    /// A TSO send.
    Tso,
    /// The provider-defined opcode (`IBV_WR_DRIVER1`).
    Driver1,
    /// A flush.
    Flush,
    /// An atomic write.
    AtomicWrite,
    /// An opcode this crate does not know.
    Other(u32),
}

/// `IBV_WR_FLUSH` (verbs.h of rdma-core v45 on).
const WR_FLUSH: sys::ibv_wr_opcode = 14;

impl WrOpcode {
    /// From the C value.
    pub fn from_raw(op: sys::ibv_wr_opcode) -> WrOpcode {
        match op {
            sys::IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite,
            sys::IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm,
            sys::IBV_WR_SEND => WrOpcode::Send,
            sys::IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm,
            sys::IBV_WR_RDMA_READ => WrOpcode::RdmaRead,
            sys::IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpAndSwp,
            sys::IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAndAdd,
            sys::IBV_WR_LOCAL_INV => WrOpcode::LocalInv,
            sys::IBV_WR_BIND_MW => WrOpcode::BindMw,
            sys::IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInv,
            sys::IBV_WR_TSO => WrOpcode::Tso,
            sys::IBV_WR_DRIVER1 => WrOpcode::Driver1,
            WR_FLUSH => WrOpcode::Flush,
            sys::IBV_WR_ATOMIC_WRITE => WrOpcode::AtomicWrite,
            other => WrOpcode::Other(other),
        }
    }

    /// The C value.
    pub fn raw(self) -> sys::ibv_wr_opcode {
        match self {
            WrOpcode::RdmaWrite => sys::IBV_WR_RDMA_WRITE,
            WrOpcode::RdmaWriteWithImm => sys::IBV_WR_RDMA_WRITE_WITH_IMM,
            WrOpcode::Send => sys::IBV_WR_SEND,
            WrOpcode::SendWithImm => sys::IBV_WR_SEND_WITH_IMM,
            WrOpcode::RdmaRead => sys::IBV_WR_RDMA_READ,
            WrOpcode::AtomicCmpAndSwp => sys::IBV_WR_ATOMIC_CMP_AND_SWP,
            WrOpcode::AtomicFetchAndAdd => sys::IBV_WR_ATOMIC_FETCH_AND_ADD,
            WrOpcode::LocalInv => sys::IBV_WR_LOCAL_INV,
            WrOpcode::BindMw => sys::IBV_WR_BIND_MW,
            WrOpcode::SendWithInv => sys::IBV_WR_SEND_WITH_INV,
            WrOpcode::Tso => sys::IBV_WR_TSO,
            WrOpcode::Driver1 => sys::IBV_WR_DRIVER1,
            WrOpcode::Flush => WR_FLUSH,
            WrOpcode::AtomicWrite => sys::IBV_WR_ATOMIC_WRITE,
            WrOpcode::Other(v) => v,
        }
    }

    /// The name libibverbs gives the opcode (`ibv_wr_opcode_str`, of
    /// rdma-core v49 on: `send`, `rdma-write`, ..., `unknown`); built
    /// against older headers, the same names from this crate's table.
    pub fn name(self) -> &'static str {
        #[cfg(has_ibv_wr_opcode_str)]
        {
            // SAFETY: ibv_wr_opcode_str returns a string constant for every
            // value ("unknown" past its range, NULL for the gaps of its
            // table, which static_c_str takes).
            unsafe { crate::os::static_c_str(sys::ibv_wr_opcode_str(self.raw())) }
        }
        #[cfg(not(has_ibv_wr_opcode_str))]
        {
            match self {
                WrOpcode::RdmaWrite => "rdma-write",
                WrOpcode::RdmaWriteWithImm => "rdma-write-with-imm",
                WrOpcode::Send => "send",
                WrOpcode::SendWithImm => "send-with-imm",
                WrOpcode::RdmaRead => "rdma-read",
                WrOpcode::AtomicCmpAndSwp => "atomic-cmp-and-swp",
                WrOpcode::AtomicFetchAndAdd => "atomic-fetch-and-add",
                WrOpcode::LocalInv => "local-inv",
                WrOpcode::BindMw => "bind-mw",
                WrOpcode::SendWithInv => "send-with-inv",
                WrOpcode::Tso => "tso",
                WrOpcode::Driver1 => "driver1",
                WrOpcode::Flush => "flush",
                WrOpcode::AtomicWrite => "atomic-write",
                WrOpcode::Other(_) => "unknown",
            }
        }
    }
}

/// [`WrOpcode::name`].
impl fmt::Display for WrOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opcodes over libibverbs' range and past it: each keeps its value,
    /// and prints a name of its own ("unknown" for those libibverbs does
    /// not name); with `ibv_wr_opcode_str`, exactly libibverbs' name.
    #[test]
    #[cfg_attr(miri, ignore = "calls libibverbs")]
    fn opcodes_keep_their_value_and_print_libibverbs_names() {
        let mut names = Vec::new();
        for v in 0..20 {
            let op = WrOpcode::from_raw(v);
            assert_eq!(op.raw(), v, "{op:?}");
            let name = op.to_string();
            #[cfg(has_ibv_wr_opcode_str)]
            {
                // SAFETY: as in `name`.
                let c = unsafe { crate::os::static_c_str(sys::ibv_wr_opcode_str(v)) };
                assert_eq!(name, c, "{op:?}");
            }
            match op {
                WrOpcode::Other(_) => assert_eq!(name, "unknown", "{v}"),
                _ => {
                    assert_ne!(name, "unknown", "{op:?}");
                    names.push(name);
                }
            }
        }
        // 0..=11, 14 and 15 are named, each differently.
        assert_eq!(names.len(), 14, "{names:?}");
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 14, "{names:?}");
        assert_eq!(WrOpcode::Send.to_string(), "send");
        assert_eq!(WrOpcode::from_raw(u32::MAX).to_string(), "unknown");
    }
}
