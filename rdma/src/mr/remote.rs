//! [`RemoteMemory`]: a range of a peer's registered memory and its wire form.

use crate::{Error, Result};

/// A range of a peer's registered memory: the target of RDMA READ, WRITE and
/// atomics. Plain data, exchanged out of band (TCP, CM private data) in its
/// wire form, [`to_bytes`](Self::to_bytes) and
/// [`from_bytes`](Self::from_bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteMemory {
    /// The remote address.
    pub addr: u64,
    /// The length in bytes.
    pub len: u64,
    /// The remote key.
    pub rkey: u32,
}

impl RemoteMemory {
    /// The `n` bytes at `off` of a registration whose first byte peers
    /// name `iova` (the range checked by the caller; `iova + len` fits
    /// 64 bits, checked at registration).
    #[inline]
    pub(crate) fn of(iova: u64, off: usize, n: usize, rkey: u32) -> Self {
        RemoteMemory {
            addr: iova.wrapping_add(off as u64),
            len: n as u64,
            rkey,
        }
    }

    /// The length of the wire form, [`to_bytes`](Self::to_bytes).
    pub const WIRE_LEN: usize = 20;

    /// The wire form, 20 bytes, every field big-endian (network byte
    /// order), whatever the host:
    ///
    /// | bytes    | field  | type |
    /// |----------|--------|------|
    /// | `0..8`   | `addr` | u64  |
    /// | `8..16`  | `len`  | u64  |
    /// | `16..20` | `rkey` | u32  |
    ///
    /// This layout is stable: a peer of another release, or another
    /// language, reads it with [`from_bytes`](Self::from_bytes) or the
    /// table above. (rping's `struct rping_rdma_info` is another layout:
    /// addr, rkey, then a 32-bit length.)
    ///
    /// ```
    /// # use rdma::RemoteMemory;
    /// let r = RemoteMemory { addr: 0x1000, len: 4096, rkey: 0xabcd };
    /// let b = r.to_bytes();
    /// assert_eq!(&b[..8], &0x1000u64.to_be_bytes());
    /// assert_eq!(RemoteMemory::from_bytes(&b)?, r);
    /// # Ok::<(), rdma::Error>(())
    /// ```
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0; Self::WIRE_LEN];
        b[0..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..16].copy_from_slice(&self.len.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }

    /// Reads the wire form of [`to_bytes`](Self::to_bytes) from the first
    /// [`WIRE_LEN`](Self::WIRE_LEN) bytes of `b`; bytes after them are
    /// ignored (CM private data arrives padded, 56 bytes on an RC
    /// connect over IB or RoCE). Fewer bytes fail with `EINVAL` (verb
    /// `RemoteMemory::from_bytes`), never a panic.
    pub fn from_bytes(b: &[u8]) -> Result<RemoteMemory> {
        let Some(b) = b.first_chunk::<{ Self::WIRE_LEN }>() else {
            return Err(Error::invalid(
                "RemoteMemory::from_bytes",
                format!(
                    "{} bytes, the wire form of a RemoteMemory is {}",
                    b.len(),
                    Self::WIRE_LEN
                ),
            ));
        };
        let (addr, rest) = b.split_first_chunk::<8>().expect("20 bytes");
        let (len, rkey) = rest.split_first_chunk::<8>().expect("12 bytes");
        let rkey: &[u8; 4] = rkey.try_into().expect("4 bytes");
        Ok(RemoteMemory {
            addr: u64::from_be_bytes(*addr),
            len: u64::from_be_bytes(*len),
            rkey: u32::from_be_bytes(*rkey),
        })
    }

    /// The sub-range at `offset` of `len` bytes, checked against this range.
    pub fn slice(&self, offset: u64, len: u64) -> Result<RemoteMemory> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(RemoteMemory {
                addr: self.addr + offset,
                len,
                rkey: self.rkey,
            }),
            _ => Err(Error::invalid(
                "RemoteMemory::slice",
                format!(
                    "range {offset}+{len} is outside the {}-byte remote range",
                    self.len
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_memory_round_trips_through_its_big_endian_wire_form() {
        let r = RemoteMemory {
            addr: 0x0102_0304_0506_0708,
            len: 0x1112_1314_1516_1718,
            rkey: 0x2122_2324,
        };
        let b = r.to_bytes();
        assert_eq!(
            b,
            [
                0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // addr
                0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // len
                0x21, 0x22, 0x23, 0x24, // rkey
            ]
        );
        assert_eq!(RemoteMemory::from_bytes(&b).unwrap(), r);
        for r in [
            RemoteMemory {
                addr: 0,
                len: 0,
                rkey: 0,
            },
            RemoteMemory {
                addr: u64::MAX,
                len: u64::MAX,
                rkey: u32::MAX,
            },
            RemoteMemory {
                addr: 0x7f00_dead_b000,
                len: 5 << 32,
                rkey: 7,
            },
        ] {
            assert_eq!(RemoteMemory::from_bytes(&r.to_bytes()).unwrap(), r);
        }
        // Padded, as CM private data arrives: the padding is ignored.
        let mut padded = [0xee; 56];
        padded[..RemoteMemory::WIRE_LEN].copy_from_slice(&b);
        assert_eq!(RemoteMemory::from_bytes(&padded).unwrap(), r);
    }

    #[test]
    fn a_short_remote_memory_wire_form_is_an_einval_error() {
        let b = RemoteMemory {
            addr: 1,
            len: 2,
            rkey: 3,
        }
        .to_bytes();
        for n in 0..RemoteMemory::WIRE_LEN {
            let e = RemoteMemory::from_bytes(&b[..n]).unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{n} bytes: {e}");
            assert_eq!(e.verb(), "RemoteMemory::from_bytes");
            assert!(e.to_string().contains(&format!("{n} bytes")), "{e}");
        }
    }
}
