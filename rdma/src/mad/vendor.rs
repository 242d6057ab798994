//! Vendor MADs of range 2 (classes 0x30-0x4f, IBA 13.4.9.2): the common
//! header, the RMPP header, a reserved byte and the vendor's OUI, then 216
//! bytes of data.

use std::fmt;

use super::rmpp::RmppHeader;
use super::wire::{In, Out};
use super::Result;

/// An IEEE organizationally unique identifier (24 bits).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Oui(pub [u8; 3]);

impl Oui {
    /// The OpenIB OUI (0x001405), used by infiniband-diags' ibping.
    pub const OPENIB: Oui = Oui([0x00, 0x14, 0x05]);

    /// The OUI of a 24-bit value; `None` if `v` has bits above 23.
    pub fn from_u32(v: u32) -> Option<Oui> {
        if v >> 24 != 0 {
            return None;
        }
        let [_, a, b, c] = v.to_be_bytes();
        Some(Oui([a, b, c]))
    }
    /// The OUI as a number.
    pub fn to_u32(self) -> u32 {
        u32::from_be_bytes([0, self.0[0], self.0[1], self.0[2]])
    }
}

impl fmt::Debug for Oui {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Oui({:#08x})", self.to_u32())
    }
}

impl fmt::Display for Oui {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.to_u32())
    }
}

/// The class header of a vendor MAD of range 2 (bytes 24-39).
///
/// | byte | field |
/// |---|---|
/// | 24-35 | RMPP header |
/// | 36 | reserved |
/// | 37-39 | OUI |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VendorHeader {
    /// The RMPP header.
    pub rmpp: RmppHeader,
    /// The reserved byte 36 (kept so that decoding is lossless).
    pub reserved: u8,
    /// The vendor's OUI.
    pub oui: Oui,
}

impl VendorHeader {
    /// The header's offset in a MAD.
    pub const OFFSET: usize = 24;
    /// The header's size.
    pub const SIZE: usize = 16;
    /// Where the vendor data begins in a MAD.
    pub const DATA_OFFSET: usize = 40;

    /// A header with this OUI and no RMPP.
    pub fn new(oui: Oui) -> VendorHeader {
        VendorHeader {
            oui,
            ..VendorHeader::default()
        }
    }

    /// Decodes the 16 bytes at the start of `b` (a MAD's bytes 24-39).
    pub fn decode(b: &[u8]) -> Result<VendorHeader> {
        let r = In::new(b, "vendor MAD header", Self::SIZE)?;
        Ok(VendorHeader {
            rmpp: RmppHeader::decode(b)?,
            reserved: r.u8(12)?,
            oui: Oui(r.bytes(13)?),
        })
    }

    /// Encodes into the first 16 bytes of `out`.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        self.rmpp.encode_into(out)?;
        let mut w = Out::new(out, "vendor MAD header", Self::SIZE)?;
        w.u8(12, self.reserved)?;
        w.bytes(13, &self.oui.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_header_puts_the_oui_in_bytes_37_to_39() {
        let h = VendorHeader::new(Oui::OPENIB);
        let mut out = [0xffu8; 16];
        h.encode_into(&mut out).unwrap();
        let mut want = [0u8; 16];
        want[13..].copy_from_slice(&[0x00, 0x14, 0x05]);
        assert_eq!(out, want);
        assert_eq!(VendorHeader::decode(&out).unwrap(), h);
    }

    #[test]
    fn oui_is_24_bits() {
        assert_eq!(Oui::from_u32(0x001405), Some(Oui::OPENIB));
        assert_eq!(Oui::OPENIB.to_u32(), 0x001405);
        assert_eq!(Oui::from_u32(0x0100_0000), None);
        assert_eq!(Oui::OPENIB.to_string(), "0x001405");
    }
}
