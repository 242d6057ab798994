//! The on-demand paging capabilities of a device (`odp_caps` of
//! `ibv_device_attr_ex`), read by
//! [`DeviceAttr::odp_caps`](crate::DeviceAttr::odp_caps).

use bitflags::bitflags;

use crate::sys;

bitflags! {
    /// What on-demand paging the device has (`IBV_ODP_SUPPORT*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OdpGeneralCaps: u64 {
        /// Regions registered with
        /// [`ON_DEMAND`](crate::AccessFlags::ON_DEMAND) (`IBV_ODP_SUPPORT`).
        const SUPPORT = sys::IBV_ODP_SUPPORT as u64;
        /// One implicit region over the whole address space
        /// (`IBV_ODP_SUPPORT_IMPLICIT`).
        const IMPLICIT = sys::IBV_ODP_SUPPORT_IMPLICIT as u64;
    }
}

bitflags! {
    /// The operations of one transport that may use on-demand paged
    /// memory (`IBV_ODP_SUPPORT_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OdpTransportCaps: u32 {
        /// Sends from it.
        const SEND = sys::IBV_ODP_SUPPORT_SEND;
        /// Receives into it.
        const RECV = sys::IBV_ODP_SUPPORT_RECV;
        /// RDMA WRITEs into it (as the target).
        const WRITE = sys::IBV_ODP_SUPPORT_WRITE;
        /// RDMA READs of it (as the target).
        const READ = sys::IBV_ODP_SUPPORT_READ;
        /// Atomics on it.
        const ATOMIC = sys::IBV_ODP_SUPPORT_ATOMIC;
        /// Receives of a shared receive queue into it.
        const SRQ_RECV = sys::IBV_ODP_SUPPORT_SRQ_RECV;
    }
}

/// The on-demand paging capabilities of a device. All empty where the
/// device has none (siw; rxe before kernel 6.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OdpCaps {
    /// Whether the device pages on demand at all, and implicitly.
    pub general: OdpGeneralCaps,
    /// What RC queue pairs may do with on-demand memory.
    pub rc: OdpTransportCaps,
    /// What UC queue pairs may do with it.
    pub uc: OdpTransportCaps,
    /// What UD queue pairs may do with it.
    pub ud: OdpTransportCaps,
}

impl OdpCaps {
    /// The capabilities of the C structure; bits this crate does not name
    /// are kept.
    pub fn from_raw(raw: &sys::ibv_odp_caps) -> OdpCaps {
        let t = &raw.per_transport_caps;
        OdpCaps {
            general: OdpGeneralCaps::from_bits_retain(raw.general_caps),
            rc: OdpTransportCaps::from_bits_retain(t.rc_odp_caps),
            uc: OdpTransportCaps::from_bits_retain(t.uc_odp_caps),
            ud: OdpTransportCaps::from_bits_retain(t.ud_odp_caps),
        }
    }

    /// Whether regions may be registered with
    /// [`ON_DEMAND`](crate::AccessFlags::ON_DEMAND).
    pub fn supported(&self) -> bool {
        self.general.contains(OdpGeneralCaps::SUPPORT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odp_caps_read_each_field_of_the_c_struct() {
        // SAFETY: plain data.
        let mut raw: sys::ibv_odp_caps = unsafe { std::mem::zeroed() };
        raw.general_caps = (sys::IBV_ODP_SUPPORT | sys::IBV_ODP_SUPPORT_IMPLICIT) as u64 | 1 << 40;
        raw.per_transport_caps.rc_odp_caps = sys::IBV_ODP_SUPPORT_WRITE | sys::IBV_ODP_SUPPORT_READ;
        raw.per_transport_caps.uc_odp_caps = sys::IBV_ODP_SUPPORT_SEND;
        raw.per_transport_caps.ud_odp_caps = sys::IBV_ODP_SUPPORT_SRQ_RECV | 1 << 20;
        let c = OdpCaps::from_raw(&raw);
        assert!(c.supported());
        assert!(c.general.contains(OdpGeneralCaps::IMPLICIT));
        assert_eq!(c.general.bits(), raw.general_caps, "unknown bits are kept");
        assert_eq!(c.rc, OdpTransportCaps::WRITE | OdpTransportCaps::READ);
        assert_eq!(c.uc, OdpTransportCaps::SEND);
        assert_eq!(c.ud.bits(), raw.per_transport_caps.ud_odp_caps);
        let none = OdpCaps::from_raw(&sys::ibv_odp_caps::default());
        assert!(!none.supported() && none.rc.is_empty());
    }
}
