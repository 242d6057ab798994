//! InfiniBand path records for a CM id (`struct ibv_path_data`, the value
//! of `RDMA_OPTION_IB_PATH`): an SA PathRecord, in the wire format the
//! kernel unpacks, and what it is for.

use rdmacm_sys as cm;

use crate::mad::sa::PathRecord;
use crate::mad::Attribute;
use crate::{Error, Result};

bitflags::bitflags! {
    /// What a path is for (`IBV_PATH_FLAG_*` of `ibv_path_data.flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct IbPathFlags: u32 {
        /// The path is good for general management packets (CM MADs).
        const GMP = cm::IBV_PATH_FLAG_GMP;
        /// The primary path.
        const PRIMARY = cm::IBV_PATH_FLAG_PRIMARY;
        /// The alternate path.
        const ALTERNATE = cm::IBV_PATH_FLAG_ALTERNATE;
        /// From this side to the peer.
        const OUTBOUND = cm::IBV_PATH_FLAG_OUTBOUND;
        /// From the peer to this side.
        const INBOUND = cm::IBV_PATH_FLAG_INBOUND;
        /// The reverse of an inbound path.
        const INBOUND_REVERSE = cm::IBV_PATH_FLAG_INBOUND_REVERSE;
        /// Both ways (`OUTBOUND | INBOUND_REVERSE`).
        const BIDIRECTIONAL = cm::IBV_PATH_FLAG_BIDIRECTIONAL;
    }
}

/// One path for [`CmId::set_ib_paths`](crate::cm::CmId::set_ib_paths):
/// an SA [`PathRecord`] (as an SA query answers it) and what it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbPath {
    /// What the path is for.
    pub flags: IbPathFlags,
    /// The path.
    pub record: PathRecord,
}

impl IbPath {
    /// The flags of the path the kernel's CM connects over: good for CM
    /// MADs, primary, both ways (`GMP | PRIMARY | BIDIRECTIONAL`); the
    /// kernel takes the first path of exactly these flags and needs one.
    pub const PRIMARY_FLAGS: IbPathFlags = IbPathFlags::GMP
        .union(IbPathFlags::PRIMARY)
        .union(IbPathFlags::BIDIRECTIONAL);

    /// `record` as the primary path ([`PRIMARY_FLAGS`](Self::PRIMARY_FLAGS)).
    pub fn primary(record: PathRecord) -> IbPath {
        IbPath {
            flags: IbPath::PRIMARY_FLAGS,
            record,
        }
    }

    /// The `ibv_path_data` of the path: its flags in host order, the record
    /// in the SA's wire format (big-endian, 64 bytes), which is the layout
    /// of `ibv_path_record` and what the kernel unpacks. Errors (`EINVAL`):
    /// a field wider than the wire format holds (a flow label past 20
    /// bits, an SL past 4, ...).
    pub fn to_raw(&self) -> Result<cm::ibv_path_data> {
        let mut wire = [0u8; PathRecord::SIZE];
        self.record
            .encode_into(&mut wire)
            .map_err(|e| Error::invalid("rdma_set_option", format!("RDMA_OPTION_IB_PATH: {e}")))?;
        let mut data = cm::ibv_path_data {
            flags: self.flags.bits(),
            ..Default::default()
        };
        const _: () = assert!(std::mem::size_of::<cm::ibv_path_record>() == PathRecord::SIZE);
        // SAFETY: `ibv_path_record` is 64 bytes (asserted above) of
        // integers and byte arrays, with no padding (its fields tile the
        // 64 bytes, as the layout test shows), so any bytes are a valid
        // value; the source is a local array of that size, the
        // destination the field, and they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                wire.as_ptr(),
                (&mut data.path as *mut cm::ibv_path_record).cast::<u8>(),
                wire.len(),
            )
        };
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::sa::Selector;
    use crate::Gid;

    fn record() -> PathRecord {
        PathRecord {
            service_id: 0x0102_0304_0506_0708,
            dgid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
            sgid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 9, 10, 11, 12, 13, 14, 15, 16]),
            dlid: 0x1234,
            slid: 0x5678,
            raw_traffic: false,
            flow_label: 0xabcde,
            hop_limit: 64,
            tclass: 0x28,
            reversible: true,
            numb_path: 1,
            pkey: 0xffff,
            qos_class: 0x123,
            sl: 5,
            mtu_selector: Selector::Exactly,
            mtu: 5,
            rate_selector: Selector::Exactly,
            rate: 3,
            packet_life_time_selector: Selector::Exactly,
            packet_life_time: 18,
            preference: 0,
        }
    }

    #[test]
    fn a_path_is_the_bytes_of_the_c_struct() {
        let d = IbPath::primary(record()).to_raw().unwrap();
        assert_eq!(d.flags, 1 | 2 | 40);
        assert_eq!(d.reserved, 0);
        let p = &d.path;
        // Each field of `ibv_path_record` holds the big-endian value the
        // record names (the C struct's fields are `__be16`/`__be32`/`__be64`).
        assert_eq!(u64::from_be(p.service_id), 0x0102_0304_0506_0708);
        // SAFETY: `ibv_gid` is a union of 16 bytes; `raw` reads them all.
        let (dgid, sgid) = unsafe { (p.dgid.raw, p.sgid.raw) };
        assert_eq!(dgid, record().dgid.0);
        assert_eq!(sgid, record().sgid.0);
        assert_eq!(u16::from_be(p.dlid), 0x1234);
        assert_eq!(u16::from_be(p.slid), 0x5678);
        // resv 31:28, flow label 27:8, hop limit 7:0
        assert_eq!(u32::from_be(p.flowlabel_hoplimit), 0xabcde << 8 | 64);
        assert_eq!(p.tclass, 0x28);
        assert_eq!(p.reversible_numpath, 0x80 | 1);
        assert_eq!(u16::from_be(p.pkey), 0xffff);
        assert_eq!(u16::from_be(p.qosclass_sl), 0x123 << 4 | 5);
        // selector in bits 7:6, value in 5:0 (Selector::Exactly is 2)
        assert_eq!(p.mtu, 2 << 6 | 5);
        assert_eq!(p.rate, 2 << 6 | 3);
        assert_eq!(p.packetlifetime, 2 << 6 | 18);
        assert_eq!(p.preference, 0);
        assert_eq!(p.reserved, [0; 6]);
    }

    #[test]
    fn a_field_too_wide_for_the_wire_is_refused() {
        let mut r = record();
        r.sl = 16;
        let errno = |r| IbPath::primary(r).to_raw().err().map(|e| e.errno());
        assert_eq!(errno(r), Some(libc::EINVAL));
        r.sl = 0;
        r.flow_label = 1 << 20;
        assert_eq!(errno(r), Some(libc::EINVAL));
    }
}
