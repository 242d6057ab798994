//! Generates the libibverbs bindings from the system's rdma-core headers.
//!
//! Two bindgen runs over the same `wrapper.h`:
//! - `bindings.rs`: every type, constant and exported function, plus every
//!   static inline function outside the data path, through a C shim;
//! - `shim.rs`: the data-path static inlines (post, poll, `ibv_wr_*`,
//!   `ibv_wc_read_*`) through the same kind of shim. The crate root exports a
//!   Rust port of each of these; the shim twins live in `ibverbs_sys::shim`.
//!
//! For a documentation-only build (`DOCS_RS`, as on docs.rs) the files are
//! the ones shipped in `src/generated/` (rdma-core v44's), and no C is
//! compiled or linked. Either way the build emits `cfg(has_<name>)` for the
//! optional data-path inlines the headers have.

use std::path::{Path, PathBuf};

use rdma_sys_build::{
    builder, c_function_names, copy_shipped, docs_only, emit_optional, fail, function_names, probe,
    write, write_name_list, Shims,
};

/// Static inline functions of the data path: ported to `#[inline]` Rust at the
/// crate root, their C shims kept in `shim`.
const DATA_PATH: &str =
    "ibv_(post_send|post_recv|post_srq_recv|post_wq_recv|poll_cq|req_notify_cq|\
                         start_poll|next_poll|end_poll|cq_ex_to_cq|wc_read_.*|wr_.*)";

/// Names `DATA_PATH` matches that are not data path: `ibv_wr_opcode_str`
/// (an exported function, not in v44's headers, in v56's) names an opcode,
/// for messages. They are bound
/// with the rest of verbs.h.
const NOT_DATA_PATH: &str = "ibv_wr_opcode_str";

/// Functions that only some rdma-core releases have (none in v44's headers;
/// `ibv_wr_flush` and `ibv_wr_opcode_str` from v56 on, the rest from v65 on).
/// For each one the headers declare, the build emits `cfg(has_<name>)`, here
/// and, through `links` metadata, in the crates that depend on this one
/// (`rdma_sys_build::forward_optional`): it gates the port of `ibv_wr_flush`
/// (and its test against the C twin), and the safe API over each of them.
const OPTIONAL: &[&str] = &[
    "ibv_wr_flush",
    "ibv_wr_opcode_str",
    "ibv_alloc_buf",
    "ibv_free_buf",
    "ibv_reg_buf_mr",
    "ibv_export_buf_dmabuf_fd",
    "ibv_alloc_dmah",
    "ibv_dealloc_dmah",
    "ibv_reg_mr_ex",
    "ibv_dm_export_dmabuf_fd",
    "ibv_query_port_speed",
    "ibv_create_comp_cntr",
    "ibv_destroy_comp_cntr",
    "ibv_query_comp_cntr_caps",
    "ibv_qp_attach_comp_cntr",
    "ibv_read_comp_cntr",
    "ibv_read_err_comp_cntr",
    "ibv_set_comp_cntr",
    "ibv_set_err_comp_cntr",
    "ibv_inc_comp_cntr",
    "ibv_inc_err_comp_cntr",
];

/// Exported legacy symbols that verbs.h hides behind a macro of the same name.
const LEGACY: &str = "ibv_(reg_mr|reg_mr_iova|query_port)";

/// The files the crate includes from `$OUT_DIR`, shipped in `src/generated/`
/// for documentation-only builds.
const GENERATED: &[&str] = &["bindings.rs", "aliases.rs", "shim.rs", "shim_names.rs"];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    if docs_only() {
        copy_shipped(GENERATED);
    } else {
        generate();
    }
    let mut names = function_names(&out.join("shim.rs"));
    names.extend(function_names(&out.join("bindings.rs")));
    emit_optional(&names, OPTIONAL);
    write_functions(&out);
}

/// Writes `functions.rs`: every C function the crate binds, under its C name
/// (the macros of verbs.h under the macro's name), for the test that holds
/// the safe crate's coverage table complete. Derived from the bindings in
/// use, generated or shipped, so it is never shipped itself.
fn write_functions(out: &Path) {
    let mut names: Vec<String> = c_function_names(&out.join("bindings.rs"))
        .into_iter()
        .map(|n| match n.strip_prefix("rdma_sys_macro_") {
            Some(macro_name) => macro_name.to_string(),
            None => n,
        })
        .chain(c_function_names(&out.join("shim.rs")))
        .collect();
    names.sort();
    names.dedup();
    write_name_list(
        "functions.rs",
        "FUNCTIONS",
        "Names of every function of this system's verbs.h the crate binds (exported, \
         static inline and the macros `ibv_reg_mr`, `ibv_reg_mr_iova`, `ibv_query_port`).",
        &names,
    );
}

fn generate() {
    let lib = probe("libibverbs", "ibverbs", "IBVERBS");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let header = manifest.join("wrapper.h");
    if lib.release.is_none() {
        check_headers(&lib.include_paths);
    }
    let mut shims = Shims::new();

    let twins = builder(&header, &lib.include_paths)
        .allowlist_function(DATA_PATH)
        .blocklist_function(NOT_DATA_PATH)
        .allowlist_recursively(false)
        .layout_tests(false);
    let twins = shims
        .wrap(twins, "ibverbs_data_path_shim")
        .generate()
        .expect("bindgen failed on the data-path static inlines");
    let twins = write(twins, "shim.rs");
    let data_path = function_names(&twins);
    write_name_list(
        "shim_names.rs",
        "SHIM_FUNCTIONS",
        "Names of the data-path static inline functions of this system's verbs.h.",
        &data_path,
    );

    let mut main = builder(&header, &lib.include_paths)
        .allowlist_file(r".*/infiniband/(verbs|verbs_api|ib_user_ioctl_verbs)\.h")
        .allowlist_file(r".*/rdma/ib_user_(verbs|ioctl_verbs)\.h")
        .allowlist_function("rdma_sys_macro_.*")
        .blocklist_function(LEGACY);
    // Exactly the data path found above, so that NOT_DATA_PATH stays here.
    for name in &data_path {
        main = main.blocklist_function(name);
    }
    let main = shims
        .wrap(main, "ibverbs_shim")
        .generate()
        .expect("bindgen failed on <infiniband/verbs.h>");
    let bindings = write(main, "bindings.rs");
    write_aliases(&lib.include_paths, &bindings);

    shims.compile("ibverbs_sys_shim", &lib.include_paths, &manifest);

    let include = lib.include_paths.first().cloned().unwrap_or_default();
    println!("cargo:include={}", include.display());
    if let Some(v) = lib.version {
        println!("cargo:version={v}");
    }
}

/// For an install whose version is not known (an include-dir override
/// without a .pc file): fails the build when verbs.h lacks the newest API this
/// crate needs, which every rdma-core since the oldest supported one has.
fn check_headers(include_paths: &[PathBuf]) {
    let Some(verbs) = include_paths
        .iter()
        .map(|p| p.join("infiniband/verbs.h"))
        .find(|p| p.is_file())
    else {
        return; // bindgen reports the missing header.
    };
    let text = std::fs::read_to_string(&verbs).unwrap_or_default();
    // Ported unconditionally (data_path.rs); rdma-core v44 declares it.
    let needed = "ibv_wr_atomic_write";
    if !text.contains(needed) {
        fail(&format!(
            "{} does not declare {needed}: these headers are older than rdma-core {} \
             (the oldest release the rdma -sys crates support). Point RDMA_CORE_INCLUDE_DIR / \
             RDMA_CORE_LIB_DIR at a newer rdma-core.",
            verbs.display(),
            rdma_sys_build::MIN_RDMA_CORE
        ));
    }
}

/// verbs_api.h names kernel-ABI items under verbs names with object-like
/// macros (`#define IBV_ACCESS_OPTIONAL_RANGE IB_UVERBS_ACCESS_OPTIONAL_RANGE`),
/// which bindgen cannot follow. Re-export each under its verbs name.
fn write_aliases(include_paths: &[PathBuf], bindings: &Path) {
    let generated = std::fs::read_to_string(bindings).expect("bindings were just written");
    let defined = |name: &str| {
        ["pub const ", "pub struct ", "pub union ", "pub type "]
            .iter()
            .any(|kw| {
                generated.contains(&format!("{kw}{name}:"))
                    || generated.contains(&format!("{kw}{name} "))
            })
    };
    let mut out = String::from("// Aliases of verbs_api.h, generated by build.rs.\n");
    let header = include_paths
        .iter()
        .map(|p| p.join("infiniband/verbs_api.h"))
        .chain([PathBuf::from("/usr/include/infiniband/verbs_api.h")])
        .find(|p| p.exists());
    if let Some(header) = header {
        println!("cargo:rerun-if-changed={}", header.display());
        let text = std::fs::read_to_string(&header).expect("readable verbs_api.h");
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some("#define"), Some(name), Some(value), None) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                continue;
            };
            let verbs_name = name.starts_with("IBV_") || name.starts_with("ibv_");
            let abi_value = value.starts_with("IB_UVERBS_") || value.starts_with("ib_uverbs_");
            if verbs_name && abi_value && defined(value) && !defined(name) {
                out.push_str(&format!("pub use crate::bindings::{value} as {name};\n"));
            }
        }
    }
    let path = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("aliases.rs");
    std::fs::write(&path, out).expect("writing aliases.rs");
}
