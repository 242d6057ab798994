//! Performance management attributes (class 0x04, IBA 16.1.3):
//! PortSamplesControl, PortCounters and PortCountersExtended. A PerfMgt MAD
//! has 40 reserved bytes after the common header; its data begins at byte
//! 64.

use super::attr::{id, Attribute};
use super::wire::{fit, nibbles, In, Out};
use super::{class, Result};

fn perf(c: u8) -> bool {
    c == class::PERF_MGT
}

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

    fn in_class(c: u8) -> bool {
        perf(c)
    }

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

/// PortCountersExtended (IBA 16.1.4.11, 184 bytes): the 64-bit counters
/// of a port. Data counters count 4-byte words. CounterSelect selects the
/// traffic counters (bytes 8-71), CounterSelect2 the error counters that
/// follow them (bytes 72-183, IBA 1.3; a port without them leaves them 0).
///
/// | byte | field |
/// |---|---|
/// | 0 | reserved |
/// | 1 | PortSelect |
/// | 2-3 | CounterSelect |
/// | 4-7 | CounterSelect2 |
/// | 8-15 | PortXmitData |
/// | 16-23 | PortRcvData |
/// | 24-31 | PortXmitPkts |
/// | 32-39 | PortRcvPkts |
/// | 40-47 | PortUnicastXmitPkts |
/// | 48-55 | PortUnicastRcvPkts |
/// | 56-63 | PortMulticastXmitPkts |
/// | 64-71 | PortMulticastRcvPkts |
/// | 72-79 | SymbolErrorCounter |
/// | 80-87 | LinkErrorRecoveryCounter |
/// | 88-95 | LinkDownedCounter |
/// | 96-103 | PortRcvErrors |
/// | 104-111 | PortRcvRemotePhysicalErrors |
/// | 112-119 | PortRcvSwitchRelayErrors |
/// | 120-127 | PortXmitDiscards |
/// | 128-135 | PortXmitConstraintErrors |
/// | 136-143 | PortRcvConstraintErrors |
/// | 144-151 | LocalLinkIntegrityErrors |
/// | 152-159 | ExcessiveBufferOverrunErrors |
/// | 160-167 | VL15Dropped |
/// | 168-175 | PortXmitWait |
/// | 176-183 | QP1Dropped |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct PortCountersExtended {
    pub port_select: u8,
    pub counter_select: u16,
    pub counter_select2: u32,
    pub port_xmit_data: u64,
    pub port_rcv_data: u64,
    pub port_xmit_pkts: u64,
    pub port_rcv_pkts: u64,
    pub port_unicast_xmit_pkts: u64,
    pub port_unicast_rcv_pkts: u64,
    pub port_multicast_xmit_pkts: u64,
    pub port_multicast_rcv_pkts: u64,
    pub symbol_error_counter: u64,
    pub link_error_recovery_counter: u64,
    pub link_downed_counter: u64,
    pub port_rcv_errors: u64,
    pub port_rcv_remote_physical_errors: u64,
    pub port_rcv_switch_relay_errors: u64,
    pub port_xmit_discards: u64,
    pub port_xmit_constraint_errors: u64,
    pub port_rcv_constraint_errors: u64,
    pub local_link_integrity_errors: u64,
    pub excessive_buffer_overrun_errors: u64,
    pub vl15_dropped: u64,
    pub port_xmit_wait: u64,
    pub qp1_dropped: u64,
}

impl PortCountersExtended {
    /// The 64-bit counters in wire order (bytes 8 to 183, 8 bytes each).
    fn counters(&self) -> [u64; 22] {
        [
            self.port_xmit_data,
            self.port_rcv_data,
            self.port_xmit_pkts,
            self.port_rcv_pkts,
            self.port_unicast_xmit_pkts,
            self.port_unicast_rcv_pkts,
            self.port_multicast_xmit_pkts,
            self.port_multicast_rcv_pkts,
            self.symbol_error_counter,
            self.link_error_recovery_counter,
            self.link_downed_counter,
            self.port_rcv_errors,
            self.port_rcv_remote_physical_errors,
            self.port_rcv_switch_relay_errors,
            self.port_xmit_discards,
            self.port_xmit_constraint_errors,
            self.port_rcv_constraint_errors,
            self.local_link_integrity_errors,
            self.excessive_buffer_overrun_errors,
            self.vl15_dropped,
            self.port_xmit_wait,
            self.qp1_dropped,
        ]
    }
}

impl Attribute for PortCountersExtended {
    const ID: u16 = id::PORT_COUNTERS_EXTENDED;
    const NAME: &'static str = "PortCountersExtended";
    const SIZE: usize = 184;

    fn in_class(c: u8) -> bool {
        perf(c)
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let c = |i: usize| r.u64(8 + 8 * i);
        Ok(PortCountersExtended {
            port_select: r.u8(1)?,
            counter_select: r.u16(2)?,
            counter_select2: r.u32(4)?,
            port_xmit_data: c(0)?,
            port_rcv_data: c(1)?,
            port_xmit_pkts: c(2)?,
            port_rcv_pkts: c(3)?,
            port_unicast_xmit_pkts: c(4)?,
            port_unicast_rcv_pkts: c(5)?,
            port_multicast_xmit_pkts: c(6)?,
            port_multicast_rcv_pkts: c(7)?,
            symbol_error_counter: c(8)?,
            link_error_recovery_counter: c(9)?,
            link_downed_counter: c(10)?,
            port_rcv_errors: c(11)?,
            port_rcv_remote_physical_errors: c(12)?,
            port_rcv_switch_relay_errors: c(13)?,
            port_xmit_discards: c(14)?,
            port_xmit_constraint_errors: c(15)?,
            port_rcv_constraint_errors: c(16)?,
            local_link_integrity_errors: c(17)?,
            excessive_buffer_overrun_errors: c(18)?,
            vl15_dropped: c(19)?,
            port_xmit_wait: c(20)?,
            qp1_dropped: c(21)?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        w.u8(0, 0)?;
        w.u8(1, self.port_select)?;
        w.u16(2, self.counter_select)?;
        w.u32(4, self.counter_select2)?;
        for (i, v) in self.counters().iter().enumerate() {
            w.u64(8 + 8 * i, *v)?;
        }
        Ok(())
    }
}

/// PortSamplesControl (IBA 16.1.3.2, 80 bytes): starts and describes a
/// sampling of up to 15 counters (read back with PortSamplesResult).
///
/// | byte | field |
/// |---|---|
/// | 0 | OpCode |
/// | 1 | PortSelect |
/// | 2 | Tick |
/// | 3 | reserved (5), CounterWidth (3) |
/// | 4-7 | reserved (2), CounterMask0 (3), CounterMasks1to9 (27) |
/// | 8-9 | reserved (1), CounterMasks10to14 (15) |
/// | 10 | SampleMechanisms |
/// | 11 | reserved (6), SampleStatus (2) |
/// | 12-19 | OptionMask |
/// | 20-27 | VendorMask |
/// | 28-31 | SampleStart |
/// | 32-35 | SampleInterval |
/// | 36-37 | Tag |
/// | 38-67 | CounterSelect0 to CounterSelect14 (16 bits each) |
/// | 68-71 | reserved |
/// | 72-79 | SamplesOnlyOptionMask |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct PortSamplesControl {
    pub op_code: u8,
    pub port_select: u8,
    pub tick: u8,
    /// 3 bits.
    pub counter_width: u8,
    /// 3 bits.
    pub counter_mask0: u8,
    /// 27 bits: CounterMask1 to CounterMask9, 3 bits each.
    pub counter_masks1to9: u32,
    /// 15 bits: CounterMask10 to CounterMask14, 3 bits each.
    pub counter_masks10to14: u16,
    pub sample_mechanisms: u8,
    /// 2 bits: 0 done, 1 started, 2 running.
    pub sample_status: u8,
    pub option_mask: u64,
    pub vendor_mask: u64,
    pub sample_start: u32,
    pub sample_interval: u32,
    pub tag: u16,
    pub counter_select: [u16; 15],
    pub samples_only_option_mask: u64,
}

impl Attribute for PortSamplesControl {
    const ID: u16 = id::PORT_SAMPLES_CONTROL;
    const NAME: &'static str = "PortSamplesControl";
    const SIZE: usize = 80;

    fn in_class(c: u8) -> bool {
        perf(c)
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let masks = r.u32(4)?;
        let mut counter_select = [0u16; 15];
        for (i, v) in counter_select.iter_mut().enumerate() {
            *v = r.u16(38 + 2 * i)?;
        }
        Ok(PortSamplesControl {
            op_code: r.u8(0)?,
            port_select: r.u8(1)?,
            tick: r.u8(2)?,
            counter_width: r.u8(3)? & 7,
            counter_mask0: (masks >> 27 & 7) as u8,
            counter_masks1to9: masks & 0x07ff_ffff,
            counter_masks10to14: r.u16(8)? & 0x7fff,
            sample_mechanisms: r.u8(10)?,
            sample_status: r.u8(11)? & 3,
            option_mask: r.u64(12)?,
            vendor_mask: r.u64(20)?,
            sample_start: r.u32(28)?,
            sample_interval: r.u32(32)?,
            tag: r.u16(36)?,
            counter_select,
            samples_only_option_mask: r.u64(72)?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let width = fit("CounterWidth", 3, self.counter_width.into())? as u8;
        let m0 = fit("CounterMask0", 3, self.counter_mask0.into())? as u32;
        let m1 = fit("CounterMasks1to9", 27, self.counter_masks1to9.into())? as u32;
        let m10 = fit("CounterMasks10to14", 15, self.counter_masks10to14.into())? as u16;
        let status = fit("SampleStatus", 2, self.sample_status.into())? as u8;
        w.u8(0, self.op_code)?;
        w.u8(1, self.port_select)?;
        w.u8(2, self.tick)?;
        w.u8(3, width)?;
        w.u32(4, m0 << 27 | m1)?;
        w.u16(8, m10)?;
        w.u8(10, self.sample_mechanisms)?;
        w.u8(11, status)?;
        w.u64(12, self.option_mask)?;
        w.u64(20, self.vendor_mask)?;
        w.u32(28, self.sample_start)?;
        w.u32(32, self.sample_interval)?;
        w.u16(36, self.tag)?;
        for (i, v) in self.counter_select.iter().enumerate() {
            w.u16(38 + 2 * i, *v)?;
        }
        w.u32(68, 0)?;
        w.u64(72, self.samples_only_option_mask)
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
        let mut want = [0u8; 184];
        want[1] = 2;
        want[2..4].copy_from_slice(&[0x00, 0xff]);
        want[4..8].copy_from_slice(&[0x00, 0x00, 0x10, 0x01]);
        for (i, off) in (8..184).step_by(8).enumerate() {
            want[off..off + 8].copy_from_slice(&(0x0100_0000_0000_0000 + i as u64).to_be_bytes());
        }
        let v = |i: u64| 0x0100_0000_0000_0000 + i;
        let pce = PortCountersExtended {
            port_select: 2,
            counter_select: 0xff,
            counter_select2: 0x1001,
            port_xmit_data: v(0),
            port_rcv_data: v(1),
            port_xmit_pkts: v(2),
            port_rcv_pkts: v(3),
            port_unicast_xmit_pkts: v(4),
            port_unicast_rcv_pkts: v(5),
            port_multicast_xmit_pkts: v(6),
            port_multicast_rcv_pkts: v(7),
            symbol_error_counter: v(8),
            link_error_recovery_counter: v(9),
            link_downed_counter: v(10),
            port_rcv_errors: v(11),
            port_rcv_remote_physical_errors: v(12),
            port_rcv_switch_relay_errors: v(13),
            port_xmit_discards: v(14),
            port_xmit_constraint_errors: v(15),
            port_rcv_constraint_errors: v(16),
            local_link_integrity_errors: v(17),
            excessive_buffer_overrun_errors: v(18),
            vl15_dropped: v(19),
            port_xmit_wait: v(20),
            qp1_dropped: v(21),
        };
        assert_eq!(pce.to_bytes().unwrap(), want);
        assert_eq!(PortCountersExtended::decode(&want).unwrap(), pce);
        assert!(PortCountersExtended::decode(&want[..183]).is_err());
        // It fits PerfMgt data (192 bytes from offset 64).
        let mut m = crate::mad::Mad::new(&crate::mad::MadHeader::request(
            class::PERF_MGT,
            1,
            crate::mad::Method::GET,
            1,
            id::PORT_COUNTERS_EXTENDED,
        ));
        m.set_attribute(&pce).unwrap();
        assert_eq!(m.attribute::<PortCountersExtended>().unwrap(), pce);
        assert_eq!(
            &m.as_bytes()[PERF_DATA_OFFSET..PERF_DATA_OFFSET + 184],
            &want
        );
    }

    #[test]
    fn port_samples_control_matches_the_spec_layout() {
        let mut counter_select = [0u16; 15];
        for (i, c) in counter_select.iter_mut().enumerate() {
            *c = 0x100 + i as u16;
        }
        let psc = PortSamplesControl {
            op_code: 1,
            port_select: 2,
            tick: 3,
            counter_width: 5,
            counter_mask0: 7,
            counter_masks1to9: 0x0555_5555,
            counter_masks10to14: 0x7001,
            sample_mechanisms: 4,
            sample_status: 2,
            option_mask: 0x0102_0304_0506_0708,
            vendor_mask: 0x1112_1314_1516_1718,
            sample_start: 0x2122_2324,
            sample_interval: 0x3132_3334,
            tag: 0x4142,
            counter_select,
            samples_only_option_mask: 0x5152_5354_5556_5758,
        };
        let b = psc.to_bytes().unwrap();
        assert_eq!(
            &b[..12],
            &[1, 2, 3, 5, 0x3d, 0x55, 0x55, 0x55, 0x70, 0x01, 4, 2]
        );
        assert_eq!(&b[12..14], &[1, 2]);
        assert_eq!(&b[36..40], &[0x41, 0x42, 0x01, 0x00]);
        assert_eq!(&b[66..72], &[0x01, 0x0e, 0, 0, 0, 0]);
        assert_eq!(&b[72..74], &[0x51, 0x52]);
        assert_eq!(PortSamplesControl::decode(&b).unwrap(), psc);
        for bad in [
            PortSamplesControl {
                counter_width: 8,
                ..psc
            },
            PortSamplesControl {
                counter_mask0: 8,
                ..psc
            },
            PortSamplesControl {
                counter_masks1to9: 1 << 27,
                ..psc
            },
            PortSamplesControl {
                counter_masks10to14: 0x8000,
                ..psc
            },
            PortSamplesControl {
                sample_status: 4,
                ..psc
            },
        ] {
            assert!(matches!(bad.to_bytes(), Err(Error::FieldOverflow { .. })));
        }
        assert!(PortSamplesControl::decode(&b[..79]).is_err());
    }
}
