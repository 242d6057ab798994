//! Fuzzes the MAD decoder: no input may panic, and whatever decodes must
//! encode back to something that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma::mad::{
    class, decode_all, Attribute, ClassPortInfo, DrHeader, GuidInfo, LinearForwardingTable, Mad,
    MadHeader, MulticastForwardingTable, NodeDescription, NodeInfo, Notice, PKeyTable,
    PortCounters, PortCountersExtended, PortInfo, PortSamplesControl, RmppHeader, SaHeader,
    SlToVlMappingTable, SmInfo, SwitchInfo, VendorHeader, VlArbitrationTable, DIRECTION_BIT,
};

fn round_trip<A: Attribute + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(a) = A::decode(data) {
        let bytes = a.to_bytes().expect("a decoded attribute encodes");
        assert_eq!(A::decode(&bytes).expect("re-decodes"), a);
    }
}

fn attributes(data: &[u8]) {
    round_trip::<ClassPortInfo>(data);
    round_trip::<NodeInfo>(data);
    round_trip::<PortInfo>(data);
    round_trip::<PortCounters>(data);
    round_trip::<PortCountersExtended>(data);
    round_trip::<PortSamplesControl>(data);
    round_trip::<NodeDescription>(data);
    round_trip::<SwitchInfo>(data);
    round_trip::<LinearForwardingTable>(data);
    round_trip::<MulticastForwardingTable>(data);
    round_trip::<GuidInfo>(data);
    round_trip::<PKeyTable>(data);
    round_trip::<SlToVlMappingTable>(data);
    round_trip::<VlArbitrationTable>(data);
    round_trip::<SmInfo>(data);
    round_trip::<Notice>(data);
    if let Ok(n) = Notice::decode(data) {
        let _ = (n.trap(), n.trap_number(), Notice::issuer_gid(data));
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = decode_all(data);
    if let Ok(m) = Mad::decode(data) {
        let h = m.header();
        assert_eq!(MadHeader::decode(&h.to_bytes()), Ok(h));
        let _ = (
            m.vendor_header(),
            m.sa_header(),
            m.rmpp_header(),
            m.data(),
            m.m_key(),
        );
        let r = m.response();
        if let Ok(dr) = m.dr_header() {
            // The DR header round-trips, and the response goes back along
            // the same route with the D bit set.
            let mut out = Mad::new(&h);
            out.set_dr_header(&dr).expect("a decoded DR header encodes");
            assert_eq!(out.dr_header(), Ok(dr));
            let back = r.dr_header().expect("the response keeps a valid route");
            assert!(back.direction);
            assert_eq!(r.status().0, DIRECTION_BIT);
            assert_eq!(
                (back.hop_count, back.hop_pointer),
                (dr.hop_count, dr.hop_pointer)
            );
            assert_eq!(
                (back.initial_path, back.return_path),
                (dr.initial_path, dr.return_path)
            );
        } else if m.class() == class::SUBN_DIRECTED_ROUTE {
            assert!(decode_all(data).is_err(), "a bad route fails decode_all");
        }
        // Every attribute also from the data of the MAD's class.
        attributes(m.data());
    }
    if let Ok(r) = RmppHeader::decode(data) {
        let mut b = [0u8; RmppHeader::SIZE];
        r.encode_into(&mut b)
            .expect("a decoded RMPP header encodes");
        assert_eq!(RmppHeader::decode(&b), Ok(r));
    }
    if let Ok(v) = VendorHeader::decode(data) {
        let mut b = [0u8; VendorHeader::SIZE];
        v.encode_into(&mut b)
            .expect("a decoded vendor header encodes");
        assert_eq!(VendorHeader::decode(&b), Ok(v));
    }
    if let Ok(s) = SaHeader::decode(data) {
        let mut b = [0u8; SaHeader::SIZE];
        s.encode_into(&mut b).expect("a decoded SA header encodes");
        assert_eq!(SaHeader::decode(&b), Ok(s));
    }
    if let Ok(dr) = DrHeader::decode(data) {
        let mut b = [0u8; Mad::SIZE];
        dr.encode_into(&mut b).expect("a decoded DR header encodes");
        assert_eq!(DrHeader::decode(&b), Ok(dr));
    }
    attributes(data);
});
