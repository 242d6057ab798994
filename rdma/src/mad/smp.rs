//! Subnet management packets (IBA 14.2.1): the SMP header of the
//! LID-routed (class 0x01) and directed-route (class 0x81) classes.
//!
//! | byte | LID routed | directed route |
//! |---|---|---|
//! | 0-23 | common header | common header; status bit 15 is the D bit, ClassSpecific is HopPointer (byte 6), HopCount (byte 7) |
//! | 24-31 | M_Key | M_Key |
//! | 32-35 | reserved | DrSLID (32-33), DrDLID (34-35) |
//! | 36-63 | reserved | reserved |
//! | 64-127 | SMP data | SMP data |
//! | 128-191 | reserved | InitialPath |
//! | 192-255 | reserved | ReturnPath |
//!
//! A directed route is a list of port numbers, one per hop: byte `i` of
//! the initial path is the port the SMP leaves by at hop `i` (byte 0 is
//! unused), and the nodes on the way fill in the return path. The hop
//! count is at most 63.

use std::str::FromStr;

use super::header::{MadHeader, Method, Status};
use super::wire::{In, Out};
use super::{class, Error, Mad, Result};

/// Where SMP data begins in a MAD.
pub const SMP_DATA_OFFSET: usize = 64;
/// The size of SMP data.
pub const SMP_DATA_SIZE: usize = 64;
/// The most hops of a directed route (its paths hold 64 bytes, byte 0
/// unused).
pub const MAX_HOPS: u8 = 63;
/// The permissive LID: DrSLID and DrDLID of a route that is directed all
/// the way.
pub const PERMISSIVE_LID: u16 = 0xffff;
/// The D (direction) bit of a directed-route SMP's status: set on the way
/// back (responses).
pub const DIRECTION_BIT: u16 = 0x8000;

/// The directed-route part of an SMP: the D bit and the hop fields of the
/// common header, DrSLID, DrDLID and the two paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DrHeader {
    /// D: false on the way out (requests), true on the way back.
    pub direction: bool,
    /// HopPointer: the hop the SMP is at (0 to `hop_count + 1`).
    pub hop_pointer: u8,
    /// HopCount: the hops of the directed part of the route (at most 63).
    pub hop_count: u8,
    /// DrSLID: the LID the LID-routed part of the return goes to
    /// ([`PERMISSIVE_LID`] when the route is directed from the start).
    pub dr_slid: u16,
    /// DrDLID: the LID the LID-routed part at the end goes to
    /// ([`PERMISSIVE_LID`] when the route is directed to the end).
    pub dr_dlid: u16,
    /// InitialPath: byte `i`, the output port of hop `i`.
    pub initial_path: [u8; 64],
    /// ReturnPath: byte `i`, the input port of hop `i` (filled in on the
    /// way out).
    pub return_path: [u8; 64],
}

impl Default for DrHeader {
    fn default() -> DrHeader {
        DrHeader {
            direction: false,
            hop_pointer: 0,
            hop_count: 0,
            dr_slid: PERMISSIVE_LID,
            dr_dlid: PERMISSIVE_LID,
            initial_path: [0; 64],
            return_path: [0; 64],
        }
    }
}

impl DrHeader {
    /// The header of a request along `path`, in the form `smpquery -D`
    /// takes: the first element is byte 0 of the initial path (0 by
    /// convention), each further one the output port of a hop, so that
    /// `[0]` is the local port and `[0, 1, 3]` two hops away. DrSLID and
    /// DrDLID are permissive and the hop pointer 0.
    pub fn along(path: &[u8]) -> Result<DrHeader> {
        let hops = path.len().checked_sub(1).ok_or(Error::BadPath(
            "a directed route names at least the local port (0)",
        ))?;
        if hops > usize::from(MAX_HOPS) {
            return Err(Error::HopCount(hops));
        }
        let mut h = DrHeader {
            hop_count: hops as u8,
            ..DrHeader::default()
        };
        h.initial_path[..path.len()].copy_from_slice(path);
        Ok(h)
    }

    /// The ports of the initial path, as [`DrHeader::along`] takes them
    /// (byte 0, then one per hop).
    pub fn path(&self) -> &[u8] {
        &self.initial_path[..usize::from(self.hop_count.min(MAX_HOPS)) + 1]
    }

    /// Checks the hop count (at most 63) and the hop pointer (at most hop
    /// count + 1, where the SMP has reached its destination).
    pub fn validate(&self) -> Result<()> {
        if self.hop_count > MAX_HOPS {
            return Err(Error::HopCount(self.hop_count.into()));
        }
        if self.hop_pointer > self.hop_count + 1 {
            return Err(Error::HopPointer {
                pointer: self.hop_pointer,
                count: self.hop_count,
            });
        }
        Ok(())
    }

    /// Decodes the directed-route fields of a MAD's bytes (at least 256);
    /// a hop count above 63 or a hop pointer past the end of the route is
    /// an error.
    pub fn decode(mad: &[u8]) -> Result<DrHeader> {
        let r = In::new(mad, "directed-route SMP", Mad::SIZE)?;
        let h = DrHeader {
            direction: r.u16(4)? & DIRECTION_BIT != 0,
            hop_pointer: r.u8(6)?,
            hop_count: r.u8(7)?,
            dr_slid: r.u16(32)?,
            dr_dlid: r.u16(34)?,
            initial_path: r.bytes(128)?,
            return_path: r.bytes(192)?,
        };
        h.validate()?;
        Ok(h)
    }

    /// Encodes into a MAD's bytes (at least 256): the D bit (the other
    /// status bits are kept), the hop fields, DrSLID, DrDLID and the paths.
    /// Fails on a hop count or pointer that [`DrHeader::validate`] refuses.
    pub fn encode_into(&self, mad: &mut [u8]) -> Result<()> {
        self.validate()?;
        let status = In::new(mad, "directed-route SMP", Mad::SIZE)?.u16(4)?;
        let mut w = Out::new(mad, "directed-route SMP", Mad::SIZE)?;
        let d = if self.direction { DIRECTION_BIT } else { 0 };
        w.u16(4, status & !DIRECTION_BIT | d)?;
        w.u8(6, self.hop_pointer)?;
        w.u8(7, self.hop_count)?;
        w.u16(32, self.dr_slid)?;
        w.u16(34, self.dr_dlid)?;
        w.bytes(128, &self.initial_path)?;
        w.bytes(192, &self.return_path)
    }
}

/// Parses a directed route as `smpquery -D` takes it: port numbers
/// separated by commas, the first 0 (`"0,1,3"`).
pub fn parse_path(s: &str) -> Result<Vec<u8>> {
    let ports: Vec<u8> = s
        .split(',')
        .map(|p| u8::from_str(p.trim()))
        .collect::<Result<_, _>>()
        .map_err(|_| Error::BadPath("a directed route is port numbers (0-255) and commas"))?;
    DrHeader::along(&ports)?;
    Ok(ports)
}

impl Mad {
    /// A LID-routed SMP request (class 0x01): `method` (Get, Set) of
    /// attribute `attr_id` with modifier `attr_mod`, protected by `m_key`.
    pub fn smp(method: Method, attr_id: u16, attr_mod: u32, tid: u64, m_key: u64) -> Mad {
        let mut m = Mad::new(&MadHeader {
            attr_mod,
            ..MadHeader::request(class::SUBN_LID_ROUTED, 1, method, tid, attr_id)
        });
        // Cannot fail: a MAD holds the M_Key's bytes 24-31.
        let _ = m.set_m_key(m_key);
        m
    }

    /// A directed-route SMP request (class 0x81) along `path` (see
    /// [`DrHeader::along`]: `&[0, 1, 3]` is `smpquery -D 0,1,3`), with
    /// permissive DrSLID and DrDLID.
    pub fn smp_directed(
        method: Method,
        attr_id: u16,
        attr_mod: u32,
        tid: u64,
        m_key: u64,
        path: &[u8],
    ) -> Result<Mad> {
        let dr = DrHeader::along(path)?;
        let mut m = Mad::new(&MadHeader {
            attr_mod,
            ..MadHeader::request(class::SUBN_DIRECTED_ROUTE, 1, method, tid, attr_id)
        });
        m.set_m_key(m_key)?;
        m.set_dr_header(&dr)?;
        Ok(m)
    }

    /// The M_Key of an SMP (bytes 24-31).
    pub fn m_key(&self) -> Result<u64> {
        self.expect_class("SMP header (M_Key)", class::is_smi)?;
        In::new(&self.bytes, "SMP header", Mad::SIZE)?.u64(24)
    }

    /// Sets the M_Key of an SMP.
    pub fn set_m_key(&mut self, m_key: u64) -> Result<()> {
        self.expect_class("SMP header (M_Key)", class::is_smi)?;
        Out::new(&mut self.bytes, "SMP header", Mad::SIZE)?.u64(24, m_key)
    }

    /// The directed-route header (class 0x81 only); a bad hop count or
    /// pointer is an error.
    pub fn dr_header(&self) -> Result<DrHeader> {
        self.expect_class("directed-route header", |c| c == class::SUBN_DIRECTED_ROUTE)?;
        DrHeader::decode(&self.bytes)
    }

    /// Sets the directed-route header (class 0x81 only).
    pub fn set_dr_header(&mut self, h: &DrHeader) -> Result<()> {
        self.expect_class("directed-route header", |c| c == class::SUBN_DIRECTED_ROUTE)?;
        h.encode_into(&mut self.bytes)
    }

    /// The status without a directed-route SMP's D bit (for other classes,
    /// the status).
    pub fn status_without_direction(&self) -> Status {
        let s = self.status();
        if self.class() == class::SUBN_DIRECTED_ROUTE {
            Status(s.0 & !DIRECTION_BIT)
        } else {
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::{attr_id, NodeInfo};

    #[test]
    fn a_directed_route_request_matches_the_spec_layout() {
        let m = Mad::smp_directed(
            Method::GET,
            attr_id::NODE_INFO,
            0,
            0x1234,
            0x0102_0304_0506_0708,
            &[0, 1, 3],
        )
        .unwrap();
        let b = m.as_bytes();
        assert_eq!(&b[..8], &[1, 0x81, 1, 1, 0, 0, 0, 2]); // hop pointer 0, count 2
        assert_eq!(&b[16..18], &[0, 0x11]);
        assert_eq!(&b[24..32], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[32..36], &[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(&b[128..131], &[0, 1, 3]);
        assert!(b[131..].iter().all(|&x| x == 0));
        let dr = m.dr_header().unwrap();
        assert_eq!((dr.hop_count, dr.hop_pointer, dr.direction), (2, 0, false));
        assert_eq!(dr.path(), &[0, 1, 3]);
        assert_eq!(m.m_key().unwrap(), 0x0102_0304_0506_0708);
        assert_eq!(parse_path("0,1,3").unwrap(), vec![0, 1, 3]);
        assert_eq!(parse_path("0").unwrap(), vec![0]);
    }

    #[test]
    fn a_lid_routed_request_has_its_m_key_and_no_route() {
        let m = Mad::smp(Method::SET, attr_id::PORT_INFO, 1, 9, 0xabcd);
        assert_eq!(m.class(), class::SUBN_LID_ROUTED);
        assert_eq!(m.header().attr_mod, 1);
        assert_eq!(&m.as_bytes()[24..32], &0xabcdu64.to_be_bytes());
        assert!(matches!(
            m.dr_header(),
            Err(Error::WrongClass { class: 1, .. })
        ));
        assert_eq!(m.data_offset(), SMP_DATA_OFFSET);
    }

    #[test]
    fn the_response_to_a_directed_route_smp_goes_back_the_same_way() {
        let mut req =
            Mad::smp_directed(Method::GET, attr_id::NODE_INFO, 0, 7, 5, &[0, 1, 3]).unwrap();
        // As the destination sees it: the switches on the way filled in the
        // return path and moved the hop pointer to hop count + 1.
        let mut dr = req.dr_header().unwrap();
        dr.hop_pointer = 3;
        dr.return_path[1] = 2;
        dr.return_path[2] = 4;
        req.set_dr_header(&dr).unwrap();
        req.data_mut()[0] = 0xee;

        let mut resp = req.response();
        assert_eq!(resp.method(), Method::GET_RESP);
        assert_eq!(resp.tid(), 7);
        let back = resp.dr_header().unwrap();
        assert!(back.direction);
        // The responder changes neither the hop count nor the hop pointer
        // (the SMI decrements the pointer as it sends it back, C14-13:1)
        // and keeps both paths and the LIDs.
        assert_eq!((back.hop_count, back.hop_pointer), (2, 3));
        assert_eq!(back.initial_path, dr.initial_path);
        assert_eq!(back.return_path, dr.return_path);
        assert_eq!(
            (back.dr_slid, back.dr_dlid),
            (PERMISSIVE_LID, PERMISSIVE_LID)
        );
        assert_eq!(resp.m_key().unwrap(), 5);
        assert_eq!(resp.status().0, DIRECTION_BIT);
        assert!(resp.status_without_direction().is_ok());
        assert!(resp.data()[..64].iter().all(|&b| b == 0));
        resp.set_attribute(&NodeInfo {
            num_ports: 8,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(resp.attribute::<NodeInfo>().unwrap().num_ports, 8);
        // The attribute does not run into the paths.
        assert_eq!(resp.dr_header().unwrap(), back);

        let lid = Mad::smp(Method::GET, attr_id::NODE_INFO, 0, 7, 5).response();
        assert!(lid.status().is_ok());
        assert_eq!(lid.m_key().unwrap(), 5);
    }

    #[test]
    fn bad_hop_counts_and_pointers_are_typed_errors() {
        let long = vec![1u8; 65];
        assert_eq!(DrHeader::along(&long), Err(Error::HopCount(64)));
        assert!(DrHeader::along(&long[..64]).is_ok());
        assert!(matches!(DrHeader::along(&[]), Err(Error::BadPath(_))));
        assert!(parse_path("0,x").is_err());
        assert!(parse_path("0,256").is_err());
        assert!(parse_path("").is_err());

        let m = Mad::smp_directed(Method::GET, 0x11, 0, 1, 0, &[0, 1]).unwrap();
        let mut b = m.as_bytes().to_vec();
        b[6] = 2; // hop count + 1: at the destination
        assert!(Mad::decode(&b).unwrap().dr_header().is_ok());
        b[6] = 3;
        let bad = Mad::decode(&b).unwrap();
        assert_eq!(
            bad.dr_header(),
            Err(Error::HopPointer {
                pointer: 3,
                count: 1
            })
        );
        assert!(crate::mad::decode_all(&b).is_err());
        b[6] = 0;
        b[7] = 64;
        assert_eq!(
            Mad::decode(&b).unwrap().dr_header(),
            Err(Error::HopCount(64))
        );
        let dr = DrHeader {
            hop_pointer: 2,
            ..DrHeader::default()
        };
        let mut out = [0u8; 256];
        assert!(dr.encode_into(&mut out).is_err());
        assert!(DrHeader::default().encode_into(&mut out[..255]).is_err());
        assert!(DrHeader::decode(&out[..255]).is_err());
    }

    #[test]
    fn the_d_bit_leaves_the_other_status_bits_alone() {
        let mut m = Mad::smp_directed(Method::GET, 0x11, 0, 1, 0, &[0]).unwrap();
        let h = MadHeader {
            status: Status(0x001c),
            ..m.header()
        };
        m.set_header(&h);
        let mut dr = m.dr_header().unwrap();
        dr.direction = true;
        m.set_dr_header(&dr).unwrap();
        assert_eq!(m.status().0, 0x801c);
        assert_eq!(m.status_without_direction(), Status(0x001c));
    }
}
