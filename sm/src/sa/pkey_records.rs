//! P_KeyTableRecords (IBA 15.2.5.11): each port's P_Key table, a record
//! per block of 32 entries, as the sweep gave the ports (the default
//! partition alone, full, for ports whose table the SM leaves as it is).

use rdma::mad::sa::{Component as C, SaRecord};
use rdma::mad::{Attribute, PKeyTable};

use super::*;
use crate::partitions;

/// The SA attribute ID of P_KeyTableRecord.
pub(crate) const P_KEY_TABLE_RECORD: u16 = 0x0033;

bitflags::bitflags! {
    /// The ComponentMask bits of a P_KeyTableRecord query.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub(crate) struct PKeyTableRecordMask: u64 {
        /// LID: the port's (a switch's port 0 LID for every port of it).
        const LID = 1 << 0;
        /// BlockNum.
        const BLOCK_NUM = 1 << 1;
        /// PortNum.
        const PORT_NUM = 1 << 2;
        /// The reserved bits after PortNum.
        const RESERVED = 1 << 3;
        /// The 32 P_Keys.
        const P_KEY_TABLE = 1 << 4;
    }
}

/// P_KeyTableRecord: 8 bytes of LID, BlockNum, PortNum and reserved, then
/// one P_KeyTable block (64 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PKeyTableRecord {
    pub lid: u16,
    pub block_num: u16,
    pub port_num: u8,
    pub table: PKeyTable,
}

impl Attribute for PKeyTableRecord {
    const ID: u16 = P_KEY_TABLE_RECORD;
    const NAME: &'static str = "P_KeyTableRecord";
    const SIZE: usize = 72;

    fn in_class(c: u8) -> bool {
        c == rdma::mad::class::SUBN_ADM
    }

    fn decode(b: &[u8]) -> rdma::mad::Result<Self> {
        let b = b.get(..Self::SIZE).ok_or(rdma::mad::Error::Truncated {
            what: Self::NAME,
            need: Self::SIZE,
            have: b.len(),
        })?;
        Ok(PKeyTableRecord {
            lid: u16::from_be_bytes([b[0], b[1]]),
            block_num: u16::from_be_bytes([b[2], b[3]]),
            port_num: b[4],
            table: PKeyTable::decode(&b[8..])?,
        })
    }

    fn encode_into(&self, out: &mut [u8]) -> rdma::mad::Result<()> {
        let have = out.len();
        let out = out
            .get_mut(..Self::SIZE)
            .ok_or(rdma::mad::Error::Truncated {
                what: Self::NAME,
                need: Self::SIZE,
                have,
            })?;
        out[..2].copy_from_slice(&self.lid.to_be_bytes());
        out[2..4].copy_from_slice(&self.block_num.to_be_bytes());
        out[4] = self.port_num;
        out[5..8].fill(0);
        self.table.encode_into(&mut out[8..])
    }
}

impl SaRecord for PKeyTableRecord {
    type Mask = PKeyTableRecordMask;
    const COMPONENTS: &'static [C] = &[
        C::new("LID", 0, 16),
        C::new("BlockNum", 16, 16),
        C::new("PortNum", 32, 8),
        C::new("Reserved", 40, 24),
        C::new("P_KeyTable", 64, 512),
    ];
}

/// The answer to a Get or GetTable of P_KeyTableRecords (none: the query
/// does not decode).
pub(super) fn answer(m: &Mad, subnet: &RwLock<Subnet>) -> Option<Mad> {
    let q = m.attribute::<PKeyTableRecord>().ok()?;
    let (h, sa) = (m.header(), m.sa_header().ok()?);
    Some(
        match matching(&q, sa.comp_mask, pkey_table_records(&lock_r(subnet))) {
            Ok(hits) => reply(m, h.method, hits),
            Err(code) => error(m, code),
        },
    )
}

/// Every port's P_Key table blocks, by LID, port and block.
pub(super) fn pkey_table_records(s: &Subnet) -> Vec<PKeyTableRecord> {
    let mut v = Vec::new();
    for (&(id, p), t) in &s.pkeys {
        let Some(lid) = base_lid(s, id, p) else {
            continue;
        };
        for (b, entries) in partitions::blocks(t).into_iter().enumerate() {
            v.push(PKeyTableRecord {
                lid,
                block_num: b as u16,
                port_num: p,
                table: PKeyTable { pkeys: entries },
            });
        }
    }
    v.sort_by_key(|r| (r.lid, r.port_num, r.block_num));
    v
}

/// The P_Key table of the end port of `lid`: as the sweep gave it, else
/// the default partition, full (the table a port comes up with).
pub(super) fn table_of_lid(s: &Subnet, lid: u16) -> &[u16] {
    const DEFAULT: &[u16] = &[partitions::DEFAULT_PKEY | partitions::FULL];
    end_port(s, lid)
        .and_then(|(id, p, _)| s.pkeys.get(&(id, p)))
        .map_or(DEFAULT, Vec::as_slice)
}
