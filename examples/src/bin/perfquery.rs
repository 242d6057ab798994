//! Reads (and resets) a port's performance counters, like infiniband-diags'
//! `perfquery`: PortCounters, PortCountersExtended (`-x`), all ports
//! (`-a`, aggregated by the agent's AllPortSelect or here), each port
//! (`-l`), reset after reading (`-r`) or only (`-R`).
//!
//! Usage: `perfquery [-x] [-a|-l] [-r|-R] [LID [PORT[S] [MASK]]]`

use std::process::ExitCode;

use clap::Parser;
use rdma::mad::{
    attr_id, Attribute, ClassPortInfo, Method, NodeInfo, PortCounters, PortCountersExtended,
    PortSamplesControl, SwitchInfo,
};
use rdma_examples::ibdiag::{self, Common, Dest, Diag};

/// Read the performance counters of a port (like perfquery).
#[derive(Parser, Debug)]
#[command(name = "perfquery")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Show the extended port counters (PortCountersExtended).
    #[arg(short = 'x', long = "extended")]
    extended: bool,
    /// Show the counters of all ports, aggregated.
    #[arg(short = 'a', long = "all_ports")]
    all_ports: bool,
    /// Show the counters of each port.
    #[arg(short = 'l', long = "loop_ports")]
    loop_ports: bool,
    /// Reset the counters after reading them.
    #[arg(short = 'r', long = "reset_after_read")]
    reset: bool,
    /// Only reset the counters.
    #[arg(short = 'R', long = "Reset_only")]
    reset_only: bool,
    /// Show PortSamplesControl instead of the counters.
    #[arg(short = 'c', long = "smplctl")]
    samples_control: bool,
    /// The LID (default: the local port).
    lid: Option<String>,
    /// The port, a list (1,4,8) or a range (1-10).
    ports: Option<String>,
    /// The reset mask (CounterSelect; for -x, CounterSelect and
    /// CounterSelect2).
    mask: Option<String>,
}

const ALL_PORTS: u8 = 0xff;
const ALL_PORT_SELECT: u16 = 1 << 8;
const EXT_WIDTH_SUPPORTED: u16 = 1 << 9;
const XMIT_WAIT_SUP: u16 = 1 << 12;
const QP1_DROP_SUP: u16 = 1 << 15;
const ADDL_PORT_CTRS_EXT_SUP: u32 = 1 << 1;

/// Adds `v` to `acc`, saturating at the counter's width (IB counters stop
/// at their maximum).
fn sat<T: Into<u64> + TryFrom<u64> + Copy>(acc: &mut T, v: T, bits: u32) {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let s = (*acc).into().saturating_add(v.into()).min(max);
    if let Ok(x) = T::try_from(s) {
        *acc = x;
    }
}

fn aggregate(acc: &mut PortCounters, p: &PortCounters) {
    acc.port_select = p.port_select;
    acc.counter_select = p.counter_select;
    sat(&mut acc.symbol_error_counter, p.symbol_error_counter, 16);
    sat(
        &mut acc.link_error_recovery_counter,
        p.link_error_recovery_counter,
        8,
    );
    sat(&mut acc.link_downed_counter, p.link_downed_counter, 8);
    sat(&mut acc.port_rcv_errors, p.port_rcv_errors, 16);
    sat(
        &mut acc.port_rcv_remote_physical_errors,
        p.port_rcv_remote_physical_errors,
        16,
    );
    sat(
        &mut acc.port_rcv_switch_relay_errors,
        p.port_rcv_switch_relay_errors,
        16,
    );
    sat(&mut acc.port_xmit_discards, p.port_xmit_discards, 16);
    sat(
        &mut acc.port_xmit_constraint_errors,
        p.port_xmit_constraint_errors,
        8,
    );
    sat(
        &mut acc.port_rcv_constraint_errors,
        p.port_rcv_constraint_errors,
        8,
    );
    sat(
        &mut acc.local_link_integrity_errors,
        p.local_link_integrity_errors,
        4,
    );
    sat(
        &mut acc.excessive_buffer_overrun_errors,
        p.excessive_buffer_overrun_errors,
        4,
    );
    sat(&mut acc.qp1_dropped, p.qp1_dropped, 16);
    sat(&mut acc.vl15_dropped, p.vl15_dropped, 16);
    sat(&mut acc.port_xmit_data, p.port_xmit_data, 32);
    sat(&mut acc.port_rcv_data, p.port_rcv_data, 32);
    sat(&mut acc.port_xmit_pkts, p.port_xmit_pkts, 32);
    sat(&mut acc.port_rcv_pkts, p.port_rcv_pkts, 32);
    sat(&mut acc.port_xmit_wait, p.port_xmit_wait, 32);
}

fn aggregate_ext(acc: &mut PortCountersExtended, p: &PortCountersExtended, cap: u16, cap2: u32) {
    acc.port_select = p.port_select;
    acc.counter_select = p.counter_select;
    let add = |a: &mut u64, v: u64| *a = a.saturating_add(v);
    add(&mut acc.port_xmit_data, p.port_xmit_data);
    add(&mut acc.port_rcv_data, p.port_rcv_data);
    add(&mut acc.port_xmit_pkts, p.port_xmit_pkts);
    add(&mut acc.port_rcv_pkts, p.port_rcv_pkts);
    if cap & EXT_WIDTH_SUPPORTED != 0 {
        add(&mut acc.port_unicast_xmit_pkts, p.port_unicast_xmit_pkts);
        add(&mut acc.port_unicast_rcv_pkts, p.port_unicast_rcv_pkts);
        add(
            &mut acc.port_multicast_xmit_pkts,
            p.port_multicast_xmit_pkts,
        );
        add(&mut acc.port_multicast_rcv_pkts, p.port_multicast_rcv_pkts);
    }
    if cap2 & ADDL_PORT_CTRS_EXT_SUP != 0 {
        acc.counter_select2 = p.counter_select2;
        add(&mut acc.symbol_error_counter, p.symbol_error_counter);
        add(
            &mut acc.link_error_recovery_counter,
            p.link_error_recovery_counter,
        );
        add(&mut acc.link_downed_counter, p.link_downed_counter);
        add(&mut acc.port_rcv_errors, p.port_rcv_errors);
        add(
            &mut acc.port_rcv_remote_physical_errors,
            p.port_rcv_remote_physical_errors,
        );
        add(
            &mut acc.port_rcv_switch_relay_errors,
            p.port_rcv_switch_relay_errors,
        );
        add(&mut acc.port_xmit_discards, p.port_xmit_discards);
        add(
            &mut acc.port_xmit_constraint_errors,
            p.port_xmit_constraint_errors,
        );
        add(
            &mut acc.port_rcv_constraint_errors,
            p.port_rcv_constraint_errors,
        );
        add(
            &mut acc.local_link_integrity_errors,
            p.local_link_integrity_errors,
        );
        add(
            &mut acc.excessive_buffer_overrun_errors,
            p.excessive_buffer_overrun_errors,
        );
        add(&mut acc.vl15_dropped, p.vl15_dropped);
        add(&mut acc.port_xmit_wait, p.port_xmit_wait);
        add(&mut acc.qp1_dropped, p.qp1_dropped);
    }
}

struct Query<'a> {
    diag: &'a Diag,
    lid: u16,
    dest: Dest,
    cpi: ClassPortInfo,
    cap: u16,
    cap2: u32,
}

impl Query<'_> {
    fn get<A: Attribute>(&self, port: u8) -> ibdiag::Result<A> {
        // PortSelect is byte 1 of both PortCounters and PortCountersExtended.
        let m = self.diag.perf(Method::GET, A::ID, self.lid, &[0, port])?;
        A::decode(m.data()).map_err(|e| e.to_string())
    }

    fn counters(&self, port: u8) -> PortCounters {
        let mut pc = self
            .get::<PortCounters>(port)
            .unwrap_or_else(|_| ibdiag::exit_error("perfquery", "perfquery"));
        if self.cap & XMIT_WAIT_SUP == 0 {
            pc.port_xmit_wait = 0;
        }
        pc
    }

    fn ext(&self, port: u8) -> PortCountersExtended {
        self.get::<PortCountersExtended>(port)
            .unwrap_or_else(|_| ibdiag::exit_error("perfquery", "perfextquery"))
    }

    fn print(&self, extended: bool, port: u8, body: impl std::fmt::Display) {
        let who = self.dest.describe();
        if extended {
            print!(
                "# Port extended counters: {who} port {port} (CapMask: 0x{:02X} CapMask2: 0x{:07X})\n{body}",
                self.cap, self.cap2
            );
        } else {
            print!(
                "# Port counters: {who} port {port} (CapMask: 0x{:02X})\n{body}",
                self.cap
            );
        }
    }

    fn reset(&self, extended: bool, port: u8, mask: u32) -> ibdiag::Result<()> {
        let mut data = [0u8; 192];
        data[1] = port;
        data[2..4].copy_from_slice(&(mask as u16).to_be_bytes());
        let hi = mask >> 16;
        let attr = if extended {
            // CounterSelect2 of PortCountersExtended: bits 32-63 of the data.
            data[4..8].copy_from_slice(&hi.to_be_bytes());
            attr_id::PORT_COUNTERS_EXTENDED
        } else {
            // CounterSelect2 of PortCounters: byte 18.
            data[18] = hi as u8;
            attr_id::PORT_COUNTERS
        };
        self.diag
            .perf(Method::SET, attr, self.lid, &data)
            .map(|_| ())
    }
}

fn parse_ports(s: &str) -> Vec<u8> {
    let num = |t: &str| ibdiag::parse_int(t).unwrap_or(0) as u8;
    if s.contains(',') {
        s.split(',').map(num).collect()
    } else if let Some((a, b)) = s.split_once('-') {
        let (a, b) = (num(a), num(b));
        if a >= b {
            ibdiag::exit_error(
                "perfquery",
                "max port must be greater than min port in range",
            );
        }
        (a..=b).collect()
    } else {
        vec![num(s)]
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    let diag = match Diag::open(&a.common) {
        Ok(d) => d,
        Err(e) => ibdiag::exit_error("perfquery", &e),
    };
    let mut port: u8 = if a.all_ports { ALL_PORTS } else { 0 };
    let mut ports: Vec<u8> = Vec::new();
    if let Some(p) = &a.ports {
        ports = parse_ports(p);
        port = ports[0];
    }
    let mut mask: u32 = 0xffff;
    if let Some(m) = &a.mask {
        mask = ibdiag::parse_int(m).unwrap_or(0) as u32;
    }
    let (lid, dest) = match &a.lid {
        Some(s) => match Dest::parse(s, false) {
            Ok(d) => (d.lid().unwrap_or(0), d),
            Err(e) => ibdiag::exit_error("perfquery", &e),
        },
        None => {
            let l = diag.local();
            if a.ports.is_none() {
                port = l.port_num as u8;
            }
            (l.base_lid as u16, Dest::Lid(l.base_lid as u16))
        }
    };
    if ports.len() <= 1 {
        ports.clear();
    }
    let cpi = match diag.perf(Method::GET, ClassPortInfo::ID, lid, &[0, port]) {
        Ok(m) => ClassPortInfo::decode(m.data()).ok(),
        Err(_) => None,
    };
    let Some(cpi) = cpi else {
        ibdiag::exit_error("perfquery", "classportinfo query")
    };
    let q = Query {
        diag: &diag,
        lid,
        dest,
        cap: cpi.capability_mask,
        cap2: cpi.capability_mask2,
        cpi,
    };
    let mut all_ports_loop = false;
    if q.cap & ALL_PORT_SELECT == 0 {
        if !a.all_ports && port == ALL_PORTS {
            ibdiag::exit_error("perfquery", "AllPortSelect not supported");
        }
        if a.all_ports && port == ALL_PORTS {
            all_ports_loop = true;
        }
    }
    if a.samples_control {
        let p = q
            .get::<PortSamplesControl>(port)
            .unwrap_or_else(|_| ibdiag::exit_error("perfquery", "sampctlquery"));
        print!(
            "# PortSamplesControl: {} port {port}\n{}",
            q.dest.describe(),
            p.diag()
        );
        return ExitCode::SUCCESS;
    }
    let looping = all_ports_loop || (a.loop_ports && (a.all_ports || port == ALL_PORTS));
    let (mut start, mut num_ports) = (1u8, 0u8);
    if looping {
        let d = Dest::Lid(lid);
        let ni = diag
            .smp_get::<NodeInfo>(0, &d)
            .unwrap_or_else(|_| ibdiag::exit_error("perfquery", "smp query nodeinfo failed"));
        num_ports = ni.num_ports;
        if num_ports == 0 {
            ibdiag::exit_error("perfquery", "smp query nodeinfo: num ports invalid");
        }
        if ni.node_type == 2 {
            let si = diag
                .smp_get::<SwitchInfo>(0, &d)
                .unwrap_or_else(|_| ibdiag::exit_error("perfquery", "smp query nodeinfo failed"));
            if si.enhanced_port0 {
                start = 0;
            }
        }
    }
    let aggregate_loop = all_ports_loop && !a.loop_ports;
    let selected: Vec<u8> = if looping {
        (start..=num_ports).collect()
    } else if !ports.is_empty() {
        ports.clone()
    } else {
        vec![port]
    };
    if !a.reset_only {
        let agg = if looping {
            aggregate_loop
        } else {
            !ports.is_empty() && a.all_ports && !a.loop_ports
        };
        let mut acc = PortCounters::default();
        let mut acc_x = PortCountersExtended::default();
        for &p in &selected {
            if a.extended {
                let pc = q.ext(p);
                if agg {
                    aggregate_ext(&mut acc_x, &pc, q.cap, q.cap2);
                } else {
                    q.print(true, p, pc.diag(&q.cpi));
                }
            } else {
                let pc = q.counters(p);
                if agg {
                    aggregate(&mut acc, &pc);
                } else {
                    q.print(false, p, pc.diag());
                }
            }
        }
        if agg {
            if a.extended {
                acc_x.port_select = ALL_PORTS;
                q.print(true, ALL_PORTS, acc_x.diag(&q.cpi));
            } else {
                acc.port_select = ALL_PORTS;
                q.print(false, ALL_PORTS, acc.diag());
            }
        }
        if !a.reset {
            return ExitCode::SUCCESS;
        }
    }
    if a.mask.is_none() && !a.extended {
        if q.cap & XMIT_WAIT_SUP != 0 {
            mask |= 1 << 16;
        }
        if q.cap & QP1_DROP_SUP != 0 {
            mask |= 1 << 17;
        }
    }
    if a.extended {
        mask |= 0xfff_0000;
        if q.cap & XMIT_WAIT_SUP != 0 {
            mask |= 1 << 28;
        }
        if q.cap & QP1_DROP_SUP != 0 {
            mask |= 1 << 29;
        }
    }
    for &p in &selected {
        if q.reset(a.extended, p, mask).is_err() {
            let what = if a.extended {
                "perf ext reset"
            } else {
                "perf reset"
            };
            ibdiag::exit_error("perfquery", what);
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_aggregate_saturating_at_their_width() {
        let mut acc = PortCounters::default();
        let p = PortCounters {
            symbol_error_counter: 0xfff0,
            local_link_integrity_errors: 9,
            port_xmit_data: 5,
            ..Default::default()
        };
        aggregate(&mut acc, &p);
        aggregate(&mut acc, &p);
        assert_eq!(acc.symbol_error_counter, 0xffff);
        assert_eq!(acc.local_link_integrity_errors, 0xf);
        assert_eq!(acc.port_xmit_data, 10);
    }
}
