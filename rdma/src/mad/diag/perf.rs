//! PortCounters, PortCountersExtended and PortSamplesControl as `perfquery`
//! prints them.

use std::fmt::{self, Display, Formatter};

use super::{line, Hex};
use crate::mad::{ClassPortInfo, PortCounters, PortCountersExtended, PortSamplesControl};

/// PerfMgt ClassPortInfo:CapabilityMask IsExtendedWidthSupported: the
/// extended counters have the unicast and multicast packet counts.
const EXT_WIDTH_SUPPORTED: u16 = 1 << 9;
/// PerfMgt ClassPortInfo:CapabilityMask2 IsAdditionalPortCountersExtendedSupported:
/// the extended counters have the error counters too.
const ADDL_PORT_CTRS_EXT_SUP: u32 = 1 << 1;

/// PortCounters as `perfquery` prints it: see [`PortCounters::diag`].
#[derive(Clone, Copy, Debug)]
pub struct PortCountersDiag<'a>(&'a PortCounters);

impl PortCounters {
    /// The attribute as `perfquery` prints it after its `#` line: one
    /// `Name:.....value` line a field, each ending in a newline.
    pub fn diag(&self) -> PortCountersDiag<'_> {
        PortCountersDiag(self)
    }
}

impl Display for PortCountersDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let pc = self.0;
        line(f, 0, "PortSelect", pc.port_select)?;
        line(f, 0, "CounterSelect", Hex(pc.counter_select.into(), 2))?;
        line(f, 0, "SymbolErrorCounter", pc.symbol_error_counter)?;
        line(
            f,
            0,
            "LinkErrorRecoveryCounter",
            pc.link_error_recovery_counter,
        )?;
        line(f, 0, "LinkDownedCounter", pc.link_downed_counter)?;
        line(f, 0, "PortRcvErrors", pc.port_rcv_errors)?;
        line(
            f,
            0,
            "PortRcvRemotePhysicalErrors",
            pc.port_rcv_remote_physical_errors,
        )?;
        line(
            f,
            0,
            "PortRcvSwitchRelayErrors",
            pc.port_rcv_switch_relay_errors,
        )?;
        line(f, 0, "PortXmitDiscards", pc.port_xmit_discards)?;
        line(
            f,
            0,
            "PortXmitConstraintErrors",
            pc.port_xmit_constraint_errors,
        )?;
        line(
            f,
            0,
            "PortRcvConstraintErrors",
            pc.port_rcv_constraint_errors,
        )?;
        line(f, 0, "CounterSelect2", Hex(pc.counter_select2.into(), 1))?;
        line(
            f,
            0,
            "LocalLinkIntegrityErrors",
            pc.local_link_integrity_errors,
        )?;
        line(
            f,
            0,
            "ExcessiveBufferOverrunErrors",
            pc.excessive_buffer_overrun_errors,
        )?;
        line(f, 0, "QP1Dropped", pc.qp1_dropped)?;
        line(f, 0, "VL15Dropped", pc.vl15_dropped)?;
        line(f, 0, "PortXmitData", pc.port_xmit_data)?;
        line(f, 0, "PortRcvData", pc.port_rcv_data)?;
        line(f, 0, "PortXmitPkts", pc.port_xmit_pkts)?;
        line(f, 0, "PortRcvPkts", pc.port_rcv_pkts)?;
        line(f, 0, "PortXmitWait", pc.port_xmit_wait)
    }
}

/// PortCountersExtended as `perfquery -x` prints it: see
/// [`PortCountersExtended::diag`].
#[derive(Clone, Copy, Debug)]
pub struct PortCountersExtendedDiag<'a> {
    counters: &'a PortCountersExtended,
    capability_mask: u16,
    capability_mask2: u32,
}

impl PortCountersExtended {
    /// The attribute as `perfquery -x` prints it after its `#` line, with
    /// the fields the agent's PerfMgt ClassPortInfo says it has: the
    /// unicast and multicast counts with IsExtendedWidthSupported, the error
    /// counters with IsAdditionalPortCountersExtendedSupported.
    pub fn diag<'a>(&'a self, class_port_info: &ClassPortInfo) -> PortCountersExtendedDiag<'a> {
        PortCountersExtendedDiag {
            counters: self,
            capability_mask: class_port_info.capability_mask,
            capability_mask2: class_port_info.capability_mask2,
        }
    }
}

impl Display for PortCountersExtendedDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let pc = self.counters;
        line(f, 0, "PortSelect", pc.port_select)?;
        line(f, 0, "CounterSelect", Hex(pc.counter_select.into(), 2))?;
        line(f, 0, "PortXmitData", pc.port_xmit_data)?;
        line(f, 0, "PortRcvData", pc.port_rcv_data)?;
        line(f, 0, "PortXmitPkts", pc.port_xmit_pkts)?;
        line(f, 0, "PortRcvPkts", pc.port_rcv_pkts)?;
        if self.capability_mask & EXT_WIDTH_SUPPORTED != 0 {
            line(f, 0, "PortUnicastXmitPkts", pc.port_unicast_xmit_pkts)?;
            line(f, 0, "PortUnicastRcvPkts", pc.port_unicast_rcv_pkts)?;
            line(f, 0, "PortMulticastXmitPkts", pc.port_multicast_xmit_pkts)?;
            line(f, 0, "PortMulticastRcvPkts", pc.port_multicast_rcv_pkts)?;
        }
        if self.capability_mask2 & ADDL_PORT_CTRS_EXT_SUP != 0 {
            line(f, 0, "CounterSelect2", Hex(pc.counter_select2.into(), 4))?;
            let rows: [(&str, u64); 14] = [
                ("SymbolErrorCounter", pc.symbol_error_counter),
                ("LinkErrorRecoveryCounter", pc.link_error_recovery_counter),
                ("LinkDownedCounter", pc.link_downed_counter),
                ("PortRcvErrors", pc.port_rcv_errors),
                (
                    "PortRcvRemotePhysicalErrors",
                    pc.port_rcv_remote_physical_errors,
                ),
                ("PortRcvSwitchRelayErrors", pc.port_rcv_switch_relay_errors),
                ("PortXmitDiscards", pc.port_xmit_discards),
                ("PortXmitConstraintErrors", pc.port_xmit_constraint_errors),
                ("PortRcvConstraintErrors", pc.port_rcv_constraint_errors),
                ("LocalLinkIntegrityErrors", pc.local_link_integrity_errors),
                (
                    "ExcessiveBufferOverrunErrors",
                    pc.excessive_buffer_overrun_errors,
                ),
                ("VL15Dropped", pc.vl15_dropped),
                ("PortXmitWait", pc.port_xmit_wait),
                ("QP1Dropped", pc.qp1_dropped),
            ];
            for (n, v) in rows {
                line(f, 0, n, v)?;
            }
        }
        Ok(())
    }
}

/// PortSamplesControl as `perfquery -c` prints it: see
/// [`PortSamplesControl::diag`].
#[derive(Clone, Copy, Debug)]
pub struct PortSamplesControlDiag<'a>(&'a PortSamplesControl);

impl PortSamplesControl {
    /// The attribute as `perfquery -c` prints it after its `#` line: one
    /// `Name:.....value` line a field (`CounterSelect0` to
    /// `CounterSelect14`), each ending in a newline.
    pub fn diag(&self) -> PortSamplesControlDiag<'_> {
        PortSamplesControlDiag(self)
    }
}

impl Display for PortSamplesControlDiag<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let p = self.0;
        line(f, 0, "OpCode", Hex(p.op_code.into(), 1))?;
        line(f, 0, "PortSelect", p.port_select)?;
        line(f, 0, "Tick", Hex(p.tick.into(), 1))?;
        line(f, 0, "CounterWidth", p.counter_width)?;
        line(f, 0, "CounterMask0", Hex(p.counter_mask0.into(), 1))?;
        line(f, 0, "CounterMasks1to9", Hex(p.counter_masks1to9.into(), 4))?;
        line(
            f,
            0,
            "CounterMasks10to14",
            Hex(p.counter_masks10to14.into(), 2),
        )?;
        line(f, 0, "SampleMechanisms", p.sample_mechanisms)?;
        line(f, 0, "SampleStatus", p.sample_status)?;
        line(f, 0, "OptionMask", Hex(p.option_mask, 8))?;
        line(f, 0, "VendorMask", Hex(p.vendor_mask, 8))?;
        line(f, 0, "SampleStart", p.sample_start)?;
        line(f, 0, "SampleInterval", p.sample_interval)?;
        line(f, 0, "Tag", Hex(p.tag.into(), 2))?;
        for (i, c) in p.counter_select.iter().enumerate() {
            line(f, 0, &format!("CounterSelect{i}"), Hex((*c).into(), 2))?;
        }
        line(
            f,
            0,
            "SamplesOnlyOptionMask",
            Hex(p.samples_only_option_mask, 8),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_control_prints_with_libibmad_widths() {
        let p = PortSamplesControl {
            op_code: 1,
            port_select: 2,
            counter_masks1to9: 0x49,
            tag: 0xbeef,
            option_mask: 1,
            ..Default::default()
        };
        let s = p.diag().to_string();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 30);
        assert_eq!(lines[0], "OpCode:..........................0x01");
        assert_eq!(lines[1], "PortSelect:......................2");
        assert_eq!(lines[5], "CounterMasks1to9:................0x00000049");
        assert_eq!(lines[6], "CounterMasks10to14:..............0x0000");
        assert_eq!(
            lines[9],
            "OptionMask:......................0x0000000000000001"
        );
        assert_eq!(lines[13], "Tag:.............................0xbeef");
        assert_eq!(lines[28], "CounterSelect14:.................0x0000");
    }

    #[test]
    fn counters_print_every_field_and_extended_ones_what_the_agent_has() {
        let pc = PortCounters {
            port_select: 1,
            port_xmit_data: 7,
            ..Default::default()
        };
        let s = pc.diag().to_string();
        assert_eq!(s.lines().count(), 21);
        assert!(s.starts_with(
            "PortSelect:......................1\nCounterSelect:...................0x0000\n"
        ));
        assert!(s.contains("\nPortXmitData:....................7\n"));
        let x = PortCountersExtended::default();
        let mut cpi = ClassPortInfo::default();
        assert_eq!(x.diag(&cpi).to_string().lines().count(), 6);
        cpi.capability_mask = EXT_WIDTH_SUPPORTED;
        assert_eq!(x.diag(&cpi).to_string().lines().count(), 10);
        cpi.capability_mask2 = ADDL_PORT_CTRS_EXT_SUP;
        let all = x.diag(&cpi).to_string();
        assert_eq!(all.lines().count(), 25);
        assert!(all.ends_with("QP1Dropped:......................0\n"));
    }
}
