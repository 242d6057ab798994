//! Gives this crate the `cfg(has_<function>)` of every function that only
//! newer rdma-core releases have and the -sys crates found in the headers of
//! this build (`rdma_sys_build::emit_optional`): the safe API over such a
//! function is built exactly where the headers declare it.

fn main() {
    rdma_sys_build::forward_optional(&["IBVERBS", "RDMACM", "IBUMAD"]);
}
