//! Bounds-checked big-endian field access: every read and write of the codec
//! goes through here, so a short buffer is an error, never a panic.

use super::{Error, Result};

/// Big-endian reads from a byte slice that a decoder has checked to hold at
/// least the size of the structure it decodes.
#[derive(Clone, Copy)]
pub(crate) struct In<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> In<'a> {
    /// A reader over `b` for the structure `what`, which needs `need` bytes.
    pub(crate) fn new(b: &'a [u8], what: &'static str, need: usize) -> Result<In<'a>> {
        if b.len() < need {
            return Err(Error::Truncated {
                what,
                need,
                have: b.len(),
            });
        }
        Ok(In { b, what })
    }

    /// `N` bytes at `off`.
    pub(crate) fn bytes<const N: usize>(&self, off: usize) -> Result<[u8; N]> {
        off.checked_add(N)
            .and_then(|end| self.b.get(off..end))
            .and_then(|s| s.try_into().ok())
            .ok_or(Error::Truncated {
                what: self.what,
                need: off.saturating_add(N),
                have: self.b.len(),
            })
    }

    pub(crate) fn u8(&self, off: usize) -> Result<u8> {
        Ok(self.bytes::<1>(off)?[0])
    }
    pub(crate) fn u16(&self, off: usize) -> Result<u16> {
        Ok(u16::from_be_bytes(self.bytes(off)?))
    }
    pub(crate) fn u32(&self, off: usize) -> Result<u32> {
        Ok(u32::from_be_bytes(self.bytes(off)?))
    }
    pub(crate) fn u64(&self, off: usize) -> Result<u64> {
        Ok(u64::from_be_bytes(self.bytes(off)?))
    }
    /// The low 24 bits of the 32-bit word at `off` (a 24-bit field after an
    /// 8-bit one).
    pub(crate) fn u24_low(&self, off: usize) -> Result<u32> {
        Ok(self.u32(off)? & 0x00ff_ffff)
    }
}

/// Big-endian writes into a byte slice.
pub(crate) struct Out<'a> {
    b: &'a mut [u8],
    what: &'static str,
}

impl<'a> Out<'a> {
    /// A writer over `b` for the structure `what`, which needs `need` bytes.
    pub(crate) fn new(b: &'a mut [u8], what: &'static str, need: usize) -> Result<Out<'a>> {
        if b.len() < need {
            return Err(Error::Truncated {
                what,
                need,
                have: b.len(),
            });
        }
        Ok(Out { b, what })
    }

    pub(crate) fn bytes(&mut self, off: usize, v: &[u8]) -> Result<()> {
        let have = self.b.len();
        let dst = off
            .checked_add(v.len())
            .and_then(|end| self.b.get_mut(off..end))
            .ok_or(Error::Truncated {
                what: self.what,
                need: off.saturating_add(v.len()),
                have,
            })?;
        dst.copy_from_slice(v);
        Ok(())
    }
    pub(crate) fn u8(&mut self, off: usize, v: u8) -> Result<()> {
        self.bytes(off, &[v])
    }
    pub(crate) fn u16(&mut self, off: usize, v: u16) -> Result<()> {
        self.bytes(off, &v.to_be_bytes())
    }
    pub(crate) fn u32(&mut self, off: usize, v: u32) -> Result<()> {
        self.bytes(off, &v.to_be_bytes())
    }
    pub(crate) fn u64(&mut self, off: usize, v: u64) -> Result<()> {
        self.bytes(off, &v.to_be_bytes())
    }
}

/// `v` checked to fit a field of `bits` bits, for encoding.
pub(crate) fn fit(field: &'static str, bits: u32, v: u64) -> Result<u64> {
    if bits < 64 && v >> bits != 0 {
        return Err(Error::FieldOverflow {
            field,
            bits,
            value: v,
        });
    }
    Ok(v)
}

/// Packs two 4-bit fields into a byte (`hi` in bits 7-4), checking both fit.
pub(crate) fn nibbles(hi_name: &'static str, hi: u8, lo_name: &'static str, lo: u8) -> Result<u8> {
    let hi = fit(hi_name, 4, hi.into())? as u8;
    let lo = fit(lo_name, 4, lo.into())? as u8;
    Ok(hi << 4 | lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_end_are_errors() {
        let b = [1u8, 2, 3];
        let r = In::new(&b, "x", 3).unwrap();
        assert_eq!(r.u16(1).unwrap(), 0x0203);
        assert!(matches!(r.u16(2), Err(Error::Truncated { need: 4, .. })));
        assert!(r.u64(usize::MAX).is_err());
        assert!(In::new(&b, "x", 4).is_err());
    }

    #[test]
    fn writes_past_the_end_are_errors() {
        let mut b = [0u8; 3];
        let mut w = Out::new(&mut b, "x", 3).unwrap();
        w.u16(1, 0xabcd).unwrap();
        assert!(w.u32(0, 1).is_err());
        assert!(w.bytes(usize::MAX, &[1]).is_err());
        assert_eq!(b, [0, 0xab, 0xcd]);
    }

    #[test]
    fn fields_that_do_not_fit_are_errors() {
        assert_eq!(fit("f", 4, 15).unwrap(), 15);
        assert!(matches!(
            fit("f", 4, 16),
            Err(Error::FieldOverflow {
                bits: 4,
                value: 16,
                ..
            })
        ));
        assert_eq!(nibbles("a", 0xa, "b", 0x5).unwrap(), 0xa5);
        assert!(nibbles("a", 0x10, "b", 0).is_err());
    }
}
