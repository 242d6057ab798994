//! Passes the rdma-core release that ibverbs-sys was built against to the
//! crate, for provider workarounds that depend on it.

fn main() {
    // ibverbs-sys (links = "ibverbs") exports pkg-config's version of
    // libibverbs, `1.14.<rdma-core release>.0`.
    let version = std::env::var("DEP_IBVERBS_VERSION").unwrap_or_default();
    let release = version
        .split('.')
        .nth(2)
        .and_then(|r| r.parse::<u32>().ok())
        .unwrap_or(0);
    println!("cargo:rustc-env=RDMA_CORE_RELEASE={release}");
    println!("cargo:rerun-if-env-changed=DEP_IBVERBS_VERSION");
}
