//! The address of a MAD: destination (or source, on receive) LID, QP, Q_Key,
//! service level, P_Key index and the GRH.

use std::mem::offset_of;

use umad_sys::ib_mad_addr;

use crate::Gid;

/// The well-known Q_Key of the GSI (QP1). RoCE needs it set explicitly.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// The global route header of a MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grh {
    /// The remote GID (destination on send, source on receive).
    pub gid: Gid,
    /// The index of the local GID (source on send, the one that received).
    pub gid_index: u8,
    /// The hop limit.
    pub hop_limit: u8,
    /// The traffic class.
    pub traffic_class: u8,
    /// The flow label (20 bits).
    pub flow_label: u32,
}

impl Grh {
    /// A GRH to `gid` from the local GID at `gid_index`, hop limit 64.
    pub fn new(gid: Gid, gid_index: u8) -> Grh {
        Grh {
            gid,
            gid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }
}

/// Where a MAD goes (or where it came from).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Address {
    /// The remote QP number (1 for the GSI).
    pub qpn: u32,
    /// The Q_Key.
    pub qkey: u32,
    /// The remote LID (0 on RoCE).
    pub lid: u16,
    /// The service level.
    pub sl: u8,
    /// The source path bits.
    pub path_bits: u8,
    /// The P_Key index.
    pub pkey_index: u16,
    /// The GRH, required on RoCE.
    pub grh: Option<Grh>,
}

impl Address {
    /// The GSI (QP1, [`GSI_QKEY`]) of the node with `gid`, reached from the
    /// local GID at `gid_index`: the address of a MAD on RoCE.
    pub fn gsi(gid: Gid, gid_index: u8) -> Address {
        Address {
            qpn: 1,
            qkey: GSI_QKEY,
            lid: 0,
            sl: 0,
            path_bits: 0,
            pkey_index: 0,
            grh: Some(Grh::new(gid, gid_index)),
        }
    }

    /// The GSI of the node with `lid`, without GRH (InfiniBand only).
    pub fn gsi_lid(lid: u16) -> Address {
        Address {
            qpn: 1,
            qkey: GSI_QKEY,
            lid,
            sl: 0,
            path_bits: 0,
            pkey_index: 0,
            grh: None,
        }
    }

    /// The SMI (QP0, Q_Key 0) of the node with `lid`: the address of a
    /// LID-routed subnet management packet (class 0x01; InfiniBand only).
    pub fn smi_lid(lid: u16) -> Address {
        Address {
            qpn: 0,
            qkey: 0,
            ..Address::gsi_lid(lid)
        }
    }

    /// The address to answer a MAD that came from `self`: the same, with the
    /// GSI Q_Key when it came from QP1 (the kernel reports Q_Key 0).
    pub fn reply(&self) -> Address {
        let mut a = *self;
        if a.qpn == 1 {
            a.qkey = GSI_QKEY;
        }
        a
    }

    /// Writes the address in the layout of `struct ib_mad_addr` (44 bytes)
    /// at the start of `out`, which must be at least that long.
    pub(crate) fn write(&self, out: &mut [u8; ADDR_SIZE]) {
        *out = [0; ADDR_SIZE];
        put(out, offset_of!(ib_mad_addr, qpn), &self.qpn.to_be_bytes());
        put(out, offset_of!(ib_mad_addr, qkey), &self.qkey.to_be_bytes());
        put(out, offset_of!(ib_mad_addr, lid), &self.lid.to_be_bytes());
        put(out, offset_of!(ib_mad_addr, sl), &[self.sl]);
        put(out, offset_of!(ib_mad_addr, path_bits), &[self.path_bits]);
        put(
            out,
            offset_of!(ib_mad_addr, pkey_index),
            &self.pkey_index.to_ne_bytes(),
        );
        if let Some(g) = &self.grh {
            put(out, offset_of!(ib_mad_addr, grh_present), &[1]);
            put(out, offset_of!(ib_mad_addr, gid_index), &[g.gid_index]);
            put(out, offset_of!(ib_mad_addr, hop_limit), &[g.hop_limit]);
            put(
                out,
                offset_of!(ib_mad_addr, traffic_class),
                &[g.traffic_class],
            );
            put(out, offset_of!(ib_mad_addr, __bindgen_anon_1), &g.gid.0);
            put(
                out,
                offset_of!(ib_mad_addr, flow_label),
                &g.flow_label.to_be_bytes(),
            );
        }
    }

    /// Reads an address in the layout of `struct ib_mad_addr`.
    pub(crate) fn read(b: &[u8; ADDR_SIZE]) -> Address {
        let grh = (get::<1>(b, offset_of!(ib_mad_addr, grh_present))[0] != 0).then(|| Grh {
            gid: Gid(get(b, offset_of!(ib_mad_addr, __bindgen_anon_1))),
            gid_index: get::<1>(b, offset_of!(ib_mad_addr, gid_index))[0],
            hop_limit: get::<1>(b, offset_of!(ib_mad_addr, hop_limit))[0],
            traffic_class: get::<1>(b, offset_of!(ib_mad_addr, traffic_class))[0],
            flow_label: u32::from_be_bytes(get(b, offset_of!(ib_mad_addr, flow_label))),
        });
        Address {
            qpn: u32::from_be_bytes(get(b, offset_of!(ib_mad_addr, qpn))),
            qkey: u32::from_be_bytes(get(b, offset_of!(ib_mad_addr, qkey))),
            lid: u16::from_be_bytes(get(b, offset_of!(ib_mad_addr, lid))),
            sl: get::<1>(b, offset_of!(ib_mad_addr, sl))[0],
            path_bits: get::<1>(b, offset_of!(ib_mad_addr, path_bits))[0],
            pkey_index: u16::from_ne_bytes(get(b, offset_of!(ib_mad_addr, pkey_index))),
            grh,
        }
    }
}

/// The size of `struct ib_mad_addr`.
pub(crate) const ADDR_SIZE: usize = std::mem::size_of::<ib_mad_addr>();

fn put(out: &mut [u8], off: usize, v: &[u8]) {
    if let Some(d) = out.get_mut(off..off + v.len()) {
        d.copy_from_slice(v);
    }
}

fn get<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    b.get(off..off + N)
        .and_then(|s| s.try_into().ok())
        .unwrap_or([0; N])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_round_trips_through_the_kernel_layout() {
        let gid: Gid = "fd00:1::1".parse::<std::net::Ipv6Addr>().unwrap().into();
        let a = Address {
            sl: 3,
            pkey_index: 2,
            grh: Some(Grh {
                gid,
                gid_index: 1,
                hop_limit: 64,
                traffic_class: 0x20,
                flow_label: 0xabcde,
            }),
            ..Address::gsi(gid, 1)
        };
        let mut b = [0u8; ADDR_SIZE];
        a.write(&mut b);
        assert_eq!(&b[0..4], &[0, 0, 0, 1]); // qpn, big-endian
        assert_eq!(&b[4..8], &[0x80, 0x01, 0, 0]); // qkey
        assert_eq!(b[12], 1); // grh_present
        assert_eq!(b[13], 1); // gid_index
        assert_eq!(&b[16..32], &gid.0);
        assert_eq!(&b[32..36], &[0, 0x0a, 0xbc, 0xde]);
        assert_eq!(Address::read(&b), a);
        let lid = Address::gsi_lid(7);
        lid.write(&mut b);
        assert_eq!(b[12], 0);
        assert_eq!(Address::read(&b), lid);
    }

    #[test]
    fn smi_addresses_are_qp0_without_a_qkey() {
        let a = Address::smi_lid(0x1234);
        let mut b = [0u8; ADDR_SIZE];
        a.write(&mut b);
        assert_eq!(&b[0..8], &[0; 8]); // qpn 0, qkey 0
        assert_eq!(&b[8..10], &[0x12, 0x34]); // lid, big-endian
        assert_eq!(b[12], 0); // no GRH
        assert_eq!(Address::read(&b), a);
        // The reply to an SMP stays on QP0.
        assert_eq!(a.reply(), a);
    }

    #[test]
    fn replies_use_the_gsi_qkey() {
        let mut from = Address::gsi_lid(3);
        from.qkey = 0;
        assert_eq!(from.reply().qkey, GSI_QKEY);
    }
}
