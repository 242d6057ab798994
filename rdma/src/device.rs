//! The devices of the system.

use std::ffi::CStr;
use std::fmt;
use std::ptr::NonNull;

use crate::sys;
use crate::{Context, Error, Result};

/// The list of RDMA devices, as `ibv_get_device_list` returns it.
///
/// A [`Context`] opened from one of its devices stays valid after the list is
/// dropped.
pub struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

// SAFETY: the list is an immutable array of device pointers owned by this
// value; libibverbs' device objects are safe to use from any thread.
unsafe impl Send for DeviceList {}
// SAFETY: as above; `&DeviceList` only reads.
unsafe impl Sync for DeviceList {}

impl DeviceList {
    /// Lists the RDMA devices of the system.
    pub fn new() -> Result<DeviceList> {
        let mut n = 0;
        // SAFETY: `n` is writable; the returned array is owned by the list.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        let list = NonNull::new(list).ok_or_else(|| Error::last("ibv_get_device_list"))?;
        Ok(DeviceList {
            list,
            len: n.max(0) as usize,
        })
    }

    /// The number of devices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no devices.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The devices, in the order libibverbs lists them.
    pub fn iter(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        // SAFETY: the array holds `len` valid, non-NULL device pointers for
        // as long as the list lives, which the returned borrows cannot outlive.
        (0..self.len).map(move |i| Device {
            raw: unsafe { *self.list.as_ptr().add(i) },
            _list: self,
        })
    }

    /// The device called `name` (`rxe0`), if there is one.
    pub fn find(&self, name: &str) -> Option<Device<'_>> {
        self.iter().find(|d| d.name() == name)
    }

    /// Opens the device called `name`; `ENODEV` naming the devices there are
    /// if there is none.
    pub fn open(&self, name: &str) -> Result<Context> {
        match self.find(name) {
            Some(d) => d.open(),
            None => {
                let names: Vec<String> = self.iter().map(|d| d.name().to_string()).collect();
                Err(
                    Error::new("ibv_open_device", libc::ENODEV).with_hint(format!(
                        "no RDMA device named {name:?}; there are {names:?}"
                    )),
                )
            }
        }
    }

    /// The device whose node GUID is `guid`, if there is one.
    pub fn find_by_guid(&self, guid: u64) -> Option<Device<'_>> {
        self.iter().find(|d| d.guid() == guid)
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the array came from ibv_get_device_list and is freed once;
        // contexts opened from it hold their own references to the devices.
        unsafe { sys::ibv_free_device_list(self.list.as_ptr()) }
    }
}

impl fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One device of a [`DeviceList`].
#[derive(Clone, Copy)]
pub struct Device<'list> {
    raw: *mut sys::ibv_device,
    _list: &'list DeviceList,
}

/// What kind of node a device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeType {
    /// An InfiniBand or RoCE channel adapter.
    Ca,
    /// An InfiniBand switch.
    Switch,
    /// An InfiniBand router.
    Router,
    /// An iWARP NIC.
    Rnic,
    /// A usNIC device.
    Usnic,
    /// A usNIC device over UDP.
    UsnicUdp,
    /// A device without a transport (EFA and the like).
    Unspecified,
    /// A value this crate does not know.
    Other(i32),
}

impl NodeType {
    /// The `ibv_node_type` value.
    pub fn raw(self) -> sys::ibv_node_type {
        match self {
            NodeType::Ca => sys::IBV_NODE_CA,
            NodeType::Switch => sys::IBV_NODE_SWITCH,
            NodeType::Router => sys::IBV_NODE_ROUTER,
            NodeType::Rnic => sys::IBV_NODE_RNIC,
            NodeType::Usnic => sys::IBV_NODE_USNIC,
            NodeType::UsnicUdp => sys::IBV_NODE_USNIC_UDP,
            NodeType::Unspecified => sys::IBV_NODE_UNSPECIFIED,
            NodeType::Other(n) => n,
        }
    }

    /// The node type of an `ibv_node_type` value.
    pub fn from_raw(n: sys::ibv_node_type) -> NodeType {
        match n {
            sys::IBV_NODE_CA => NodeType::Ca,
            sys::IBV_NODE_SWITCH => NodeType::Switch,
            sys::IBV_NODE_ROUTER => NodeType::Router,
            sys::IBV_NODE_RNIC => NodeType::Rnic,
            sys::IBV_NODE_USNIC => NodeType::Usnic,
            sys::IBV_NODE_USNIC_UDP => NodeType::UsnicUdp,
            sys::IBV_NODE_UNSPECIFIED => NodeType::Unspecified,
            other => NodeType::Other(other),
        }
    }
}

/// libibverbs' name of the node type (`ibv_node_type_str`: `InfiniBand
/// channel adapter`, `iWARP`, ...).
impl fmt::Display for NodeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: takes any value; returns a string constant of the library.
        f.write_str(unsafe { crate::os::static_c_str(sys::ibv_node_type_str(self.raw())) })
    }
}

/// Which transport a device speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportType {
    /// InfiniBand, also RoCE.
    Ib,
    /// iWARP.
    Iwarp,
    /// usNIC.
    Usnic,
    /// usNIC over UDP.
    UsnicUdp,
    /// No specific transport.
    Unspecified,
    /// A value this crate does not know.
    Other(i32),
}

impl<'list> Device<'list> {
    /// The kernel name of the device (`rxe0`).
    pub fn name(&self) -> &str {
        // SAFETY: the device is valid while the list lives; its name is a
        // NUL-terminated array inside it.
        let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(self.raw)) };
        name.to_str().unwrap_or("?")
    }

    /// The node GUID, in host byte order.
    pub fn guid(&self) -> u64 {
        // SAFETY: the device is valid while the list lives.
        u64::from_be(unsafe { sys::ibv_get_device_guid(self.raw) })
    }

    /// The kernel's index of the device (`ibv_get_device_index`); `None`
    /// where the kernel does not tell it (no netlink device query).
    pub fn index(&self) -> Option<u32> {
        // SAFETY: the device is valid while the list lives.
        let i = unsafe { sys::ibv_get_device_index(self.raw) };
        u32::try_from(i).ok()
    }

    /// The node type.
    pub fn node_type(&self) -> NodeType {
        // SAFETY: the device is valid while the list lives.
        NodeType::from_raw(unsafe { (*self.raw).node_type })
    }

    /// The transport type.
    pub fn transport_type(&self) -> TransportType {
        // SAFETY: the device is valid while the list lives.
        match unsafe { (*self.raw).transport_type } {
            sys::IBV_TRANSPORT_IB => TransportType::Ib,
            sys::IBV_TRANSPORT_IWARP => TransportType::Iwarp,
            sys::IBV_TRANSPORT_USNIC => TransportType::Usnic,
            sys::IBV_TRANSPORT_USNIC_UDP => TransportType::UsnicUdp,
            sys::IBV_TRANSPORT_UNSPECIFIED => TransportType::Unspecified,
            other => TransportType::Other(other),
        }
    }

    /// Opens the device.
    pub fn open(&self) -> Result<Context> {
        // SAFETY: the device is valid while the list lives.
        let ctx = unsafe { sys::ibv_open_device(self.raw) };
        let ctx = NonNull::new(ctx).ok_or_else(|| Error::last("ibv_open_device"))?;
        // SAFETY: a context just opened, owned by nobody else.
        Ok(unsafe { Context::from_raw(ctx) })
    }

    /// The raw device pointer, valid while the list lives.
    pub fn as_raw(&self) -> *mut sys::ibv_device {
        self.raw
    }
}

impl fmt::Debug for Device<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .field("guid", &format_args!("{:#018x}", self.guid()))
            .field("node_type", &self.node_type())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node types over libibverbs' range and past both ends: each keeps
    /// its value and prints libibverbs' own name of it.
    #[test]
    #[cfg_attr(miri, ignore = "calls libibverbs")]
    fn node_types_keep_their_value_and_print_libibverbs_names() {
        for v in -3..12 {
            let t = NodeType::from_raw(v);
            assert_eq!(t.raw(), v, "{t:?}");
            // SAFETY: takes any value; returns a string constant.
            let c = unsafe { crate::os::static_c_str(sys::ibv_node_type_str(v)) };
            assert_eq!(t.to_string(), c, "{t:?}");
        }
        assert_eq!(NodeType::Rnic.to_string(), "iWARP NIC");
        assert_eq!(NodeType::Ca.to_string(), "InfiniBand channel adapter");
    }
}
