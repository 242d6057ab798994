//! rdmacm-sys uses the verbs types of ibverbs-sys, and its C shim works.

use std::ffi::{c_int, c_void};

use rdmacm_sys::rdma_cm_id;

/// Compiles only if the CM id's verbs fields are ibverbs-sys types: a
/// second definition of `ibv_qp` (or any of these) would be a distinct type.
#[test]
fn cm_id_fields_are_ibverbs_sys_types() {
    type Fields = (
        *mut ibverbs_sys::ibv_context,
        *mut ibverbs_sys::ibv_qp,
        *mut ibverbs_sys::ibv_pd,
        *mut ibverbs_sys::ibv_cq,
        *mut ibverbs_sys::ibv_comp_channel,
        *mut ibverbs_sys::ibv_srq,
    );
    fn fields(id: &rdma_cm_id) -> Fields {
        (
            id.verbs,
            id.qp,
            id.pd,
            id.recv_cq,
            id.recv_cq_channel,
            id.srq,
        )
    }
    type PostSend = unsafe extern "C" fn(
        *mut rdma_cm_id,
        *mut c_void,
        *mut c_void,
        usize,
        *mut ibverbs_sys::ibv_mr,
        c_int,
    ) -> c_int;
    let _: PostSend = rdmacm_sys::rdma_post_send;
    type GetSendComp = unsafe extern "C" fn(*mut rdma_cm_id, *mut ibverbs_sys::ibv_wc) -> c_int;
    let _: GetSendComp = rdmacm_sys::rdma_get_send_comp;
    // SAFETY: all-zero bytes are a valid rdma_cm_id (integers and pointers).
    let id: rdma_cm_id = unsafe { std::mem::zeroed() };
    let f = fields(&id);
    assert!(f.0.is_null() && f.1.is_null() && f.2.is_null());
}

#[test]
fn rdma_get_local_and_peer_addr_point_into_the_route() {
    // SAFETY: all-zero bytes are a valid rdma_cm_id.
    let mut id: rdma_cm_id = unsafe { std::mem::zeroed() };
    let p: *mut rdma_cm_id = &mut id;
    // SAFETY: the static inlines only take addresses of fields of `*p`.
    let (local, peer) = unsafe {
        (
            rdmacm_sys::rdma_get_local_addr(p),
            rdmacm_sys::rdma_get_peer_addr(p),
        )
    };
    // SAFETY: computing field addresses of a live value.
    let (src, dst) = unsafe {
        (
            std::ptr::addr_of_mut!((*p).route.addr.__bindgen_anon_1) as usize,
            std::ptr::addr_of_mut!((*p).route.addr.__bindgen_anon_2) as usize,
        )
    };
    assert_eq!(local as usize, src);
    assert_eq!(peer as usize, dst);
    assert_ne!(local as usize, peer as usize);
}

#[test]
fn rdma_seterrno_sets_errno_and_returns_minus_one() {
    // SAFETY: rdma_seterrno only writes the thread's errno.
    assert_eq!(unsafe { rdmacm_sys::rdma_seterrno(0) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { rdmacm_sys::rdma_seterrno(libc::ETIMEDOUT) }, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ETIMEDOUT)
    );
}
