//! Generates the libibumad bindings from the system's rdma-core headers.

use std::path::PathBuf;

use rdma_sys_build::{
    builder, c_function_names, copy_shipped, docs_only, emit_optional, probe, write,
    write_name_list, Shims,
};

/// Functions that only some rdma-core releases have (none in v44's headers;
/// these from v56 on). For each one the headers declare, the build emits
/// `cfg(has_<name>)`, here and, through `links` metadata, in the crates that
/// depend on this one (`rdma_sys_build::forward_optional`).
const OPTIONAL: &[&str] = &[
    "umad_get_smi_gsi_pairs",
    "umad_get_smi_gsi_pair_by_ca_name",
    "umad_open_smi_port",
];

fn main() {
    if docs_only() {
        copy_shipped(&["bindings.rs"]);
        write_functions();
        return;
    }
    let lib = probe("libibumad", "ibumad", "IBUMAD");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let header = manifest.join("wrapper.h");
    let mut shims = Shims::new();
    let b = builder(&header, &lib.include_paths).allowlist_file(r".*/infiniband/umad(_types)?\.h");
    let b = shims
        .wrap(b, "umad_shim")
        .generate()
        .expect("bindgen failed on <infiniband/umad.h>");
    write(b, "bindings.rs");
    shims.compile("umad_sys_shim", &lib.include_paths, &manifest);
    let include = lib.include_paths.first().cloned().unwrap_or_default();
    println!("cargo:include={}", include.display());
    write_functions();
}

/// Writes `functions.rs`: every C function of umad.h and umad_types.h the crate binds
/// (exported and static inline), for the test that holds the safe crate's
/// coverage table complete. Derived from the bindings in use, generated or
/// shipped, so it is never shipped itself.
fn write_functions() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let names = c_function_names(&out.join("bindings.rs"));
    write_name_list(
        "functions.rs",
        "FUNCTIONS",
        "Names of every function of this system's umad.h and umad_types.h the crate binds.",
        &names,
    );
    emit_optional(&names, OPTIONAL);
}
