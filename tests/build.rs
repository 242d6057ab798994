//! Binds libibmad's field accessors (`infiniband/mad.h`, package
//! libibmad-dev) for the tests that check the MAD codec's layouts against
//! libibmad's field tables, the C reference.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    rdma_sys_build::forward_optional(&["IBVERBS", "RDMACM", "IBUMAD"]);
    verbs_layout();
    let header = ["/usr/include/infiniband/mad.h"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    let Some(header) = header else {
        println!(
            "cargo:warning=infiniband/mad.h not found (install libibmad-dev): \
             the libibmad layout tests are left out"
        );
        return;
    };
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rustc-cfg=has_libibmad");
    println!("cargo:rustc-link-lib=ibmad");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    bindgen::Builder::default()
        .header(header.display().to_string())
        .allowlist_type("MAD_FIELDS")
        .allowlist_function("mad_(get|set)_(field|field64|array)|mad_field_name")
        .constified_enum_module("MAD_FIELDS")
        .layout_tests(false)
        .generate()
        .expect("bindgen on infiniband/mad.h")
        .write_to_file(out.join("libibmad.rs"))
        .expect("writing libibmad.rs");
}

/// Compiles `c/verbs_layout.c`, the C compiler's table of the verbs
/// structs the safe wrappers fill (`tests/verbs_layout.rs` compares it
/// with the Rust side), against the headers ibverbs-sys was built with.
fn verbs_layout() {
    println!("cargo:rerun-if-changed=c/verbs_layout.c");
    let mut build = cc::Build::new();
    build.file("c/verbs_layout.c").warnings(true);
    if let Some(dir) = std::env::var_os("DEP_IBVERBS_INCLUDE") {
        if !dir.is_empty() {
            build.include(dir);
        }
    }
    build.compile("verbs_layout");
}
