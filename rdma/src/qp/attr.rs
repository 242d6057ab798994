//! The attributes of a queue pair's paths and state transitions.

use crate::sys;
use crate::{AccessFlags, Path};

/// An MTU of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU of `bytes` (256..=4096, a power of two).
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        Some(match bytes {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The size in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// The MTU of an `IBV_MTU_*` code (`None` for another value).
    pub(crate) fn from_raw(code: sys::ibv_mtu) -> Option<Mtu> {
        Some(match code {
            sys::IBV_MTU_256 => Mtu::Mtu256,
            sys::IBV_MTU_512 => Mtu::Mtu512,
            sys::IBV_MTU_1024 => Mtu::Mtu1024,
            sys::IBV_MTU_2048 => Mtu::Mtu2048,
            sys::IBV_MTU_4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
}

/// RESET -> INIT.
#[derive(Debug, Clone, Copy)]
pub struct InitAttr {
    /// The local port (from 1).
    pub port: u8,
    /// The P_Key index.
    pub pkey_index: u16,
    /// Remote access rights (RC, UC).
    pub access: AccessFlags,
    /// The QKey (UD).
    pub qkey: u32,
}

impl InitAttr {
    /// Port `port`, P_Key index 0, no remote access, QKey 0.
    pub fn new(port: u8) -> InitAttr {
        InitAttr {
            port,
            pkey_index: 0,
            access: AccessFlags::empty(),
            qkey: 0,
        }
    }
}

/// INIT -> RTR, for connected QPs: the remote side.
#[derive(Debug, Clone, Copy)]
pub struct RtrAttr {
    /// The remote QP number.
    pub remote_qpn: u32,
    /// The first PSN expected from the remote side.
    pub rq_psn: u32,
    /// The path MTU.
    pub mtu: Mtu,
    /// The path to the remote side.
    pub path: Path,
    /// Incoming RDMA READs and atomics in flight (RC).
    pub max_dest_rd_atomic: u8,
    /// The RNR NAK timer code (RC).
    pub min_rnr_timer: u8,
}

/// RTR -> RTS.
#[derive(Debug, Clone, Copy)]
pub struct RtsAttr {
    /// The first PSN to send.
    pub sq_psn: u32,
    /// The ACK timeout code (RC): 4.096 us * 2^timeout.
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries (RC; 7 = infinite).
    pub rnr_retry: u8,
    /// Outgoing RDMA READs and atomics in flight (RC).
    pub max_rd_atomic: u8,
}

impl Default for RtsAttr {
    fn default() -> Self {
        RtsAttr {
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}
