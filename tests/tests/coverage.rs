//! Holds `docs/coverage.md` complete and true against the headers of this
//! build and the source of `rdma`.
//!
//! The function lists come from the -sys crates (`functions::FUNCTIONS`),
//! which their build scripts derive from the bindings they generated from
//! the installed rdma-core (or another one, with `RDMA_CORE_INCLUDE_DIR`, as
//! `ci/matrix.sh` builds). A function the headers declare without a row in
//! the table fails the test; so does a row that claims a call the source of
//! `rdma` does not make, or names a Rust item (an API, or the device test
//! that runs it) that does not exist.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LIBRARIES: [(&str, &[&str]); 3] = [
    ("libibverbs", ibverbs_sys::functions::FUNCTIONS),
    ("librdmacm", rdmacm_sys::functions::FUNCTIONS),
    ("libibumad", umad_sys::functions::FUNCTIONS),
];

const STATUSES: [&str; 5] = ["called", "rebuilt", "internal", "superseded", "todo"];

#[derive(Debug)]
struct Row {
    library: String,
    function: String,
    status: String,
    text: String,
    line: usize,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package is in the repository")
        .to_path_buf()
}

/// The rows of the table, each under the `## <library>` heading above it.
fn parse_table(text: &str) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let mut library: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if let Some(h) = line.strip_prefix("## ") {
            library = Some(h.trim().to_string());
            continue;
        }
        let Some(lib) = library.as_ref() else {
            continue;
        };
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let cells: Vec<&str> = rest.trim_end().trim_end_matches('|').split(" | ").collect();
        let [name, status, text] = cells[..] else {
            return Err(format!(
                "docs/coverage.md:{line_no}: a row has three cells: {line}"
            ));
        };
        let function = name.trim().trim_end_matches('`').to_string();
        rows.push(Row {
            library: lib.clone(),
            function,
            status: status.trim().to_string(),
            text: text.trim().to_string(),
            line: line_no,
        });
    }
    Ok(rows)
}

/// Rust source with comments (line, block and doc) and string literals
/// removed, so that a name only mentioned in prose or an error message does
/// not count as a call.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1).copied()) {
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            (b'"', _) => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (c, _) => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

fn rust_sources(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path, code_only(&text)));
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `code` names `path_tail` as a path's last segment (`sys::NAME`,
/// `cm::NAME`, `umad_sys::NAME`, `crate::sys::shim::NAME`).
fn references(code: &str, name: &str) -> bool {
    let needle = format!("::{name}");
    code.match_indices(&needle).any(|(at, _)| {
        !code[at + needle.len()..]
            .chars()
            .next()
            .is_some_and(is_ident)
    })
}

/// Whether `code` defines an item or a public field called `name`.
fn defines(code: &str, name: &str) -> bool {
    [
        "fn ", "struct ", "enum ", "trait ", "type ", "const ", "mod ", "static ", "pub ",
    ]
    .iter()
    .any(|kw| {
        let needle = format!("{kw}{name}");
        code.match_indices(&needle).any(|(at, _)| {
            let before_ok = !code[..at].chars().next_back().is_some_and(is_ident);
            let after_ok = !code[at + needle.len()..]
                .chars()
                .next()
                .is_some_and(is_ident);
            before_ok && after_ok
        })
    })
}

/// The backticked spans of a cell.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The Rust items a backticked span names: `Type::method` gives `Type` and
/// `method`; `umad::Port` gives `Port`. Spans that are not paths (`Display`
/// prose, C names of other rows) give nothing.
fn rust_items(span: &str) -> Vec<&str> {
    if span.contains(' ') || span.contains('(') || span.contains('/') {
        return Vec::new();
    }
    let segs: Vec<&str> = span.split("::").collect();
    if segs
        .iter()
        .any(|s| s.is_empty() || !s.chars().all(is_ident))
    {
        return Vec::new();
    }
    let last = segs.len() - 1;
    segs.iter()
        .enumerate()
        .filter(|(i, s)| *i == last || s.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|(_, s)| *s)
        .collect()
}

#[test]
fn every_function_of_the_headers_has_a_true_row() {
    let root = repo();
    let table = std::fs::read_to_string(root.join("docs/coverage.md")).expect("docs/coverage.md");
    let rows = parse_table(&table).unwrap_or_else(|e| panic!("{e}"));
    let mut sources = Vec::new();
    rust_sources(&root.join("rdma/src"), &mut sources);
    let code: String = sources.iter().map(|(_, s)| s.as_str()).collect();
    // Items a row names may also be the device tests that run its API.
    let mut tests = Vec::new();
    rust_sources(&root.join("tests/tests/device"), &mut tests);
    let code_and_tests: String = tests
        .iter()
        .map(|(_, s)| s.as_str())
        .chain([code.as_str()])
        .collect();
    // C names a row may mention: this build's functions and those of
    // every row (other releases' functions among them).
    let all_functions: BTreeSet<&str> = LIBRARIES
        .iter()
        .flat_map(|(_, f)| f.iter().copied())
        .chain(rows.iter().map(|r| r.function.as_str()))
        .collect();

    let mut problems = Vec::new();
    let mut seen: BTreeMap<&str, &Row> = BTreeMap::new();
    for row in &rows {
        let at = format!("docs/coverage.md:{} `{}`", row.line, row.function);
        if !LIBRARIES.iter().any(|(l, _)| *l == row.library) {
            problems.push(format!("{at}: under `## {}`, not a library", row.library));
        }
        if let Some(first) = seen.insert(&row.function, row) {
            problems.push(format!("{at}: a second row (first: line {})", first.line));
        }
        if !STATUSES.contains(&row.status.as_str()) {
            problems.push(format!(
                "{at}: status `{}` is none of {STATUSES:?}",
                row.status
            ));
            continue;
        }
        if row.text.is_empty() {
            problems.push(format!("{at}: says nothing in its third column"));
        }
        let items: Vec<&str> = backticked(&row.text)
            .into_iter()
            .flat_map(rust_items)
            .collect();
        let undefined: Vec<&str> = items
            .iter()
            .copied()
            .filter(|i| !all_functions.contains(i) && !defines(&code_and_tests, i))
            .collect();
        match row.status.as_str() {
            "called" => {
                // A row of a function only other releases have cannot be
                // referenced by this build's code unless behind a cfg; the
                // source is read as text, so it still must be there.
                if !references(&code, &row.function) {
                    problems.push(format!(
                        "{at}: `called`, but rdma/src never references `::{}`",
                        row.function
                    ));
                }
                if items.is_empty() {
                    problems.push(format!("{at}: `called` names no Rust API"));
                }
            }
            "todo" if references(&code, &row.function) => {
                problems.push(format!(
                    "{at}: `todo`, but rdma/src references `::{}`: say which API calls it",
                    row.function
                ));
            }
            "rebuilt" | "superseded" if items.is_empty() => {
                problems.push(format!("{at}: `{}` names no item", row.status));
            }
            _ => {}
        }
        if !undefined.is_empty() {
            problems.push(format!(
                "{at}: names {undefined:?}, not defined in rdma/src"
            ));
        }
    }

    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (library, functions) in LIBRARIES {
        for f in functions {
            match seen.get(f) {
                None => problems.push(format!(
                    "{library}: `{f}` has no row in docs/coverage.md (a function of these headers)"
                )),
                Some(row) if row.library != library => problems.push(format!(
                    "docs/coverage.md:{} `{f}`: under `## {}`, but {library} declares it",
                    row.line, row.library
                )),
                Some(row) => *counts.entry((library, row.status.as_str())).or_default() += 1,
            }
        }
    }

    print_counts(&counts);
    assert!(
        problems.is_empty(),
        "docs/coverage.md disagrees with the headers or with rdma/src:\n  {}",
        problems.join("\n  ")
    );
}

/// Prints the counts to the process's stderr itself, past the test
/// harness's capture, so that every run (CI's host tests, the matrix) shows
/// them.
fn print_counts(counts: &BTreeMap<(&str, &str), usize>) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let mut total = [0usize; 5];
    for (library, functions) in LIBRARIES {
        let n: Vec<usize> = STATUSES
            .iter()
            .map(|s| counts.get(&(library, *s)).copied().unwrap_or(0))
            .collect();
        for (t, x) in total.iter_mut().zip(&n) {
            *t += x;
        }
        let _ = writeln!(
            err,
            "coverage {library}: {} functions: {} called, {} rebuilt, {} internal, {} superseded, {} todo; {:.0}% called or rebuilt; {}",
            functions.len(),
            n[0],
            n[1],
            n[2],
            n[3],
            n[4],
            percent(n[0] + n[1], functions.len()),
            for_programs(&n)
        );
    }
    let all: usize = total.iter().sum();
    let _ = writeln!(
        err,
        "coverage: {all} functions: {} called, {} rebuilt, {} internal, {} superseded, {} todo; {:.0}% called or rebuilt; {}",
        total[0],
        total[1],
        total[2],
        total[3],
        total[4],
        percent(total[0] + total[1], all),
        for_programs(&total)
    );
}

/// The share of the functions meant for programs (all but the `internal`
/// ones: the headers' own helpers, which no program calls) that is called or
/// rebuilt, from counts in the order of `STATUSES`.
fn for_programs(n: &[usize]) -> String {
    let [called, rebuilt, _internal, superseded, todo] = [n[0], n[1], n[2], n[3], n[4]];
    let meant = called + rebuilt + superseded + todo;
    format!(
        "of the {meant} meant for programs, {:.1}% called or rebuilt",
        percent(called + rebuilt, meant)
    )
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

#[test]
fn the_checks_see_through_comments_and_strings() {
    let code = code_only(
        "// sys::ibv_a(\n/* sys::ibv_b /* nested */ sys::ibv_c */\nlet e = \"sys::ibv_d\";\nsys::ibv_e(x); fn ibv_f_g() {}\n",
    );
    for hidden in ["ibv_a", "ibv_b", "ibv_c", "ibv_d"] {
        assert!(!references(&code, hidden), "{hidden} in {code:?}");
    }
    assert!(references(&code, "ibv_e"));
    // A longer name is not the shorter one.
    assert!(!references(&code, "ibv_f"));
    assert!(defines(&code, "ibv_f_g"));
    assert!(!defines(&code, "ibv_f"));
    assert!(defines("pub struct A {\n    pub lid: u16,\n}", "lid"));
    assert!(!defines("pub struct A {\n    lid: u16,\n}", "lid"));
    assert_eq!(rust_items("umad::Port::recv"), ["Port", "recv"]);
    assert_eq!(rust_items("Device::index"), ["Device", "index"]);
    assert!(rust_items("read`/`write").is_empty());
    assert!(rust_items("u64 to_be").is_empty());
}

#[test]
fn a_missing_or_malformed_row_is_reported() {
    let rows = parse_table("## libibverbs\n\n| `ibv_a` | called | `Device::open` |\n").unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].function, "ibv_a");
    assert_eq!(rows[0].status, "called");
    assert_eq!(rows[0].text, "`Device::open`");
    assert!(parse_table("## libibverbs\n| `ibv_a` | called |\n").is_err());
    // Rows before the first library heading are not rows of a library.
    assert!(parse_table("| `ibv_a` | called | x |\n")
        .unwrap()
        .is_empty());
}

/// docs/pyverbs.md names, for each pyverbs class, the `rdma` type that does
/// its job: each type or method it names exists.
#[test]
fn pyverbs_table_names_types_that_exist() {
    let root = repo();
    let table = std::fs::read_to_string(root.join("docs/pyverbs.md")).expect("docs/pyverbs.md");
    let mut sources = Vec::new();
    rust_sources(&root.join("rdma/src"), &mut sources);
    let code: String = sources.iter().map(|(_, s)| s.as_str()).collect();
    let mut rows = 0;
    let mut problems = Vec::new();
    for (i, line) in table.lines().enumerate() {
        let Some(rest) = line.strip_prefix("| ") else {
            continue;
        };
        let Some((_, ours)) = rest.split_once(" | ") else {
            continue;
        };
        if !line.contains(": `") && !line.starts_with("| fork") {
            continue; // the header
        }
        rows += 1;
        for item in backticked(ours).into_iter().flat_map(rust_items) {
            if !defines(&code, item) {
                problems.push(format!(
                    "docs/pyverbs.md:{}: `{item}` is not defined in rdma/src",
                    i + 1
                ));
            }
        }
    }
    assert!(rows > 30, "only {rows} rows read from docs/pyverbs.md");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The `cfg(has_<name>)` that `rdma` and this package are built with
/// (`rdma_sys_build::forward_optional`, from the -sys crates' `links`
/// metadata) is set exactly where the headers of the build declare the
/// function: an API over a newer release's function is neither missing on
/// that release nor built against headers without it.
#[test]
fn optional_function_cfgs_follow_the_headers() {
    let optional: &[(&str, &[&str], bool)] = &[
        (
            "ibv_wr_flush",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_wr_flush),
        ),
        (
            "ibv_wr_opcode_str",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_wr_opcode_str),
        ),
        (
            "ibv_alloc_buf",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_alloc_buf),
        ),
        (
            "ibv_free_buf",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_free_buf),
        ),
        (
            "ibv_reg_buf_mr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_reg_buf_mr),
        ),
        (
            "ibv_export_buf_dmabuf_fd",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_export_buf_dmabuf_fd),
        ),
        (
            "ibv_alloc_dmah",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_alloc_dmah),
        ),
        (
            "ibv_dealloc_dmah",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_dealloc_dmah),
        ),
        (
            "ibv_reg_mr_ex",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_reg_mr_ex),
        ),
        (
            "ibv_dm_export_dmabuf_fd",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_dm_export_dmabuf_fd),
        ),
        (
            "ibv_query_port_speed",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_query_port_speed),
        ),
        (
            "ibv_create_comp_cntr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_create_comp_cntr),
        ),
        (
            "ibv_destroy_comp_cntr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_destroy_comp_cntr),
        ),
        (
            "ibv_query_comp_cntr_caps",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_query_comp_cntr_caps),
        ),
        (
            "ibv_qp_attach_comp_cntr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_qp_attach_comp_cntr),
        ),
        (
            "ibv_read_comp_cntr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_read_comp_cntr),
        ),
        (
            "ibv_read_err_comp_cntr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_read_err_comp_cntr),
        ),
        (
            "ibv_set_comp_cntr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_set_comp_cntr),
        ),
        (
            "ibv_set_err_comp_cntr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_set_err_comp_cntr),
        ),
        (
            "ibv_inc_comp_cntr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_inc_comp_cntr),
        ),
        (
            "ibv_inc_err_comp_cntr",
            ibverbs_sys::functions::FUNCTIONS,
            cfg!(has_ibv_inc_err_comp_cntr),
        ),
        (
            "rdma_query_addrinfo",
            rdmacm_sys::functions::FUNCTIONS,
            cfg!(has_rdma_query_addrinfo),
        ),
        (
            "rdma_resolve_addrinfo",
            rdmacm_sys::functions::FUNCTIONS,
            cfg!(has_rdma_resolve_addrinfo),
        ),
        (
            "rdma_write_cm_event",
            rdmacm_sys::functions::FUNCTIONS,
            cfg!(has_rdma_write_cm_event),
        ),
        (
            "umad_get_smi_gsi_pairs",
            umad_sys::functions::FUNCTIONS,
            cfg!(has_umad_get_smi_gsi_pairs),
        ),
        (
            "umad_get_smi_gsi_pair_by_ca_name",
            umad_sys::functions::FUNCTIONS,
            cfg!(has_umad_get_smi_gsi_pair_by_ca_name),
        ),
        (
            "umad_open_smi_port",
            umad_sys::functions::FUNCTIONS,
            cfg!(has_umad_open_smi_port),
        ),
    ];
    let mut present = 0;
    for &(name, functions, cfg) in optional {
        let declared = functions.contains(&name);
        assert_eq!(
            cfg, declared,
            "cfg(has_{name}) is {cfg}, the headers declare it: {declared}"
        );
        present += usize::from(declared);
    }
    println!(
        "optional functions: {present} of {} in these headers",
        optional.len()
    );
}
