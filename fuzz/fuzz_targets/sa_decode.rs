//! Fuzzes the SA codec (`rdma::mad::sa`): every record decoder, the
//! GetTable iterator and the status decoding. No input may panic; whatever
//! decodes must encode back to something that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma::mad::sa::{
    self, InformInfo, InformInfoRecord, LinkRecord, McMemberRecord, NodeRecord, PathRecord,
    PortInfoRecord, SaError, SaRecord, SaRequest, SaStatusCode, SaTable, ServiceRecord,
};
use rdma::mad::{Attribute, Mad, MadHeader, SaHeader};

fn round_trip<A: Attribute + PartialEq + std::fmt::Debug>(data: &[u8]) -> Option<A> {
    let a = A::decode(data).ok()?;
    let bytes = a.to_bytes().expect("a decoded record encodes");
    assert_eq!(A::decode(&bytes).expect("re-decodes"), a);
    Some(a)
}

/// The table of `data` as `R`: the records it yields decode alone from the
/// same bytes, and a table of them built again reads back the same.
fn table<R: SaRecord + PartialEq + std::fmt::Debug + Copy>(data: &[u8]) {
    let Ok(t) = SaTable::<R>::new(data) else {
        return;
    };
    let n = t.count_records();
    let stride = usize::from(t.attr_offset()) * 8;
    assert!(n == 0 || stride >= R::SIZE);
    assert!(n * stride <= data.len().saturating_sub(SaHeader::DATA_OFFSET));
    let recs: Vec<R> = t.filter_map(Result::ok).collect();
    assert_eq!(recs.len(), n, "every record of a table that fits decodes");
    for (i, r) in recs.iter().enumerate() {
        let off = SaHeader::DATA_OFFSET + i * stride;
        assert_eq!(R::decode(&data[off..]).ok(), Some(*r));
    }
    if let Ok(m) = Mad::decode(data) {
        if let Ok(resp) = sa::table_response(&m, &recs) {
            let back: Vec<R> = SaTable::<R>::from_mad(&resp)
                .expect("a built table reads")
                .collect::<Result<_, _>>()
                .expect("its records decode");
            assert_eq!(back, recs);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The whole MAD, as a receiver sees it.
    let _ = sa::decode_all(data);
    let _ = sa::response::<PathRecord>(data);
    let _ = sa::response::<McMemberRecord>(data);
    table::<NodeRecord>(data);
    table::<PortInfoRecord>(data);
    table::<LinkRecord>(data);
    table::<ServiceRecord>(data);
    table::<PathRecord>(data);
    table::<McMemberRecord>(data);
    table::<InformInfoRecord>(data);

    // The status: an SA error carries the code of the status's high byte.
    if let Ok(h) = MadHeader::decode(data) {
        match sa::check_status(h.status) {
            Ok(()) => assert!(h.status.is_ok()),
            Err(SaError::Status { status, code }) => {
                assert_eq!(status, h.status);
                assert_eq!(code, SaStatusCode::from_code((h.status.0 >> 8) as u8));
                if let Some(c) = code {
                    assert_eq!(c.code(), (h.status.0 >> 8) as u8);
                }
            }
            Err(e) => panic!("check_status gave {e:?}"),
        }
    }

    // Every record decoder on the bytes themselves, and as a request.
    if let Some(r) = round_trip::<NodeRecord>(data) {
        let m = SaRequest::get(1)
            .record(&r, sa::NodeRecordMask::all())
            .unwrap();
        assert_eq!(m.attribute::<NodeRecord>(), Ok(r));
    }
    round_trip::<PortInfoRecord>(data);
    round_trip::<LinkRecord>(data);
    round_trip::<ServiceRecord>(data);
    if let Some(p) = round_trip::<PathRecord>(data) {
        let m = SaRequest::get_table(2)
            .record(&p, sa::PathRecordMask::from_bits_retain(p.service_id))
            .unwrap();
        assert_eq!(m.sa_header().unwrap().comp_mask, p.service_id);
        assert_eq!(m.attribute::<PathRecord>(), Ok(p));
    }
    round_trip::<McMemberRecord>(data);
    round_trip::<InformInfo>(data);
    round_trip::<InformInfoRecord>(data);
});
