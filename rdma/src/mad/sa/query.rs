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
mod tests;
