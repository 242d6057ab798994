//! Raw bindings to libibumad, rdma-core's library for userspace management
//! datagrams (MADs).
//!
//! Generated at build time by bindgen from the system's
//! `<infiniband/umad.h>` and `<infiniband/umad_types.h>`.
//!
//! A MAD buffer for `umad_send`/`umad_recv` is an [`ib_user_mad`] header (64
//! bytes: five 32-bit words and the 44-byte [`ib_mad_addr`]) followed by the
//! MAD itself; [`umad_get_mad`] returns a pointer to that payload. (Before a
//! port has been opened, libibumad assumes the old ABI without P_Key support,
//! and the payload starts 8 bytes earlier.)
//!
//! libibumad is found with pkg-config and linked dynamically; set
//! `IBUMAD_INCLUDE_DIR` / `IBUMAD_LIB_DIR` (or `RDMA_CORE_INCLUDE_DIR` /
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

mod bindings {
    #![allow(missing_docs, rustdoc::all)]
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}
pub use bindings::*;

/// The names of every function of `<infiniband/umad.h>` and `<infiniband/umad_types.h>` that this build binds, as C
/// names them, sorted: what the headers it was built against declare.
///
/// The `rdma` repository's coverage test reads it, so that a function a
/// newer rdma-core adds cannot go unnoticed by the safe crate.
pub mod functions {
    include!(concat!(env!("OUT_DIR"), "/functions.rs"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn ib_user_mad_header_is_64_bytes_with_a_44_byte_address() {
        assert_eq!(size_of::<ib_mad_addr>(), 44);
        assert_eq!(size_of::<ib_user_mad>(), 64);
        assert_eq!(offset_of!(ib_user_mad, agent_id), 0);
        assert_eq!(offset_of!(ib_user_mad, status), 4);
        assert_eq!(offset_of!(ib_user_mad, timeout_ms), 8);
        assert_eq!(offset_of!(ib_user_mad, retries), 12);
        assert_eq!(offset_of!(ib_user_mad, length), 16);
        assert_eq!(offset_of!(ib_user_mad, addr), 20);
        assert_eq!(offset_of!(ib_user_mad, data), 64);
    }

    #[test]
    fn ib_mad_addr_fields_sit_where_the_kernel_abi_puts_them() {
        assert_eq!(offset_of!(ib_mad_addr, qpn), 0);
        assert_eq!(offset_of!(ib_mad_addr, qkey), 4);
        assert_eq!(offset_of!(ib_mad_addr, lid), 8);
        assert_eq!(offset_of!(ib_mad_addr, sl), 10);
        assert_eq!(offset_of!(ib_mad_addr, path_bits), 11);
        assert_eq!(offset_of!(ib_mad_addr, grh_present), 12);
        assert_eq!(offset_of!(ib_mad_addr, gid_index), 13);
        assert_eq!(offset_of!(ib_mad_addr, hop_limit), 14);
        assert_eq!(offset_of!(ib_mad_addr, traffic_class), 15);
        assert_eq!(offset_of!(ib_mad_addr, __bindgen_anon_1), 16);
        assert_eq!(offset_of!(ib_mad_addr, flow_label), 32);
        assert_eq!(offset_of!(ib_mad_addr, pkey_index), 36);
        assert_eq!(offset_of!(ib_mad_addr, reserved), 38);
    }

    #[test]
    fn umad_get_mad_skips_exactly_umad_size_bytes() {
        let mut buf = [0u64; 64];
        let p = buf.as_mut_ptr().cast::<core::ffi::c_void>();
        // SAFETY: umad_get_mad only computes an address inside the 512-byte
        // buffer (`p` plus the header size); umad_size reads no memory.
        let (mad, size) = unsafe { (umad_get_mad(p), umad_size()) };
        assert_eq!(mad as usize - p as usize, size);
        // 64 with the P_Key-aware ABI, 56 before a port has enabled it.
        assert!(size == 64 || size == 56, "unexpected header size {size}");
    }
}
