//! An open device: queries of the device, its ports and its GID table.

use std::ffi::CStr;
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::sys;
use crate::{Error, Gid, GidEntry, QpType, Result};

/// An open RDMA device (`ibv_context`). Cloning shares it; the device is
/// closed when the last clone, and every object created from it, is gone.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    raw: NonNull<sys::ibv_context>,
    /// Whether this value closes the context: false for the contexts that
    /// librdmacm opens for its ids and closes itself.
    owned: bool,
    /// What keeps a context this value does not own open (librdmacm's
    /// reference on its device), for as long as this value lives.
    _keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// How the context's QPs are created (mlx5: with scatter to CQE off;
    /// `crate::mlx5`), asked of its provider at the first QP.
    qp_creator: std::sync::OnceLock<crate::mlx5::QpCreator>,
}

// SAFETY: libibverbs contexts are thread-safe: every verb on a context may be
// called from any thread (rdma-core locks internally where it must).
unsafe impl Send for Inner {}
// SAFETY: as above, verbs may run on one context from several threads at
// once; `&Inner` only reads `raw`, `owned` and `_keep`, which never change,
// and `qp_creator`, a `OnceLock` of plain data (function pointers of a
// library that is never unloaded).
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: `owned` is set only by `from_raw`, whose caller promised
            // that nothing else closes `raw`; Inner drops once, with the last
            // Context clone, and every object made from the context holds one.
            unsafe { sys::ibv_close_device(self.raw.as_ptr()) };
        }
    }
}

impl Context {
    /// Takes ownership of an open context.
    ///
    /// # Safety
    /// `raw` must be an open context that nothing else will close.
    pub unsafe fn from_raw(raw: NonNull<sys::ibv_context>) -> Context {
        Context {
            inner: Arc::new(Inner {
                raw,
                owned: true,
                _keep: None,
                qp_creator: std::sync::OnceLock::new(),
            }),
        }
    }

    /// A context that librdmacm opened for a CM id: this value never closes
    /// it, and holds `keep` (which keeps it open) until the last clone, and
    /// every object created from it, is gone.
    ///
    /// # Safety
    /// `raw` must stay open as long as `keep` lives.
    pub(crate) unsafe fn from_rdmacm(
        raw: NonNull<sys::ibv_context>,
        keep: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Context {
        Context {
            inner: Arc::new(Inner {
                raw,
                owned: false,
                _keep: Some(keep),
                qp_creator: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The raw context, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_context {
        self.inner.raw.as_ptr()
    }

    /// How the context's QPs are created, asked of its provider once.
    pub(crate) fn qp_creator(&self) -> crate::mlx5::QpCreator {
        *self.inner.qp_creator.get_or_init(|| {
            // SAFETY: an open context (this value keeps it open).
            unsafe { crate::mlx5::qp_creator_of(self.as_raw()) }
        })
    }

    /// The device's name (`rxe0`).
    pub fn name(&self) -> &str {
        // SAFETY: an open context's `device` stays valid while it is open
        // (libibverbs holds a reference on it); its name is a NUL-terminated
        // array inside it, borrowed here no longer than `self`.
        let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name((*self.as_raw()).device)) };
        name.to_str().unwrap_or("?")
    }

    /// The kernel's index of the device (`ibv_get_device_index`), as in
    /// `/sys/class/infiniband/<name>/../` netlink messages and `rdma dev`;
    /// `None` where the kernel does not tell it (no netlink device query).
    pub fn device_index(&self) -> Option<u32> {
        // SAFETY: an open context's `device` stays valid while it is open.
        let i = unsafe { sys::ibv_get_device_index((*self.as_raw()).device) };
        u32::try_from(i).ok()
    }

    /// The device's free-running clock now (`ibv_query_rt_values_ex` with
    /// `IBV_VALUES_MASK_RAW_CLOCK`).
    ///
    /// Providers without the query (rxe and siw among them) answer
    /// `EOPNOTSUPP`: an [`Error`] whose [`errno`](Error::errno) is
    /// `libc::EOPNOTSUPP`.
    pub fn raw_clock(&self) -> Result<RawClock> {
        let mut values = sys::ibv_values_ex {
            comp_mask: sys::IBV_VALUES_MASK_RAW_CLOCK,
            ..Default::default()
        };
        // SAFETY: an open context; `values` is writable and asks for the
        // raw clock only, which the provider fills.
        let rc = unsafe { sys::ibv_query_rt_values_ex(self.as_raw(), &mut values) };
        if rc != 0 {
            let e = Error::from_rc("ibv_query_rt_values_ex", rc);
            return Err(if rc == libc::EOPNOTSUPP {
                e.with_hint(format!("{} has no real-time clock query", self.name()))
            } else {
                e
            });
        }
        if values.comp_mask & sys::IBV_VALUES_MASK_RAW_CLOCK == 0 {
            return Err(Error::new("ibv_query_rt_values_ex", libc::EOPNOTSUPP)
                .with_hint(format!("{} did not report its raw clock", self.name())));
        }
        Ok(RawClock {
            sec: values.raw_clock.tv_sec,
            nsec: values.raw_clock.tv_nsec,
        })
    }

    /// The device's attributes (`ibv_query_device_ex`).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut attr = MaybeUninit::<sys::ibv_device_attr_ex>::zeroed();
        // SAFETY: an open context; `attr` is writable; NULL input is allowed.
        let rc =
            unsafe { sys::ibv_query_device_ex(self.as_raw(), std::ptr::null(), attr.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_query_device_ex", rc));
        }
        // SAFETY: zero-initialised plain data, filled by the query.
        Ok(DeviceAttr(unsafe { attr.assume_init() }))
    }

    /// The attributes of port `port` (numbered from 1).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let mut attr = MaybeUninit::<sys::ibv_port_attr>::zeroed();
        // SAFETY: an open context; `attr` is a full ibv_port_attr, as the
        // macro form of ibv_query_port (bound by ibverbs-sys) expects.
        let rc = unsafe { sys::ibv_query_port(self.as_raw(), port, attr.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_query_port", rc));
        }
        // SAFETY: zero-initialised plain data, filled by the query.
        Ok(PortAttr(unsafe { attr.assume_init() }))
    }

    /// The GID at `index` of port `port` (`ibv_query_gid`). An empty entry
    /// reads as the all-zero GID, as in C.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        let index = i32::try_from(index).map_err(|_| {
            Error::invalid("ibv_query_gid", format!("GID index {index} is too large"))
        })?;
        let mut gid = MaybeUninit::<sys::ibv_gid>::zeroed();
        // SAFETY: an open context; `gid` is a writable 16-byte union.
        let rc = unsafe { sys::ibv_query_gid(self.as_raw(), port, index, gid.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::last("ibv_query_gid").with_hint(format!(
                "port {port} has no GID index {index} (see `ibv_devinfo -v`)"
            )));
        }
        // SAFETY: zero-initialised plain data, filled by the query.
        Ok(Gid::from(unsafe { gid.assume_init() }))
    }

    /// The entry at `index` of port `port`'s GID table, with its type and
    /// netdev (`ibv_query_gid_ex`); `None` when the entry is empty.
    pub fn query_gid_entry(&self, port: u8, index: u8) -> Result<Option<GidEntry>> {
        let mut entry = MaybeUninit::<sys::ibv_gid_entry>::zeroed();
        // SAFETY: an open context; `entry` is a writable ibv_gid_entry, whose
        // size the inline wrapper passes along.
        let rc = unsafe {
            sys::ibv_query_gid_ex(
                self.as_raw(),
                u32::from(port),
                u32::from(index),
                entry.as_mut_ptr(),
                0,
            )
        };
        match rc {
            0 => {
                // SAFETY: zero-initialised plain data, filled by the query.
                let raw = unsafe { entry.assume_init() };
                Ok(GidEntry::from_raw(&raw, self.is_iwarp()))
            }
            libc::ENODATA => Ok(None),
            rc => Err(Error::from_rc("ibv_query_gid_ex", rc)),
        }
    }

    /// The P_Key at `index` of port `port`'s P_Key table (`ibv_query_pkey`,
    /// which reads sysfs), in host byte order; `0xffff` is the default
    /// full-membership P_Key, the one entry rxe's table has.
    ///
    /// A port past the device's last (`ibv_query_port`, `EINVAL`) and an
    /// index at or past the port's `pkey_tbl_len` (`ibv_query_pkey`,
    /// `EINVAL`, "past the port's P_Key table") are refused before the
    /// table is read. iWARP has no P_Keys: siw reports a `pkey_tbl_len` of
    /// 0, so every index is refused. A table the port reports but sysfs
    /// lacks fails with `ENOENT` ("no P_Key table in sysfs").
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        let len = self.query_port(port)?.pkey_tbl_len();
        if index >= len {
            return Err(Error::invalid(
                "ibv_query_pkey",
                format!("index {index} is past the port's P_Key table of {len} entries"),
            ));
        }
        let mut pkey: sys::__be16 = 0;
        // SAFETY: an open context; `pkey` is a writable __be16.
        let rc = unsafe { sys::ibv_query_pkey(self.as_raw(), port, i32::from(index), &mut pkey) };
        if rc != 0 {
            return Err(pkey_error("ibv_query_pkey", port));
        }
        Ok(u16::from_be(pkey))
    }

    /// The index of `pkey` (host byte order) in port `port`'s P_Key table
    /// (`ibv_get_pkey_index`); `None` when the table does not hold it. A
    /// port without a table (`pkey_tbl_len` 0: siw, iWARP) is refused
    /// (`EINVAL`, "no P_Key table"), as is a port past the device's last
    /// (`ibv_query_port`, `EINVAL`).
    pub fn pkey_index(&self, port: u8, pkey: u16) -> Result<Option<u16>> {
        let len = self.query_port(port)?.pkey_tbl_len();
        if len == 0 {
            return Err(Error::invalid(
                "ibv_get_pkey_index",
                format!("port {port} has no P_Key table (pkey_tbl_len 0, as on iWARP)"),
            ));
        }
        // SAFETY: an open context; the P_Key is passed by value.
        let rc = unsafe { sys::ibv_get_pkey_index(self.as_raw(), port, pkey.to_be()) };
        if let Ok(index) = u16::try_from(rc) {
            return Ok(Some(index));
        }
        // The search reads entries until one matches or a read fails:
        // ENOENT past the last entry in sysfs. A table it could read
        // (its first entry) then does not hold `pkey`.
        let e = pkey_error("ibv_get_pkey_index", port);
        if e.errno() == libc::ENOENT && self.query_pkey(port, 0).is_ok() {
            return Ok(None);
        }
        Err(e)
    }

    /// The number of completion vectors (interrupts) CQs can use.
    pub fn num_comp_vectors(&self) -> i32 {
        // SAFETY: an open context; the field is set when it is opened.
        unsafe { (*self.as_raw()).num_comp_vectors }
    }

    /// The device's sysfs directory (`/sys/class/infiniband/rxe0`), where
    /// attributes such as `board_id` live.
    pub fn ibdev_path(&self) -> std::path::PathBuf {
        // SAFETY: an open context points to its device, whose ibdev_path is
        // a NUL-terminated array inside it.
        let path = unsafe { CStr::from_ptr((*(*self.as_raw()).device).ibdev_path.as_ptr()) };
        std::path::PathBuf::from(path.to_string_lossy().into_owned())
    }

    /// Whether the device's transport is iWARP.
    pub(crate) fn is_iwarp(&self) -> bool {
        // SAFETY: an open context points to its device.
        unsafe { (*(*self.as_raw()).device).transport_type == sys::IBV_TRANSPORT_IWARP }
    }

    /// The first valid GID of `port` of type `gid_type` (and, for RoCE, of
    /// IP family `family`; `None`: either), in table order: the GID a UD
    /// or RC address on RoCE v2 over IPv4 uses is
    /// `find_gid(1, GidType::RoceV2, Some(IpFamily::V4))`. `None` when the
    /// port has no such GID.
    pub fn find_gid(
        &self,
        port: u8,
        gid_type: crate::GidType,
        family: Option<crate::IpFamily>,
    ) -> Result<Option<GidEntry>> {
        Ok(self.gid_table()?.into_iter().find(|e| {
            e.port == port
                && e.gid_type == gid_type
                && (family.is_none() || e.ip_family() == family)
        }))
    }

    /// Every valid GID of every port, with its type and netdev (entries
    /// past index 255, which no address vector can name, are left out).
    pub fn gid_table(&self) -> Result<Vec<GidEntry>> {
        let ports = self.query_device()?.phys_port_cnt();
        let mut cap = 0usize;
        for p in 1..=ports {
            cap += self.query_port(p)?.gid_tbl_len() as usize;
        }
        let mut raw: Vec<sys::ibv_gid_entry> = Vec::with_capacity(cap.max(1));
        // SAFETY: an open context; `raw` has room for `capacity` entries.
        let n =
            unsafe { sys::ibv_query_gid_table(self.as_raw(), raw.as_mut_ptr(), raw.capacity(), 0) };
        if n < 0 {
            return Err(Error::new("ibv_query_gid_table", (-n) as i32));
        }
        // SAFETY: ibv_query_gid_table writes and counts at most `max_entries`
        // (the capacity) entries, so the first `n` are initialised.
        unsafe { raw.set_len(n as usize) };
        let iwarp = self.is_iwarp();
        Ok(raw
            .iter()
            .filter_map(|e| GidEntry::from_raw(e, iwarp))
            .collect())
    }
}

/// The error of a failed P_Key read of `port`, with the thread's errno.
#[cold]
fn pkey_error(verb: &'static str, port: u8) -> Error {
    let e = Error::last(verb);
    if e.errno() == libc::ENOENT {
        e.with_hint(format!(
            "port {port} has no P_Key table in sysfs (iWARP devices have none)"
        ))
    } else {
        e
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.name())
            .finish()
    }
}

/// Device attributes, from `ibv_query_device_ex`.
#[derive(Clone, Copy)]
pub struct DeviceAttr(sys::ibv_device_attr_ex);

impl DeviceAttr {
    fn orig(&self) -> &sys::ibv_device_attr {
        &self.0.orig_attr
    }
    /// The firmware version string.
    pub fn fw_ver(&self) -> String {
        let bytes: Vec<u8> = self
            .orig()
            .fw_ver
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    /// The node GUID, host byte order.
    pub fn node_guid(&self) -> u64 {
        u64::from_be(self.orig().node_guid)
    }
    /// The system image GUID, host byte order.
    pub fn sys_image_guid(&self) -> u64 {
        u64::from_be(self.orig().sys_image_guid)
    }
    /// The vendor ID (IEEE OUI).
    pub fn vendor_id(&self) -> u32 {
        self.orig().vendor_id
    }
    /// The vendor's part ID.
    pub fn vendor_part_id(&self) -> u32 {
        self.orig().vendor_part_id
    }
    /// The hardware version.
    pub fn hw_ver(&self) -> u32 {
        self.orig().hw_ver
    }
    /// The number of physical ports.
    pub fn phys_port_cnt(&self) -> u8 {
        self.orig().phys_port_cnt
    }
    /// The number of physical ports, also past 255 (`phys_port_cnt_ex`);
    /// [`phys_port_cnt`](Self::phys_port_cnt) where the kernel reports no
    /// such count (0).
    pub fn phys_port_cnt_ex(&self) -> u32 {
        match self.0.phys_port_cnt_ex {
            0 => u32::from(self.phys_port_cnt()),
            n => n,
        }
    }
    /// The largest number of queue pairs.
    pub fn max_qp(&self) -> i32 {
        self.orig().max_qp
    }
    /// The largest number of work requests per queue.
    pub fn max_qp_wr(&self) -> i32 {
        self.orig().max_qp_wr
    }
    /// The largest number of scatter/gather entries per work request.
    pub fn max_sge(&self) -> i32 {
        self.orig().max_sge
    }
    /// The largest number of completion queues.
    pub fn max_cq(&self) -> i32 {
        self.orig().max_cq
    }
    /// The largest number of entries per completion queue.
    pub fn max_cqe(&self) -> i32 {
        self.orig().max_cqe
    }
    /// The largest number of memory regions.
    pub fn max_mr(&self) -> i32 {
        self.orig().max_mr
    }
    /// The largest memory region, in bytes.
    pub fn max_mr_size(&self) -> u64 {
        self.orig().max_mr_size
    }
    /// The largest number of protection domains.
    pub fn max_pd(&self) -> i32 {
        self.orig().max_pd
    }
    /// The `IBV_DEVICE_*` capability flags.
    pub fn device_cap_flags(&self) -> u32 {
        self.orig().device_cap_flags
    }
    /// The on-demand paging capabilities (`odp_caps`): empty where the
    /// device has none.
    pub fn odp_caps(&self) -> crate::OdpCaps {
        crate::OdpCaps::from_raw(&self.0.odp_caps)
    }
    /// The raw attributes, for what has no accessor.
    pub fn as_raw(&self) -> &sys::ibv_device_attr_ex {
        &self.0
    }

    /// The frequency of the device's clock in kHz (`hca_core_clock`), 0
    /// where the provider does not tell it.
    pub fn hca_core_clock(&self) -> u64 {
        self.0.hca_core_clock
    }

    /// Whether the device offers TCP segmentation offload on queue pairs of
    /// `qp_type` (`tso_caps.supported_qpts`, read by `ibv_is_qpt_supported`).
    pub fn tso_supported(&self, qp_type: QpType) -> bool {
        qpt_supported(self.0.tso_caps.supported_qpts, qp_type)
    }

    /// Whether the device executes atomic writes
    /// ([`WrBatch::atomic_write`](crate::WrBatch::atomic_write);
    /// `IB_UVERBS_DEVICE_ATOMIC_WRITE` of `device_cap_flags_ex`).
    pub fn atomic_write_supported(&self) -> bool {
        self.0.device_cap_flags_ex & DEVICE_ATOMIC_WRITE != 0
    }

    /// Whether the device flushes to placement type `t`
    /// ([`WrBatch::flush`](crate::WrBatch::flush);
    /// `IB_UVERBS_DEVICE_FLUSH_GLOBAL` / `_PERSISTENT` of
    /// `device_cap_flags_ex`).
    #[cfg(has_ibv_wr_flush)]
    pub fn flush_supported(&self, t: crate::FlushType) -> bool {
        let bit = match t {
            crate::FlushType::Global => DEVICE_FLUSH_GLOBAL,
            crate::FlushType::Persistent => DEVICE_FLUSH_PERSISTENT,
        };
        self.0.device_cap_flags_ex & bit != 0
    }

    /// Whether the device spreads receives of `qp_type` over receive work
    /// queues (`rss_caps.supported_qpts`).
    pub fn rss_supported(&self, qp_type: QpType) -> bool {
        qpt_supported(self.0.rss_caps.supported_qpts, qp_type)
    }

    /// Whether the device paces the sends of `qp_type` to a rate limit
    /// (`packet_pacing_caps.supported_qpts`).
    pub fn packet_pacing_supported(&self, qp_type: QpType) -> bool {
        qpt_supported(self.0.packet_pacing_caps.supported_qpts, qp_type)
    }
}

// The kernel's `ib_uverbs_device_cap_flags` bits that libibverbs passes on
// in `device_cap_flags_ex` but verbs.h names in no enum.
/// `IB_UVERBS_DEVICE_FLUSH_GLOBAL`.
#[cfg(has_ibv_wr_flush)]
const DEVICE_FLUSH_GLOBAL: u64 = 1 << 38;
/// `IB_UVERBS_DEVICE_FLUSH_PERSISTENT`.
#[cfg(has_ibv_wr_flush)]
const DEVICE_FLUSH_PERSISTENT: u64 = 1 << 39;
/// `IB_UVERBS_DEVICE_ATOMIC_WRITE`.
const DEVICE_ATOMIC_WRITE: u64 = 1 << 40;

fn qpt_supported(caps: u32, qp_type: QpType) -> bool {
    // SAFETY: a pure function of its arguments (a bit test).
    unsafe { sys::ibv_is_qpt_supported(caps, qp_type.raw()) != 0 }
}

/// A reading of the device's free-running clock ([`Context::raw_clock`]),
/// as the provider reports it in a `struct timespec` (mlx5: the clock's
/// cycles in `nsec`, `sec` 0); the unit is the device's
/// (`DeviceAttr::hca_core_clock`, in kHz, where the provider tells it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RawClock {
    /// The `tv_sec` the provider wrote.
    pub sec: i64,
    /// The `tv_nsec` the provider wrote.
    pub nsec: i64,
}

impl fmt::Debug for DeviceAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceAttr")
            .field("fw_ver", &self.fw_ver())
            .field("node_guid", &format_args!("{:#018x}", self.node_guid()))
            .field("phys_port_cnt", &self.phys_port_cnt())
            .field("max_qp", &self.max_qp())
            .field("max_cq", &self.max_cq())
            .field("max_mr", &self.max_mr())
            .finish_non_exhaustive()
    }
}

/// The logical state of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// No state change.
    Nop,
    /// The link is down.
    Down,
    /// Initialising.
    Init,
    /// Armed.
    Armed,
    /// Active: traffic can flow.
    Active,
    /// Active, deferred.
    ActiveDefer,
    /// A value this crate does not know.
    Other(u32),
}

impl PortState {
    /// The `ibv_port_state` value.
    pub fn raw(self) -> sys::ibv_port_state {
        match self {
            PortState::Nop => sys::IBV_PORT_NOP,
            PortState::Down => sys::IBV_PORT_DOWN,
            PortState::Init => sys::IBV_PORT_INIT,
            PortState::Armed => sys::IBV_PORT_ARMED,
            PortState::Active => sys::IBV_PORT_ACTIVE,
            PortState::ActiveDefer => sys::IBV_PORT_ACTIVE_DEFER,
            PortState::Other(n) => n,
        }
    }
}

/// libibverbs' name of the state (`ibv_port_state_str`: `active`, `down`, ...).
impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: takes any value; returns a string constant of the library.
        f.write_str(unsafe { crate::os::static_c_str(sys::ibv_port_state_str(self.raw())) })
    }
}

/// Port attributes, from `ibv_query_port`.
#[derive(Clone, Copy)]
pub struct PortAttr(sys::ibv_port_attr);

impl PortAttr {
    /// The logical port state.
    pub fn state(&self) -> PortState {
        match self.0.state {
            sys::IBV_PORT_NOP => PortState::Nop,
            sys::IBV_PORT_DOWN => PortState::Down,
            sys::IBV_PORT_INIT => PortState::Init,
            sys::IBV_PORT_ARMED => PortState::Armed,
            sys::IBV_PORT_ACTIVE => PortState::Active,
            sys::IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            other => PortState::Other(other),
        }
    }
    /// The largest MTU the port supports, in bytes.
    pub fn max_mtu(&self) -> u32 {
        mtu_bytes(self.0.max_mtu)
    }
    /// The active MTU, in bytes.
    pub fn active_mtu(&self) -> u32 {
        mtu_bytes(self.0.active_mtu)
    }
    /// The number of GID table entries.
    pub fn gid_tbl_len(&self) -> i32 {
        self.0.gid_tbl_len
    }
    /// The base LID (0 on RoCE and iWARP).
    pub fn lid(&self) -> u16 {
        self.0.lid
    }
    /// The subnet manager's LID.
    pub fn sm_lid(&self) -> u16 {
        self.0.sm_lid
    }
    /// The LID mask control.
    pub fn lmc(&self) -> u8 {
        self.0.lmc
    }
    /// The link layer: `"InfiniBand"`, `"Ethernet"` or `"Unknown"`.
    pub fn link_layer(&self) -> &'static str {
        match self.0.link_layer as u32 {
            sys::IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
            sys::IBV_LINK_LAYER_ETHERNET => "Ethernet",
            _ => "Unknown",
        }
    }
    /// The physical state code (5 = LinkUp).
    pub fn phys_state(&self) -> u8 {
        self.0.phys_state
    }
    /// The active width code (1 = 1X, 2 = 4X, ...).
    pub fn active_width(&self) -> u8 {
        self.0.active_width
    }
    /// The active speed code (1 = 2.5 Gb/s, ...).
    pub fn active_speed(&self) -> u8 {
        self.0.active_speed
    }
    /// The `IBV_PORT_*` capability flags.
    pub fn port_cap_flags(&self) -> u32 {
        self.0.port_cap_flags
    }
    /// The active link width, decoded from [`active_width`](Self::active_width).
    pub fn width(&self) -> PortWidth {
        PortWidth::from_raw(self.0.active_width)
    }
    /// The active per-lane speed, decoded from
    /// [`active_speed`](Self::active_speed).
    pub fn speed(&self) -> PortSpeed {
        PortSpeed::from_raw(self.0.active_speed)
    }
    /// The link's rate in Gb/s, lanes times lane speed (signalling rate,
    /// as `ibv_devinfo` prints it); `None` when either code is unknown.
    /// rxe and siw over the CI VM's veth netdevs report 1X SDR, 2.5 Gb/s.
    pub fn rate_gbps(&self) -> Option<f64> {
        Some(f64::from(self.width().lanes()?) * self.speed().lane_gbps()?)
    }
    /// The largest message the port carries, in bytes (rxe: 8 MiB; siw:
    /// `u32::MAX`).
    pub fn max_msg_sz(&self) -> u32 {
        self.0.max_msg_sz
    }
    /// The number of P_Key table entries (1 on rxe; 0 on siw: iWARP has no
    /// P_Keys).
    pub fn pkey_tbl_len(&self) -> u16 {
        self.0.pkey_tbl_len
    }
    /// The raw attributes, for what has no accessor.
    pub fn as_raw(&self) -> &sys::ibv_port_attr {
        &self.0
    }
}

impl fmt::Debug for PortAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortAttr")
            .field("state", &self.state())
            .field("active_mtu", &self.active_mtu())
            .field("link_layer", &self.link_layer())
            .field("gid_tbl_len", &self.gid_tbl_len())
            .finish_non_exhaustive()
    }
}

/// The active width of a port (`IBV_WIDTH_*`, as `ibv_devinfo` names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortWidth {
    /// One lane.
    X1,
    /// Two lanes.
    X2,
    /// Four lanes.
    X4,
    /// Eight lanes.
    X8,
    /// Twelve lanes.
    X12,
    /// A code this crate does not know.
    Other(u8),
}

impl PortWidth {
    fn from_raw(code: u8) -> PortWidth {
        match code {
            1 => PortWidth::X1,
            2 => PortWidth::X4,
            4 => PortWidth::X8,
            8 => PortWidth::X12,
            16 => PortWidth::X2,
            other => PortWidth::Other(other),
        }
    }
    /// The number of lanes; `None` for an unknown code.
    pub fn lanes(self) -> Option<u8> {
        Some(match self {
            PortWidth::X1 => 1,
            PortWidth::X2 => 2,
            PortWidth::X4 => 4,
            PortWidth::X8 => 8,
            PortWidth::X12 => 12,
            PortWidth::Other(_) => return None,
        })
    }
}

/// The active per-lane speed of a port (`IBV_SPEED_*`: the InfiniBand
/// data rates, which RoCE devices also report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpeed {
    /// 2.5 Gb/s.
    Sdr,
    /// 5 Gb/s.
    Ddr,
    /// 10 Gb/s.
    Qdr,
    /// 10.3125 Gb/s (FDR10).
    Fdr10,
    /// 14.0625 Gb/s.
    Fdr,
    /// 25.78125 Gb/s.
    Edr,
    /// 53.125 Gb/s.
    Hdr,
    /// 106.25 Gb/s.
    Ndr,
    /// A code this crate does not know.
    Other(u8),
}

impl PortSpeed {
    fn from_raw(code: u8) -> PortSpeed {
        match code {
            1 => PortSpeed::Sdr,
            2 => PortSpeed::Ddr,
            4 => PortSpeed::Qdr,
            8 => PortSpeed::Fdr10,
            16 => PortSpeed::Fdr,
            32 => PortSpeed::Edr,
            64 => PortSpeed::Hdr,
            128 => PortSpeed::Ndr,
            other => PortSpeed::Other(other),
        }
    }
    /// The signalling rate of one lane in Gb/s; `None` for an unknown code.
    pub fn lane_gbps(self) -> Option<f64> {
        Some(match self {
            PortSpeed::Sdr => 2.5,
            PortSpeed::Ddr => 5.0,
            PortSpeed::Qdr => 10.0,
            PortSpeed::Fdr10 => 10.3125,
            PortSpeed::Fdr => 14.0625,
            PortSpeed::Edr => 25.78125,
            PortSpeed::Hdr => 53.125,
            PortSpeed::Ndr => 106.25,
            PortSpeed::Other(_) => return None,
        })
    }
}

/// An `IBV_MTU_*` code in bytes (0 for an unknown code).
fn mtu_bytes(code: sys::ibv_mtu) -> u32 {
    match code {
        1..=5 => 128 << code,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {

    /// Port states over libibverbs' range and past it: each keeps its
    /// value and prints libibverbs' own name of it.
    #[test]
    #[cfg_attr(miri, ignore = "calls libibverbs")]
    fn port_states_keep_their_value_and_print_libibverbs_names() {
        for v in 0..12 {
            let st = match v {
                sys::IBV_PORT_NOP => PortState::Nop,
                sys::IBV_PORT_DOWN => PortState::Down,
                sys::IBV_PORT_INIT => PortState::Init,
                sys::IBV_PORT_ARMED => PortState::Armed,
                sys::IBV_PORT_ACTIVE => PortState::Active,
                sys::IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
                other => PortState::Other(other),
            };
            assert_eq!(st.raw(), v, "{st:?}");
            // SAFETY: takes any value; returns a string constant.
            let c = unsafe { crate::os::static_c_str(sys::ibv_port_state_str(v)) };
            assert_eq!(st.to_string(), c, "{st:?}");
        }
        assert_eq!(PortState::Active.to_string(), "active");
        assert_eq!(PortState::Other(99).to_string(), "unknown");
    }

    use super::*;

    #[test]
    fn mtu_codes_convert_to_bytes() {
        assert_eq!(mtu_bytes(sys::IBV_MTU_256), 256);
        assert_eq!(mtu_bytes(sys::IBV_MTU_1024), 1024);
        assert_eq!(mtu_bytes(sys::IBV_MTU_4096), 4096);
        assert_eq!(mtu_bytes(0), 0);
        assert_eq!(mtu_bytes(9), 0);
    }

    #[test]
    fn width_and_speed_codes_decode() {
        assert_eq!(PortWidth::from_raw(2), PortWidth::X4);
        assert_eq!(PortWidth::from_raw(16).lanes(), Some(2));
        assert_eq!(PortWidth::from_raw(3), PortWidth::Other(3));
        assert_eq!(PortWidth::Other(3).lanes(), None);
        assert_eq!(PortSpeed::from_raw(32), PortSpeed::Edr);
        assert_eq!(PortSpeed::from_raw(1).lane_gbps(), Some(2.5));
        assert_eq!(PortSpeed::from_raw(3).lane_gbps(), None);
        // SAFETY: plain data.
        let mut raw: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        raw.active_width = 2;
        raw.active_speed = 4;
        assert_eq!(PortAttr(raw).rate_gbps(), Some(40.0));
        raw.active_speed = 0;
        assert_eq!(PortAttr(raw).rate_gbps(), None);
    }
}
