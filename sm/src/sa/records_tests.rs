//! Unit tests of the SA's SMInfo, SwitchInfo, forwarding table, GUIDInfo,
//! SLtoVL and VLArbitration records (their codecs are tested in `rdma`)
//! and of ServiceRecords: their selection by component mask, and the typed
//! answers to hostile requests.

use std::time::Duration;

use rdma::mad::sa::{
    GuidInfoRecord, GuidInfoRecordMask, LftRecord, LftRecordMask, MftRecord, MftRecordMask,
    SaRequest, SaTable, ServiceRecord, ServiceRecordMask, Sl2VlTableRecord, Sl2VlTableRecordMask,
    SmInfoRecord, SwitchInfoRecord, SwitchInfoRecordMask, VlArbTableRecord, VlArbTableRecordMask,
};
use rdma::mad::{Attribute, GuidInfo, InvalidField, SmInfo, SwitchInfo};
use rdma::umad::Address;

use super::service::{register, remove, MAX_SERVICES};
use super::tables::all_encoded;
use super::*;

/// Two switches joined on their port 1, each with two CAs on ports 2 and
/// 3; LIDs, routes, SwitchInfos and the SM's SMInfo as a sweep leaves
/// them, and a group whose members are a CA of each switch.
fn fabric() -> Subnet {
    let mut s = Subnet::default();
    let a = s.topo.add_node(0x10, NodeKind::Switch, 3);
    let b = s.topo.add_node(0x20, NodeKind::Switch, 3);
    s.topo.link(a, 1, b, 1).unwrap();
    let mut cas = Vec::new();
    for (i, (sw, p)) in [(a, 2), (a, 3), (b, 2), (b, 3)].into_iter().enumerate() {
        let ca = s.topo.add_node(0x1000 * (i as u64 + 1), NodeKind::Ca, 1);
        s.topo.link(sw, p, ca, 1).unwrap();
        cas.push(ca);
    }
    s.lids.assign(&s.topo);
    s.index_lids();
    s.routes = s.topo.min_hop_routes(&s.lids);
    for (id, n) in s
        .topo
        .nodes()
        .map(|(i, n)| (i, n.clone()))
        .collect::<Vec<_>>()
    {
        let ports = match n.kind {
            NodeKind::Switch => 0..=n.num_ports,
            _ => 1..=1,
        };
        for p in ports {
            let pi = PortInfo {
                guid_cap: if n.kind == NodeKind::Switch { 1 } else { 16 },
                ..PortInfo::default()
            };
            s.port_info.insert((id, p), pi);
        }
        if n.kind == NodeKind::Switch {
            let si = SwitchInfo {
                linear_fdb_cap: 0xc000,
                multicast_fdb_cap: 0x400,
                linear_fdb_top: s.lids.max_lid(),
                life_time_value: 18,
                ..SwitchInfo::default()
            };
            s.switch_info.insert(id, si);
        }
    }
    s.sm_node = Some(cas[0]);
    s.sm_lid = s.lids.of(&s.topo, cas[0], 1).unwrap();
    s.sm_info = SmInfo {
        guid: 0x1001,
        sm_key: 0x5eed,
        act_count: 7,
        priority: 3,
        sm_state: SmInfo::MASTER,
    };
    for &ca in [cas[0], cas[2]].iter() {
        let guid = s.topo.node(ca).port_guid(1);
        let g = s
            .groups
            .by_mgid
            .get_mut(&crate::groups::IPOIB_BROADCAST)
            .unwrap();
        g.members.insert(
            Gid::from_parts(SUBNET_PREFIX, guid).0,
            JoinState::FULL_MEMBER,
        );
    }
    s
}

fn lid_of(s: &Subnet, guid: u64) -> u16 {
    let (id, p) = s.topo.end_port_of(guid).unwrap();
    s.lids.of(&s.topo, id, p).unwrap()
}

/// A request as the port of LID `from` sent it, `len` bytes received.
fn received(mad: Mad, from: u16, len: usize) -> Received {
    Received {
        agent_id: 0,
        status: 0,
        addr: Address::gsi_lid(from),
        len,
        mad,
    }
}

/// The answer to `mad` sent whole by the port of LID `from`.
fn ask(s: &RwLock<Subnet>, mad: Mad, from: u16) -> Mad {
    answer(&received(mad, from, Mad::SIZE), s, None).expect("an answer")
}

/// The records of a GetTable of `q` on `mask`, or the SA status.
pub(super) fn table<R: SaRecord>(s: &RwLock<Subnet>, q: &R, mask: u64) -> Result<Vec<R>, u8> {
    let mad = SaRequest::get_table(1).attribute(q, mask).unwrap();
    let r = ask(s, mad, 1);
    let st = r.header().status;
    if !st.is_ok() {
        return Err(st.class_specific());
    }
    Ok(SaTable::<R>::new(r.as_bytes())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap())
}

/// The status of the answer to `mad` sent by LID 1, `len` bytes received.
fn status_of(s: &RwLock<Subnet>, mad: Mad, len: usize) -> rdma::mad::Status {
    answer(&received(mad, 1, len), s, None)
        .expect("an answer")
        .header()
        .status
}

fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn records_are_built_from_the_sweep_and_selected_by_component() {
    let s = fabric();
    let (sw_a, sw_b) = (lid_of(&s, 0x10), lid_of(&s, 0x20));
    let sm_lid = s.sm_lid;
    let s = RwLock::new(s);

    // SMInfo: ours, its SM_Key hidden.
    let smi = table(&s, &SmInfoRecord::default(), 0).unwrap();
    assert_eq!(smi.len(), 1);
    assert_eq!(smi[0].lid, sm_lid);
    assert_eq!(smi[0].sm_info.guid, 0x1001);
    assert_eq!(smi[0].sm_info.sm_key, 0);

    // SwitchInfo: one per switch, LID selects.
    let si = table(&s, &SwitchInfoRecord::default(), 0).unwrap();
    assert_eq!(si.iter().map(|r| r.lid).collect::<Vec<_>>(), [sw_a, sw_b]);
    let q = SwitchInfoRecord {
        lid: sw_b,
        ..Default::default()
    };
    let si = table(&s, &q, SwitchInfoRecordMask::LID.bits()).unwrap();
    assert_eq!(si.len(), 1);
    assert_eq!(si[0].switch_info.linear_fdb_cap, 0xc000);

    // LFT: switch a's block 0 is its routes.
    let q = LftRecord {
        lid: sw_a,
        block_num: 0,
        ..Default::default()
    };
    let lft = table(
        &s,
        &q,
        (LftRecordMask::LID | LftRecordMask::BLOCK_NUM).bits(),
    )
    .unwrap();
    assert_eq!(lft.len(), 1);
    let routes = lock_r(&s).routes.clone();
    let a = lock_r(&s).topo.find(0x10).unwrap();
    for lid in 1..=lock_r(&s).lids.max_lid() {
        assert_eq!(
            Some(lft[0].lft.ports[usize::from(lid)]),
            routes.port(a, lid),
            "LID {lid}"
        );
    }
    // A block past the table: no records; a Get of it: ERR_NO_RECORDS.
    let q9 = LftRecord { block_num: 9, ..q };
    let mask = (LftRecordMask::LID | LftRecordMask::BLOCK_NUM).bits();
    assert_eq!(table(&s, &q9, mask), Ok(vec![]));
    let get = SaRequest::get(1).attribute(&q9, mask).unwrap();
    assert_eq!(
        ask(&s, get, 1).header().status,
        SaStatusCode::NoRecords.status()
    );
    // A Get of every switch's block: ERR_TOO_MANY_RECORDS.
    let get = SaRequest::get(1)
        .attribute(&q, LftRecordMask::BLOCK_NUM.bits())
        .unwrap();
    assert_eq!(
        ask(&s, get, 1).header().status,
        SaStatusCode::TooManyRecords.status()
    );

    // MFT: the broadcast group (MLID 0xC000, block 0) with a member on
    // each switch: each forwards it to its member and to the other.
    let mft = table(&s, &MftRecord::default(), 0).unwrap();
    assert_eq!(mft.len(), 2, "one block, one position, per switch");
    for r in &mft {
        assert_eq!(r.mft.port_masks[0], 1 << 1 | 1 << 2, "LID {}", r.lid);
        assert!(r.mft.port_masks[1..].iter().all(|&m| m == 0));
    }
    let q = MftRecord {
        position: 1,
        ..Default::default()
    };
    assert_eq!(table(&s, &q, MftRecordMask::POSITION.bits()), Ok(vec![]));

    // GUIDInfo: GUIDCap 16 is two blocks of a CA, 1 one block of a switch.
    let q = GuidInfoRecord {
        lid: lid_of(&lock_r(&s), 0x1001),
        ..Default::default()
    };
    let gi = table(&s, &q, GuidInfoRecordMask::LID.bits()).unwrap();
    assert_eq!(gi.len(), 2);
    assert_eq!(gi[0].guid_info.guids[0], 0x1001);
    assert_eq!(gi[1].guid_info, GuidInfo::default());
    let q = GuidInfoRecord {
        lid: sw_a,
        ..Default::default()
    };
    assert_eq!(
        table(&s, &q, GuidInfoRecordMask::LID.bits()).unwrap().len(),
        1
    );

    // SLtoVL: a CA once, a switch of 3 ports 4 x 4 times.
    let all = table(&s, &Sl2VlTableRecord::default(), 0).unwrap();
    assert_eq!(all.len(), 4 + 2 * 16);
    let q = Sl2VlTableRecord {
        lid: sw_b,
        input_port: 2,
        ..Default::default()
    };
    let m = Sl2VlTableRecordMask::LID | Sl2VlTableRecordMask::INPUT_PORT;
    let hits = table(&s, &q, m.bits()).unwrap();
    assert_eq!(
        hits.iter().map(|r| r.output_port).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );

    // VLArbitration: blocks 1-4 of each CA port and of each switch port.
    let all = table(&s, &VlArbTableRecord::default(), 0).unwrap();
    assert_eq!(all.len(), 4 * 4 + 2 * 4 * 4);
    let q = VlArbTableRecord {
        block_num: 3,
        ..Default::default()
    };
    let hits = table(&s, &q, VlArbTableRecordMask::BLOCK_NUM.bits()).unwrap();
    assert!(hits.iter().all(|r| r.block_num == 3));
    assert_eq!(hits.len(), 4 + 2 * 4);
}

#[test]
fn hostile_requests_get_typed_statuses() {
    let s = RwLock::new(fabric());
    let by_attr = all_encoded(&lock_r(&s));
    let unsupported =
        |st: rdma::mad::Status| st.invalid_field() == InvalidField::MethodAttributeNotSupported;
    for (attr, records) in by_attr {
        assert!(!records.is_empty(), "attribute {attr:#x} has records");
        let size = records[0].len();
        let req = |method: Method, attr_mod: u32| {
            let mut m = SaRequest::new(method, 1).attribute(&Raw(size), 0).unwrap();
            let h = m.header();
            m.set_header(&MadHeader {
                attr_mod,
                attr_id: attr,
                ..h
            });
            m
        };
        // The whole payload: answered.
        assert!(status_of(&s, req(Method::GET_TABLE, 0), 256).is_ok());
        // Cut short: ERR_REQ_INVALID.
        assert_eq!(
            status_of(&s, req(Method::GET_TABLE, 0), 56 + size - 1),
            SaStatusCode::ReqInvalid.status(),
            "{attr:#x} cut short"
        );
        // An attribute modifier: ERR_REQ_INVALID.
        assert_eq!(
            status_of(&s, req(Method::GET_TABLE, 1 << 31), 256),
            SaStatusCode::ReqInvalid.status(),
            "{attr:#x} with a modifier"
        );
        // Set and Delete of these records: not supported.
        for method in [Method::SET, Method::DELETE] {
            assert!(unsupported(status_of(&s, req(method, 0), 256)));
        }
        // Any bytes and any mask: an answer, never a panic.
        for seed in 0..64 {
            let mut m = req(Method::GET_TABLE, 0);
            let bytes = noise(seed, 200 + 32);
            m.as_bytes_mut()[24..].copy_from_slice(&bytes);
            let _ = answer(&received(m, 1, 256), &s, None);
        }
    }
}

/// `.0` zero bytes: a query of any record of that size.
struct Raw(usize);

impl Attribute for Raw {
    const ID: u16 = 0;
    const NAME: &'static str = "raw";
    const SIZE: usize = 200;
    fn decode(_: &[u8]) -> rdma::mad::Result<Self> {
        Ok(Raw(200))
    }
    fn encode_into(&self, out: &mut [u8]) -> rdma::mad::Result<()> {
        out[..self.0].fill(0);
        Ok(())
    }
}

#[test]
fn class_port_info_announces_the_optional_records() {
    let s = RwLock::new(fabric());
    let mad = SaRequest::get(1)
        .attribute(&rdma::mad::ClassPortInfo::default(), 0)
        .unwrap();
    let r = ask(&s, mad, 1);
    let cpi = r.attribute::<rdma::mad::ClassPortInfo>().unwrap();
    assert_ne!(cpi.capability_mask & records::cap::OPTIONAL_RECORDS, 0);
    assert_ne!(cpi.capability_mask & records::cap::UD_MULTICAST, 0);
}

fn service(guid: u64, id: u64, lease: u32) -> ServiceRecord {
    let mut r = ServiceRecord {
        service_id: id,
        service_gid: Gid::from_parts(SUBNET_PREFIX, guid),
        service_lease: lease,
        service_data32: [1, 2, 3, 4],
        ..ServiceRecord::default()
    };
    r.set_name("rdma-sm test").unwrap();
    r
}

const KEY: u64 = ServiceRecordMask::SERVICE_ID.bits() | ServiceRecordMask::SERVICE_GID.bits();

#[test]
fn a_service_is_registered_found_and_removed_by_its_own_port_only() {
    let mut s = fabric();
    let me = lid_of(&s, 0x1001);
    let other = lid_of(&s, 0x2001);
    let t0 = Instant::now();
    let rec = service(0x1001, 0x77, ServiceRecord::INFINITE_LEASE);
    // Another port may neither register nor remove it.
    assert_eq!(
        register(&mut s, &rec, KEY, other, t0),
        Err(SaStatusCode::ReqDenied)
    );
    // A LID the sweep did not find: refused too.
    assert_eq!(
        register(&mut s, &rec, KEY, 0xbfff, t0),
        Err(SaStatusCode::ReqDenied)
    );
    // Without its ServiceGID in the mask: not enough to name it.
    assert_eq!(
        register(&mut s, &rec, ServiceRecordMask::SERVICE_ID.bits(), me, t0),
        Err(SaStatusCode::ReqInsufficientComponents)
    );
    let got = register(&mut s, &rec, KEY, me, t0).unwrap();
    assert_eq!(got.service_pkey, DEFAULT_PKEY, "no P_Key: the default's");
    assert_eq!(got.service_lease, ServiceRecord::INFINITE_LEASE);
    assert_eq!(got.name(), "rdma-sm test");
    // Registered again: replaced, not doubled.
    register(&mut s, &rec, KEY, me, t0).unwrap();
    assert_eq!(s.groups.services.len(), 1);

    let s = RwLock::new(s);
    let q = ServiceRecord {
        service_data32: [0, 2, 0, 0],
        ..ServiceRecord::default()
    };
    let by_data = table(&s, &q, ServiceRecordMask::data32(1).bits()).unwrap();
    assert_eq!(by_data.len(), 1);
    assert_eq!(by_data[0].service_id, 0x77);
    let q = ServiceRecord {
        service_data32: [0, 9, 0, 0],
        ..q
    };
    assert_eq!(
        table(&s, &q, ServiceRecordMask::data32(1).bits()),
        Ok(vec![])
    );

    // Through the SA's dispatch: a Delete by another port is refused, by
    // its own port answered with the record, and then it is gone.
    let del = SaRequest::delete(1)
        .record(&rec, ServiceRecordMask::from_bits_retain(KEY))
        .unwrap();
    assert_eq!(
        ask(&s, del.clone(), other).header().status,
        SaStatusCode::ReqDenied.status()
    );
    let r = ask(&s, del.clone(), me);
    assert!(r.header().status.is_ok());
    assert_eq!(r.attribute::<ServiceRecord>().unwrap().service_id, 0x77);
    assert_eq!(
        ask(&s, del, me).header().status,
        SaStatusCode::NoRecords.status()
    );
    assert_eq!(table(&s, &ServiceRecord::default(), 0), Ok(vec![]));
}

#[test]
fn a_lease_runs_out_and_counts_down() {
    let mut s = fabric();
    let me = lid_of(&s, 0x1001);
    let t0 = Instant::now();
    let rec = service(0x1001, 1, 5);
    register(&mut s, &rec, KEY, me, t0).unwrap();
    let forever = service(0x1001, 2, ServiceRecord::INFINITE_LEASE);
    register(&mut s, &forever, KEY, me, t0).unwrap();
    // 2.5 s on: 3 s left (rounded up), still listed.
    let s = RwLock::new(s);
    let at = |d: Duration| -> Vec<(u64, u32)> {
        let mad = SaRequest::get_table(1)
            .attribute(&ServiceRecord::default(), 0)
            .unwrap();
        let r = super::service::answer(&received(mad, me, 256), &s, t0 + d);
        SaTable::<ServiceRecord>::new(r.as_bytes())
            .map(|t| {
                t.map(|r| r.map(|r| (r.service_id, r.service_lease)).unwrap())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        at(Duration::from_millis(2500)),
        [(1, 3), (2, ServiceRecord::INFINITE_LEASE)]
    );
    // At 5 s: gone; the indefinite one stays.
    assert_eq!(
        at(Duration::from_secs(5)),
        [(2, ServiceRecord::INFINITE_LEASE)]
    );
    assert_eq!(lock_r(&s).groups.services.len(), 1);
    // A Delete of the expired one: no record.
    let mut w = lock_w(&s);
    assert_eq!(
        remove(&mut w, &rec, KEY, me, t0 + Duration::from_secs(6)),
        Err(SaStatusCode::NoRecords)
    );
}

#[test]
fn registrations_past_the_limit_are_no_resources_and_malformed_requests_are_typed() {
    let mut s = fabric();
    let me = lid_of(&s, 0x1001);
    let t0 = Instant::now();
    for id in 0..MAX_SERVICES as u64 {
        register(&mut s, &service(0x1001, id, 60), KEY, me, t0).unwrap();
    }
    let one_more = service(0x1001, u64::MAX, 60);
    assert_eq!(
        register(&mut s, &one_more, KEY, me, t0),
        Err(SaStatusCode::NoResources)
    );
    // Once their leases end, there is room again.
    let later = t0 + Duration::from_secs(61);
    assert!(register(&mut s, &one_more, KEY, me, later).is_ok());
    assert_eq!(s.groups.services.len(), 1);

    let s = RwLock::new(s);
    let set = SaRequest::set(1)
        .record(&one_more, ServiceRecordMask::from_bits_retain(KEY))
        .unwrap();
    // Cut short, or with an attribute modifier: ERR_REQ_INVALID.
    assert_eq!(
        status_of(&s, set.clone(), 56 + 175),
        SaStatusCode::ReqInvalid.status()
    );
    let mut with_mod = set.clone();
    let h = with_mod.header();
    with_mod.set_header(&MadHeader { attr_mod: 3, ..h });
    assert_eq!(
        status_of(&s, with_mod, 256),
        SaStatusCode::ReqInvalid.status()
    );
    // GetMulti, Report and the rest: not supported.
    let mut odd = set;
    let h = odd.header();
    odd.set_header(&MadHeader {
        method: Method::REPORT,
        ..h
    });
    assert_eq!(
        status_of(&s, odd, 256).invalid_field(),
        InvalidField::MethodAttributeNotSupported
    );
}

#[test]
fn a_set_through_the_sa_keeps_every_byte_of_the_record() {
    let s = fabric();
    let me = lid_of(&s, 0x1001);
    let s = RwLock::new(s);
    let rec = ServiceRecord {
        service_key: [0x11; 16],
        service_data8: [0x22; 16],
        service_pkey: DEFAULT_PKEY,
        service_data64: [0x0123_4567_89ab_cdef, 42],
        ..service(0x1001, 9, 60)
    };
    let set = SaRequest::set(1)
        .record(&rec, ServiceRecordMask::from_bits_retain(KEY))
        .unwrap();
    let r = ask(&s, set, me);
    assert!(r.header().status.is_ok());
    assert_eq!(r.attribute::<ServiceRecord>().unwrap(), rec);
    let all = table(&s, &ServiceRecord::default(), 0).unwrap();
    assert_eq!(all, [rec]);
    // The table's RMPP PayloadLength covers the whole record.
    let mad = SaRequest::get_table(1)
        .attribute(&ServiceRecord::default(), 0)
        .unwrap();
    let r = ask(&s, mad, me);
    let sa = r.sa_header().unwrap();
    assert_eq!(sa.rmpp.data2, 20 + 176);
}
