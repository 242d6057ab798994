//! The common MAD header (IBA 13.4.2): the first 24 bytes of every MAD.

use std::fmt;

use super::wire::{In, Out};
use super::Result;

/// A MAD method (IBA 13.4.5): bits 6-0 of byte 3; bit 7 is the response bit
/// (R), so `GET_RESP` is `GET` with R set.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Method(pub u8);

impl Method {
    /// Get: read an attribute.
    pub const GET: Method = Method(0x01);
    /// Set: write an attribute.
    pub const SET: Method = Method(0x02);
    /// Send: a datagram that expects no response.
    pub const SEND: Method = Method(0x03);
    /// Trap: an unsolicited notice.
    pub const TRAP: Method = Method(0x05);
    /// Report: forward a subscribed event.
    pub const REPORT: Method = Method(0x06);
    /// TrapRepress: stop repeating a trap.
    pub const TRAP_REPRESS: Method = Method(0x07);
    /// GetTable (SA): every record that matches.
    pub const GET_TABLE: Method = Method(0x12);
    /// GetTraceTable (SA).
    pub const GET_TRACE_TABLE: Method = Method(0x13);
    /// GetMulti (SA).
    pub const GET_MULTI: Method = Method(0x14);
    /// Delete (SA).
    pub const DELETE: Method = Method(0x15);
    /// The response to Get or Set.
    pub const GET_RESP: Method = Method(0x81);
    /// The response to Report.
    pub const REPORT_RESP: Method = Method(0x86);
    /// The response to GetTable.
    pub const GET_TABLE_RESP: Method = Method(0x92);
    /// The response to GetMulti.
    pub const GET_MULTI_RESP: Method = Method(0x94);
    /// The response to Delete.
    pub const DELETE_RESP: Method = Method(0x95);

    /// The response bit (R, bit 7).
    pub const RESPONSE_BIT: u8 = 0x80;

    /// Whether the response bit is set.
    pub fn is_response(self) -> bool {
        self.0 & Self::RESPONSE_BIT != 0
    }

    /// Whether this method, sent as a request, solicits a response: every
    /// method without the R bit except Send, Trap and TrapRepress (the kernel
    /// tracks these for timeouts and rewrites their TID).
    pub fn expects_response(self) -> bool {
        !self.is_response() && !matches!(self, Method::SEND | Method::TRAP | Method::TRAP_REPRESS)
    }

    /// The method that answers this one: Get and Set are answered by
    /// GetResp, every other method by itself with R set.
    pub fn response(self) -> Method {
        match self {
            Method::GET | Method::SET => Method::GET_RESP,
            m => Method(m.0 | Self::RESPONSE_BIT),
        }
    }

    /// The method number without the response bit.
    pub fn number(self) -> u8 {
        self.0 & !Self::RESPONSE_BIT
    }

    fn name(self) -> Option<&'static str> {
        Some(match self {
            Method::GET => "Get",
            Method::SET => "Set",
            Method::SEND => "Send",
            Method::TRAP => "Trap",
            Method::REPORT => "Report",
            Method::TRAP_REPRESS => "TrapRepress",
            Method::GET_TABLE => "GetTable",
            Method::GET_TRACE_TABLE => "GetTraceTable",
            Method::GET_MULTI => "GetMulti",
            Method::DELETE => "Delete",
            Method::GET_RESP => "GetResp",
            Method::REPORT_RESP => "ReportResp",
            Method::GET_TABLE_RESP => "GetTableResp",
            Method::GET_MULTI_RESP => "GetMultiResp",
            Method::DELETE_RESP => "DeleteResp",
            _ => return None,
        })
    }
}

impl fmt::Debug for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({:#04x})", self.0),
            None => write!(f, "Method({:#04x})", self.0),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "{:#04x}", self.0),
        }
    }
}

/// The invalid-field code of a MAD status (bits 4-2, IBA 13.4.7, table 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InvalidField {
    /// 0: no invalid field.
    None,
    /// 1: the base or class version is not supported.
    BadVersion,
    /// 2: the method is not supported.
    MethodNotSupported,
    /// 3: the method/attribute combination is not supported.
    MethodAttributeNotSupported,
    /// 7: an invalid value in one or more fields of the attribute or the
    /// attribute modifier.
    InvalidValue,
    /// 4-6: reserved codes.
    Reserved(u8),
}

impl InvalidField {
    /// The 3-bit code.
    pub fn code(self) -> u8 {
        match self {
            InvalidField::None => 0,
            InvalidField::BadVersion => 1,
            InvalidField::MethodNotSupported => 2,
            InvalidField::MethodAttributeNotSupported => 3,
            InvalidField::InvalidValue => 7,
            InvalidField::Reserved(c) => c & 7,
        }
    }

    /// The field of a 3-bit code (only the low 3 bits count).
    pub fn from_code(code: u8) -> InvalidField {
        match code & 7 {
            0 => InvalidField::None,
            1 => InvalidField::BadVersion,
            2 => InvalidField::MethodNotSupported,
            3 => InvalidField::MethodAttributeNotSupported,
            7 => InvalidField::InvalidValue,
            c => InvalidField::Reserved(c),
        }
    }
}

/// The 16-bit status of a MAD (IBA 13.4.7): bit 0 busy, bit 1 redirect
/// required, bits 4-2 the invalid-field code, bits 7-5 reserved, bits 15-8
/// class-specific (SA: 1 no resources, 2 request invalid, 3 no records, ...;
/// a directed-route SMP keeps its D bit in bit 15).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status(pub u16);

impl Status {
    /// Success.
    pub const OK: Status = Status(0);

    /// A status from its fields.
    pub fn new(busy: bool, redirect: bool, invalid: InvalidField, class_specific: u8) -> Status {
        Status(
            u16::from(busy)
                | u16::from(redirect) << 1
                | u16::from(invalid.code()) << 2
                | u16::from(class_specific) << 8,
        )
    }
    /// Bit 0: the responder was busy and discarded the request.
    pub fn busy(self) -> bool {
        self.0 & 1 != 0
    }
    /// Bit 1: redirect to the ClassPortInfo of the response.
    pub fn redirect_required(self) -> bool {
        self.0 & 2 != 0
    }
    /// Bits 4-2: which field was invalid.
    pub fn invalid_field(self) -> InvalidField {
        InvalidField::from_code((self.0 >> 2) as u8)
    }
    /// Bits 7-5 (reserved; kept so that decoding is lossless).
    pub fn reserved_bits(self) -> u8 {
        ((self.0 >> 5) & 7) as u8
    }
    /// Bits 15-8: the class-specific status.
    pub fn class_specific(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// No bit set.
    pub fn is_ok(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Status")
            .field("raw", &format_args!("{:#06x}", self.0))
            .field("busy", &self.busy())
            .field("redirect_required", &self.redirect_required())
            .field("invalid_field", &self.invalid_field())
            .field("class_specific", &self.class_specific())
            .finish()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ok() {
            return f.write_str("success");
        }
        let mut parts = Vec::new();
        if self.busy() {
            parts.push("busy".to_string());
        }
        if self.redirect_required() {
            parts.push("redirect required".to_string());
        }
        match self.invalid_field() {
            InvalidField::None => {}
            InvalidField::BadVersion => parts.push("bad version".into()),
            InvalidField::MethodNotSupported => parts.push("method not supported".into()),
            InvalidField::MethodAttributeNotSupported => {
                parts.push("method/attribute not supported".into())
            }
            InvalidField::InvalidValue => parts.push("invalid attribute value".into()),
            InvalidField::Reserved(c) => parts.push(format!("reserved invalid-field code {c}")),
        }
        if self.class_specific() != 0 {
            parts.push(format!("class-specific {:#04x}", self.class_specific()));
        }
        if parts.is_empty() {
            parts.push(format!("reserved bits {:#06x}", self.0));
        }
        f.write_str(&parts.join(", "))
    }
}

/// The common MAD header (24 bytes).
///
/// | byte | field |
/// |---|---|
/// | 0 | BaseVersion |
/// | 1 | MgmtClass |
/// | 2 | ClassVersion |
/// | 3 | R (bit 7), Method (bits 6-0) |
/// | 4-5 | Status |
/// | 6-7 | ClassSpecific |
/// | 8-15 | TransactionID |
/// | 16-17 | AttributeID |
/// | 18-19 | reserved |
/// | 20-23 | AttributeModifier |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MadHeader {
    /// The MAD base version: 1 for InfiniBand.
    pub base_version: u8,
    /// The management class (`mad::class`).
    pub mgmt_class: u8,
    /// The version of the class.
    pub class_version: u8,
    /// The method, with its response bit.
    pub method: Method,
    /// The status (responses).
    pub status: Status,
    /// Class-specific (for example the hop pointer and count of a
    /// directed-route SMP).
    pub class_specific: u16,
    /// The transaction ID. The kernel rewrites the upper 32 bits of a
    /// request's TID with its agent's ID; match responses on the lower 32.
    pub tid: u64,
    /// The attribute ID.
    pub attr_id: u16,
    /// The reserved bytes 18-19 (kept so that decoding is lossless).
    pub reserved: u16,
    /// The attribute modifier.
    pub attr_mod: u32,
}

impl Default for MadHeader {
    fn default() -> MadHeader {
        MadHeader {
            base_version: 1,
            mgmt_class: 0,
            class_version: 1,
            method: Method::GET,
            status: Status::OK,
            class_specific: 0,
            tid: 0,
            attr_id: 0,
            reserved: 0,
            attr_mod: 0,
        }
    }
}

impl MadHeader {
    /// The size of the header on the wire.
    pub const SIZE: usize = 24;

    /// A request header: base version 1, the class, its version, the method,
    /// the TID and the attribute.
    pub fn request(
        mgmt_class: u8,
        class_version: u8,
        method: Method,
        tid: u64,
        attr_id: u16,
    ) -> MadHeader {
        MadHeader {
            mgmt_class,
            class_version,
            method,
            tid,
            attr_id,
            ..MadHeader::default()
        }
    }

    /// Decodes the first 24 bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<MadHeader> {
        let r = In::new(b, "MAD header", Self::SIZE)?;
        Ok(MadHeader {
            base_version: r.u8(0)?,
            mgmt_class: r.u8(1)?,
            class_version: r.u8(2)?,
            method: Method(r.u8(3)?),
            status: Status(r.u16(4)?),
            class_specific: r.u16(6)?,
            tid: r.u64(8)?,
            attr_id: r.u16(16)?,
            reserved: r.u16(18)?,
            attr_mod: r.u32(20)?,
        })
    }

    /// Encodes into the first 24 bytes of `out`.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, "MAD header", Self::SIZE)?;
        w.u8(0, self.base_version)?;
        w.u8(1, self.mgmt_class)?;
        w.u8(2, self.class_version)?;
        w.u8(3, self.method.0)?;
        w.u16(4, self.status.0)?;
        w.u16(6, self.class_specific)?;
        w.u64(8, self.tid)?;
        w.u16(16, self.attr_id)?;
        w.u16(18, self.reserved)?;
        w.u32(20, self.attr_mod)
    }

    /// The 24 bytes of the header.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0; Self::SIZE];
        // Cannot fail: the buffer has exactly the header's size.
        let _ = self.encode_into(&mut b);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::Error;

    /// A PerfMgt Get(PortCounters) request, bytes written from IBA table 8.
    const GET_PORT_COUNTERS: [u8; 24] = [
        0x01, // BaseVersion
        0x04, // MgmtClass: PerfMgt
        0x01, // ClassVersion
        0x01, // R=0, Method=Get
        0x00, 0x00, // Status
        0x00, 0x00, // ClassSpecific
        0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, // TID
        0x00, 0x12, // AttributeID: PortCounters
        0x00, 0x00, // reserved
        0xde, 0xad, 0xbe, 0xef, // AttributeModifier
    ];

    #[test]
    fn header_matches_the_spec_layout() {
        let h = MadHeader {
            attr_mod: 0xdead_beef,
            ..MadHeader::request(0x04, 1, Method::GET, 0x1234_5678_9abc_def0, 0x0012)
        };
        assert_eq!(h.to_bytes(), GET_PORT_COUNTERS);
        assert_eq!(MadHeader::decode(&GET_PORT_COUNTERS).unwrap(), h);
    }

    #[test]
    fn response_bit_and_status_fields_decode() {
        let mut b = GET_PORT_COUNTERS;
        b[3] = 0x81;
        b[4] = 0x04; // class-specific 4 (SA: no records)
        b[5] = 0x1f; // invalid value (7 << 2) | redirect | busy
        let h = MadHeader::decode(&b).unwrap();
        assert_eq!(h.method, Method::GET_RESP);
        assert!(h.method.is_response());
        assert_eq!(h.method.number(), 1);
        assert!(h.status.busy());
        assert!(h.status.redirect_required());
        assert_eq!(h.status.invalid_field(), InvalidField::InvalidValue);
        assert_eq!(h.status.class_specific(), 4);
        assert_eq!(
            Status::new(true, true, InvalidField::InvalidValue, 4),
            h.status
        );
        assert_eq!(h.to_bytes(), b);
    }

    #[test]
    fn status_codes_match_opensm_constants() {
        // IB_MAD_STATUS_UNSUP_CLASS_VER, _UNSUP_METHOD, _UNSUP_METHOD_ATTR, _INVALID_FIELD
        assert_eq!(Status(0x0004).invalid_field(), InvalidField::BadVersion);
        assert_eq!(
            Status(0x0008).invalid_field(),
            InvalidField::MethodNotSupported
        );
        assert_eq!(
            Status(0x000c).invalid_field(),
            InvalidField::MethodAttributeNotSupported
        );
        assert_eq!(Status(0x001c).invalid_field(), InvalidField::InvalidValue);
        assert_eq!(Status(0x0010).invalid_field(), InvalidField::Reserved(4));
        for code in 0..8 {
            assert_eq!(InvalidField::from_code(code).code(), code);
        }
        assert_eq!(Status(0x0020).reserved_bits(), 1);
        assert_eq!(Status(0x001c).to_string(), "invalid attribute value");
    }

    #[test]
    fn methods_know_their_responses() {
        assert_eq!(Method::GET.response(), Method::GET_RESP);
        assert_eq!(Method::SET.response(), Method::GET_RESP);
        assert_eq!(Method::GET_TABLE.response(), Method::GET_TABLE_RESP);
        assert_eq!(Method::REPORT.response(), Method::REPORT_RESP);
        assert!(Method::GET.expects_response());
        assert!(!Method::SEND.expects_response());
        assert!(!Method::TRAP.expects_response());
        assert!(!Method::GET_RESP.expects_response());
        assert_eq!(format!("{:?}", Method::GET_RESP), "GetResp(0x81)");
        assert_eq!(Method(0x7f).to_string(), "0x7f");
    }

    #[test]
    fn short_header_is_a_typed_error() {
        assert_eq!(
            MadHeader::decode(&GET_PORT_COUNTERS[..23]),
            Err(Error::Truncated {
                what: "MAD header",
                need: 24,
                have: 23
            })
        );
        let mut small = [0u8; 10];
        assert!(MadHeader::default().encode_into(&mut small).is_err());
    }
}
