//! The options of a CM id (`rdma_set_option`, `RDMA_OPTION_ID`).

use rdmacm_sys as cm;

use super::{rc, CmId};
use crate::{Error, Result};

impl CmId {
    /// Sets one `RDMA_OPTION_ID` option to the plain value `value`, whose
    /// type is the one the kernel expects for it (`rdma_set_option`).
    fn set_id_option<T: Copy>(&self, name: u32, value: T, einval: &'static str) -> Result<()> {
        let mut v = value;
        // SAFETY: a live id; `v` is a readable value of the size passed,
        // which is the size the kernel checks for option `name` (an `int`
        // for REUSEADDR and AFONLY, a `u8` for TOS and ACK_TIMEOUT); the
        // lock is held.
        rc(
            "rdma_set_option",
            self.locked(|| unsafe {
                cm::rdma_set_option(
                    self.as_raw(),
                    cm::RDMA_OPTION_ID as i32,
                    name as i32,
                    (&mut v as *mut T).cast(),
                    std::mem::size_of::<T>(),
                )
            }),
        )
        .map_err(|e| {
            if e.errno() == libc::EINVAL {
                e.with_hint(einval)
            } else {
                e
            }
        })
    }

    /// Lets the id's address be reused (`RDMA_OPTION_ID_REUSEADDR`): `true`
    /// before the id listens, `false` only on a new id (else `EINVAL`).
    pub fn set_reuseaddr(&self, on: bool) -> Result<()> {
        self.set_id_option(
            cm::RDMA_OPTION_ID_REUSEADDR,
            on as i32,
            "REUSEADDR is turned on before the id listens, off only on a new id",
        )
    }

    /// Whether an IPv6 listener takes only IPv6 connections
    /// (`RDMA_OPTION_ID_AFONLY`, as `IPV6_V6ONLY`); while the id is new or
    /// only bound: once it listens or resolves, `EINVAL`. Without it a
    /// listener on `[::]` takes IPv4 connections too.
    pub fn set_afonly(&self, on: bool) -> Result<()> {
        self.set_id_option(
            cm::RDMA_OPTION_ID_AFONLY,
            on as i32,
            "AFONLY is set before the id listens or resolves an address",
        )
    }

    /// The type of service of the id's connection (`RDMA_OPTION_ID_TOS`):
    /// on RoCE the traffic class of its GRH, on InfiniBand the path's
    /// service level is chosen by it; before
    /// [`resolve_route`](Self::resolve_route), which uses it.
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        self.set_id_option(
            cm::RDMA_OPTION_ID_TOS,
            tos,
            "rdma_set_option refused the type of service",
        )
    }

    /// The local ACK timeout of the id's QP (`RDMA_OPTION_ID_ACK_TIMEOUT`):
    /// 4.096 µs · 2^`timeout`, at most 31; what [`init_qp_attr`] and the
    /// QP's move to RTS use instead of the path's packet lifetime; before
    /// connect or accept. iWARP has no such timeout: the option is kept but
    /// unused.
    ///
    /// [`init_qp_attr`]: Self::init_qp_attr
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        if timeout > 31 {
            return Err(Error::invalid(
                "rdma_set_option",
                format!("ACK timeout {timeout}: at most 31 (4.096 us * 2^31)"),
            ));
        }
        self.set_id_option(
            cm::RDMA_OPTION_ID_ACK_TIMEOUT,
            timeout,
            "an ACK timeout is for an id of a connected port space (TCP or IB), not UDP or IPoIB",
        )
    }
}
