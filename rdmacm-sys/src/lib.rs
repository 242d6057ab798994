//! Raw bindings to librdmacm, the RDMA connection manager of rdma-core.
//!
//! Generated at build time by bindgen from the system's `<rdma/rdma_cma.h>`
//! and `<rdma/rdma_verbs.h>`. The verbs types these headers use
//! (`ibv_qp`, `ibv_pd`, `ibv_wc`, ...) are those of [`ibverbs_sys`], re-exported
//! here, never a second definition; socket addresses are [`libc`]'s.
//!
//! The `static inline` helpers of rdma_verbs.h (`rdma_post_send`,
//! `rdma_reg_msgs`, `rdma_get_send_comp`, ...) and rdma_cma.h
//! (`rdma_get_local_addr`, `rdma_get_peer_addr`) are callable through a C shim
//! compiled from the same headers, with exactly the C semantics.
//!
//! librdmacm is found with pkg-config and linked dynamically; set
//! `RDMACM_INCLUDE_DIR` / `RDMACM_LIB_DIR` (or `RDMA_CORE_INCLUDE_DIR` /
//! `RDMA_CORE_LIB_DIR`) for a custom install.
//! rdma-core v44 or newer is needed.
//!
//! With `DOCS_RS` set (docs.rs, which has no rdma-core), the build uses the
//! bindings shipped in `src/generated/` (from rdma-core v44's headers; see
//! `ci/bindings.sh`) and compiles and links no C: a build for documentation
//! only.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]
#![allow(clippy::all)]
#![allow(
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls
)]

// Both binding sets carry bindgen's private helper types
// (`__BindgenUnionField`, ...); those names are ambiguous and unused outside.
#[allow(ambiguous_glob_reexports)]
pub use ibverbs_sys::*;
pub use libc::{
    addrinfo, in6_addr, in_addr, in_addr_t, in_port_t, sa_family_t, sockaddr, sockaddr_in,
    sockaddr_in6, sockaddr_storage, socklen_t,
};
pub use libc::{pthread_cond_t, pthread_mutex_t};

mod bindings {
    #![allow(missing_docs, rustdoc::all)]
    use super::*;
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}
pub use bindings::*;

/// The names of every function of `<rdma/rdma_cma.h>` and `<rdma/rdma_verbs.h>` that this build binds, as C
/// names them, sorted: what the headers it was built against declare.
///
/// The `rdma` repository's coverage test reads it, so that a function a
/// newer rdma-core adds cannot go unnoticed by the safe crate.
pub mod functions {
    include!(concat!(env!("OUT_DIR"), "/functions.rs"));
}
