//! SA requests and responses: the builders of Get, GetTable, Set and Delete
//! requests, the records of a response, and the SA status codes as typed
//! errors.

use std::fmt;
use std::marker::PhantomData;

use super::{
    InformInfo, InformInfoRecord, LinkRecord, McMemberRecord, NodeRecord, PathRecord,
    PortInfoRecord, SaHeader, SaRecord, ServiceRecord,
};
use crate::mad::rmpp::{RmppFlags, RmppHeader, RmppType};
use crate::mad::{class, Attribute, ClassPortInfo, Error, Mad, MadHeader, Method, Status};

/// The SA class version of IBA 1.1 and later.
pub const CLASS_VERSION: u8 = 2;

/// The SA's class-specific status (bits 15-8 of the MAD status, IBA
/// 15.2.1.1, table 184; libibumad's `UMAD_SA_STATUS_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SaStatusCode {
    /// 1, ERR_NO_RESOURCES: the SA is out of resources for the request.
    NoResources,
    /// 2, ERR_REQ_INVALID: the request is invalid (a bad field or mask).
    ReqInvalid,
    /// 3, ERR_NO_RECORDS: no record matches (Get, Set, Delete).
    NoRecords,
    /// 4, ERR_TOO_MANY_RECORDS: more than one record matches a Get.
    TooManyRecords,
    /// 5, ERR_REQ_INVALID_GID: a GID of the request is invalid.
    ReqInvalidGid,
    /// 6, ERR_REQ_INSUFFICIENT_COMPONENTS: the ComponentMask lacks a
    /// component the request needs.
    ReqInsufficientComponents,
    /// 7, ERR_REQ_DENIED: the request is refused (e.g. not allowed for this
    /// requester).
    ReqDenied,
    /// 8, ERR_REQ_PRIORITY_SUGGESTED: the SA suggests a priority (QoS).
    PrioritySuggested,
    /// Any other non-zero code (reserved).
    Other(u8),
}

impl SaStatusCode {
    /// The code of a non-zero byte; `None` for 0 (no SA-specific status).
    pub fn from_code(code: u8) -> Option<SaStatusCode> {
        Some(match code {
            0 => return None,
            1 => SaStatusCode::NoResources,
            2 => SaStatusCode::ReqInvalid,
            3 => SaStatusCode::NoRecords,
            4 => SaStatusCode::TooManyRecords,
            5 => SaStatusCode::ReqInvalidGid,
            6 => SaStatusCode::ReqInsufficientComponents,
            7 => SaStatusCode::ReqDenied,
            8 => SaStatusCode::PrioritySuggested,
            c => SaStatusCode::Other(c),
        })
    }

    /// The SA code of a MAD status (its class-specific byte).
    pub fn of(status: Status) -> Option<SaStatusCode> {
        Self::from_code(status.class_specific())
    }

    /// The 8-bit code.
    pub fn code(self) -> u8 {
        match self {
            SaStatusCode::NoResources => 1,
            SaStatusCode::ReqInvalid => 2,
            SaStatusCode::NoRecords => 3,
            SaStatusCode::TooManyRecords => 4,
            SaStatusCode::ReqInvalidGid => 5,
            SaStatusCode::ReqInsufficientComponents => 6,
            SaStatusCode::ReqDenied => 7,
            SaStatusCode::PrioritySuggested => 8,
            SaStatusCode::Other(c) => c,
        }
    }

    /// The MAD status that carries this code alone.
    pub fn status(self) -> Status {
        Status(u16::from(self.code()) << 8)
    }

    /// The specification's name of the code.
    pub fn name(self) -> &'static str {
        match self {
            SaStatusCode::NoResources => "ERR_NO_RESOURCES",
            SaStatusCode::ReqInvalid => "ERR_REQ_INVALID",
            SaStatusCode::NoRecords => "ERR_NO_RECORDS",
            SaStatusCode::TooManyRecords => "ERR_TOO_MANY_RECORDS",
            SaStatusCode::ReqInvalidGid => "ERR_REQ_INVALID_GID",
            SaStatusCode::ReqInsufficientComponents => "ERR_REQ_INSUFFICIENT_COMPONENTS",
            SaStatusCode::ReqDenied => "ERR_REQ_DENIED",
            SaStatusCode::PrioritySuggested => "ERR_REQ_PRIORITY_SUGGESTED",
            SaStatusCode::Other(_) => "reserved SA status",
        }
    }
}

impl fmt::Display for SaStatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// Why an SA response did not give its records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaError {
    /// The bytes did not decode (short, wrong class, wrong attribute, a
    /// record field) or a request did not encode.
    #[error(transparent)]
    Codec(#[from] Error),
    /// The response's status is not success: the SA code when there is one,
    /// or the general bits (busy, redirect, invalid field).
    #[error("the SA answered {}: {status}", describe(.code))]
    Status {
        /// The MAD status.
        status: Status,
        /// Its SA-specific code (`None` when only general bits are set).
        code: Option<SaStatusCode>,
    },
    /// The MAD has another method than the response expected.
    #[error("expected an SA {expected} MAD, got {found}")]
    Method {
        /// The method expected.
        expected: Method,
        /// The method of the MAD.
        found: Method,
    },
    /// AttributeOffset is smaller than the record, or zero in a response
    /// that claims records.
    #[error("AttributeOffset {attr_offset} ({} bytes) does not hold a {name} ({size} bytes)", usize::from(*.attr_offset) * 8)]
    AttributeOffset {
        /// The record.
        name: &'static str,
        /// Its size.
        size: usize,
        /// AttributeOffset, in 8-byte words.
        attr_offset: u16,
    },
    /// The RMPP PayloadLength is not the 20 bytes of the SA header after the
    /// RMPP header plus whole records.
    #[error(
        "RMPP PayloadLength {payload_length} is not 20 + a multiple of the {stride}-byte records"
    )]
    PayloadLength {
        /// PayloadLength.
        payload_length: u32,
        /// AttributeOffset in bytes.
        stride: usize,
    },
    /// The table is cut short: the MAD is the first part of a longer
    /// transfer whose rest did not come (a port without RMPP, such as
    /// ibsim's, carries one MAD of it). Its records are not the table.
    #[error("the table was cut short: {have} whole records arrived of {}", match .count { Some(n) => format!("the {n} its PayloadLength gives"), None => "a transfer of unknown length (RMPP Active, no PayloadLength)".to_string() })]
    Truncated {
        /// The records the transfer holds, when its PayloadLength says.
        count: Option<usize>,
        /// The whole records that arrived.
        have: usize,
    },
    /// The records claimed do not fit in the bytes there are.
    #[error("{count} records {stride} bytes apart need {need} bytes of SA data, there are {have}")]
    RecordsBeyondData {
        /// The records claimed.
        count: usize,
        /// AttributeOffset in bytes.
        stride: usize,
        /// The bytes they need.
        need: usize,
        /// The SA data there is.
        have: usize,
    },
}

fn describe(code: &Option<SaStatusCode>) -> String {
    match code {
        Some(c) => c.to_string(),
        None => "an error".into(),
    }
}

impl SaError {
    /// The SA status code of an [`SaError::Status`].
    pub fn code(&self) -> Option<SaStatusCode> {
        match self {
            SaError::Status { code, .. } => *code,
            _ => None,
        }
    }
}

/// `Ok` for a success status, else the status as an [`SaError::Status`].
pub fn check_status(status: Status) -> Result<(), SaError> {
    if status.is_ok() {
        Ok(())
    } else {
        Err(SaError::Status {
            status,
            code: SaStatusCode::of(status),
        })
    }
}

/// A builder of SA requests: method, TID, SM_Key and attribute modifier;
/// [`SaRequest::record`] then makes the MAD with a record and its
/// ComponentMask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SaRequest {
    /// The method (Get, GetTable, Set, Delete, ...).
    pub method: Method,
    /// The transaction ID.
    pub tid: u64,
    /// SM_Key: 0 unless the requester is trusted.
    pub sm_key: u64,
    /// The attribute modifier (0 for the records of this module).
    pub attr_mod: u32,
}

impl SaRequest {
    /// A request with this method and TID.
    pub fn new(method: Method, tid: u64) -> SaRequest {
        SaRequest {
            method,
            tid,
            sm_key: 0,
            attr_mod: 0,
        }
    }
    /// SubnAdmGet: the one record that matches.
    pub fn get(tid: u64) -> SaRequest {
        Self::new(Method::GET, tid)
    }
    /// SubnAdmGetTable: every record that matches.
    pub fn get_table(tid: u64) -> SaRequest {
        Self::new(Method::GET_TABLE, tid)
    }
    /// SubnAdmSet: create or update a record (a multicast join, a service
    /// registration, an InformInfo subscription).
    pub fn set(tid: u64) -> SaRequest {
        Self::new(Method::SET, tid)
    }
    /// SubnAdmDelete: remove a record (a multicast leave).
    pub fn delete(tid: u64) -> SaRequest {
        Self::new(Method::DELETE, tid)
    }
    /// The same request with this SM_Key.
    pub fn with_sm_key(self, sm_key: u64) -> SaRequest {
        SaRequest { sm_key, ..self }
    }

    /// The request MAD for `record`, the fields of `mask` being the query
    /// terms (or the fields to set).
    pub fn record<R: SaRecord>(&self, record: &R, mask: R::Mask) -> Result<Mad, Error> {
        self.attribute(record, bitflags::Flags::bits(&mask))
    }

    /// The request MAD for any attribute with a raw ComponentMask (e.g.
    /// [`InformInfo`], whose mask is unused, or [`ClassPortInfo`]).
    pub fn attribute<A: Attribute>(&self, attr: &A, comp_mask: u64) -> Result<Mad, Error> {
        let mut m = Mad::new(&MadHeader {
            attr_mod: self.attr_mod,
            ..MadHeader::request(class::SUBN_ADM, CLASS_VERSION, self.method, self.tid, A::ID)
        });
        m.set_sa_header(&SaHeader {
            sm_key: self.sm_key,
            comp_mask,
            ..SaHeader::default()
        })?;
        m.set_attribute(attr)?;
        Ok(m)
    }
}

fn check_response(
    bytes: &[u8],
    expected: Method,
    attr_id: u16,
    name: &'static str,
) -> Result<SaHeader, SaError> {
    let h = MadHeader::decode(bytes)?;
    if h.base_version != 1 {
        return Err(Error::BaseVersion(h.base_version).into());
    }
    if h.mgmt_class != class::SUBN_ADM {
        return Err(Error::WrongClass {
            what: "SA header",
            class: h.mgmt_class,
        }
        .into());
    }
    if h.method != expected {
        return Err(SaError::Method {
            expected,
            found: h.method,
        });
    }
    check_status(h.status)?;
    if h.attr_id != attr_id {
        return Err(Error::WrongAttribute {
            name,
            expected: attr_id,
            found: h.attr_id,
        }
        .into());
    }
    Ok(SaHeader::decode(
        bytes.get(SaHeader::OFFSET..).unwrap_or(&[]),
    )?)
}

/// The record of a response to Get, Set or Delete (GetResp, DeleteResp):
/// the class, method, status and attribute are checked first, so an SA
/// error status is an [`SaError::Status`].
pub fn response<R: Attribute>(mad: &[u8]) -> Result<R, SaError> {
    let h = MadHeader::decode(mad)?;
    let expected = if h.method == Method::DELETE_RESP {
        Method::DELETE_RESP
    } else {
        Method::GET_RESP
    };
    if !R::in_class(class::SUBN_ADM) {
        return Err(Error::WrongClass {
            what: R::NAME,
            class: class::SUBN_ADM,
        }
        .into());
    }
    check_response(mad, expected, R::ID, R::NAME)?;
    Ok(R::decode(mad.get(SaHeader::DATA_OFFSET..).unwrap_or(&[]))?)
}

/// The records of a GetTable response (GetTableResp), AttributeOffset
/// apart, as an iterator of decoded records.
///
/// The number of records is the RMPP PayloadLength's when the MAD carries
/// one (an RMPP transfer reassembled by the receiver, or its first
/// segment), else as many whole records as the bytes after the SA header
/// hold (one MAD as received; pass the received length, not a padded
/// buffer, or zero padding reads as records). An error status, an
/// AttributeOffset smaller than the record, or a count that does not fit the
/// bytes are errors before the first record; a record that does not decode
/// is an error item.
#[derive(Clone, Debug)]
pub struct SaTable<'a, R> {
    data: &'a [u8],
    stride: usize,
    count: usize,
    next: usize,
    truncated: bool,
    claimed: Option<usize>,
    attr_offset: u16,
    record: PhantomData<fn() -> R>,
}

impl<'a, R: SaRecord> SaTable<'a, R> {
    /// The table of a GetTableResp MAD (at least the 56 bytes of its
    /// headers).
    pub fn new(mad: &'a [u8]) -> Result<SaTable<'a, R>, SaError> {
        let sa = check_response(mad, Method::GET_TABLE_RESP, R::ID, R::NAME)?;
        let data = mad.get(SaHeader::DATA_OFFSET..).unwrap_or(&[]);
        let stride = usize::from(sa.attr_offset) * 8;
        let rmpp = &sa.rmpp;
        let payload = (rmpp.flags.contains(RmppFlags::ACTIVE | RmppFlags::FIRST)
            && rmpp.rmpp_type == RmppType::Data
            && rmpp.data2 != 0)
            .then_some(rmpp.data2);
        let bad_offset = SaError::AttributeOffset {
            name: R::NAME,
            size: R::SIZE,
            attr_offset: sa.attr_offset,
        };
        let mut t = SaTable {
            data,
            stride,
            count: 0,
            next: 0,
            truncated: false,
            claimed: None,
            attr_offset: sa.attr_offset,
            record: PhantomData,
        };
        // The SA header's fields after the RMPP header (SM_Key to
        // ComponentMask) count in PayloadLength.
        let sa_fields = (SaHeader::DATA_OFFSET - SaHeader::OFFSET - RmppHeader::SIZE) as u32;
        match payload {
            None if stride == 0 => return Ok(t),
            None => {}
            Some(p) if p < sa_fields => {
                return Err(SaError::PayloadLength {
                    payload_length: p,
                    stride,
                })
            }
            Some(p) if p == sa_fields => return Ok(t),
            Some(_) if stride == 0 => return Err(bad_offset),
            Some(_) => {}
        }
        if stride < R::SIZE {
            return Err(bad_offset);
        }
        match payload {
            None => {
                t.count = data.len() / stride;
                // RMPP Active without an RMPP DATA header: the sender left
                // the segmenting to an RMPP layer that did not run, and
                // the data ending inside a record is where the transfer
                // was cut.
                t.truncated = rmpp.flags.contains(RmppFlags::ACTIVE)
                    && rmpp.rmpp_type != RmppType::Data
                    && data.len() % stride != 0;
            }
            Some(p) => {
                let bytes = (p - sa_fields) as usize;
                if bytes % stride != 0 {
                    return Err(SaError::PayloadLength {
                        payload_length: p,
                        stride,
                    });
                }
                let count = bytes / stride;
                t.claimed = Some(count);
                let need = count.saturating_mul(stride);
                if need <= data.len() {
                    t.count = count;
                } else if rmpp.flags.contains(RmppFlags::LAST) {
                    return Err(SaError::RecordsBeyondData {
                        count,
                        stride,
                        need,
                        have: data.len(),
                    });
                } else {
                    // The first segment of a longer transfer: its records.
                    t.count = data.len() / stride;
                    t.truncated = true;
                }
            }
        }
        Ok(t)
    }

    /// The table of a [`Mad`] (see [`SaTable::new`]).
    pub fn from_mad(mad: &'a Mad) -> Result<SaTable<'a, R>, SaError> {
        SaTable::new(mad.as_bytes())
    }

    /// The number of records in the table.
    pub fn count_records(&self) -> usize {
        self.count
    }
    /// AttributeOffset, in 8-byte words.
    pub fn attr_offset(&self) -> u16 {
        self.attr_offset
    }
    /// Whether the MAD is the first part of a longer RMPP transfer whose
    /// rest is not there (its first segment; or, with RMPP Active and no
    /// RMPP DATA header, data that ends inside a record): the table holds
    /// the records of that part only.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
    /// The number of records the RMPP PayloadLength gives for the whole
    /// transfer, when the MAD carries one.
    pub fn records_claimed(&self) -> Option<usize> {
        self.claimed
    }
    /// The table whole, or [`SaError::Truncated`] when it is cut short
    /// ([`SaTable::is_truncated`]): for a caller that wants every record
    /// or none.
    pub fn whole(self) -> Result<SaTable<'a, R>, SaError> {
        if self.truncated {
            return Err(SaError::Truncated {
                count: self.claimed,
                have: self.count,
            });
        }
        Ok(self)
    }
}

impl<R: SaRecord> Iterator for SaTable<'_, R> {
    type Item = Result<R, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.count {
            return None;
        }
        let off = self.next.saturating_mul(self.stride);
        self.next += 1;
        Some(R::decode(self.data.get(off..).unwrap_or(&[])))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.count.saturating_sub(self.next);
        (n, Some(n))
    }
}

impl<R: SaRecord> ExactSizeIterator for SaTable<'_, R> {}

/// A GetTableResp to `request` carrying `records`, as an SA builds it: the
/// request's headers with the response method and SM_Key 0, AttributeOffset
/// of the record, the records AttributeOffset apart, and an RMPP header
/// (DATA, ACTIVE, FIRST and LAST, the PayloadLength of the whole table).
/// Longer than 256 bytes when the records need it: the reassembled form of
/// an RMPP transfer. For tests and simulators.
pub fn table_response<R: SaRecord>(request: &Mad, records: &[R]) -> Result<Mad, Error> {
    let stride = usize::from(R::ATTR_OFFSET) * 8;
    let len = records.len().saturating_mul(stride);
    let sa_fields = SaHeader::DATA_OFFSET - SaHeader::OFFSET - RmppHeader::SIZE;
    let paylen = u32::try_from(len + sa_fields).map_err(|_| Error::FieldOverflow {
        field: "PayloadLength",
        bits: 32,
        value: len as u64,
    })?;
    let mut bytes = vec![0u8; (SaHeader::DATA_OFFSET + len).max(Mad::SIZE)];
    let h = request.header();
    MadHeader {
        method: Method::GET_TABLE_RESP,
        status: Status::OK,
        attr_id: R::ID,
        ..h
    }
    .encode_into(&mut bytes)?;
    let mut sa = request.sa_header()?;
    sa.sm_key = 0;
    sa.attr_offset = R::ATTR_OFFSET;
    sa.rmpp = RmppHeader {
        version: 1,
        rmpp_type: RmppType::Data,
        resp_time: 0,
        flags: RmppFlags::ACTIVE | RmppFlags::FIRST | RmppFlags::LAST,
        status: 0,
        data1: 1,
        data2: paylen,
    };
    sa.encode_into(bytes.get_mut(SaHeader::OFFSET..).unwrap_or(&mut []))?;
    for (i, r) in records.iter().enumerate() {
        let off = SaHeader::DATA_OFFSET + i * stride;
        r.encode_into(bytes.get_mut(off..).unwrap_or(&mut []))?;
    }
    Mad::decode(&bytes)
}

/// Decodes everything this module knows in an SA MAD, for tests and
/// fuzzing: the SA header, and the record the header names (the one record
/// of a Get, Set or Delete and their responses, every record of a
/// GetTableResp). Returns the first error; never panics.
pub fn decode_all(mad: &[u8]) -> Result<(), SaError> {
    let h = MadHeader::decode(mad)?;
    if h.mgmt_class != class::SUBN_ADM {
        return Err(Error::WrongClass {
            what: "SA header",
            class: h.mgmt_class,
        }
        .into());
    }
    SaHeader::decode(mad.get(SaHeader::OFFSET..).unwrap_or(&[]))?;
    fn one<R: SaRecord>(mad: &[u8], method: Method) -> Result<(), SaError> {
        if method == Method::GET_TABLE_RESP {
            for r in SaTable::<R>::new(mad)? {
                r?;
            }
        } else {
            R::decode(mad.get(SaHeader::DATA_OFFSET..).unwrap_or(&[]))?;
        }
        Ok(())
    }
    let data = mad.get(SaHeader::DATA_OFFSET..).unwrap_or(&[]);
    match h.attr_id {
        NodeRecord::ID => one::<NodeRecord>(mad, h.method),
        PortInfoRecord::ID => one::<PortInfoRecord>(mad, h.method),
        LinkRecord::ID => one::<LinkRecord>(mad, h.method),
        ServiceRecord::ID => one::<ServiceRecord>(mad, h.method),
        PathRecord::ID => one::<PathRecord>(mad, h.method),
        McMemberRecord::ID => one::<McMemberRecord>(mad, h.method),
        InformInfoRecord::ID => one::<InformInfoRecord>(mad, h.method),
        InformInfo::ID => InformInfo::decode(data).map(|_| ()).map_err(Into::into),
        ClassPortInfo::ID => ClassPortInfo::decode(data).map(|_| ()).map_err(Into::into),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::sa::{JoinState, McMemberRecordMask, NodeRecordMask, PathRecordMask, Selector};
    use crate::mad::{NodeDescription, NodeInfo};
    use crate::Gid;

    fn gid(last: u8) -> Gid {
        Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, last])
    }

    fn nodes(n: usize) -> Vec<NodeRecord> {
        (0..n)
            .map(|i| {
                let mut r = NodeRecord {
                    lid: i as u16 + 1,
                    node_info: NodeInfo {
                        node_type: 1,
                        num_ports: 1,
                        node_guid: 0x100 + i as u64,
                        ..Default::default()
                    },
                    ..Default::default()
                };
                r.node_description = NodeDescription::new(&format!("host{i} HCA-1")).unwrap();
                r
            })
            .collect()
    }

    #[test]
    fn requests_carry_the_sa_header_and_the_record() {
        let rec = McMemberRecord {
            mgid: Gid([
                0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
            ]),
            port_gid: gid(1),
            join_state: JoinState::FULL_MEMBER,
            ..Default::default()
        };
        let mask = McMemberRecordMask::MGID
            | McMemberRecordMask::PORT_GID
            | McMemberRecordMask::JOIN_STATE;
        for (req, method) in [
            (SaRequest::get(7), Method::GET),
            (SaRequest::get_table(7), Method::GET_TABLE),
            (SaRequest::set(7), Method::SET),
            (SaRequest::delete(7), Method::DELETE),
        ] {
            let m = req
                .with_sm_key(0x0102_0304_0506_0708)
                .record(&rec, mask)
                .unwrap();
            let b = m.as_bytes();
            assert_eq!(&b[..4], &[1, class::SUBN_ADM, CLASS_VERSION, method.0]);
            assert_eq!(&b[8..16], &[0, 0, 0, 0, 0, 0, 0, 7]);
            assert_eq!(&b[16..18], &[0x00, 0x38]);
            assert_eq!(&b[36..44], &[1, 2, 3, 4, 5, 6, 7, 8]); // SM_Key
            assert_eq!(&b[44..46], &[0, 0]); // AttributeOffset: 0 in a request
            assert_eq!(&b[48..56], &[0, 0, 0, 0, 0, 0x01, 0x00, 0x03]); // ComponentMask
            assert_eq!(&b[56..108], &rec.to_bytes().unwrap()[..]);
            assert_eq!(m.attribute::<McMemberRecord>().unwrap(), rec);
        }
        // A field that does not fit fails the request, not the wire.
        let bad = PathRecord {
            sl: 16,
            ..Default::default()
        };
        assert!(matches!(
            SaRequest::get(1).record(&bad, PathRecordMask::SL),
            Err(Error::FieldOverflow { .. })
        ));
    }

    #[test]
    fn a_table_in_one_mad_iterates_its_records() {
        let req = SaRequest::get_table(9)
            .record(&NodeRecord::default(), NodeRecordMask::empty())
            .unwrap();
        let recs = nodes(1);
        let resp = table_response(&req, &recs).unwrap();
        assert_eq!(resp.len(), 256);
        assert_eq!(resp.sa_header().unwrap().attr_offset, 14);
        let t = SaTable::<NodeRecord>::from_mad(&resp).unwrap();
        assert_eq!((t.count_records(), t.len(), t.attr_offset()), (1, 1, 14));
        assert!(!t.is_truncated());
        let got: Vec<_> = t.map(|r| r.unwrap()).collect();
        assert_eq!(got, recs);
        assert_eq!(got[0].node_description.text(), "host0 HCA-1");

        // The same MAD without a PayloadLength (one MAD, no RMPP): the count
        // comes from the length.
        let mut b = resp.as_bytes().to_vec();
        b[32..36].fill(0);
        b.truncate(56 + 112);
        assert_eq!(SaTable::<NodeRecord>::new(&b).unwrap().count(), 1);
        b.truncate(56 + 111);
        assert_eq!(SaTable::<NodeRecord>::new(&b).unwrap().count(), 0);
    }

    #[test]
    fn a_reassembled_rmpp_table_iterates_every_record() {
        let req = SaRequest::get_table(9)
            .record(&NodeRecord::default(), NodeRecordMask::empty())
            .unwrap();
        let recs = nodes(40);
        let resp = table_response(&req, &recs).unwrap();
        assert_eq!(resp.len(), 56 + 40 * 112);
        assert_eq!(resp.rmpp_header().unwrap().data2, 20 + 40 * 112);
        let got: Vec<NodeRecord> = SaTable::<NodeRecord>::from_mad(&resp)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got, recs);
        // Its first segment alone: the records that fit, marked truncated.
        let first = &resp.as_bytes()[..256];
        let mut b = first.to_vec();
        b[26] &= !(RmppFlags::LAST.bits());
        let t = SaTable::<NodeRecord>::new(&b).unwrap();
        assert!(t.is_truncated());
        assert_eq!(t.count(), 1);
        // An empty table: PayloadLength 20.
        let empty = table_response::<NodeRecord>(&req, &[]).unwrap();
        assert_eq!(SaTable::<NodeRecord>::from_mad(&empty).unwrap().count(), 0);
    }

    #[test]
    fn path_records_come_back_from_a_table() {
        let req = SaRequest::get_table(3)
            .record(
                &PathRecord {
                    sgid: gid(1),
                    dgid: gid(2),
                    ..Default::default()
                },
                PathRecordMask::SGID | PathRecordMask::DGID,
            )
            .unwrap();
        let p = PathRecord {
            sgid: gid(1),
            dgid: gid(2),
            slid: 1,
            dlid: 2,
            mtu_selector: Selector::Exactly,
            mtu: 4,
            ..Default::default()
        };
        let resp = table_response(&req, &[p, p, p]).unwrap();
        assert_eq!(resp.len(), 256);
        let got: Vec<_> = SaTable::<PathRecord>::from_mad(&resp)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, vec![p; 3]);
        // A fourth does not fit in one MAD: the buffer grows (RMPP).
        assert_eq!(table_response(&req, &[p; 4]).unwrap().len(), 56 + 256);
    }

    #[test]
    fn sa_status_codes_are_typed_errors() {
        let names = [
            (1, SaStatusCode::NoResources, "ERR_NO_RESOURCES"),
            (2, SaStatusCode::ReqInvalid, "ERR_REQ_INVALID"),
            (3, SaStatusCode::NoRecords, "ERR_NO_RECORDS"),
            (4, SaStatusCode::TooManyRecords, "ERR_TOO_MANY_RECORDS"),
            (5, SaStatusCode::ReqInvalidGid, "ERR_REQ_INVALID_GID"),
            (
                6,
                SaStatusCode::ReqInsufficientComponents,
                "ERR_REQ_INSUFFICIENT_COMPONENTS",
            ),
            (7, SaStatusCode::ReqDenied, "ERR_REQ_DENIED"),
            (
                8,
                SaStatusCode::PrioritySuggested,
                "ERR_REQ_PRIORITY_SUGGESTED",
            ),
        ];
        for (code, c, name) in names {
            assert_eq!(SaStatusCode::from_code(code), Some(c));
            assert_eq!(c.code(), code);
            assert_eq!(c.name(), name);
            assert_eq!(c.status().0, u16::from(code) << 8);
        }
        assert_eq!(SaStatusCode::from_code(0), None);
        for v in 0..=255u8 {
            assert_eq!(SaStatusCode::from_code(v).map_or(0, |c| c.code()), v);
        }

        let req = SaRequest::get(5)
            .record(&PathRecord::default(), PathRecordMask::empty())
            .unwrap();
        let mut resp = req.response();
        let h = MadHeader {
            status: SaStatusCode::NoRecords.status(),
            attr_id: PathRecord::ID,
            ..resp.header()
        };
        resp.set_header(&h);
        let e = response::<PathRecord>(resp.as_bytes()).unwrap_err();
        assert_eq!(e.code(), Some(SaStatusCode::NoRecords));
        assert_eq!(
            e.to_string(),
            "the SA answered ERR_NO_RECORDS (3): class-specific 0x03"
        );
        // A GetTable error: status ERR_REQ_INVALID, AttributeOffset 0.
        let treq = SaRequest::get_table(5)
            .record(&PathRecord::default(), PathRecordMask::empty())
            .unwrap();
        let mut tresp = table_response::<PathRecord>(&treq, &[]).unwrap();
        let h = MadHeader {
            status: Status(0x0200),
            ..tresp.header()
        };
        tresp.set_header(&h);
        assert!(matches!(
            SaTable::<PathRecord>::from_mad(&tresp),
            Err(SaError::Status {
                code: Some(SaStatusCode::ReqInvalid),
                ..
            })
        ));
        // General bits only: busy.
        assert!(matches!(
            check_status(Status(1)),
            Err(SaError::Status { code: None, .. })
        ));
        assert_eq!(check_status(Status::OK), Ok(()));
    }

    #[test]
    fn a_get_response_gives_its_record() {
        let req = SaRequest::get(5)
            .record(&PathRecord::default(), PathRecordMask::empty())
            .unwrap();
        let mut resp = req.response();
        let p = PathRecord {
            dlid: 9,
            ..Default::default()
        };
        resp.set_attribute(&p).unwrap();
        assert_eq!(response::<PathRecord>(resp.as_bytes()), Ok(p));
        // The request itself is not a response.
        assert!(matches!(
            response::<PathRecord>(req.as_bytes()),
            Err(SaError::Method {
                expected: Method::GET_RESP,
                found: Method::GET
            })
        ));
        // Another record than asked for, or an attribute of another class.
        assert!(matches!(
            response::<NodeRecord>(resp.as_bytes()),
            Err(SaError::Codec(Error::WrongAttribute { .. }))
        ));
        assert!(matches!(
            response::<crate::mad::PortCounters>(resp.as_bytes()),
            Err(SaError::Codec(Error::WrongClass { .. }))
        ));
    }

    #[test]
    fn hostile_tables_are_errors_not_panics() {
        let req = SaRequest::get_table(9)
            .record(&NodeRecord::default(), NodeRecordMask::empty())
            .unwrap();
        let good = table_response(&req, &nodes(1)).unwrap().as_bytes().to_vec();
        let with = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            b
        };
        // AttributeOffset smaller than a NodeRecord (13 * 8 = 104 < 108).
        let b = with(&|b| b[44..46].copy_from_slice(&13u16.to_be_bytes()));
        assert_eq!(
            SaTable::<NodeRecord>::new(&b).unwrap_err(),
            SaError::AttributeOffset {
                name: "NodeRecord",
                size: 108,
                attr_offset: 13
            }
        );
        // AttributeOffset 0 with records claimed.
        let b = with(&|b| b[44..46].fill(0));
        assert!(matches!(
            SaTable::<NodeRecord>::new(&b),
            Err(SaError::AttributeOffset { attr_offset: 0, .. })
        ));
        // A PayloadLength that claims 3 records in one MAD.
        let b = with(&|b| b[32..36].copy_from_slice(&(20u32 + 3 * 112).to_be_bytes()));
        assert_eq!(
            SaTable::<NodeRecord>::new(&b).unwrap_err(),
            SaError::RecordsBeyondData {
                count: 3,
                stride: 112,
                need: 336,
                have: 200
            }
        );
        // A PayloadLength that is not whole records, or less than the header.
        for p in [20 + 100, 19, 1] {
            let b = with(&|b| b[32..36].copy_from_slice(&(p as u32).to_be_bytes()));
            assert!(
                matches!(
                    SaTable::<NodeRecord>::new(&b),
                    Err(SaError::PayloadLength { .. })
                ),
                "{p}"
            );
        }
        // The largest AttributeOffset and PayloadLength: no overflow.
        let b = with(&|b| {
            b[44..46].fill(0xff);
            b[32..36].fill(0xff);
        });
        assert!(SaTable::<NodeRecord>::new(&b).is_err());
        // Wrong class, method, attribute; short.
        let b = with(&|b| b[1] = class::PERF_MGT);
        assert!(matches!(
            SaTable::<NodeRecord>::new(&b),
            Err(SaError::Codec(Error::WrongClass { .. }))
        ));
        let b = with(&|b| b[3] = Method::GET_RESP.0);
        assert!(matches!(
            SaTable::<NodeRecord>::new(&b),
            Err(SaError::Method { .. })
        ));
        assert!(matches!(
            SaTable::<PathRecord>::new(&good),
            Err(SaError::Codec(Error::WrongAttribute { .. }))
        ));
        for n in crate::mad::tests::prefix_lens(good.len() - 1) {
            let _ = SaTable::<NodeRecord>::new(&good[..n]).map(|t| t.count());
            let _ = decode_all(&good[..n]);
            let _ = response::<NodeRecord>(&good[..n]);
        }
        assert!(SaTable::<NodeRecord>::new(&good[..55]).is_err());
        assert_eq!(decode_all(&good), Ok(()));
    }

    #[test]
    fn a_table_cut_short_is_truncated_and_never_whole() {
        let req = SaRequest::get_table(9)
            .record(&NodeRecord::default(), NodeRecordMask::empty())
            .unwrap();
        let recs = nodes(6);
        let resp = table_response(&req, &recs).unwrap();
        let whole = resp.as_bytes();
        // The first segment as a port without RMPP carries it: FIRST, not
        // LAST, PayloadLength of six records, 200 bytes of SA data.
        let mut first = whole[..256].to_vec();
        first[26] &= !(RmppFlags::LAST.bits());
        let t = SaTable::<NodeRecord>::new(&first).unwrap();
        assert_eq!(
            (t.is_truncated(), t.records_claimed(), t.count_records()),
            (true, Some(6), 1)
        );
        assert_eq!(
            t.whole().unwrap_err(),
            SaError::Truncated {
                count: Some(6),
                have: 1
            }
        );
        // The same 256 bytes still flagged LAST claim what is not there.
        assert!(matches!(
            SaTable::<NodeRecord>::new(&whole[..256]),
            Err(SaError::RecordsBeyondData { count: 6, .. })
        ));
        // A sender that left the segmenting to RMPP (Active, RMPP version
        // and type 0, no PayloadLength), cut at 256 bytes inside the
        // second record: truncated, of unknown length.
        let mut bare = whole[..256].to_vec();
        bare[24..36].fill(0);
        bare[26] = RmppFlags::ACTIVE.bits();
        let t = SaTable::<NodeRecord>::new(&bare).unwrap();
        assert_eq!(
            (t.is_truncated(), t.records_claimed(), t.count_records()),
            (true, None, 1)
        );
        assert_eq!(
            t.whole().unwrap_err(),
            SaError::Truncated {
                count: None,
                have: 1
            }
        );
        // Its whole one-record answer (168 bytes) is whole.
        let t = SaTable::<NodeRecord>::new(&bare[..56 + 112]).unwrap();
        assert!(!t.is_truncated());
        let got: Vec<_> = t.whole().unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(got, recs[..1]);
        // Without Active the length is all there is (one MAD, no RMPP).
        bare[26] = 0;
        assert!(!SaTable::<NodeRecord>::new(&bare).unwrap().is_truncated());
        // The reassembled transfer is whole.
        let got: Vec<_> = SaTable::<NodeRecord>::new(whole)
            .and_then(SaTable::whole)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, recs);
    }

    #[test]
    fn random_rmpp_headers_never_make_records_beyond_the_data() {
        let req = SaRequest::get_table(9)
            .record(&NodeRecord::default(), NodeRecordMask::empty())
            .unwrap();
        let whole = table_response(&req, &nodes(6)).unwrap().as_bytes().to_vec();
        let rounds = if cfg!(miri) { 50 } else { 5000 };
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..rounds {
            let len = 56 + (next() % (whole.len() as u64 - 55)) as usize;
            let mut b = whole[..len].to_vec();
            // RMPP header and AttributeOffset: random.
            for i in (24..36).chain(44..46) {
                b[i] = next() as u8;
            }
            let Ok(t) = SaTable::<NodeRecord>::new(&b) else {
                continue;
            };
            let stride = usize::from(t.attr_offset()) * 8;
            let n = t.count_records();
            assert!(
                n.saturating_mul(stride) <= len - 56,
                "{n} x {stride} in {len}"
            );
            if let Ok(t) = t.whole() {
                assert_eq!(t.count(), n);
            }
        }
    }
}
