//! Devices whose ports split subnet management from general services
//! (libibumad of rdma-core v56 and newer): a "planarized" port shows up as
//! two CAs of one port GUID, one with the SMI (QP0) and one with the GSI
//! (QP1) and its SMI disabled. [`smi_gsi_pairs`] lists the pairs of every
//! InfiniBand port, [`smi_gsi_pair`] finds the pair of one CA and port,
//! and [`Port::open_smi`](super::Port::open_smi) opens the SMI side.
//!
//! On an ordinary port both names are the port's CA: rxe's RoCE port is
//! one pair with itself under libibumad 56 (kernel 6.12); libibumad 65
//! (kernel 7.2) lists no pair for it. siw has no umad port, so it is in no
//! pair.

use std::ffi::CString;

use super::ca::{c_string, rc_errno};
use super::{Error, Result};

/// The CAs that serve one port's SMI (QP0) and GSI (QP1), and the port of
/// each that libibumad prefers (`struct umad_ca_pair`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmiGsiPair {
    /// The CA of the subnet management interface; `None` where the port
    /// has none (its SMI disabled).
    pub smi_ca: Option<String>,
    /// The SMI's preferred port (0 where libibumad chose none).
    pub smi_port: u32,
    /// The CA of the general services interface.
    pub gsi_ca: Option<String>,
    /// The GSI's preferred port (0 where libibumad chose none).
    pub gsi_port: u32,
}

impl SmiGsiPair {
    fn from_raw(p: &umad_sys::umad_ca_pair) -> SmiGsiPair {
        let name = |s: &[std::ffi::c_char]| Some(c_string(s)).filter(|n| !n.is_empty());
        SmiGsiPair {
            smi_ca: name(&p.smi_name),
            smi_port: p.smi_preferred_port,
            gsi_ca: name(&p.gsi_name),
            gsi_port: p.gsi_preferred_port,
        }
    }
}

/// An all-zero `umad_ca_pair`.
fn zeroed_pair() -> umad_sys::umad_ca_pair {
    // SAFETY: plain data (character arrays and integers); zero is valid.
    unsafe { std::mem::zeroed() }
}

/// The SMI/GSI pairs of every InfiniBand port of the CAs with umad devices
/// (`umad_get_smi_gsi_pairs`); empty where there are none.
pub fn smi_gsi_pairs() -> Result<Vec<SmiGsiPair>> {
    const MAX: usize = umad_sys::UMAD_MAX_PORTS as usize;
    let mut pairs = vec![zeroed_pair(); MAX];
    // SAFETY: `pairs` holds MAX entries, which the function clears and
    // fills no more of than `max`.
    let n = unsafe { umad_sys::umad_get_smi_gsi_pairs(pairs.as_mut_ptr(), MAX) };
    if n < 0 {
        return Err(Error::io("umad_get_smi_gsi_pairs", rc_errno(n)));
    }
    Ok(pairs
        .iter()
        .take((n as usize).min(MAX))
        .map(SmiGsiPair::from_raw)
        .collect())
}

/// The SMI/GSI pair of the CA `ca` (either of its two names; `None`: the
/// first pair that has one) and port `port` (0: the one libibumad
/// prefers), from [`smi_gsi_pairs`] (`umad_get_smi_gsi_pair_by_ca_name`).
/// With `enforce_smi`, only pairs with an SMI count.
///
/// A port above libibumad's per-CA table (`UMAD_CA_MAX_PORTS`, 10) is
/// refused (`EINVAL`) before the call, which would read past that table;
/// no such pair: `ENODEV`.
pub fn smi_gsi_pair(ca: Option<&str>, port: u8, enforce_smi: bool) -> Result<SmiGsiPair> {
    const OP: &str = "umad_get_smi_gsi_pair_by_ca_name";
    if u32::from(port) >= umad_sys::UMAD_CA_MAX_PORTS {
        return Err(Error::io(OP, libc::EINVAL));
    }
    let name = ca
        .map(CString::new)
        .transpose()
        .map_err(|_| Error::NoDevice(ca.unwrap_or_default().to_string()))?;
    let mut pair = zeroed_pair();
    let name_ptr = name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr());
    // SAFETY: a NUL-terminated name or NULL (any CA), read during the call;
    // `pair` is writable; `port` indexes libibumad's per-CA port table of
    // UMAD_CA_MAX_PORTS entries (checked above).
    let rc = unsafe {
        umad_sys::umad_get_smi_gsi_pair_by_ca_name(name_ptr, port, &mut pair, enforce_smi.into())
    };
    if rc < 0 {
        return Err(Error::io(OP, rc_errno(rc)));
    }
    let pair = SmiGsiPair::from_raw(&pair);
    // 0 with nothing filled in: libibumad found no pair at all.
    if rc > 0 || pair.gsi_ca.is_none() {
        return Err(Error::io(OP, libc::ENODEV));
    }
    Ok(pair)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_names_read_as_none() {
        let mut raw = zeroed_pair();
        for (d, s) in raw.gsi_name.iter_mut().zip(b"mlx5_1\0") {
            *d = *s as std::ffi::c_char;
        }
        raw.gsi_preferred_port = 1;
        let p = SmiGsiPair::from_raw(&raw);
        assert_eq!(p.smi_ca, None);
        assert_eq!((p.gsi_ca.as_deref(), p.gsi_port), (Some("mlx5_1"), 1));
    }

    #[test]
    fn a_port_past_the_table_is_refused_before_the_call() {
        for port in [10, 11, 255] {
            let e = smi_gsi_pair(Some("mlx5_0"), port, false).unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{port}");
        }
    }
}
