use super::*;
use crate::mad::sa::{JoinState, McMemberRecordMask, NodeRecordMask, PathRecordMask, Selector};
use crate::mad::{NodeDescription, NodeInfo};
use crate::Gid;

fn gid(last: u8) -> Gid {
    Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, last])
}

fn nodes(n: usize) -> Vec<NodeRecord> {
    (0..n)
        .map(|i| {
            let mut r = NodeRecord {
                lid: i as u16 + 1,
                node_info: NodeInfo {
                    node_type: 1,
                    num_ports: 1,
                    node_guid: 0x100 + i as u64,
                    ..Default::default()
                },
                ..Default::default()
            };
            r.node_description = NodeDescription::new(&format!("host{i} HCA-1")).unwrap();
            r
        })
        .collect()
}

#[test]
fn requests_carry_the_sa_header_and_the_record() {
    let rec = McMemberRecord {
        mgid: Gid([
            0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
        ]),
        port_gid: gid(1),
        join_state: JoinState::FULL_MEMBER,
        ..Default::default()
    };
    let mask =
        McMemberRecordMask::MGID | McMemberRecordMask::PORT_GID | McMemberRecordMask::JOIN_STATE;
    for (req, method) in [
        (SaRequest::get(7), Method::GET),
        (SaRequest::get_table(7), Method::GET_TABLE),
        (SaRequest::set(7), Method::SET),
        (SaRequest::delete(7), Method::DELETE),
    ] {
        let m = req
            .with_sm_key(0x0102_0304_0506_0708)
            .record(&rec, mask)
            .unwrap();
        let b = m.as_bytes();
        assert_eq!(&b[..4], &[1, class::SUBN_ADM, CLASS_VERSION, method.0]);
        assert_eq!(&b[8..16], &[0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(&b[16..18], &[0x00, 0x38]);
        assert_eq!(&b[36..44], &[1, 2, 3, 4, 5, 6, 7, 8]); // SM_Key
        assert_eq!(&b[44..46], &[0, 0]); // AttributeOffset: 0 in a request
        assert_eq!(&b[48..56], &[0, 0, 0, 0, 0, 0x01, 0x00, 0x03]); // ComponentMask
        assert_eq!(&b[56..108], &rec.to_bytes().unwrap()[..]);
        assert_eq!(m.attribute::<McMemberRecord>().unwrap(), rec);
    }
    // A field that does not fit fails the request, not the wire.
    let bad = PathRecord {
        sl: 16,
        ..Default::default()
    };
    assert!(matches!(
        SaRequest::get(1).record(&bad, PathRecordMask::SL),
        Err(Error::FieldOverflow { .. })
    ));
}

#[test]
fn a_table_in_one_mad_iterates_its_records() {
    let req = SaRequest::get_table(9)
        .record(&NodeRecord::default(), NodeRecordMask::empty())
        .unwrap();
    let recs = nodes(1);
    let resp = table_response(&req, &recs).unwrap();
    assert_eq!(resp.len(), 256);
    assert_eq!(resp.sa_header().unwrap().attr_offset, 14);
    let t = SaTable::<NodeRecord>::from_mad(&resp).unwrap();
    assert_eq!((t.count_records(), t.len(), t.attr_offset()), (1, 1, 14));
    assert!(!t.is_truncated());
    let got: Vec<_> = t.map(|r| r.unwrap()).collect();
    assert_eq!(got, recs);
    assert_eq!(got[0].node_description.text(), "host0 HCA-1");

    // The same MAD without a PayloadLength (one MAD, no RMPP): the count
    // comes from the length.
    let mut b = resp.as_bytes().to_vec();
    b[32..36].fill(0);
    b.truncate(56 + 112);
    assert_eq!(SaTable::<NodeRecord>::new(&b).unwrap().count(), 1);
    b.truncate(56 + 111);
    assert_eq!(SaTable::<NodeRecord>::new(&b).unwrap().count(), 0);
}

#[test]
fn a_reassembled_rmpp_table_iterates_every_record() {
    let req = SaRequest::get_table(9)
        .record(&NodeRecord::default(), NodeRecordMask::empty())
        .unwrap();
    let recs = nodes(40);
    let resp = table_response(&req, &recs).unwrap();
    assert_eq!(resp.len(), 56 + 40 * 112);
    assert_eq!(resp.rmpp_header().unwrap().data2, 20 + 40 * 112);
    let got: Vec<NodeRecord> = SaTable::<NodeRecord>::from_mad(&resp)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got, recs);
    // Its first segment alone: the records that fit, marked truncated.
    let first = &resp.as_bytes()[..256];
    let mut b = first.to_vec();
    b[26] &= !(RmppFlags::LAST.bits());
    let t = SaTable::<NodeRecord>::new(&b).unwrap();
    assert!(t.is_truncated());
    assert_eq!(t.count(), 1);
    // An empty table: PayloadLength 20.
    let empty = table_response::<NodeRecord>(&req, &[]).unwrap();
    assert_eq!(SaTable::<NodeRecord>::from_mad(&empty).unwrap().count(), 0);
}

#[test]
fn path_records_come_back_from_a_table() {
    let req = SaRequest::get_table(3)
        .record(
            &PathRecord {
                sgid: gid(1),
                dgid: gid(2),
                ..Default::default()
            },
            PathRecordMask::SGID | PathRecordMask::DGID,
        )
        .unwrap();
    let p = PathRecord {
        sgid: gid(1),
        dgid: gid(2),
        slid: 1,
        dlid: 2,
        mtu_selector: Selector::Exactly,
        mtu: 4,
        ..Default::default()
    };
    let resp = table_response(&req, &[p, p, p]).unwrap();
    assert_eq!(resp.len(), 256);
    let got: Vec<_> = SaTable::<PathRecord>::from_mad(&resp)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got, vec![p; 3]);
    // A fourth does not fit in one MAD: the buffer grows (RMPP).
    assert_eq!(table_response(&req, &[p; 4]).unwrap().len(), 56 + 256);
}

#[test]
fn sa_status_codes_are_typed_errors() {
    let names = [
        (1, SaStatusCode::NoResources, "ERR_NO_RESOURCES"),
        (2, SaStatusCode::ReqInvalid, "ERR_REQ_INVALID"),
        (3, SaStatusCode::NoRecords, "ERR_NO_RECORDS"),
        (4, SaStatusCode::TooManyRecords, "ERR_TOO_MANY_RECORDS"),
        (5, SaStatusCode::ReqInvalidGid, "ERR_REQ_INVALID_GID"),
        (
            6,
            SaStatusCode::ReqInsufficientComponents,
            "ERR_REQ_INSUFFICIENT_COMPONENTS",
        ),
        (7, SaStatusCode::ReqDenied, "ERR_REQ_DENIED"),
        (
            8,
            SaStatusCode::PrioritySuggested,
            "ERR_REQ_PRIORITY_SUGGESTED",
        ),
    ];
    for (code, c, name) in names {
        assert_eq!(SaStatusCode::from_code(code), Some(c));
        assert_eq!(c.code(), code);
        assert_eq!(c.name(), name);
        assert_eq!(c.status().0, u16::from(code) << 8);
    }
    assert_eq!(SaStatusCode::from_code(0), None);
    for v in 0..=255u8 {
        assert_eq!(SaStatusCode::from_code(v).map_or(0, |c| c.code()), v);
    }

    let req = SaRequest::get(5)
        .record(&PathRecord::default(), PathRecordMask::empty())
        .unwrap();
    let mut resp = req.response();
    let h = MadHeader {
        status: SaStatusCode::NoRecords.status(),
        attr_id: PathRecord::ID,
        ..resp.header()
    };
    resp.set_header(&h);
    let e = response::<PathRecord>(resp.as_bytes()).unwrap_err();
    assert_eq!(e.code(), Some(SaStatusCode::NoRecords));
    assert_eq!(
        e.to_string(),
        "the SA answered ERR_NO_RECORDS (3): class-specific 0x03"
    );
    // A GetTable error: status ERR_REQ_INVALID, AttributeOffset 0.
    let treq = SaRequest::get_table(5)
        .record(&PathRecord::default(), PathRecordMask::empty())
        .unwrap();
    let mut tresp = table_response::<PathRecord>(&treq, &[]).unwrap();
    let h = MadHeader {
        status: Status(0x0200),
        ..tresp.header()
    };
    tresp.set_header(&h);
    assert!(matches!(
        SaTable::<PathRecord>::from_mad(&tresp),
        Err(SaError::Status {
            code: Some(SaStatusCode::ReqInvalid),
            ..
        })
    ));
    // General bits only: busy.
    assert!(matches!(
        check_status(Status(1)),
        Err(SaError::Status { code: None, .. })
    ));
    assert_eq!(check_status(Status::OK), Ok(()));
}

#[test]
fn a_get_response_gives_its_record() {
    let req = SaRequest::get(5)
        .record(&PathRecord::default(), PathRecordMask::empty())
        .unwrap();
    let mut resp = req.response();
    let p = PathRecord {
        dlid: 9,
        ..Default::default()
    };
    resp.set_attribute(&p).unwrap();
    assert_eq!(response::<PathRecord>(resp.as_bytes()), Ok(p));
    // The request itself is not a response.
    assert!(matches!(
        response::<PathRecord>(req.as_bytes()),
        Err(SaError::Method {
            expected: Method::GET_RESP,
            found: Method::GET
        })
    ));
    // Another record than asked for, or an attribute of another class.
    assert!(matches!(
        response::<NodeRecord>(resp.as_bytes()),
        Err(SaError::Codec(Error::WrongAttribute { .. }))
    ));
    assert!(matches!(
        response::<crate::mad::PortCounters>(resp.as_bytes()),
        Err(SaError::Codec(Error::WrongClass { .. }))
    ));
}

#[test]
fn hostile_tables_are_errors_not_panics() {
    let req = SaRequest::get_table(9)
        .record(&NodeRecord::default(), NodeRecordMask::empty())
        .unwrap();
    let good = table_response(&req, &nodes(1)).unwrap().as_bytes().to_vec();
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        b
    };
    // AttributeOffset smaller than a NodeRecord (13 * 8 = 104 < 108).
    let b = with(&|b| b[44..46].copy_from_slice(&13u16.to_be_bytes()));
    assert_eq!(
        SaTable::<NodeRecord>::new(&b).unwrap_err(),
        SaError::AttributeOffset {
            name: "NodeRecord",
            size: 108,
            attr_offset: 13
        }
    );
    // AttributeOffset 0 with records claimed.
    let b = with(&|b| b[44..46].fill(0));
    assert!(matches!(
        SaTable::<NodeRecord>::new(&b),
        Err(SaError::AttributeOffset { attr_offset: 0, .. })
    ));
    // A PayloadLength that claims 3 records in one MAD.
    let b = with(&|b| b[32..36].copy_from_slice(&(20u32 + 3 * 112).to_be_bytes()));
    assert_eq!(
        SaTable::<NodeRecord>::new(&b).unwrap_err(),
        SaError::RecordsBeyondData {
            count: 3,
            stride: 112,
            need: 336,
            have: 200
        }
    );
    // A PayloadLength that is not whole records, or less than the header.
    for p in [20 + 100, 19, 1] {
        let b = with(&|b| b[32..36].copy_from_slice(&(p as u32).to_be_bytes()));
        assert!(
            matches!(
                SaTable::<NodeRecord>::new(&b),
                Err(SaError::PayloadLength { .. })
            ),
            "{p}"
        );
    }
    // The largest AttributeOffset and PayloadLength: no overflow.
    let b = with(&|b| {
        b[44..46].fill(0xff);
        b[32..36].fill(0xff);
    });
    assert!(SaTable::<NodeRecord>::new(&b).is_err());
    // Wrong class, method, attribute; short.
    let b = with(&|b| b[1] = class::PERF_MGT);
    assert!(matches!(
        SaTable::<NodeRecord>::new(&b),
        Err(SaError::Codec(Error::WrongClass { .. }))
    ));
    let b = with(&|b| b[3] = Method::GET_RESP.0);
    assert!(matches!(
        SaTable::<NodeRecord>::new(&b),
        Err(SaError::Method { .. })
    ));
    assert!(matches!(
        SaTable::<PathRecord>::new(&good),
        Err(SaError::Codec(Error::WrongAttribute { .. }))
    ));
    for n in crate::mad::tests::prefix_lens(good.len() - 1) {
        let _ = SaTable::<NodeRecord>::new(&good[..n]).map(|t| t.count());
        let _ = decode_all(&good[..n]);
        let _ = response::<NodeRecord>(&good[..n]);
    }
    assert!(SaTable::<NodeRecord>::new(&good[..55]).is_err());
    assert_eq!(decode_all(&good), Ok(()));
}

#[test]
fn a_table_cut_short_is_truncated_and_never_whole() {
    let req = SaRequest::get_table(9)
        .record(&NodeRecord::default(), NodeRecordMask::empty())
        .unwrap();
    let recs = nodes(6);
    let resp = table_response(&req, &recs).unwrap();
    let whole = resp.as_bytes();
    // The first segment as a port without RMPP carries it: FIRST, not
    // LAST, PayloadLength of six records, 200 bytes of SA data.
    let mut first = whole[..256].to_vec();
    first[26] &= !(RmppFlags::LAST.bits());
    let t = SaTable::<NodeRecord>::new(&first).unwrap();
    assert_eq!(
        (t.is_truncated(), t.records_claimed(), t.count_records()),
        (true, Some(6), 1)
    );
    assert_eq!(
        t.whole().unwrap_err(),
        SaError::Truncated {
            count: Some(6),
            have: 1
        }
    );
    // The same 256 bytes still flagged LAST claim what is not there.
    assert!(matches!(
        SaTable::<NodeRecord>::new(&whole[..256]),
        Err(SaError::RecordsBeyondData { count: 6, .. })
    ));
    // A sender that left the segmenting to RMPP (Active, RMPP version
    // and type 0, no PayloadLength), cut at 256 bytes inside the
    // second record: truncated, of unknown length.
    let mut bare = whole[..256].to_vec();
    bare[24..36].fill(0);
    bare[26] = RmppFlags::ACTIVE.bits();
    let t = SaTable::<NodeRecord>::new(&bare).unwrap();
    assert_eq!(
        (t.is_truncated(), t.records_claimed(), t.count_records()),
        (true, None, 1)
    );
    assert_eq!(
        t.whole().unwrap_err(),
        SaError::Truncated {
            count: None,
            have: 1
        }
    );
    // Its whole one-record answer (168 bytes) is whole.
    let t = SaTable::<NodeRecord>::new(&bare[..56 + 112]).unwrap();
    assert!(!t.is_truncated());
    let got: Vec<_> = t.whole().unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got, recs[..1]);
    // Without Active the length is all there is (one MAD, no RMPP).
    bare[26] = 0;
    assert!(!SaTable::<NodeRecord>::new(&bare).unwrap().is_truncated());
    // The reassembled transfer is whole.
    let got: Vec<_> = SaTable::<NodeRecord>::new(whole)
        .and_then(SaTable::whole)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got, recs);
}

#[test]
fn random_rmpp_headers_never_make_records_beyond_the_data() {
    let req = SaRequest::get_table(9)
        .record(&NodeRecord::default(), NodeRecordMask::empty())
        .unwrap();
    let whole = table_response(&req, &nodes(6)).unwrap().as_bytes().to_vec();
    let rounds = if cfg!(miri) { 50 } else { 5000 };
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..rounds {
        let len = 56 + (next() % (whole.len() as u64 - 55)) as usize;
        let mut b = whole[..len].to_vec();
        // RMPP header and AttributeOffset: random.
        for i in (24..36).chain(44..46) {
            b[i] = next() as u8;
        }
        let Ok(t) = SaTable::<NodeRecord>::new(&b) else {
            continue;
        };
        let stride = usize::from(t.attr_offset()) * 8;
        let n = t.count_records();
        assert!(
            n.saturating_mul(stride) <= len - 56,
            "{n} x {stride} in {len}"
        );
        if let Ok(t) = t.whole() {
            assert_eq!(t.count(), n);
        }
    }
}
