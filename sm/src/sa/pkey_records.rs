//! P_KeyTableRecords (IBA 15.2.5.11): each port's P_Key table, a record
//! per block of 32 entries, as the sweep gave the ports (the default
//! partition alone, full, for ports whose table the SM leaves as it is).

use rdma::mad::sa::PKeyTableRecord;
use rdma::mad::PKeyTable;

use super::*;
use crate::partitions;

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
