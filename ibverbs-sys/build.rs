//! Generates the libibverbs bindings from the system's rdma-core headers.
//!
//! Two bindgen runs over the same `wrapper.h`:
//! - `bindings.rs`: every type, constant and exported function, plus every
//!   static inline function outside the data path, through a C shim;
//! - `shim.rs`: the data-path static inlines (post, poll, `ibv_wr_*`,
//!   `ibv_wc_read_*`) through the same kind of shim. The crate root exports a
//!   Rust port of each of these; the shim twins live in `ibverbs_sys::shim`.

use std::path::PathBuf;

use rdma_sys_build::{builder, function_names, probe, write, write_name_list, Shims};

/// Static inline functions of the data path: ported to `#[inline]` Rust at the
/// crate root, their C shims kept in `shim`.
const DATA_PATH: &str =
    "ibv_(post_send|post_recv|post_srq_recv|post_wq_recv|poll_cq|req_notify_cq|\
                         start_poll|next_poll|end_poll|cq_ex_to_cq|wc_read_.*|wr_.*)";

/// Exported legacy symbols that verbs.h hides behind a macro of the same name.
const LEGACY: &str = "ibv_(reg_mr|reg_mr_iova|query_port)";

fn main() {
    let lib = probe("libibverbs", "ibverbs", "IBVERBS");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let header = manifest.join("wrapper.h");
    let mut shims = Shims::new();

    let main = builder(&header, &lib.include_paths)
        .allowlist_file(r".*/infiniband/(verbs|verbs_api|ib_user_ioctl_verbs)\.h")
        .allowlist_file(r".*/rdma/ib_user_(verbs|ioctl_verbs)\.h")
        .allowlist_function("rdma_sys_macro_.*")
        .blocklist_function(DATA_PATH)
        .blocklist_function(LEGACY);
    let main = shims
        .wrap(main, "ibverbs_shim")
        .generate()
        .expect("bindgen failed on <infiniband/verbs.h>");
    write(main, "bindings.rs");

    let twins = builder(&header, &lib.include_paths)
        .allowlist_function(DATA_PATH)
        .allowlist_recursively(false)
        .layout_tests(false);
    let twins = shims
        .wrap(twins, "ibverbs_data_path_shim")
        .generate()
        .expect("bindgen failed on the data-path static inlines");
    let twins = write(twins, "shim.rs");
    write_name_list(
        "shim_names.rs",
        "SHIM_FUNCTIONS",
        "Names of the data-path static inline functions of this system's verbs.h.",
        &function_names(&twins),
    );

    shims.compile("ibverbs_sys_shim", &lib.include_paths, &manifest);

    let include = lib.include_paths.first().cloned().unwrap_or_default();
    println!("cargo:include={}", include.display());
    if let Some(v) = lib.version {
        println!("cargo:version={v}");
    }
}
