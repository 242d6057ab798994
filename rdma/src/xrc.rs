//! XRC: extended reliable connected transport. An XRC domain groups the
//! receive side: XRC SRQs ([`SrqBuilder::xrc`](crate::SrqBuilder::xrc)) and
//! XRC receive QPs ([`XrcRecvQp`]). A sender's one XRC send QP
//! ([`QpType::XrcSend`](crate::QpType::XrcSend)) reaches every SRQ of the
//! remote domain, naming the SRQ in each request
//! ([`WrBatch::set_xrc_srqn`](crate::WrBatch::set_xrc_srqn)).
//!
//! Neither soft device has XRC: rxe's and siw's providers answer
//! `ibv_open_xrcd` with `EOPNOTSUPP`, which [`XrcDomain::new`] reports as
//! "not supported by rxe0" ([`Error::is_unsupported`]). mlx5 has it.

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::sys;
use crate::{Context, Error, InitAttr, Result, RtrAttr, RtsAttr};

/// How [`XrcDomain::open`] treats the file that names a shared domain
/// (`oflags` of `ibv_xrcd_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XrcdOpen {
    /// Opens the domain the file is tied to; fails (`EINVAL`) if none is.
    Existing,
    /// Opens the file's domain, or creates one tied to it (`O_CREAT`).
    Create,
    /// Creates a domain tied to the file; fails (`EEXIST`) if one is
    /// (`O_CREAT | O_EXCL`).
    CreateNew,
}

impl XrcdOpen {
    pub(crate) fn oflags(self) -> i32 {
        match self {
            XrcdOpen::Existing => 0,
            XrcdOpen::Create => libc::O_CREAT,
            XrcdOpen::CreateNew => libc::O_CREAT | libc::O_EXCL,
        }
    }
}

/// An XRC domain (`ibv_xrcd`).
///
/// Cloning shares it. XRC SRQs and receive QPs made in it keep it alive;
/// it is closed (`ibv_close_xrcd`) after the last of them.
#[derive(Clone)]
pub struct XrcDomain {
    inner: Arc<XrcdInner>,
}

struct XrcdInner {
    ctx: Context,
    raw: NonNull<sys::ibv_xrcd>,
}

// SAFETY: an XRC domain is a kernel handle this crate never mutates after
// creation; verbs that take it (creating SRQs and QPs in it) are commands
// on the uverbs file, which the kernel serialises.
unsafe impl Send for XrcdInner {}
// SAFETY: as above.
unsafe impl Sync for XrcdInner {}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        // SAFETY: closed once, after every SRQ and QP made in it (each holds
        // this Arc). A failure cannot be handled here.
        unsafe { sys::ibv_close_xrcd(self.raw.as_ptr()) };
    }
}

impl XrcDomain {
    /// A domain of this process alone (no file: `fd` -1 with `O_CREAT`).
    pub fn new(ctx: &Context) -> Result<XrcDomain> {
        Self::open_raw(ctx, -1, XrcdOpen::Create)
    }

    /// The domain tied to `file`'s inode, shared with every process that
    /// opens it through the same file (`ibv_open_xrcd` with `fd` and
    /// `oflags`). The file need only be open during the call: the kernel
    /// ties the domain to the inode, not to the descriptor.
    pub fn open(ctx: &Context, file: BorrowedFd<'_>, how: XrcdOpen) -> Result<XrcDomain> {
        Self::open_raw(ctx, file.as_raw_fd(), how)
    }

    fn open_raw(ctx: &Context, fd: i32, how: XrcdOpen) -> Result<XrcDomain> {
        let mut attr = init_attr(fd, how);
        // SAFETY: a live context; `attr` is complete for its mask, read
        // during the call only; `fd` is -1 or borrowed for the call.
        let raw = unsafe { sys::ibv_open_xrcd(ctx.as_raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last("ibv_open_xrcd").unsupported_on(ctx.name(), "XRC domains")
        })?;
        Ok(XrcDomain {
            inner: Arc::new(XrcdInner {
                ctx: ctx.clone(),
                raw,
            }),
        })
    }

    /// The context the domain belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw domain, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_xrcd {
        self.inner.raw.as_ptr()
    }
}

/// The `ibv_xrcd_init_attr` of `ibv_open_xrcd`: both fields named in the
/// mask, as the kernel reads both.
pub(crate) fn init_attr(fd: i32, how: XrcdOpen) -> sys::ibv_xrcd_init_attr {
    sys::ibv_xrcd_init_attr {
        comp_mask: sys::IBV_XRCD_INIT_ATTR_FD | sys::IBV_XRCD_INIT_ATTR_OFLAGS,
        fd,
        oflags: how.oflags(),
    }
}

impl fmt::Debug for XrcDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XrcDomain")
            .field("device", &self.inner.ctx.name())
            .finish()
    }
}

/// An XRC receive QP (`IBV_QPT_XRC_RECV`, the XRC target): the remote end
/// of a sender's XRC send QP. It has no queues of its own: what arrives
/// goes to the XRC SRQ each request names. Created in an [`XrcDomain`]
/// ([`XrcRecvQp::new`]) or opened by number from another process sharing
/// the domain ([`XrcRecvQp::open`]); dropping either destroys this
/// process's handle (`ibv_destroy_qp`), and the QP lives on while another
/// process holds one.
pub struct XrcRecvQp {
    raw: NonNull<sys::ibv_qp>,
    _xrcd: XrcDomain,
}

// SAFETY: a QP without queues: the only verbs on it are modify and query,
// commands on the uverbs file that the kernel serialises.
unsafe impl Send for XrcRecvQp {}
// SAFETY: as above.
unsafe impl Sync for XrcRecvQp {}

impl Drop for XrcRecvQp {
    fn drop(&mut self) {
        // SAFETY: destroyed once; its domain outlives it (held here).
        unsafe { sys::ibv_destroy_qp(self.raw.as_ptr()) };
    }
}

impl XrcRecvQp {
    /// Creates an XRC receive QP in `xrcd` (`ibv_create_qp_ex` with
    /// `IBV_QP_INIT_ATTR_XRCD`), in the RESET state.
    pub fn new(xrcd: &XrcDomain) -> Result<XrcRecvQp> {
        let mut attr = recv_qp_init_attr(xrcd.as_raw());
        // SAFETY: a live context; `attr` is complete for its mask (the
        // domain, which the QP keeps alive, and the type). On mlx5 it is
        // made with scatter to CQE off (`crate::mlx5`), as every QP of the
        // crate, though the kernel sets it for no XRC target.
        let raw =
            unsafe { crate::mlx5::create_qp_ex(xrcd.context(), &mut attr) }.map_err(|e| match e
                .verb()
            {
                // A refusal of libmlx5 (`crate::mlx5`) says why itself.
                "mlx5dv_create_qp" => e,
                _ => e.unsupported_on(xrcd.context().name(), "XRC QPs"),
            })?;
        Ok(XrcRecvQp {
            raw,
            _xrcd: xrcd.clone(),
        })
    }

    /// Opens the XRC receive QP number `qp_num` of `xrcd`, made by another
    /// process sharing the domain (`ibv_open_qp`). That process chose how
    /// to create it; on mlx5 scatter to CQE is never on for an XRC target
    /// whatever it chose (the kernel sets it for RC and UC QPs only), so no
    /// message of it is copied to a receive's SGE at poll time (see
    /// `crate::mlx5`).
    pub fn open(xrcd: &XrcDomain, qp_num: u32) -> Result<XrcRecvQp> {
        let mut attr = open_attr(xrcd.as_raw(), qp_num);
        // SAFETY: a live context; `attr` is complete for its mask.
        let raw = unsafe { sys::ibv_open_qp(xrcd.context().as_raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last("ibv_open_qp").unsupported_on(xrcd.context().name(), "XRC QPs")
        })?;
        Ok(XrcRecvQp {
            raw,
            _xrcd: xrcd.clone(),
        })
    }

    /// The QP number, which the sender names as its destination.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: a live QP; qp_num is set at creation.
        unsafe { (*self.raw.as_ptr()).qp_num }
    }

    /// The raw QP, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.raw.as_ptr()
    }

    /// RESET -> INIT: port, P_Key index and access (the QKey is unused).
    pub fn to_init(&self, init: &InitAttr) -> Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_INIT;
        a.pkey_index = init.pkey_index;
        a.port_num = init.port;
        a.qp_access_flags = init.access.bits();
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_PKEY_INDEX
            | sys::IBV_QP_PORT
            | sys::IBV_QP_ACCESS_FLAGS;
        self.modify(&mut a, mask)
    }

    /// INIT -> RTR with the sender's QP number, PSN and path; an XRC
    /// target takes the RDMA READ depth and RNR timer as RC does.
    pub fn to_rtr(&self, r: &RtrAttr) -> Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_RTR;
        a.path_mtu = r.mtu as u32;
        a.dest_qp_num = r.remote_qpn;
        a.rq_psn = r.rq_psn;
        a.ah_attr = r.path.raw();
        a.max_dest_rd_atomic = r.max_dest_rd_atomic;
        a.min_rnr_timer = r.min_rnr_timer;
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_AV
            | sys::IBV_QP_PATH_MTU
            | sys::IBV_QP_DEST_QPN
            | sys::IBV_QP_RQ_PSN
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC
            | sys::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut a, mask)
    }

    /// RTR -> RTS: an XRC target takes the timeout and send PSN only.
    pub fn to_rts(&self, rts: &RtsAttr) -> Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_RTS;
        a.sq_psn = rts.sq_psn;
        a.timeout = rts.timeout;
        self.modify(
            &mut a,
            sys::IBV_QP_STATE | sys::IBV_QP_SQ_PSN | sys::IBV_QP_TIMEOUT,
        )
    }

    fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32) -> Result<()> {
        // SAFETY: a live QP; `attr` is complete for `mask` and read during
        // the call only.
        let rc = unsafe { sys::ibv_modify_qp(self.as_raw(), attr, mask as i32) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_modify_qp", rc));
        }
        Ok(())
    }
}

/// The `ibv_qp_init_attr_ex` of an XRC receive QP: the domain and the
/// type; no PD, CQs or capabilities.
pub(crate) fn recv_qp_init_attr(xrcd: *mut sys::ibv_xrcd) -> sys::ibv_qp_init_attr_ex {
    // SAFETY: plain data.
    let mut attr: sys::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    attr.qp_type = sys::IBV_QPT_XRC_RECV;
    attr.comp_mask = sys::IBV_QP_INIT_ATTR_XRCD;
    attr.xrcd = xrcd;
    attr
}

/// The `ibv_qp_open_attr` of `ibv_open_qp`: number, domain and type.
pub(crate) fn open_attr(xrcd: *mut sys::ibv_xrcd, qp_num: u32) -> sys::ibv_qp_open_attr {
    sys::ibv_qp_open_attr {
        comp_mask: sys::IBV_QP_OPEN_ATTR_NUM
            | sys::IBV_QP_OPEN_ATTR_XRCD
            | sys::IBV_QP_OPEN_ATTR_TYPE,
        qp_num,
        xrcd,
        qp_context: ptr::null_mut(),
        qp_type: sys::IBV_QPT_XRC_RECV,
    }
}

impl fmt::Debug for XrcRecvQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XrcRecvQp")
            .field("qp_num", &self.qp_num())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_flags_are_the_open2_flags() {
        assert_eq!(XrcdOpen::Existing.oflags(), 0);
        assert_eq!(XrcdOpen::Create.oflags(), libc::O_CREAT);
        assert_eq!(XrcdOpen::CreateNew.oflags(), libc::O_CREAT | libc::O_EXCL);
        let a = init_attr(-1, XrcdOpen::Create);
        assert_eq!(a.fd, -1);
        assert_eq!(a.comp_mask, 3);
    }

    #[test]
    fn open_attr_names_every_field_it_sets() {
        let a = open_attr(ptr::null_mut(), 0x1234);
        assert_eq!(a.qp_num, 0x1234);
        assert_eq!(a.qp_type, sys::IBV_QPT_XRC_RECV);
        assert_eq!(
            a.comp_mask,
            sys::IBV_QP_OPEN_ATTR_NUM | sys::IBV_QP_OPEN_ATTR_XRCD | sys::IBV_QP_OPEN_ATTR_TYPE
        );
        let q = recv_qp_init_attr(ptr::null_mut());
        assert_eq!(q.comp_mask, sys::IBV_QP_INIT_ATTR_XRCD);
        assert!(q.pd.is_null() && q.send_cq.is_null() && q.recv_cq.is_null());
    }
}
