//! What `ibv_query_qp` reports of a queue pair.

use crate::sys;
use crate::{AccessFlags, Mtu, Path, QpCaps, QpState};

/// The attributes a queue pair has, as the provider reports them
/// ([`QueuePair::query`](crate::QueuePair::query), `ibv_query_qp`).
///
/// Each field is what the kernel's reply holds for it: the value last set
/// where the provider keeps it, else what the provider fills in (zero, or a
/// value of its own). On rxe every field reads back as it was set, but
/// `max_rd_atomic` and `max_dest_rd_atomic`, which rxe rounds up to a power
/// of two (3 reads 4), and `caps`, which may exceed what was granted (see
/// there). siw (iWARP, connected through the CM) keeps few of them; on
/// Linux 6.1 (`qp::qp_query_reports_what_was_set`) it reports:
///
/// | field | siw |
/// |---|---|
/// | `state` | RESET whatever the state on 6.1, which leaves it unset (6.12 on: IDLE reads INIT, then RTS, ERROR; see [`QpState::Reset`]) |
/// | `caps` | the sizes granted, inline data rounded up (80 bytes for 64) |
/// | `path_mtu` | the netdev's MTU as an IB MTU (1024 for 1500), not negotiated |
/// | `max_rd_atomic`, `max_dest_rd_atomic` | the IRD and ORD siw took from the CM's initiator depth and responder resources |
/// | `access` | LOCAL_WRITE, REMOTE_WRITE and REMOTE_READ, whatever was set |
/// | `sq_sig_all` | as created |
/// | `qkey`, PSNs, `dest_qp_num`, `timeout`, retry counts, `min_rnr_timer`, `port`, `pkey_index`, `path` | 0: iWARP has none of them (TCP carries the connection) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// The current state.
    pub state: QpState,
    /// The queue sizes the provider has, each at least what creation
    /// granted ([`QueuePair::caps`](crate::QueuePair::caps)) and possibly
    /// more: rxe reports its rings' whole size (63 for 32 granted), siw
    /// rounds inline data up (80 bytes for 64).
    pub caps: QpCaps,
    /// The QKey (UD).
    pub qkey: u32,
    /// The next PSN expected from the remote side (RC, UC).
    pub rq_psn: u32,
    /// The next PSN to send.
    pub sq_psn: u32,
    /// The path MTU (RC, UC); `None` for a code this crate does not know,
    /// or none set.
    pub path_mtu: Option<Mtu>,
    /// The remote QP number (RC, UC).
    pub dest_qp_num: u32,
    /// Remote access rights (RC, UC).
    pub access: AccessFlags,
    /// The P_Key index.
    pub pkey_index: u16,
    /// The local port (from 1).
    pub port: u8,
    /// The path to the remote side (RC, UC).
    pub path: Path,
    /// The ACK timeout code (RC): 4.096 us * 2^timeout.
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries (RC; 7 = infinite).
    pub rnr_retry: u8,
    /// The RNR NAK timer code (RC).
    pub min_rnr_timer: u8,
    /// Outgoing RDMA READs and atomics in flight (RC).
    pub max_rd_atomic: u8,
    /// Incoming RDMA READs and atomics in flight (RC).
    pub max_dest_rd_atomic: u8,
    /// Whether every send generates a completion
    /// ([`QpBuilder::sq_sig_all`](crate::QpBuilder::sq_sig_all)).
    pub sq_sig_all: bool,
}

/// Every attribute `QpAttr` reads.
pub(super) const QUERY_MASK: u32 = sys::IBV_QP_STATE
    | sys::IBV_QP_CUR_STATE
    | sys::IBV_QP_PKEY_INDEX
    | sys::IBV_QP_PORT
    | sys::IBV_QP_QKEY
    | sys::IBV_QP_AV
    | sys::IBV_QP_PATH_MTU
    | sys::IBV_QP_TIMEOUT
    | sys::IBV_QP_RETRY_CNT
    | sys::IBV_QP_RNR_RETRY
    | sys::IBV_QP_RQ_PSN
    | sys::IBV_QP_MAX_QP_RD_ATOMIC
    | sys::IBV_QP_MIN_RNR_TIMER
    | sys::IBV_QP_SQ_PSN
    | sys::IBV_QP_MAX_DEST_RD_ATOMIC
    | sys::IBV_QP_CAP
    | sys::IBV_QP_DEST_QPN
    | sys::IBV_QP_ACCESS_FLAGS;

impl QpAttr {
    pub(super) fn from_raw(a: &sys::ibv_qp_attr, init: &sys::ibv_qp_init_attr) -> QpAttr {
        QpAttr {
            state: QpState::from_raw(a.qp_state),
            caps: QpCaps {
                max_send_wr: a.cap.max_send_wr,
                max_recv_wr: a.cap.max_recv_wr,
                max_send_sge: a.cap.max_send_sge,
                max_recv_sge: a.cap.max_recv_sge,
                max_inline_data: a.cap.max_inline_data,
            },
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            path_mtu: Mtu::from_raw(a.path_mtu),
            dest_qp_num: a.dest_qp_num,
            access: AccessFlags::from_bits_retain(a.qp_access_flags),
            pkey_index: a.pkey_index,
            port: a.port_num,
            path: Path::from_raw(&a.ah_attr),
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            min_rnr_timer: a.min_rnr_timer,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            sq_sig_all: init.sq_sig_all != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Gid;

    #[test]
    fn raw_attributes_decode_field_by_field() {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain data.
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_RTS;
        a.path_mtu = sys::IBV_MTU_1024;
        a.qkey = 7;
        a.rq_psn = 11;
        a.sq_psn = 12;
        a.dest_qp_num = 0x33;
        a.qp_access_flags = sys::IBV_ACCESS_REMOTE_WRITE;
        a.cap.max_send_wr = 5;
        a.cap.max_inline_data = 9;
        a.pkey_index = 2;
        a.port_num = 1;
        a.timeout = 14;
        a.retry_cnt = 6;
        a.rnr_retry = 5;
        a.min_rnr_timer = 12;
        a.max_rd_atomic = 4;
        a.max_dest_rd_atomic = 3;
        a.ah_attr.port_num = 1;
        a.ah_attr.dlid = 0x10;
        init.sq_sig_all = 1;
        let q = QpAttr::from_raw(&a, &init);
        assert_eq!(q.state, QpState::Rts);
        assert_eq!(q.path_mtu, Some(Mtu::Mtu1024));
        assert_eq!(
            (q.qkey, q.rq_psn, q.sq_psn, q.dest_qp_num),
            (7, 11, 12, 0x33)
        );
        assert_eq!(q.access, AccessFlags::REMOTE_WRITE);
        assert_eq!((q.caps.max_send_wr, q.caps.max_inline_data), (5, 9));
        assert_eq!((q.pkey_index, q.port), (2, 1));
        assert_eq!(
            (q.timeout, q.retry_cnt, q.rnr_retry, q.min_rnr_timer),
            (14, 6, 5, 12)
        );
        assert_eq!((q.max_rd_atomic, q.max_dest_rd_atomic), (4, 3));
        assert!(q.sq_sig_all);
        // Not global: no GID, and the GRH fields read as zero.
        assert_eq!(q.path.dgid, None);
        assert_eq!((q.path.dlid, q.path.port), (0x10, 1));
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.sgid_index = 3;
        a.ah_attr.grh.hop_limit = 64;
        a.path_mtu = 0;
        let q = QpAttr::from_raw(&a, &init);
        assert_eq!(q.path.dgid, Some(Gid::from(a.ah_attr.grh.dgid)));
        assert_eq!((q.path.sgid_index, q.path.hop_limit), (3, 64));
        assert_eq!(q.path_mtu, None);
    }
}
