//! What `iblinkinfo` and `ibqueryerrors -r` print of a link, as
//! infiniband-diags prints it: the port's width, speed and states, and
//! what the link could be (the best width and speed both ends support)
//! where it runs below that.

use rdma::mad::{LinkSpeed, LinkSpeedExt, LinkWidth, PortInfo, PortState};

use crate::discover::{clean, Fabric, NodeRec, PortRec, CAP_EXT_SPEEDS, SWITCH};

/// The PortInfo that holds a port's CapabilityMask: a switch's port 0's,
/// a CA's own.
fn cap_info<'a>(n: &'a NodeRec, p: &'a PortRec) -> Option<&'a PortInfo> {
    if n.info.node_type == SWITCH {
        n.ports[0].as_ref().and_then(|p0| p0.info.as_ref())
    } else {
        p.info.as_ref()
    }
}

fn has_ext_speeds(info: Option<&PortInfo>) -> bool {
    info.is_some_and(|i| i.capability_mask & CAP_EXT_SPEEDS != 0)
}

/// The widest width of a LinkWidthSupported mask (1X when none is set).
fn max_width(mask: u8) -> u8 {
    [8, 4, 2, 16]
        .into_iter()
        .find(|w| mask & w != 0)
        .unwrap_or(1)
}

/// The highest bit of a speed mask (1 when none is set).
fn max_bit(mask: u8) -> u8 {
    if mask == 0 {
        1
    } else {
        1 << (7 - mask.leading_zeros())
    }
}

/// The `Could be` messages of a link running below what both ends
/// support: (width, speed), each empty when at the best.
fn could_be(n: &NodeRec, p: &PortRec, rn: &NodeRec, rp: &PortRec) -> (String, String) {
    let l = p.info.unwrap_or_default();
    let r = rp.info.unwrap_or_default();
    let mut width = String::new();
    let w = max_width(l.link_width_supported & r.link_width_supported);
    if w & u8::from(l.link_width_active) == 0 {
        width = format!("Could be {}", LinkWidth::from(w));
    }
    let mut speed = String::new();
    let ext = has_ext_speeds(cap_info(n, p))
        && has_ext_speeds(cap_info(rn, rp))
        && l.link_speed_ext_supported != 0
        && r.link_speed_ext_supported != 0;
    if ext {
        let s = max_bit(l.link_speed_ext_supported & r.link_speed_ext_supported);
        if s & u8::from(l.link_speed_ext_active) == 0 {
            speed = format!("Could be {}", LinkSpeedExt::from(s));
        }
    } else {
        let s = max_bit(l.link_speed_supported & r.link_speed_supported);
        if s & u8::from(l.link_speed_active) == 0 {
            speed = format!("Could be {}", LinkSpeed::from(s));
        }
    }
    (width, speed)
}

/// The `( 4X 2.5 Gbps Active/  LinkUp)` of a port (a Down port's
/// PortInfo holds nothing valid but its states).
pub fn link_state(n: &NodeRec, p: &PortRec) -> String {
    let info = p.info.unwrap_or_default();
    let state = format!("{:>6}", info.port_state.to_string());
    let phys = format!("{:>8}", info.port_physical_state.to_string());
    if info.port_state == PortState::Down {
        return format!("(              {state}/{phys})");
    }
    let cap = cap_info(n, p);
    let speed = match cap {
        None => LinkSpeed::from(0).to_string(),
        Some(c)
            if c.capability_mask & CAP_EXT_SPEEDS != 0
                && u8::from(info.link_speed_ext_active) != 0 =>
        {
            info.link_speed_ext_active.to_string()
        }
        Some(_) => info.link_speed_active.to_string(),
    };
    let width = if cap.is_some() {
        info.link_width_active
    } else {
        LinkWidth::from(0)
    };
    format!("({:>3} {speed:>18} {state}/{phys})", width.to_string())
}

/// The far end of a link `r` from `n`'s port `p`: `[0x... ]   LID PORT[  ]
/// "desc" (Could be ...)`, with the far port's GUID first when `guid`.
pub fn peer(s: &Fabric, n: &NodeRec, p: &PortRec, r: (usize, u8), guid: bool) -> String {
    let (rn, rp) = s.port(r);
    let (w, sp) = could_be(n, p, rn, rp);
    let g = if guid {
        format!("0x{:016x} ", rp.guid)
    } else {
        String::new()
    };
    let lid = if rp.base_lid != 0 {
        rp.base_lid
    } else {
        rn.smalid
    };
    format!(
        "{g}{lid:6} {:4}[  ] \"{}\" ({w} {sp})",
        rp.num,
        clean(&rn.desc)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_width_is_the_widest_both_support_and_1x_when_none() {
        // LinkWidthSupported bits: 1X 1, 4X 2, 8X 4, 12X 8, 2X 16.
        assert_eq!(max_width(1 | 2 | 8), 8);
        assert_eq!(max_width(1 | 2 | 4), 4);
        assert_eq!(max_width(1 | 2 | 16), 2);
        assert_eq!(max_width(1 | 16), 16);
        assert_eq!(max_width(1), 1);
        assert_eq!(max_width(0), 1);
    }

    #[test]
    fn the_best_speed_is_the_highest_bit_and_the_first_when_none() {
        assert_eq!(max_bit(0b111), 4);
        assert_eq!(max_bit(0b011), 2);
        assert_eq!(max_bit(0x80), 0x80);
        assert_eq!(max_bit(0), 1);
    }
}
