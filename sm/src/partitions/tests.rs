use super::*;
use crate::subnet::{NodeKind, Topology};

/// A switch (GUID 0x100) with three CAs (0x10, 0x20, 0x30) on ports 1-3;
/// the CAs' port 1 GUIDs are their node GUIDs + 1.
fn fabric() -> Topology {
    let mut t = Topology::new();
    let sw = t.add_node(0x100, NodeKind::Switch, 4);
    for (i, g) in [0x10u64, 0x20, 0x30].into_iter().enumerate() {
        let ca = t.add_node(g, NodeKind::Ca, 1);
        t.link(sw, i as u8 + 1, ca, 1).unwrap();
    }
    t
}

fn err(text: &str) -> ParseError {
    parse(text).unwrap_err()
}

#[test]
fn opensm_style_file_parses() {
    let p = parse(
        "# a comment\n\
         Default=0x7fff, ipoib : ALL=full ;\n\
         storage=0x8002, ipoib, mtu=5, rate=7, sl=1, defmember=full :\n\
         \t0x11, 0x21=limited, # members go on\n\
         SELF=both ;\n\
         sw=3:ALL_SWITCHES,ALL_CAS=limited;empty=0x10:;",
    )
    .unwrap();
    assert!(p.configured);
    assert_eq!(p.list.len(), 4);
    let s = &p.list[1];
    assert_eq!(
        (s.name.as_str(), s.pkey, s.ipoib),
        ("storage", 0x0002, true)
    );
    assert_eq!((s.mtu, s.rate, s.sl), (5, 7, 1));
    assert_eq!(
        s.members,
        [
            (Member::Guid(0x11), Membership::Full),
            (Member::Guid(0x21), Membership::Limited),
            (Member::SelfPort, Membership::Both)
        ]
    );
    assert_eq!(p.list[2].pkey, 3);
    assert_eq!(
        p.list[2].members,
        [
            (Member::AllSwitches, Membership::Limited),
            (Member::AllCas, Membership::Limited)
        ]
    );
    assert!(p.list[3].members.is_empty());
    assert_eq!(parse("").unwrap().list, []);
    assert_eq!(parse("  # only\n\n;;").unwrap().list, []);
}

#[test]
fn errors_name_the_line_and_what_is_wrong() {
    let cases: &[(&str, usize, ErrorKind)] = &[
        ("a=1:ALL;\n\nb=2 ALL;", 3, ErrorKind::NoColon),
        ("a=1:ALL;\nb=2:ALL", 2, ErrorKind::NoSemicolon),
        ("=1:ALL;", 1, ErrorKind::BadName("=1".into())),
        ("noKey:ALL;", 1, ErrorKind::BadName("noKey".into())),
        ("a b=1:ALL;", 1, ErrorKind::BadName("a b=1".into())),
        ("a=0x10000:ALL;", 1, ErrorKind::BadPKey("0x10000".into())),
        ("a=0:ALL;", 1, ErrorKind::BadPKey("0".into())),
        ("a=0x8000:ALL;", 1, ErrorKind::BadPKey("0x8000".into())),
        ("a=zz:ALL;", 1, ErrorKind::BadPKey("zz".into())),
        ("a=0x:ALL;", 1, ErrorKind::BadPKey("0x".into())),
        (
            "\na=1,scope=2:ALL;",
            2,
            ErrorKind::UnknownFlag("scope=2".into()),
        ),
        (
            "a=1,IPOIB=1:ALL;",
            1,
            ErrorKind::BadFlagValue("IPOIB".into(), "1".into()),
        ),
        (
            "a=1,mtu=6:ALL;",
            1,
            ErrorKind::BadFlagValue("mtu".into(), "6".into()),
        ),
        (
            "a=1,mtu:ALL;",
            1,
            ErrorKind::BadFlagValue("mtu".into(), "".into()),
        ),
        (
            "a=1,sl=16:ALL;",
            1,
            ErrorKind::BadFlagValue("sl".into(), "16".into()),
        ),
        (
            "a=1,rate=999:ALL;",
            1,
            ErrorKind::BadFlagValue("rate".into(), "999".into()),
        ),
        (
            "a=1,defmember=most:ALL;",
            1,
            ErrorKind::BadFlagValue("defmember".into(), "most".into()),
        ),
        (
            "a=1:ALL_ROUTERS;",
            1,
            ErrorKind::BadMember("ALL_ROUTERS".into()),
        ),
        ("a=1:all;", 1, ErrorKind::BadMember("all".into())),
        ("a=1:0xzz;", 1, ErrorKind::BadMember("0xzz".into())),
        (
            "a=1:0x1ffffffffffffffff;",
            1,
            ErrorKind::BadMember("0x1ffffffffffffffff".into()),
        ),
        ("a=1:ALL=half;", 1, ErrorKind::BadMembership("half".into())),
        (
            "a=1:ALL;\nb=0x8001:ALL;",
            2,
            ErrorKind::Duplicate("P_Key 0x0001".into()),
        ),
        (
            "a=1:ALL;\na=2:ALL;",
            2,
            ErrorKind::Duplicate("partition \"a\"".into()),
        ),
    ];
    for (text, line, kind) in cases {
        let e = err(text);
        assert_eq!((e.line, &e.kind), (*line, kind), "{text:?}");
        assert!(e.to_string().starts_with(&format!("line {line}: ")), "{e}");
    }
}

#[test]
fn hostile_input_is_an_error_or_a_partition_never_a_panic() {
    let mut inputs: Vec<String> = vec![
        ";:;=,".into(),
        ":".into(),
        "=:=;".into(),
        "a=1:=;".into(),
        "a=1:,,,=full;".into(),
        "a=1,,:ALL;".into(),
        "a=\u{0}:ALL;".into(),
        "ä=1:ALL;".into(),
        "a=1:ALL=\u{fffd};".into(),
        "a=99999999999999999999999:ALL;".into(),
        "#;\na=1:ALL".into(),
        "a=1:".repeat(1000),
        format!("a=1:{};", "0x1,".repeat(10_000)),
    ];
    // Every prefix of a valid file.
    let good = "Default=0x7fff,ipoib:ALL=full;\nb=0x2,mtu=4,defmember=full:0x11,SELF=both;";
    for i in 0..=good.len() {
        inputs.push(good[..i].into());
    }
    for t in &inputs {
        match parse(t) {
            Ok(p) => {
                for q in &p.list {
                    assert!(q.pkey != 0 && q.pkey & FULL == 0, "{t:?}");
                }
            }
            Err(e) => assert!(
                e.line >= 1 && e.line <= t.lines().count().max(1),
                "{t:?}: {e}"
            ),
        }
    }
}

#[test]
fn without_a_file_every_end_port_is_a_full_member_of_the_default_partition() {
    let t = fabric();
    let tables = Partitions::default().tables(&t, Some(0x11));
    assert_eq!(tables.len(), 4, "three CA ports and the switch's port 0");
    for (g, v) in &tables {
        assert_eq!(v, &[0xffff], "{g:#x}");
    }
    assert!(Partitions::default().is_default());
}

#[test]
fn members_resolve_to_tables_with_the_default_partition_first() {
    let t = fabric();
    let p = parse(
        "p2=0x2:0x11=full,0x21;\n\
         p3=0x3,defmember=full:ALL_CAS;\n\
         p1=0x1:ALL_SWITCHES=full,SELF=both;\n\
         p4=0x4:0x999=full;",
    )
    .unwrap();
    let tables = p.tables(&t, Some(0x31));
    // No Default line: every port limited, the SM's port full.
    assert_eq!(tables[&0x11], [0x7fff, 0x8002, 0x8003]);
    assert_eq!(tables[&0x21], [0x7fff, 0x0002, 0x8003]);
    assert_eq!(tables[&0x31], [0xffff, 0x8001, 0x0001, 0x8003]);
    assert_eq!(tables[&0x100], [0x7fff, 0x8001]);
    assert!(!tables.contains_key(&0x999), "a GUID not in the fabric");
    // A Default line that leaves a port out: not in the default partition
    // (but the SM's port always is, as a full member).
    let p = parse("Default=0x7fff:0x11=full;").unwrap();
    let tables = p.tables(&t, Some(0x31));
    assert_eq!(tables[&0x11], [0xffff]);
    assert_eq!(tables[&0x21], [] as [u16; 0]);
    assert_eq!(tables[&0x31], [0xffff]);
}

#[test]
fn shared_partitions_need_one_full_member() {
    let a = [0x7fff, 0x8002, 0x0003];
    let b = [0x7fff, 0x0002, 0x0003, 0x8004];
    assert_eq!(
        shared_pkey(&a, &b, None),
        Some(0x8002),
        "default: both limited"
    );
    assert_eq!(shared_pkey(&b, &a, None), Some(0x0002));
    assert_eq!(shared_pkey(&a, &b, Some(0x0002)), Some(0x8002));
    assert_eq!(shared_pkey(&a, &b, Some(0xffff)), None);
    assert_eq!(shared_pkey(&a, &b, Some(0x0003)), None);
    assert_eq!(shared_pkey(&a, &b, Some(0x0004)), None);
    assert_eq!(shared_pkey(&[], &b, None), None);
    assert_eq!(shared_pkey(&[0xffff], &[0x7fff], None), Some(0xffff));
    // A zero entry (an empty slot) is no partition.
    assert_eq!(shared_pkey(&[0x8000], &[0x8000], None), Some(0x8000));
    assert!(!holds(&[0x8000], 0));
    assert!(holds(&b, 0x8004) && holds(&b, 0x0004) && !holds(&b, 0x0001));
}

#[test]
fn tables_fill_blocks_of_32_and_fit_the_port_capacity() {
    let t: Vec<u16> = (1..=40).collect();
    let b = blocks(&t);
    assert_eq!(b.len(), 2);
    assert_eq!(b[0][31], 32);
    assert_eq!(b[1][7], 40);
    assert_eq!(b[1][8], 0);
    assert_eq!(blocks(&[]), [[0; 32]]);
    assert_eq!(fit(&t, 32), (&t[..32], 8));
    assert_eq!(fit(&t, 0), (&t[..1], 39));
    assert_eq!(fit(&t, 64), (&t[..], 0));
    assert_eq!(ipoib_broadcast_mgid(0x7fff), crate::groups::IPOIB_BROADCAST);
    assert_eq!(ipoib_broadcast_mgid(0x0002)[4..6], [0x80, 0x02]);
    assert_eq!(
        pkeys_of(&[0xffff, 0x7fff, 0, 0x8002])
            .into_iter()
            .collect::<Vec<_>>(),
        [2, 0x7fff]
    );
}
