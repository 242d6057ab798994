//! The records of the nodes' SMP attributes (their codecs in `rdma::mad::sa`), built
//! from what the sweep knows and matched by component mask: SMInfoRecord,
//! SwitchInfoRecord, LinearForwardingTableRecord,
//! MulticastForwardingTableRecord, GUIDInfoRecord, SLtoVLMappingTableRecord
//! and VLArbitrationTableRecord, each answered to Get and GetTable.
//!
//! Where each comes from:
//! - SMInfo: this SM's own, as the last sweep left it (SM_Key 0, shown to
//!   no requester, as OpenSM shows it); the other SMs of the subnet are
//!   not listed.
//! - SwitchInfo: as the sweep read it, with the LinearFDBTop it wrote.
//! - The LFT and MFT blocks: those the SM computed and wrote (the LFT up to
//!   the block of the highest LID; the MFT up to the highest block with a
//!   group on the switch, every position of its ports).
//! - GUIDInfo: not read by the sweep; the SM assigns no alias GUIDs, so a
//!   port's table is its port GUID at index 0 and zeros after it, in the
//!   blocks its PortInfo's GUIDCap holds.
//! - SLtoVL and VLArbitration tables: not read by the sweep. The SM programs
//!   neither (it runs one data VL), so the records hold their defaults:
//!   every SL on VL 0, and arbitration entries of VL 0 with weight 0.
//!   Records are listed as OpenSM lists them: a CA port's SLtoVL table
//!   once (input and output port 0), a switch's for every pair of its
//!   ports, port 0 included; VLArbitration blocks 1 to 4 of every port.

use std::collections::HashMap;

use rdma::mad::{
    GuidInfo, LinearForwardingTable, MulticastForwardingTable, SlToVlMappingTable, SmInfo,
    VlArbitrationTable,
};

use super::*;
use crate::port_mask::PortMask;
use rdma::mad::sa::{
    attr_id as id, GuidInfoRecord, LftRecord, MftRecord, Sl2VlTableRecord, SmInfoRecord,
    SwitchInfoRecord, VlArbTableRecord,
};

/// Whether `attr` is one of the records of this module.
pub(super) fn serves(attr: u16) -> bool {
    matches!(
        attr,
        id::SM_INFO_RECORD
            | id::SWITCH_INFO_RECORD
            | id::LFT_RECORD
            | id::MFT_RECORD
            | id::GUID_INFO_RECORD
            | id::SL2VL_TABLE_RECORD
            | id::VL_ARB_TABLE_RECORD
    )
}

/// The record of request `req`: ERR_REQ_INVALID when the request's
/// payload is shorter than one (what was received, not the padding) or its
/// attribute modifier is not 0 (these records take none, IBA 15.2.5).
pub(super) fn record_of<R: SaRecord>(req: &Received) -> Result<R, SaStatusCode> {
    const SA_DATA: usize = 56;
    if req.len < SA_DATA + R::SIZE || req.mad.header().attr_mod != 0 {
        return Err(SaStatusCode::ReqInvalid);
    }
    req.mad
        .attribute::<R>()
        .map_err(|_| SaStatusCode::ReqInvalid)
}

/// The answer to a Get or GetTable of one of the records of this module
/// (`serves(attr)`); other methods are not supported.
pub(super) fn answer(req: &Received, subnet: &RwLock<Subnet>) -> Mad {
    let m = &req.mad;
    let h = m.header();
    if !matches!(h.method, Method::GET | Method::GET_TABLE) {
        return general_error(
            m,
            Status::new(
                false,
                false,
                rdma::mad::InvalidField::MethodAttributeNotSupported,
                0,
            ),
        );
    }
    let mask = m.sa_header().map_or(0, |sa| sa.comp_mask);
    let s = lock_r(subnet);
    match h.attr_id {
        id::SM_INFO_RECORD => select(req, mask, sm_info_records(&s)),
        id::SWITCH_INFO_RECORD => select(req, mask, switch_info_records(&s)),
        id::LFT_RECORD => select(req, mask, lft_records(&s)),
        id::MFT_RECORD => select(req, mask, mft_records(&s)),
        id::GUID_INFO_RECORD => select(req, mask, guid_info_records(&s)),
        id::SL2VL_TABLE_RECORD => select(req, mask, sl2vl_records(&s)),
        _ => select(req, mask, vl_arb_records(&s)),
    }
}

/// The answer of the records of `all` that match the request's.
fn select<R: SaRecord>(req: &Received, mask: u64, all: Vec<R>) -> Mad {
    let m = &req.mad;
    let r = record_of::<R>(req).and_then(|q| matching(&q, mask, all));
    match r {
        Ok(hits) => reply(m, m.header().method, hits),
        Err(code) => error(m, code),
    }
}

/// The switches with their LIDs, by LID.
fn switches(s: &Subnet) -> Vec<(NodeId, u16)> {
    let mut v: Vec<_> = s
        .topo
        .nodes()
        .filter(|(_, n)| n.kind == NodeKind::Switch)
        .filter_map(|(id, _)| Some((id, s.lids.of(&s.topo, id, 0)?)))
        .collect();
    v.sort_by_key(|&(_, lid)| lid);
    v
}

pub(super) fn sm_info_records(s: &Subnet) -> Vec<SmInfoRecord> {
    if s.sm_lid == 0 {
        return Vec::new();
    }
    vec![SmInfoRecord {
        lid: s.sm_lid,
        sm_info: SmInfo {
            sm_key: 0,
            ..s.sm_info
        },
    }]
}

pub(super) fn switch_info_records(s: &Subnet) -> Vec<SwitchInfoRecord> {
    switches(s)
        .into_iter()
        .filter_map(|(id, lid)| {
            let si = s.switch_info.get(&id)?;
            Some(SwitchInfoRecord {
                lid,
                switch_info: *si,
            })
        })
        .collect()
}

pub(super) fn lft_records(s: &Subnet) -> Vec<LftRecord> {
    let mut v = Vec::new();
    for (id, lid) in switches(s) {
        for (block, ports) in s.routes.blocks(id) {
            let Ok(block_num) = u16::try_from(block) else {
                continue;
            };
            v.push(LftRecord {
                lid,
                block_num,
                lft: LinearForwardingTable { ports },
            });
        }
    }
    v
}

pub(super) fn mft_records(s: &Subnet) -> Vec<MftRecord> {
    let masks = crate::sweep::multicast_masks(s);
    let mut by_switch: HashMap<NodeId, Vec<(u16, &PortMask)>> = HashMap::new();
    for ((sw, mlid), ports) in &masks {
        by_switch.entry(*sw).or_default().push((*mlid, ports));
    }
    let mut v = Vec::new();
    for (id, lid) in switches(s) {
        let Some(groups) = by_switch.get(&id) else {
            continue;
        };
        let top = groups
            .iter()
            .filter_map(|(mlid, _)| MulticastForwardingTable::block_of(*mlid))
            .map(|(b, _)| b)
            .max();
        let Some(top) = top else { continue };
        let positions = s.topo.node(id).num_ports / 16;
        for block_num in 0..=top {
            for position in 0..=positions {
                let mut mft = MulticastForwardingTable::default();
                for (mlid, ports) in groups {
                    if let Some((b, i)) = MulticastForwardingTable::block_of(*mlid) {
                        if b == block_num {
                            mft.port_masks[i] = ports.position(position);
                        }
                    }
                }
                v.push(MftRecord {
                    lid,
                    position,
                    block_num,
                    mft,
                });
            }
        }
    }
    v
}

/// Every end port with a LID: (LID, node, port, port GUID), by LID.
fn end_ports(s: &Subnet) -> Vec<(u16, NodeId, u8, u64)> {
    s.sorted_lids
        .iter()
        .filter_map(|&lid| {
            let &(id, p, guid) = s.end_ports.get(&lid)?;
            Some((lid, id, p, guid))
        })
        .collect()
}

pub(super) fn guid_info_records(s: &Subnet) -> Vec<GuidInfoRecord> {
    let mut v = Vec::new();
    for (lid, id, p, guid) in end_ports(s) {
        let cap = s.port_info.get(&(id, p)).map_or(1, |pi| pi.guid_cap.max(1));
        for block_num in 0..cap.div_ceil(GuidInfo::ENTRIES as u8) {
            let mut guid_info = GuidInfo::default();
            if block_num == 0 {
                guid_info.guids[0] = guid;
            }
            v.push(GuidInfoRecord {
                lid,
                block_num,
                guid_info,
            });
        }
    }
    v
}

pub(super) fn sl2vl_records(s: &Subnet) -> Vec<Sl2VlTableRecord> {
    let table = SlToVlMappingTable::default();
    let mut v = Vec::new();
    for (lid, id, _, _) in end_ports(s) {
        let n = s.topo.node(id);
        if n.kind != NodeKind::Switch {
            v.push(Sl2VlTableRecord {
                lid,
                table,
                ..Sl2VlTableRecord::default()
            });
            continue;
        }
        for output_port in 0..=n.num_ports {
            for input_port in 0..=n.num_ports {
                v.push(Sl2VlTableRecord {
                    lid,
                    input_port,
                    output_port,
                    table,
                });
            }
        }
    }
    v
}

pub(super) fn vl_arb_records(s: &Subnet) -> Vec<VlArbTableRecord> {
    let table = VlArbitrationTable::default();
    let mut v = Vec::new();
    for (lid, id, p, _) in end_ports(s) {
        let n = s.topo.node(id);
        let ports = match n.kind {
            NodeKind::Switch => 0..=n.num_ports,
            _ => p..=p,
        };
        for output_port in ports {
            for block_num in 1..=4 {
                v.push(VlArbTableRecord {
                    lid,
                    output_port,
                    block_num,
                    table,
                });
            }
        }
    }
    v
}

/// The records of this module that `s` holds, encoded, by attribute: what
/// a GetTable with an empty mask answers (for the tests).
#[cfg(test)]
pub(super) fn all_encoded(s: &Subnet) -> Vec<(u16, Vec<Vec<u8>>)> {
    fn enc<R: rdma::mad::Attribute>(v: Vec<R>) -> Vec<Vec<u8>> {
        v.iter().map(|r| r.to_bytes().unwrap()).collect()
    }
    vec![
        (id::SM_INFO_RECORD, enc(sm_info_records(s))),
        (id::SWITCH_INFO_RECORD, enc(switch_info_records(s))),
        (id::LFT_RECORD, enc(lft_records(s))),
        (id::MFT_RECORD, enc(mft_records(s))),
        (id::GUID_INFO_RECORD, enc(guid_info_records(s))),
        (id::SL2VL_TABLE_RECORD, enc(sl2vl_records(s))),
        (id::VL_ARB_TABLE_RECORD, enc(vl_arb_records(s))),
    ]
}
