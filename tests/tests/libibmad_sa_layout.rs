//! The SA records of `rdma::mad::sa` against libibmad's field tables, the C
//! reference (`mad_get_field` and kin from libibmad-dev).
//!
//! libibmad describes NodeRecord (`IB_SA_NR_*`), PathRecord (`IB_SA_PR_*`),
//! MCMemberRecord (`IB_SA_MCM_*`) and ServiceRecord (`IB_SA_SR_*`), with
//! offsets relative to the record, and the SA header (`IB_SA_*`, relative to
//! the MAD). PortInfoRecord embeds PortInfo at byte 4, checked here with
//! libibmad's PortInfo fields (`IB_PORT_*`) at that offset. LinkRecord,
//! InformInfo and InformInfoRecord have no libibmad fields: the unit tests
//! of `rdma::mad::sa` check them against the specification's tables.
//!
//! Each record is checked both ways on pseudo-random content:
//! - bytes to values: random bytes decoded by the codec, each field compared
//!   with what libibmad reads from the same bytes; the record is then
//!   encoded, second of two, into a GetTable response, and libibmad reads
//!   each field back at AttributeOffset from the SA data;
//! - values to bytes: each field written by libibmad into a zeroed buffer,
//!   the buffer decoded by the codec and compared field by field, and the
//!   codec's encoding compared with libibmad's buffer byte for byte.
//!
//! Then the MADs: requests built by `SaRequest` and GetTable responses read
//! through libibmad's header fields, and a GetTable response built by
//! libibmad read through `SaTable`.

#![cfg(has_libibmad)]

use rdma::mad::sa::{
    self, McMemberRecord, McMemberRecordMask, NodeRecord, PathRecord, PathRecordMask,
    PortInfoRecord, SaError, SaRecord, SaRequest, SaStatusCode, SaTable, ServiceRecord,
};
use rdma::mad::{class, Attribute, MadHeader, Method, SaHeader};
use rdma_tests::libibmad::{
    self, b, field_name, n, set_random as c_set_random, value as c_value, Field, Rng,
    MAD_FIELDS as F, PROBE_LEN, ROUNDS, V,
};
use rdma_tests::libibmad_fields as fields;

/// `b` from byte `from`, zero-padded to a libibmad probe buffer.
fn probe_at(b: &[u8], from: usize) -> Vec<u8> {
    let mut v = b.get(from..).unwrap_or(&[]).to_vec();
    v.resize(PROBE_LEN.max(v.len()), 0);
    v
}

/// Checks that `fields` names every libibmad field of `ids`.
fn covers<T>(what: &str, fields: &[Field<T>], ids: impl IntoIterator<Item = F::Type>) {
    for id in ids {
        assert!(
            fields.iter().any(|f| f.id == id),
            "{what}: libibmad field {} has no Rust counterpart in the test",
            field_name(id)
        );
    }
}

/// Both directions for record `R`, whose libibmad fields are relative to
/// byte `base` of the record; returns the number of fields compared.
fn check_record<R>(fields: &[Field<R>], base: usize, seed: u64) -> usize
where
    R: SaRecord + PartialEq + std::fmt::Debug + Copy,
{
    let mut rng = Rng(seed);
    let stride = usize::from(R::ATTR_OFFSET) * 8;
    assert!(stride >= R::SIZE && stride < R::SIZE + 8);
    for round in 0..ROUNDS {
        // Bytes to values.
        let raw = rng.bytes(R::SIZE);
        let c_buf = probe_at(&raw, base);
        let r = R::decode(&raw).unwrap_or_else(|e| panic!("{}: {e}", R::NAME));
        for f in fields {
            assert_eq!(
                (f.get)(&r),
                c_value(&c_buf, f.id),
                "{} round {round}: field {} decoded from random bytes",
                R::NAME,
                field_name(f.id)
            );
        }
        // ... encoded as the second record of a GetTable response, read back
        // by libibmad AttributeOffset into the SA data.
        let req = SaRequest::get_table(round).attribute(&r, 0).unwrap();
        let first = R::decode(&rng.bytes(R::SIZE)).unwrap();
        let resp = sa::table_response(&req, &[first, r]).unwrap();
        let at = SaHeader::DATA_OFFSET + stride + base;
        let data = probe_at(resp.as_bytes(), at);
        for f in fields {
            assert_eq!(
                (f.get)(&r),
                c_value(&data, f.id),
                "{} round {round}: field {} read by libibmad from the second record of a table",
                R::NAME,
                field_name(f.id)
            );
        }
        let back: Vec<R> = SaTable::<R>::from_mad(&resp)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back, [first, r]);

        // Values to bytes.
        let mut c_buf = vec![0u8; PROBE_LEN];
        for f in fields {
            c_set_random(&mut c_buf, f.id, &mut rng);
        }
        let mut rec = vec![0u8; base];
        rec.extend_from_slice(&c_buf[..R::SIZE - base]);
        let r = R::decode(&rec).unwrap();
        for f in fields {
            assert_eq!(
                (f.get)(&r),
                c_value(&c_buf, f.id),
                "{} round {round}: field {} written by libibmad",
                R::NAME,
                field_name(f.id)
            );
        }
        assert_eq!(
            r.to_bytes().unwrap(),
            rec,
            "{} round {round}: the codec's encoding differs from libibmad's buffer",
            R::NAME
        );
    }
    fields.len()
}

fn node_record_fields() -> Vec<Field<NodeRecord>> {
    fields![NodeRecord:
        IB_SA_NR_LID_F => |r| n(r.lid),
        IB_SA_NR_BASEVER_F => |r| n(r.node_info.base_version),
        IB_SA_NR_CLASSVER_F => |r| n(r.node_info.class_version),
        IB_SA_NR_TYPE_F => |r| n(r.node_info.node_type),
        IB_SA_NR_NPORTS_F => |r| n(r.node_info.num_ports),
        IB_SA_NR_SYSTEM_GUID_F => |r| n(r.node_info.system_image_guid),
        IB_SA_NR_GUID_F => |r| n(r.node_info.node_guid),
        IB_SA_NR_PORT_GUID_F => |r| n(r.node_info.port_guid),
        IB_SA_NR_PARTITION_CAP_F => |r| n(r.node_info.partition_cap),
        IB_SA_NR_DEVID_F => |r| n(r.node_info.device_id),
        IB_SA_NR_REVISION_F => |r| n(r.node_info.revision),
        IB_SA_NR_LOCAL_PORT_F => |r| n(r.node_info.local_port_num),
        IB_SA_NR_VENDORID_F => |r| n(r.node_info.vendor_id),
        IB_SA_NR_NODEDESC_F => |r| b(&r.node_description.0),
    ]
}

fn path_record_fields() -> Vec<Field<PathRecord>> {
    fields![PathRecord:
        IB_SA_PR_DGID_F => |r| b(&r.dgid.0),
        IB_SA_PR_SGID_F => |r| b(&r.sgid.0),
        IB_SA_PR_DLID_F => |r| n(r.dlid),
        IB_SA_PR_SLID_F => |r| n(r.slid),
        IB_SA_PR_NPATH_F => |r| n(r.numb_path),
        IB_SA_PR_SL_F => |r| n(r.sl),
    ]
}

fn mc_member_record_fields() -> Vec<Field<McMemberRecord>> {
    fields![McMemberRecord:
        IB_SA_MCM_MGID_F => |r| b(&r.mgid.0),
        IB_SA_MCM_PORTGID_F => |r| b(&r.port_gid.0),
        IB_SA_MCM_QKEY_F => |r| n(r.qkey),
        IB_SA_MCM_MLID_F => |r| n(r.mlid),
        IB_SA_MCM_SL_F => |r| n(r.sl),
        IB_SA_MCM_MTU_F => |r| n(r.mtu),
        IB_SA_MCM_RATE_F => |r| n(r.rate),
        IB_SA_MCM_TCLASS_F => |r| n(r.tclass),
        IB_SA_MCM_PKEY_F => |r| n(r.pkey),
        IB_SA_MCM_FLOW_LABEL_F => |r| n(r.flow_label),
        IB_SA_MCM_JOIN_STATE_F => |r| n(r.join_state.bits()),
        IB_SA_MCM_PROXY_JOIN_F => |r| n(r.proxy_join),
    ]
}

/// ServiceData as libibmad sees it: one 64-byte field, the four arrays
/// big-endian one after the other.
fn service_data(r: &ServiceRecord) -> Vec<u8> {
    let mut v = r.service_data8.to_vec();
    v.extend(r.service_data16.iter().flat_map(|x| x.to_be_bytes()));
    v.extend(r.service_data32.iter().flat_map(|x| x.to_be_bytes()));
    v.extend(r.service_data64.iter().flat_map(|x| x.to_be_bytes()));
    v
}

fn service_record_fields() -> Vec<Field<ServiceRecord>> {
    fields![ServiceRecord:
        IB_SA_SR_ID_F => |r| n(r.service_id),
        IB_SA_SR_GID_F => |r| b(&r.service_gid.0),
        IB_SA_SR_PKEY_F => |r| n(r.service_pkey),
        IB_SA_SR_LEASE_F => |r| n(r.service_lease),
        IB_SA_SR_KEY_F => |r| b(&r.service_key),
        IB_SA_SR_NAME_F => |r| b(&r.service_name),
        IB_SA_SR_DATA_F => |r| V::B(service_data(r)),
    ]
}

fn port_info_record_fields() -> Vec<Field<PortInfoRecord>> {
    fields![PortInfoRecord:
        IB_PORT_MKEY_F => |r| n(r.port_info.m_key),
        IB_PORT_GID_PREFIX_F => |r| n(r.port_info.gid_prefix),
        IB_PORT_LID_F => |r| n(r.port_info.lid),
        IB_PORT_SMLID_F => |r| n(r.port_info.master_sm_lid),
        IB_PORT_CAPMASK_F => |r| n(r.port_info.capability_mask),
        IB_PORT_DIAG_F => |r| n(r.port_info.diag_code),
        IB_PORT_MKEY_LEASE_F => |r| n(r.port_info.m_key_lease_period),
        IB_PORT_LOCAL_PORT_F => |r| n(r.port_info.local_port_num),
        IB_PORT_LINK_WIDTH_ENABLED_F => |r| n(r.port_info.link_width_enabled),
        IB_PORT_LINK_WIDTH_SUPPORTED_F => |r| n(r.port_info.link_width_supported),
        IB_PORT_LINK_WIDTH_ACTIVE_F => |r| n(u8::from(r.port_info.link_width_active)),
        IB_PORT_LINK_SPEED_SUPPORTED_F => |r| n(r.port_info.link_speed_supported),
        IB_PORT_STATE_F => |r| n(u8::from(r.port_info.port_state)),
        IB_PORT_PHYS_STATE_F => |r| n(u8::from(r.port_info.port_physical_state)),
        IB_PORT_LINK_DOWN_DEF_F => |r| n(r.port_info.link_down_default_state),
        IB_PORT_MKEY_PROT_BITS_F => |r| n(r.port_info.m_key_protect_bits),
        IB_PORT_LMC_F => |r| n(r.port_info.lmc),
        IB_PORT_LINK_SPEED_ACTIVE_F => |r| n(u8::from(r.port_info.link_speed_active)),
        IB_PORT_LINK_SPEED_ENABLED_F => |r| n(r.port_info.link_speed_enabled),
        IB_PORT_NEIGHBOR_MTU_F => |r| n(r.port_info.neighbor_mtu),
        IB_PORT_SMSL_F => |r| n(r.port_info.master_sm_sl),
        IB_PORT_VL_CAP_F => |r| n(r.port_info.vl_cap),
        IB_PORT_INIT_TYPE_F => |r| n(r.port_info.init_type),
        IB_PORT_VL_HIGH_LIMIT_F => |r| n(r.port_info.vl_high_limit),
        IB_PORT_VL_ARBITRATION_HIGH_CAP_F => |r| n(r.port_info.vl_arbitration_high_cap),
        IB_PORT_VL_ARBITRATION_LOW_CAP_F => |r| n(r.port_info.vl_arbitration_low_cap),
        IB_PORT_INIT_TYPE_REPLY_F => |r| n(r.port_info.init_type_reply),
        IB_PORT_MTU_CAP_F => |r| n(r.port_info.mtu_cap),
        IB_PORT_VL_STALL_COUNT_F => |r| n(r.port_info.vl_stall_count),
        IB_PORT_HOQ_LIFE_F => |r| n(r.port_info.hoq_life),
        IB_PORT_OPER_VLS_F => |r| n(r.port_info.operational_vls),
        IB_PORT_PART_EN_INB_F => |r| n(r.port_info.partition_enforcement_inbound),
        IB_PORT_PART_EN_OUTB_F => |r| n(r.port_info.partition_enforcement_outbound),
        IB_PORT_FILTER_RAW_INB_F => |r| n(r.port_info.filter_raw_inbound),
        IB_PORT_FILTER_RAW_OUTB_F => |r| n(r.port_info.filter_raw_outbound),
        IB_PORT_MKEY_VIOL_F => |r| n(r.port_info.m_key_violations),
        IB_PORT_PKEY_VIOL_F => |r| n(r.port_info.p_key_violations),
        IB_PORT_QKEY_VIOL_F => |r| n(r.port_info.q_key_violations),
        IB_PORT_GUID_CAP_F => |r| n(r.port_info.guid_cap),
        IB_PORT_CLIENT_REREG_F => |r| n(r.port_info.client_reregister),
        IB_PORT_MCAST_PKEY_SUPR_ENAB_F => |r| n(r.port_info.multicast_pkey_trap_suppression_enabled),
        IB_PORT_SUBN_TIMEOUT_F => |r| n(r.port_info.subnet_timeout),
        IB_PORT_RESP_TIME_VAL_F => |r| n(r.port_info.resp_time_value),
        IB_PORT_LOCAL_PHYS_ERR_F => |r| n(r.port_info.local_phy_errors),
        IB_PORT_OVERRUN_ERR_F => |r| n(r.port_info.overrun_errors),
        IB_PORT_MAX_CREDIT_HINT_F => |r| n(r.port_info.max_credit_hint),
        IB_PORT_LINK_ROUND_TRIP_F => |r| n(r.port_info.link_round_trip_latency),
        IB_PORT_CAPMASK2_F => |r| n(r.port_info.capability_mask2),
        IB_PORT_LINK_SPEED_EXT_ACTIVE_F => |r| n(u8::from(r.port_info.link_speed_ext_active)),
        IB_PORT_LINK_SPEED_EXT_SUPPORTED_F => |r| n(r.port_info.link_speed_ext_supported),
        IB_PORT_LINK_SPEED_EXT_ENABLED_F => |r| n(r.port_info.link_speed_ext_enabled),
    ]
}

#[test]
fn node_record_matches_libibmad() {
    let f = node_record_fields();
    covers("NodeRecord", &f, F::IB_SA_NR_FIRST_F..F::IB_SA_NR_LAST_F);
    assert_eq!(check_record(&f, 0, 0x11), 14);
}

#[test]
fn path_record_matches_libibmad() {
    let f = path_record_fields();
    covers("PathRecord", &f, F::IB_SA_PR_DGID_F..=F::IB_SA_PR_SL_F);
    assert_eq!(check_record(&f, 0, 0x35), 6);
}

#[test]
fn mc_member_record_matches_libibmad() {
    let f = mc_member_record_fields();
    covers(
        "MCMemberRecord",
        &f,
        F::IB_SA_MCM_MGID_F..=F::IB_SA_MCM_PROXY_JOIN_F,
    );
    assert_eq!(check_record(&f, 0, 0x38), 12);
}

#[test]
fn service_record_matches_libibmad() {
    let f = service_record_fields();
    covers("ServiceRecord", &f, F::IB_SA_SR_ID_F..=F::IB_SA_SR_DATA_F);
    assert_eq!(check_record(&f, 0, 0x31), 7);
}

#[test]
fn port_info_record_embeds_port_info_where_libibmad_reads_it() {
    let f = port_info_record_fields();
    covers(
        "PortInfoRecord",
        &f,
        (F::IB_PORT_FIRST_F..F::IB_PORT_LAST_F)
            .chain(F::IB_PORT_CAPMASK2_F..F::IB_PORT_LINK_SPEED_EXT_LAST_F),
    );
    assert_eq!(check_record(&f, 4, 0x12), 51);
}

/// The header fields libibmad reads from a MAD, relative to the MAD.
fn c_mad(m: &[u8], id: F::Type) -> V {
    c_value(&probe_at(m, 0), id)
}

#[test]
fn requests_carry_what_libibmad_reads() {
    let mut rng = Rng(0x5a);
    for round in 0..ROUNDS {
        let tid = rng.next_u64();
        let sm_key = rng.next_u64();
        let mask = PathRecordMask::from_bits_retain(rng.next_u64() & ((1 << 23) - 1));
        let rec = PathRecord::decode(&rng.bytes(PathRecord::SIZE)).unwrap();
        for (req, method) in [
            (SaRequest::get(tid), Method::GET),
            (SaRequest::get_table(tid), Method::GET_TABLE),
            (SaRequest::set(tid), Method::SET),
            (SaRequest::delete(tid), Method::DELETE),
        ] {
            let m = req.with_sm_key(sm_key).record(&rec, mask).unwrap();
            let b = m.as_bytes();
            let want = [
                (F::IB_MAD_METHOD_F, n(method.0)),
                (F::IB_MAD_RESPONSE_F, n(0u8)),
                (F::IB_MAD_MGMTCLASS_F, n(class::SUBN_ADM)),
                (F::IB_MAD_CLASSVER_F, n(sa::CLASS_VERSION)),
                (F::IB_MAD_BASEVER_F, n(1u8)),
                (F::IB_MAD_TRID_F, n(tid)),
                (F::IB_MAD_ATTRID_F, n(PathRecord::ID)),
                (F::IB_SA_MKEY_F, n(sm_key)),
                (F::IB_SA_COMPMASK_F, n(mask.bits())),
                (F::IB_SA_ATTROFFS_F, n(0u16)),
                (F::IB_SA_RMPP_FLAGS_F, n(0u8)),
            ];
            for (id, v) in &want {
                assert_eq!(
                    &c_mad(b, *id),
                    v,
                    "round {round} {method}: {}",
                    field_name(*id)
                );
            }
            let data = probe_at(b, SaHeader::DATA_OFFSET);
            for f in path_record_fields() {
                assert_eq!((f.get)(&rec), c_value(&data, f.id), "{}", field_name(f.id));
            }
        }
    }
}

#[test]
fn table_responses_carry_what_libibmad_reads() {
    let req = SaRequest::get_table(7)
        .record(&McMemberRecord::default(), McMemberRecordMask::empty())
        .unwrap();
    let mut rng = Rng(0x92);
    for count in [0usize, 1, 3, 10] {
        let recs: Vec<McMemberRecord> = (0..count)
            .map(|_| McMemberRecord::decode(&rng.bytes(52)).unwrap())
            .collect();
        let m = sa::table_response(&req, &recs).unwrap();
        let b = m.as_bytes();
        for (id, v) in [
            // libibmad's method field is the 7-bit number, beside the R bit.
            (F::IB_MAD_METHOD_F, n(Method::GET_TABLE.0)),
            (F::IB_MAD_RESPONSE_F, n(1u8)),
            (F::IB_MAD_TRID_F, n(7u64)),
            (F::IB_MAD_ATTRID_F, n(McMemberRecord::ID)),
            (F::IB_MAD_STATUS_F, n(0u16)),
            (F::IB_SA_ATTROFFS_F, n(7u16)),
            (F::IB_SA_MKEY_F, n(0u64)),
            (F::IB_SA_RMPP_VERS_F, n(1u8)),
            (F::IB_SA_RMPP_TYPE_F, n(1u8)),
            (F::IB_SA_RMPP_FLAGS_F, n(7u8)),
            (F::IB_SA_RMPP_SEGNUM_F, n(1u32)),
            (F::IB_SA_RMPP_LEN_F, n(20 + 56 * count as u32)),
        ] {
            assert_eq!(c_mad(b, id), v, "{count} records: {}", field_name(id));
        }
        for (i, r) in recs.iter().enumerate() {
            let data = probe_at(b, SaHeader::DATA_OFFSET + i * 56);
            for f in mc_member_record_fields() {
                assert_eq!(
                    (f.get)(r),
                    c_value(&data, f.id),
                    "record {i}: {}",
                    field_name(f.id)
                );
            }
        }
    }
}

/// A GetTableResp of `recs` PathRecords built with libibmad's setters only.
fn c_path_table(rng: &mut Rng, recs: usize, status: u16) -> (Vec<u8>, Vec<Vec<(F::Type, V)>>) {
    let mut m = vec![0u8; PROBE_LEN];
    libibmad::set(&mut m, F::IB_MAD_BASEVER_F, 1);
    libibmad::set(&mut m, F::IB_MAD_MGMTCLASS_F, class::SUBN_ADM.into());
    libibmad::set(&mut m, F::IB_MAD_CLASSVER_F, 2);
    libibmad::set(&mut m, F::IB_MAD_METHOD_F, Method::GET_TABLE.0.into());
    libibmad::set(&mut m, F::IB_MAD_RESPONSE_F, 1);
    libibmad::set(&mut m, F::IB_MAD_STATUS_F, status.into());
    libibmad::set(&mut m, F::IB_MAD_ATTRID_F, PathRecord::ID.into());
    libibmad::set(&mut m, F::IB_SA_ATTROFFS_F, 8);
    let mut want = Vec::new();
    for i in 0..recs {
        let mut rec = vec![0u8; PROBE_LEN];
        for f in path_record_fields() {
            c_set_random(&mut rec, f.id, rng);
        }
        let at = SaHeader::DATA_OFFSET + i * 64;
        m[at..at + 64].copy_from_slice(&rec[..64]);
        want.push(
            path_record_fields()
                .iter()
                .map(|f| (f.id, c_value(&rec, f.id)))
                .collect(),
        );
    }
    (m, want)
}

#[test]
fn a_table_built_by_libibmad_reads_through_sa_table() {
    let mut rng = Rng(0x35);
    for recs in [1usize, 3] {
        // One MAD as received: its length, no RMPP PayloadLength.
        let (m, want) = c_path_table(&mut rng, recs, 0);
        let len = SaHeader::DATA_OFFSET + recs * 64;
        let got: Vec<PathRecord> = SaTable::<PathRecord>::new(&m[..len])
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got.len(), recs);
        for (r, w) in got.iter().zip(&want) {
            for f in path_record_fields() {
                let v = w.iter().find(|(id, _)| *id == f.id).unwrap();
                assert_eq!((f.get)(r), v.1, "{}", field_name(f.id));
            }
        }
        // With the RMPP header libibmad's fields give it.
        let mut m = m;
        libibmad::set(&mut m, F::IB_SA_RMPP_VERS_F, 1);
        libibmad::set(&mut m, F::IB_SA_RMPP_TYPE_F, 1);
        libibmad::set(&mut m, F::IB_SA_RMPP_FLAGS_F, 7);
        libibmad::set(&mut m, F::IB_SA_RMPP_LEN_F, 20 + 64 * recs as u32);
        let t = SaTable::<PathRecord>::new(&m[..256]).unwrap();
        assert_eq!(t.count_records(), recs);
        // A PayloadLength one record more than the MAD holds.
        libibmad::set(&mut m, F::IB_SA_RMPP_LEN_F, 20 + 64 * 4);
        assert!(matches!(
            SaTable::<PathRecord>::new(&m[..256]),
            Err(SaError::RecordsBeyondData { count: 4, .. })
        ));
    }
    // Each SA status code libibmad writes is the typed error.
    for code in 1..=8u8 {
        let (m, _) = c_path_table(&mut rng, 1, u16::from(code) << 8);
        let e = SaTable::<PathRecord>::new(&m[..256]).unwrap_err();
        assert_eq!(e.code(), SaStatusCode::from_code(code));
        assert_eq!(e.code().unwrap().code(), code);
        let h = MadHeader::decode(&m).unwrap();
        assert_eq!(
            u64::from(h.status.0),
            libibmad::get(&m, F::IB_MAD_STATUS_F).into()
        );
    }
}
