//! Fuzzes the MAD decoder: no input may panic, and whatever decodes must
//! encode back to something that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma::mad::{
    decode_all, Attribute, ClassPortInfo, Mad, MadHeader, NodeInfo, PortCounters,
    PortCountersExtended, PortInfo, RmppHeader, SaHeader, VendorHeader,
};

fn round_trip<A: Attribute + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(a) = A::decode(data) {
        let bytes = a.to_bytes().expect("a decoded attribute encodes");
        assert_eq!(A::decode(&bytes).expect("re-decodes"), a);
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = decode_all(data);
    if let Ok(m) = Mad::decode(data) {
        let h = m.header();
        assert_eq!(MadHeader::decode(&h.to_bytes()), Ok(h));
        let _ = (m.vendor_header(), m.sa_header(), m.rmpp_header(), m.data(), m.response());
    }
    if let Ok(r) = RmppHeader::decode(data) {
        let mut b = [0u8; RmppHeader::SIZE];
        r.encode_into(&mut b).expect("a decoded RMPP header encodes");
        assert_eq!(RmppHeader::decode(&b), Ok(r));
    }
    if let Ok(v) = VendorHeader::decode(data) {
        let mut b = [0u8; VendorHeader::SIZE];
        v.encode_into(&mut b).expect("a decoded vendor header encodes");
        assert_eq!(VendorHeader::decode(&b), Ok(v));
    }
    if let Ok(s) = SaHeader::decode(data) {
        let mut b = [0u8; SaHeader::SIZE];
        s.encode_into(&mut b).expect("a decoded SA header encodes");
        assert_eq!(SaHeader::decode(&b), Ok(s));
    }
    round_trip::<ClassPortInfo>(data);
    round_trip::<NodeInfo>(data);
    round_trip::<PortInfo>(data);
    round_trip::<PortCounters>(data);
    round_trip::<PortCountersExtended>(data);
});
