//! ServiceRecord (IBA 15.2.5.14): services registered with the SA.

use super::{attr_id, text, Component as C, SaRecord};
use crate::mad::wire::{In, Out};
use crate::mad::{class, Attribute, Result};
use crate::Gid;

bitflags::bitflags! {
    /// The ComponentMask bits of a ServiceRecord query: one per field, and
    /// one per element of the ServiceData arrays.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct ServiceRecordMask: u64 {
        /// ServiceID.
        const SERVICE_ID = 1 << 0;
        /// ServiceGID.
        const SERVICE_GID = 1 << 1;
        /// ServiceP_Key.
        const SERVICE_PKEY = 1 << 2;
        /// The reserved 16 bits after ServiceP_Key.
        const RESERVED = 1 << 3;
        /// ServiceLease.
        const SERVICE_LEASE = 1 << 4;
        /// ServiceKey.
        const SERVICE_KEY = 1 << 5;
        /// ServiceName.
        const SERVICE_NAME = 1 << 6;
        /// All 16 elements of ServiceData8 (bit 7 + i for element i).
        const SERVICE_DATA8 = 0xffff << 7;
        /// All 8 elements of ServiceData16 (bit 23 + i).
        const SERVICE_DATA16 = 0xff << 23;
        /// All 4 elements of ServiceData32 (bit 31 + i).
        const SERVICE_DATA32 = 0xf << 31;
        /// Both elements of ServiceData64 (bit 35 + i).
        const SERVICE_DATA64 = 0x3 << 35;
    }
}

impl ServiceRecordMask {
    /// The bit of ServiceData8\[i\] (i < 16), empty for other i.
    pub fn data8(i: usize) -> ServiceRecordMask {
        Self::element(7, 16, i)
    }
    /// The bit of ServiceData16\[i\] (i < 8).
    pub fn data16(i: usize) -> ServiceRecordMask {
        Self::element(23, 8, i)
    }
    /// The bit of ServiceData32\[i\] (i < 4).
    pub fn data32(i: usize) -> ServiceRecordMask {
        Self::element(31, 4, i)
    }
    /// The bit of ServiceData64\[i\] (i < 2).
    pub fn data64(i: usize) -> ServiceRecordMask {
        Self::element(35, 2, i)
    }
    fn element(first: u32, n: usize, i: usize) -> ServiceRecordMask {
        if i < n {
            ServiceRecordMask::from_bits_retain(1 << (first + i as u32))
        } else {
            ServiceRecordMask::empty()
        }
    }
}

/// ServiceRecord (IBA 15.2.5.14, 176 bytes): a service a port offers, found
/// by ID, name or data.
///
/// | byte | field |
/// |---|---|
/// | 0-7 | ServiceID |
/// | 8-23 | ServiceGID |
/// | 24-25 | ServiceP_Key |
/// | 26-27 | reserved |
/// | 28-31 | ServiceLease (seconds; 0xFFFFFFFF: forever) |
/// | 32-47 | ServiceKey |
/// | 48-111 | ServiceName (64 bytes, UTF-8, NUL-padded) |
/// | 112-127 | ServiceData8 (16 x 8 bits) |
/// | 128-143 | ServiceData16 (8 x 16 bits) |
/// | 144-159 | ServiceData32 (4 x 32 bits) |
/// | 160-175 | ServiceData64 (2 x 64 bits) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the fields are named after the table above
pub struct ServiceRecord {
    pub service_id: u64,
    pub service_gid: Gid,
    pub service_pkey: u16,
    pub service_lease: u32,
    pub service_key: [u8; 16],
    /// See [`ServiceRecord::name`].
    pub service_name: [u8; 64],
    pub service_data8: [u8; 16],
    pub service_data16: [u16; 8],
    pub service_data32: [u32; 4],
    pub service_data64: [u64; 2],
}

impl Default for ServiceRecord {
    fn default() -> ServiceRecord {
        ServiceRecord {
            service_id: 0,
            service_gid: Gid::default(),
            service_pkey: 0,
            service_lease: 0,
            service_key: [0; 16],
            service_name: [0; 64],
            service_data8: [0; 16],
            service_data16: [0; 8],
            service_data32: [0; 4],
            service_data64: [0; 2],
        }
    }
}

impl ServiceRecord {
    /// ServiceLease of a service that never expires.
    pub const INFINITE_LEASE: u32 = 0xffff_ffff;

    /// ServiceName as text: up to the first NUL, invalid UTF-8 replaced.
    pub fn name(&self) -> String {
        text(&self.service_name)
    }

    /// Sets ServiceName from text, NUL-padded; fails if it is longer than
    /// 64 bytes.
    pub fn set_name(&mut self, s: &str) -> Result<()> {
        self.service_name = super::pad_text("ServiceName", s)?;
        Ok(())
    }
}

impl Attribute for ServiceRecord {
    const ID: u16 = attr_id::SERVICE_RECORD;
    const NAME: &'static str = "ServiceRecord";
    const SIZE: usize = 176;

    fn in_class(c: u8) -> bool {
        c == class::SUBN_ADM
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let mut s = ServiceRecord {
            service_id: r.u64(0)?,
            service_gid: Gid(r.bytes(8)?),
            service_pkey: r.u16(24)?,
            service_lease: r.u32(28)?,
            service_key: r.bytes(32)?,
            service_name: r.bytes(48)?,
            service_data8: r.bytes(112)?,
            ..ServiceRecord::default()
        };
        for (i, v) in s.service_data16.iter_mut().enumerate() {
            *v = r.u16(128 + 2 * i)?;
        }
        for (i, v) in s.service_data32.iter_mut().enumerate() {
            *v = r.u32(144 + 4 * i)?;
        }
        for (i, v) in s.service_data64.iter_mut().enumerate() {
            *v = r.u64(160 + 8 * i)?;
        }
        Ok(s)
    }

    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        w.u64(0, self.service_id)?;
        w.bytes(8, &self.service_gid.0)?;
        w.u16(24, self.service_pkey)?;
        w.u16(26, 0)?;
        w.u32(28, self.service_lease)?;
        w.bytes(32, &self.service_key)?;
        w.bytes(48, &self.service_name)?;
        w.bytes(112, &self.service_data8)?;
        for (i, v) in self.service_data16.iter().enumerate() {
            w.u16(128 + 2 * i, *v)?;
        }
        for (i, v) in self.service_data32.iter().enumerate() {
            w.u32(144 + 4 * i, *v)?;
        }
        for (i, v) in self.service_data64.iter().enumerate() {
            w.u64(160 + 8 * i, *v)?;
        }
        Ok(())
    }
}

impl SaRecord for ServiceRecord {
    type Mask = ServiceRecordMask;
    /// One component per element of the ServiceData arrays.
    const COMPONENTS: &'static [C] = &[
        C::new("ServiceID", 0, 64),
        C::new("ServiceGID", 64, 128),
        C::new("ServiceP_Key", 192, 16),
        C::new("Reserved", 208, 16),
        C::new("ServiceLease", 224, 32),
        C::new("ServiceKey", 256, 128),
        C::new("ServiceName", 384, 512),
        C::new("ServiceData8.0", 896, 8),
        C::new("ServiceData8.1", 904, 8),
        C::new("ServiceData8.2", 912, 8),
        C::new("ServiceData8.3", 920, 8),
        C::new("ServiceData8.4", 928, 8),
        C::new("ServiceData8.5", 936, 8),
        C::new("ServiceData8.6", 944, 8),
        C::new("ServiceData8.7", 952, 8),
        C::new("ServiceData8.8", 960, 8),
        C::new("ServiceData8.9", 968, 8),
        C::new("ServiceData8.10", 976, 8),
        C::new("ServiceData8.11", 984, 8),
        C::new("ServiceData8.12", 992, 8),
        C::new("ServiceData8.13", 1000, 8),
        C::new("ServiceData8.14", 1008, 8),
        C::new("ServiceData8.15", 1016, 8),
        C::new("ServiceData16.0", 1024, 16),
        C::new("ServiceData16.1", 1040, 16),
        C::new("ServiceData16.2", 1056, 16),
        C::new("ServiceData16.3", 1072, 16),
        C::new("ServiceData16.4", 1088, 16),
        C::new("ServiceData16.5", 1104, 16),
        C::new("ServiceData16.6", 1120, 16),
        C::new("ServiceData16.7", 1136, 16),
        C::new("ServiceData32.0", 1152, 32),
        C::new("ServiceData32.1", 1184, 32),
        C::new("ServiceData32.2", 1216, 32),
        C::new("ServiceData32.3", 1248, 32),
        C::new("ServiceData64.0", 1280, 64),
        C::new("ServiceData64.1", 1344, 64),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_record_matches_the_spec_layout() {
        let mut s = ServiceRecord {
            service_id: 0x0102_0304_0506_0708,
            service_gid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]),
            service_pkey: 0x8001,
            service_lease: ServiceRecord::INFINITE_LEASE,
            service_key: [0x5a; 16],
            service_data8: core::array::from_fn(|i| i as u8),
            service_data16: core::array::from_fn(|i| 0x1000 + i as u16),
            service_data32: core::array::from_fn(|i| 0x2000_0000 + i as u32),
            service_data64: [0x3000_0000_0000_0000, 0x3000_0000_0000_0001],
            ..ServiceRecord::default()
        };
        s.set_name("DAPL service").unwrap();
        let b = s.to_bytes().unwrap();
        assert_eq!(b.len(), 176);
        assert_eq!(&b[0..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[8..24], &s.service_gid.0);
        assert_eq!(&b[24..32], &[0x80, 0x01, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(&b[32..48], &[0x5a; 16]);
        assert_eq!(&b[48..60], b"DAPL service");
        assert!(b[60..112].iter().all(|&c| c == 0));
        assert_eq!(&b[112..116], &[0, 1, 2, 3]);
        assert_eq!(&b[128..132], &[0x10, 0x00, 0x10, 0x01]);
        assert_eq!(&b[156..160], &[0x20, 0, 0, 3]);
        assert_eq!(&b[168..176], &[0x30, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(ServiceRecord::decode(&b).unwrap(), s);
        assert_eq!(s.name(), "DAPL service");
        assert!(ServiceRecord::decode(&b[..175]).is_err());
    }

    #[test]
    fn service_record_mask_bits_follow_the_record() {
        assert_eq!(ServiceRecordMask::data8(0).bits(), 1 << 7);
        assert_eq!(ServiceRecordMask::data8(15).bits(), 1 << 22);
        assert_eq!(ServiceRecordMask::data16(0).bits(), 1 << 23);
        assert_eq!(ServiceRecordMask::data32(3).bits(), 1 << 34);
        assert_eq!(ServiceRecordMask::data64(1).bits(), 1 << 36);
        assert!(ServiceRecordMask::data64(2).is_empty());
        let all: u64 = (0..16).map(|i| ServiceRecordMask::data8(i).bits()).sum();
        assert_eq!(all, ServiceRecordMask::SERVICE_DATA8.bits());
        assert_eq!(
            ServiceRecordMask::all().bits(),
            (1 << 37) - 1,
            "37 components, no gap"
        );
    }
}
