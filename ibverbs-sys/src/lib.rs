//! Raw bindings to libibverbs, the verbs library of rdma-core.
//!
//! Generated at build time by bindgen from the system's
//! `<infiniband/verbs.h>`, so the layout always matches the rdma-core the
//! program links against (Debian 12's v44 and newer).
//!
//! # Static inline functions
//! Much of verbs.h is `static inline`. Every one of them is callable:
//! - outside the data path (`ibv_create_cq_ex`, `ibv_query_device_ex`,
//!   `ibv_alloc_mw`, `ibv_open_xrcd`, ...) through a C shim compiled from the
//!   same headers, with exactly the C semantics;
//! - the names verbs.h redirects with a macro are bound to the macro, not to
//!   the legacy symbol: [`ibv_reg_mr`] (optional access flags, i.e.
//!   `ibv_reg_mr_iova2`), [`ibv_reg_mr_iova`], [`ibv_query_port`] (the full
//!   `ibv_port_attr`);
//! - the data path ([`ibv_post_send`], [`ibv_post_recv`],
//!   [`ibv_post_srq_recv`], [`ibv_poll_cq`], [`ibv_req_notify_cq`],
//!   [`ibv_start_poll`], [`ibv_next_poll`], [`ibv_end_poll`], every
//!   `ibv_wc_read_*` and `ibv_wr_*`) is ported to `#[inline]` Rust that calls
//!   the provider's function pointer directly, as the C header does; the C
//!   shim of each is kept in [`shim`] under the same name. Data-path inlines
//!   that only newer headers have are ported where the headers have them:
//!   `ibv_wr_flush` (not in rdma-core v44; in v56 and v65) exists exactly when
//!   the build script found it, which it tells this crate's code with
//!   `cfg(has_ibv_wr_flush)`.
//!
//! # Linking
//! libibverbs is found with pkg-config and linked dynamically (providers are
//! plugins it loads at run time). Set `IBVERBS_INCLUDE_DIR` and
//! `IBVERBS_LIB_DIR` (or `RDMA_CORE_INCLUDE_DIR` / `RDMA_CORE_LIB_DIR`) to use
//! a custom rdma-core install. The oldest rdma-core supported is v44 (Debian
//! 12's, the oldest built and tested); the build fails with a message naming
//! the version it found when it is older.
//!
//! # Documentation builds
//! With `DOCS_RS` set (docs.rs, which has no rdma-core), the build uses the
//! bindings shipped in `src/generated/` (generated from rdma-core v44's
//! headers by `ci/bindings.sh regen`, checked against fresh bindgen output by
//! `ci/bindings.sh check`) and compiles and links no C. Such a build is for
//! documentation only.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]
#![allow(clippy::all)]
#![allow(
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls
)]

mod bindings {
    #![allow(missing_docs, rustdoc::all)]
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}
pub use bindings::*;

/// The names of every function of `<infiniband/verbs.h>` that this build binds, as C
/// names them, sorted: what the headers it was built against declare.
///
/// The `rdma` repository's coverage test reads it, so that a function a
/// newer rdma-core adds cannot go unnoticed by the safe crate.
pub mod functions {
    include!(concat!(env!("OUT_DIR"), "/functions.rs"));
}

// verbs_api.h's names for kernel-ABI items (`IBV_ACCESS_OPTIONAL_RANGE`).
include!(concat!(env!("OUT_DIR"), "/aliases.rs"));

// The macros of verbs.h, under their public names (see wrapper.h).
pub use bindings::{
    rdma_sys_macro_ibv_query_port as ibv_query_port, rdma_sys_macro_ibv_reg_mr as ibv_reg_mr,
    rdma_sys_macro_ibv_reg_mr_iova as ibv_reg_mr_iova,
};

/// The C shims of the data-path static inline functions, named as in C.
///
/// Each calls the `static inline` of verbs.h through an exported C wrapper, so
/// it costs one more call than the port at the crate root. They exist as the
/// reference the ports are tested against, and to reach data-path functions
/// of a newer rdma-core that have no port yet.
pub mod shim {
    #![allow(missing_docs, rustdoc::all)]
    use super::*;
    include!(concat!(env!("OUT_DIR"), "/shim.rs"));
    include!(concat!(env!("OUT_DIR"), "/shim_names.rs"));
}

mod data_path;
pub use data_path::*;
