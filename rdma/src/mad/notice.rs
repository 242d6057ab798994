//! Notice (IBA 13.4.8.2): the attribute of traps and event reports, and
//! the traps it carries.

use super::attr::{bit, id, Attribute};
use super::wire::{fit, In, Out};
use super::Result;
use crate::Gid;

/// Notice (IBA 13.4.8.2): a trap (method Trap) or an event report (SA
/// Report). These are its first 64 bytes, all that an SMP carries; a
/// GSI notice adds the IssuerGID at bytes 64-79 ([`Notice::issuer_gid`]).
///
/// | byte | field |
/// |---|---|
/// | 0 | IsGeneric (1), Type (7) |
/// | 1-3 | ProducerType (generic) or VendorID (vendor) |
/// | 4-5 | TrapNumber (generic) or DeviceID (vendor) |
/// | 6-7 | IssuerLID |
/// | 8-9 | NoticeToggle (1), NoticeCount (15) |
/// | 10-63 | DataDetails |
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Notice {
    /// Generic (a trap number the specification defines) or vendor.
    pub is_generic: bool,
    /// 7 bits: 0 fatal, 1 urgent, 2 security, 3 subnet management, 4 info.
    pub notice_type: u8,
    /// 24 bits: the producer's node type (generic) or the vendor's ID.
    pub producer_type_or_vendor_id: u32,
    /// The trap number (generic) or the vendor's device ID.
    pub trap_number_or_device_id: u16,
    /// The LID of the port that issued the notice.
    pub issuer_lid: u16,
    /// Alternates between successive notices (traps).
    pub notice_toggle: bool,
    /// 15 bits.
    pub notice_count: u16,
    /// The trap's details (their layout depends on the trap number).
    pub data_details: [u8; 54],
}

impl Default for Notice {
    fn default() -> Notice {
        Notice {
            is_generic: false,
            notice_type: 0,
            producer_type_or_vendor_id: 0,
            trap_number_or_device_id: 0,
            issuer_lid: 0,
            notice_toggle: false,
            notice_count: 0,
            data_details: [0; 54],
        }
    }
}

/// The typed details of the common generic traps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Trap {
    /// 64: a GID came into service (GIDADDR at details bytes 6-21).
    GidInService(Gid),
    /// 65: a GID went out of service.
    GidOutOfService(Gid),
    /// 66: a multicast group was created (its MGID).
    McGroupCreated(Gid),
    /// 67: a multicast group was deleted.
    McGroupDeleted(Gid),
    /// 128: a link state changed on the switch with this LID (LIDADDR at
    /// details bytes 0-1).
    LinkStateChange {
        /// The switch's LID.
        lid: u16,
    },
    /// 144: a port's CapabilityMask (or other local state) changed
    /// (LIDADDR at details bytes 2-3, CapabilityMask at bytes 6-9).
    CapabilityMaskChange {
        /// The port's LID.
        lid: u16,
        /// Its new CapabilityMask.
        capability_mask: u32,
    },
}

impl Trap {
    /// The trap number.
    pub fn number(&self) -> u16 {
        match self {
            Trap::GidInService(_) => 64,
            Trap::GidOutOfService(_) => 65,
            Trap::McGroupCreated(_) => 66,
            Trap::McGroupDeleted(_) => 67,
            Trap::LinkStateChange { .. } => 128,
            Trap::CapabilityMaskChange { .. } => 144,
        }
    }

    /// The 54 bytes of DataDetails.
    pub fn data_details(&self) -> [u8; 54] {
        let mut d = [0u8; 54];
        match *self {
            Trap::GidInService(g)
            | Trap::GidOutOfService(g)
            | Trap::McGroupCreated(g)
            | Trap::McGroupDeleted(g) => d[6..22].copy_from_slice(&g.0),
            Trap::LinkStateChange { lid } => d[0..2].copy_from_slice(&lid.to_be_bytes()),
            Trap::CapabilityMaskChange {
                lid,
                capability_mask,
            } => {
                d[2..4].copy_from_slice(&lid.to_be_bytes());
                d[6..10].copy_from_slice(&capability_mask.to_be_bytes());
            }
        }
        d
    }
}

impl Notice {
    /// The node types of a generic notice's ProducerType.
    pub const PRODUCER_CA: u32 = 1;
    /// A switch.
    pub const PRODUCER_SWITCH: u32 = 2;
    /// A router.
    pub const PRODUCER_ROUTER: u32 = 3;
    /// The subnet manager (class manager).
    pub const PRODUCER_SM: u32 = 4;

    /// A generic notice of `trap`, of type `notice_type`, from a producer
    /// of type `producer` issued by `issuer_lid`.
    pub fn generic(notice_type: u8, producer: u32, issuer_lid: u16, trap: &Trap) -> Notice {
        Notice {
            is_generic: true,
            notice_type,
            producer_type_or_vendor_id: producer,
            trap_number_or_device_id: trap.number(),
            issuer_lid,
            data_details: trap.data_details(),
            ..Notice::default()
        }
    }

    /// The trap number of a generic notice.
    pub fn trap_number(&self) -> Option<u16> {
        self.is_generic.then_some(self.trap_number_or_device_id)
    }

    /// The typed details of a generic notice of trap 64-67, 128 or 144;
    /// `None` for a vendor notice or another trap (read `data_details`).
    pub fn trap(&self) -> Option<Trap> {
        let d = &self.data_details;
        let gid = || {
            let mut g = [0u8; 16];
            g.copy_from_slice(&d[6..22]);
            Gid(g)
        };
        let u16_at = |o: usize| u16::from_be_bytes([d[o], d[o + 1]]);
        Some(match self.trap_number()? {
            64 => Trap::GidInService(gid()),
            65 => Trap::GidOutOfService(gid()),
            66 => Trap::McGroupCreated(gid()),
            67 => Trap::McGroupDeleted(gid()),
            128 => Trap::LinkStateChange { lid: u16_at(0) },
            144 => Trap::CapabilityMaskChange {
                lid: u16_at(2),
                capability_mask: u32::from_be_bytes([d[6], d[7], d[8], d[9]]),
            },
            _ => return None,
        })
    }

    /// The IssuerGID of a notice in a GSI MAD (bytes 64-79 of the
    /// attribute; an SMP has no room for it).
    pub fn issuer_gid(b: &[u8]) -> Result<Gid> {
        Ok(Gid(In::new(b, "Notice IssuerGID", 80)?.bytes(64)?))
    }
}

impl Attribute for Notice {
    const ID: u16 = id::NOTICE;
    const NAME: &'static str = "Notice";
    const SIZE: usize = 64;

    fn decode(b: &[u8]) -> Result<Self> {
        let r = In::new(b, Self::NAME, Self::SIZE)?;
        let (b0, w8) = (r.u8(0)?, r.u16(8)?);
        Ok(Notice {
            is_generic: bit(b0, 7),
            notice_type: b0 & 0x7f,
            producer_type_or_vendor_id: r.u24_low(0)?,
            trap_number_or_device_id: r.u16(4)?,
            issuer_lid: r.u16(6)?,
            notice_toggle: w8 >> 15 != 0,
            notice_count: w8 & 0x7fff,
            data_details: r.bytes(10)?,
        })
    }
    fn encode_into(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Out::new(out, Self::NAME, Self::SIZE)?;
        let ty = fit("Type", 7, self.notice_type.into())? as u32;
        let prod = fit(
            "ProducerType/VendorID",
            24,
            self.producer_type_or_vendor_id.into(),
        )? as u32;
        let count = fit("NoticeCount", 15, self.notice_count.into())? as u16;
        w.u32(0, u32::from(self.is_generic) << 31 | ty << 24 | prod)?;
        w.u16(4, self.trap_number_or_device_id)?;
        w.u16(6, self.issuer_lid)?;
        w.u16(8, u16::from(self.notice_toggle) << 15 | count)?;
        w.bytes(10, &self.data_details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::Error;

    #[test]
    fn notices_carry_typed_traps() {
        let gid = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 7]);
        let n = Notice::generic(4, Notice::PRODUCER_SM, 1, &Trap::GidInService(gid));
        let b = n.to_bytes().unwrap();
        assert_eq!(&b[..8], &[0x84, 0, 0, 4, 0, 64, 0, 1]);
        assert_eq!(&b[16..32], &gid.0);
        let back = Notice::decode(&b).unwrap();
        assert_eq!(back, n);
        assert_eq!(back.trap(), Some(Trap::GidInService(gid)));

        for t in [
            Trap::GidOutOfService(gid),
            Trap::McGroupCreated(gid),
            Trap::McGroupDeleted(gid),
            Trap::LinkStateChange { lid: 0x12 },
            Trap::CapabilityMaskChange {
                lid: 3,
                capability_mask: 0x0251_0a68,
            },
        ] {
            let n = Notice::generic(1, Notice::PRODUCER_CA, 3, &t);
            let back = Notice::decode(&n.to_bytes().unwrap()).unwrap();
            assert_eq!(back.trap(), Some(t));
        }
        let lsc = Notice::generic(1, 2, 3, &Trap::LinkStateChange { lid: 0x12 });
        assert_eq!(&lsc.to_bytes().unwrap()[10..12], &[0, 0x12]);
        let cap = Notice::generic(
            1,
            1,
            3,
            &Trap::CapabilityMaskChange {
                lid: 3,
                capability_mask: 0x0251_0a68,
            },
        );
        let cb = cap.to_bytes().unwrap();
        assert_eq!(&cb[12..14], &[0, 3]);
        assert_eq!(&cb[16..20], &[0x02, 0x51, 0x0a, 0x68]);

        let vendor = Notice {
            is_generic: false,
            trap_number_or_device_id: 64,
            ..n
        };
        assert_eq!(vendor.trap_number(), None);
        assert_eq!(vendor.trap(), None);
        let other = Notice {
            trap_number_or_device_id: 256,
            ..n
        };
        assert_eq!(other.trap(), None);

        let count = Notice {
            notice_count: 0x8000,
            ..n
        };
        assert!(matches!(count.to_bytes(), Err(Error::FieldOverflow { .. })));
        let mut gsi = b.clone();
        gsi.extend_from_slice(&gid.0);
        assert_eq!(Notice::issuer_gid(&gsi).unwrap(), gid);
        assert!(Notice::issuer_gid(&b).is_err());
    }
}
