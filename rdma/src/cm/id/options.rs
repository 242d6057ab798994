//! The options of a CM id (`rdma_set_option`): `RDMA_OPTION_ID`'s and
//! the InfiniBand paths (`RDMA_OPTION_IB_PATH`).

use rdmacm_sys as cm;

use super::{rc, CmId};
use crate::cm::IbPath;
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

    /// Gives the id the paths its connection goes over
    /// (`RDMA_OPTION_IB_PATH`), instead of
    /// [`resolve_route`](Self::resolve_route): the paths of an SA query of
    /// the program's own ([`crate::umad`], or ibacm's), after the
    /// `AddrResolved` event. The kernel's CM takes the first path whose
    /// flags are exactly [`IbPath::PRIMARY_FLAGS`] and reports
    /// `RouteResolved`, as a resolution would; a connect follows.
    ///
    /// On RoCE the kernel fills the path's layer-2 fields from the id's
    /// network device; on iWARP the path is kept but unused (its CM
    /// connects over TCP).
    ///
    /// Errors: `EINVAL` for no path (before the call), a field too wide
    /// for the SA's wire format (before the call), no path of the primary
    /// flags, or an id whose address is not resolved or whose route
    /// already is (the kernel's; `ENODEV` on RoCE when the id's network
    /// device is gone).
    pub fn set_ib_paths(&self, paths: &[IbPath]) -> Result<()> {
        const VERB: &str = "rdma_set_option";
        if paths.is_empty() {
            return Err(Error::invalid(
                VERB,
                "RDMA_OPTION_IB_PATH needs at least one path",
            ));
        }
        let mut raw = paths
            .iter()
            .map(IbPath::to_raw)
            .collect::<Result<Vec<_>>>()?;
        // SAFETY: a live id; `raw` is a readable array of complete
        // `ibv_path_data`, of the length passed in bytes, which the kernel
        // copies; the lock is held.
        rc(
            VERB,
            self.locked(|| unsafe {
                cm::rdma_set_option(
                    self.as_raw(),
                    cm::RDMA_OPTION_IB as i32,
                    cm::RDMA_OPTION_IB_PATH as i32,
                    raw.as_mut_ptr().cast(),
                    std::mem::size_of_val(raw.as_slice()),
                )
            }),
        )
        .map_err(|e| {
            if e.errno() == libc::EINVAL {
                e.with_hint(
                    "RDMA_OPTION_IB_PATH needs a path of flags GMP | PRIMARY | BIDIRECTIONAL, \
                     on an id whose address is resolved and whose route is not",
                )
            } else {
                e
            }
        })
    }
}
