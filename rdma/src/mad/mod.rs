//! The MAD codec: management datagrams of InfiniBand (and RoCE) as typed
//! Rust values, in pure Rust.
//!
//! A MAD is 256 bytes: a 24-byte common header ([`MadHeader`]), a class
//! header for some classes (the SMP header of subnet management: M_Key,
//! and for directed route [`DrHeader`]; the RMPP header and OUI of vendor
//! range 2 ([`VendorHeader`]); the SA header ([`SaHeader`]); 40 reserved
//! bytes for PerfMgt), then the class data, where a typed [`Attribute`]
//! sits. All fields are big-endian.
//!
//! The attributes:
//! - every class: [`ClassPortInfo`], [`Notice`] (traps, with [`Trap`]);
//! - subnet management (SMA, [`Mad::smp`] and [`Mad::smp_directed`]):
//!   [`NodeInfo`], [`NodeDescription`], [`PortInfo`], [`SwitchInfo`],
//!   [`GuidInfo`], [`PKeyTable`], [`SlToVlMappingTable`],
//!   [`VlArbitrationTable`], [`LinearForwardingTable`],
//!   [`MulticastForwardingTable`], [`SmInfo`];
//! - performance management: [`PortSamplesControl`], [`PortCounters`],
//!   [`PortCountersExtended`];
//! - subnet administration: the records of [`sa`] (their codec; the client
//!   that queries an SA is `umad::sa`).
//!
//! PortInfo's enumerated fields are typed: [`PortState`], [`PhysPortState`],
//! [`LinkWidth`], [`LinkSpeed`], [`LinkSpeedExt`], each with an `Other`
//! variant so that every byte decodes and encodes back, and a `Display` that
//! writes libibmad's name.
//!
//! [`diag`] prints attributes as infiniband-diags does (`smpquery`'s
//! `Name:.....value` lines): [`PortInfo::diag`], [`NodeInfo::diag`].
//!
//! An attribute ID means different things in different classes (0x0012 is
//! SwitchInfo for the SMA and PortCounters for PerfMgt), so
//! [`Mad::attribute`] checks the class as well as the ID.
//!
//! Decoding never panics: every read is bounds-checked and a short or
//! malformed input is an [`Error`]. Encoding fails, rather than truncating,
//! when a value does not fit its field.
//!
//! ```
//! use rdma::mad::{class, Attribute, Mad, MadHeader, Method, PortCounters};
//!
//! let mut req = Mad::new(&MadHeader::request(class::PERF_MGT, 1, Method::GET, 7, PortCounters::ID));
//! req.set_attribute(&PortCounters { port_select: 1, ..Default::default() })?;
//! let wire = req.as_bytes().to_vec();
//!
//! let back = Mad::decode(&wire)?;
//! assert_eq!(back.header().method, Method::GET);
//! assert_eq!(back.attribute::<PortCounters>()?.port_select, 1);
//! # Ok::<(), rdma::mad::Error>(())
//! ```

mod attr;
pub mod diag;
mod header;
mod notice;
mod perf;
mod port;
mod rmpp;
pub mod sa;
mod sma;
mod smp;
mod tables;
mod vendor;
mod wire;

pub use attr::{id as attr_id, Attribute, ClassPortInfo, NodeInfo, PortInfo};
pub use header::{InvalidField, MadHeader, Method, Status};
pub use notice::{Notice, Trap};
pub use perf::{PortCounters, PortCountersExtended, PortSamplesControl, PERF_DATA_OFFSET};
pub use port::{LinkSpeed, LinkSpeedExt, LinkWidth, PhysPortState, PortState};
pub use rmpp::{RmppFlags, RmppHeader, RmppType};
pub use sa::SaHeader;
pub use sma::{NodeDescription, SmInfo, SwitchInfo};
pub use smp::{
    parse_path as parse_dr_path, DrHeader, DIRECTION_BIT, MAX_HOPS, PERMISSIVE_LID,
    SMP_DATA_OFFSET, SMP_DATA_SIZE,
};
pub use tables::{
    GuidInfo, LinearForwardingTable, MulticastForwardingTable, PKeyTable, SlToVlMappingTable,
    VlArbEntry, VlArbitrationTable,
};
pub use vendor::{Oui, VendorHeader};

/// Why bytes did not decode or a value did not encode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input (or output buffer) is shorter than the structure.
    #[error("{what} needs {need} bytes, got {have}")]
    Truncated {
        /// The structure.
        what: &'static str,
        /// The bytes it needs.
        need: usize,
        /// The bytes there were.
        have: usize,
    },
    /// The base version is not 1, the InfiniBand MAD format.
    #[error("MAD base version {0} is not 1 (the only InfiniBand MAD format)")]
    BaseVersion(u8),
    /// The class has no such header (an OUI outside vendor range 2, an SA
    /// header outside SubnAdm).
    #[error("management class {class:#04x} has no {what}")]
    WrongClass {
        /// The header asked for.
        what: &'static str,
        /// The MAD's class.
        class: u8,
    },
    /// The MAD carries another attribute than the one asked for.
    #[error("the MAD carries attribute {found:#06x}, not {name} ({expected:#06x})")]
    WrongAttribute {
        /// The attribute's name.
        name: &'static str,
        /// Its ID.
        expected: u16,
        /// The ID in the header.
        found: u16,
    },
    /// A directed-route SMP has more hops than its paths hold (63).
    #[error("a directed route of {0} hops is longer than 63")]
    HopCount(usize),
    /// A directed-route SMP's hop pointer is past the end of its route
    /// (hop count + 1).
    #[error("directed-route hop pointer {pointer} is past hop count {count} + 1")]
    HopPointer {
        /// The hop pointer.
        pointer: u8,
        /// The hop count.
        count: u8,
    },
    /// A directed route that is not one (empty, not port numbers).
    #[error("bad directed route: {0}")]
    BadPath(&'static str),
    /// A value is wider than its field.
    #[error("{value:#x} does not fit the {bits}-bit field {field}")]
    FieldOverflow {
        /// The field.
        field: &'static str,
        /// Its width.
        bits: u32,
        /// The value.
        value: u64,
    },
}

/// The codec's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Management classes (IBA 13.4.4, table 12).
pub mod class {
    /// Subnet management, LID routed (SMI, QP0).
    pub const SUBN_LID_ROUTED: u8 = 0x01;
    /// Subnet administration (GSI).
    pub const SUBN_ADM: u8 = 0x03;
    /// Performance management.
    pub const PERF_MGT: u8 = 0x04;
    /// Baseboard management.
    pub const BM: u8 = 0x05;
    /// Device management.
    pub const DEV_MGT: u8 = 0x06;
    /// Communication management (owned by the kernel's CM).
    pub const CM: u8 = 0x07;
    /// SNMP tunneling.
    pub const SNMP: u8 = 0x08;
    /// Subnet management, directed route (SMI, QP0).
    pub const SUBN_DIRECTED_ROUTE: u8 = 0x81;

    /// Vendor classes of range 1 (no OUI).
    pub const VENDOR_RANGE1: std::ops::RangeInclusive<u8> = 0x09..=0x0f;
    /// Vendor classes of range 2 (with OUI and RMPP header).
    pub const VENDOR_RANGE2: std::ops::RangeInclusive<u8> = 0x30..=0x4f;

    /// Whether `class` is a subnet management class (QP0 only).
    pub fn is_smi(class: u8) -> bool {
        class == SUBN_LID_ROUTED || class == SUBN_DIRECTED_ROUTE
    }
    /// Whether `class` is a vendor class of range 2.
    pub fn is_vendor_range2(class: u8) -> bool {
        VENDOR_RANGE2.contains(&class)
    }
    /// Where the class's data (its attribute) begins in a MAD.
    pub fn data_offset(class: u8) -> usize {
        match class {
            SUBN_ADM => super::SaHeader::DATA_OFFSET,
            PERF_MGT | SUBN_LID_ROUTED | SUBN_DIRECTED_ROUTE => 64,
            c if is_vendor_range2(c) => super::VendorHeader::DATA_OFFSET,
            _ => super::MadHeader::SIZE,
        }
    }
}

/// A MAD: at least 256 bytes (more for a reassembled RMPP transfer), with
/// typed access to its headers and attribute.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Mad {
    /// Invariant: at least `Mad::SIZE` bytes.
    bytes: Vec<u8>,
}

impl Mad {
    /// The size of one MAD.
    pub const SIZE: usize = 256;

    /// A zeroed MAD with this header.
    pub fn new(header: &MadHeader) -> Mad {
        let mut m = Mad {
            bytes: vec![0; Self::SIZE],
        };
        m.set_header(header);
        m
    }

    /// Decodes a MAD from bytes received: at least the 24-byte header, base
    /// version 1. Shorter than 256 bytes is padded with zeros (a timed-out
    /// request comes back as its header only); longer is kept (RMPP).
    pub fn decode(bytes: &[u8]) -> Result<Mad> {
        let h = MadHeader::decode(bytes)?;
        if h.base_version != 1 {
            return Err(Error::BaseVersion(h.base_version));
        }
        let mut v = bytes.to_vec();
        if v.len() < Self::SIZE {
            v.resize(Self::SIZE, 0);
        }
        Ok(Mad { bytes: v })
    }

    /// The common header.
    pub fn header(&self) -> MadHeader {
        // Cannot fail: the buffer holds at least 256 bytes.
        MadHeader::decode(&self.bytes).unwrap_or_default()
    }

    /// Replaces the common header.
    pub fn set_header(&mut self, h: &MadHeader) {
        // Cannot fail: the buffer holds at least 256 bytes.
        let _ = h.encode_into(&mut self.bytes);
    }

    /// The management class.
    pub fn class(&self) -> u8 {
        self.header().mgmt_class
    }
    /// The method.
    pub fn method(&self) -> Method {
        self.header().method
    }
    /// The transaction ID.
    pub fn tid(&self) -> u64 {
        self.header().tid
    }
    /// Sets the transaction ID.
    pub fn set_tid(&mut self, tid: u64) {
        let h = MadHeader {
            tid,
            ..self.header()
        };
        self.set_header(&h);
    }
    /// The status.
    pub fn status(&self) -> Status {
        self.header().status
    }

    /// All bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// All bytes, writable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
    /// The number of bytes (256, or more for RMPP).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    /// Never true: a MAD has at least 256 bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Where the class data begins (see [`class::data_offset`]).
    pub fn data_offset(&self) -> usize {
        class::data_offset(self.class())
    }
    /// The class data (after the common and class headers).
    pub fn data(&self) -> &[u8] {
        self.bytes.get(self.data_offset()..).unwrap_or(&[])
    }
    /// The class data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let off = self.data_offset();
        self.bytes.get_mut(off..).unwrap_or(&mut [])
    }

    fn class_bytes(&self) -> &[u8] {
        self.bytes.get(MadHeader::SIZE..).unwrap_or(&[])
    }
    fn class_bytes_mut(&mut self) -> &mut [u8] {
        self.bytes.get_mut(MadHeader::SIZE..).unwrap_or(&mut [])
    }

    /// The vendor header (range 2 classes only).
    pub fn vendor_header(&self) -> Result<VendorHeader> {
        self.expect_class("vendor header (OUI)", class::is_vendor_range2)?;
        VendorHeader::decode(self.class_bytes())
    }
    /// Sets the vendor header (range 2 classes only).
    pub fn set_vendor_header(&mut self, v: &VendorHeader) -> Result<()> {
        self.expect_class("vendor header (OUI)", class::is_vendor_range2)?;
        v.encode_into(self.class_bytes_mut())
    }

    /// The SA header (SubnAdm only).
    pub fn sa_header(&self) -> Result<SaHeader> {
        self.expect_class("SA header", |c| c == class::SUBN_ADM)?;
        SaHeader::decode(self.class_bytes())
    }
    /// Sets the SA header (SubnAdm only).
    pub fn set_sa_header(&mut self, h: &SaHeader) -> Result<()> {
        self.expect_class("SA header", |c| c == class::SUBN_ADM)?;
        h.encode_into(self.class_bytes_mut())
    }

    /// The RMPP header, for the classes that carry one (SA, vendor range 2).
    pub fn rmpp_header(&self) -> Result<RmppHeader> {
        self.expect_class("RMPP header", |c| {
            c == class::SUBN_ADM || class::is_vendor_range2(c)
        })?;
        RmppHeader::decode(self.class_bytes())
    }

    fn expect_class(&self, what: &'static str, ok: impl Fn(u8) -> bool) -> Result<()> {
        let class = self.class();
        if ok(class) {
            Ok(())
        } else {
            Err(Error::WrongClass { what, class })
        }
    }

    /// The attribute in the class data; the header's attribute ID must be
    /// `A::ID` and the class one that has the attribute
    /// ([`Attribute::in_class`]).
    pub fn attribute<A: Attribute>(&self) -> Result<A> {
        self.expect_class(A::NAME, A::in_class)?;
        let found = self.header().attr_id;
        if found != A::ID {
            return Err(Error::WrongAttribute {
                name: A::NAME,
                expected: A::ID,
                found,
            });
        }
        A::decode(self.data())
    }

    /// Writes the attribute into the class data and its ID into the header
    /// (a class without the attribute is an error).
    pub fn set_attribute<A: Attribute>(&mut self, a: &A) -> Result<()> {
        self.expect_class(A::NAME, A::in_class)?;
        a.encode_into(self.data_mut())?;
        let h = MadHeader {
            attr_id: A::ID,
            ..self.header()
        };
        self.set_header(&h);
        Ok(())
    }

    /// A response to this request: the same header with the response method
    /// and status 0, the same class header (OUI, SM key, M_Key), zeroed
    /// data.
    ///
    /// A directed-route SMP is answered the way IBA 14.2.2 has the
    /// responder do it: the D bit set, the hop count, the hop pointer
    /// (hop count + 1 at the destination; the SMI decrements it as it sends
    /// the response, C14-13), DrSLID, DrDLID and both paths kept, so that
    /// the response retraces the return path.
    pub fn response(&self) -> Mad {
        let h = self.header();
        let dr = h.mgmt_class == class::SUBN_DIRECTED_ROUTE;
        let mut r = Mad::new(&MadHeader {
            method: h.method.response(),
            status: if dr {
                Status(smp::DIRECTION_BIT)
            } else {
                Status::OK
            },
            ..h
        });
        let off = self.data_offset().min(Self::SIZE);
        // The initial and return paths of a directed-route SMP.
        let paths = if dr {
            SMP_DATA_OFFSET + SMP_DATA_SIZE..Self::SIZE
        } else {
            0..0
        };
        for range in [MadHeader::SIZE..off, paths] {
            if let (Some(dst), Some(src)) = (r.bytes.get_mut(range.clone()), self.bytes.get(range))
            {
                dst.copy_from_slice(src);
            }
        }
        r
    }
}

impl std::fmt::Debug for Mad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mad")
            .field("header", &self.header())
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// Decodes everything the codec knows in `bytes`, for tests and fuzzing:
/// the header, the class header of the class (for a directed-route SMP its
/// hop count and pointer are checked), and the attribute that the header
/// names when it is one of the typed attributes of the class. Returns the
/// first error; never panics.
pub fn decode_all(bytes: &[u8]) -> Result<Mad> {
    fn attr<A: Attribute>(m: &Mad) -> Result<()> {
        m.attribute::<A>().map(|_| ())
    }
    let mad = Mad::decode(bytes)?;
    let c = mad.class();
    if class::is_vendor_range2(c) {
        mad.vendor_header()?;
    }
    if c == class::SUBN_ADM {
        mad.sa_header()?;
        // The SA's records (a Get's one, a GetTable's each): only what
        // does not decode is an error here, not an SA error status.
        if let Err(sa::SaError::Codec(e)) = sa::decode_all(bytes) {
            return Err(e);
        }
    }
    if class::is_smi(c) {
        mad.m_key()?;
    }
    if c == class::SUBN_DIRECTED_ROUTE {
        mad.dr_header()?;
    }
    let id = mad.header().attr_id;
    if class::is_smi(c) {
        match id {
            attr_id::NOTICE => attr::<Notice>(&mad)?,
            attr_id::NODE_DESCRIPTION => attr::<NodeDescription>(&mad)?,
            attr_id::NODE_INFO => attr::<NodeInfo>(&mad)?,
            attr_id::SWITCH_INFO => attr::<SwitchInfo>(&mad)?,
            attr_id::GUID_INFO => attr::<GuidInfo>(&mad)?,
            attr_id::PORT_INFO => attr::<PortInfo>(&mad)?,
            attr_id::P_KEY_TABLE => attr::<PKeyTable>(&mad)?,
            attr_id::SL_TO_VL_MAPPING_TABLE => attr::<SlToVlMappingTable>(&mad)?,
            attr_id::VL_ARBITRATION_TABLE => attr::<VlArbitrationTable>(&mad)?,
            attr_id::LINEAR_FORWARDING_TABLE => attr::<LinearForwardingTable>(&mad)?,
            attr_id::MULTICAST_FORWARDING_TABLE => attr::<MulticastForwardingTable>(&mad)?,
            attr_id::SM_INFO => attr::<SmInfo>(&mad)?,
            _ => {}
        }
        return Ok(mad);
    }
    match (id, c) {
        (ClassPortInfo::ID, _) => attr::<ClassPortInfo>(&mad)?,
        (Notice::ID, class::PERF_MGT) => attr::<Notice>(&mad)?,
        (PortSamplesControl::ID, class::PERF_MGT) => attr::<PortSamplesControl>(&mad)?,
        (PortCounters::ID, class::PERF_MGT) => attr::<PortCounters>(&mad)?,
        (PortCountersExtended::ID, class::PERF_MGT) => attr::<PortCountersExtended>(&mad)?,
        _ => {}
    }
    Ok(mad)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix lengths of a `len`-byte MAD that the truncation tests try:
    /// every one, or under Miri (where each decode is slow) those at and
    /// around the header boundaries.
    pub(crate) fn prefix_lens(len: usize) -> Vec<usize> {
        if cfg!(miri) {
            [
                0, 1, 23, 24, 25, 35, 36, 55, 56, 57, 63, 64, 65, 127, 128, 129, 255, 256, 257,
            ]
            .into_iter()
            .filter(|&n| n <= len)
            .chain([len])
            .collect()
        } else {
            (0..=len).collect()
        }
    }

    #[test]
    fn a_vendor_mad_round_trips_with_its_oui_and_payload() {
        let mut m = Mad::new(&MadHeader::request(0x32, 1, Method::GET, 0x1122_3344, 0));
        m.set_vendor_header(&VendorHeader::new(Oui::OPENIB))
            .unwrap();
        m.data_mut()[..4].copy_from_slice(b"host");
        let b = m.as_bytes();
        assert_eq!(b.len(), 256);
        assert_eq!(&b[..4], &[1, 0x32, 1, 1]);
        assert_eq!(&b[8..16], &[0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44]);
        assert_eq!(&b[37..40], &[0x00, 0x14, 0x05]);
        assert_eq!(&b[40..44], b"host");
        let back = Mad::decode(b).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.vendor_header().unwrap().oui, Oui::OPENIB);

        let r = back.response();
        assert_eq!(r.method(), Method::GET_RESP);
        assert_eq!(r.tid(), 0x1122_3344);
        assert_eq!(r.vendor_header().unwrap().oui, Oui::OPENIB);
        assert!(r.data().iter().all(|&b| b == 0));
    }

    #[test]
    fn attributes_go_to_their_class_data_offset() {
        let pc = PortCounters {
            port_select: 1,
            port_xmit_data: 0xdead,
            ..Default::default()
        };
        let mut m = Mad::new(&MadHeader::request(class::PERF_MGT, 1, Method::GET, 1, 0));
        m.set_attribute(&pc).unwrap();
        assert_eq!(m.header().attr_id, 0x0012);
        assert_eq!(m.as_bytes()[64 + 1], 1);
        assert_eq!(&m.as_bytes()[64 + 24..64 + 28], &[0, 0, 0xde, 0xad]);
        assert_eq!(m.attribute::<PortCounters>().unwrap(), pc);
        assert_eq!(
            m.attribute::<PortCountersExtended>(),
            Err(Error::WrongAttribute {
                name: "PortCountersExtended",
                expected: 0x1d,
                found: 0x12
            })
        );

        let mut sa = Mad::new(&MadHeader::request(class::SUBN_ADM, 2, Method::GET, 1, 0));
        sa.set_attribute(&NodeInfo {
            num_ports: 2,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(sa.as_bytes()[56 + 3], 2);
        let cpi = ClassPortInfo {
            resp_time_value: 18,
            ..Default::default()
        };
        let mut v = Mad::new(&MadHeader::request(0x32, 1, Method::GET, 1, 0));
        v.set_attribute(&cpi).unwrap();
        assert_eq!(v.as_bytes()[40 + 7], 18);
        assert_eq!(decode_all(v.as_bytes()).unwrap(), v);
    }

    #[test]
    fn class_headers_are_refused_for_other_classes() {
        let m = Mad::new(&MadHeader::request(class::PERF_MGT, 1, Method::GET, 1, 0));
        assert!(matches!(
            m.vendor_header(),
            Err(Error::WrongClass { class: 4, .. })
        ));
        assert!(matches!(m.sa_header(), Err(Error::WrongClass { .. })));
        assert!(m.rmpp_header().is_err());
        let mut sa = Mad::new(&MadHeader::request(
            class::SUBN_ADM,
            2,
            Method::GET_TABLE,
            1,
            0,
        ));
        let h = SaHeader {
            comp_mask: 3,
            sm_key: 9,
            ..Default::default()
        };
        sa.set_sa_header(&h).unwrap();
        assert_eq!(sa.sa_header().unwrap(), h);
        assert_eq!(sa.rmpp_header().unwrap(), h.rmpp);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(matches!(
            Mad::decode(&[]),
            Err(Error::Truncated {
                need: 24,
                have: 0,
                ..
            })
        ));
        let mut b = [0u8; 24];
        b[0] = 2;
        assert_eq!(Mad::decode(&b), Err(Error::BaseVersion(2)));
        b[0] = 1;
        let m = Mad::decode(&b).unwrap();
        assert_eq!(m.len(), 256);
        // A header-only MAD that names PortInfo decodes (zero padding).
        b[1] = class::SUBN_LID_ROUTED;
        b[17] = 0x15;
        assert!(decode_all(&b).is_ok());
        // Every prefix of a real MAD is either a MAD or an error.
        let mut sa = Mad::new(&MadHeader::request(
            class::SUBN_ADM,
            2,
            Method::GET,
            1,
            0x11,
        ));
        sa.set_attribute(&NodeInfo::default()).unwrap();
        for n in prefix_lens(sa.len()) {
            let _ = decode_all(&sa.as_bytes()[..n]);
        }
        let big = vec![1u8; 4096];
        assert_eq!(Mad::decode(&big).unwrap().len(), 4096);
    }

    #[test]
    fn attributes_are_read_and_written_only_in_their_class() {
        let mut perf = Mad::new(&MadHeader::request(class::PERF_MGT, 1, Method::GET, 1, 0));
        perf.set_attribute(&PortCounters::default()).unwrap();
        // 0x0012 is PortCounters here, SwitchInfo for the SMA.
        assert_eq!(
            perf.attribute::<SwitchInfo>(),
            Err(Error::WrongClass {
                what: "SwitchInfo",
                class: 4
            })
        );
        assert!(matches!(
            perf.set_attribute(&SwitchInfo::default()),
            Err(Error::WrongClass { .. })
        ));
        assert!(matches!(perf.m_key(), Err(Error::WrongClass { .. })));
        let mut smp = Mad::smp(Method::GET, attr_id::SWITCH_INFO, 0, 1, 0);
        smp.set_attribute(&SwitchInfo {
            linear_fdb_top: 5,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(smp.attribute::<SwitchInfo>().unwrap().linear_fdb_top, 5);
        assert!(matches!(
            smp.attribute::<PortCounters>(),
            Err(Error::WrongClass { class: 1, .. })
        ));
        assert!(matches!(
            smp.attribute::<PortSamplesControl>(),
            Err(Error::WrongClass { class: 1, .. })
        ));
        assert_eq!(decode_all(smp.as_bytes()).unwrap(), smp);
    }

    #[test]
    fn hostile_smps_are_typed_errors() {
        // A directed-route header only (the rest padded): a valid route of
        // 0 hops, or a hop pointer past its end.
        let mut b = [0u8; 24];
        b[0] = 1;
        b[1] = class::SUBN_DIRECTED_ROUTE;
        b[17] = 0x11;
        assert!(decode_all(&b).is_ok());
        b[6] = 2;
        assert_eq!(
            decode_all(&b),
            Err(Error::HopPointer {
                pointer: 2,
                count: 0
            })
        );
        b[6] = 0;
        b[7] = 0xff;
        assert_eq!(decode_all(&b), Err(Error::HopCount(255)));
        // Shorter than a header.
        assert!(matches!(
            decode_all(&b[..23]),
            Err(Error::Truncated { need: 24, .. })
        ));
        // Every SMA attribute ID, in both SMP classes, decodes from random
        // data; every prefix of such a MAD is a MAD or an error.
        let ids = [
            attr_id::NOTICE,
            attr_id::NODE_DESCRIPTION,
            attr_id::NODE_INFO,
            attr_id::SWITCH_INFO,
            attr_id::GUID_INFO,
            attr_id::PORT_INFO,
            attr_id::P_KEY_TABLE,
            attr_id::SL_TO_VL_MAPPING_TABLE,
            attr_id::VL_ARBITRATION_TABLE,
            attr_id::LINEAR_FORWARDING_TABLE,
            attr_id::MULTICAST_FORWARDING_TABLE,
            attr_id::SM_INFO,
        ];
        for (i, id) in ids.into_iter().enumerate() {
            let mut m = Mad::smp_directed(Method::GET, id, 0, i as u64, 0, &[0, 1]).unwrap();
            for (j, x) in m.data_mut()[..64].iter_mut().enumerate() {
                *x = (j * 37 + i) as u8;
            }
            assert_eq!(decode_all(m.as_bytes()).unwrap(), m);
            for n in prefix_lens(m.len()) {
                let _ = decode_all(&m.as_bytes()[..n]);
            }
        }
        // A value too wide for its field does not encode into a MAD.
        let mut m = Mad::smp(Method::SET, attr_id::SM_INFO, 0, 1, 0);
        assert!(matches!(
            m.set_attribute(&SmInfo {
                sm_state: 16,
                ..Default::default()
            }),
            Err(Error::FieldOverflow {
                field: "SMState",
                ..
            })
        ));
    }
}
