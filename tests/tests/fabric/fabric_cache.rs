//! libibnetdisc's fabric cache between the C tools and ours
//! (`rdma_examples::fabric_cache`): `ibnetdiscover --cache` of each holds
//! the same fabric (the same header and nodes, byte for byte and in the
//! same order, and the same port records: only their order, the C
//! library's hash order, may differ), and `iblinkinfo --load-cache` prints
//! the same from either file, ours or the C tool, as the C tool prints
//! from its own. Files that are cut short or are not caches, and a cache
//! with `-D`, end both tools with exit status 1 and nothing on stdout.
//! (What each tool takes from a damaged file is the unit tests' of
//! `rdma_examples::fabric_cache`.)

use std::path::Path;
use std::process::Output;

use rdma_tests::fabric::{Fabric, FabricTest};
use rdma_tests::{check, Outcome, TestResult};

pub const TESTS: &[FabricTest] = &[FabricTest {
    name: "fabric_cache::c_and_ours_read_each_others_cache",
    run: c_and_ours_read_each_others_cache,
}];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The header's length and a node record's, before its port keys.
const HEADER: usize = 28;
const NODE: usize = 207;
const KEY: usize = 9;
const PORT: usize = 95;

/// A cache file cut into its records.
struct Parts {
    header: Vec<u8>,
    /// Each with its port keys, in the file's order.
    nodes: Vec<Vec<u8>>,
    /// Sorted.
    ports: Vec<Vec<u8>>,
}

fn parts(b: &[u8]) -> Res<Parts> {
    let word = |at: usize| -> Res<usize> {
        let w = b.get(at..at + 4).ok_or("a cache shorter than its header")?;
        Ok(u32::from_le_bytes(w.try_into()?) as usize)
    };
    let (nodes, ports) = (word(8)?, word(12)?);
    let mut at = HEADER;
    let mut ns = Vec::new();
    for _ in 0..nodes {
        let keys = *b.get(at + NODE - 1).ok_or("a node record cut short")? as usize;
        let end = at + NODE + keys * KEY;
        ns.push(b.get(at..end).ok_or("a node record cut short")?.to_vec());
        at = end;
    }
    let mut ps = Vec::new();
    for _ in 0..ports {
        ps.push(
            b.get(at..at + PORT)
                .ok_or("a port record cut short")?
                .to_vec(),
        );
        at += PORT;
    }
    check!(
        at == b.len(),
        "{} bytes after the last record",
        b.len() - at
    );
    ps.sort();
    Ok(Parts {
        header: b[..HEADER].to_vec(),
        nodes: ns,
        ports: ps,
    })
}

fn run(f: &Fabric, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Res<Output> {
    let mut c = f.command(program, None);
    c.args(args);
    Ok(c.output()?)
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn c_and_ours_read_each_others_cache(f: &Fabric) -> TestResult {
    let dir = f.dir.join(format!("cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let (c_file, r_file) = (path("c.cache"), path("r.cache"));
    let ours_disc = rdma_tests::example("ibnetdiscover")?;
    let ours_link = rdma_tests::example("iblinkinfo")?;
    // C's sweep before and after ours: the fabric may change between two
    // sweeps (the SM's own work), so ours is compared with C's only when
    // C's two files agree; three tries.
    let c_again = path("c2.cache");
    let mut tries = 0;
    let (cb, ch, cn, cp, rh, rn, rp) = loop {
        tries += 1;
        let o = run(f, "ibnetdiscover", &["--cache", &c_file])?;
        check!(o.status.success(), "C ibnetdiscover --cache: {o:?}");
        let o = run(f, &ours_disc, &["--cache", &r_file])?;
        check!(o.status.success(), "ibnetdiscover --cache: {o:?}");
        let o = run(f, "ibnetdiscover", &["--cache", &c_again])?;
        check!(o.status.success(), "C ibnetdiscover --cache: {o:?}");
        let (cb, rb, cb2) = (
            std::fs::read(&c_file)?,
            std::fs::read(&r_file)?,
            std::fs::read(&c_again)?,
        );
        let c = parts(&cb)?;
        let c2 = parts(&cb2)?;
        let same_c = c.header == c2.header && c.nodes == c2.nodes && c.ports == c2.ports;
        if !same_c && tries < 3 {
            println!("  C's two caches differ (try {tries}): the fabric changed; again");
            continue;
        }
        check!(
            same_c,
            "C's caches of one fabric differ in each of {tries} tries"
        );
        let r = parts(&rb)?;
        break (cb, c.header, c.nodes, c.ports, r.header, r.nodes, r.ports);
    };
    check!(ch == rh, "headers: C {ch:02x?}, ours {rh:02x?}");
    check!(
        cn.len() == f.nodes.len(),
        "{} nodes cached by C, {} in the net file",
        cn.len(),
        f.nodes.len()
    );
    if let Some(i) = (0..cn.len()).find(|&i| cn.get(i) != rn.get(i)) {
        return Err(format!(
            "node record {i} differs:\nC    {:02x?}\nours {:02x?}",
            cn[i],
            rn.get(i)
        )
        .into());
    }
    check!(
        rn.len() == cn.len(),
        "{} node records of ours, {} of C",
        rn.len(),
        cn.len()
    );
    check!(
        cp == rp,
        "the port records differ ({} of C, {} of ours)",
        cp.len(),
        rp.len()
    );
    println!(
        "  caches: {} bytes each, {} nodes, {} ports, the same records",
        cb.len(),
        cn.len(),
        cp.len()
    );
    let mut shown = 0;
    for args in [
        &[][..],
        &["-l"],
        &["-p"],
        &["-d"],
        &["--switches-only"],
        &["--cas-only", "-l"],
    ] {
        fn with<'a>(file: &'a str, args: &[&'a str]) -> Vec<&'a str> {
            let mut v = vec!["--load-cache", file];
            v.extend_from_slice(args);
            v
        }
        let c_own = run(f, "iblinkinfo", &with(&c_file, args))?;
        let ours_on_c = run(f, &ours_link, &with(&c_file, args))?;
        let c_on_ours = run(f, "iblinkinfo", &with(&r_file, args))?;
        check!(c_own.status.success(), "C iblinkinfo {args:?}: {c_own:?}");
        for (who, o) in [
            ("ours on C's cache", &ours_on_c),
            ("C on our cache", &c_on_ours),
        ] {
            check!(
                o.status.code() == c_own.status.code() && text(o) == text(&c_own),
                "iblinkinfo --load-cache {args:?}: {who} differs from C on its own:\n--- C\n{}\n--- {who} ({:?})\n{}",
                text(&c_own),
                o.status,
                text(o)
            );
        }
        shown += text(&c_own).lines().count();
    }
    check!(
        shown > f.nodes.len(),
        "only {shown} lines shown from the caches"
    );
    // Not caches, or cut short, and a cache with a directed route.
    let bad = |name: &str, bytes: &[u8]| -> Res<String> {
        let p = path(name);
        std::fs::write(&p, bytes)?;
        Ok(p)
    };
    let mut magic = cb.clone();
    magic[0] ^= 0xff;
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            "cut in the header".into(),
            vec!["--load-cache".into(), bad("cut1", &cb[..HEADER - 1])?],
        ),
        (
            "cut in a node".into(),
            vec!["--load-cache".into(), bad("cut2", &cb[..HEADER + 100])?],
        ),
        (
            "cut in the ports".into(),
            vec!["--load-cache".into(), bad("cut3", &cb[..cb.len() - 1])?],
        ),
        (
            "not a cache".into(),
            vec!["--load-cache".into(), bad("magic", &magic)?],
        ),
        (
            "no file".into(),
            vec!["--load-cache".into(), path("absent")],
        ),
        (
            "a cache and -D".into(),
            vec![
                "--load-cache".into(),
                c_file.clone(),
                "-D".into(),
                "0".into(),
            ],
        ),
    ];
    for (what, args) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let c = run(f, "iblinkinfo", &args)?;
        let ours = run(f, &ours_link, &args)?;
        check!(c.status.code() == Some(1), "C iblinkinfo, {what}: {c:?}");
        check!(
            ours.status.code() == Some(1) && ours.stdout.is_empty(),
            "iblinkinfo, {what}: {ours:?}"
        );
    }
    let _ = std::fs::remove_dir_all(Path::new(&dir));
    Ok(Outcome::Passed)
}
