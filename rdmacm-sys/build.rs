//! Generates the librdmacm bindings from the system's rdma-core headers.
//!
//! Types of libibverbs (everything from verbs.h and the headers it includes)
//! are not generated here: they are used from `ibverbs-sys`, so an
//! `ibv_qp` of a CM id is the same Rust type as an `ibverbs_sys::ibv_qp`.
//! Socket addresses are `libc`'s. The static inlines of rdma_verbs.h and
//! rdma_cma.h are callable through a C shim.

use std::path::PathBuf;

use rdma_sys_build::{
    builder, c_function_names, copy_shipped, docs_only, emit_optional, probe, write,
    write_name_list, Shims,
};

/// Functions that only some rdma-core releases have (none in v44's headers;
/// these from v65 on). For each one the headers declare, the build emits
/// `cfg(has_<name>)`, here and, through `links` metadata, in the crates that
/// depend on this one (`rdma_sys_build::forward_optional`).
const OPTIONAL: &[&str] = &[
    "rdma_query_addrinfo",
    "rdma_resolve_addrinfo",
    "rdma_write_cm_event",
];

fn main() {
    if docs_only() {
        copy_shipped(&["bindings.rs"]);
        write_functions();
        return;
    }
    let mut lib = probe("librdmacm", "rdmacm", "RDMACM");
    if let Some(inc) = std::env::var_os("DEP_IBVERBS_INCLUDE") {
        lib.include_paths.push(PathBuf::from(inc));
    }
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let header = manifest.join("wrapper.h");
    let mut shims = Shims::new();

    let b = builder(&header, &lib.include_paths)
        .allowlist_file(r".*/rdma/rdma_(cma|verbs)\.h")
        .allowlist_file(r".*/infiniband/sa\.h")
        .allowlist_file(r".*/rdma/ib\.h")
        // libibverbs' own types come from ibverbs-sys.
        .blocklist_file(r".*/infiniband/(verbs|verbs_api|ib_user_ioctl_verbs)\.h")
        .blocklist_file(r".*/rdma/ib_user_(verbs|ioctl_verbs)\.h")
        .blocklist_file(r".*/linux/types\.h")
        .blocklist_file(r".*/asm-generic/.*")
        .blocklist_file(r".*/linux/posix_types\.h")
        .blocklist_type("pthread_.*|__pthread_.*|__atomic_wide_counter.*")
        // Socket types come from libc.
        .blocklist_type(
            "sockaddr.*|in_addr|in6_addr|in_addr_t|in_port_t|sa_family_t|socklen_t|addrinfo",
        )
        .blocklist_type("__(u|s)(8|16|32|64)|__be(16|32|64)|__le(16|32|64)|__kernel_.*");
    let b = shims
        .wrap(b, "rdmacm_shim")
        .generate()
        .expect("bindgen failed on <rdma/rdma_cma.h> and <rdma/rdma_verbs.h>");
    write(b, "bindings.rs");
    shims.compile("rdmacm_sys_shim", &lib.include_paths, &manifest);

    let include = lib.include_paths.first().cloned().unwrap_or_default();
    println!("cargo:include={}", include.display());
    write_functions();
}

/// Writes `functions.rs`: every C function of rdma_cma.h and rdma_verbs.h the crate binds
/// (exported and static inline), for the test that holds the safe crate's
/// coverage table complete. Derived from the bindings in use, generated or
/// shipped, so it is never shipped itself.
fn write_functions() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let names = c_function_names(&out.join("bindings.rs"));
    write_name_list(
        "functions.rs",
        "FUNCTIONS",
        "Names of every function of this system's rdma_cma.h and rdma_verbs.h the crate binds.",
        &names,
    );
    emit_optional(&names, OPTIONAL);
}
