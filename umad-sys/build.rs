//! Generates the libibumad bindings from the system's rdma-core headers.

use std::path::PathBuf;

use rdma_sys_build::{builder, copy_shipped, docs_only, probe, write, Shims};

fn main() {
    if docs_only() {
        copy_shipped(&["bindings.rs"]);
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
}
