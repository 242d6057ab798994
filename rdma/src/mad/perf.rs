//! Performance management attributes (class 0x04, IBA 16.1.3): PortCounters
//! and PortCountersExtended. A PerfMgt MAD has 40 reserved bytes after the
//! common header; its data begins at byte 64.

use super::attr::{id, Attribute};
use super::wire::{nibbles, In, Out};
use super::Result;

/// Where PerfMgt data begins in a MAD.
pub const PERF_DATA_OFFSET: usize = 64;

/// PortCounters (IBA 16.1.3.5, 44 bytes): the 16- and 32-bit error and
/// traffic counters of a port. Data counters count 4-byte words.
///
/// | byte | field |
/// |---|---|
/// | 0 | reserved |
/// | 1 | PortSelect |
/// | 2-3 | CounterSelect |
/// | 4-5 | SymbolErrorCounter |
/// | 6 | LinkErrorRecoveryCounter |
/// | 7 | LinkDownedCounter |
/// | 8-9 | PortRcvErrors |
/// | 10-11 | PortRcvRemotePhysicalErrors |
/// | 12-13 | PortRcvSwitchRelayErrors |
/// | 14-15 | PortXmitDiscards |
/// | 16 | PortXmitConstraintErrors |
/// | 17 | PortRcvConstraintErrors |
/// | 18 | CounterSelect2 |
/// | 19 | LocalLinkIntegrityErrors (4), ExcessiveBufferOverrunErrors (4) |
/// | 20-21 | QP1Dropped |
/// | 22-23 | VL15Dropped |
/// | 24-27 | PortXmitData |
/// | 28-31 | PortRcvData |
/// | 32-35 | PortXmitPkts |
/// | 36-39 | PortRcvPkts |
/// | 40-43 | PortXmitWait |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct PortCounters {
    pub port_select: u8,
    pub counter_select: u16,
    pub symbol_error_counter: u16,
    pub link_error_recovery_counter: u8,
    pub link_downed_counter: u8,
    pub port_rcv_errors: u16,
    pub port_rcv_remote_physical_errors: u16,
    pub port_rcv_switch_relay_errors: u16,
    pub port_xmit_discards: u16,
    pub port_xmit_constraint_errors: u8,
    pub port_rcv_constraint_errors: u8,
    pub counter_select2: u8,
    /// 4 bits.
    pub local_link_integrity_errors: u8,
    /// 4 bits.
    pub excessive_buffer_overrun_errors: u8,
    pub qp1_dropped: u16,
    pub vl15_dropped: u16,
    pub port_xmit_data: u32,
    pub port_rcv_data: u32,
    pub port_xmit_pkts: u32,
    pub port_rcv_pkts: u32,
    pub port_xmit_wait: u32,
}

impl Attribute for PortCounters {
    const ID: u16 = id::PORT_COUNTERS;
    const NAME: &'static str = "PortCounters";
    const SIZE: usize = 44;

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let b19 = r.u8(19)?;
        Ok(PortCounters {
            port_select: r.u8(1)?,
            counter_select: r.u16(2)?,
            symbol_error_counter: r.u16(4)?,
            link_error_recovery_counter: r.u8(6)?,
            link_downed_counter: r.u8(7)?,
            port_rcv_errors: r.u16(8)?,
            port_rcv_remote_physical_errors: r.u16(10)?,
            port_rcv_switch_relay_errors: r.u16(12)?,
            port_xmit_discards: r.u16(14)?,
            port_xmit_constraint_errors: r.u8(16)?,
            port_rcv_constraint_errors: r.u8(17)?,
            counter_select2: r.u8(18)?,
            local_link_integrity_errors: b19 >> 4,
            excessive_buffer_overrun_errors: b19 & 0xf,
            qp1_dropped: r.u16(20)?,
            vl15_dropped: r.u16(22)?,
            port_xmit_data: r.u32(24)?,
            port_rcv_data: r.u32(28)?,
            port_xmit_pkts: r.u32(32)?,
            port_rcv_pkts: r.u32(36)?,
            port_xmit_wait: r.u32(40)?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        w.u8(0, 0)?;
        w.u8(1, self.port_select)?;
        w.u16(2, self.counter_select)?;
        w.u16(4, self.symbol_error_counter)?;
        w.u8(6, self.link_error_recovery_counter)?;
        w.u8(7, self.link_downed_counter)?;
        w.u16(8, self.port_rcv_errors)?;
        w.u16(10, self.port_rcv_remote_physical_errors)?;
        w.u16(12, self.port_rcv_switch_relay_errors)?;
        w.u16(14, self.port_xmit_discards)?;
        w.u8(16, self.port_xmit_constraint_errors)?;
        w.u8(17, self.port_rcv_constraint_errors)?;
        w.u8(18, self.counter_select2)?;
        w.u8(
            19,
            nibbles(
                "LocalLinkIntegrityErrors",
                self.local_link_integrity_errors,
                "ExcessiveBufferOverrunErrors",
                self.excessive_buffer_overrun_errors,
            )?,
        )?;
        w.u16(20, self.qp1_dropped)?;
        w.u16(22, self.vl15_dropped)?;
        w.u32(24, self.port_xmit_data)?;
        w.u32(28, self.port_rcv_data)?;
        w.u32(32, self.port_xmit_pkts)?;
        w.u32(36, self.port_rcv_pkts)?;
        w.u32(40, self.port_xmit_wait)
    }
}

/// PortCountersExtended (IBA 16.1.4.11, 72 bytes): the 64-bit traffic
/// counters of a port. Data counters count 4-byte words.
///
/// | byte | field |
/// |---|---|
/// | 0 | reserved |
/// | 1 | PortSelect |
/// | 2-3 | CounterSelect |
/// | 4-7 | reserved |
/// | 8-15 | PortXmitData |
/// | 16-23 | PortRcvData |
/// | 24-31 | PortXmitPkts |
/// | 32-39 | PortRcvPkts |
/// | 40-47 | PortUnicastXmitPkts |
/// | 48-55 | PortUnicastRcvPkts |
/// | 56-63 | PortMulticastXmitPkts |
/// | 64-71 | PortMulticastRcvPkts |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct PortCountersExtended {
    pub port_select: u8,
    pub counter_select: u16,
    pub port_xmit_data: u64,
    pub port_rcv_data: u64,
    pub port_xmit_pkts: u64,
    pub port_rcv_pkts: u64,
    pub port_unicast_xmit_pkts: u64,
    pub port_unicast_rcv_pkts: u64,
    pub port_multicast_xmit_pkts: u64,
    pub port_multicast_rcv_pkts: u64,
}

impl Attribute for PortCountersExtended {
    const ID: u16 = id::PORT_COUNTERS_EXTENDED;
    const NAME: &'static str = "PortCountersExtended";
    const SIZE: usize = 72;

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        Ok(PortCountersExtended {
            port_select: r.u8(1)?,
            counter_select: r.u16(2)?,
            port_xmit_data: r.u64(8)?,
            port_rcv_data: r.u64(16)?,
            port_xmit_pkts: r.u64(24)?,
            port_rcv_pkts: r.u64(32)?,
            port_unicast_xmit_pkts: r.u64(40)?,
            port_unicast_rcv_pkts: r.u64(48)?,
            port_multicast_xmit_pkts: r.u64(56)?,
            port_multicast_rcv_pkts: r.u64(64)?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        w.u8(0, 0)?;
        w.u8(1, self.port_select)?;
        w.u16(2, self.counter_select)?;
        w.u32(4, 0)?;
        w.u64(8, self.port_xmit_data)?;
        w.u64(16, self.port_rcv_data)?;
        w.u64(24, self.port_xmit_pkts)?;
        w.u64(32, self.port_rcv_pkts)?;
        w.u64(40, self.port_unicast_xmit_pkts)?;
        w.u64(48, self.port_unicast_rcv_pkts)?;
        w.u64(56, self.port_multicast_xmit_pkts)?;
        w.u64(64, self.port_multicast_rcv_pkts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::Error;

    #[test]
    fn port_counters_match_the_spec_layout() {
        let want: [u8; 44] = [
            0x00, 0x01, 0xff, 0xff, // reserved, PortSelect 1, CounterSelect
            0x00, 0x05, 0x06, 0x07, // SymbolErrorCounter, LinkErrorRecovery, LinkDowned
            0x00, 0x08, 0x00, 0x09, 0x00, 0x0a, 0x00,
            0x0b, // Rcv, RcvRemotePhys, SwitchRelay, XmitDiscards
            0x0c, 0x0d, 0x0e, // XmitConstraint, RcvConstraint, CounterSelect2
            0x3f, // LocalLinkIntegrity 3, ExcessiveBufferOverrun 15
            0x00, 0x10, 0x00, 0x11, // QP1Dropped, VL15Dropped
            0x00, 0x00, 0x01, 0x00, // PortXmitData
            0x00, 0x00, 0x02, 0x00, // PortRcvData
            0x00, 0x00, 0x00, 0x30, // PortXmitPkts
            0x00, 0x00, 0x00, 0x40, // PortRcvPkts
            0xff, 0xff, 0xff, 0xff, // PortXmitWait
        ];
        let pc = PortCounters {
            port_select: 1,
            counter_select: 0xffff,
            symbol_error_counter: 5,
            link_error_recovery_counter: 6,
            link_downed_counter: 7,
            port_rcv_errors: 8,
            port_rcv_remote_physical_errors: 9,
            port_rcv_switch_relay_errors: 10,
            port_xmit_discards: 11,
            port_xmit_constraint_errors: 12,
            port_rcv_constraint_errors: 13,
            counter_select2: 14,
            local_link_integrity_errors: 3,
            excessive_buffer_overrun_errors: 15,
            qp1_dropped: 16,
            vl15_dropped: 17,
            port_xmit_data: 0x100,
            port_rcv_data: 0x200,
            port_xmit_pkts: 0x30,
            port_rcv_pkts: 0x40,
            port_xmit_wait: u32::MAX,
        };
        assert_eq!(pc.to_bytes().unwrap(), want);
        assert_eq!(PortCounters::decode(&want).unwrap(), pc);
        let bad = PortCounters {
            local_link_integrity_errors: 16,
            ..pc
        };
        assert!(matches!(bad.to_bytes(), Err(Error::FieldOverflow { .. })));
        assert!(PortCounters::decode(&want[..43]).is_err());
    }

    #[test]
    fn port_counters_extended_match_the_spec_layout() {
        let mut want = [0u8; 72];
        want[1] = 2;
        want[2..4].copy_from_slice(&[0x00, 0xff]);
        for (i, off) in (8..72).step_by(8).enumerate() {
            want[off..off + 8].copy_from_slice(&(0x0100_0000_0000_0000 + i as u64).to_be_bytes());
        }
        let v = |i: u64| 0x0100_0000_0000_0000 + i;
        let pce = PortCountersExtended {
            port_select: 2,
            counter_select: 0xff,
            port_xmit_data: v(0),
            port_rcv_data: v(1),
            port_xmit_pkts: v(2),
            port_rcv_pkts: v(3),
            port_unicast_xmit_pkts: v(4),
            port_unicast_rcv_pkts: v(5),
            port_multicast_xmit_pkts: v(6),
            port_multicast_rcv_pkts: v(7),
        };
        assert_eq!(pce.to_bytes().unwrap(), want);
        assert_eq!(PortCountersExtended::decode(&want).unwrap(), pce);
        assert!(PortCountersExtended::decode(&want[..71]).is_err());
    }
}
