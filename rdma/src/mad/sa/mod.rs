//! Subnet administration (IBA 15), the codec: the SA class header, the SA
//! records, and the queries that carry them, as bytes. It sends nothing:
//! the SA client over a umad port is `umad::sa` (feature `tokio`); an SA
//! server (the package `rdma-sm`) answers with it.
//!
//! An SA MAD is the 24-byte common header, the 32-byte SA header
//! ([`SaHeader`]: the RMPP header, SM_Key, AttributeOffset, ComponentMask),
//! then 200 bytes of SA data: one record in a Get, Set or Delete and their
//! responses, as many records as fit in a GetTable response (AttributeOffset
//! apart), or more in an RMPP transfer that the receiver has reassembled.
//!
//! The records are [`Attribute`]s, and [`SaRecord`]s with their
//! ComponentMask type: [`NodeRecord`], [`PortInfoRecord`], [`LinkRecord`],
//! [`ServiceRecord`], [`PathRecord`], [`McMemberRecord`],
//! [`InformInfoRecord`], and the records of one node's or port's SMP
//! attribute: [`SmInfoRecord`], [`SwitchInfoRecord`], [`LftRecord`],
//! [`MftRecord`], [`GuidInfoRecord`], [`PKeyTableRecord`], [`Sl2VlTableRecord`],
//! [`VlArbTableRecord`]; [`InformInfo`] is the subscription set to the SA.
//! [`SaRequest`] builds a request, [`SaTable`] iterates the records of a
//! GetTable response, [`response`] reads the record of a Get, Set or Delete
//! response, and a status that is not success is an [`SaError::Status`]
//! with its [`SaStatusCode`]. Each record's [`SaRecord::COMPONENTS`] places
//! its ComponentMask bits in its wire form, and a [`Matcher`] selects the
//! records that match a query on them (what an SA answers a Get or GetTable
//! with).
//!
//! ```
//! use rdma::mad::sa::{PathRecord, PathRecordMask, SaRequest, SaTable};
//! use rdma::Gid;
//!
//! let sgid = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
//! let dgid = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
//! let query = PathRecord { sgid, dgid, numb_path: 1, ..Default::default() };
//! let mask = PathRecordMask::SGID | PathRecordMask::DGID | PathRecordMask::NUMB_PATH;
//! let req = SaRequest::get_table(0x1234).record(&query, mask)?;
//! assert_eq!(req.sa_header()?.comp_mask, 0x100c);
//!
//! // The SA's answer: two paths (built here as an SA would).
//! let paths = [PathRecord { slid: 1, dlid: 2, ..query }, PathRecord { slid: 1, dlid: 3, ..query }];
//! let resp = rdma::mad::sa::table_response(&req, &paths)?;
//! let got: Vec<PathRecord> = SaTable::<PathRecord>::new(resp.as_bytes())?
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(got, paths);
//! # Ok::<(), rdma::mad::sa::SaError>(())
//! ```

mod component;
mod inform;
mod mcm;
mod node;
mod path;
mod query;
mod service;
mod smp_records;

pub use component::{Component, Matcher, MAX_RECORD};
pub use inform::{InformInfo, InformInfoRecord, InformInfoRecordMask};
pub use mcm::{JoinState, McMemberRecord, McMemberRecordMask};
pub use node::{
    LinkRecord, LinkRecordMask, NodeRecord, NodeRecordMask, PortInfoRecord, PortInfoRecordMask,
};
pub use path::{PathRecord, PathRecordMask, Selector};
pub use query::{
    check_status, decode_all, response, table_response, SaError, SaRequest, SaStatusCode, SaTable,
    CLASS_VERSION,
};
pub use service::{ServiceRecord, ServiceRecordMask};
pub use smp_records::{
    GuidInfoRecord, GuidInfoRecordMask, LftRecord, LftRecordMask, MftRecord, MftRecordMask,
    PKeyTableRecord, PKeyTableRecordMask, Sl2VlTableRecord, Sl2VlTableRecordMask, SmInfoRecord,
    SmInfoRecordMask, SwitchInfoRecord, SwitchInfoRecordMask, VlArbTableRecord,
    VlArbTableRecordMask,
};

use super::rmpp::RmppHeader;
use super::wire::{In, Out};
use super::{Attribute, Error, Result};

/// Attribute IDs of the SA class (IBA 15.2.5, table 186).
pub mod attr_id {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Notice.
    pub const NOTICE: u16 = 0x0002;
    /// InformInfo.
    pub const INFORM_INFO: u16 = 0x0003;
    /// NodeRecord.
    pub const NODE_RECORD: u16 = 0x0011;
    /// PortInfoRecord.
    pub const PORT_INFO_RECORD: u16 = 0x0012;
    /// SLtoVLMappingTableRecord.
    pub const SL2VL_TABLE_RECORD: u16 = 0x0013;
    /// SwitchInfoRecord.
    pub const SWITCH_INFO_RECORD: u16 = 0x0014;
    /// LinearForwardingTableRecord.
    pub const LFT_RECORD: u16 = 0x0015;
    /// MulticastForwardingTableRecord.
    pub const MFT_RECORD: u16 = 0x0017;
    /// SMInfoRecord.
    pub const SM_INFO_RECORD: u16 = 0x0018;
    /// LinkRecord.
    pub const LINK_RECORD: u16 = 0x0020;
    /// GUIDInfoRecord.
    pub const GUID_INFO_RECORD: u16 = 0x0030;
    /// ServiceRecord.
    pub const SERVICE_RECORD: u16 = 0x0031;
    /// P_KeyTableRecord.
    pub const P_KEY_TABLE_RECORD: u16 = 0x0033;
    /// PathRecord.
    pub const PATH_RECORD: u16 = 0x0035;
    /// VLArbitrationTableRecord.
    pub const VL_ARB_TABLE_RECORD: u16 = 0x0036;
    /// MCMemberRecord.
    pub const MC_MEMBER_RECORD: u16 = 0x0038;
    /// TraceRecord.
    pub const TRACE_RECORD: u16 = 0x0039;
    /// MultiPathRecord.
    pub const MULTI_PATH_RECORD: u16 = 0x003a;
    /// InformInfoRecord.
    pub const INFORM_INFO_RECORD: u16 = 0x00f3;
}

/// The bits of the SA's `ClassPortInfo::capability_mask` (IBA 15.2.5.1):
/// what the SA serves beyond the mandatory records.
pub mod cap {
    /// Get and Set of Notice.
    pub const GET_SET_NOTICE: u16 = 1 << 1;
    /// The optional records (all but MCMemberRecord, TraceRecord and
    /// MultiPathRecord).
    pub const OPTIONAL_RECORDS: u16 = 1 << 8;
    /// UD multicast: MCMemberRecord joins and leaves.
    pub const UD_MULTICAST: u16 = 1 << 9;
    /// MultiPathRecord (GetMulti) and TraceRecord.
    pub const MULTI_PATH: u16 = 1 << 10;
    /// Re-initialisation.
    pub const REINIT: u16 = 1 << 11;
    /// PortInfoRecord queries whose attribute modifier's bit 31 asks for
    /// a match of any bit of PortInfo's CapabilityMask rather than all.
    pub const PORT_INFO_CAP_MASK_MATCH: u16 = 1 << 13;
}

/// The bits of the SA's `ClassPortInfo::capability_mask2` (IBA 15.2.5.1).
pub mod cap2 {
    /// PortInfoRecord queries whose attribute modifier's bit 31 asks for
    /// a match of any bit of PortInfo's CapabilityMask2 as well.
    pub const PORT_INFO_CAP_MASK2_MATCH: u32 = 1 << 10;
}

/// An SA record: an [`Attribute`] that queries select by ComponentMask,
/// one bit per field of the record.
pub trait SaRecord: Attribute {
    /// The record's ComponentMask bits.
    type Mask: bitflags::Flags<Bits = u64> + Copy;

    /// The record's components in the order of its wire layout, reserved
    /// fields included: entry i is the field ComponentMask bit i selects.
    /// They tile the record from bit 0; a tail with no mask bit (reserved
    /// bytes at the end) is left out. [`Matcher`] compares by them.
    const COMPONENTS: &'static [Component];

    /// AttributeOffset of a table of these records: the record's size in
    /// 8-byte words, rounded up.
    const ATTR_OFFSET: u16 = Self::SIZE.div_ceil(8) as u16;
}

/// Text of a NUL-padded field: up to the first NUL, invalid UTF-8 replaced.
pub(crate) fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(b.get(..end).unwrap_or(&[])).into_owned()
}

/// A 64-byte NUL-padded field from text; longer text is an error.
pub(crate) fn pad_text(field: &'static str, s: &str) -> Result<[u8; 64]> {
    let mut out = [0u8; 64];
    let dst = out.get_mut(..s.len()).ok_or(Error::FieldOverflow {
        field,
        bits: 512,
        value: s.len() as u64,
    })?;
    dst.copy_from_slice(s.as_bytes());
    Ok(out)
}

/// The SA header.
///
/// | byte | field |
/// |---|---|
/// | 24-35 | RMPP header |
/// | 36-43 | SM_Key |
/// | 44-45 | AttributeOffset (in 8-byte words) |
/// | 46-47 | reserved |
/// | 48-55 | ComponentMask |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SaHeader {
    /// The RMPP header.
    pub rmpp: RmppHeader,
    /// SM_Key.
    pub sm_key: u64,
    /// AttributeOffset: the size of one record in 8-byte words (GetTable
    /// responses).
    pub attr_offset: u16,
    /// The reserved bytes 46-47 (kept so that decoding is lossless).
    pub reserved: u16,
    /// ComponentMask: which fields of the record are query terms.
    pub comp_mask: u64,
}

impl SaHeader {
    /// The header's offset in a MAD.
    pub const OFFSET: usize = 24;
    /// The header's size.
    pub const SIZE: usize = 32;
    /// Where the SA data begins in a MAD.
    pub const DATA_OFFSET: usize = 56;

    /// Decodes the 32 bytes at the start of `b` (a MAD's bytes 24-55).
    pub fn decode(b: &[u8]) -> Result<SaHeader> {
        let r = In::new(b, "SA header", Self::SIZE)?;
        Ok(SaHeader {
            rmpp: RmppHeader::decode(b)?,
            sm_key: r.u64(12)?,
            attr_offset: r.u16(20)?,
            reserved: r.u16(22)?,
            comp_mask: r.u64(24)?,
        })
    }

    /// Encodes into the first 32 bytes of `out`.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        self.rmpp.encode_into(out)?;
        let mut w = Out::new(out, "SA header", Self::SIZE)?;
        w.u64(12, self.sm_key)?;
        w.u16(20, self.attr_offset)?;
        w.u16(22, self.reserved)?;
        w.u64(24, self.comp_mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::rmpp::{RmppFlags, RmppType};

    /// xorshift64*: reproducible pseudo-random bytes.
    pub(super) fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }

    /// Every prefix shorter than the record is `Truncated`; random bytes
    /// decode, encode, and decode to the same record; encoding into a short
    /// buffer fails.
    pub(super) fn hostile<R: SaRecord + PartialEq + std::fmt::Debug>() {
        for n in 0..R::SIZE {
            assert!(
                matches!(R::decode(&vec![0xff; n]), Err(Error::Truncated { .. })),
                "{} of {n} bytes",
                R::NAME
            );
        }
        // Fewer under Miri, where each round is slow.
        let seeds = if cfg!(miri) { 12 } else { 200 };
        for seed in 0..seeds {
            let b = noise(seed, R::SIZE + 3);
            let r = R::decode(&b).unwrap();
            let e = r.to_bytes().unwrap();
            assert_eq!(e.len(), R::SIZE);
            assert_eq!(R::decode(&e).unwrap(), r, "{}", R::NAME);
            assert!(r.encode_into(&mut vec![0; R::SIZE - 1]).is_err());
        }
        assert!(usize::from(R::ATTR_OFFSET) * 8 >= R::SIZE);
        assert!(usize::from(R::ATTR_OFFSET) * 8 < R::SIZE + 8);
        assert!(R::in_class(super::super::class::SUBN_ADM));
        assert!(!R::in_class(super::super::class::PERF_MGT));
    }

    #[test]
    fn every_record_survives_hostile_bytes() {
        hostile::<NodeRecord>();
        hostile::<PortInfoRecord>();
        hostile::<LinkRecord>();
        hostile::<ServiceRecord>();
        hostile::<PathRecord>();
        hostile::<McMemberRecord>();
        hostile::<InformInfoRecord>();
        for n in 0..InformInfo::SIZE {
            assert!(InformInfo::decode(&vec![0; n]).is_err());
        }
        assert_eq!(
            [
                NodeRecord::ATTR_OFFSET,
                PortInfoRecord::ATTR_OFFSET,
                LinkRecord::ATTR_OFFSET,
                ServiceRecord::ATTR_OFFSET,
                PathRecord::ATTR_OFFSET,
                McMemberRecord::ATTR_OFFSET,
                InformInfoRecord::ATTR_OFFSET,
            ],
            [14, 9, 1, 22, 8, 7, 8]
        );
    }

    #[test]
    fn sa_header_matches_the_spec_layout() {
        let h = SaHeader {
            rmpp: RmppHeader {
                version: 1,
                rmpp_type: RmppType::Data,
                resp_time: 0,
                flags: RmppFlags::ACTIVE | RmppFlags::FIRST | RmppFlags::LAST,
                status: 0,
                data1: 1,
                data2: 0x40,
            },
            sm_key: 0x0102_0304_0506_0708,
            attr_offset: 8,
            reserved: 0,
            comp_mask: 0x8000_0000_0000_0011,
        };
        let bytes = [
            0x01, 0x01, 0x07, 0x00, 0, 0, 0, 1, 0, 0, 0, 0x40, // RMPP
            1, 2, 3, 4, 5, 6, 7, 8, // SM_Key
            0x00, 0x08, // AttributeOffset
            0x00, 0x00, // reserved
            0x80, 0, 0, 0, 0, 0, 0, 0x11, // ComponentMask
        ];
        let mut out = [0u8; 32];
        h.encode_into(&mut out).unwrap();
        assert_eq!(out, bytes);
        assert_eq!(SaHeader::decode(&bytes).unwrap(), h);
        assert!(SaHeader::decode(&bytes[..31]).is_err());
    }
}
